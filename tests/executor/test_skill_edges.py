"""Workspace skills at their edges (F-TOOL-6), through a session: a faux model loads skills
whose SKILL.md is valid YAML front matter written in ways the parser once refused or misread,
through the session actor, the ``skill`` tool and a real executor child process."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from events import types as t
from events.codec import Codec
from projections.session_state import skill_command
from runtime.actor import MAX_KEPT_CALL_ID, Answer, GetState, Submit, WaitIdle, recordable_call_id
from runtime.errors import LensError
from runtime.providers.faux import FauxToolCall, FauxTurn
from tools.skills import CALL_ID_ROOM, MAX_NAME_CHARS, Skill, SkillSizes, instructions_text, prompt_skills, skill_tool

from .conftest import agent_runtime, run_to_idle as run, tool_ctx
from .test_skills import REVIEW, events_of, harness, results_of, skill_texts, write

EDGE_SKILLS = {
    # "--- " opens the front matter as "---" does (YAML's document marker, trailing blanks allowed)
    "opener": "--- \nname: opener\ndescription: Trailing blank\n---\nOPENER-STEPS\n",
    # a block sequence at the key's own indentation (valid YAML: "key:" then "- item" lines)
    "listed": "---\nname: listed\ndescription: A list\nallowed-tools:\n- Read\n- Grep\n---\nLISTED-STEPS\n",
    # a key with a blank inside it (a plain YAML key)
    "spaced": "---\nname: spaced\nallowed tools: Read\ndescription: Spaced key\n---\nSPACED-STEPS\n",
    # a BOM and CRLF line ends: the instructions do not end with a stray carriage return
    "crlf": "\ufeff---\r\nname: crlf\r\ndescription: Windows\r\n---\r\nCRLF-ONE\r\nCRLF-TWO\r\n",
}


async def test_valid_yaml_front_matter_of_every_shape_loads(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for name, text in EDGE_SKILLS.items():
        write(ws / "skills" / name / "SKILL.md", text)
    script = [
        FauxTurn(when="LIST-THEM", tool_calls=[FauxToolCall("skill", {})]),
        FauxTurn(when="LOAD-ALL", tool_calls=[FauxToolCall("skill", {"name": n}) for n in EDGE_SKILLS]),
    ]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LIST-THEM")
        [listed] = results_of(await events_of(store, sid))
        rows = {s["name"]: s for s in listed.structured_content["skills"]}
        assert {n: rows[n].get("problem") for n in EDGE_SKILLS} == {n: None for n in EDGE_SKILLS}
        assert {n: rows[n]["description"] for n in EDGE_SKILLS} == {
            "opener": "Trailing blank", "listed": "A list", "spaced": "Spaced key", "crlf": "Windows"}
        await run(sup, sid, "r2", "LOAD-ALL")
        events = await events_of(store, sid)
        assert [r.structured_content["status"] for r in results_of(events)[1:]] == ["loaded"] * len(EDGE_SKILLS)
        loaded = {e.event.name: e.event.instructions for e in events if e.kind == "skill.loaded"}
        assert sorted(loaded) == sorted(EDGE_SKILLS)
        for name, text in loaded.items():
            assert "name:" not in text and "description:" not in text and not text.endswith(("\r", "\n")), text
        assert loaded["opener"].endswith("\n\nOPENER-STEPS")
        assert loaded["crlf"].endswith("\n\nCRLF-ONE\r\nCRLF-TWO")  # (its own line ends kept inside)


async def test_resource_samples_are_regular_files_never_symlinks(tmp_path: Path) -> None:
    # Symlinks are not followed: a link in a skill's directory (out of the workspace, or to a
    # file in it) is not offered as a resource, nor is a FIFO; the regular files are, and the
    # links do not make "more" true.
    ws = tmp_path / "ws"
    base = ws / "skills" / "review"
    write(base / "SKILL.md", "---\nname: review\n---\nREVIEW-STEPS\n")
    write(ws / "outside.txt", "in the workspace, outside the skill\n")
    write(tmp_path / "secret.txt", "out of the workspace\n")
    write(base / "b-real.md", "ref\n")
    write(base / "refs" / "c-real.md", "ref\n")
    os.symlink(tmp_path / "secret.txt", base / "a-escape.txt")
    os.symlink("../../outside.txt", base / "b-inside.txt")
    os.symlink("../../outside.txt", base / "refs" / "d-inside.txt")
    os.symlink(tmp_path, base / "e-linked-dir")
    os.mkfifo(base / "f-fifo")
    script = [FauxTurn(when="LOAD", tool_calls=[FauxToolCall("skill", {"name": "review"})])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LOAD")
        [res] = results_of(await events_of(store, sid))
    assert res.structured_content["status"] == "loaded"
    assert res.structured_content["resources"] == ["b-real.md", "refs/c-real.md"]
    assert res.structured_content["more_resources"] is False
    text = res.content[0].text
    assert "escape" not in text and "inside" not in text and "fifo" not in text



LOG_LIMIT = 64 * 1024  # log.maxEventBytes at its least: below the SKILL.md cap
BIG = "---\nname: big\n---\n" + "".join(f"step {i} of many\n" for i in range(8000))  # ~150 KB


async def test_a_skill_too_large_for_the_log_is_refused_or_told_never_a_failed_session(tmp_path: Path) -> None:
    # Instructions under the SKILL.md cap but over the log's event bound: a /skill: input is
    # refused at submit and a skill call answers SKILL_INVALID, both naming the bound; a /skill:
    # input whose SKILL.md grew past it while queued gets a note to the model; the session works on.
    ws = tmp_path / "ws"
    write(ws / "skills" / "big" / "SKILL.md", BIG)
    write(ws / "skills" / "grows" / "SKILL.md", "GROWS-STEPS\n")
    ask = {"questions": [{"id": "q", "text": "Go on?", "options": [{"id": "y", "label": "Yes"}]}]}
    script = [FauxTurn(when="LOAD-BIG", tool_calls=[FauxToolCall("skill", {"name": "big"})]),
              FauxTurn(when="HOLD", tool_calls=[FauxToolCall("ask_user", ask)])]
    async with harness(tmp_path, ws, script, max_event_bytes=LOG_LIMIT) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        with pytest.raises(LensError) as info:
            await sup.call(sid, Submit("r1", [t.TextPart("/skill:big go")], "followUp"))
        assert info.value.code == "SKILL_INVALID"
        assert "big" in info.value.message and f"the log holds events up to {LOG_LIMIT} bytes" in info.value.message

        state = await run(sup, sid, "r2", "LOAD-BIG")
        assert state.status == "idle"
        events = await events_of(store, sid)
        [res] = results_of(events)
        assert res.status == "error" and res.error_code == "SKILL_INVALID"
        assert f"too large for the event log" in res.content[0].text and f"up to {LOG_LIMIT} bytes" in res.content[0].text
        assert [e.kind for e in events if e.kind in ("skill.loaded", "instruction.appended")] == []
        assert "big" not in state.agents["main"].skills

        await sup.call(sid, Submit("r3", [t.TextPart("HOLD")], "followUp"))
        await sup.call(sid, WaitIdle())  # the question waits
        await sup.call(sid, Submit("r4", [t.TextPart("/skill:grows LATER")], "followUp"))  # fits: accepted
        write(ws / "skills" / "grows" / "SKILL.md", BIG.replace("name: big", "name: grows"))
        [qid] = list((await sup.call(sid, GetState())).questions)
        await sup.call(sid, Answer(qid, {"kind": "answer", "optionIds": ["y"]}))
        await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        assert state.status == "idle"
        events = await events_of(store, sid)
        seq_of = {(e.kind, getattr(e.event, "input_request_id", None)): e.seq for e in events}
        [notice] = [e for e in events if e.kind == "instruction.appended" and "grows" in e.event.source]
        assert notice.seq == seq_of[("input.placed", "r4")] - 1 and "too large for the event log" in notice.event.text
        assert [it.text for it in state.agents["main"].items if it.role == "user"][-1] == "LATER"
        assert "grows" not in state.agents["main"].skills


async def test_a_skills_size_is_checked_once_until_its_skill_md_changes(tmp_path: Path) -> None:
    # The log's verdict on a skill's size is asked once per SKILL.md (SkillSizes, one per daemon,
    # shared by the skill tool and the system prompt): listings and prompts over unchanged skills
    # ask none again; an edit past the log's bound is asked again, and refused.
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", REVIEW)
    write(ws / "skills" / "grows" / "SKILL.md", "GROWS-STEPS\n")
    sizes = SkillSizes()
    script = [FauxTurn(when="LIST", tool_calls=[FauxToolCall("skill", {})])]
    async with agent_runtime(tmp_path, ws, script, more_tools=lambda pool: [skill_tool(pool, sizes)],
                             max_event_bytes=LOG_LIMIT) as (sup, store, faux, pool):
        sid = await sup.create_session("proj")

        async def problems(request_id: str) -> dict[str, str | None]:
            await run(sup, sid, request_id, "LIST")
            listed = results_of(await events_of(store, sid))[-1].structured_content["skills"]
            return {s["name"]: s.get("problem") for s in listed}

        async def in_prompt() -> list[str]:
            return [name for name, _, _ in await prompt_skills(pool, "proj", recordable=store.codec.pack_checked,
                                                               sizes=sizes)]

        assert await problems("r1") == {"grows": None, "review": None} and sizes.checks == 2
        assert await problems("r2") == {"grows": None, "review": None} and await in_prompt() == ["grows", "review"]
        assert sizes.checks == 2  # (each skill encoded once, for three discoveries)

        write(ws / "skills" / "grows" / "SKILL.md", BIG.replace("name: big", "name: grows"))
        found = await problems("r3")
        assert found["review"] is None and (found["grows"] or "").startswith("its instructions are too large")
        assert sizes.checks == 3  # (the edited one, asked again)
        assert await in_prompt() == ["review"] and sizes.checks == 3


def write_review_and_lint(ws: Path) -> None:
    """Two workspace skills: ``review`` (named by its front matter) and ``lint`` (by its directory)."""
    write(ws / "skills" / "review" / "SKILL.md", "---\nname: review\n---\nREVIEW-STEPS\n")
    write(ws / "skills" / "lint" / "SKILL.md", "LINT-STEPS\n")


async def test_skill_command_inputs_at_their_edges(tmp_path: Path) -> None:
    # Names are case-sensitive; only an input starting with "/skill:" is a command; a second
    # "/skill:" in it is text among the args (its skill is not loaded).
    ws = tmp_path / "ws"
    write_review_and_lint(ws)
    async with harness(tmp_path, ws, []) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        with pytest.raises(LensError) as info:
            await sup.call(sid, Submit("r1", [t.TextPart("/skill:Review go")], "followUp"))
        assert info.value.code == "SKILL_NOT_FOUND" and "'Review'" in info.value.message
        assert "available: lint, review" in info.value.message
        await run(sup, sid, "r2", "please /skill:review this")
        assert "skill.loaded" not in [e.kind for e in await events_of(store, sid)]
        assert faux.requests[-1].items[-1].text == "please /skill:review this"
        state = await run(sup, sid, "r3", "/skill:review then /skill:lint")
        assert [e.event.name for e in await events_of(store, sid) if e.kind == "skill.loaded"] == ["review"]
        assert faux.requests[-1].items[-1].text == "then /skill:lint"
        assert list(state.agents["main"].skills) == ["review"]


async def test_a_skill_deleted_after_load_then_a_fork_keep_the_snapshot_once(tmp_path: Path) -> None:
    # Loaded, then its SKILL.md deleted: the list says so, a load appends nothing, the loaded text
    # stays; a fork after the load holds it once and loads nothing again; unload then load is
    # SKILL_NOT_FOUND (the current text is none).
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", "---\nname: review\n---\nREVIEW-STEPS\n")
    script = [FauxTurn(when="LOAD", tool_calls=[FauxToolCall("skill", {"name": "review"})]),
              FauxTurn(when="LIST", tool_calls=[FauxToolCall("skill", {})]),
              FauxTurn(when="DROP", tool_calls=[FauxToolCall("skill", {"name": "review", "unload": True})])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LOAD")
        (ws / "skills" / "review" / "SKILL.md").unlink()
        await run(sup, sid, "r2", "LIST")
        assert "- review [loaded; no longer in the workspace]" in results_of(await events_of(store, sid))[-1].content[0].text
        await run(sup, sid, "r3", "LOAD")
        again = results_of(await events_of(store, sid))[-1]
        assert again.structured_content["status"] == "already_loaded" and "no longer in the workspace" in again.content[0].text
        assert skill_texts(faux.requests[-1].items) == [e.event.instructions for e in await events_of(store, sid)
                                                        if e.kind == "skill.loaded"]
        fork = await sup.fork_session(sid, (await events_of(store, sid))[-1].seq)
        await run(sup, fork, "f1", "LOAD")
        assert results_of(await events_of(store, fork))[-1].structured_content["status"] == "already_loaded"
        assert len(skill_texts(faux.requests[-1].items)) == 1 and "REVIEW-STEPS" in skill_texts(faux.requests[-1].items)[0]
        assert "skill.loaded" not in [e.kind for e in await events_of(store, fork)]
        await run(sup, sid, "r4", "DROP")
        await run(sup, sid, "r5", "LOAD")
        assert results_of(await events_of(store, sid))[-1].error_code == "SKILL_NOT_FOUND"
        assert skill_texts(faux.requests[-1].items) == []


async def test_a_skill_that_cannot_be_read_does_not_take_its_name_from_a_good_one(tmp_path: Path) -> None:
    # A broken SKILL.md in the first root (its front matter unreadable, so named by its directory)
    # is still listed with its problem, but the good skill of that name in a later root is listed
    # without one and is the one loaded.
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", "---\nname: review\nname: twice\n---\nBROKEN-STEPS\n")
    write(ws / ".agents" / "skills" / "review" / "SKILL.md", "---\nname: review\ndescription: Good\n---\nGOOD-STEPS\n")
    script = [FauxTurn(when="LIST", tool_calls=[FauxToolCall("skill", {})]),
              FauxTurn(when="LOAD", tool_calls=[FauxToolCall("skill", {"name": "review"})])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LIST")
        [listed] = results_of(await events_of(store, sid))
        rows = [(s["name"], s["base_dir"], s.get("problem") or "") for s in listed.structured_content["skills"]]
        assert [r[:2] for r in rows] == [("review", "skills/review"), ("review", ".agents/skills/review")], rows
        assert rows[0][2].startswith("SKILL.md front matter") and rows[1][2] == "", rows
        await run(sup, sid, "r2", "LOAD")
        [_, loaded] = results_of(await events_of(store, sid))
        assert loaded.structured_content["status"] == "loaded"
        assert [e.event.instructions for e in await events_of(store, sid) if e.kind == "skill.loaded"][0].endswith("GOOD-STEPS")


def skill_md_of_size(codec: Codec, name: str, call_id: str | None) -> str:
    """The SKILL.md of ``skills/<name>`` whose load's ``skill.loaded`` (carrying ``call_id``) is
    as large as the log holds: one more byte of instructions and the log refuses it."""

    def size(n: int) -> int:
        text = f"---\nname: {name}\n---\n" + "y" * n + "\n"
        skill = Skill(name, f"skills/{name}", body="y" * n, digest=hashlib.sha256(text.encode()).hexdigest())
        return len(codec.pack(t.SkillLoaded(name=name, instructions=instructions_text(skill), base_dir=skill.base_dir,
                                            digest=skill.digest, call_id=call_id)))

    low, high = 1, LOG_LIMIT  # size(low) fits, size(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if size(mid) <= LOG_LIMIT else (low, mid)
    assert size(low) <= LOG_LIMIT < size(low + 1)
    return f"---\nname: {name}\n---\n" + "y" * low + "\n"


async def test_the_listing_and_the_prompt_know_the_logs_bound_and_a_skill_listed_loadable_loads(tmp_path: Path) -> None:
    # A skill whose load from a tool call the log could never hold is listed by skill({}) as not
    # loadable, naming the bound, and left out of the prompt: the same check, which allows for a
    # call id of CALL_ID_ROOM bytes. "edge" would fit only a load carrying no call id (a /skill:
    # input's), so it is refused everywhere; "fit1" and "fit2" fit one with a call id of
    # CALL_ID_ROOM bytes: each is loaded by a call with the longest id recorded as given, and by
    # one whose id is longer than the allowance (recorded under a digest id: never refused).
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", "---\nname: review\n---\nREVIEW-STEPS\n")
    room, kept, past = "k" * CALL_ID_ROOM, "k" * MAX_KEPT_CALL_ID, "p" * (CALL_ID_ROOM + 40)
    assert MAX_KEPT_CALL_ID < CALL_ID_ROOM and len(recordable_call_id(past)) < CALL_ID_ROOM
    script = [FauxTurn(when="LIST", tool_calls=[FauxToolCall("skill", {})]),
              FauxTurn(when="LOAD-FIT", tool_calls=[FauxToolCall("skill", {"name": "fit1"}, call_id=kept)]),
              FauxTurn(when="LOAD-EDGE", tool_calls=[FauxToolCall("skill", {"name": "edge"})]),
              FauxTurn(when="LOAD-PAST", tool_calls=[FauxToolCall("skill", {"name": "fit2"}, call_id=past)])]
    async with harness(tmp_path, ws, script, max_event_bytes=LOG_LIMIT) as (sup, store, faux, pool):
        write(ws / "skills" / "edge" / "SKILL.md", skill_md_of_size(store.codec, "edge", None))
        for name in ("fit1", "fit2"):
            write(ws / "skills" / name / "SKILL.md", skill_md_of_size(store.codec, name, room))
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LIST")
        [listed] = results_of(await events_of(store, sid))
        rows = {s["name"]: s.get("problem") for s in listed.structured_content["skills"]}
        assert sorted(rows) == ["edge", "fit1", "fit2", "review"] and rows["fit1"] is rows["fit2"] is rows["review"] is None
        assert rows["edge"].startswith("its instructions are too large for the event log (a load records ")
        assert f"the log holds events up to {LOG_LIMIT} bytes" in rows["edge"], rows
        assert f"- edge [cannot be loaded: {rows['edge']}] (skills/edge/)" in listed.content[0].text
        prompt = await prompt_skills(pool, "proj", recordable=store.codec.pack_checked)
        assert [name for name, _, _ in prompt] == ["fit1", "fit2", "review"]

        state = await run(sup, sid, "r2", "LOAD-FIT")
        assert results_of(await events_of(store, sid))[-1].structured_content["status"] == "loaded"
        [loaded] = [e.event for e in await events_of(store, sid) if e.kind == "skill.loaded"]
        assert loaded.name == "fit1" and loaded.call_id == kept and "fit1" in state.agents["main"].skills

        await run(sup, sid, "r3", "LOAD-EDGE")
        edge = results_of(await events_of(store, sid))[-1]
        assert edge.error_code == "SKILL_INVALID" and rows["edge"] in edge.content[0].text
        with pytest.raises(LensError) as info:
            await sup.call(sid, Submit("r4", [t.TextPart("/skill:edge go")], "followUp"))
        assert info.value.code == "SKILL_INVALID" and rows["edge"] in info.value.message

        state = await run(sup, sid, "r5", "LOAD-PAST")
        events = await events_of(store, sid)
        assert results_of(events)[-1].structured_content["status"] == "loaded"
        assert not [e for e in events if e.kind == "instruction.appended"]
        [_, loaded] = [e.event for e in events if e.kind == "skill.loaded"]
        assert (loaded.name, loaded.call_id) == ("fit2", recordable_call_id(past))
        assert state.status == "idle" and "fit2" in state.agents["main"].skills


async def test_a_skill_directory_whose_name_cannot_be_shown_is_listed_with_its_problem(tmp_path: Path) -> None:
    # A skill directory named with a newline, or with bytes that are not UTF-8, is listed by the
    # executor with "\\n" / U+FFFD: it is listed as a skill that cannot be loaded, its name shown
    # escaped; it is left out of the prompt and never loaded. A directory of that kind holding no
    # SKILL.md is no skill; one whose name holds a real backslash and "n" is read as any other.
    ws = tmp_path / "ws"
    write(ws / "skills" / "review" / "SKILL.md", "---\nname: review\n---\nREVIEW-STEPS\n")
    write(ws / "skills" / "a\nb" / "SKILL.md", "---\nname: newline\n---\nNEWLINE-STEPS\n")
    write(ws / "skills" / "lit\\nname" / "SKILL.md", "---\nname: literal\n---\nLITERAL-STEPS\n")
    raw = os.fsencode(ws / "skills")
    os.makedirs(raw + b"/bad\xffname")
    with open(raw + b"/bad\xffname/SKILL.md", "w") as f:
        f.write("---\nname: bytes\n---\nBYTES-STEPS\n")
    os.makedirs(raw + b"/empty\xfe/notes")
    script = [FauxTurn(when="LIST", tool_calls=[FauxToolCall("skill", {})]),
              FauxTurn(when="LOAD", tool_calls=[FauxToolCall("skill", {"name": n})
                                                for n in ("review", "literal", "a\\nb", "newline", "bytes")])]
    async with harness(tmp_path, ws, script) as (sup, store, faux, pool):
        sid = await sup.create_session("proj")
        await run(sup, sid, "r1", "LIST")
        [listed] = results_of(await events_of(store, sid))
        rows = [(s["name"], s["base_dir"], s.get("problem")) for s in listed.structured_content["skills"]]
        assert rows == [
            ("a\\nb", "skills/a\\nb", "its directory name cannot be used as a skill name: 'a\\nb' "
             "(it holds a newline or bytes that are not UTF-8, shown here as U+FFFD)"),
            ("bad\ufffdname", "skills/bad\ufffdname", "its directory name cannot be used as a skill name: "
             "'bad\ufffdname' (it holds a newline or bytes that are not UTF-8, shown here as U+FFFD)"),
            ("literal", "skills/lit\\nname", None),
            ("review", "skills/review", None),
        ], rows
        assert "\n- a\\nb [cannot be loaded: its directory name" in listed.content[0].text
        prompt = await prompt_skills(pool, "proj")
        assert [name for name, _, _ in prompt] == ["literal", "review"]
        await run(sup, sid, "r2", "LOAD")
        events = await events_of(store, sid)
        assert [(r.status, r.error_code) for r in results_of(events)[1:]] == [
            ("ok", None), ("ok", None), ("error", "SKILL_INVALID"), ("error", "SKILL_NOT_FOUND"),
            ("error", "SKILL_NOT_FOUND")]
        assert sorted(e.event.name for e in events if e.kind == "skill.loaded") == ["literal", "review"]


@pytest.mark.parametrize("args, says", [
    ({"name": 5}, "name must be a string, got 5"),
    ({"name": "beta", "x": 1}, "skill does not take 'x'"),
    ({"name": "beta", "unload": "yes"}, "unload must be true or false, got \"yes\""),
    ({"unload": True}, "unload needs a name"),
])
async def test_bad_arguments_of_the_skill_tool_are_named_in_the_refusal(args: dict, says: str) -> None:
    from tools.base import ToolError

    # (refused before anything is looked up: no executor is reached)
    with pytest.raises(ToolError) as info:
        await skill_tool(None).run(args, tool_ctx("ses_1", "call_1", "p1"))
    assert info.value.code == "INVALID_ARGUMENT"
    assert says in info.value.message, info.value.message
    assert '{"name": "..."} (load)' in info.value.message  # (what it takes, still said)


async def test_blanks_after_the_colon_of_a_skill_command_are_skipped(tmp_path: Path) -> None:
    # `/skill: review` (a space after the colon) names the skill `review`, as a user typing it
    # means; a name on a later line is no name: the input is refused, saying where it goes.
    ws = tmp_path / "ws"
    write_review_and_lint(ws)
    async with harness(tmp_path, ws, []) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        for request_id, text in [("n1", "/skill: \nreview"), ("n2", "/skill:   "), ("n3", "/skill:\t\n"),
                                 ("n4", "/skill:\rreview go"), ("n5", "/skill: \u2028review")]:
            with pytest.raises(LensError) as info:
                await sup.call(sid, Submit(request_id, [t.TextPart(text)], "followUp"))
            assert info.value.code == "INVALID_ARGUMENT", (text, info.value)
            assert "a skill name after it, on its line: /skill:<name> [text]" in info.value.message, info.value.message
        assert "input.submitted" not in [e.kind for e in await events_of(store, sid)]
        await run(sup, sid, "r1", "/skill: review go")
        assert faux.requests[-1].items[-1].text == "go"
        await run(sup, sid, "r2", "/skill:\t lint")
        assert faux.requests[-1].items[-1].text == 'Use the skill "lint".'
        events = await events_of(store, sid)
        assert [e.event.name for e in events if e.kind == "skill.loaded"] == ["review", "lint"]
        assert [e.event.content[0].text for e in events if e.kind == "input.submitted"] == [
            "/skill: review go", "/skill:\t lint"]  # (recorded as typed)


async def ask_each(sup, store, sid: str, asked: dict[str, dict]) -> dict[str, t.ToolFinished]:
    """Each of ``asked``'s inputs in turn (the faux script answers each with its ``skill`` call):
    the call's result, by input."""
    answers = {}
    for when in asked:
        await run(sup, sid, when.lower(), when)
        answers[when] = results_of(await events_of(store, sid))[-1]
    return answers


