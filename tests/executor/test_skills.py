"""The ``skill`` tool (F-TOOL-6) end to end: a scripted faux model lists, loads and unloads
workspace skills through the session actor, the Core tool, the pool and a real executor child
process; ``/skill:<name> args`` inputs; symlinks never followed; the SKILL.md size cap."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from events import types as t
from events.store import EventStore
from projections.session_state import working_context
from projections.snapshots import SnapshotStore
from runtime.actor import Abort, Answer, Configure, Delete, GetState, Submit, WaitIdle, Withdraw
from runtime.errors import LensError
from runtime.providers.faux import FauxProvider, FauxToolCall, FauxTurn
from runtime.supervisor import Supervisor
from runtime.prompt import SkillMeta, build_system_prompts
from tests.idgen import IdGen
from tools.skills import MAX_SKILL_BYTES, MAX_SKILLS, discover, prompt_skills, skill_tool, workspace_reader

from .conftest import agent_runtime, run_to_idle as run, running_pool, wait_path

REVIEW = "---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS: read the diff, then the tests.\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def harness(tmp_path: Path, ws: Path, script: list[FauxTurn], **kw: Any
            ) -> AbstractAsyncContextManager[tuple[Supervisor, EventStore, FauxProvider, Any]]:
    """The agent runtime with the skill tool beside the workspace tools."""
    return agent_runtime(tmp_path, ws, script, more_tools=lambda pool: [skill_tool(pool)], **kw)


async def events_of(store: EventStore, sid: str) -> list[Any]:
    return await store.read_events(after=0, limit=10_000, session_id=sid)


def skill_texts(items: list[Any]) -> list[str]:
    return [it.text for it in items if it.role == "system" and it.source.startswith("skill:")]


def results_of(events: list[Any], name: str = "skill") -> list[t.ToolFinished]:
    return [e.event for e in events if e.kind == "tool.finished" and e.event.name == name]


# --------------------------------------------------------------------------- discovery


async def test_discovery_roots_problems_symlinks_and_the_size_cap(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    write(ws / "skills" / "review" / "scripts" / "check.sh", "echo\n")
    write(ws / ".agents" / "skills" / "lint" / "SKILL.md", "Run the linter.\n")
    write(ws / ".codex" / "skills" / "other-review" / "SKILL.md", "---\nname: review\n---\nshadowed\n")
    write(ws / "skills" / "broken" / "SKILL.md", "---\nname: broken\n")
    write(ws / "skills" / "not-a-skill" / "README.md", "no SKILL.md here\n")
    write(ws / "skills" / "at-cap" / "SKILL.md", "x" * (MAX_SKILL_BYTES - 1) + "\n")
    write(ws / "skills" / "past-cap" / "SKILL.md", "x" * MAX_SKILL_BYTES + "\n")
    write(ws / "skills" / "unreadable" / "SKILL.md", "secret\n")
    (ws / "skills" / "unreadable" / "SKILL.md").chmod(0)
    # Symlinks: a skill directory, a SKILL.md, and a whole root; none is followed.
    write(ws / "elsewhere" / "hidden" / "SKILL.md", "---\nname: hidden\n---\nHIDDEN\n")
    os.symlink("../elsewhere/hidden", ws / "skills" / "linked-dir")
    (ws / "skills" / "linked-file").mkdir()
    os.symlink("../../elsewhere/hidden/SKILL.md", ws / "skills" / "linked-file" / "SKILL.md")
    (ws / ".codex" / "skills").rename(ws / "codex-real")
    os.symlink("../codex-real", ws / ".codex" / "skills")
    async with running_pool(tmp_path / "executors", {"proj": ws}) as pool:
        skills = (await discover(workspace_reader(pool, "proj", "test"))).skills
    by_dir = {s.base_dir: s for s in skills}
    readable = os.access(ws / "skills" / "unreadable" / "SKILL.md", os.R_OK)  # (root reads anything)
    assert list(by_dir) == ["skills/at-cap", "skills/broken", "skills/linked-file", "skills/past-cap",
                            "skills/review", "skills/unreadable", ".agents/skills/lint"]
    if not readable:
        assert "PERMISSION_DENIED" in (by_dir["skills/unreadable"].problem or "")
    assert by_dir["skills/review"].problem is None and by_dir["skills/review"].description == "Review a change"
    assert by_dir[".agents/skills/lint"].name == "lint" and by_dir[".agents/skills/lint"].problem is None
    assert by_dir["skills/at-cap"].problem is None  # exactly MAX_SKILL_BYTES: loadable
    assert f"is {MAX_SKILL_BYTES + 1} bytes" in (by_dir["skills/past-cap"].problem or "")
    assert "never closed" in (by_dir["skills/broken"].problem or "")
    assert "symbolic link" in (by_dir["skills/linked-file"].problem or "")
    assert not any(s.name == "hidden" or "HIDDEN" in s.body for s in skills)


async def test_a_name_found_again_in_a_later_root_is_shadowed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    write(ws / ".codex" / "skills" / "r2" / "SKILL.md", "---\nname: review\n---\nshadowed\n")
    async with running_pool(tmp_path / "executors", {"proj": ws}) as pool:
        skills = (await discover(workspace_reader(pool, "proj", "test"))).skills
    assert [(s.base_dir, s.problem) for s in skills] == [
        ("skills/review", None),
        (".codex/skills/r2", "the name 'review' is taken by the skill in skills/review/")]


async def test_a_skill_read_whose_executor_dies_under_it_runs_once_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A skill's SKILL.md read whose local child is SIGKILLed as it takes the call (the executor's
    # test hold) is read from the child spawned in its place, not reported as a problem.
    import signal

    from tests.executor_hold import held_at

    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    held = held_at(monkeypatch, tmp_path, "call:read_file")
    killed: list[int] = []

    async def kill_when_held() -> None:
        await wait_path(held, timeout=30)
        killed.append(int(held.read_text()))
        os.kill(killed[0], signal.SIGKILL)

    async with running_pool(tmp_path / "executors", {"proj": ws}) as pool:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_when_held)
                skills = (await discover(workspace_reader(pool, "proj", "test"))).skills
        ex = await pool.get("proj")
        assert ex.process is not None and killed and ex.process.pid != killed[0]
    assert [(s.base_dir, s.problem) for s in skills] == [("skills/review", None)]
    assert "REVIEW-STEPS" in skills[0].body


async def test_skill_directories_past_the_discovery_limit_are_said_not_taken_for_missing(tmp_path: Path) -> None:
    # MAX_SKILLS directories are looked at per discovery: the last of them loads; one past it is
    # not "no skill named …" (nor a loaded one "no longer in the workspace"): the limit is named.
    ws = tmp_path / "ws"
    last = f"s{MAX_SKILLS - 1:03d}"
    write(ws / "skills" / last / "SKILL.md", f"Skill {last}.\n")
    script = [
        FauxTurn(when="LOAD-LAST", tool_calls=[FauxToolCall("skill", {"name": last})]),
        FauxTurn(when="LIST-THEM", tool_calls=[FauxToolCall("skill", {})]),
        FauxTurn(when="LOAD-PAST", tool_calls=[FauxToolCall("skill", {"name": f"s{MAX_SKILLS:03d}"})]),
    ]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LOAD-LAST")
        assert results_of(await events_of(store, sid))[-1].structured_content["status"] == "loaded"
        for i in range(MAX_SKILLS + 1):  # (the loaded one is now the limit's last, then one more past it)
            write(ws / "skills" / f"s{i:03d}" / "SKILL.md", f"Skill s{i:03d}.\n")
        (ws / "skills" / "a-dir-without-skill").mkdir()  # (looked at too: it takes a place)
        await run(sup, sid, "r2", "LIST-THEM")
        listed = results_of(await events_of(store, sid))[-1]
        names = [s["name"] for s in listed.structured_content["skills"]]
        assert len(names) == MAX_SKILLS - 1 and last not in names
        assert listed.structured_content["unread_dirs"] == 2
        text = listed.content[0].text
        assert "no longer in the workspace" not in text
        assert f"- {last} [loaded; not among the {MAX_SKILLS} skill directories looked at]" in text
        assert f"(2 more skill directories were not looked at: at most {MAX_SKILLS} are" in text
        await run(sup, sid, "r3", "LOAD-PAST")
        past = results_of(await events_of(store, sid))[-1]
        assert past.error_code == "SKILL_NOT_FOUND"
        assert f"among the first {MAX_SKILLS} skill directories, which are all that are looked at" in past.content[0].text


# --------------------------------------------------------------------------- the tool in a session


async def test_load_lands_after_the_batch_once_then_unload_and_reload_take_the_current_text(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    for i in range(12):
        write(ws / "skills" / "review" / "refs" / f"r{i:02d}.md", "ref\n")
    script = [
        FauxTurn(when="LIST-THEM", tool_calls=[FauxToolCall("skill", {})]),
        # a batch of three: the skill call is not the last one
        FauxTurn(when="LOAD-IT", tool_calls=[FauxToolCall("get_system_time", {}), FauxToolCall("skill", {"name": "review"}),
                                             FauxToolCall("get_system_time", {})]),
        FauxTurn(when="AGAIN", tool_calls=[FauxToolCall("skill", {"name": "review"})]),
        FauxTurn(when="DROP-IT", tool_calls=[FauxToolCall("skill", {"name": "review", "unload": True})]),
        FauxTurn(when="NO-SUCH", tool_calls=[FauxToolCall("skill", {"name": "nope"})]),
    ]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LIST-THEM")
        [listed] = results_of(await events_of(store, sid))
        assert listed.status == "ok"
        assert listed.structured_content == {"skills": [{"name": "review", "description": "Review a change",
                                                         "base_dir": "skills/review", "loaded": False}]}
        assert "- review [not loaded]: Review a change (skills/review/)" in listed.content[0].text

        state = await run(sup, sid, "r2", "LOAD-IT")
        events = await events_of(store, sid)
        kinds = [(e.kind, getattr(e.event, "name", None)) for e in events]
        round_start = kinds.index(("model.responded", None), kinds.index(("input.placed", None), 10))
        tail = [k for k in kinds[round_start:] if k[0] in ("tool.finished", "skill.loaded", "model.requested")]
        assert tail[:5] == [("tool.finished", "get_system_time"), ("tool.finished", "skill"),
                            ("tool.finished", "get_system_time"), ("skill.loaded", "review"),
                            ("model.requested", None)]
        [loaded] = [e.event for e in events if e.kind == "skill.loaded"]
        assert loaded.base_dir == "skills/review" and loaded.call_id == results_of(events)[-1].call_id
        assert loaded.digest == hashlib.sha256(REVIEW.encode()).hexdigest()
        assert "REVIEW-STEPS" in loaded.instructions and "name: review" not in loaded.instructions
        res = results_of(events)[-1]
        assert res.structured_content["status"] == "loaded"
        assert res.structured_content["resources"] == [f"refs/r{i:02d}.md" for i in range(10)]
        assert res.structured_content["more_resources"] is True
        assert "Resource base dir: skills/review/" in res.content[0].text
        # The next request sees the instructions once, after the round's three results.
        items = faux.requests[-1].items
        assert [it.role for it in items[-5:]] == ["tool_call", "tool_result", "tool_result", "tool_result", "system"]
        assert len(skill_texts(items)) == 1 and "REVIEW-STEPS" in skill_texts(items)[0]

        # A repeat load appends nothing, even with SKILL.md changed meanwhile (the snapshot stays).
        write(ws / "skills" / "review" / "SKILL.md", REVIEW.replace("REVIEW-STEPS", "NEW-STEPS"))
        await run(sup, sid, "r3", "AGAIN")
        events = await events_of(store, sid)
        assert [e.kind for e in events].count("skill.loaded") == 1
        again = results_of(events)[-1]
        assert again.structured_content["status"] == "already_loaded"
        assert "nothing was appended" in again.content[0].text and "changed since" in again.content[0].text
        assert skill_texts(faux.requests[-1].items) == [loaded.instructions]
        await run(sup, sid, "r3b", "LIST-THEM")
        assert "- review [loaded, SKILL.md changed since]" in results_of(await events_of(store, sid))[-1].content[0].text

        # Unload: out of the Working Context (the Full Context keeps it); a load takes the current text.
        state = await run(sup, sid, "r4", "DROP-IT")
        events = await events_of(store, sid)
        assert [e.event.name for e in events if e.kind == "skill.unloaded"] == ["review"]
        assert skill_texts(faux.requests[-1].items) == []
        assert len(skill_texts(state.agents["main"].items)) == 1
        state = await run(sup, sid, "r5", "LOAD-IT")
        events = await events_of(store, sid)
        second = [e.event for e in events if e.kind == "skill.loaded"][-1]
        assert "NEW-STEPS" in second.instructions
        assert skill_texts(working_context(state.agents["main"])) == [second.instructions]
        assert "review" in state.agents["main"].skills and not state.agents["main"].skills_due

        await run(sup, sid, "r6", "NO-SUCH")
        missing = results_of(await events_of(store, sid))[-1]
        assert missing.error_code == "SKILL_NOT_FOUND" and "available: review" in missing.content[0].text
        faux.script.append(FauxTurn(when="TOO-LONG", tool_calls=[FauxToolCall("skill", {"name": "n" * 100_000})]))
        await run(sup, sid, "r7", "TOO-LONG")
        long = results_of(await events_of(store, sid))[-1]
        assert long.error_code == "SKILL_NOT_FOUND" and len(long.content[0].text) < 300


async def test_a_load_cut_off_by_a_restart_mid_round_is_still_appended(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    ask = {"questions": [{"id": "q", "text": "Go on?", "options": [{"id": "y", "label": "Yes"}]}]}
    script = [FauxTurn(when="LOAD-SLOWLY", tool_calls=[FauxToolCall("skill", {"name": "review"}),
                                                       FauxToolCall("ask_user", ask)])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, pool):
        sid = await sup.create_session("proj")
        await sup.call(sid, Submit("r1", [t.TextPart("LOAD-SLOWLY")], "followUp"))
        await sup.call(sid, WaitIdle())  # (returns while the question waits for an answer)
        assert (await sup.call(sid, GetState())).status == "awaiting_answer"
        assert "skill.loaded" not in [e.kind for e in await events_of(store, sid)]
        # Leaving the block ends the actor (its memory with it) while the round's second call waits.
    # A new actor on the same log: the open question is cancelled and its call reported
    # interrupted, then the load is appended (the skill read again).
    async with harness(tmp_path, ws, script) as (sup, store, faux, pool):
        await sup.call(sid, WaitIdle())
        events = await events_of(store, sid)
        kinds = [e.kind for e in events]
        assert kinds.count("skill.loaded") == 1
        sleeping = [e.seq for e in events if e.kind == "tool.finished" and e.event.name == "ask_user"]
        [loaded] = [e for e in events if e.kind == "skill.loaded"]
        assert sleeping and loaded.seq > sleeping[0]
        assert "REVIEW-STEPS" in loaded.event.instructions
        assert len(skill_texts(faux.requests[-1].items)) == 1


# --------------------------------------------------------------------------- /skill:<name> args


async def test_a_skill_command_input_loads_before_the_input_and_the_model_sees_the_args(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    async with harness(tmp_path, ws, []) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        state = await run(sup, sid, "r1", "/skill:review please check\nfoo.py")
        events = await events_of(store, sid)
        [submitted] = [e.event for e in events if e.kind == "input.submitted"]
        assert submitted.content == [t.TextPart("/skill:review please check\nfoo.py")]  # as submitted
        kinds = [e.kind for e in events]
        assert kinds[kinds.index("task.started"):kinds.index("task.started") + 3] == [
            "task.started", "skill.loaded", "input.placed"]
        items = faux.requests[0].items
        assert [it.role for it in items] == ["system", "user"]
        assert "REVIEW-STEPS" in items[0].text and items[1].text == "please check\nfoo.py"
        # Loaded already: a second command appends nothing; the bare command gets a default text.
        await run(sup, sid, "r2", "/skill:review")
        events = await events_of(store, sid)
        assert [e.kind for e in events].count("skill.loaded") == 1
        assert faux.requests[-1].items[-1].text == 'Use the skill "review".'
        assert len(skill_texts(faux.requests[-1].items)) == 1
        # A repeated request id is answered as it was, without looking at the skill again.
        (ws / "skills" / "review" / "SKILL.md").unlink()
        again = await sup.call(sid, Submit("r1", [t.TextPart("/skill:review please check\nfoo.py")], "followUp"))
        assert again["duplicate"] is True
        with pytest.raises(LensError) as info:
            await sup.call(sid, Submit("r3", [t.TextPart("/skill:lint go")], "followUp"))
        assert info.value.code == "SKILL_NOT_FOUND"
        with pytest.raises(LensError) as info:
            await sup.call(sid, Submit("r4", [t.TextPart("/skill:\nhello")], "followUp"))
        assert info.value.code == "INVALID_ARGUMENT"
        assert state.agents["main"].skills["review"].digest == hashlib.sha256(REVIEW.encode()).hexdigest()
        assert len([e for e in await events_of(store, sid) if e.kind == "input.submitted"]) == 2
        # A loaded skill is not read again: its SKILL.md gone, a new command naming it is taken
        # (its snapshot stands) and loads nothing.
        await run(sup, sid, "r5", "/skill:review go")
        events = await events_of(store, sid)
        assert [e.kind for e in events].count("skill.loaded") == 1
        assert len([e for e in events if e.kind == "input.submitted"]) == 3
        assert faux.requests[-1].items[-1].text == "go" and len(skill_texts(faux.requests[-1].items)) == 1


async def test_queued_skill_commands_load_when_placed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    write(ws / "skills" / "lint" / "SKILL.md", "LINT-STEPS\n")
    ask = {"questions": [{"id": "q", "text": "Go on?", "options": [{"id": "y", "label": "Yes"}]}]}
    script = [FauxTurn(when="HOLD", tool_calls=[FauxToolCall("ask_user", ask)])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await sup.call(sid, Submit("r1", [t.TextPart("HOLD")], "followUp"))
        await sup.call(sid, WaitIdle())  # the question waits
        await sup.call(sid, Submit("r2", [t.TextPart("/skill:review STEERED")], "steer"))
        await sup.call(sid, Submit("r3", [t.TextPart("/skill:lint LATER")], "followUp"))
        assert "skill.loaded" not in [e.kind for e in await events_of(store, sid)]  # queued: nothing yet
        (ws / "skills" / "lint" / "SKILL.md").unlink()  # gone before r3 is placed
        [qid] = list((await sup.call(sid, GetState())).questions)
        await sup.call(sid, Answer(qid, {"kind": "answer", "optionIds": ["y"]}))
        await sup.call(sid, WaitIdle())
        events = await events_of(store, sid)
        seq_of = {(e.kind, getattr(e.event, "input_request_id", None)): e.seq for e in events}
        [loaded] = [e for e in events if e.kind == "skill.loaded"]
        assert loaded.event.name == "review" and loaded.seq == seq_of[("input.placed", "r2")] - 1
        assert seq_of[("tool.finished", None)] < loaded.seq  # after the round's result
        [notice] = [e for e in events if e.kind == "instruction.appended"]
        assert notice.seq == seq_of[("input.placed", "r3")] - 1
        assert notice.event.source == "skill-load-failed:lint" and "SKILL_NOT_FOUND" in notice.event.text
        users = [it.text for it in (await sup.call(sid, GetState())).agents["main"].items if it.role == "user"]
        assert users == ["HOLD", "STEERED", "LATER"]


async def test_a_skill_command_waiting_for_the_workspace_holds_no_other_command(tmp_path: Path) -> None:
    """A ``/skill:`` input reads the workspace under the execution-domain read lock; while a
    command holds the write lock that read waits, and the session's other commands (an abort of
    that very command included) are answered meanwhile. The input is recorded once its read is
    done: after whatever was recorded meanwhile."""
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    busy = {"command": "touch started && sleep 600", "timeout_ms": 900_000}
    script = [FauxTurn(when="BUSY", tool_calls=[FauxToolCall("run_command", busy)])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        a, b, c = [await sup.create_session("proj") for _ in range(3)]
        await sup.call(a, Submit("a1", [t.TextPart("BUSY")], "followUp"))
        await wait_path(ws / "started")  # the command runs: it holds the write lock
        answers: dict[str, Any] = {}

        async def submit(sid: str, key: str, request_id: str, text: str) -> None:
            try:
                answers[key] = await sup.call(sid, Submit(request_id, [t.TextPart(text)], "followUp"))
            except LensError as exc:
                answers[key] = exc.code

        async def idle(sid: str, key: str) -> None:
            await sup.call(sid, WaitIdle())
            answers[key] = await sup.call(sid, GetState())

        async def withdraw(sid: str, key: str, request_id: str) -> None:
            answers[key] = await sup.call(sid, Withdraw(request_id))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit, b, "s1", "s1", "/skill:review go")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(submit, b, "s1 again", "s1", "/skill:review go")  # a repeat while pending
            nursery.start_soon(submit, b, "u1", "u1", "/skill:nope go")
            nursery.start_soon(submit, c, "c1", "c1", "/skill:review go")
            nursery.start_soon(submit, a, "a2", "a2", "/skill:review after")
            await trio.testing.wait_all_tasks_blocked()
            # Session b goes on while its /skill: inputs wait for the workspace. A withdraw of s1
            # is decided once s1's check ended (not "unknown": s1 is recorded after it).
            nursery.start_soon(withdraw, b, "withdraw s1", "s1")
            await trio.testing.wait_all_tasks_blocked()
            await sup.call(b, Configure(name="renamed"))
            plain = await sup.call(b, Submit("p1", [t.TextPart("plain")], "followUp"))
            # Idle means idle: a waiter is not told so while s1 is still being checked (it is
            # recorded next and starts a run); it was, as soon as p1's run ended.
            nursery.start_soon(idle, b, "b idle")
            while (await sup.call(b, GetState())).status != "idle":  # (p1 queued or running)
                await trio.sleep(0.01)  # (bounded by the harness's deadline)
            assert (await sup.call(b, Abort()))["aborted"] is False
            # Session c is deleted while its read waits.
            assert (await sup.call(c, Delete()))["deleted"] is True
            assert answers == {}  # every read still waits: the command holds the lock
            # The abort of the running command is answered while a2's read waits behind it.
            assert (await sup.call(a, Abort()))["aborted"] is True
        assert answers["s1"]["duplicate"] is False
        assert answers["s1 again"] == {**answers["s1"], "duplicate": True}
        assert answers["u1"] == "SKILL_NOT_FOUND" and answers["c1"] == "SESSION_DELETED"
        told_idle = answers["b idle"]
        assert told_idle.status == "idle" and not told_idle.queue
        assert [it.text for it in told_idle.agents["main"].items if it.role == "user"] == ["plain"]  # s1 withdrawn
        assert answers["withdraw s1"] == {"requestId": "s1", "status": "withdrawn", "text": "/skill:review go"}
        again = await sup.call(b, Submit("s1", [t.TextPart("/skill:review go")], "followUp"))
        assert again == {**answers["s1"], "duplicate": True}  # a repeat after: the same answer
        b_events = await events_of(store, b)
        submitted = [e for e in b_events if e.kind == "input.submitted"]
        assert [e.request_id for e in submitted] == ["p1", "s1"]  # recorded when its read was done
        assert submitted[0].seq == plain["seq"] and submitted[1].seq == answers["s1"]["seq"]
        [withdrawn] = [e for e in b_events if e.kind == "input.withdrawn"]
        assert withdrawn.event.input_request_id == "s1" and withdrawn.seq > submitted[1].seq
        assert "input.placed" not in [e.kind for e in b_events if e.seq > submitted[1].seq]
        assert not [e for e in await events_of(store, c) if e.kind == "input.submitted"]
        # a2 was recorded after the abort it did not hold up, and then ran.
        await sup.call(a, WaitIdle())
        a_events = await events_of(store, a)
        [aborted] = [e for e in a_events if e.kind == "run.aborted"]
        [a2] = [e for e in a_events if e.kind == "input.submitted" and e.request_id == "a2"]
        assert aborted.seq < a2.seq == answers["a2"]["seq"]
        users = [it.text for it in (await sup.call(a, GetState())).agents["main"].items if it.role == "user"]
        assert users[-1] == "after"


def test_tool_schema_is_offered() -> None:
    spec = skill_tool(pool=None)  # type: ignore[arg-type]
    assert spec.name == "skill" and not spec.main_only and spec.replay_safe
    assert json.loads(json.dumps(spec.schema()))["input_schema"]["additionalProperties"] is False


async def test_the_system_prompt_lists_loadable_skills_metadata_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    write(ws / ".agents" / "skills" / "broken" / "SKILL.md", "---\nname: broken\n")
    async with running_pool(tmp_path / "executors", {"proj": ws}) as pool:
        metas = await prompt_skills(pool, "proj")
        assert metas == [("review", "Review a change", "skills/review/SKILL.md")]
        [text] = (await build_system_prompts(lambda path: _none(), workspace=None, home=None,
                                             skills=[SkillMeta(*m) for m in metas])).for_agent(True)
        assert "# Skills\n" in text and "- review: Review a change (skills/review/SKILL.md)" in text
        assert "REVIEW-STEPS" not in text and "broken" not in text
        assert await prompt_skills(pool, "no-such-project") == []  # logged, left out


async def _none() -> None:
    return None


async def test_a_skill_whose_instructions_were_snipped_loads_again(tmp_path: Path) -> None:
    """A user's snip takes a loaded skill's instructions out of the Working Context: the skill is
    no longer loaded for the agent, so a later load appends its text again (it used to answer
    "already loaded: its instructions are in the context" while the model saw none)."""
    from runtime.working_context import EditContext

    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    script = [
        FauxTurn(when="LOAD-IT", tool_calls=[FauxToolCall("skill", {"name": "review"})]),
        FauxTurn(when="LIST-THEM", tool_calls=[FauxToolCall("skill", {})]),
        FauxTurn(when="DROP-IT", tool_calls=[FauxToolCall("skill", {"name": "review", "unload": True})]),
    ]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        state = await run(sup, sid, "r1", "LOAD-IT")
        item_id = state.agents["main"].skills["review"].item_id
        out = await sup.call(sid, EditContext("snip", (item_id,)))
        assert out["changed"] is True
        state = await run(sup, sid, "r2", "LIST-THEM")
        assert skill_texts(working_context(state.agents["main"])) == []
        listed = results_of(await events_of(store, sid))[-1]
        assert listed.structured_content["skills"][0]["loaded"] is False
        state = await run(sup, sid, "r3", "LOAD-IT")
        events = await events_of(store, sid)
        assert results_of(events)[-1].structured_content["status"] == "loaded"
        assert [e.kind for e in events].count("skill.loaded") == 2
        assert len(skill_texts(working_context(state.agents["main"]))) == 1
        assert len(skill_texts(faux.requests[-1].items)) == 1
        # and it unloads as any loaded skill does
        state = await run(sup, sid, "r4", "DROP-IT")
        assert results_of(await events_of(store, sid))[-1].structured_content["status"] == "unloaded"
        assert skill_texts(working_context(state.agents["main"])) == []


async def test_a_reload_of_a_snipped_skill_cut_off_by_a_restart_is_still_appended(tmp_path: Path) -> None:
    from runtime.working_context import EditContext

    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    ask = {"questions": [{"id": "q", "text": "Go on?", "options": [{"id": "y", "label": "Yes"}]}]}
    script = [FauxTurn(when="LOAD-IT", tool_calls=[FauxToolCall("skill", {"name": "review"})]),
              FauxTurn(when="LOAD-SLOWLY", tool_calls=[FauxToolCall("skill", {"name": "review"}),
                                                       FauxToolCall("ask_user", ask)])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, pool):
        sid = await sup.create_session("proj")
        state = await run(sup, sid, "r1", "LOAD-IT")
        await sup.call(sid, EditContext("snip", (state.agents["main"].skills["review"].item_id,)))
        await sup.call(sid, Submit("r2", [t.TextPart("LOAD-SLOWLY")], "followUp"))
        await sup.call(sid, WaitIdle())  # (returns while the question waits for an answer)
        assert (await sup.call(sid, GetState())).status == "awaiting_answer"
        assert [e.kind for e in await events_of(store, sid)].count("skill.loaded") == 1
    async with harness(tmp_path, ws, script) as (sup, store, faux, pool):
        await sup.call(sid, WaitIdle())
        events = await events_of(store, sid)
        assert [e.kind for e in events].count("skill.loaded") == 2
        assert not [e for e in events if e.kind == "instruction.appended"]
        state = await sup.call(sid, GetState())
        assert len(skill_texts(working_context(state.agents["main"]))) == 1


# --------------------------------------------------------------------------- a compaction after a load


async def test_a_skill_loaded_mid_conversation_stays_after_the_summary_of_what_came_before(tmp_path: Path) -> None:
    """F-CTX-4: after a compaction, the summary stands where the conversation it replaced began,
    so a skill loaded in the middle of it comes after the summary (it came before it, and so
    joined the leading system prompt). The same after a restart (a replay of the log), from a
    snapshot, and in a fork."""
    from runtime.config import CompactionConfig, ContextConfig
    from runtime.working_context import Compact

    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    script = [FauxTurn(when="LOAD-IT", tool_calls=[FauxToolCall("skill", {"name": "review"})]),
              FauxTurn(when="Summarize the conversation so far", text="SUMMARY-OF-IT")]
    ids = IdGen()

    def order(items: list[Any]) -> list[tuple[str, str]]:
        return [(it.role, "REVIEW-STEPS" if "REVIEW-STEPS" in it.text else it.text) for it in items]

    # (no round kept as written: what is tested is where the summary and the instruction stand)
    no_kept = ContextConfig(compaction=CompactionConfig(keep_recent_tokens=0))
    async with harness(tmp_path, ws, script, ids=ids, context=no_kept) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "hello")
        await run(sup, sid, "r2", "LOAD-IT")
        assert [it.role for it in faux.requests[-1].items] == [
            "user", "assistant", "user", "tool_call", "tool_result", "system"]
        prompt = faux.requests[-1].system
        await sup.call(sid, Compact())
        await run(sup, sid, "r3", "after")
        sent = faux.requests[-1].items
        assert order(sent) == [("summary", "SUMMARY-OF-IT"), ("system", "REVIEW-STEPS"), ("user", "after")]
        assert sent[1].source == "skill:review"
        assert faux.requests[-1].system == prompt  # the leading system prompt is unchanged
        kept = [it.id for it in sent]
        # A fork of the compacted session sees the same order.
        last = (await events_of(store, sid))[-1].seq
        fork = await sup.fork_session(sid, last)
        await run(sup, fork, "f1", "in the fork")
        assert [it.id for it in faux.requests[-1].items][:3] == kept
    snaps = SnapshotStore.open(tmp_path / "data")
    try:
        assert snaps.load(sid) is None  # so the next actor replays the whole log
    finally:
        snaps.close()

    async with harness(tmp_path, ws, script, ids=ids, snapshot_every=1) as (sup, store, faux, _pool):
        await run(sup, sid, "r4", "again")
        sent = faux.requests[-1].items
        assert [it.id for it in sent][:3] == kept
        assert order(sent) == [("summary", "SUMMARY-OF-IT"), ("system", "REVIEW-STEPS"), ("user", "after"),
                               ("assistant", "(faux) You said: after"), ("user", "again")]
    snaps = SnapshotStore.open(tmp_path / "data")
    try:
        assert snaps.load(sid) is not None  # the next actor starts from this snapshot and its tail
    finally:
        snaps.close()

    async with harness(tmp_path, ws, script, ids=ids) as (sup, store, faux, _pool):
        await run(sup, sid, "r5", "once more")
        sent = faux.requests[-1].items
        assert [it.id for it in sent][:3] == kept and order(sent)[-1] == ("user", "once more")
        assert [it.role for it in sent] == ["summary", "system", "user", "assistant", "user", "assistant", "user"]


async def test_a_hidden_skill_loaded_again_is_not_repeated_by_an_unhide_nor_an_unsnip(tmp_path: Path) -> None:
    """A user's hide takes a skill's instructions out as a snip does, so a load appends them again.
    Unhiding the first copy then brings it back to history, not to the Working Context (it stays
    snipped: the instructions are there once), and the instructions of an unloaded skill are not
    unsnipped (``CONTEXT_EDIT_INVALID``: load it again)."""
    from projections.context_budget import item_marks
    from runtime.working_context import ContextError, EditContext

    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    script = [
        FauxTurn(when="LOAD-IT", tool_calls=[FauxToolCall("skill", {"name": "review"})]),
        FauxTurn(when="DROP-IT", tool_calls=[FauxToolCall("skill", {"name": "review", "unload": True})]),
    ]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        state = await run(sup, sid, "r1", "LOAD-IT")
        first = state.agents["main"].skills["review"].item_id
        assert (await sup.call(sid, EditContext("hide", (first,))))["changed"] is True
        # Hidden and not loaded again yet: unhiding puts it back as it was.
        out = await sup.call(sid, EditContext("unhide", (first,)))
        assert out["items"] == [{"id": first, "context": "visible"}]
        assert (await sup.call(sid, EditContext("hide", (first,))))["changed"] is True
        state = await run(sup, sid, "r2", "LOAD-IT")
        second = state.agents["main"].skills["review"].item_id
        assert second != first and len(skill_texts(working_context(state.agents["main"]))) == 1
        n = len(await events_of(store, sid))
        out = await sup.call(sid, EditContext("unhide", (first,)))
        assert out["changed"] is True and out["items"] == [{"id": first, "context": "snipped"}]
        edits = [(e.event.op, e.event.item_ids) for e in (await events_of(store, sid))[n:]]
        assert edits == [("unhide", [first]), ("snip", [first])]
        state = await sup.call(sid, GetState())
        assert len(skill_texts(working_context(state.agents["main"]))) == 1
        with pytest.raises(ContextError) as err:
            await sup.call(sid, EditContext("unsnip", (first,)))
        assert err.value.code == "CONTEXT_EDIT_INVALID" and "load the skill" in str(err.value)
        # Unloaded: its instructions stay out, whatever is asked.
        state = await run(sup, sid, "r3", "DROP-IT")
        assert skill_texts(working_context(state.agents["main"])) == []
        n = len(await events_of(store, sid))
        with pytest.raises(ContextError) as err:
            await sup.call(sid, EditContext("unsnip", (second,)))
        assert err.value.code == "CONTEXT_EDIT_INVALID"
        assert len(await events_of(store, sid)) == n
        assert item_marks(state.agents["main"])[second] == "snipped"
