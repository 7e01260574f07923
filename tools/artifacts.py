"""Content-addressed artifacts: binaries stored once by SHA-256 outside the log.

``put`` writes ``artifacts/<sha256>`` atomically (:func:`runtime.atomicfile.replace_atomically`:
temp file, fsync, rename, directory fsync) and is idempotent; ``put_together`` stores several
as one: when one cannot be stored, those it wrote that nothing else was given since are removed;
``get`` verifies the bytes against their name before returning them, so a damaged file is
caught before it is sent anywhere. Both read only a regular file, without blocking and up to
:data:`MAX_ARTIFACT_BYTES` (:func:`runtime.atomicfile.open_regular_file`): something else in an
artifact's place (a FIFO, a directory, a link to a device) is a damaged artifact, refused at
once by ``get`` and replaced by ``put``. ``leftovers`` and ``remove`` serve the daemon's sweeps
(:mod:`runtime.artifact_sweep`): the artifacts and the temporary files of interrupted writes
older than a moment, and their removal.

**Ids in flight.** An artifact is stored before the event naming it is appended, so a sweep
while the daemon runs must not take a file whose event is still to come. Every id a put
returns is held until that event has committed or failed: the caller opens a :meth:`lease`
around the work that stores and the append that records (the actor around a tool call and its
result); a put inside it (in a thread too: ``trio.to_thread`` carries the context) holds its id
until the lease ends. A put outside any lease, or after its lease ended (a task that inherited
the lease's context and outlived it: a background job saving its output at a daemon's stop, its
append given up on after a bound and possibly still committed), holds its id for good: its event
may come at any time, so nothing but that event can end the hold. The live sweep ends it once the log names the
id (:meth:`release_named`: a named artifact is never removed), so the ids held for good are only
those whose event has not been folded yet, not every such id since the start; one whose event
never comes stays held, and its file waits for the next start. :meth:`keep` holds ids whose
event comes after their lease ended, one hold per keep (two sessions' copies may be the same
bytes), each ended by its own :meth:`let_go` or by the log naming the id. :meth:`remove` never
takes an id held, nor one put or released since the sweep's :meth:`sweeping` began (its event may have
committed after the sweep read the log's position).

**Reads.** ``get`` holds the whole artifact (images sent to a model, an edit's copies, a job's
output) and judges the bytes it holds by the same verdicts; the daemon's route reads less: it
opens the file once (:meth:`~ArtifactStore.open`) and answers from that descriptor (its size,
the :data:`HEAD_BYTES` its type is told from, a range by ``pread``) once
:meth:`~ArtifactStore.check` has judged the same descriptor against the id. ``head`` and
``verify`` are the two steps for a caller that needs one of them.

**Verified once per file.** Checking an artifact against its id reads all of it. The store
remembers each verdict (intact, or damaged and why) by the artifact's id and the identity of the
file it read: device, inode, size, ``mtime_ns`` and ``ctime_ns``, from one ``fstat`` of the
descriptor read. A later read of the same file (same identity) trusts the verdict; a file
changed on disk in any of those (rewritten in place, even with its ``mtime`` put back, since
that sets ``ctime``; replaced by a rename; truncated) is read and judged again. The identity is
asked of the descriptor again when it is checked (a verdict holds for a file unchanged since it
was opened), and once more after it is read: a size or ``mtime`` changed meanwhile is damage; a
``ctime`` alone (a link added or removed, a sweep's removal among them) has it read once more,
judged as it is now, so an intact file removed while an answer checks it is not called damaged.
``get`` follows the same rule for the bytes it read: a verdict holds for them when the file's
identity was the same from its open to the end of the read; otherwise they are hashed (and the
verdict remembered only when that identity held). Verdicts live in the store (one per daemon,
shared by the route, ``get``, the tools' puts and the sweep), at most :data:`VERIFIED_FILES` of
them, the least recently used forgotten first; a removed id's verdict goes with its file (the
sweep's removal and a failed ``put_together``'s). One judgment of a file at a time: a second
caller judging the same file (same id and identity) while another does waits for that verdict
instead of hashing the file too, and judges it itself when none came (the first failed).
"""

