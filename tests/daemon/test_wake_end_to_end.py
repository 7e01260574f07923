"""F-ACT-1/2 on the real daemon: a session passivated while an SSE client watches it, and
``projections.db`` (snapshots and read models: derived data) deleted while the daemon is stopped
and while it runs — each with the outcome a user can see: the same views, lists and searches,
the stream without gap or duplicate, and a clear word where something cannot go on."""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import apsw
import pytest

from runtime.actor import SessionActor

from .conftest import Daemon, projection_dump, projections_caught_up, run_lens, stop_daemon, wait_until

IDLE = {"sessions": {"idleSeconds": 0.1}}


def live_actors(sid: str) -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, SessionActor) and o.session_id == sid and not o.passivated)


async def passivated(sid: str) -> None:
    async def gone() -> bool:
        gc.collect()
        return live_actors(sid) == 0

    await wait_until(gone, what=f"session {sid} passivated")


async def setup(d: Daemon) -> tuple[str, str, str]:
    token = await d.pair("wake-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    return token, project["id"], sid


async def seen(d: Daemon, token: str, project_id: str, sid: str, *, file: bool = True) -> dict[str, Any]:
    """What a client reads of the session and its project (``file``: wait until projections.db
    at its path is caught up; the routes themselves wait for the projector's position)."""
    if file:
        await projections_caught_up(d)
    view = await d.view(token, sid)
    lists = (await d.get("/sessions", token, params={"projectId": project_id})).json()
    found = {}
    for word in ("alpha", "bravo", "charlie"):
        r = await d.post("/history/search", token, {"projectId": project_id, "query": word})
        assert r.status_code == 200, r.text
        found[word] = r.json()
    return {"view": view, "sessions": lists, "search": found}


async def test_a_session_passivated_under_a_watching_sse_client_wakes_and_its_stream_goes_on(daemon_factory):
    d = await daemon_factory(config=IDLE)
    token, _project, sid = await setup(d)
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    async with d.sse(token, params={"session": sid}, last_event_id=0) as stream:
        first = [e["seq"] for e in await d.events(token, sid)]
        await stream.until(lambda m: m.id == first[-1])
        await passivated(sid)  # (the stream reads the log, not the actor)
        await d.submit(token, sid, "r2", "after the passivation")
        await d.wait_idle(token, sid)
        every = [e["seq"] for e in await d.events(token, sid)]
        await stream.until(lambda m: m.id == every[-1])
        assert stream.seqs == every  # no gap, no duplicate across the wake-up
    view = await d.view(token, sid)
    assert [it.get("text") for it in view["items"] if it.get("role") == "assistant"] == [
        "(faux) You said: hello", "(faux) You said: after the passivation"]


@pytest.mark.parametrize("deleted", [("projections.db",), ("projections.db", "projections.db-wal", "projections.db-shm")],
                         ids=["the file alone", "with its -wal and -shm"])
async def test_projections_deleted_while_the_daemon_is_stopped_are_rebuilt_the_same(daemon_factory, deleted):
    d = await daemon_factory(config=IDLE)
    token, project_id, sid = await setup(d)
    for i, word in enumerate(("alpha", "bravo")):
        await d.submit(token, sid, f"r{i}", f"{word} words")
        await d.wait_idle(token, sid)
    before = await seen(d, token, project_id, sid)
    await stop_daemon(d)
    for name in deleted:
        (d.data_dir / name).unlink(missing_ok=True)
    d2 = await daemon_factory(config=IDLE)
    assert await seen(d2, token, project_id, sid) == before
    await d2.submit(token, sid, "r9", "charlie words")  # (woken by a full replay: no snapshot is left)
    view = await d2.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "(faux) You said: charlie words"


async def test_projections_deleted_while_the_daemon_runs_go_on_and_are_rebuilt_at_the_next_start(
        daemon_factory, caplog: pytest.LogCaptureFixture):
    """What a user sees: the daemon answers as before (it keeps the file it opened) and says in
    its log what happened; `lens log` refuses the data directory with a clear code instead of
    "disk I/O error" (and leaves no empty projections.db behind); the next start rebuilds."""
    d = await daemon_factory(config=IDLE)
    token, project_id, sid = await setup(d)
    await d.submit(token, sid, "r0", "alpha words")
    await d.wait_idle(token, sid)
    with caplog.at_level(logging.WARNING, logger="lens.projections"):
        os.unlink(d.data_dir / "projections.db")
        await d.submit(token, sid, "r1", "bravo words")
        await d.wait_idle(token, sid)
        await passivated(sid)
        await d.submit(token, sid, "r2", "charlie words")  # (a wake-up after the deletion)
        await d.wait_idle(token, sid)
        answers = await seen(d, token, project_id, sid, file=False)
        assert [w for w in ("alpha", "bravo", "charlie") if answers["search"][w]["results"]] == ["alpha", "bravo", "charlie"]
    warned = [r.getMessage() for r in caplog.records if "deleted or replaced while the daemon runs" in r.getMessage()]
    assert len(warned) == 1 and "projections.db" in warned[0]

    out = await run_lens(d.root, "log", "rebuild", "--data", str(d.data_dir), check=False)
    assert out.returncode != 0
    assert "PROJECTIONS_DELETED_WHILE_OPEN" in out.stderr and "Stop that daemon" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "disk I/O error" not in out.stderr
    assert not (d.data_dir / "projections.db").exists()
    out = await run_lens(d.root, "log", "stats", "--data", str(d.data_dir))  # (stats need no file: in memory)
    assert "deleted while a daemon still has it open" in out.stderr and "computed in memory" in out.stderr
    assert not (d.data_dir / "projections.db").exists()
    assert await seen(d, token, project_id, sid, file=False) == answers  # (the daemon's copy is untouched)

    await stop_daemon(d)
    d2 = await daemon_factory(config=IDLE)
    assert await seen(d2, token, project_id, sid) == answers
    kept = projection_dump(d2.data_dir)
    await run_lens(d2.root, "log", "rebuild", "--data", str(d2.data_dir))
    assert projection_dump(d2.data_dir) == kept  # (what the start rebuilt is what a rebuild makes)


SCRIPTED = {
    "providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                   "script": [{"when": "Summarize the conversation so far", "text": "SUMMARY so far",
                               "inputTokens": 40, "outputTokens": 5},
                              {"when": "call a tool", "toolCalls": [{"name": "get_system_time", "arguments": {}}],
                               "inputTokens": 10, "outputTokens": 2, "cacheReadTokens": 3},
                              {"when": "delegate", "toolCalls": [{"name": "subagent",
                                                                  "arguments": {"prompt": "SUB call a tool"}}]}]}],
    "defaultModel": "faux/m1",
    "sessions": {"idleSeconds": 0.1, "snapshotEvery": 3},
}


