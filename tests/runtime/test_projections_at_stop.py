"""The daemon's projections at a graceful stop (F-LOG-5 beside F-ACT-4).

At SIGINT/SIGTERM the projections' updater is cancelled with the other services, while the event
store outlives them: an actor stopping still commits its last (shielded) appends. Those were left
unprojected until the next start, so ``projections.db`` did not match the log the daemon left (a
``lens log rebuild`` right after the stop gave other rows). ``ProjectionService.last_catch_up``,
which ``lens serve`` calls once the store has drained, folds them. The order of the daemon's stop
is reproduced here with the real store and service; nothing is mocked.
"""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import trio

from events import types as t
from events.schema import PROJECTIONS_DB
from events.store import Draft, EventStore
from runtime.projection_service import STOP_BUSY_WAIT_SECONDS, ProjectionService


def _positions(service: ProjectionService) -> set[int]:
    return {service.projector.position(name) for name in service.projector.projections}


async def _stop_with_late_appends(data: Path, store: EventStore, service: ProjectionService) -> None:
    async with trio.open_nursery() as root:
        await root.start(store.run)
        async with trio.open_nursery() as services:
            await services.start(service.run)
            await store.append(Draft(t.SessionNamed(name="before"), "p1", "s1"))
            await service.caught_up()
            services.cancel_scope.cancel()  # (the daemon's stop: the services end)
        # what an actor's shielded append commits as the services end
        for i in range(3):
            await store.append(Draft(t.SessionNamed(name=f"late-{i}"), "p1", "s1"))
        store.close_writer()


async def test_what_is_committed_after_the_updater_stops_is_folded_at_the_stop(tmp_path: Path) -> None:
    store = EventStore.open(tmp_path)
    service = ProjectionService(tmp_path, store)
    try:
        await _stop_with_late_appends(tmp_path, store, service)
        assert store.last_seq == 4
        assert _positions(service) == {1}  # (the updater had stopped: the late ones are not folded)
        await service.last_catch_up()
        assert _positions(service) == {4}
        assert service.error is None
        rows = await service.query("SELECT kind, events FROM stats_kinds")
        assert rows == [("session.named", 4)]
    finally:
        service.close()
        store.close()


async def test_a_stop_during_start_up_does_not_fold_at_the_end(tmp_path: Path) -> None:
    # A stop before the daemon serves ends its start-up at once (the first catch-up of a large
    # log can take a minute): the last catch-up does not start that fold again.
    store = EventStore.open(tmp_path)
    service = ProjectionService(tmp_path, store)
    try:
        await _stop_with_late_appends(tmp_path, store, service)
        service.stop()
        assert await service.last_catch_up() is None  # (behind, but no other process holds the file)
        assert _positions(service) == {1}
    finally:
        service.close()
        store.close()


async def test_a_stop_during_start_up_while_another_process_holds_projections_db_says_how_far_behind(
        tmp_path: Path) -> None:
    # A start held behind projections.db (a `lens log rebuild` beside it) and stopped before it
    # served: the catch-up is given up at once, as before, and the projections stay behind. It
    # said nothing of that; it now returns the graceful stop's line, with how far behind they are.
    store = EventStore.open(tmp_path)
    service = ProjectionService(tmp_path, store)
    holder = apsw.Connection(str(tmp_path / PROJECTIONS_DB))
    try:
        await _stop_with_late_appends(tmp_path, store, service)
        holder.execute("BEGIN IMMEDIATE")
        service.stop()
        began = time.monotonic()
        said = await service.last_catch_up()
        assert time.monotonic() - began < 1.0  # (nothing waited for: the busy handler gives up at once)
        assert said is not None and said.startswith("lens: the projections were left behind the log"), said
        assert "(folded to seq 1; the log ends at seq 4)" in said, said
        assert "projections.db is held by another process" in said and "did not wait for it" in said, said
        assert _positions(service) == {1}
    finally:
        holder.close()
        service.close()
        store.close()


async def test_a_graceful_stop_waits_briefly_for_a_projections_db_another_process_holds(tmp_path: Path) -> None:
    # A `lens log rebuild` beside the daemon holds projections.db in a write transaction: the last
    # catch-up waited SQLite's busy timeout (10 s) for it. Once the stop began (stopping()) it
    # waits at most STOP_BUSY_WAIT_SECONDS, then leaves the projections behind and says so.
    store = EventStore.open(tmp_path)
    service = ProjectionService(tmp_path, store)
    holder = apsw.Connection(str(tmp_path / PROJECTIONS_DB))
    try:
        await _stop_with_late_appends(tmp_path, store, service)
        holder.execute("BEGIN IMMEDIATE")
        service.stopping()
        began = time.monotonic()
        said = await service.last_catch_up()
        took = time.monotonic() - began
        assert STOP_BUSY_WAIT_SECONDS - 0.1 <= took < STOP_BUSY_WAIT_SECONDS + 1.5, took
        assert said is not None and "projections.db is held by another process" in said, said
        assert "(folded to seq 1; the log ends at seq 4)" in said, said  # (how far behind)
        assert _positions(service) == {1}
        holder.execute("ROLLBACK")
        # Let go: nothing is waited for, the projections catch up, nothing to say.
        assert await service.last_catch_up() is None
        assert _positions(service) == {4}
    finally:
        holder.close()
        service.close()
        store.close()
