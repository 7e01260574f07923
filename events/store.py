"""The event store: the single writer of ``events.db``, with group commit.

Callers ``await store.append(...)`` from any trio task. Events are encoded in the caller's
task; the appends of one trio batch are compressed together in the store's own task (one call
that releases the GIL) and put on a thread-safe queue, so the writer thread only inserts. One
persistent writer thread drains everything queued into one transaction on its own connection
(one multi-row ``INSERT`` in autocommit mode), commits it durably, and only then acknowledges
the whole group with one ``TrioToken.run_sync_soon``. Producers keep encoding while the thread
commits. A ``request_id`` already recorded for the session returns the original ``seq`` and
writes nothing, also when both arrive in the same batch, and also when the repeat's event
could not be stored now (past a maximum event size lowered since).

Lifetime: the writer runs inside a nursery the caller owns::

    async with open_store(data_dir) as store:   # opens, runs the writer, closes
        result = await store.append(Draft(...))

or ``store = EventStore.open(...)`` then ``await nursery.start(store.run)``.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import queue
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence

import apsw
import msgspec
import trio
import zstandard

from .codec import (DEFAULT_MAX_EVENT_BYTES, MIN_DICTIONARY_SAMPLES, Codec, free_dictionary_id, train_dictionary,
                    usable_dictionaries)
from .errors import (
    AppendRejected,
    ConcurrencyConflict,
    CorruptEvent,
    DataDirNotWritable,
    LogError,
    StoreClosed,
    StoreOpenError,
    TooFewSamples,
    WalDamaged,
)
from .reader import EventPage, LogReader, StoredEvent, StoredRow
from .secrets import Secrets
from .schema import (
    ACTIVE_DICT_KEY,
    EVENTS_DB,
    LOCK_FILE,
    MAX_EVENT_BYTES_KEY,
    TS_AHEAD_LIMIT_MS,
    TS_STEP_BACK_KEY,
    Synchronous,
    check_data_dir,
    now_ms,
    open_read_connection,
    open_write_connection,
    recorded_active_dictionary,
    recorded_max_event_bytes,
    refuse_foreign_early,
    refuse_wal_without_its_log,
    translate_open_error,
    ts_steps_back,
)
from .types import _Event, kind_of
from .walcheck import REFUSED_COMMITS_AFTER, read_once

log = logging.getLogger("lens.events")

MAX_BATCH_EVENTS = 1024
# A trio batch that has appended this many events is handed to the writer at once, so that
# its commit overlaps with the rest of the batch (two cohorts of producers take turns: one
# encodes while the other's commit is on disk).
HAND_OVER_EVENTS = 32
# A batch of at most this many bytes of MessagePack is compressed by the task that hands it over
# (about a millisecond at most, while the writer thread writes the batch before: compressing every
# batch in the writer took that overlap away, some 15 % of bench/log_bench.py's appends a
# second); a larger one by the writer thread, never on the event loop (a body of a few megabytes
# took 20 to 30 ms there).
COMPRESS_ON_LOOP_BYTES = 256 * 1024
QUEUE_DEPTH = 4096
# Train a zstd dictionary automatically once the log holds this many events (and none is
# active yet); ``None`` turns it off. See EventStore.open.
AUTO_DICTIONARY_AFTER = 10_000
AUTO_DICTIONARY_SAMPLES = 5000
AUTO_DICTIONARY_SIZE = 16 * 1024
# A dictionary is for small events: a training's samples are events of at most this many raw
# bytes (picked by ``raw_size`` before any is decompressed), together at most the second bound.
DICTIONARY_SAMPLE_MAX_BYTES = 64 * 1024
DICTIONARY_SAMPLES_MAX_BYTES = 16 * 1024 * 1024
# Decoded body bytes (``raw_size``) one ``read_events`` page holds at most, besides its ``limit``
# of events: a page of events near ``max_event_bytes`` stays a few events, not gigabytes.
READ_BYTES = 16 * 1024 * 1024
# Sessions whose last ``session_seq`` the writer keeps in memory. Past this many, the half first
# cached is forgotten after a commit; a forgotten session's next append reads its last
# ``session_seq`` back from the log (one lookup on the UNIQUE(session_id, session_seq) index).
# So a daemon that writes to ever more sessions holds a few hundred kilobytes, not an entry for
# every session it has written to since it started.
CACHED_SESSIONS = 4096

_STOP = object()  # tells the writer thread to exit
MAX_SEQ = 2**63 - 1  # SQLite's largest integer: no seq or session_seq goes past it
# Rows per multi-row INSERT statement (12 parameters each, under SQLite's 32,766).
MAX_STATEMENT_ROWS = 1024
_COLUMNS = (
    "seq, ts, project_id, session_id, session_seq, agent_id, task_id, kind, request_id, "
    "dict_id, raw_size, body"
)
_ROW_PARAMS = "(" + ", ".join("?" * 12) + ")"


def _insert_sql(rows: int) -> str:
    """``INSERT`` of ``rows`` rows in one statement (apsw caches the prepared statements)."""
    return f"INSERT INTO events({_COLUMNS}) VALUES " + ", ".join([_ROW_PARAMS] * rows)


class StoreLocked(StoreOpenError):
    code = "STORE_LOCKED"


class StoreWriteFailed(LogError):
    code = "STORE_WRITE_FAILED"
    # Whether the file system under the log failed (full, read-only, I/O, locked), which may
    # pass; False for what this append itself caused.
    storage: bool = False


# SQLite's errors of the storage under the log, not of what an append holds.
STORAGE_ERRORS = (apsw.FullError, apsw.IOError, apsw.ReadOnlyError, apsw.CantOpenError, apsw.BusyError)


class _LookUpRequests(Exception):
    """Internal: a group planned without looking up its request ids needs them after all."""


@dataclass(frozen=True, slots=True)
class Draft:
    """One event to append, with its envelope. Ids arrive from the caller, never invented here."""

    event: _Event
    project_id: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    task_id: str | None = None
    request_id: str | None = None


_ENVELOPE_IDS = ("project_id", "session_id", "agent_id", "task_id", "request_id")


def _check_envelope(d: Draft) -> None:
    """Refuse envelope ids SQLite cannot store as text (checked before the writer thread sees
    them: a lone surrogate there used to fail the writer for good)."""
    for name in _ENVELOPE_IDS:
        value = getattr(d, name)
        if value is None:
            continue
        if type(value) is not str:
            raise AppendRejected(f"{name} must be text or None, not {type(value).__name__}")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise AppendRejected(f"{name} {value!r} is not valid Unicode (a lone surrogate)") from None


class AppendResult(msgspec.Struct, frozen=True, gc=False):
    """``seqs`` of the appended events; on a duplicate, ``seqs`` holds the original event's seq.

    A frozen msgspec Struct rather than a dataclass: the writer thread builds one per append
    while holding the GIL, and a frozen dataclass costs ~0.5 µs to construct (~0.06 here).
    """

    seqs: tuple[int, ...]
    session_seqs: tuple[int | None, ...]
    ts: int
    duplicate: bool = False
    # The events as stored, when they differ from those appended (a secret replaced by its
    # marker, see ``EventStore.append``); None when they were stored as given.
    events: tuple[_Event, ...] | None = None

    @property
    def seq(self) -> int:
        return self.seqs[-1]


class _Pending:
    """One ``append`` on its way to the writer thread: its drafts, their checked MessagePack,
    then (once its batch is compressed) the stored bodies, and finally the answer."""

    __slots__ = ("drafts", "raws", "bodies", "dict_id", "expected_session_seq", "task", "result",
                 "error")

    def __init__(
        self, drafts: Sequence[Draft], raws: list[bytes], expected_session_seq: int | None
    ) -> None:
        self.drafts = drafts
        self.raws = raws
        self.bodies: list[bytes] = []
        self.dict_id = 0
        self.expected_session_seq = expected_session_seq
        # The waiting trio task, rescheduled by the acknowledgement (None once it gave up).
        self.task: trio.lowlevel.Task | None = None
        self.result: AppendResult | None = None
        self.error: LogError | None = None


def _declared_size(body: bytes) -> int:
    """The content size a stored body's zstd frame declares (-1: none, or no frame)."""
    try:
        return zstandard.frame_content_size(body)
    except zstandard.ZstdError:
        return -1


