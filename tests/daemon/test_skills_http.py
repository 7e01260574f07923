"""F-TOOL-6 over HTTP: ``/skill:<name> args`` inputs (422 ``SKILL_NOT_FOUND`` for an unknown
skill), and skills loaded before a daemon restart stay loaded after it without being appended
again (snapshot and replay alike)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from .conftest import Daemon, error_of, stop_daemon, wait_until

REVIEW = "---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS: read the diff first.\n"
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "LOAD-IT", "toolCalls": [{"name": "skill", "arguments": {"name": "review"}}]},
]}], "defaultModel": "faux/faux-1", "sessions": {"snapshotEvery": 3}}


def skill_items(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [it for it in view["items"] if it.get("role") == "system"]


async def _session(d: Daemon) -> tuple[str, str, Path]:
    token = await d.pair("skill-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW)
    sid = (await d.session(token, project["id"]))["id"]
    return token, sid, ws


async def test_a_skill_command_loads_the_skill_and_sends_the_args(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid, ws = await _session(d)
    accepted = await d.submit(token, sid, "r1", "/skill:review look at main.py")
    assert accepted["duplicate"] is False
    view = await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [submitted] = [e for e in events if e["kind"] == "input.submitted"]
    assert submitted["body"] == {"content": [{"type": "text", "text": "/skill:review look at main.py"}],
                                 "when_busy": "followUp"}  # recorded as submitted
    [loaded] = [e for e in events if e["kind"] == "skill.loaded"]
    assert loaded["body"]["base_dir"] == "skills/review" and "REVIEW-STEPS" in loaded["body"]["instructions"]
    kinds = [e["kind"] for e in events]
    assert kinds.index("skill.loaded") == kinds.index("input.placed") - 1
    assert len(skill_items(view)) == 1
    assert [it["text"] for it in view["items"] if it["role"] == "user"] == ["look at main.py"]  # what the model sees
    [placed] = [e for e in events if e["kind"] == "input.placed"]
    r = await d.get(f"/history/items/c{placed['seq']}", token)
    assert r.status_code == 200 and r.json()["text"] == "look at main.py", r.text  # history holds the same item

    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "/skill:nope hello"})
    assert r.status_code == 422 and error_of(r) == "SKILL_NOT_FOUND"
    # the message names the problem once; the code is the `code` field's, not repeated before it
    assert r.json()["error"]["message"] == "no skill named 'nope'; available: review", r.text
    (ws / "skills" / "bad").mkdir()
    (ws / "skills" / "bad" / "SKILL.md").write_text("---\nname: bad\n")
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r3", "content": "/skill:bad hello"})
    assert r.status_code == 422 and error_of(r) == "SKILL_INVALID"
    assert r.json()["error"]["message"].startswith("skill 'bad' (skills/bad/) cannot be loaded: "), r.text
    # nothing was recorded for the refused inputs
    assert [e["kind"] for e in await d.events(token, sid)].count("input.submitted") == 1


async def test_loaded_skills_survive_a_restart_without_being_appended_again(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid, ws = await _session(d)
    await d.submit(token, sid, "r1", "LOAD-IT")
    await d.wait_idle(token, sid)
    assert [e["kind"] for e in await d.events(token, sid)].count("skill.loaded") == 1
    # The text changes on disk; neither the restart nor later loads rewrite or re-append it.
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW.replace("REVIEW-STEPS", "NEW-STEPS"))
    await stop_daemon(d)

    d2 = await daemon_factory(config=CONFIG, root=d.root)
    await d2.submit(token, sid, "r2", "LOAD-IT")
    await d2.wait_idle(token, sid)
    await d2.submit(token, sid, "r3", "/skill:review and again")
    view = await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    assert [e["kind"] for e in events].count("skill.loaded") == 1
    results = [e["body"] for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == "skill"]
    assert [r["structured_content"]["status"] for r in results] == ["loaded", "already_loaded"]
    [item] = skill_items(view)
    assert "REVIEW-STEPS" in item["text"] and "NEW-STEPS" not in item["text"]
    await stop_daemon(d2)

    # Once more, from the log alone (projections.db, snapshots included, removed): the same state.
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (d.data_dir / name).unlink(missing_ok=True)
    d3 = await daemon_factory(config=CONFIG, root=d.root)
    await d3.submit(token, sid, "r4", "LOAD-IT")
    view = await d3.wait_idle(token, sid)
    events = await d3.events(token, sid)
    assert [e["kind"] for e in events].count("skill.loaded") == 1
    assert len(skill_items(view)) == 1


BUSY_CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "LOAD-BUSY", "toolCalls": [{"name": "skill", "arguments": {"name": "review"}},
                                        {"name": "sleep_milliseconds", "arguments": {"milliseconds": 600000}}]},
]}], "defaultModel": "faux/faux-1"}


async def test_an_abort_after_a_skill_call_appends_its_instructions_with_the_rounds_results(daemon_factory):
    # The round [skill, sleep] is aborted in its sleep: the batch of results ends there, and the
    # skill's instructions go right after it -- not after the next input, as they used to.
    d = await daemon_factory(config=BUSY_CONFIG)
    token, sid, ws = await _session(d)
    await d.submit(token, sid, "r1", "LOAD-BUSY")

    async def sleeping() -> bool:  # (the skill call has its result then)
        return any(it.get("call", {}).get("name") == "sleep_milliseconds" and it["call"].get("status") == "running"
                   for it in (await d.view(token, sid))["items"])

    await wait_until(sleeping, what="the round's sleep running")
    r = await d.post(f"/sessions/{sid}/abort", token, {})
    assert r.status_code == 200 and r.json()["aborted"] is True
    await d.wait_idle(token, sid)
    kinds = [(e["kind"], e["body"].get("name")) for e in await d.events(token, sid)]
    assert kinds[-4:] == [("tool.finished", "sleep_milliseconds"), ("skill.loaded", "review"),
                          ("run.aborted", None), ("task.finished", None)]

    await d.submit(token, sid, "r2", "hello")
    view = await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    assert [e["kind"] for e in events].count("skill.loaded") == 1
    roles = [it["role"] for it in view["items"]]
    assert roles.index("system") < max(i for i, role in enumerate(roles) if role == "user")  # before "hello"
    [item] = skill_items(view)
    assert "REVIEW-STEPS" in item["text"]


async def test_an_abort_after_a_restart_reads_no_workspace(daemon_factory):
    # After a restart the snapshot of a due load is gone, and the abort read the skill again: under
    # the execution-domain read lock, so while another session's command held the write lock the
    # abort (and every later command of the session) waited for that command to end. An abort
    # reads nothing now: such a load is dropped, and the model told so.
    d = await daemon_factory(config=BUSY_CONFIG)
    token, sid, ws = await _session(d)
    await d.submit(token, sid, "r1", "LOAD-BUSY")

    async def sleeping() -> bool:
        return any(it.get("call", {}).get("name") == "sleep_milliseconds" and it["call"].get("status") == "running"
                   for it in (await d.view(token, sid))["items"])

    await wait_until(sleeping, what="the round's sleep running")
    await stop_daemon(d)
    d2 = await daemon_factory(config=BUSY_CONFIG, root=d.root)
    d = d2
    await wait_until(sleeping, what="the sleep running again after the restart")  # (replay-safe: re-run)
    project_id = (await d.view(token, sid))["projectId"]
    other = (await d.session(token, project_id))["id"]
    hold = {"command": "touch started && sleep 600", "timeout_ms": 900000}
    await d.submit(token, other, "o1", f"/tool run_command {json.dumps(hold)}")
    await wait_until(lambda: trio.to_thread.run_sync((ws / "started").exists), what="the command holding the workspace")

    r = await d.post(f"/sessions/{sid}/abort", token, {})
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    assert (await d.view(token, other))["status"] == "running"  # answered while the command still runs
    events = await d.events(token, sid)
    kinds = [(e["kind"], e["body"].get("name")) for e in events]
    assert kinds[-5:] == [("tool.finished", "sleep_milliseconds"), ("instruction.appended", None),
                          ("skill.unloaded", "review"), ("run.aborted", None), ("task.finished", None)]
    note = [e["body"] for e in events if e["kind"] == "instruction.appended"][-1]
    assert note["source"] == "skill-load-failed:review" and "aborted" in note["text"]
    assert "skill.loaded" not in [k for k, _ in kinds]
    r = await d.post(f"/sessions/{other}/abort", token, {})
    assert r.status_code == 200 and r.json()["aborted"] is True


async def test_a_session_whose_skill_input_is_being_checked_reads_running(daemon_factory):
    # A /skill: input is checked (under the execution-domain read lock) before it is recorded.
    # While another session's command holds the write lock the check waits, and the submission
    # with it. Another client polling the session saw it idle meanwhile, although an input had
    # been accepted for checking and would start a run (WaitIdle already waited for it). The
    # view says running now, until the input is recorded (and queued: running) or refused.
    d = await daemon_factory(config=CONFIG)
    token, sid, ws = await _session(d)
    project_id = (await d.view(token, sid))["projectId"]
    other = (await d.session(token, project_id))["id"]
    hold = {"command": "touch started && sleep 600", "timeout_ms": 900000}
    await d.submit(token, other, "o1", f"/tool run_command {json.dumps(hold)}")
    await wait_until(lambda: trio.to_thread.run_sync((ws / "started").exists), what="the command holding the workspace")
    assert (await d.view(token, sid))["status"] == "idle"
    answers: dict[str, Any] = {}

    async def submit(request_id: str, text: str) -> None:
        answers[request_id] = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": request_id, "content": text})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit, "s1", "/skill:review go")
        nursery.start_soon(submit, "u1", "/skill:nope go")
        # (the requests are on their way: the view says running once both checks are pending)
        view = await wait_until(lambda: _view_if(d, token, sid, lambda v: v["status"] != "idle"),
                                what="the view while the checks wait")
        assert view["status"] == "running" and view["queued"] == [] and answers == {}  # nothing recorded yet
        # The session list says so too (it said idle: the list is the log's projection).
        assert await _row_status(d, token, sid) == "running" and answers == {}
        r = await d.post(f"/sessions/{other}/abort", token, {})
        assert r.status_code == 200 and r.json()["aborted"] is True
    assert answers["s1"].status_code == 202 and answers["u1"].status_code == 422
    assert error_of(answers["u1"]) == "SKILL_NOT_FOUND"
    view = await d.wait_idle(token, sid)
    assert [it["text"] for it in view["items"] if it["role"] == "user"] == ["go"]

    # A check that is refused leaves the session idle again.
    hold["command"] = "touch again && sleep 600"
    await d.submit(token, other, "o2", f"/tool run_command {json.dumps(hold)}")
    await wait_until(lambda: trio.to_thread.run_sync((ws / "again").exists), what="the command holding the workspace")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit, "u2", "/skill:nope again")
        await wait_until(lambda: _view_if(d, token, sid, lambda v: v["status"] == "running"),
                         what="the view while the check waits")
        assert await _row_status(d, token, sid) == "running" and "u2" not in answers
        await d.post(f"/sessions/{other}/abort", token, {})
    assert error_of(answers["u2"]) == "SKILL_NOT_FOUND"
    assert (await d.view(token, sid))["status"] == "idle" and await _row_status(d, token, sid) == "idle"


async def _row_status(d: Daemon, token: str, sid: str) -> str:
    r = await d.get("/sessions", token)
    assert r.status_code == 200, r.text
    return next(row["status"] for row in r.json()["sessions"] if row["id"] == sid)


async def _view_if(d: Daemon, token: str, sid: str, predicate: Any) -> dict[str, Any] | None:
    view = await d.view(token, sid)
    return view if predicate(view) else None


async def test_a_withdraw_or_steer_of_a_skill_input_being_checked_waits_for_the_check(daemon_factory):
    # While a /skill: input's check waited, a withdraw of its request id answered "unknown" and
    # the input was recorded and ran after it; a steer answered 409 "it is unknown". Yet a repeat
    # of the same id waited for the check's answer. Both are now decided once the check ended.
    d = await daemon_factory(config=CONFIG)
    token, sid, ws = await _session(d)
    project_id = (await d.view(token, sid))["projectId"]
    other = (await d.session(token, project_id))["id"]
    answers: dict[str, Any] = {}

    async def post(key: str, path: str) -> None:
        body = {"requestId": key, "content": f"/skill:review {key}"} if path == "/inputs" else {}
        answers[key if path == "/inputs" else path] = await d.post(f"/sessions/{sid}{path}", token, body)

    for n, (rid, path) in enumerate([("s1", "/inputs/s1/withdraw"), ("s2", "/inputs/s2/steer")]):
        hold = {"command": f"touch started{n} && sleep 600", "timeout_ms": 900000}
        await d.submit(token, other, f"o{n}", f"/tool run_command {json.dumps(hold)}")
        await wait_until(lambda: trio.to_thread.run_sync((ws / f"started{n}").exists),
                         what="the command holding the workspace")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(post, rid, "/inputs")
            await wait_until(lambda: _view_if(d, token, sid, lambda v: v["status"] == "running"),
                             what="the check pending")
            nursery.start_soon(post, rid, path)
            await d.view(token, sid)  # (a round trip to the session after it)
            assert path not in answers  # not "unknown": it waits for the check
            r = await d.post(f"/sessions/{other}/abort", token, {})
            assert r.status_code == 200 and r.json()["aborted"] is True
        assert answers[rid].status_code == 202 and answers[rid].json()["duplicate"] is False
    assert answers["/inputs/s1/withdraw"].json() == {"requestId": "s1", "status": "withdrawn", "text": "/skill:review s1"}
    assert answers["/inputs/s2/steer"].status_code == 200, answers["/inputs/s2/steer"].text
    assert answers["/inputs/s2/steer"].json() == {"requestId": "s2", "status": "queued", "whenBusy": "steer"}
    view = await d.wait_idle(token, sid)
    assert [it["text"] for it in view["items"] if it["role"] == "user"] == ["s2"]  # s1 never ran
    kinds = [(e["kind"], e["body"].get("input_request_id")) for e in await d.events(token, sid)]
    assert ("input.withdrawn", "s1") in kinds and ("input.placed", "s1") not in kinds
    assert kinds.index(("input.requeued", "s2")) < kinds.index(("input.placed", "s2"))


async def test_a_fork_made_after_a_skill_call_appends_its_instructions_before_its_first_input(daemon_factory):
    # Forked in the round [skill, sleep] while it sleeps: the skill call has its result ("its
    # instructions follow") and its instructions were due after the round. The fork runs nothing
    # of that round; its instructions go where the round ends in the fork -- before the fork's
    # first input, as an abort puts them, not after it.
    d = await daemon_factory(config=BUSY_CONFIG)
    token, sid, ws = await _session(d)
    await d.submit(token, sid, "r1", "LOAD-BUSY")

    async def sleeping() -> list[dict[str, Any]]:
        return [e for e in await d.events(token, sid)
                if e["kind"] == "tool.started" and e["body"]["name"] == "sleep_milliseconds"]

    [started] = await wait_until(sleeping, what="the round's sleep running")
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": started["seq"]})
    assert r.status_code == 201, r.text
    fork = r.json()["id"]
    await d.post(f"/sessions/{sid}/abort", token, {})
    await d.submit(token, fork, "f1", "hello")
    view = await d.wait_idle(token, fork)
    assert [e["kind"] for e in await d.events(token, fork)].count("skill.loaded") == 1
    roles = [it["role"] for it in view["items"]]
    assert roles == ["user", "tool_call", "tool_call", "system", "user", "assistant"], roles
    assert "REVIEW-STEPS" in view["items"][3]["text"]
    assert [it["role"] for it in (await d.view(token, sid))["items"]].count("system") == 1  # the source's own
