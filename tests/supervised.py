"""The real supervisor over an open store, for tests that assemble their own runtime."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio

from events.store import EventStore
from projections.snapshots import SnapshotStore
from runtime.actor import ActorDeps
from runtime.providers.catalog import ProviderCatalog
from runtime.supervisor import Supervisor
from tests.idgen import IdGen
from tools.base import ToolRegistry


@asynccontextmanager
async def supervised(store: EventStore, catalog: ProviderCatalog, tools: ToolRegistry, ids: IdGen, *,
                     snapshot_every: int = 500) -> AsyncIterator[Supervisor]:
    """A :class:`Supervisor` over ``store`` (its writer running) with snapshots beside the log,
    its actors in their own nursery. When the block ends the actors are cancelled and the
    snapshots closed; the store stays open."""
    snapshots = SnapshotStore.open(store.data_dir)
    try:
        sup = Supervisor(ActorDeps(store, snapshots, catalog, tools, ids, snapshot_every=snapshot_every))
        async with trio.open_nursery() as actors:
            await actors.start(sup.run)
            try:
                yield sup
            finally:
                actors.cancel_scope.cancel()
    finally:
        snapshots.close()
