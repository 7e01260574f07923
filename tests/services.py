"""Lens's services run for the length of a test's block: any service that reports that it is
ready (:func:`started`) and the real supervisor over an open store (:func:`supervised`)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

import trio

from events.store import EventStore
from projections.snapshots import SnapshotStore
from runtime.actor import ActorDeps
from runtime.providers.catalog import ProviderCatalog
from runtime.supervisor import Supervisor
from tests.idgen import IdGen
from tools.artifacts import ArtifactStore
from tools.base import ToolRegistry


@asynccontextmanager
async def started(run: Callable[..., Awaitable[Any]]) -> AsyncIterator[None]:
    """``run`` (a service that calls ``task_status.started()`` once it is ready) started in its own
    nursery, and cancelled when the block ends."""
    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def supervised(store: EventStore, catalog: ProviderCatalog, tools: ToolRegistry, ids: IdGen, *,
                     snapshot_every: int = 500, context: Any = None, artifacts: ArtifactStore | None = None,
                     stopping: trio.Event | None = None) -> AsyncIterator[Supervisor]:
    """A :class:`Supervisor` over ``store`` (its writer running) with snapshots beside the log,
    its actors in their own nursery. When the block ends the actors are cancelled and the
    snapshots closed; the store stays open. ``artifacts``: the store whose leases hold what a
    call stores until its result commits (the daemon's; None: no leases); ``stopping``: the
    daemon's stop event (``ActorDeps.stopping``: set, the block's end is the daemon's stop)."""
    snapshots = SnapshotStore.open(store.data_dir)
    try:
        extra: dict[str, Any] = {} if context is None else {"context": context}  # (config ``context``; default when None)
        if artifacts is not None:
            extra["artifacts"] = artifacts
        if stopping is not None:
            extra["stopping"] = stopping
        sup = Supervisor(ActorDeps(store, snapshots, catalog, tools, ids, snapshot_every=snapshot_every, **extra))
        async with started(sup.run):
            yield sup
    finally:
        snapshots.close()
