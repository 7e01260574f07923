"""The daemon's "stop now": a second stop signal while a graceful stop is under way.

A graceful stop waits, bounded, for things that end by themselves: requests in progress (up to
5 s), an executor child and an MCP server given time to exit after their stdin closes and after
SIGTERM, the last records of a stop (a running job's end, the usage of a model request it cut).
Each of those waits runs in a scope from :meth:`StopNow.grace`; :meth:`StopNow.set` cancels every
one open and every one opened later, so each goes on to its next step at once (a connection
reset, a SIGKILL, a record given up: the next start records the job ``lost`` and the call
``interrupted``, as after a kill -9).

What is never in such a scope: the event store's writer. The transaction it is committing, and
the appends queued before the services ended, are written and acknowledged as at any stop; no
acknowledged event is lost and nothing is half written.

Imports nothing of the daemon (``tools/`` uses it too: no cycle).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import trio


class StopNow:
    """Set once, by the daemon's signal receiver; read by the waits of its graceful stop."""

    def __init__(self) -> None:
        self._set = False
        self._open: set[trio.CancelScope] = set()

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        """Cancel every :meth:`grace` scope open now and each one opened from here on."""
        self._set = True
        for scope in list(self._open):
            scope.cancel()

    @contextmanager
    def grace(self, seconds: float, *, shield: bool = False) -> Iterator[trio.CancelScope]:
        """A scope ending after ``seconds`` (as ``trio.move_on_after``), or at once on :meth:`set`.

        ``shield``: outer cancellations do not reach it (a wait inside a stop's cleanup, which
        runs cancelled); a stop now still does."""
        with trio.CancelScope(deadline=trio.current_time() + seconds, shield=shield) as scope:
            if self._set:
                scope.cancel()
            self._open.add(scope)
            try:
                yield scope
            finally:
                self._open.discard(scope)
