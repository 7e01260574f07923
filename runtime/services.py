"""The daemon's parts a request handler reaches (:class:`Services`), and the bound a request in
progress at a stop is answered by (:func:`before_stop`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import trio

from events.store import EventStore
from tools.artifacts import ArtifactStore

from .bus import Bus
from .config import Config
from .configfiles import ConfigFiles
from .errors import ActorUnavailable
from .guard import Guard
from .pairing import PairStore
from .projection_service import ProjectionService
from .providers.catalog import ProviderCatalog
from .supervisor import Supervisor
from .write_stall import WRITE_STALL_SECONDS


@dataclass
class Services:
    config: Config
    data_dir: Path
    store: EventStore
    supervisor: Supervisor
    bus: Bus
    pairs: PairStore
    guard: Guard
    projections: ProjectionService
    catalog: ProviderCatalog
    config_files: ConfigFiles
    new_id: Callable[[str], str]
    shutting_down: trio.Event = field(default_factory=trio.Event)
    streams_watched: bool = False  # watch_streams runs: SSE tasks need no revalidation timer
    version: str = "0.1.0"
    executors: Any = None  # the ExecutorPool (workspace browsing); None in apps built without one
    # The data directory's artifact store, the one the tools write (it remembers which files were
    # checked against their ids); an app built without one makes its own at its first artifact.
    artifacts: ArtifactStore | None = None
    mcp: Any = None  # tools.mcp.McpServers: the MCP servers and their state, for the inventory
    default_model_lock: trio.Lock = field(default_factory=trio.Lock)  # one saved-default change at a time
    # An SSE body write the client takes no byte of for this long resets it (write_stall.py).
    write_stall_seconds: float = WRITE_STALL_SECONDS

    async def call(self, session_id: str, command: Any) -> Any:
        """``supervisor.call`` for a request: answered ``SESSION_UNAVAILABLE`` at a stop (see
        :func:`before_stop`)."""
        return await before_stop(self.shutting_down, lambda: self.supervisor.call(session_id, command))


STOPPING = ("the daemon is stopping: the session did not answer before it stopped; what it recorded is kept "
            "(an input is recorded at most once by its requestId): read the session, or send the request again, "
            "once the daemon is back")

# How long a request in progress at a stop may still take before it is answered 503: a session's
# quick answer (an input recorded) still comes as it would; a long wait is cut off.
STOP_SETTLE_SECONDS = 1.0
_T = TypeVar("_T")


async def before_stop(stop: trio.Event, work: Callable[[], Awaitable[_T]]) -> _T:
    """``work()``'s answer, or ``SESSION_UNAVAILABLE`` (503) once the daemon has been stopping for
    :data:`STOP_SETTLE_SECONDS` (a fraction of its grace period).

    A request waiting on a session (a ``/skill:`` input's check behind another session's command,
    a withdraw waiting for that check, a fork reading a long source) held the shutdown for its
    whole grace period, then lost its connection unanswered. Cut off here, the session's command
    still ends as it would (or is cut off with the actors): what it recorded is kept, and a
    repeat after the restart is answered from the log."""
    answered: list[_T] = []
    failed: list[Exception] = []
    async with trio.open_nursery() as nursery:
        async def cut_off() -> None:
            await stop.wait()
            await trio.sleep(STOP_SETTLE_SECONDS)
            nursery.cancel_scope.cancel()

        nursery.start_soon(cut_off)
        try:
            answered.append(await work())
        except Exception as exc:  # (raised as it is below, not inside the nursery's group)
            failed.append(exc)
        nursery.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if not answered:
        raise ActorUnavailable(STOPPING)
    return answered[0]
