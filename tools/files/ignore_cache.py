"""Compiled ignore files kept between listings (workspace browsing, F-HAR-3).

Compiling a ``.gitignore`` costs one expression per line and one per group of lines: seconds of
CPU for a 1 MiB file, spent again on every listing that read it. :class:`IgnoreCache` keeps the
compiled :class:`~.gitignore.IgnoreFile` of recent files, keyed by the directory the file
belongs to and the SHA-256 of the bytes just read from it. The key is the content, not the
file's metadata: a listing still reads each ignore file (about a millisecond for the largest,
1 MiB), so what it matches against is always what it read — an edit of the same size within the
timestamps' granularity, an mtime set back, an inode reused, a file swapped for another with
the same stat fields are all a new key. A file with the same text as another in the same
directory (``git checkout`` back, a copy) shares its entry.

Bounded by count and by the bytes of the texts held (least recently used first out); a file
alone larger than the byte bound is compiled for the listing and not kept. The compiled form
takes roughly forty times its text in memory (measured: 1 MiB of patterns, about 40 MB), so the
default bound of 2 MiB holds the largest file a listing reads with room for ordinary ones.

Thread-safe: the executor serves calls on a thread pool. Compiling happens outside the cache's
lock; a second listing wanting a file that another is compiling waits for that one instead of
compiling it twice. The cache belongs to whoever creates it (the executor service owns one per
workspace); nothing here is global.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

from .gitignore import MAX_GITIGNORE_BYTES, IgnoreFile

DEFAULT_MAX_FILES = 256
DEFAULT_MAX_BYTES = 2 * MAX_GITIGNORE_BYTES


@dataclass(frozen=True)
class IgnoreCacheStats:
    files: int      # compiled files held
    bytes: int      # the bytes of their texts
    hits: int       # files served from the cache
    compiles: int   # files compiled (kept or not)


class IgnoreCache:
    """``get(base, data)``: the compiled ignore file of directory ``base`` whose bytes are
    ``data``, from the cache when it holds it."""

    def __init__(self, max_files: int = DEFAULT_MAX_FILES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_files < 1 or max_bytes < 1:
            raise ValueError("an ignore cache holds at least one file and one byte")
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[str, bytes], tuple[IgnoreFile, int]] = OrderedDict()
        self._making: dict[tuple[str, bytes], threading.Event] = {}
        self._bytes = 0
        self._hits = 0
        self._compiles = 0

    def get(self, base: str, data: bytes) -> IgnoreFile:
        key = (base, hashlib.sha256(data).digest())
        while True:
            with self._lock:
                held = self._files.get(key)
                if held is not None:
                    self._files.move_to_end(key)
                    self._hits += 1
                    return held[0]
                making = self._making.get(key)
                if making is None:
                    making = self._making[key] = threading.Event()
                    break
            making.wait()  # another thread compiles this one; then look again
        compiled: IgnoreFile | None = None
        try:
            compiled = IgnoreFile(base, data.decode("utf-8", "surrogateescape"))  # (matched as its bytes)
            return compiled
        finally:
            with self._lock:
                del self._making[key]
                if compiled is not None:
                    self._compiles += 1
                    self._keep(key, compiled, len(data))
            making.set()

    def _keep(self, key: tuple[str, bytes], compiled: IgnoreFile, size: int) -> None:
        if size > self.max_bytes:
            return  # (it would push out everything else and still not fit)
        self._files[key] = (compiled, size)
        self._bytes += size
        while len(self._files) > self.max_files or self._bytes > self.max_bytes:
            _, (_, gone) = self._files.popitem(last=False)
            self._bytes -= gone

    def stats(self) -> IgnoreCacheStats:
        with self._lock:
            return IgnoreCacheStats(len(self._files), self._bytes, self._hits, self._compiles)