def _compressed(batch: list[_Pending]) -> bool:
    """Whether the batch's bodies are compressed (by the task that handed it over)."""
    return all(len(pending.bodies) == len(pending.raws) for pending in batch)


def _stored_events(group: list[_Pending]) -> list[StoredEvent]:
    """The events a committed group wrote, in ``seq`` order (duplicates and failures wrote none)."""
    out: list[StoredEvent] = []
    for pending in group:
        result = pending.result
        if result is None or result.duplicate or pending.error is not None:
            continue
        ts = result.ts
        for d, seq, sseq in zip(pending.drafts, result.seqs, result.session_seqs):
            out.append(StoredEvent(seq, ts, d.project_id, d.session_id, sseq, d.agent_id, d.task_id,
                                   kind_of(d.event), d.request_id, d.event))
    return out


def _lock_exclusively(path: Path, flags: int, refusal: str) -> int:
    """Open ``path`` and take an exclusive ``flock`` on it without waiting; returns the
    descriptor that holds it. Raises :class:`DataDirNotWritable` when it cannot be opened,
    :class:`StoreLocked` with ``refusal`` when another process holds it."""
    try:
        fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        verb = "create" if flags & os.O_CREAT else "open"
        raise DataDirNotWritable(f"cannot {verb} {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLocked(refusal) from None
    return fd


def refuse_hidden_commits(data_dir: Path, synchronous: Synchronous) -> None:
    """Refuse to write a log whose ``events.db-wal`` hides durable commits (WAL_DAMAGED).

    SQLite reads the WAL up to its first frame whose checksum or salt is wrong and drops the rest
    without a word; the first write after that overwrites them. Called with the writer's lock
    held, so the file holds still (one read). With ``synchronous`` FULL or EXTRA every commit is
    synced before the next transaction begins, so a power cut can tear the last transaction
    only: two commits or more after the break mean a commit already durable was damaged since.
    One commit after it (a torn last transaction, most likely, which was never acknowledged), or
    any finding under a weaker ``synchronous`` (where a power cut may tear several), is logged and
    the log opened as SQLite reads it; ``lens log verify`` reports it either way."""
    wal = data_dir / f"{EVENTS_DB}-wal"
    try:
        found = read_once(wal)
    except OSError:  # (one that cannot be read: SQLite's own open says so, as it did)
        return
    if found is None:
        return
    if found.commits_after >= REFUSED_COMMITS_AFTER and synchronous in ("FULL", "EXTRA"):
        raise WalDamaged(found.message(wal))
    log.warning("%s: frame %d breaks the chain with %d commit(s) after it (a write cut short by a power "
                "cut, or damage); opened as SQLite reads it", wal.name, found.bad_frame, found.commits_after)


def _lock_log_file(data_dir: Path) -> int:
    """Lock ``events.db`` itself (through any symlink), as the data directory's lock file is.

    The lock file guards a directory; an ``events.db`` that is a symlink to another directory's
    log let a second daemon write that log beside its own daemon (both planning seqs from their
    own caches). ``flock`` locks are apart from SQLite's own (POSIX) locks on the same file.
    """
    path = data_dir / EVENTS_DB
    target = os.path.realpath(path)
    return _lock_exclusively(path, os.O_RDONLY, (
        f"{path} is in use by another Lens process"
        + (f" (it is a link to {target}, which that process writes)" if target != str(path) else "")
        + "; stop it or choose another --data directory"))


def _identities(data_dir: Path, log_fd: int) -> tuple[tuple[str, str, tuple[int, int]], ...]:
    """``(name, path, (st_dev, st_ino))`` of the ``events.db`` open as ``log_fd`` and of the
    ``-wal`` beside it (when the write connection's open made one): the files the writer commits
    into. (The path as a string, made once: the writer looks at it before every group.)"""
    opened = os.fstat(log_fd)
    out = [(EVENTS_DB, str(data_dir / EVENTS_DB), (opened.st_dev, opened.st_ino))]
    wal_path = str(data_dir / f"{EVENTS_DB}-wal")
    try:
        wal = os.stat(wal_path)
    except OSError:
        pass
    else:
        out.append((f"{EVENTS_DB}-wal", wal_path, (wal.st_dev, wal.st_ino)))
    return tuple(out)


class EventStore:
    """Single writer of one data directory's ``events.db``.

    Holds an exclusive lock file so that no second process writes the same log.

    Appends are encoded (MessagePack, checked) in the caller's trio task and batched; once the
    tasks that trio runs together have all appended, :meth:`run` compresses the batch in one
    call that releases the GIL and hands it to one persistent writer thread through a
    thread-safe queue. The thread takes everything queued (up to :data:`MAX_BATCH_EVENTS`),
    plans seqs, inserts and commits it with one SQLite call, and then acknowledges the whole
    group with one ``run_sync_soon`` into trio; meanwhile other producers keep encoding, so
    encoding and committing overlap. Few GIL hand-offs between the two threads matter more
    here than anything else: each one can cost tens of microseconds.
    """

    def __init__(
        self,
        data_dir: Path,
        conn: apsw.Connection,
        lock_fd: int,
        codec: Codec,
        *,
        auto_dictionary_after: int | None = AUTO_DICTIONARY_AFTER,
        cached_sessions: int = CACHED_SESSIONS,
        secrets: Secrets | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.secrets = secrets or Secrets()
        self._conn = conn
        self._lock_fd = lock_fd
        self._log_fd = -1  # events.db itself, locked too (see _lock_log_file)
        # (name, path, (st_dev, st_ino)) of events.db and of its -wal as opened: see _log_file_gone
        self._log_files: tuple[tuple[str, str, tuple[int, int]], ...] = ()
        self._log_gone: str | None = None  # why nothing more is written (see _log_file_gone)
        self._log_gone_public: str | None = None  # the same, without the data directory's path
        self._gone_lock = threading.Lock()  # one look at a time: the writer's and unwritable()'s
        self.codec = codec
        self._session_seq: dict[str, int] = {}  # writer thread only; see CACHED_SESSIONS
        self._cached_sessions = max(cached_sessions, 1)
        row = conn.execute("SELECT coalesce(max(seq), 0), coalesce(max(ts), 0) FROM events").fetchall()[0]
        steps = ts_steps_back(dict(conn.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ?",
                                                (TS_STEP_BACK_KEY, TS_STEP_BACK_KEY[:-1] + ";"))))
        if steps:  # stamps went on from the clock at the last recorded step: the ts far ahead is behind it
            row = (row[0], conn.execute("SELECT coalesce(max(ts), 0) FROM events WHERE seq >= ?",
                                        (max(steps),)).fetchall()[0][0])
        self._next_seq: int = row[0] + 1
        self._last_ts: int = row[1] if type(row[1]) is int else 0  # (text only in an edited log)
        self.last_seq: int = row[0]
        self.opened_last_ts: int = self._last_ts  # (the log's largest ts when opened: see schema.ts_ahead)
        self.opened_clock: int = now_ms()
        # A largest ts more than TS_AHEAD_LIMIT_MS ahead of the clock (an edited row, a clock once
        # set far ahead) is not carried on to every later event: the writer stamps from the clock
        # again, and records the step back (TS_STEP_BACK_KEY) with the first event it stamps so.
        self.ts_ahead_seq: int | None = None  # (the row holding it, when it is so)
        self._step_back_from: int | None = None
        if self._last_ts - self.opened_clock > TS_AHEAD_LIMIT_MS:
            self._step_back_from, self._last_ts = self._last_ts, 0
            found = conn.execute("SELECT seq FROM events WHERE ts = ? AND seq >= ? LIMIT 1",
                                 (self.opened_last_ts, max(steps, default=0))).fetchall()
            self.ts_ahead_seq = found[0][0] if found else None
        self._committed = trio.Event()
        self._listeners: list[Callable[[list[StoredEvent]], None]] = []
        self._reader: LogReader | None = None
        self._read_limiter = trio.CapacityLimiter(1)
        self._closed = False
        # writer thread and its hand-over state
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._conn_lock = threading.Lock()  # the write connection: writer thread vs train_dictionary
        self._thread: threading.Thread | None = None
        self._accepting = False  # trio thread only
        self._closing: trio.Event | None = None  # set by close_writer (or a failed writer)
        self._batch: list[_Pending] = []  # appended in this trio batch, not yet handed over
        self._batched = 0  # events in _batch
        self._wake = trio.Event()  # tells run() a batch (or closing) is waiting
        self._outstanding = 0  # appends queued and not yet acknowledged (trio thread only)
        self._drained: trio.Event | None = None
        self._space: trio.Event | None = None
        self._abort = False  # set by a cancelled run(): the thread fails what it has not begun
        self._writer_error: BaseException | None = None
        self._auto_dictionary_after = auto_dictionary_after
        self._trained: tuple[int, bytes, int] | None = None  # from the background trainer
        self._trainer: threading.Thread | None = None  # joined by close()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(
        cls,
        data_dir: Path | str,
        *,
        synchronous: Synchronous = "FULL",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        compression_level: int = 3,
        auto_dictionary_after: int | None = AUTO_DICTIONARY_AFTER,
        cached_sessions: int = CACHED_SESSIONS,
        secrets: Secrets | None = None,
    ) -> "EventStore":
        """Open (creating if needed) the log in ``data_dir`` for writing.

        ``auto_dictionary_after``: once the log holds this many events and no zstd dictionary
        is active, the writer thread trains one (as :meth:`train_dictionary` does) between two
        groups and uses it for new rows; ``None`` never trains one automatically.
        ``cached_sessions``: see :data:`CACHED_SESSIONS`.
        ``secrets``: values no stored event may hold (see :meth:`append`).

        Raises :class:`~events.errors.StoreOpenError` subclasses: missing/unwritable directory,
        foreign or unsupported store, or another process holding the writer lock.
        """
        data_dir = check_data_dir(Path(data_dir), create=True)
        refuse_foreign_early(data_dir / EVENTS_DB)  # (a refusal leaves nothing, not even `lock`)
        if not os.path.lexists(data_dir / LOCK_FILE):
            # A WAL without its events.db: with no `lock`, no daemon is running there (one would
            # hold it), so it is refused before anything is made. Else it is checked under the
            # lock: a daemon still running keeps the file it holds open, and is STORE_LOCKED.
            refuse_wal_without_its_log(data_dir, daemon_may_run=False)
        fd = _lock_exclusively(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, (
            f"data directory {data_dir} is in use by another Lens process; stop it or "
            f"choose another --data directory"))
        log_fd = -1
        try:
            refuse_hidden_commits(data_dir, synchronous)
            conn = open_write_connection(data_dir, synchronous)
            try:
                log_fd = _lock_log_file(data_dir)
                dicts, damaged = usable_dictionaries(
                    dict(conn.execute("SELECT dict_id, data FROM dictionaries"))
                )
                meta = dict(conn.execute("SELECT key, value FROM meta"))
                active_id = recorded_active_dictionary(meta)
                recorded = recorded_max_event_bytes(meta)
                if max_event_bytes > recorded:
                    # Recorded before any event can be larger than what readers assumed so far.
                    with conn:
                        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                     (MAX_EVENT_BYTES_KEY, str(max_event_bytes)))
                codec = Codec(
                    level=compression_level,
                    # Events this log holds may be as large as any earlier writer's maximum: they
                    # are read up to it, while new ones are held to this store's own.
                    max_event_bytes=max(max_event_bytes, recorded),
                    max_append_bytes=max_event_bytes,
                    dictionaries=dicts,
                    # A damaged active dictionary: new bodies go without one (and the automatic
                    # dictionary, if on, trains a new one); old bodies needing it fail by name.
                    active_dict_id=active_id if active_id in dicts else None,
                )
                for dict_id, reason in damaged.items():
                    codec.mark_damaged(dict_id, reason)
                store = cls(data_dir, conn, fd, codec, auto_dictionary_after=auto_dictionary_after,
                            cached_sessions=cached_sessions, secrets=secrets)
                store._log_fd = log_fd
                store._log_files = _identities(data_dir, log_fd)
            except apsw.Error as exc:
                conn.close()
                raise translate_open_error(exc, data_dir / EVENTS_DB) from None
            except BaseException:
                conn.close()
                raise
        except BaseException:
            os.close(fd)
            if log_fd >= 0:
                os.close(log_fd)
            raise
        return store

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the writer. Returns when :meth:`close_writer` was called and the queue is drained.

        Every append accepted before that is committed and acknowledged; a cancelled writer
        finishes the transaction it is in and fails the rest with ``STORE_CLOSED``.

        This task also hands each batch of appends to the writer thread: woken by the first
        append of a trio batch, it runs in the next one, after every task of that batch has
        appended, so the appends of tasks that run together travel (and commit) together.
        """
        if self._thread is not None:
            raise RuntimeError("the event store's writer already ran")
        token = trio.lowlevel.current_trio_token()
        self._closing = closing = trio.Event()
        self._thread = threading.Thread(
            target=self._thread_main, args=(token,), name="lens-event-writer", daemon=True
        )
        self._thread.start()
        self._accepting = True
        task_status.started()
        try:
            while not closing.is_set():
                await self._wake.wait()
                self._wake = trio.Event()
                self._hand_over()
        except BaseException:
            self._abort = True  # cancelled: what the thread has not begun fails with STORE_CLOSED
            raise
        finally:
            self._accepting = False
            self._hand_over()
            with trio.CancelScope(shield=True):
                while self._outstanding:
                    self._drained = trio.Event()
                    await self._drained.wait()
            self._queue.put(_STOP)
            self._closed = True
            self._committed.set()  # wake wait_for() callers so they see the store closed
            if self._space is not None:
                self._space.set()
        if self._writer_error is not None:
            raise self._writer_error

    def _hand_over(self) -> None:
        """Queue the batch for the writer thread: compressed here in one GIL-free call when it is
        small (:data:`COMPRESS_ON_LOOP_BYTES`), else left to the writer thread to compress."""
        batch, self._batch = self._batch, []
        self._batched = 0
        if not batch:
            return
        if sum(len(raw) for pending in batch for raw in pending.raws) <= COMPRESS_ON_LOOP_BYTES:
            if not self._compress(batch):
                self._acknowledge(batch)
                return
        self._queue.put(batch)

    def _compress(self, batch: list[_Pending]) -> bool:
        """Compress the batch's bodies in one GIL-free call. False when zstd refuses (not
        expected: out of memory, a zstd bug): each append of the batch then fails, and nothing
        of it is written."""
        raws = [raw for pending in batch for raw in pending.raws]
        try:
            bodies, dict_id = self.codec.compress_many(raws)
        except zstandard.ZstdError as exc:
            for pending in batch:
                pending.error = StoreWriteFailed(f"the event could not be compressed ({exc})")
            return False
        i = 0
        for pending in batch:
            n = len(pending.raws)
            pending.bodies = bodies[i : i + n]
            pending.dict_id = dict_id
            i += n
        return True

    def close_writer(self) -> None:
        """Stop accepting appends; :meth:`run` returns once the queue is drained."""
        self._accepting = False
        if self._closing is not None:
            self._closing.set()
            self._wake.set()

    def close(self) -> None:
        """Release the connection and the lock. Call after :meth:`run` returned. Waits for the
        writer thread and for the dictionary trainer (which reads on a connection of its own and
        trains for at most a few seconds), so that no thread of this store outlives it."""
        if self._thread is not None:
            self._queue.put(_STOP)  # harmless if run() already sent one
            self._thread.join()
        if self._trainer is not None:
            self._trainer.join()
            self._trainer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._conn.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
        if self._log_fd >= 0:
            os.close(self._log_fd)
            self._log_fd = -1

    # ------------------------------------------------------------------ appends

    def pack(self, drafts: Sequence[Draft]) -> list[bytes]:
        """Check and encode ``drafts`` to MessagePack (in the caller's thread); validates the
        envelope rules. Raises :class:`AppendRejected`."""
        if not drafts:
            raise AppendRejected("an append needs at least one event")
        pack = self.codec.pack_checked
        if len(drafts) == 1:
            d = drafts[0]
            if d.request_id is not None and d.session_id is None:
                raise AppendRejected("an event with a request_id must belong to a session")
            _check_envelope(d)
            return [pack(d.event)]
        for d in drafts:
            _check_envelope(d)
        with_request = [d for d in drafts if d.request_id is not None]
        if len(with_request) > 1:
            raise AppendRejected("at most one event of an append may carry a request_id")
        for d in with_request:
            if d.session_id is None:
                raise AppendRejected("an event with a request_id must belong to a session")
        return [pack(d.event) for d in drafts]

    async def append(self, *drafts: Draft, expected_session_seq: int | None = None) -> AppendResult:
        """Append ``drafts`` atomically, in order; return once they are durably committed.

        ``expected_session_seq``: the session's last ``session_seq`` the caller has seen (all
        drafts must then share one session); a mismatch raises ``SESSION_SEQ_CONFLICT`` and
        writes nothing. Raises :class:`AppendRejected` for bad drafts, :class:`StoreClosed` when
        the writer is not running, :class:`StoreWriteFailed` when the commit failed.
        If the caller is cancelled while waiting, the append may still be committed.

        Every string of an event that holds one of :attr:`secrets` is stored with it replaced by
        its marker; the result's ``events`` then holds the events as stored (what the caller
        should fold), and the commit listeners see those.
        """
        try:
            raws = self.pack(drafts)
            scrubbed = self._scrub(drafts, raws) if self.secrets else None
        except AppendRejected:
            # A repeat of a recorded request id is answered with the original (F-LOG-4) even
            # when its event could not be stored now (past a maximum lowered since, say).
            original = await self._recorded(drafts) if self._accepting else None
            if original is None:
                raise
            return original
        if expected_session_seq is not None:
            sids = {d.session_id for d in drafts}
            if len(sids) != 1 or None in sids:
                # A repeat is answered before expected_session_seq is looked at, also this check.
                original = await self._recorded(drafts) if self._accepting else None
                if original is None:
                    raise AppendRejected("expected_session_seq needs all events in one session")
                return original
        if not self._accepting:
            raise StoreClosed("the event store is not accepting appends")
        await trio.lowlevel.checkpoint_if_cancelled()
        while self._outstanding >= QUEUE_DEPTH:  # back-pressure: wait for the writer
            if self._space is None:
                self._space = trio.Event()
            await self._space.wait()
            if not self._accepting:
                raise StoreClosed("the event store is not accepting appends")
        if scrubbed is not None:
            drafts = scrubbed
        pending = _Pending(drafts, raws, expected_session_seq)
        pending.task = trio.lowlevel.current_task()
        self._outstanding += 1
        batch = self._batch
        batch.append(pending)
        self._batched += len(raws)
        if self._batched >= HAND_OVER_EVENTS:
            self._hand_over()  # a long trio batch: let the writer start on this part now
        else:
            self._wake.set()
        # No checkpoint between batching and parking: the acknowledgement runs in this trio
        # thread (run_sync_soon or run()), so it cannot come before we park.

        def abort(_: object) -> trio.lowlevel.Abort:
            pending.task = None  # cancelled while waiting: the append may still commit
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        if scrubbed is not None and not pending.result.duplicate:
            return msgspec.structs.replace(pending.result, events=tuple(d.event for d in drafts))
        return pending.result

    def _scrub(self, drafts: Sequence[Draft], raws: list[bytes]) -> list[Draft] | None:
        """``drafts`` with the :attr:`secrets` they hold replaced by their markers (``raws``
        rewritten to match), or None when they hold none. Raises :class:`AppendRejected` when
        a rewritten event no longer fits the schema or the size limit."""
        out: list[Draft] | None = None
        for i, raw in enumerate(raws):
            clean = self.secrets.scrub_packed(raw)
            if clean is None:
                continue
            try:
                event = self.codec.decode_raw(kind_of(drafts[i].event), clean)
            except CorruptEvent as exc:
                raise AppendRejected(f"{exc} (after a secret in it was replaced by its marker)") from None
            raws[i] = self.codec.pack_checked(event)
            if out is None:
                out = list(drafts)
            out[i] = replace(drafts[i], event=event)
        return out

    def on_commit(self, listener: Callable[[list[StoredEvent]], None]) -> Callable[[], None]:
        """Call ``listener`` with the events of each committed group, as they are stored.

        Called in the trio thread, once per group and in ``seq`` order, as the group is
        acknowledged (before :meth:`wait_for` callers wake): the events with their ``seq``,
        ``session_seq``, ``ts`` and envelope, sharing the appended (frozen) event objects, so a
        consumer of every new event (the SSE bus) need not read them back from the log. A
        repeated ``request_id`` (nothing written) and failed appends are not in it. The listener
        must be quick and must not raise: it runs inside the acknowledgement of every append.
        Returns a function that removes the listener.
        """
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    async def wait_for(self, after_seq: int) -> int:
        """Wait until some event with ``seq > after_seq`` is committed; return ``last_seq``."""
        while self.last_seq <= after_seq:
            if self._closed:
                raise StoreClosed("the event store closed")
            await self._committed.wait()
        return self.last_seq

    async def _recorded(self, drafts: Sequence[Draft]) -> AppendResult | None:
        """The original answer (``duplicate``) for the one request id ``drafts`` carry, if the
        log holds it; None when it does not, or they carry none, several or one that cannot be
        stored."""
        with_request = [d for d in drafts if d.request_id is not None]
        if len(with_request) != 1:
            return None
        d = with_request[0]
        if d.session_id is None or d.request_id is None:
            return None
        try:
            _check_envelope(d)
        except AppendRejected:
            return None
        return await self.recorded(d.session_id, d.request_id)

    async def recorded(self, session_id: str, request_id: str) -> AppendResult | None:
        """The original answer (``duplicate``) for ``request_id`` if the session recorded it (a
        look-up only, read off the trio thread); None when it did not."""

        def read() -> list[tuple[int, int | None, int]]:
            return self._get_reader().conn.execute(
                "SELECT seq, session_seq, ts FROM events WHERE session_id = ? AND request_id = ?",
                (session_id, request_id)).fetchall()

        rows = await trio.to_thread.run_sync(read, limiter=self._read_limiter)
        if not rows:
            return None
        seq, sseq, ts = rows[0]
        return AppendResult((seq,), (sseq,), ts, duplicate=True)

    # ------------------------------------------------------------------ trio side of the writer

    def _acknowledge(self, group: list[_Pending]) -> None:
        """Run in trio (``run_sync_soon``) after a group was committed or failed."""
        reschedule = trio.lowlevel.reschedule
        for pending in group:
            task = pending.task
            if task is not None:
                pending.task = None
                reschedule(task)
        self._outstanding -= len(group)
        if self._listeners:
            events = _stored_events(group)
            if events:
                for listener in list(self._listeners):
                    listener(events)
        committed = self._committed
        self._committed = trio.Event()
        committed.set()
        if self._space is not None and self._outstanding < QUEUE_DEPTH:
            self._space.set()
            self._space = None
        if self._drained is not None and not self._outstanding:
            self._drained.set()

    def _writer_failed(self) -> None:
        self._accepting = False
        if self._closing is not None:
            self._closing.set()
            self._wake.set()

    # ------------------------------------------------------------------ writer thread

    def _thread_main(self, token: trio.lowlevel.TrioToken) -> None:
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        while True:
            first = get()
            if first is _STOP:
                return
            assert isinstance(first, list)
            batches: list[list[_Pending]] = [first]
            count = sum(len(p.drafts) for p in first)
            stop = False
            while count < MAX_BATCH_EVENTS:
                try:
                    nxt = get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                assert isinstance(nxt, list)
                batches.append(nxt)
                count += sum(len(p.drafts) for p in nxt)
            group = [pending for batch in batches for pending in batch]
            if self._abort:
                for pending in group:
                    pending.error = StoreClosed("the event store closed before this append was written")
            else:
                try:
                    # (a large batch is compressed here; one zstd refuses fails whole; the rest are written)
                    written = [pending for batch in batches if _compressed(batch) or self._compress(batch)
                               for pending in batch]
                    if written:
                        with self._conn_lock:
                            self._write_group(written)
                    if len(self._session_seq) > self._cached_sessions:
                        self._forget_sessions()
                except BaseException as exc:  # a bug, not a SQLite error: stop writing
                    self._writer_error = exc
                    self._abort = True
                    for pending in group:
                        pending.result = None
                        pending.error = StoreWriteFailed(f"the event log writer failed: {exc!r}")
                    token.run_sync_soon(self._writer_failed)
            token.run_sync_soon(self._acknowledge, group)
            if stop:
                return
            if self._trained is not None:
                self._install_trained()
            elif (
                self._auto_dictionary_after is not None
                and not self._abort
                and not self.codec.active_dict_id
                and self.last_seq >= self._auto_dictionary_after
            ):
                self._auto_dictionary_after = None  # once per run
                self._trainer = threading.Thread(
                    target=self._train_in_background, name="lens-dictionary-trainer", daemon=True
                )
                self._trainer.start()

    def _train_in_background(self) -> None:
        """Read samples on a connection of its own and train; the writer installs the result."""
        try:
            conn = open_read_connection(self.data_dir)
            try:
                samples = self._samples(conn, AUTO_DICTIONARY_SAMPLES)
                if self._closed:
                    return  # the store is closing (close() waits for this thread): nothing would install it
                dict_id, data = self._trained_on(samples, conn, AUTO_DICTIONARY_SAMPLES, AUTO_DICTIONARY_SIZE)
            finally:
                conn.close()
        except CorruptEvent as exc:  # (damage is never hidden: one line naming the seq)
            log.warning("no zstd dictionary trained: %s; new events stay without one", exc)
            return
        except (zstandard.ZstdError, apsw.Error, LogError) as exc:
            # not trainable (too few or too uniform samples): keep going without one
            log.info("no zstd dictionary trained: %s; new events stay without one", exc)
            return
        self._trained = (dict_id, data, len(samples))

    def _install_trained(self) -> None:
        """In the writer thread, between two groups: record the trained dictionary, use it."""
        trained, self._trained = self._trained, None
        assert trained is not None
        if self._abort or self.codec.active_dict_id:
            return  # closing, or someone called train_dictionary meanwhile
        try:
            with self._conn_lock:
                self._record_dictionary(*trained)
        except apsw.Error:
            pass  # not recorded, so not used; new rows stay without a dictionary

    def _last_session_seq(self, session_id: str) -> int:
        last = self._session_seq.get(session_id)
        if last is None:
            last = self._conn.execute(
                "SELECT coalesce(max(session_seq), 0) FROM events WHERE session_id = ?",
                (session_id,),
            ).fetchall()[0][0]
            self._session_seq[session_id] = last
        return last

    def _forget_sessions(self) -> None:
        """Drop the half of the cached ``session_seq``s first cached. Called between groups only,
        when every cached value is committed (a failed group cleared them all), so the log
        answers a forgotten session's next append with the same number."""
        cache = self._session_seq
        for sid in list(itertools.islice(cache, len(cache) - self._cached_sessions // 2)):
            del cache[sid]

    def _known_requests(
        self, group: list[_Pending]
    ) -> dict[tuple[str | None, str], tuple[int, int | None, int]]:
        """The already-stored ``(session_id, request_id)`` pairs of ``group``, in one query."""
        keys = [
            (d.session_id, d.request_id)
            for pending in group
            for d in pending.drafts
            if d.request_id is not None
        ]
        if not keys:
            return {}
        found: dict[tuple[str | None, str], tuple[int, int | None, int]] = {}
        for start in range(0, len(keys), 256):
            chunk = keys[start : start + 256]
            sql = (
                "SELECT session_id, request_id, seq, session_seq, ts FROM events "
                "WHERE request_id IS NOT NULL AND (session_id, request_id) IN (VALUES "
                + ", ".join("(?, ?)" for _ in chunk)
                + ")"
            )
            for sid, rid, seq, sseq, ts in self._conn.execute(sql, [v for k in chunk for v in k]):
                found[(sid, rid)] = (seq, sseq, ts)
        return found

    def _plan(
        self,
        pending: _Pending,
        now: int,
        out: list[tuple],
        known: dict[tuple[str | None, str], tuple[int, int | None, int]],
        looked_up: bool,
    ) -> None:
        """Decide ``pending``'s rows (or its duplicate/conflict answer).

        ``known`` maps the group's already-stored request ids to their original rows (if
        ``looked_up``); rows planned here are added to it, so a twin later in the same group is
        a duplicate too.
        """
        drafts = pending.drafts
        for d in drafts:
            if d.request_id is not None:
                found = known.get((d.session_id, d.request_id))
                if found is not None:
                    seq, sseq, ts = found
                    pending.result = AppendResult((seq,), (sseq,), ts, duplicate=True)
                    return
        if pending.expected_session_seq is not None:
            sid = drafts[0].session_id
            assert sid is not None
            current = self._last_session_seq(sid)
            if current != pending.expected_session_seq:
                if not looked_up and any(d.request_id is not None for d in drafts):
                    raise _LookUpRequests  # a repeat answers with its original, not a conflict
                pending.error = ConcurrencyConflict(
                    f"session {sid} is at session_seq {current}, "
                    f"not {pending.expected_session_seq} as expected"
                )
                return
        session_seq = self._session_seq
        seqs: list[int] = []
        sseqs: list[int | None] = []
        seq = self._next_seq
        for d in drafts:
            if d.session_id is not None:
                last = self._last_session_seq(d.session_id)
                if type(last) is not int or last + len(drafts) > MAX_SEQ:
                    # Only a log edited by hand gets here; the writer lives on.
                    pending.error = StoreWriteFailed(
                        f"session {d.session_id}'s last session_seq in the log is {last!r}: no session_seq "
                        f"follows it (the log was edited); `lens log verify` reports the row")
                    return
        if seq + len(drafts) - 1 > MAX_SEQ:
            pending.error = StoreWriteFailed(
                f"the log's last seq is {seq - 1}: no seq follows it (the log was edited); start a new "
                f"data directory")
            return
        dict_id = pending.dict_id
        for d, raw, body in zip(drafts, pending.raws, pending.bodies):
            sid = d.session_id
            sseq: int | None = None
            if sid is not None:
                last = session_seq.get(sid)
                if last is None:
                    last = self._last_session_seq(sid)
                sseq = session_seq[sid] = last + 1
            out.append(
                (seq, now, d.project_id, sid, sseq, d.agent_id, d.task_id, kind_of(d.event),
                 d.request_id, dict_id, len(raw), body)
            )
            seqs.append(seq)
            sseqs.append(sseq)
            if d.request_id is not None:
                known[(sid, d.request_id)] = (seq, sseq, now)
            seq += 1
        self._next_seq = seq
        pending.result = AppendResult(tuple(seqs), tuple(sseqs), now)

    def _log_file_gone(self) -> str | None:
        """Why the log can no longer be written, once ``events.db`` or its ``-wal`` was deleted,
        moved or replaced (the data directory with them) while this store holds them open; else
        ``None``.

        SQLite goes on committing into the files it opened. An unlinked ``events.db`` is freed
        when the daemon stops: every append acknowledged from then on would be lost. An unlinked
        ``-wal`` is folded into ``events.db`` by a graceful stop, but a crash loses what it holds,
        and every other connection (a reader of the daemon's, ``lens log``) meets a ``-shm`` that
        names frames the new ``-wal`` does not have. So from the first group that finds either
        gone, every append fails (``storage``: the disk under the log, not what the append holds),
        and the daemon's log says so once. A file put back at the path is another file: the store
        never writes it; a restart opens it."""
        with self._gone_lock:
            if self._log_gone is None:
                self._look_for_log_files()
            return self._log_gone

    def unwritable(self) -> str | None:
        """Why this store refuses every append until the daemon restarts (its ``events.db`` or
        ``-wal`` deleted, moved or replaced: see :meth:`_log_file_gone`), looked at now, in words
        that name the file but not the data directory's path; ``None`` while it can write. A
        failure that may pass (a full or read-only disk) is none: the next append may succeed."""
        self._log_file_gone()
        return self._log_gone_public

    def _look_for_log_files(self) -> None:
        for name, path, identity in self._log_files:
            try:
                found = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                what = "deleted (or its data directory moved or deleted)"
            except OSError:
                continue  # (not reachable by name now, as in a directory made private: it is still there)
            else:
                if (found.st_dev, found.st_ino) == identity:
                    continue
                what = "replaced by another file"
            kept = ("what it recorded is in events.db once it stops" if name != EVENTS_DB else
                    "what it would record now is lost when it stops")
            self._log_gone_public = (f"{name} was {what} while the daemon runs: nothing more can be "
                                     f"recorded; stop the daemon and start it on a restored data directory")
            self._log_gone = (f"{path} was {what} while the daemon runs: nothing more can be recorded "
                              f"({kept}); stop the daemon and start it on a restored data directory")
            log.error("%s", self._log_gone)
            break

    def _write_group(self, group: list[_Pending]) -> None:
        gone = self._log_file_gone()
        if gone is not None:
            for pending in group:
                pending.result = None
                pending.error = StoreWriteFailed(f"the event log could not commit this append: {gone}")
                pending.error.storage = True
            return
        try:
            try:
                self._write(group, look_up_requests=False)
            except (apsw.ConstraintError, _LookUpRequests):
                # Most likely a request id stored before (a retry): plan again, looking them up.
                self._reset_caches()
                for pending in group:
                    pending.result = pending.error = None
                self._write(group)
        except apsw.Error as exc:
            # Something unexpected failed the shared transaction: retry each caller alone so
            # one bad append cannot fail the others.
            self._reset_caches()
            if len(group) == 1:
                self._fail(group, exc)
                return
            for pending in group:
                pending.result = pending.error = None
                try:
                    self._write([pending])
                except apsw.Error as exc2:
                    self._reset_caches()
                    self._fail([pending], exc2)

    def _write(self, group: list[_Pending], *, look_up_requests: bool = True) -> None:
        """Plan the group's rows and commit them in one transaction.

        Only this thread writes ``events.db`` (the lock file keeps other processes out), so
        the plan's reads need no transaction. Up to :data:`MAX_STATEMENT_ROWS` rows go in as
        one multi-row ``INSERT`` in autocommit mode: one SQLite call inserts and commits, so
        the thread hands the GIL back and forth once per group instead of once per row.

        ``look_up_requests=False`` skips looking up the group's request ids first: a repeated
        one then fails the whole statement on the unique index (nothing is written) and the
        caller plans again with the lookup. Repeats are rare (client retries), and each query
        costs a GIL hand-off.
        """
        conn = self._conn
        now = max(now_ms(), self._last_ts)
        out: list[tuple] = []
        known = self._known_requests(group) if look_up_requests else {}
        for pending in group:
            self._plan(pending, now, out, known, look_up_requests)
        if out:
            step_back = self._step_back_from
            if len(out) <= MAX_STATEMENT_ROWS and step_back is None:
                conn.execute(_insert_sql(len(out)), [v for row in out for v in row])
            else:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(_insert_sql(1), out)
                    if step_back is not None:  # (the step back, in the transaction of its first event)
                        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                     (f"{TS_STEP_BACK_KEY}{out[0][0]}", f"{step_back} {now}"))
                    conn.execute("COMMIT")
                except BaseException:
                    if not conn.getautocommit():
                        conn.execute("ROLLBACK")
                    raise
                self._step_back_from = None
            self.last_seq = out[-1][0]
        self._last_ts = now

    def _reset_caches(self) -> None:
        self._session_seq.clear()
        row = self._conn.execute("SELECT coalesce(max(seq), 0), coalesce(max(ts), 0) FROM events").fetchall()[0]
        self._next_seq = row[0] + 1
        self.last_seq = row[0]

    @staticmethod
    def _fail(group: list[_Pending], exc: apsw.Error) -> None:
        storage = isinstance(exc, STORAGE_ERRORS)
        # (SQLite names a file the system refused to grow "disk I/O error" as often as "disk is
        # full": the message says what may be behind either)
        why = f"{exc} (the disk may be full, read-only or failing)" if storage else str(exc)
        for pending in group:
            pending.result = None
            pending.error = StoreWriteFailed(f"the event log could not commit this append: {why}")
            pending.error.storage = storage

    # ------------------------------------------------------------------ reads for the daemon

    def _get_reader(self) -> LogReader:
        if self._reader is None:
            self._reader = LogReader(
                self.data_dir,
                max_event_bytes=self.codec.max_event_bytes,
                connection=open_read_connection(self.data_dir),
            )
        return self._reader

    async def read_events(
        self,
        *,
        after: int = 0,
        limit: int = 1000,
        session_id: str | None = None,
        to: int | None = None,
        after_session_seq: int | None = None,
        max_bytes: int = READ_BYTES,
        kinds: Sequence[str] | None = None,
        project_id: str | None = None,
    ) -> list[StoredEvent]:
        """Decoded events with ``seq > after`` (at most ``limit``), off the trio thread.

        ``after_session_seq``: only events with a ``session_seq`` above it (see ``LogReader.rows``).
        ``kinds``: only events of these kinds (the others are skipped in SQL, never decoded);
        ``project_id``: only events of this project (likewise; no index, so bound it with ``to``).
        A page also ends before its decoded bodies would pass ``max_bytes`` (but holds at least
        one event), so a page shorter than ``limit`` is not the end: read on until one is empty.
        """

        def read() -> list[StoredEvent]:
            reader = self._get_reader()
            return list(reader.events(after=after, to=to, session_id=session_id, limit=limit,
                                      after_session_seq=after_session_seq, max_bytes=max_bytes, kinds=kinds,
                                      project_id=project_id))

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    async def read_event_page(self, *, session_id: str, after: int = 0, limit: int = 1000,
                              max_bytes: int = READ_BYTES) -> EventPage:
        """:meth:`read_events` of one session, with the decoded bytes its rows declare
        (:class:`EventPage`): a caller's cheap estimate of the page's size before it makes anything
        of it (the events API, which encodes a large page off the event loop)."""

        def read() -> EventPage:
            return self._get_reader().page(after=after, session_id=session_id, limit=limit, max_bytes=max_bytes)

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    async def session_last_seq(self, session_id: str, *, to: int | None = None) -> int:
        """The ``seq`` of the session's last committed event (at most ``to``); 0 when it has none."""

        def read() -> int:
            return self._get_reader().session_last_seq(session_id, to)

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    async def session_kinds(self, session_id: str, seq: int, *, back: bool, limit: int) -> list[tuple[int, Any]]:
        """``(seq, kind)`` of a session's events near ``seq``, bodies left undecoded (see
        ``LogReader.session_kinds``)."""

        def read() -> list[tuple[int, Any]]:
            return self._get_reader().session_kinds(session_id, seq, back=back, limit=limit)

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    async def session_project(self, session_id: str) -> str | None:
        """The project of session ``session_id`` as its rows record it (see ``LogReader.session_project``)."""

        def read() -> str | None:
            return self._get_reader().session_project(session_id)

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    def open_tail_reader(self) -> "TailReader":
        """A reader of its own for one steady consumer (the SSE bus): it never waits behind
        session replays on the shared reader. Close it when done."""
        return TailReader(self.data_dir, self.codec.max_event_bytes)

    async def read_rows(self, *, after: int = 0, limit: int = 1000) -> list[StoredRow]:
        def read() -> list[StoredRow]:
            return list(self._get_reader().rows(after=after, limit=limit))

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    # ------------------------------------------------------------------ dictionaries

    def train_dictionary(self, *, max_samples: int = 5000, size: int = 16 * 1024) -> int:
        """Train a zstd dictionary on the log's latest events, store it and use it for new rows.

        Synchronous: call it before :meth:`run` (the CLI) or through ``trio.to_thread``; it
        waits for the writer thread's current group. Old rows keep their own dictionary id and
        always decode. The writer also calls it by itself once (see ``auto_dictionary_after``).
        """
        with self._conn_lock:
            return self._train_locked(max_samples, size)

    def _train_locked(self, max_samples: int, size: int) -> int:
        samples = self._samples(self._conn, max_samples)
        dict_id, data = self._trained_on(samples, self._conn, max_samples, size)
        return self._record_dictionary(dict_id, data, len(samples))

    def _samples(self, conn: apsw.Connection, max_samples: int) -> list[bytes]:
        """The raw MessagePack of the small events among the log's latest ``max_samples``, in
        ``seq`` order: each at most :data:`DICTIONARY_SAMPLE_MAX_BYTES`, the latest first up to
        :data:`DICTIONARY_SAMPLES_MAX_BYTES` together. Rows are picked by ``raw_size`` in the
        query, so a larger event's body is never read. A picked row whose frame declares another
        size, or that does not decompress, is :class:`CorruptEvent` naming its seq (F-LOG-6:
        damage is never skipped; ``lens log verify`` reports it too)."""
        decompress = self.codec.decompress
        out: list[bytes] = []
        total = 0
        for seq, body, dict_id, raw_size in conn.execute(
            "SELECT seq, body, dict_id, raw_size FROM events WHERE seq > ? AND raw_size BETWEEN 1 AND ? "
            "ORDER BY seq DESC",
            (self._first_sampled(conn, max_samples) - 1, DICTIONARY_SAMPLE_MAX_BYTES),
        ):
            if total + raw_size > DICTIONARY_SAMPLES_MAX_BYTES:
                break
            if type(body) is not bytes:
                raise CorruptEvent(f"body is a {type(body).__name__}, not a BLOB", seq=seq)
            declared = _declared_size(body)
            if declared != raw_size:  # (checked before decompressing: the row's size picked it)
                said = (f"its zstd frame declares {declared} bytes" if declared >= 0
                        else "it is no zstd frame declaring its size")
                raise CorruptEvent(f"the row records raw_size {raw_size} but {said}", seq=seq)
            try:
                out.append(decompress(body, dict_id))
            except CorruptEvent as exc:
                raise exc.at(seq) from None
            total += raw_size
        out.reverse()
        return out

    @staticmethod
    def _first_sampled(conn: apsw.Connection, max_samples: int) -> int:
        """The first seq of the log's latest ``max_samples`` events (the ones a training looks at)."""
        last = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchall()[0][0]
        return max(0, last - max_samples) + 1

    def _trained_on(self, samples: list[bytes], conn: apsw.Connection, max_samples: int,
                    size: int) -> tuple[int, bytes]:
        """``train_dictionary(samples, size)``; too few is :class:`TooFewSamples` saying why (how
        many of the latest ``max_samples`` were over :data:`DICTIONARY_SAMPLE_MAX_BYTES`)."""
        if len(samples) < MIN_DICTIONARY_SAMPLES:
            larger = conn.execute("SELECT count(*) FROM events WHERE seq >= ? AND raw_size > ?",
                                  (self._first_sampled(conn, max_samples), DICTIONARY_SAMPLE_MAX_BYTES)).fetchall()[0][0]
            raise TooFewSamples(
                f"need at least {MIN_DICTIONARY_SAMPLES} events to train a dictionary, have {len(samples)} "
                f"of at most {DICTIONARY_SAMPLE_MAX_BYTES // 1024} KiB among the log's latest {max_samples}; "
                f"{larger} events over {DICTIONARY_SAMPLE_MAX_BYTES // 1024} KiB are there too, but they are "
                f"not samples (a dictionary is for small events)")
        return train_dictionary(samples, size)

    def _record_dictionary(self, dict_id: int, data: bytes, sample_count: int) -> int:
        """Store the trained dictionary and compress new rows with it; returns its id (another
        than ``dict_id`` when the log holds that id with other bytes, see ``free_dictionary_id``)."""
        conn = self._conn
        with conn:
            stored = dict(conn.execute("SELECT dict_id, data FROM dictionaries"))
            dict_id, data = free_dictionary_id(dict_id, data, stored)
            conn.execute(
                "INSERT OR IGNORE INTO dictionaries(dict_id, data, created_ts, sample_count) "
                "VALUES (?, ?, ?, ?)",
                (dict_id, data, now_ms(), sample_count),
            )
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                (ACTIVE_DICT_KEY, str(dict_id)),
            )
        # Only now (the dictionary is durable) may new rows name it.
        if dict_id not in self.codec.dictionary_ids:
            self.codec.add_dictionary(dict_id, data)
        self.codec.use_dictionary(dict_id)
        return dict_id


