"""A read or an edit whose executor child died under it, run once more on the child spawned in
its place.

Every caller that runs a replay-safe request on a project's executor goes through
:func:`once_more_if_died`: the workspace tools (``read_file``, ``view_image``, ``edit_file``,
``patch_file``, a program's calls of them), skill reads, and the HTTP API's workspace browsing
(``browse_list``, ``browse_read``). Only requests that may run twice come here (reads; edits,
whose second run the executor's call journal answers when the first one had written).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import trio

log = logging.getLogger("lens.tools")

T = TypeVar("T")
DIED = "EXECUTOR_UNAVAILABLE"  # the code a call ends with when its executor is gone


class ExecutorAccess(Protocol):
    async def get(self, project_id: str) -> Any: ...


class Respawning(ExecutorAccess, Protocol):
    async def respawned(self, ex: Any) -> Any: ...


@dataclass(frozen=True)
class Reached(Generic[T]):
    """A request's outcome, the executor that gave it, and the code its first run ended with
    when it ran twice (see ``ToolResult.rerun_after``)."""

    ex: Any
    out: T
    rerun_after: str | None = None


async def once_more_if_died(pool: Respawning, ex: Any, run: Callable[[Any], Awaitable[T]], what: str) -> Reached[T]:
    """``run(ex)``; when it raises an error of code ``EXECUTOR_UNAVAILABLE`` and ``ex`` is a local
    child that died (the pool's ``respawned``: it has exited, and another child serves the same
    domain), ``run`` once more on the child spawned in its place. Never more than once; never for
    a remote executor (not respawned: its reconnect is grpc's) or a caller cancelled meanwhile
    (an aborted session: a checkpoint sits before the second run). A caller holding ``ex``'s
    domain lock holds the new child's (the same lock). Raises what ``run`` raised: the first
    run's error when there is no second run, else the second run's. ``what`` names the request
    in the warning logged before the second run."""
    try:
        return Reached(ex, await run(ex))
    except Exception as exc:
        if getattr(exc, "code", None) != DIED:
            raise
        first = exc
    again = await pool.respawned(ex)
    if again is None:
        raise first
    await trio.lowlevel.checkpoint()  # (cancelled meanwhile: ends here, not run again)
    log.warning("%s: its executor died before it answered (%s); running it again on the executor spawned in "
                "its place", what, str(getattr(first, "message", first))[:200])
    return Reached(again, await run(again), DIED)
