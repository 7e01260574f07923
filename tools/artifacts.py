"""Content-addressed artifacts: binaries stored once by SHA-256 outside the log.

``put`` writes ``artifacts/<sha256>`` atomically (:func:`runtime.atomicfile.replace_atomically`:
temp file, fsync, rename, directory fsync) and is idempotent; ``put_together`` stores several
as one: when one cannot be stored, those it wrote that nothing else was given since are removed;
``get`` verifies the bytes against their name before returning them, so a damaged file is
caught before it is sent anywhere. Both read only a regular file, without blocking and up to
:data:`MAX_ARTIFACT_BYTES` (:func:`runtime.atomicfile.read_regular_file`): something else in an
artifact's place (a FIFO, a directory, a link to a device) is a damaged artifact, refused at
once by ``get`` and replaced by ``put``. ``leftovers`` and ``remove`` serve the daemon's start-up
sweep (:mod:`runtime.artifact_sweep`): the artifacts and the temporary files of interrupted writes
older than a moment, and their removal.
"""

from __future__ import annotations

import hashlib
import re
import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from events.ids import SHA256_RE
from runtime.atomicfile import FileTooLarge, NotARegularFile, read_regular_file, replace_atomically, sync_directory

# Far above any artifact the tools store (a file edit keeps files of at most 8 MiB, view_image
# images of 5 MiB): only a bound on what is read.
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024

# The temporary file of a write that never reached its rename (replace_atomically's name for it:
# ".<id>.<12 hex digits>.tmp"): a killed daemon, a power cut.
PARTIAL_RE = re.compile(r"\.[0-9a-f]{64}\.[0-9a-f]{12}\.tmp")


@dataclass(frozen=True)
class Leftovers:
    """What ``artifacts/`` held from before a moment: the artifacts' ids and the names of the
    temporary files of interrupted writes. Anything else there (a directory, a file of another
    name) is not the store's and is not listed."""

    artifacts: list[str]
    partial: list[str]


class ArtifactError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ArtifactStore:
    """The files of one data directory's ``artifacts/``. ``put`` and ``put_together`` block (they
    read, write and fsync): call them off the event loop, from any number of threads."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # Artifacts a put_together still in progress wrote afresh and no other put has returned
        # since: only these may be removed when it fails. One lock over every check and write
        # keeps that true (otherwise a put finding a file a failing put_together is about to
        # remove would hand out an id whose bytes are gone).
        self._lock = threading.Lock()
        self._provisional: set[str] = set()

    def put(self, data: bytes) -> str:
        """Store ``data``; its id. Raises ``OSError`` (a full disk), leaving nothing half-written."""
        return self._put(data)[0]

    def put_together(self, items: Sequence[bytes]) -> list[str]:
        """Store every one of ``items``, or none that this call added: their ids, in order.
        When one fails (``OSError``, raised), the files this call wrote afresh are removed unless
        another put has returned them since; a file that was already there is never removed
        (ids are shared by content, and an earlier event may name it)."""
        fresh: list[str] = []
        try:
            ids = []
            for data in items:
                digest, created = self._put(data, provisional=True)
                ids.append(digest)
                if created:
                    fresh.append(digest)
        except BaseException:
            with self._lock:
                for digest in fresh:
                    if digest in self._provisional:
                        self._provisional.discard(digest)
                        (self.root / digest).unlink(missing_ok=True)
            raise
        with self._lock:
            self._provisional.difference_update(fresh)
        return ids

    def _put(self, data: bytes, *, provisional: bool = False) -> tuple[str, bool]:
        """``data`` stored: its id, and whether this call wrote the file (it was missing or
        damaged). A written file is marked provisional when ``provisional``; any other put of
        the same bytes takes that mark away."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        with self._lock:
            self._provisional.discard(digest)
            if _intact(path, digest):
                return digest, False  # (a damaged copy is written again: it failed every request naming it)
            replace_atomically(path, data)
            if provisional:
                self._provisional.add(digest)
            return digest, True

    def leftovers(self, before_ns: int) -> Leftovers:
        """The artifacts and partial files last changed before ``before_ns`` (``time_ns``).
        A missing directory has none. Raises ``OSError`` when the directory cannot be listed
        (not a directory, no permission, an I/O error)."""
        artifacts: list[str] = []
        partial: list[str] = []
        try:
            entries = os.scandir(self.root)
        except FileNotFoundError:
            return Leftovers([], [])
        with entries:
            for entry in entries:
                kept = artifacts if SHA256_RE.fullmatch(entry.name) else partial if PARTIAL_RE.fullmatch(entry.name) else None
                if kept is None:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(st.st_mode) and st.st_mtime_ns < before_ns:
                    kept.append(entry.name)
        return Leftovers(sorted(artifacts), sorted(partial))

    def remove(self, names: Sequence[str]) -> list[tuple[str, OSError]]:
        """Unlink ``names`` (entries of ``artifacts/`` as :meth:`leftovers` lists them) under the
        store's lock, then sync the directory; the names that could not go, with why (one gone
        already is not a failure)."""
        failed: list[tuple[str, OSError]] = []
        with self._lock:
            for name in names:
                self._provisional.discard(name)
                try:
                    (self.root / name).unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    failed.append((name, exc))
            if len(failed) < len(names):
                sync_directory(self.root)
        return failed

    def get(self, artifact_id: str) -> bytes:
        if not SHA256_RE.fullmatch(artifact_id):
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}")
        try:
            data = read_regular_file(self.root / artifact_id, MAX_ARTIFACT_BYTES)
        except FileNotFoundError:
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}") from None
        except (NotARegularFile, FileTooLarge) as exc:
            raise ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} is damaged on disk: {exc.strerror}") from None
        if hashlib.sha256(data).hexdigest() != artifact_id:
            raise ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} is damaged on disk (its bytes no longer "
                                                  "match its SHA-256)")
        return data


def _intact(path: Path, digest: str) -> bool:
    """Whether ``path`` exists and holds the bytes of ``digest``."""
    try:
        data = read_regular_file(path, MAX_ARTIFACT_BYTES)
    except OSError:  # missing, not a regular file, too large, unreadable: written afresh
        return False
    return hashlib.sha256(data).hexdigest() == digest