class TailReader:
    """Decoded events after a ``seq``, read off the trio thread on a connection of its own."""

    def __init__(self, data_dir: Path, max_event_bytes: int) -> None:
        self._reader = LogReader(data_dir, max_event_bytes=max_event_bytes,
                                 connection=open_read_connection(data_dir))
        self._limiter = trio.CapacityLimiter(1)

    async def read_events(self, *, after: int, limit: int = 1000,
                          max_bytes: int = READ_BYTES) -> list[StoredEvent]:
        """As :meth:`EventStore.read_events`: at most ``limit`` events and ``max_bytes``."""
        reader = self._reader
        return await trio.to_thread.run_sync(
            lambda: list(reader.events(after=after, limit=limit, max_bytes=max_bytes)), limiter=self._limiter)

    async def aclose(self) -> None:
        """Close the connection once no read is running on it (shielded: always completes)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._reader.close, limiter=self._limiter)


@asynccontextmanager
async def open_store(data_dir: Path | str, **options: object) -> AsyncIterator[EventStore]:
    """Open the store, run its writer in a nursery of its own, and close it on exit.

    On exit the writer drains every accepted append before the store closes.
    """
    store = EventStore.open(data_dir, **options)  # type: ignore[arg-type]
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            try:
                yield store
            finally:
                store.close_writer()
    finally:
        store.close()
