"""An agent turn end to end: a scripted faux model edits a file and then reverts the edit, through
the session actor, the Core workspace tools, the pool and a real executor child process."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from events.store import EventStore
from runtime.providers.faux import FauxProvider, FauxToolCall, FauxTurn
from runtime.supervisor import Supervisor
from tools.artifacts import ArtifactStore

from .conftest import agent_runtime, run_to_idle as _run

UNTOUCHED = "UNTOUCHED-LINE-7f3a9c"  # file bytes the edit does not name: must never reach the log
ORIGINAL = (f"{UNTOUCHED} keep me\n" * 40 + "greeting = 'hello'\n").encode()
EDITED = ORIGINAL.replace(b"'hello'", b"'goodbye'")


async def test_an_agent_edits_then_reverts_through_the_real_executor(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_bytes(ORIGINAL)
    script = [
        FauxTurn(when="please edit", tool_calls=[FauxToolCall("edit_file", {
            "path": "app.py", "mode": "edit", "edits": [{"old_string": "'hello'", "new_string": "'goodbye'"}]})]),
    ]
    async with agent_runtime(tmp_path, ws, script) as (sup, store, faux, _pool):
        await _scenario(sup, store, faux, ws, ArtifactStore(tmp_path / "data" / "artifacts"))


async def _scenario(sup: Supervisor, store: EventStore, faux: FauxProvider, ws: Path,
                    artifacts: ArtifactStore) -> None:
    sid = await sup.create_session("proj")
    await _run(sup, sid, "r1", "please edit app.py")
    assert (ws / "app.py").read_bytes() == EDITED

    events = await store.read_events(after=0, limit=10_000, session_id=sid)
    started = [e for e in events if e.kind == "tool.started" and e.event.name == "edit_file"]
    assert len(started) == 1
    edit_call = started[0].event.call_id
    finished = [e for e in events if e.kind == "tool.finished" and e.event.call_id == edit_call]
    assert finished[0].event.status == "ok", finished[0].event.content
    assert finished[0].event.structured_content["changed"] is True

    # The model now reverts that call by its id.
    faux.script.append(FauxTurn(when="please revert", tool_calls=[FauxToolCall("revert_call", {"call_id": edit_call})]))
    await _run(sup, sid, "r2", "please revert it")
    assert (ws / "app.py").read_bytes() == ORIGINAL

    events = await store.read_events(after=0, limit=10_000, session_id=sid)
    kinds = [e.kind for e in events]
    edited = [e.event for e in events if e.kind == "file.edited"]
    reverted = [e.event for e in events if e.kind == "file.reverted"]
    assert len(edited) == 1 and len(reverted) == 1
    fe = edited[0]
    assert fe.call_id == edit_call and fe.path == "app.py"
    assert artifacts.get(fe.before_artifact_id) == ORIGINAL  # type: ignore[arg-type]
    assert artifacts.get(fe.after_artifact_id) == EDITED  # type: ignore[arg-type]
    assert reverted[0].reverted_call_id == edit_call and reverted[0].paths == ["app.py"]
    assert kinds.index("file.edited") < kinds.index("file.reverted")
    stored = {e.event.artifact_id for e in events if e.kind == "artifact.stored"}
    assert {fe.before_artifact_id, fe.after_artifact_id} <= stored

    # The log holds artifact ids, never the file's bytes: no event body carries the untouched text.
    for e in events:
        body = msgspec.json.encode(e.event)
        assert UNTOUCHED.encode() not in body, (e.kind, body[:200])

    # A second revert of the same call is refused (the edit is no longer pending).
    faux.script.append(FauxTurn(when="again", tool_calls=[FauxToolCall("revert_call", {"call_id": edit_call})]))
    await _run(sup, sid, "r3", "revert again")
    events = await store.read_events(after=0, limit=10_000, session_id=sid)
    last = [e.event for e in events if e.kind == "tool.finished"][-1]
    assert last.is_error and last.error_code == "NOTHING_TO_REVERT"
    assert (ws / "app.py").read_bytes() == ORIGINAL
    assert json.loads(json.dumps(last.structured_content))["error"]["code"] == "NOTHING_TO_REVERT"
