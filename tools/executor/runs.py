"""Running commands by the id Core gave them (``CommandRequest.run_id``), for ``Stop``.

A :class:`StopLatch` is set once, from the ``Stop`` handler's thread; its file descriptor turns
readable then, so the command's read loop (blocked in ``select``) wakes at once rather than at its
next poll. The ``Stop`` handler then waits on the same latch for the command's run to be over
(:meth:`StopLatch.wait_over`): its group ended and its exit sent on its stream, which the run says
with :meth:`StopLatch.over`. The registry holds the latches of the commands running now; it is the
service's, made by it (no global state). :class:`EditingCalls` holds those of the editing calls
running now, by call id: a ``Stop`` naming one that has not yet looked whether its caller waits
(:meth:`StopLatch.claim`) makes it write nothing, and waits for one that may be writing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

MAX_RUN_ID_CHARS = 128


class RunIdRefused(Exception):
    """A run id that cannot be used: ``code`` is ``INVALID_ARGUMENT`` or ``RUN_ID_IN_USE``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StopLatch:
    """Set by ``Stop``; :meth:`fileno` is readable once it is. Closed by its command's run, which
    first says it is over (:meth:`over`), with the exit it sent when it sent one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read, self._write = os.pipe()
        self._set = False
        self._claimed = False
        self._closed = False
        self._over = threading.Event()
        self._exit: Any = None

    def set(self) -> None:
        with self._lock:  # (never writes to a descriptor closed, and maybe reused, meanwhile)
            if self._set or self._closed:
                return
            self._set = True
            os.write(self._write, b"s")

    def is_set(self) -> bool:
        return self._set

    def claim(self) -> bool:
        """An editing call's last look before it writes: False when a ``Stop`` came first (the
        call writes nothing); else the call may write, and a ``Stop`` coming later waits for
        its end (:attr:`claimed`)."""
        with self._lock:
            if self._set:
                return False
            self._claimed = True
            return True

    @property
    def claimed(self) -> bool:
        with self._lock:
            return self._claimed

    def fileno(self) -> int:
        return self._read

    def over(self, exit_: Any = None) -> None:
        """The command's run is over: its group has ended, and ``exit_`` (None: none was sent,
        the stream was given up) was sent on its stream. The first call counts."""
        with self._lock:
            if not self._over.is_set():
                self._exit = exit_
                self._over.set()

    def wait_over(self, timeout: float, given_up: Callable[[], bool] = lambda: False) -> tuple[bool, Any]:
        """Wait at most ``timeout`` seconds for :meth:`over` (``given_up()`` true, read every
        tenth of a second, ends the wait early): whether it came, and the exit it gave."""
        deadline = time.monotonic() + timeout
        while not self._over.is_set() and not given_up():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._over.wait(min(remaining, 0.1))
        return self._over.is_set(), self._exit

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)


class RunRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, StopLatch] = {}

    @contextmanager
    def running(self, run_id: str) -> Iterator[StopLatch | None]:
        """The latch of a command running under ``run_id`` (None for an empty id: no ``Stop``
        can reach it), unregistered and closed on exit. Raises :class:`RunIdRefused`."""
        if not run_id:
            yield None
            return
        if len(run_id) > MAX_RUN_ID_CHARS:
            raise RunIdRefused("INVALID_ARGUMENT", f"run_id must be at most {MAX_RUN_ID_CHARS} characters; "
                                                   f"it has {len(run_id)}")
        latch = StopLatch()
        with self._lock:
            if run_id in self._runs:
                latch.close()
                raise RunIdRefused("RUN_ID_IN_USE", "another running command has this run_id")
            self._runs[run_id] = latch
        try:
            yield latch
        finally:
            with self._lock:
                del self._runs[run_id]
            latch.over()  # (a run that sent no exit, given up or failed: a Stop waits no longer)
            latch.close()

    def stop(self, run_id: str) -> StopLatch | None:
        """Set the latch of the command running under ``run_id`` and return it (to wait on for
        the run's end); None when none is."""
        with self._lock:
            latch = self._runs.get(run_id)
            if latch is not None:
                latch.set()
        return latch


class EditingCalls:
    """The latches of the editing calls running now, by call id (Core's ``session:call``, not
    bounded by this protocol), for a ``Stop`` naming one. Several calls may run under one id (a
    call sent again while the first still runs): each has its latch, and a ``Stop`` by the id
    reaches all of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, list[StopLatch]] = {}

    @contextmanager
    def running(self, call_id: str) -> Iterator[StopLatch]:
        """The latch of a call running under ``call_id``; on exit it is over (a ``Stop`` waiting
        for it answers), unregistered and closed."""
        latch = StopLatch()
        with self._lock:
            self._calls.setdefault(call_id, []).append(latch)
        try:
            yield latch
        finally:
            with self._lock:
                same = self._calls[call_id]
                same.remove(latch)
                if not same:
                    del self._calls[call_id]
            latch.over()
            latch.close()

    def stop(self, call_id: str, bound: float, given_up: Callable[[], bool] = lambda: False) -> bool | None:
        """Stop the calls running under ``call_id`` and wait, at most ``bound`` seconds in all
        (``given_up()`` true ends the wait), for those that may be writing: whether all of them
        have ended (a call that had not yet looked whether its caller waits will find the stop
        there and write nothing: it needs no wait); None when none runs by that id."""
        with self._lock:
            latches = list(self._calls.get(call_id, ()))
            for latch in latches:
                latch.set()
        if not latches:
            return None
        deadline = time.monotonic() + bound
        for latch in latches:
            if latch.claimed and not latch.wait_over(max(0.0, deadline - time.monotonic()), given_up)[0]:
                return False
        return True