async def test_a_skill_whose_name_is_too_long_is_refused_for_it_however_it_is_asked_for(tmp_path: Path) -> None:
    # A front-matter name of 65 characters is listed cut to 64 with its problem. Asked for by the
    # name its SKILL.md gives, it was "no skill named …" (SKILL_NOT_FOUND) while the cut name was
    # SKILL_INVALID naming the problem: both now name the problem. Its directory name is not its
    # name (the front matter's is), so that is SKILL_NOT_FOUND, saying which name the directory
    # holds.
    long = "a" * (MAX_NAME_CHARS + 1)
    ws = tmp_path / "ws"
    write(ws / "skills" / "longdir" / "SKILL.md", f"---\nname: {long}\n---\nLONG-STEPS\n")
    write(ws / "skills" / "review" / "SKILL.md", "---\nname: review\n---\nREVIEW-STEPS\n")
    asked = {"LIST": {}, "FULL": {"name": long}, "CUT": {"name": long[:MAX_NAME_CHARS]}, "DIR": {"name": "longdir"},
             "NONE": {"name": "b" * (MAX_NAME_CHARS + 1)}, "DROP": {"name": long, "unload": True}}
    script = [FauxTurn(when=when, tool_calls=[FauxToolCall("skill", args)]) for when, args in asked.items()]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        answers = await ask_each(sup, store, sid, asked)
        listed = answers["LIST"].structured_content["skills"]
        assert [(s["name"], s["base_dir"]) for s in listed] == [(long[:MAX_NAME_CHARS], "skills/longdir"),
                                                                 ("review", "skills/review")]
        assert "is not valid: 1 to 64 characters" in listed[0]["problem"]
        for when in ("FULL", "CUT"):
            text = answers[when].content[0].text
            assert answers[when].error_code == "SKILL_INVALID", (when, text)
            assert "(skills/longdir/) cannot be loaded" in text and "is not valid: 1 to 64 characters" in text, text
        text = answers["DIR"].content[0].text
        assert answers["DIR"].error_code == "SKILL_NOT_FOUND", text
        # (the name its front matter gives, and that it cannot be loaded: the cut name was said to
        # be the front matter's, a skill that would load; shown cut with "…" after it, as longer)
        assert "no skill named 'longdir'" in text, text
        assert (f"skills/longdir/ holds the skill named {long[:MAX_NAME_CHARS]!r}…, its front matter's name (it "
                f"cannot be loaded: the skill name {long!r} is not valid: 1 to 64 characters") in text, text
        text = answers["NONE"].content[0].text
        assert answers["NONE"].error_code == "SKILL_NOT_FOUND" and "at most 64 characters" in text, text
        assert "b" * (MAX_NAME_CHARS + 1) not in text  # (echo capped)
        assert answers["DROP"].error_code == "SKILL_NOT_FOUND"  # (never loaded: no unload to make)
        assert "skill.loaded" not in [e.kind for e in await events_of(store, sid)]
        # a /skill: input is the same check
        with pytest.raises(LensError) as info:
            await sup.call(sid, Submit("s1", [t.TextPart(f"/skill:{long} go")], "followUp"))
        assert info.value.code == "SKILL_INVALID" and "skills/longdir/" in info.value.message, info.value


