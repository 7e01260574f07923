"""The event store: the single writer of ``events.db``, with group commit.

Callers ``await store.append(...)`` from any trio task. Events are encoded and compressed in
the caller's task (so the writer thread only inserts); the writer task drains everything queued
into one transaction on its own connection, commits it durably, and only then acknowledges each
caller. A ``request_id`` already recorded for the session returns the original ``seq`` and writes
nothing, also when both arrive in the same batch.

Lifetime: the writer runs inside a nursery the caller owns::

    async with open_store(data_dir) as store:   # opens, runs the writer, closes
        result = await store.append(Draft(...))

or ``store = EventStore.open(...)`` then ``await nursery.start(store.run)``.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Sequence

import apsw
import trio

from .codec import DEFAULT_MAX_EVENT_BYTES, Codec, Encoded, train_dictionary
from .errors import (
    AppendRejected,
    ConcurrencyConflict,
    DataDirNotWritable,
    LogError,
    StoreClosed,
    StoreOpenError,
)
from .reader import LogReader, StoredEvent, StoredRow
from .schema import (
    LOCK_FILE,
    Synchronous,
    check_data_dir,
    now_ms,
    open_read_connection,
    open_write_connection,
)
from .types import _Event

MAX_BATCH_EVENTS = 1024
QUEUE_DEPTH = 4096


class StoreLocked(StoreOpenError):
    code = "STORE_LOCKED"


class StoreWriteFailed(LogError):
    code = "STORE_WRITE_FAILED"


@dataclass(frozen=True, slots=True)
class Draft:
    """One event to append, with its envelope. Ids arrive from the caller, never invented here."""

    event: _Event
    project_id: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    task_id: str | None = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """``seqs`` of the appended events; on a duplicate, ``seqs`` holds the original event's seq."""

    seqs: tuple[int, ...]
    session_seqs: tuple[int | None, ...]
    ts: int
    duplicate: bool = False

    @property
    def seq(self) -> int:
        return self.seqs[-1]


@dataclass(slots=True)
class _Row:
    draft: Draft
    encoded: Encoded


@dataclass(slots=True)
class _Pending:
    rows: list[_Row]
    expected_session_seq: int | None
    done: trio.Event = field(default_factory=trio.Event)
    result: AppendResult | None = None
    error: LogError | None = None