from __future__ import annotations

import codecs
import hashlib
import re
import os
import stat
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from events.ids import SHA256_RE
from runtime.atomicfile import FileTooLarge, NotARegularFile, open_regular_file, replace_atomically, sync_directory

# Far above any artifact the tools store (a file edit keeps files of at most 8 MiB, view_image
# images of 5 MiB): only a bound on what is read.
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024

# How much of an artifact's start is read to tell the type it is served as (``runtime.
# artifacts_api.artifact_type``: the magic bytes of images and archives, and whether it reads as UTF-8 text):
# a range, or a one-byte probe, of a large artifact reads this and the range, never the file.
HEAD_BYTES = 8192


def reads_as_text(data: bytes, *, whole: bool) -> bool:
    """Whether ``data`` reads as UTF-8 text by its first :data:`HEAD_BYTES`: no NUL among them,
    and they decode (a character cut at their end is no reason to doubt it, unless ``whole``
    says ``data`` is all there is and it is no longer than the window). One judgment for an
    artifact served (``runtime.artifacts_api.artifact_type``, from its head) and a fetched body
    without a type (``tools.web.fetch``)."""
    window = data[:HEAD_BYTES]
    if b"\0" in window:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(window, final=whole and len(data) <= HEAD_BYTES)
    except UnicodeDecodeError:
        return False
    return True


# The pieces in which an artifact is hashed and served whole: what a read holds in memory at once.
CHUNK_BYTES = 256 * 1024

# How many artifacts' verdicts a store remembers (a few hundred bytes each: about 2 MiB at most);
# past it, the least recently used is forgotten and read whole again at its next answer.
VERIFIED_FILES = 4096

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


@dataclass(frozen=True)
class ArtifactHead:
    """An artifact's size and its first bytes (at most :data:`HEAD_BYTES`), read without reading
    the rest of it (nor checking its digest: see :meth:`ArtifactStore.head`)."""

    size: int
    head: bytes


# What identifies the file an artifact's verdict was reached on: (device, inode, size,
# mtime_ns, ctime_ns) of the descriptor read.
FileIdentity = tuple[int, int, int, int, int]


def file_identity(st: os.stat_result) -> FileIdentity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _metadata_changed(before: FileIdentity, after: FileIdentity) -> bool:
    """Whether the file changed between two identities in its ``ctime`` alone (its device,
    inode, size and ``mtime`` the same): its bytes may be the same, or may not."""
    return before[:4] == after[:4] and before[4] != after[4]


class OpenArtifact:
    """An artifact's file held open: its ``id``, its ``size`` and ``identity`` (from the
    ``fstat`` of the descriptor when it was opened), and :meth:`read_at`. Whatever is read from
    it is read from the file :meth:`ArtifactStore.check` judged, even if the name is removed or
    given another file meanwhile. ``close()`` (or the ``with`` block's end) lets the descriptor
    go; one left open is closed when the object is collected."""

    def __init__(self, artifact_id: str, fd: int, st: os.stat_result) -> None:
        self.id = artifact_id
        self.size = st.st_size
        self.identity = file_identity(st)
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def read_at(self, offset: int, length: int) -> bytes:
        """At most ``length`` bytes from ``offset`` (``pread``: fewer only at the file's end).
        Raises ``OSError``."""
        return _read_at(self._fd, offset, length)

    def read_whole(self) -> bytes:
        """The file from its start, up to one byte past :data:`MAX_ARTIFACT_BYTES`: in one read
        of its size as opened and one byte more (a byte there says it grew since), so the bytes
        are held once, not in pieces joined into a copy; a file grown since is read on in pieces.
        Raises ``OSError``."""
        data = os.pread(self._fd, self.size + 1, 0)
        if len(data) == self.size:
            return data
        rest = _read_at(self._fd, len(data), MAX_ARTIFACT_BYTES + 1 - len(data))
        return data + rest if rest else data

    def identity_now(self) -> FileIdentity:
        """The file's identity as it is now (``fstat`` of the descriptor). Raises ``OSError``."""
        return file_identity(os.fstat(self._fd))

    def digest(self) -> tuple[str, FileIdentity]:
        """The SHA-256 (hex) of the file read whole through the descriptor (in pieces of
        :data:`CHUNK_BYTES`, up to one byte past :data:`MAX_ARTIFACT_BYTES`), and the file's
        identity once read. Raises ``OSError``."""
        found, _ = _digest(self._fd)
        return found, file_identity(os.fstat(self._fd))

    def close(self) -> None:
        self._closer()

    def __enter__(self) -> "OpenArtifact":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Lease:
    """The ids put while a :meth:`ArtifactStore.lease` is open, held until it ends. ``recorded()``
    says the event naming them committed; a lease that ends holding ids without it (the append
    failed or never came) tells the store's listeners that orphans may be left."""

    store: "ArtifactStore"
    ids: list[str] = field(default_factory=list)
    ended: bool = False
    committed: bool = False

    def recorded(self) -> None:
        self.committed = True


