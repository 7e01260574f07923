"""An agent turn end to end: a scripted faux model edits a file and then reverts the edit, through
the session actor, the Core workspace tools, the pool and a real executor child process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import trio

from events.store import EventStore
from projections.snapshots import SnapshotStore
from runtime.actor import ActorDeps
from runtime.providers.catalog import ProviderCatalog
from runtime.providers.faux import FauxProvider, FauxToolCall, FauxTurn
from runtime.supervisor import Supervisor
from tools.artifacts import ArtifactStore
from tools.registry import builtin_tools
from tools.workspace_tools import workspace_tools

from .conftest import run_to_idle as _run, running_pool

UNTOUCHED = "UNTOUCHED-LINE-7f3a9c"  # file bytes the edit does not name: must never reach the log
ORIGINAL = (f"{UNTOUCHED} keep me\n" * 40 + "greeting = 'hello'\n").encode()
EDITED = ORIGINAL.replace(b"'hello'", b"'goodbye'")


class Ids:
    def __init__(self) -> None:
        self.n: dict[str, int] = {}

    def __call__(self, prefix: str) -> str:
        self.n[prefix] = self.n.get(prefix, 0) + 1
        return f"{prefix}_{self.n[prefix]:04d}"


async def test_an_agent_edits_then_reverts_through_the_real_executor(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_bytes(ORIGINAL)
    data_dir = tmp_path / "data"
    artifacts = ArtifactStore(data_dir / "artifacts")
    faux = FauxProvider("faux", [
        FauxTurn(when="please edit", tool_calls=[FauxToolCall("edit_file", {
            "path": "app.py", "mode": "edit", "edits": [{"old_string": "'hello'", "new_string": "'goodbye'"}]})]),
    ])
    store = EventStore.open(data_dir)
    snapshots = SnapshotStore.open(store.data_dir)
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as root:
                await root.start(store.run)
                try:
                    async with running_pool(tmp_path / "executors", {"proj": ws}) as pool:
                        tools = builtin_tools(workspace_tools(pool, artifacts))
                        deps = ActorDeps(store, snapshots, ProviderCatalog({"faux": faux}), tools, Ids())
                        sup = Supervisor(deps)
                        async with trio.open_nursery() as actors:
                            await actors.start(sup.run)
                            await _scenario(sup, store, faux, ws, artifacts)
                            actors.cancel_scope.cancel()
                finally:
                    store.close_writer()
    finally:
        store.close()
        snapshots.close()


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