class EventStore:
    """Single writer of one data directory's ``events.db``.

    Holds an exclusive lock file so that no second process writes the same log.
    """

    def __init__(
        self,
        data_dir: Path,
        conn: apsw.Connection,
        lock_fd: int,
        codec: Codec,
    ) -> None:
        self.data_dir = data_dir
        self._conn = conn
        self._lock_fd = lock_fd
        self.codec = codec
        self._limiter = trio.CapacityLimiter(1)
        self._send: trio.MemorySendChannel[_Pending] | None = None
        self._session_seq: dict[str, int] = {}
        row = conn.execute("SELECT coalesce(max(seq), 0), coalesce(max(ts), 0) FROM events").fetchall()[0]
        self._next_seq: int = row[0] + 1
        self._last_ts: int = row[1]
        self.last_seq: int = row[0]
        self._committed = trio.Event()
        self._reader: LogReader | None = None
        self._read_limiter = trio.CapacityLimiter(1)
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(
        cls,
        data_dir: Path | str,
        *,
        synchronous: Synchronous = "FULL",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        compression_level: int = 3,
    ) -> "EventStore":
        """Open (creating if needed) the log in ``data_dir`` for writing.

        Raises :class:`~events.errors.StoreOpenError` subclasses: missing/unwritable directory,
        foreign or unsupported store, or another process holding the writer lock.
        """
        data_dir = check_data_dir(Path(data_dir), create=True)
        lock_path = data_dir / LOCK_FILE
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise DataDirNotWritable(f"cannot create {lock_path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(
                f"data directory {data_dir} is in use by another Lens process; stop it or "
                f"choose another --data directory"
            ) from None
        try:
            conn = open_write_connection(data_dir, synchronous)
            dicts = dict(conn.execute("SELECT dict_id, data FROM dictionaries"))
            active = dict(conn.execute("SELECT key, value FROM meta")).get("active_dict_id")
            codec = Codec(
                level=compression_level,
                max_event_bytes=max_event_bytes,
                dictionaries=dicts,
                active_dict_id=int(active) if active else None,
            )
        except BaseException:
            os.close(fd)
            raise
        return cls(data_dir, conn, fd, codec)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task. Returns when :meth:`close_writer` was called and the queue is drained.

        Every append accepted before that is committed and acknowledged; a cancelled writer
        finishes the transaction it is in (shielded) and fails the rest with ``STORE_CLOSED``.
        """
        send, recv = trio.open_memory_channel[_Pending](QUEUE_DEPTH)
        self._send = send
        task_status.started()
        try:
            async with recv:
                async for first in recv:
                    group = [first]
                    count = len(first.rows)
                    while count < MAX_BATCH_EVENTS:
                        try:
                            nxt = recv.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        group.append(nxt)
                        count += len(nxt.rows)
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(self._write_group, group, limiter=self._limiter)
                        self._acknowledge(group)
        finally:
            self._send = None
            self._closed = True
            self._committed.set()  # wake wait_for() callers so they see the store closed
            # Fail whatever is still queued: it was never written.
            while True:
                try:
                    pending = recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                pending.error = StoreClosed("the event store closed before this append was written")
                pending.done.set()

    def close_writer(self) -> None:
        """Stop accepting appends; :meth:`run` returns once the queue is drained."""
        if self._send is not None:
            self._send.close()

    def close(self) -> None:
        """Release the connection and the lock. Call after :meth:`run` returned."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._conn.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # ------------------------------------------------------------------ appends

    def encode(self, drafts: Sequence[Draft]) -> list[_Row]:
        """Encode ``drafts`` (in the caller's thread); validates the envelope rules."""
        if not drafts:
            raise AppendRejected("an append needs at least one event")
        with_request = [d for d in drafts if d.request_id is not None]
        if len(with_request) > 1:
            raise AppendRejected("at most one event of an append may carry a request_id")
        for d in with_request:
            if d.session_id is None:
                raise AppendRejected("an event with a request_id must belong to a session")
        return [_Row(d, self.codec.encode(d.event)) for d in drafts]

    async def append(self, *drafts: Draft, expected_session_seq: int | None = None) -> AppendResult:
        """Append ``drafts`` atomically, in order; return once they are durably committed.

        ``expected_session_seq``: the session's last ``session_seq`` the caller has seen (all
        drafts must then share one session); a mismatch raises ``SESSION_SEQ_CONFLICT`` and
        writes nothing. Raises :class:`AppendRejected` for bad drafts, :class:`StoreClosed` when
        the writer is not running, :class:`StoreWriteFailed` when the commit failed.
        If the caller is cancelled while waiting, the append may still be committed.
        """
        rows = self.encode(drafts)
        sids = {d.session_id for d in drafts}
        if expected_session_seq is not None and (len(sids) != 1 or None in sids):
            raise AppendRejected("expected_session_seq needs all events in one session")
        pending = _Pending(rows, expected_session_seq)
        send = self._send
        if send is None:
            raise StoreClosed("the event store is not accepting appends")
        try:
            await send.send(pending)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise StoreClosed("the event store is not accepting appends") from None
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    async def wait_for(self, after_seq: int) -> int:
        """Wait until some event with ``seq > after_seq`` is committed; return ``last_seq``."""
        while self.last_seq <= after_seq:
            if self._closed:
                raise StoreClosed("the event store closed")
            await self._committed.wait()
        return self.last_seq

    # ------------------------------------------------------------------ writer thread

    def _acknowledge(self, group: list[_Pending]) -> None:
        for pending in group:
            pending.done.set()
        committed = self._committed
        self._committed = trio.Event()
        committed.set()

    def _last_session_seq(self, session_id: str) -> int:
        last = self._session_seq.get(session_id)
        if last is None:
            last = self._conn.execute(
                "SELECT coalesce(max(session_seq), 0) FROM events WHERE session_id = ?",
                (session_id,),
            ).fetchall()[0][0]
            self._session_seq[session_id] = last
        return last

    def _plan(
        self,
        pending: _Pending,
        now: int,
        out: list[tuple],
        batch_requests: dict[tuple[str | None, str], tuple[int, int | None, int]],
    ) -> None:
        """Decide ``pending``'s rows (or its duplicate/conflict answer) inside the open txn."""
        conn = self._conn
        for r in pending.rows:
            d = r.draft
            if d.request_id is not None:
                found = conn.execute(
                    "SELECT seq, session_seq, ts FROM events WHERE session_id = ? AND request_id = ?",
                    (d.session_id, d.request_id),
                ).fetchall()
                if not found:
                    # A twin earlier in this same batch is not inserted yet: look it up here.
                    twin = batch_requests.get((d.session_id, d.request_id))
                    if twin is not None:
                        found = [twin]
                if found:
                    seq, sseq, ts = found[0]
                    pending.result = AppendResult((seq,), (sseq,), ts, duplicate=True)
                    return
        if pending.expected_session_seq is not None:
            sid = pending.rows[0].draft.session_id
            assert sid is not None
            current = self._last_session_seq(sid)
            if current != pending.expected_session_seq:
                pending.error = ConcurrencyConflict(
                    f"session {sid} is at session_seq {current}, "
                    f"not {pending.expected_session_seq} as expected"
                )
                return
        seqs: list[int] = []
        sseqs: list[int | None] = []
        for r in pending.rows:
            d = r.draft
            seq = self._next_seq
            self._next_seq += 1
            sseq: int | None = None
            if d.session_id is not None:
                sseq = self._last_session_seq(d.session_id) + 1
                self._session_seq[d.session_id] = sseq
            e = r.encoded
            out.append(
                (seq, now, d.project_id, d.session_id, sseq, d.agent_id, d.task_id, e.kind,
                 d.request_id, e.dict_id, e.raw_size, e.body)
            )
            seqs.append(seq)
            sseqs.append(sseq)
            if d.request_id is not None:
                batch_requests[(d.session_id, d.request_id)] = (seq, sseq, now)
        pending.result = AppendResult(tuple(seqs), tuple(sseqs), now)

    def _write_group(self, group: list[_Pending]) -> None:
        try:
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

    def _write(self, group: list[_Pending]) -> None:
        conn = self._conn
        now = max(now_ms(), self._last_ts)
        out: list[tuple] = []
        batch_requests: dict[tuple[str | None, str], tuple[int, int | None, int]] = {}
        conn.execute("BEGIN IMMEDIATE")
        try:
            for pending in group:
                self._plan(pending, now, out, batch_requests)
            if out:
                conn.executemany(
                    "INSERT INTO events(seq, ts, project_id, session_id, session_seq, agent_id, "
                    "task_id, kind, request_id, dict_id, raw_size, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    out,
                )
            conn.execute("COMMIT")
        except BaseException:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
            raise
        self._last_ts = now
        if out:
            self.last_seq = out[-1][0]

    def _reset_caches(self) -> None:
        self._session_seq.clear()
        row = self._conn.execute("SELECT coalesce(max(seq), 0), coalesce(max(ts), 0) FROM events").fetchall()[0]
        self._next_seq = row[0] + 1
        self.last_seq = row[0]

    @staticmethod
    def _fail(group: list[_Pending], exc: apsw.Error) -> None:
        for pending in group:
            pending.result = None
            pending.error = StoreWriteFailed(f"the event log could not commit this append: {exc}")

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
    ) -> list[StoredEvent]:
        """Decoded events with ``seq > after`` (at most ``limit``), off the trio thread."""

        def read() -> list[StoredEvent]:
            reader = self._get_reader()
            return [
                reader.decode(r)
                for r in reader.rows(after=after, to=to, session_id=session_id, limit=limit)
            ]

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    async def read_rows(self, *, after: int = 0, limit: int = 1000) -> list[StoredRow]:
        def read() -> list[StoredRow]:
            return list(self._get_reader().rows(after=after, limit=limit))

        return await trio.to_thread.run_sync(read, limiter=self._read_limiter)

    # ------------------------------------------------------------------ dictionaries

    def train_dictionary(self, *, max_samples: int = 5000, size: int = 16 * 1024) -> int:
        """Train a zstd dictionary on the log's latest events, store it and use it for new rows.

        Synchronous: call it before :meth:`run` (the CLI) or through ``trio.to_thread`` with
        the writer idle. Old rows keep their own dictionary id and always decode.
        """
        reader = self._get_reader()
        last = reader.last_seq()
        samples = [
            self.codec.decompress(r.body, r.dict_id)
            for r in reader.rows(after=max(0, last - max_samples))
        ]
        dict_id, data = train_dictionary(samples, size)
        with self._conn:
            self._conn.execute(
                "INSERT OR IGNORE INTO dictionaries(dict_id, data, created_ts, sample_count) "
                "VALUES (?, ?, ?, ?)",
                (dict_id, data, now_ms(), len(samples)),
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('active_dict_id', ?)",
                (str(dict_id),),
            )
        if dict_id not in self.codec.dictionary_ids:
            self.codec.add_dictionary(dict_id, data)
        self.codec.use_dictionary(dict_id)
        return dict_id


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
