"""Fixtures of the session/actor suite: a real store and supervisor driven by a scripted faux model.

``rt`` is a running runtime (``events.db`` + ``projections.db`` in ``tmp_path``, the real
:class:`~runtime.supervisor.Supervisor`, builtin tools, a :class:`FauxProvider` whose ``script`` a
test may replace before it submits). ``runtime_factory`` opens more of them (custom tools,
snapshot cadence, idle timeout, a second provider) and reopens one on the same data directory to
simulate a daemon restart.

Ordering without sleeps: the tests hold a run busy with ``sleep_milliseconds`` or a faux
``delay_ms`` under ``autojump_clock``. The autojump clock jumps whenever the run loop is idle,
which includes waiting for a store thread, so a virtual sleep alone does not hold a run across a
test's own appends. Inside ``with frozen(autojump_clock):`` virtual time stands still: a sleep
in the run holds until the block ends (nothing really sleeps either way). Where a test must
*observe* that the run reached some point (a tool running, an input placed), it polls
:meth:`Runtime.until`, which asks the actor for its in-memory state.
"""

from __future__ import annotations

import json
import math
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

import pytest
import trio
import trio.testing

from events import types as t
from events.reader import LogReader, StoredEvent
from events.secrets import Secrets
from events.store import EventStore
from projections.session_state import SessionState
from projections.snapshots import SnapshotStore
from runtime.actor import ActorDeps, GetState, Submit, WaitIdle
from runtime.config import ContextConfig, ModelConfig
from runtime.errors import ActorUnavailable, SessionQuarantined
from runtime.providers.catalog import ProviderCatalog
from runtime.providers.faux import FauxProvider, FauxToolCall, FauxTurn
from runtime.projection_service import ProjectionService
from runtime.supervisor import Supervisor
from tests.idgen import IdGen
from tools.base import ToolRegistry, ToolSpec
from tools.registry import builtin_tools


@contextmanager
def frozen(clock: trio.testing.MockClock) -> Iterator[None]:
    """Stop the mock clock from jumping: virtual sleeps in the run hold until the block ends."""
    clock.autojump_threshold = math.inf
    try:
        yield
    finally:
        clock.autojump_threshold = 0


def sleep_call(ms: int) -> FauxToolCall:
    return FauxToolCall("sleep_milliseconds", {"milliseconds": ms})


def text(s: str) -> list[t.ContentPart]:
    return [t.TextPart(s)]


@dataclass
class Runtime:
    data_dir: Path
    store: EventStore
    snapshots: SnapshotStore
    deps: ActorDeps
    sup: Supervisor
    faux: FauxProvider
    ids: IdGen
    providers: dict[str, FauxProvider] = field(default_factory=dict)
    service: ProjectionService | None = None  # (``open_runtime(projections=True)``: the daemon's)

    async def call(self, session_id: str, command: Any) -> Any:
        return await self.sup.call(session_id, command)

    async def session(self, project_id: str = "p1", **kw: Any) -> str:
        return await self.sup.create_session(project_id, **kw)

    async def state(self, session_id: str) -> SessionState:
        return await self.sup.call(session_id, GetState())

    async def submit(self, session_id: str, request_id: str, message: str, when_busy: t.WhenBusy = "followUp") -> dict:
        return await self.sup.call(session_id, Submit(request_id, text(message), when_busy))

    async def idle(self, session_id: str) -> SessionState:
        # No fail_after here: under autojump_clock every deadline may fire while a store thread
        # works, so a timeout would measure nothing.
        await self.sup.call(session_id, WaitIdle())
        return await self.state(session_id)

    async def run_to_idle(self, session_id: str, request_id: str, message: str) -> SessionState:
        await self.submit(session_id, request_id, message)
        return await self.idle(session_id)

    async def events(self, session_id: str | None = None) -> list[StoredEvent]:
        out: list[StoredEvent] = []
        after = 0
        while True:
            page = await self.store.read_events(after=after, limit=1000, session_id=session_id)
            if not page:  # (a page may be cut short by its byte budget)
                return out
            out.extend(page)
            after = page[-1].seq

    async def kinds(self, session_id: str) -> list[str]:
        return [e.kind for e in await self.events(session_id)]

    async def quarantine_of(self, session_id: str) -> SessionQuarantined:
        """Call the session until it answers with its quarantine (each ``ActorUnavailable`` is an
        actor that crashed again on its way there); fails if it answers anything else."""
        while True:
            try:
                await self.state(session_id)
            except ActorUnavailable:
                continue
            except SessionQuarantined as exc:
                return exc
            raise AssertionError(f"session {session_id} answered: it is not quarantined")

    async def until(self, session_id: str, predicate: Callable[[SessionState], bool], limit: int = 200_000) -> SessionState:
        """Poll the actor's in-memory state until ``predicate`` holds (see the module docstring)."""
        for _ in range(limit):
            state = await self.state(session_id)
            if predicate(state):
                return state
        raise AssertionError("condition never held")


