"""F-ACT-7 as a client drives it: a fork asked at a call's ``tool.finished`` holds what that
result recorded with it (the daemon on a loopback port 0, the ``faux`` provider, the real
executor)."""

from __future__ import annotations

from typing import Any

from .conftest import Daemon, run_tool

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
    # while the fork's todo list, changes and loaded tools were those from before the call: a
    # state the source never had.
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
              and finished["edit_file"]["seq"] < e["seq"]]
    for e in stored:
        if e["seq"] < edited["seq"]:
            fork = await _fork(d, token, sid, e["seq"])
            assert fork["forkedFrom"]["seq"] == edited["seq"], fork["forkedFrom"]

    fork = await _fork(d, token, sid, finished["capability_search"]["seq"])
    inventory = (await d.get("/tools/inventory", token, params={"session": fork["id"]})).json()
    assert "get_system_time" in inventory["loaded"], inventory["loaded"]

    # a fork at any other event is made where it was asked, as before
    for e in events:
        if e["kind"] in ("tool.started", "model.responded", "input.placed", "task.finished"):
            assert (await _fork(d, token, sid, e["seq"]))["forkedFrom"]["seq"] == e["seq"]
