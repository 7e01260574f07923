"""Crash recovery, forks and session configuration, a second pass as a client drives them
(SPEC F-ACT-3, F-ACT-4, F-ACT-6, F-ACT-7, F-LOG-4): ``lens serve`` as a process SIGKILLed at a
moment the log and the event stream show, and the daemon on a loopback port 0 with the ``faux``
provider and the real executor.

What earlier modules pin is not repeated (a ``run_command`` interrupted with one input queued
behind it, a question cancelled by a restart, duplicates across restarts under load, forks at a
deletion, at a session's first event, at another session's seq, inside a running call, a
configuration sent while a request is in flight). Here:

- a kill while a replay-safe call runs (``sleep_milliseconds``): the call runs again after the
  restart, not reported interrupted; the inputs queued behind it (two follow-ups and a steer) are
  the same queue, in the same order, with their kinds and seqs; a retry of one is a duplicate with
  its seq, and a withdraw, a steer and an abort act on them as before the kill;
- a kill while a model answer streams: the request is asked again (attempt 2); what streamed
  before the kill is not kept, what the second attempt streamed is, once, when it is aborted;
- a kill while a command (not replay-safe) runs with a follow-up, a steer and a follow-up
  re-queued as a steer: the call is interrupted, both steers go into that task after the round
  (in submission order), the follow-up runs a task of its own;
- a fork made inside the replay-safe call before the kill stays idle across the restart: the
  call it inherited is interrupted in it and never run again;
- a fork at a call's ``tool.finished`` holds what that result recorded with it (todo list, file
  edit, loaded tools);
- ``PATCH`` and ``POST /sessions`` with a model of a disabled provider, of a provider without its
  key, of no provider: each its own code, nothing recorded; a model and thinking level sent while
  a request was in flight apply to that request asked again after a restart (attempt 2).

Every wait is a bounded poll of what the log, the view or the stream shows (conftest
``wait_until``); nothing sleeps for ordering.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import trio

from .conftest import Daemon, error_of, run_tool, serving, stop_daemon, wait_until

NAP = 600_000  # ms: longer than the test; only an abort ends it
SCRIPT = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "take a nap", "toolCalls": [{"name": "sleep_milliseconds", "arguments": {"milliseconds": NAP}}]},
    {"when": "answer slowly", "chunks": ["alpha ", "beta"], "chunkDelayMs": NAP},
    {"when": "run the slow one", "toolCalls": [{"name": "run_command", "arguments": {
        "command": "sleep 30 && echo done > done.txt"}}]},
]}], "defaultModel": "faux/faux-1"}


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


async def _queue_three(d: Daemon, token: str, sid: str) -> dict[str, int]:
    """A follow-up, a steer and a follow-up queued behind the running call: their seqs."""
    seqs = {}
    for rid, text, when in (("f1", "first follow-up", "followUp"), ("s1", "a steer", "steer"),
                            ("f2", "second follow-up", "followUp")):
        seqs[rid] = (await d.submit(token, sid, rid, text, whenBusy=when))["seq"]
    return seqs


async def test_a_kill_inside_a_replay_safe_call_a_streaming_answer_and_a_command_keeps_each_queue_in_order(tmp_path):
    cwd = tmp_path / "serve"
    (cwd / "config").mkdir(parents=True)
    (cwd / "config" / "lens.jsonc").write_text(json.dumps(SCRIPT))

    async with serving(cwd, stderr_name="serve-0.err", timeout=10) as (serve, d):
        token = await d.pair("second-pass", strong=True)
        pid = (await d.project(token))["id"]
        nap, slow = (await d.session(token, pid))["id"], (await d.session(token, pid))["id"]
        # (a project of its own: the command holds its workspace's lock, not this one's)
        cmd = (await d.session(token, (await d.project(token, "q"))["id"]))["id"]

        await d.submit(token, nap, "nap", "take a nap")
        await d.wait_running_call(token, nap)
        nap_seqs = await _queue_three(d, token, nap)
        nap_view = await d.view(token, nap)
        assert [(q["requestId"], q["whenBusy"]) for q in nap_view["queued"]] == \
            [("s1", "steer"), ("f1", "followUp"), ("f2", "followUp")]
        started = _of(await d.events(token, nap), "tool.started")[0]
        r = await d.post(f"/sessions/{nap}/fork", token, {"seq": started["seq"]})
        assert r.status_code == 201, r.text
        fork = r.json()
        assert [it.get("call", {}).get("status") for it in fork["items"]] == [None, "interrupted"]

        await d.submit(token, cmd, "run", "run the slow one")
        await d.wait_running_call(token, cmd)
        cmd_seqs = await _queue_three(d, token, cmd)
        r = await d.post(f"/sessions/{cmd}/inputs/f2/steer", token)  # re-queued as a steer before the kill
        assert r.json() == {"requestId": "f2", "status": "queued", "whenBusy": "steer"}

        async with d.sse(token, params={"session": slow}) as stream:
            await d.submit(token, slow, "slow", "answer slowly")
            delta = await stream.until(lambda m: m.event == "model.delta")
            assert delta.json()["text"] == "alpha "
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            assert await serve.proc.wait() == -signal.SIGKILL

    async with serving(cwd, stderr_name="serve-1.err", timeout=10) as (serve, d):
        # The replay-safe call runs again: the same call, still running, not interrupted; the
        # queue behind it is the one acknowledged before the kill.
        view = await d.wait_running_call(token, nap)
        assert view["items"] == nap_view["items"] and view["queued"] == nap_view["queued"]
        events = await d.events(token, nap)
        assert len(_of(events, "tool.started")) == 1 and not _of(events, "tool.finished")
        for rid, seq in nap_seqs.items():
            assert await d.submit(token, nap, rid, "sent again") == {"requestId": rid, "seq": seq, "duplicate": True}
        r = await d.post(f"/sessions/{nap}/inputs/f2/withdraw", token)
        assert r.json() == {"requestId": "f2", "status": "withdrawn", "text": "second follow-up"}
        r = await d.post(f"/sessions/{nap}/inputs/f1/steer", token)
        assert r.json() == {"requestId": "f1", "status": "queued", "whenBusy": "steer"}
        assert [(q["requestId"], q["whenBusy"]) for q in (await d.view(token, nap))["queued"]] == \
            [("f1", "steer"), ("s1", "steer")]  # (steers in submission order)
        r = await d.post(f"/sessions/{nap}/abort", token)
        assert r.json() == {"aborted": True, "withdrawn": ["f1", "s1"]}
        await d.wait_idle(token, nap)
        assert len(_of(await d.events(token, nap), "tool.finished")) == 1

        # The fork made inside that call before the kill: idle, its call interrupted, nothing run.
        assert await d.view(token, fork["id"]) == fork
        assert [e["kind"] for e in await d.events(token, fork["id"])] == ["session.created"]

        # The answer cut by the kill is asked again; the first attempt's text is not kept.
        async def asked_again() -> list[dict[str, Any]] | None:
            asked = _of(await d.events(token, slow), "model.requested")
            return asked if len(asked) == 2 else None

        asked = await wait_until(asked_again, what="the request asked again")
        assert [e["body"]["attempt"] for e in asked] == [1, 2]
        async with d.sse(token, params={"session": slow}) as stream:
            await stream.until(lambda m: m.event in ("model.delta", "model.partial") and "alpha" in m.json()["text"])
        r = await d.post(f"/sessions/{slow}/abort", token)
        assert r.json() == {"aborted": True, "withdrawn": []}
        view = await d.wait_idle(token, slow)
        assert [(it["role"], it["text"], it.get("status")) for it in view["items"]] == [
            ("user", "answer slowly", None), ("assistant", "alpha ", "aborted")]

        # The command is interrupted (not run again); the steers (one re-queued as a steer before
        # the kill) go into its task after the round, then the follow-up runs a task of its own.
        await d.wait_idle(token, cmd, timeout=20)
        events = await d.events(token, cmd)
        [done] = _of(events, "tool.finished")
        assert (done["body"]["name"], done["body"]["status"], done["body"]["error_code"]) == (
            "run_command", "interrupted", "INTERRUPTED")
        submitted = {e["request_id"]: e["seq"] for e in _of(events, "input.submitted")}
        assert {rid: submitted[rid] for rid in cmd_seqs} == cmd_seqs
        placed = [(e["body"]["input_request_id"], e["task_id"]) for e in _of(events, "input.placed")]
        tasks = [e["task_id"] for e in _of(events, "task.started")]
        assert placed == [("run", tasks[0]), ("s1", tasks[0]), ("f2", tasks[0]), ("f1", tasks[1])]
        assert done["seq"] < _of(events, "input.placed")[1]["seq"]
        assert not (cwd / "workspaces" / "q" / "done.txt").exists()


# --------------------------------------------------------------------------- F-ACT-6

CATALOG = {"providers": [
    {"id": "faux", "protocol": "faux", "models": [{"id": "m1"}]},
    {"id": "off", "protocol": "faux", "enabled": False, "models": [{"id": "x"}]},
    {"id": "keyed", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1",
     "apiKeyEnv": "LENS_SECOND_PASS_UNSET_KEY", "models": [{"id": "k"}]},
], "defaultModel": "faux/m1"}


async def test_a_model_no_provider_can_serve_is_refused_by_its_code_at_patch_and_at_creation(daemon_factory, monkeypatch):
    monkeypatch.delenv("LENS_SECOND_PASS_UNSET_KEY", raising=False)
    d = await daemon_factory(config=CATALOG)
    token = await d.pair("catalog", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    before = await d.events(token, sid)
    sessions = len((await d.get("/sessions", token)).json()["sessions"])
    for model, code, named in (("off/x", "PROVIDER_DISABLED", "'off'"),
                               ("keyed/k", "PROVIDER_KEY_REQUIRED", "LENS_SECOND_PASS_UNSET_KEY"),
                               ("nope/x", "MODEL_UNKNOWN", "'nope'"), ("faux/m9", "MODEL_UNKNOWN", "m9")):
        r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": model})
        assert (r.status_code, error_of(r)) == (422, code), (model, r.text)
        assert named in r.json()["error"]["message"], r.text
        r = await d.post("/sessions", token, {"projectId": pid, "model": model})
        assert (r.status_code, error_of(r)) == (422, code), (model, r.text)
    assert await d.events(token, sid) == before
    assert len((await d.get("/sessions", token)).json()["sessions"]) == sessions
    assert (await d.view(token, sid))["model"] == "faux/m1"


HELD = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1"}, {"id": "m2"}], "script": [
    {"when": "hold", "text": "held", "delayMs": NAP}]}], "defaultModel": "faux/m1"}


async def test_a_request_asked_again_after_a_restart_takes_the_configuration_sent_while_it_was_in_flight(
        daemon_factory):
    # "applies from the next model request": the request cut by the stop is asked again at the
    # next start as a request of its own (attempt 2), so a change sent while it was in flight
    # applies to it; the cut one stays as it was sent.
    d = await daemon_factory(config=HELD)
    token = await d.pair("held", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hold")

    async def requested(daemon: Daemon, count: int) -> list[dict[str, Any]] | None:
        asked = _of(await daemon.events(token, sid), "model.requested")
        return asked if len(asked) == count else None

    await wait_until(lambda: requested(d, 1), what="the request in flight")
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "high"})
    assert r.status_code == 200, r.text
    await stop_daemon(d)
    d2 = await daemon_factory(config=HELD, root=d.root)
    asked = await wait_until(lambda: requested(d2, 2), what="the request asked again")
    assert [(e["body"]["attempt"], e["body"]["model"], e["body"]["thinking_level"]) for e in asked] == [
        (1, "m1", None), (2, "m2", "high")]
    r = await d2.post(f"/sessions/{sid}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": []}


# --------------------------------------------------------------------------- F-ACT-7

PLAN = {"items": [{"id": "1", "text": "plan", "status": "in_progress"}]}
FORKS = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "make a plan", "toolCalls": [{"name": "todo", "arguments": PLAN}]},
    {"when": "write notes", "toolCalls": [{"name": "edit_file", "arguments": {
        "path": "notes.txt", "mode": "create", "content": "alpha\n"}}]},
    {"when": "find the clock", "toolCalls": [{"name": "capability_search", "arguments": {"query": "system time"}}]},
]}], "defaultModel": "faux/faux-1", "tools": {"deferred": ["get_system_time"]}}


async def _fork(d: Daemon, token: str, sid: str, seq: int) -> dict[str, Any]:
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": seq})
    assert r.status_code == 201, (seq, r.text)
    return r.json()


async def test_a_fork_at_a_calls_result_holds_what_that_result_recorded(daemon_factory):
    # A call's tool.finished is written in one transaction with what its result records: the todo
    # list, the file edit (and its copies), the capabilities it loaded. A fork at that
    # tool.finished showed the call ok ("todo list updated", "created notes.txt", "loaded ...")
    # while the fork's todo list, file history (revert_call: NOTHING_TO_REVERT) and loaded tools
    # were those from before the call: a state the source never had.
    d = await daemon_factory(config=FORKS)
    token = await d.pair("forks", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    for rid, text in (("r1", "make a plan"), ("r2", "write notes"), ("r3", "find the clock")):
        await d.submit(token, sid, rid, text)
        await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    finished = {e["body"]["name"]: e for e in events if e["kind"] == "tool.finished"}
    assert set(finished) == {"todo", "edit_file", "capability_search"}
    assert all(e["body"]["status"] == "ok" for e in finished.values())

    fork = await _fork(d, token, sid, finished["todo"]["seq"])
    assert fork["todos"] == PLAN["items"], fork["todos"]
    [record] = [e for e in events if e["kind"] == "todo.updated"]
    assert fork["forkedFrom"] == {"sessionId": sid, "seq": record["seq"]}  # (the write's last event)

    fork = await _fork(d, token, sid, finished["edit_file"]["seq"])
    [edited] = [e for e in events if e["kind"] == "file.edited"]
    assert fork["forkedFrom"]["seq"] == edited["seq"]
    # the fork can undo the edit it inherited (its file history holds it)
    call_id = finished["edit_file"]["body"]["call_id"]
    body = await run_tool(d, token, fork["id"], "undo", "revert_call", {"call_id": call_id})
    assert body["status"] == "ok", body
    assert not (d.root / "workspaces" / "p" / "notes.txt").exists()
    # a fork at the copies the edit stored (inside that write) is made at its end too
    stored = [e for e in events if e["kind"] == "artifact.stored"
              and finished["edit_file"]["seq"] < e["seq"] < edited["seq"]]
    assert stored  # (the created file's copy)
    for e in stored:
        fork = await _fork(d, token, sid, e["seq"])
        assert fork["forkedFrom"]["seq"] == edited["seq"], fork["forkedFrom"]

    fork = await _fork(d, token, sid, finished["capability_search"]["seq"])
    inventory = (await d.get("/tools/inventory", token, params={"session": fork["id"]})).json()
    assert "get_system_time" in inventory["loaded"], inventory["loaded"]

    # a fork at any other event is made where it was asked, as before
    for e in events:
        if e["kind"] in ("tool.started", "model.responded", "input.placed", "task.finished"):
            assert (await _fork(d, token, sid, e["seq"]))["forkedFrom"]["seq"] == e["seq"]


PLANS = 20  # (more todo lists than any fixed window read past a result's tool.finished)
PROGRAM = "\n".join([f"for n in range({PLANS}):",
                      "    todo(items=[{'id': str(n), 'text': 'step ' + str(n), 'status': 'pending'}])",
                      "print('planned')"])
MANY = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "plan by a program", "toolCalls": [{"name": "programmatic_tool_run", "arguments": {"code": PROGRAM}}]},
]}], "defaultModel": "faux/faux-1", "localPtc": {}}


async def test_a_fork_inside_a_programs_long_write_is_made_at_its_end(daemon_factory):
    # A program that updates the todo list 20 times writes 20 todo.updated after its tool.finished,
    # all in one write. A fork there read only 16 events on: it was made mid-write, its todo list
    # one the source never held with that result. A fork at one of the records themselves was made
    # where it was asked, likewise mid-write.
    d = await daemon_factory(config=MANY)
    token = await d.pair("forks", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "plan by a program")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [finished] = [e for e in events if e["kind"] == "tool.finished"]
    assert finished["body"]["status"] == "ok", finished
    records = [e for e in events if e["kind"] == "todo.updated"]
    assert len(records) == PLANS and all(e["body"]["call_id"] == finished["body"]["call_id"] for e in records)
    last = records[-1]
    assert [e["seq"] for e in records] == list(range(finished["seq"] + 1, last["seq"] + 1))  # (one write)
    for at in (finished, records[0], records[PLANS // 2]):
        fork = await _fork(d, token, sid, at["seq"])
        assert fork["forkedFrom"] == {"sessionId": sid, "seq": last["seq"]}, (at["kind"], at["seq"])
        assert [item["id"] for item in fork["todos"]] == [str(PLANS - 1)], fork["todos"]
    # (the write's last record, and anything after the write, are forked where asked)
    assert (await _fork(d, token, sid, last["seq"]))["forkedFrom"]["seq"] == last["seq"]
    after = next(e for e in events if e["seq"] > last["seq"])
    assert (await _fork(d, token, sid, after["seq"]))["forkedFrom"]["seq"] == after["seq"]


# --------------------------------------------------------------------------- F-ACT-4, the README's list

REPLAY_SAFE = {"read_file", "edit_file", "patch_file", "view_image", "history_search", "history_read",
               "capability_search", "skill", "subagent", "todo", "get_system_time", "sleep_milliseconds",
               "web_fetch", "web_search"}
NOT_REPLAY_SAFE = {"run_command", "revert_call", "job", "ask_user", "programmatic_tool_run"}


async def test_the_tools_the_readme_says_run_again_after_a_kill_are_those_the_inventory_marks(daemon, strong):
    r = await daemon.get("/tools/inventory", strong)
    assert r.status_code == 200, r.text
    marked = {t["name"]: t["replaySafe"] for t in r.json()["tools"]}
    # (programmatic_tool_run is registered when localPtc is configured: not replay-safe either)
    assert REPLAY_SAFE | NOT_REPLAY_SAFE - {"programmatic_tool_run"} <= set(marked), set(marked)
    assert {n for n, safe in marked.items() if safe} == REPLAY_SAFE
    assert not any(marked[n] for n in NOT_REPLAY_SAFE if n in marked)
    # The README's sentence, split at its two lists: each names exactly its own half of the tools
    # (a tool on the wrong side fails, not only a tool left out).
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    start, turn = readme.index("runs again the calls it cut"), readme.index("records the others")
    end = readme.index(")", turn)  # (the list's close: `interrupted` follows it)
    assert start < turn < end
    run_again, recorded = readme[start:turn], readme[turn:end]
    assert set(re.findall(r"`([a-z_]+)`", run_again)) == REPLAY_SAFE, run_again
    assert set(re.findall(r"`([a-z_]+)`", recorded)) == NOT_REPLAY_SAFE, recorded
