"""Running commands by the id Core gave them (``CommandRequest.run_id``), for ``Stop``.

A :class:`StopLatch` is set once, from the ``Stop`` handler's thread; its file descriptor turns
readable then, so the command's read loop (blocked in ``select``) wakes at once rather than at its
next poll. The registry holds the latches of the commands running now; it is the service's, made
by it (no global state).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

MAX_RUN_ID_CHARS = 128


class RunIdRefused(Exception):
    """A run id that cannot be used: ``code`` is ``INVALID_ARGUMENT`` or ``RUN_ID_IN_USE``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StopLatch:
    """Set by ``Stop``; :meth:`fileno` is readable once it is. Closed by its command's run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read, self._write = os.pipe()
        self._set = False
        self._closed = False

    def set(self) -> None:
        with self._lock:  # (never writes to a descriptor closed, and maybe reused, meanwhile)
            if self._set or self._closed:
                return
            self._set = True
            os.write(self._write, b"s")

    def is_set(self) -> bool:
        return self._set

    def fileno(self) -> int:
        return self._read

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
            latch.close()

    def stop(self, run_id: str) -> bool:
        """Set the latch of the command running under ``run_id``; False when none is."""
        with self._lock:
            latch = self._runs.get(run_id)
            if latch is not None:
                latch.set()
        return latch is not None
