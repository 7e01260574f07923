"""Waking on a change in a directory: Linux's inotify, through ctypes (no new dependency).

The pair file is replaced by a rename (``lens pair approve|revoke`` in another process), or has
its mode changed (``chmod``): :class:`DirectoryWatch` wakes the daemon's watcher at once, so an
open SSE stream of a revoked credential ends then, not at the watcher's next poll. Where inotify
cannot be had (another system, the directory missing, the user's watch limit reached) it is a
plain timer, and the caller's poll is what it was; each wait tries to watch the directory again.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
from pathlib import Path

import trio

log = logging.getLogger("lens.filewatch")

# <sys/inotify.h>: what changes a file's name, bytes, mode or owner in the directory, and the
# directory's own end (it is then watched again).
_IN_ATTRIB, _IN_CLOSE_WRITE, _IN_MOVED_FROM, _IN_MOVED_TO = 0x4, 0x8, 0x40, 0x80
_IN_CREATE, _IN_DELETE, _IN_DELETE_SELF, _IN_MOVE_SELF, _IN_IGNORED = 0x100, 0x200, 0x400, 0x800, 0x8000
_IN_ONLYDIR = 0x01000000
_MASK = (_IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
         | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "inotify_init1") and hasattr(libc, "inotify_add_watch") else None


class DirectoryWatch:
    """Changes in one directory. Use as a context manager (the descriptor is closed on exit);
    :meth:`wait` returns after a change or after ``timeout`` seconds, whichever comes first."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._libc = _libc()
        self._fd: int | None = None
        self._watched = False

    def __enter__(self) -> "DirectoryWatch":
        if self._libc is not None:
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def active(self) -> bool:
        """Whether a change wakes :meth:`wait` (else it waits for its timeout)."""
        return self._fd is not None and self._watched

    def _watch(self) -> None:
        if self._fd is None or self._watched or self._libc is None:
            return
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(self.directory), _MASK)
        self._watched = wd >= 0  # (ENOENT: no directory yet; ENOSPC: the watch limit; tried again next wait)

    async def wait(self, timeout: float) -> None:
        """Return after a change in the directory (the events read, so the next wait waits for
        the next change) or after ``timeout`` seconds."""
        self._watch()
        if not self.active:
            await trio.sleep(timeout)
            return
        assert self._fd is not None
        with trio.move_on_after(timeout):
            await trio.lowlevel.wait_readable(self._fd)
        self._drain()

    def _drain(self) -> None:
        assert self._fd is not None
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            at = 0
            while at + _EVENT.size <= len(data):
                _wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
                if mask & (_IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF):
                    self._watched = False  # (the directory went or moved: watched again by name)
                at += _EVENT.size + size