def reader(data_dir: Path) -> LogReader:
    return LogReader(data_dir)


@asynccontextmanager
async def open_runtime(
    data_dir: Path,
    *,
    script: Sequence[FauxTurn] | None = None,
    tools: ToolRegistry | None = None,
    extra_tools: Sequence[ToolSpec] = (),
    ids: IdGen | None = None,
    snapshot_every: int = 500,
    idle_seconds: float = 300.0,
    max_restarts: int = 3,
    extra_providers: Sequence[str] = (),
    faux: FauxProvider | None = None,
    projections: bool = False,
    context: ContextConfig | None = None,
    model_configs: dict[str, list[ModelConfig]] | None = None,
    catalog: ProviderCatalog | None = None,
    stopping: trio.Event | None = None,
    secrets: Secrets | None = None,
) -> AsyncIterator[Runtime]:
    """A running store + supervisor over ``data_dir``; everything is stopped and closed on exit.

    ``projections``: also run the daemon's projection service, and let the supervisor find
    sessions with unfinished work in the sessions projection (as ``lens serve`` does) instead of
    scanning the log. ``catalog``: the providers, instead of the faux ones (``build_catalog`` of a
    config: the SDK providers against loopback servers); ``stopping``: the daemon's stop event
    (``ActorDeps.stopping``); ``secrets``: the store's keys."""
    store = EventStore.open(data_dir, secrets=secrets)
    snapshots = SnapshotStore.open(store.data_dir)
    faux = faux if faux is not None else FauxProvider("faux", list(script or []))
    providers = {"faux": faux, **{p: FauxProvider(p) for p in extra_providers}}
    ids = ids or IdGen()
    deps = ActorDeps(
        store,
        snapshots,
        catalog if catalog is not None else ProviderCatalog(dict(providers), model_configs=model_configs),
        tools if tools is not None else builtin_tools(list(extra_tools)),
        ids,
        snapshot_every=snapshot_every,
        idle_seconds=idle_seconds,
        context=context or ContextConfig(),
        stopping=stopping,
    )
    service = ProjectionService(store.data_dir, store) if projections else None
    sup = Supervisor(deps, max_restarts=max_restarts,
                     pending=service.sessions_with_pending_work if service is not None else None)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            try:
                async with trio.open_nursery() as actors:
                    if service is not None:
                        await actors.start(service.run)
                    await actors.start(sup.run)
                    try:
                        yield Runtime(data_dir, store, snapshots, deps, sup, faux, ids, providers, service)
                    finally:
                        actors.cancel_scope.cancel()
            finally:
                store.close_writer()
    finally:
        if service is not None:
            service.close()
        store.close()
        snapshots.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def runtime_factory(data_dir: Path) -> Callable[..., Any]:
    """``async with runtime_factory(**options) as rt`` (same data directory each time)."""

    def make(**options: Any) -> Any:
        return open_runtime(options.pop("data_dir", data_dir), **options)

    return make


@pytest.fixture
async def rt(data_dir: Path) -> AsyncIterator[Runtime]:
    async with open_runtime(data_dir) as runtime:
        yield runtime


def by_kind(events: Sequence[StoredEvent], kind: str) -> list[StoredEvent]:
    return [e for e in events if e.kind == kind]


def one(events: Sequence[StoredEvent], kind: str, **fields: Any) -> StoredEvent:
    """The single event of ``kind`` whose body (or envelope) matches ``fields``."""
    found = [e for e in events if e.kind == kind and all(_field(e, k) == v for k, v in fields.items())]
    assert len(found) == 1, f"expected one {kind} {fields}, found {len(found)}"
    return found[0]


def _field(e: StoredEvent, name: str) -> Any:
    if name in ("agent_id", "task_id", "request_id", "session_id"):
        return getattr(e, name)
    return getattr(e.event, name)


def structured(e: StoredEvent) -> Any:
    return e.event.structured_content  # type: ignore[union-attr]


def args(**kw: Any) -> str:
    return json.dumps(kw)
