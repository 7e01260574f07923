"""``revert_call`` of a call that is still running is refused with ``CALL_STILL_RUNNING``: its
edits are not all made, so a revert would undo some of them and the call would go on after it.
The calls that can be running beside a native ``revert_call`` are its own and those of the agents
it runs inside (a subagent's parent call). A program's revert of its own call stays allowed (see
``test_ptc.py``)."""

from __future__ import annotations

import json
from typing import Any

from .conftest import DaemonFactory, run_tool

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}


async def _start(daemon_factory: DaemonFactory) -> tuple[Any, str, str]:
    d = await daemon_factory(config=FAUX)
    token = await d.pair("revert-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    return d, token, sid


async def _next_call_id(d: Any, token: str, sid: str) -> str:
    """The faux model's id for the main agent's next call: call_<agent>_<answers so far>_<index>."""
    answers = [e for e in await d.events(token, sid) if e["kind"] == "model.responded" and e["agent_id"] == "main"]
    return f"call_main_{len(answers)}_0"


async def test_a_revert_of_its_own_running_call_is_refused_with_a_clear_code(daemon_factory: DaemonFactory) -> None:
    d, token, sid = await _start(daemon_factory)
    me = await _next_call_id(d, token, sid)
    body = await run_tool(d, token, sid, "r1", "revert_call", {"call_id": me})
    assert body["call_id"] == me
    assert body["error_code"] == "CALL_STILL_RUNNING", body
    assert f"call {me!r} is still running" in body["structured_content"]["error"]["message"]
    assert not [e for e in await d.events(token, sid) if e["kind"] == "file.reverted"]


async def test_a_subagent_reverting_the_call_it_runs_inside_is_refused(daemon_factory: DaemonFactory) -> None:
    d, token, sid = await _start(daemon_factory)
    ws = d.root / "workspaces" / "p"
    edited = await run_tool(d, token, sid, "r1", "edit_file", {"path": "a.txt", "mode": "create", "content": "a"})
    assert edited["status"] == "ok", edited
    parent = await _next_call_id(d, token, sid)
    prompt = f"/tool revert_call {json.dumps({'call_id': parent})}"
    await d.submit(token, sid, "r2", f"/tool subagent {json.dumps({'prompt': prompt})}")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [body] = [e["body"] for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == "subagent"]
    assert body["call_id"] == parent and body["status"] == "ok", body
    [sub] = [e["body"] for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == "revert_call"]
    assert sub["error_code"] == "CALL_STILL_RUNNING", sub
    # A finished call is reverted as before, by the same subagent tool.
    prompt = f"/tool revert_call {json.dumps({'call_id': edited['call_id']})}"
    await d.submit(token, sid, "r3", f"/tool subagent {json.dumps({'prompt': prompt})}")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    reverts = [e["body"] for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == "revert_call"]
    assert reverts[-1]["status"] == "ok", reverts[-1]
    assert not (ws / "a.txt").exists()