# The lease of the work now running (a trio task and the threads it starts), if any: the seam
# through which every tool's put is held without each tool passing it on.
_LEASE: ContextVar[Lease | None] = ContextVar("lens_artifact_lease", default=None)


class ArtifactError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ArtifactStore:
    """The files of one data directory's ``artifacts/``. ``put`` and ``put_together`` block (they
    read, write and fsync): call them off the event loop, from any number of threads."""

    def __init__(self, root: Path, *, verified_files: int = VERIFIED_FILES) -> None:
        self.root = Path(root)
        # Artifacts a put_together still in progress wrote afresh and no other put has returned
        # since: only these may be removed when it fails. One lock over every check and write
        # keeps that true (otherwise a put finding a file a failing put_together is about to
        # remove would hand out an id whose bytes are gone).
        self._lock = threading.Lock()
        self._provisional: set[str] = set()
        # Ids in flight (see the module's docstring), all under _lock: held by open leases (a
        # count each), held for good (put outside a lease), kept for an event to come (keep, a
        # count each: each let go by its own let_go, so that one holder letting go of bytes
        # another holds too leaves them held), and put or released since a sweep began (None
        # when no sweep runs).
        self._held: Counter[str] = Counter()
        self._kept: set[str] = set()
        self._kept_for: Counter[str] = Counter()
        self._touched: set[str] | None = None
        self._orphan_listeners: list[Callable[[], None]] = []
        # Verdicts by id (see the module's docstring): the identity of the file judged, and None
        # (intact) or the damage found; least recently used first. Under a lock of their own:
        # _lock is held across a put's writes and fsyncs.
        self._verdicts: OrderedDict[str, tuple[FileIdentity, str | None]] = OrderedDict()
        self._verdicts_lock = threading.Lock()
        # The files being judged now, by (id, identity at open): a caller judging the same file
        # waits for the first's verdict instead of reading it too (see _judging).
        self._judged_now: dict[tuple[str, FileIdentity], threading.Event] = {}
        self.verified_files = verified_files
        # How many times a file's bytes were hashed to be judged against its id (read whole by
        # check, or held by get: what the verdicts save): a number for tests and measurements,
        # never an answer's.
        self.verifications = 0

    @contextmanager
    def lease(self) -> Iterator[Lease]:
        """Hold every id put inside the block (in this context and the threads it starts) until
        the block ends; call ``recorded()`` on the lease once the event naming them committed.
        Ending without it while holding ids calls the :meth:`on_orphans` listeners."""
        lease = Lease(self)
        token = _LEASE.set(lease)
        try:
            yield lease
        finally:
            _LEASE.reset(token)
            with self._lock:
                lease.ended = True
                for digest in lease.ids:
                    self._held[digest] -= 1
                    if self._held[digest] <= 0:
                        del self._held[digest]
                    if self._touched is not None:
                        self._touched.add(digest)
            if lease.ids and not lease.committed:
                for listener in list(self._orphan_listeners):
                    listener()

    def on_orphans(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (in the task ending the lease) when a lease ends holding ids whose
        event was not recorded; returns a function removing it."""
        self._orphan_listeners.append(listener)
        return lambda: self._orphan_listeners.remove(listener) if listener in self._orphan_listeners else None

    @contextmanager
    def sweeping(self) -> Iterator[int]:
        """A sweep's span: ids put or released from now until it ends are not removed by
        :meth:`remove`. Yields the moment it began (``time_ns``): files changed later are not
        the sweep's to judge."""
        with self._lock:
            self._touched = set()
        try:
            yield time.time_ns()
        finally:
            with self._lock:
                self._touched = None

    def in_flight(self) -> set[str]:
        """The ids held now (by leases, or for good)."""
        with self._lock:
            return set(self._held) | self._kept | set(self._kept_for)

    def held_for_good(self) -> set[str]:
        """The ids held for good now: put outside a lease or after it ended, or kept
        (:meth:`keep`), and not yet found named (nor let go)."""
        with self._lock:
            return self._kept | set(self._kept_for)

    def release_named(self, named: Iterable[str]) -> None:
        """Stop holding for good the ids of ``named``, ids some event in the log names: a named
        artifact is never removed (no sweep takes an id an event names), so a hold on it guards
        nothing any more. The live sweep calls it with what its projections found named, which
        is what keeps the set of ids held for good from growing for as long as the daemon runs.
        (Ids held by an open lease are counted apart and stay held until it ends.)"""
        gone = set(named)
        with self._lock:
            self._kept.difference_update(gone)
            for digest in gone & self._kept_for.keys():
                del self._kept_for[digest]

    def keep(self, ids: Iterable[str]) -> None:
        """Hold ``ids`` for good, as if put outside a lease: bytes an event will name after the
        lease they were put in has ended (an edit that completed while its abort waited, whose
        ``file.edited`` the abort records once the call's task, and its lease, are over). One
        hold per id given (twice given, twice held), until :meth:`let_go` is given it as often."""
        with self._lock:
            self._kept_for.update(ids)

    def let_go(self, ids: Iterable[str]) -> None:
        """Let go of one :meth:`keep` hold per id given (the event naming them committed, or none
        ever will); holds no keep took are left (those of other keeps, of a put outside a lease,
        of an open lease), and an id with none left is not counted below nothing."""
        ids = list(ids)
        with self._lock:
            for digest in ids:
                if self._kept_for[digest] <= 1:
                    self._kept_for.pop(digest, None)
                else:
                    self._kept_for[digest] -= 1
            if self._touched is not None:  # (as a lease's end: a sweep under way leaves them)
                self._touched.update(ids)

    def _hold(self, digest: str) -> None:
        """Hold ``digest`` for the current lease, or for good without one (under _lock)."""
        lease = _LEASE.get()
        if lease is not None and lease.store is self and not lease.ended:
            lease.ids.append(digest)
            self._held[digest] += 1
        else:
            self._kept.add(digest)
        if self._touched is not None:
            self._touched.add(digest)

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
                        self._forget(digest)  # (as the sweep's removal: its verdict goes with its file)
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
            self._hold(digest)  # (before the file is looked at: a sweep's removal waits for this lock)
            if self._intact(digest):
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

    def remove(self, names: Sequence[str]) -> tuple[list[str], list[tuple[str, OSError]]]:
        """Unlink ``names`` (entries of ``artifacts/`` as :meth:`leftovers` lists them) under the
        store's lock, then sync the directory, except the ids in flight: held, or put or
        released since :meth:`sweeping` began. The names kept so, and the names that could not
        go, with why (one gone already is not a failure)."""
        failed: list[tuple[str, OSError]] = []
        kept: list[str] = []
        with self._lock:
            for name in names:
                if (name in self._held or name in self._kept or name in self._kept_for
                        or (self._touched is not None and name in self._touched)):
                    kept.append(name)
                    continue
                self._provisional.discard(name)
                self._forget(name)
                try:
                    (self.root / name).unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    failed.append((name, exc))
            if len(failed) + len(kept) < len(names):
                sync_directory(self.root)
        return kept, failed

    def open(self, artifact_id: str) -> OpenArtifact:
        """The artifact's file opened for reading (the caller closes it), unchecked.
        Raises ``ArtifactError``: ``ARTIFACT_NOT_FOUND`` (no such id, or a name that is no id),
        ``ARTIFACT_CORRUPT`` (something else than a regular file of at most
        :data:`MAX_ARTIFACT_BYTES` in its place)."""
        if not SHA256_RE.fullmatch(artifact_id):
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}")
        try:
            fd, st = open_regular_file(self.root / artifact_id, MAX_ARTIFACT_BYTES)
        except FileNotFoundError:
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}") from None
        except (NotARegularFile, FileTooLarge) as exc:
            raise ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} is damaged on disk: {exc.strerror}") from None
        return OpenArtifact(artifact_id, fd, st)

    def check(self, opened: OpenArtifact) -> None:
        """Judge the open file against its id: by the verdict remembered for its identity, else
        by reading it whole through the same descriptor (in pieces of :data:`CHUNK_BYTES`) and
        remembering the verdict. Raises ``ArtifactError`` ``ARTIFACT_CORRUPT`` when its bytes do
        not match the id, it grew past :data:`MAX_ARTIFACT_BYTES`, or its size or ``mtime``
        changed since it was opened, or it changed twice while it was read (a file is never
        changed in place under its id: that is damage too); ``OSError``
        when it cannot be read. Blocks: call it off the event loop."""
        # (the identity is asked of the descriptor again: a verdict for the file as it was opened
        # holds only while nothing changed it since)
        with self._judging(opened, opened.identity_now) as judge:
            if judge:
                self._read_and_judge(opened)

    def _read_and_judge(self, opened: OpenArtifact) -> None:
        """``check``'s reading: the file hashed whole through its descriptor, the verdict
        remembered for the identity it was read at."""
        before, digest, identity = opened.identity, "", None
        for _ in range(2):
            with self._verdicts_lock:
                self.verifications += 1
            digest, identity = opened.digest()
            if identity == before or not _metadata_changed(before, identity):
                break
            # Only its ctime moved while it was read: a link added or removed (a sweep's removal),
            # its mode, or a write with its mtime put back. Read once more from the same
            # descriptor, judged as it is now (a second change meanwhile is damage).
            before = identity
        if identity != before:
            self._forget(opened.id)
            raise ArtifactError("ARTIFACT_CORRUPT", f"artifact {opened.id} is damaged on disk: it changed "
                                                    "while it was checked against its id")
        # (the size is the descriptor's, unchanged while it was read: at most the limit)
        damage = _mismatch(opened.id) if digest != opened.id else None
        self._remember(opened.id, identity, damage)
        if damage is not None:
            raise damage

    @contextmanager
    def _judging(self, opened: OpenArtifact, now: Callable[[], FileIdentity | None]) -> Iterator[bool]:
        """Whether the open file is still to be judged (the block reads and judges it): not when
        a verdict remembered for its id holds for it, reached on a file of the identity it was
        opened with, which ``now`` (the identity of what is judged; None: not the file opened)
        still is; a damaged one is raised (``ARTIFACT_CORRUPT``) instead. One judgment of a file
        at a time: while another caller judges the same id on a file of the same identity, this
        one waits for it to end and then looks again (a verdict it remembered holds; a check
        that failed remembered none, so this caller judges the file itself). The wait holds no
        lock (a judge takes none but the verdicts' for a moment, so none waits on a waiter), and
        the judge wakes its waiters however its block ends."""
        key = (opened.id, opened.identity)
        while True:
            current = now()
            with self._verdicts_lock:
                known = self._verdicts.get(opened.id)
                if known is not None and known[0] == opened.identity == current:
                    self._verdicts.move_to_end(opened.id)
                    damage = known[1]
                    break
                if current != opened.identity:  # (changed since opened: no verdict to share)
                    running, done = None, None
                else:
                    running = self._judged_now.get(key)
                    done = None if running is not None else self._judged_now.setdefault(key, threading.Event())
            if running is not None:
                running.wait()
                continue
            try:
                yield True
            finally:
                if done is not None:
                    with self._verdicts_lock:
                        del self._judged_now[key]
                    done.set()
            return
        if damage is not None:
            raise ArtifactError("ARTIFACT_CORRUPT", damage)
        yield False

    def _remember(self, artifact_id: str, identity: FileIdentity, damage: ArtifactError | None) -> None:
        with self._verdicts_lock:
            self._verdicts[artifact_id] = (identity, damage.message if damage is not None else None)
            self._verdicts.move_to_end(artifact_id)
            while len(self._verdicts) > self.verified_files:
                self._verdicts.popitem(last=False)

    def _forget(self, artifact_id: str) -> None:
        with self._verdicts_lock:
            self._verdicts.pop(artifact_id, None)

    def _intact(self, artifact_id: str) -> bool:
        """Whether the artifact's file is there and holds the bytes of its id (missing, not a
        regular file, too large, unreadable or damaged: no)."""
        try:
            with self.open(artifact_id) as opened:
                self.check(opened)
        except (ArtifactError, OSError):
            return False
        return True

    def get(self, artifact_id: str) -> bytes:
        """The artifact's bytes, checked against its id as :meth:`check` judges a file (once per
        file on disk: the bytes of a file whose verdict holds are not hashed again; a file
        changed since it was judged is); raises as :meth:`open` does, ``ARTIFACT_CORRUPT`` when
        they no longer match it. Holds the whole artifact: for the images sent to a model, the
        copies an edit's revert restores and a job's output, not for serving (see :meth:`open`)."""
        with self.open(artifact_id) as opened:
            data = opened.read_whole()
            read_as = opened.identity_now()
        if len(data) > MAX_ARTIFACT_BYTES:  # (a file growing while it is read is still held to the limit)
            raise _too_large(artifact_id)
        # (the bytes held are the file's as it was opened only when its identity did not change
        # while they were read: only then is a verdict for that file theirs, or theirs its file's)
        unchanged = read_as == opened.identity and len(data) == opened.size
        with self._judging(opened, lambda: read_as if unchanged else None) as judge:
            if judge:
                with self._verdicts_lock:
                    self.verifications += 1
                damage = _mismatch(artifact_id) if hashlib.sha256(data).hexdigest() != artifact_id else None
                if unchanged:
                    self._remember(artifact_id, read_as, damage)
                if damage is not None:
                    raise damage
        return data

    def head(self, artifact_id: str) -> ArtifactHead:
        """The artifact's size and first :data:`HEAD_BYTES` bytes, the rest unread; raises as
        :meth:`open` does. Its digest is not checked (:meth:`check` is)."""
        with self.open(artifact_id) as opened:
            return ArtifactHead(opened.size, opened.read_at(0, min(opened.size, HEAD_BYTES)))

    def verify(self, artifact_id: str) -> int:
        """Check the artifact against its id (:meth:`check`: once per file on disk); its size.
        Raises as :meth:`open` and :meth:`check` do."""
        with self.open(artifact_id) as opened:
            self.check(opened)
            return opened.size


def _too_large(artifact_id: str) -> ArtifactError:
    return ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} is damaged on disk: it is larger "
                                             f"than {MAX_ARTIFACT_BYTES} bytes")


def _mismatch(artifact_id: str) -> ArtifactError:
    return ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} is damaged on disk (its bytes no longer "
                                             "match its SHA-256)")


def _read_at(fd: int, offset: int, length: int) -> bytes:
    """At most ``length`` bytes of ``fd`` from ``offset`` (``pread``: fewer only at the end)."""
    chunks, total = [], 0
    while total < length:
        chunk = os.pread(fd, min(length - total, CHUNK_BYTES * 16), offset + total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _digest(fd: int) -> tuple[str, int]:
    """The SHA-256 (hex) of what ``fd`` holds from its start, read in pieces of
    :data:`CHUNK_BYTES` up to one byte past :data:`MAX_ARTIFACT_BYTES`, and how many bytes."""
    h, offset = hashlib.sha256(), 0
    while offset <= MAX_ARTIFACT_BYTES:
        chunk = os.pread(fd, CHUNK_BYTES, offset)
        if not chunk:
            break
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest(), offset