async def test_a_name_past_64_characters_cut_to_a_loadable_skills_name_keeps_its_own_problem(tmp_path: Path) -> None:
    # skills/b/ names its skill 65 characters whose first 64 are the name of skills/a/'s (valid)
    # skill: listed cut to that name, it was told "the name … is taken by the skill in skills/a/",
    # as if a shorter name would do; its problem is the name's length.
    name = "a" * MAX_NAME_CHARS
    long = name + "b"
    ws = tmp_path / "ws"
    write(ws / "skills" / "a" / "SKILL.md", f"---\nname: {name}\n---\nA-STEPS\n")
    write(ws / "skills" / "b" / "SKILL.md", f"---\nname: {long}\n---\nB-STEPS\n")
    asked = {"LIST": {}, "FULL": {"name": long}, "SHORT": {"name": name}}
    script = [FauxTurn(when=when, tool_calls=[FauxToolCall("skill", args)]) for when, args in asked.items()]
    async with harness(tmp_path, ws, script) as (sup, store, faux, _pool):
        sid = await sup.create_session("proj")
        answers = await ask_each(sup, store, sid, asked)
        listed = answers["LIST"].structured_content["skills"]
        assert [(s["name"], s["base_dir"], "problem" in s) for s in listed] == [
            (name, "skills/a", False), (name, "skills/b", True)], listed
        assert "is taken" not in listed[1]["problem"] and "1 to 64 characters" in listed[1]["problem"], listed
        text = answers["FULL"].content[0].text
        assert answers["FULL"].error_code == "SKILL_INVALID", text
        assert "(skills/b/) cannot be loaded" in text and "1 to 64 characters" in text and "taken" not in text, text
        assert answers["SHORT"].error_code is None, answers["SHORT"].content[0].text
        loaded = [e.event for e in await events_of(store, sid) if e.kind == "skill.loaded"]
        assert [(e.name, e.base_dir) for e in loaded] == [(name, "skills/a")], loaded