async def test_a_session_woken_from_its_snapshots_reads_as_its_full_replay_after_every_step(daemon_factory):
    """Each step of a session (tool rounds, a subagent, todos, a snip, an include, a compaction,
    usage with counts reported and not) is followed by a passivation and a wake-up from the latest
    snapshot plus its tail; what the client reads then — the view and the Working Context — is
    what a daemon that replays the whole log (projections.db deleted) reads."""
    d = await daemon_factory(config=SCRIPTED)
    token, _project_id, sid = await setup(d)

    async def read(daemon: Daemon) -> dict[str, Any]:
        ctx = await daemon.get(f"/sessions/{sid}/context", token)
        assert ctx.status_code == 200, ctx.text
        return {"view": await daemon.view(token, sid), "context": ctx.json()}

    async def step(request_id: str | None = None, text: str | None = None, edit: tuple[str, Any] | None = None) -> None:
        if request_id is not None:
            await d.submit(token, sid, request_id, text)
        if edit is not None:
            r = await d.post(f"/sessions/{sid}/{edit[0]}", token, edit[1])
            assert r.status_code == 200, r.text
        await d.wait_idle(token, sid)
        await passivated(sid)

    await step("r1", "call a tool")
    await step("r2", '/tool todo {"items": [{"id": "a", "text": "step one", "status": "in_progress"}]}')
    await step("r3", "delegate it")
    await step("r4", "hello there")
    view = await d.view(token, sid)
    call = next(v for v in view["items"] if v["role"] == "tool_call")
    await step(edit=("context/snip", {"itemIds": [call["result"]["itemId"]]}))
    await step(edit=("context/include", {"callId": call["call"]["callId"]}))
    await step(edit=("compact", None))
    await step("r5", "after the summary")
    woken = await read(d)
    assert woken["view"]["todos"] and woken["view"]["usage"]
    assert any(it["role"] == "summary" for it in woken["view"]["items"])
    conn = apsw.Connection(str(d.data_dir / "projections.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:  # (the wake-ups above had snapshots to start from)
        assert conn.execute("SELECT seq FROM snapshots WHERE session_id = ?", (sid,)).fetchall()
    finally:
        conn.close()
    await stop_daemon(d)
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (d.data_dir / name).unlink(missing_ok=True)
    d2 = await daemon_factory(config=SCRIPTED)
    assert await read(d2) == woken
