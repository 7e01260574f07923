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
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import trio

from runtime.errors import LensError  # (imports nothing: no cycle)
from runtime.stop_now import StopNow  # (imports nothing of the daemon: no cycle)

from .base import ToolError

log = logging.getLogger("lens.tools")

T = TypeVar("T")
DIED = "EXECUTOR_UNAVAILABLE"  # the code a call ends with when its executor is gone


class ExecutorAccess(Protocol):
    async def get(self, project_id: str) -> Any: ...


class Respawning(ExecutorAccess, Protocol):
    stop_now: StopNow  # (the daemon's second stop signal: an abort's wait for a command ends at it)
    remote: Any  # (the projects' remote executor; None: the pool starts a local one per project)

    async def respawned(self, ex: Any) -> Any: ...

    async def call_ended(self, ex: Any, call_id: str, what: str = ...) -> Any: ...
    # (the reply of an editing call that completed after its caller gave up, or None)


# What asking for a project's executor, or calling it, may fail with: the pool's and the client's
# typed errors (EXECUTOR_UNAVAILABLE, EXECUTOR_TIMEOUT, PROJECT_NOT_FOUND, a tool's own code...)
# and the system's (a child that cannot be started: its state directory, its fork). Anything else
# (an AttributeError, a TypeError) is a defect of Lens and is left to surface as one.
EXECUTOR_FAILURES: tuple[type[Exception], ...] = (LensError, OSError)


@contextmanager
def executor_failures(default: str) -> Iterator[None]:
    """Turn what a call of the executor (or the pool's ``get``) is expected to fail with into a
    :class:`ToolError`: a typed error keeps its code and message, an ``OSError`` gets ``default``
    (``EXECUTOR_UNAVAILABLE``, ``EXECUTOR_ERROR``). A :class:`ToolError` passes as it is, and any
    other exception too: a programming error must not read as "the executor is unavailable"."""
    try:
        yield
    except ToolError:
        raise
    except EXECUTOR_FAILURES as exc:
        raise ToolError(getattr(exc, "code", default), getattr(exc, "message", None) or str(exc)) from None


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