@pytest.mark.parametrize("text, name, args", [
    ("/skill:\rreview go", None, None),
    ("/skill:\r\nreview go", None, None),
    ("/skill: \u2028review", None, None),
    ("/skill:\x85review", None, None),
    ("/skill: review go\rmore", "review", "go\rmore"),
    ("/skill:review\r\nmore", "review", "more"),
    ("/skill: review\u2028go on", "review", "go on"),
])
def test_any_line_break_ends_a_new_skill_commands_line(text: str, name: str | None, args: str | None) -> None:
    # A NEW input's command line ends at any line break str.splitlines reads: a name after one is
    # refused as after \n. What the rule accepts, the fold (skill_command) reads with the same name.
    from runtime.skill_loads import SkillLoads

    content = [t.TextPart(text)]
    if name is None:
        with pytest.raises(LensError) as info:
            SkillLoads.command_name(content)
        assert info.value.code == "INVALID_ARGUMENT", info.value
        assert "a skill name after it, on its line" in info.value.message, info.value.message
    else:
        assert SkillLoads.command_name(content) == name
        got = skill_command(content)
        assert got is not None and got[0] == name and got[1] == [t.TextPart(args)], got


def test_a_log_written_before_the_line_break_rule_folds_as_it_did() -> None:
    # Inputs already in the log are folded by the parse they were accepted under (the line cut
    # at \n alone, the rest split on blanks): the stricter rule for new inputs does not replay
    # them differently. Before, `\r\n` kept its `\r` in the text, and `/skill:\rrev go` became
    # a plain user item.
    from events.reader import StoredEvent
    from projections.session_state import SessionState, fold

    drafts: list[tuple[str | None, t._Event]] = [(None, t.SessionCreated())]
    for rid, text in [("r1", "/skill:rev do this \r\nmore"), ("r2", "/skill:\rrev go"),
                      ("r3", "/skill: \u2028rev next")]:
        drafts += [(rid, t.InputSubmitted(content=[t.TextPart(text)])),
                   (None, t.SkillLoaded(name="rev", instructions="REV")), (None, t.InputPlaced(input_request_id=rid))]
    events = [StoredEvent(seq=n, ts=n, project_id="prj", session_id="s1", session_seq=n, agent_id="main",
                          task_id="t1", kind=ev.__struct_config__.tag, request_id=rid, event=ev)
              for n, (rid, ev) in enumerate(drafts, 1)]
    state = fold(SessionState("s1"), events)
    users = [i.text for i in state.agent("main").items if i.role == "user"]
    assert users == ["do this\nmore", "go", "next"], users
