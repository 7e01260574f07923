"""F-ACT-1/2 on the real daemon: a session passivated while an SSE client watches it, and
``projections.db`` (snapshots and read models: derived data) deleted while the daemon is stopped
and while it runs — each with the outcome a user can see: the same views, lists and searches,
the stream without gap or duplicate, and a clear word where something cannot go on."""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

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


async def test_projections_deleted_while_the_daemon_is_stopped_are_rebuilt_the_same(daemon_factory):
    d = await daemon_factory(config=IDLE)
    token, project_id, sid = await setup(d)
    for i, word in enumerate(("alpha", "bravo")):
        await d.submit(token, sid, f"r{i}", f"{word} words")
        await d.wait_idle(token, sid)
    before = await seen(d, token, project_id, sid)
    await stop_daemon(d)
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
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
    assert await seen(d, token, project_id, sid, file=False) == answers  # (the daemon's copy is untouched)

    await stop_daemon(d)
    d2 = await daemon_factory(config=IDLE)
    assert await seen(d2, token, project_id, sid) == answers
    kept = projection_dump(d2.data_dir)
    await run_lens(d2.root, "log", "rebuild", "--data", str(d2.data_dir))
    assert projection_dump(d2.data_dir) == kept  # (what the start rebuilt is what a rebuild makes)
