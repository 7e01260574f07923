"""The projector: tails committed events in ``seq`` order into ``projections.db``.

Each projection owns its tables and a row in ``positions`` (name, version, seq) that is written
in the same transaction as its rows, so a crash never leaves a projection ahead of or behind its
recorded position. A projection whose code version differs from the stored one is rebuilt from
zero, and so is one whose rows depend on more than the events (the history index on the keys it
scrubs) when that input differs from what it was built with: ``inputs`` holds, per projection,
a salted digest of it (:meth:`Projection.fingerprint`; never the input itself), written in the
same transaction as the reset. Everything here is derived: deleting ``projections.db`` is always safe.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Iterator, Sequence

import apsw
import trio
import zstandard

from events.errors import CorruptEvent, DataDirNotWritable, LogError, StoreCorrupt, StoreOpenError
from events.reader import LogReader, StoredEvent, StoredRow, row_problem
from events.schema import (
    BUSY_TIMEOUT_MS,
    EVENTS_DB,
    PROJECTIONS_DB,
    check_side_files,
    create_private,
    probe,
    schema_entries,
    store_busy,
)

Progress = Callable[[int, int], None]
BATCH = 2000
# Decoded events held at once while catching up, counted by their declared sizes: a log of
# large events (up to the maximum event size each) must not need BATCH of them in memory.
BATCH_BYTES = 64 * 1024 * 1024


def _size_problem(row: StoredRow, limit: int) -> str | None:
    """A ``raw_size`` no writer stores (above the maximum event size, or not positive)."""
    if not 0 < row.raw_size <= limit:
        return f"raw_size {row.raw_size} is outside 1..{limit} (the maximum event size)"
    return None


@contextmanager
def _write_transaction(conn: apsw.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``: takes the write lock first (waiting out the busy
    timeout), so reads inside see what no other writer can change before the commit. Inside a
    transaction already open (a rebuild's), it is part of that one."""
    if not conn.getautocommit():
        yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except BaseException:
        # A COMMIT that failed (a full disk) may leave the transaction open: later writes would
        # then take themselves for part of it (above) and never commit. End it.
        if not conn.getautocommit():
            conn.execute("ROLLBACK")
        raise


class UnknownProjection(LogError):
    code = "PROJECTION_UNKNOWN"


class ProjectionsDamaged(StoreOpenError):
    """``projections.db`` is not what this build's projections wrote (damaged, edited, foreign).
    Everything in it is derived from the log, so the remedy is always safe: delete, rebuild."""

    code = "PROJECTIONS_DAMAGED"

    def __init__(self, path: object, detail: str) -> None:
        super().__init__(
            f"{path} does not match the projections of this Lens ({detail}); it holds only data "
            f"derived from the event log: delete it (with its -wal and -shm files) and run "
            f"`lens log rebuild`"
        )


class ProjectionsForeign(ProjectionsDamaged):
    """``projections.db`` is a SQLite database of another program: it holds tables, and no
    ``positions`` table, which every ``projections.db`` Lens made has (it is its first table).
    Unlike a damaged file, it may hold someone's data: it is left as it is, to be moved away."""

    def __init__(self, path: object, tables: Sequence[str]) -> None:
        shown = ", ".join(tables[:8]) + (" …" if len(tables) > 8 else "")
        StoreOpenError.__init__(
            self,
            f"{path} is not a projections file of Lens: it is a SQLite database with {len(tables)} "
            f"table(s) of another program ({shown}) and no positions table, which every projections.db "
            f"of Lens has; it was left unchanged. Move it out of the data directory (it may be another "
            f"program's data), then run `lens log rebuild`, which makes a new one",
        )


class ProjectionsDeletedWhileOpen(StoreOpenError):
    """``projections.db`` was deleted while another process (a running daemon) still had it open:
    the ``-wal`` and ``-shm`` files beside the path belong to that process's copy, and SQLite
    refuses a new file there with a bare "disk I/O error"."""

    code = "PROJECTIONS_DELETED_WHILE_OPEN"

    def __init__(self, path: object) -> None:
        super().__init__(
            f"{path} was deleted while another process (a running `lens serve`) still has it open; "
            f"its -wal and -shm files belong to that process's copy. Stop that daemon (it rebuilds "
            f"{PROJECTIONS_DB} from the log when it starts again), then run this again"
        )


class Projection(ABC):
    """One read model. ``apply`` must be deterministic: the same events give the same rows.

    ``needs_body``: whether ``apply`` reads decoded events (otherwise it gets ``None`` for them
    and works from the stored rows' columns, which is much cheaper).
    """

    name: ClassVar[str]
    version: ClassVar[int]
    needs_body: ClassVar[bool] = True
    tables: ClassVar[tuple[str, ...]]

    @abstractmethod
    def create(self, conn: apsw.Connection) -> None:
        """Create this projection's tables (called inside a transaction)."""

    def drop(self, conn: apsw.Connection) -> None:
        for table in self.tables:
            conn.execute(f"DROP TABLE IF EXISTS {table}")

    @abstractmethod
    def apply(
        self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None
    ) -> None:
        """Fold ``rows`` (in seq order, all after this projection's position) into its tables."""

    def fingerprint(self, salt: bytes) -> str:
        """A salted digest of what, besides the events, this projection's rows depend on (the
        keys the history index scrubs); ``""`` when they depend on the events alone. Rows built
        with another fingerprint are rebuilt (see the module's docstring)."""
        return ""

    def dump(self, conn: apsw.Connection) -> list[tuple]:
        """Every row of every table in a canonical order (for equality checks)."""
        out: list[tuple] = []
        for table in self.tables:
            out.append((table,))
            out.extend(conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"))
        return out


def _wal_mode(conn: apsw.Connection) -> None:
    """Switch ``conn``'s database to WAL. Switching a new file takes an exclusive lock without
    SQLite's busy wait: several processes opening a fresh projections.db at once (`lens log
    stats` run twice) got "database is locked". So a busy switch is retried, within the busy
    timeout (a file already in WAL mode needs no lock)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except apsw.BusyError:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)  # a lock held by another opener, for milliseconds
            pause = min(pause * 2, 0.1)


def _tables(conn: apsw.Connection) -> tuple[list[str], bool]:
    """The tables and views of ``conn``'s database (SQLite's own left out), sorted, and whether
    one of the tables is ``positions``, which every ``projections.db`` Lens made has, whatever its
    layout (it is the first table made, before anything else is written)."""
    entries = schema_entries(conn)
    names = sorted(name for _kind, name in entries if not name.lower().startswith("sqlite_"))
    ours = any(kind == "table" and name.lower() == "positions" for kind, name in entries)
    return names, ours


def _foreign_tables(conn: apsw.Connection) -> list[str] | None:
    """The tables of ``conn``'s database when it is another program's (it has some, and no
    ``positions``); None for a file with no tables yet (an empty SQLite file, made here or by
    hand, is a new projections.db) or one of Lens."""
    names, ours = _tables(conn)
    return names if names and not ours else None


def _refuse_foreign_early(path: Path) -> None:
    """Refuse another program's database as ``projections.db`` before SQLite opens it for real:
    an immutable read of the main file creates nothing (a real open of a WAL database makes its
    ``-wal`` and ``-shm``), and nothing is written into it (the positions table, WAL mode). Any
    other finding (damage, a file SQLite cannot read) is left to the real open.

    A database whose tables are all still in its ``-wal`` shows none to the immutable read: it is
    read again through its WAL, read-only (a read-only connection never checkpoints the WAL into
    the main file, which a closing writer would); SQLite may then make a ``-shm`` (its index of
    the WAL) beside a file that has none, as the real open would too. Both reads are
    :func:`events.schema.probe`'s, which ``events.db``'s early check uses as well."""
    if not path.is_file():
        return
    wal = path.with_name(path.name + "-wal")
    for through_wal in (False, True):
        with probe(path, through_wal=through_wal) as conn:
            if conn is None:
                return
            try:
                names, ours = _tables(conn)
            except apsw.Error:
                return
        if names and not ours:
            raise ProjectionsForeign(path, names)
        # (a WAL database's file has its first page before anything goes to the WAL, and SQLite
        # drops the -wal of an empty file when it opens it: such a pair is left to the real open)
        if names or not (wal.is_file() and wal.stat().st_size and path.stat().st_size):
            return


def open_projections_db(data_dir: Path, *, memory: bool = False) -> apsw.Connection:
    """Open (creating) ``projections.db``; ``memory=True`` gives a throwaway in-memory one."""
    path = ":memory:" if memory else str(data_dir / PROJECTIONS_DB)
    made = not memory and not (data_dir / PROJECTIONS_DB).exists()
    if not memory:
        link = data_dir / PROJECTIONS_DB
        if link.is_symlink() and not link.exists():
            # (SQLite would follow it and make the file it names 0644, with what the history index
            # holds of every conversation; create_private makes no file through a link)
            raise ProjectionsDamaged(path, f"it is a symbolic link to {os.readlink(link)}, which does not lead to a "
                                           f"file")
        if (data_dir / PROJECTIONS_DB).exists() and not (data_dir / PROJECTIONS_DB).is_file():
            # (SQLite says "unable to open database file", which read as a directory not writable)
            raise ProjectionsDamaged(path, "it is a directory or another special file, not a database file")
        # (a -wal, -shm or -journal that is no file read as a directory not writable, or as a file
        # deleted under a daemon, and a FIFO there could block the open: named before anything is made)
        check_side_files(data_dir / PROJECTIONS_DB)
        _refuse_foreign_early(data_dir / PROJECTIONS_DB)
        create_private(data_dir / PROJECTIONS_DB)
    conn: apsw.Connection | None = None
    try:
        conn = apsw.Connection(path)
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
        if not memory and (tables := _foreign_tables(conn)) is not None:  # (its tables in its -wal only)
            conn.close()
            raise ProjectionsForeign(path, tables)
        if not memory and conn.readonly("main"):  # (SQLite opens a file it may not write read-only)
            conn.close()
            raise DataDirNotWritable(f"cannot write {path} (the file is read-only); projections need to "
                                     f"write it: make it writable, or delete it (it is rebuilt from the log)")
        if not memory:
            _wal_mode(conn)
        conn.execute("PRAGMA synchronous=NORMAL")  # derived data: a lost tail is re-projected
        conn.execute(
            "CREATE TABLE IF NOT EXISTS positions("
            "name TEXT PRIMARY KEY, version INTEGER NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID"
        )
        # What a projection was built with besides the events (Projection.fingerprint); no row: "".
        conn.execute(
            "CREATE TABLE IF NOT EXISTS inputs("
            "name TEXT PRIMARY KEY, salt BLOB NOT NULL, digest TEXT NOT NULL) WITHOUT ROWID"
        )
        columns = [row[1] for row in conn.execute("PRAGMA table_info(positions)")]
        if columns != ["name", "version", "seq"]:
            conn.close()
            raise ProjectionsDamaged(path, f"its positions table has columns {', '.join(columns)}")
    except (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError) as exc:
        raise DataDirNotWritable(
            f"cannot write {path} ({exc}); projections need a writable data directory"
        ) from None
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        raise ProjectionsDamaged(path, f"SQLite: {exc}") from None
    except apsw.BusyError as exc:  # (after the busy timeout: another process holds it locked)
        if conn is not None:
            conn.close()
        raise store_busy(path, exc) from None
    except apsw.Error as exc:
        if made and isinstance(exc, apsw.IOError) and _held_elsewhere(data_dir):
            if conn is not None:
                conn.close()
            # The file this open made holds nothing (SQLite may have written its first page):
            # removed, so the path stays as the deletion left it. The -wal and -shm are the
            # other process's and stay.
            try:
                (data_dir / PROJECTIONS_DB).unlink(missing_ok=True)
            except OSError:
                pass
            raise ProjectionsDeletedWhileOpen(path) from None
        raise StoreOpenError(f"cannot open {path}: {exc}") from None
    return conn


def _held_elsewhere(data_dir: Path) -> bool:
    """Whether ``projections.db``'s ``-shm`` file is there while the database file was not: what
    a deletion of ``projections.db`` under a process that still has it open leaves."""
    return (data_dir / f"{PROJECTIONS_DB}-shm").exists()



class Projector:
    """Keeps a set of projections caught up with the log read through ``reader``.

    Synchronous; the daemon drives :meth:`catch_up` from a worker thread (see :meth:`run`).
    Raises :class:`~events.errors.CorruptEvent` (naming the seq) when a row a projection needs
    cannot be decoded; the projection's position stays before that row.
    """

    def __init__(
        self, reader: LogReader, conn: apsw.Connection, projections: Iterable[Projection]
    ) -> None:
        self.reader = reader
        self.conn = conn
        self.projections = {p.name: p for p in projections}
        # Per projection, the (salt, digest) of its inputs row this projector found to match its
        # own fingerprint, or wrote: a row that differs at a fold was written by another process.
        self._inputs: dict[str, tuple[bytes, str]] = {}
        with self._damage_named():
            for p in self.projections.values():
                self._ensure(p)
            self._match_log()

    @contextmanager
    def _damage_named(self) -> Iterator[None]:
        """A table of ``projections.db`` of the wrong shape (or damaged pages) becomes
        :class:`ProjectionsDamaged`, which says that deleting the file is safe."""
        try:
            yield
        except (apsw.SQLError, apsw.CorruptError, apsw.NotADBError) as exc:
            raise ProjectionsDamaged(self.conn.filename or "projections.db", f"SQLite: {exc}") from None

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------------ positions

    def position(self, name: str) -> int:
        rows = self.conn.execute("SELECT seq FROM positions WHERE name = ?", (name,)).fetchall()
        if rows and type(rows[0][0]) is not int:  # (edited by hand: the table is not STRICT)
            raise ProjectionsDamaged(self.conn.filename or "projections.db",
                                     f"the position of {name} is {rows[0][0]!r}, not a seq")
        return rows[0][0] if rows else 0

    def _ensure(self, p: Projection) -> None:
        rows = self.conn.execute("SELECT version FROM positions WHERE name = ?", (p.name,)).fetchall()
        if rows and rows[0][0] == p.version and self._built_with_ours(p):
            return
        self._reset(p)  # new, written by another version, or built with other inputs: start over

    def _built_with_ours(self, p: Projection) -> bool:
        """Whether ``p``'s rows were built with the inputs it has here (its recorded fingerprint
        is its own). Remembers the row that matched, so a fold checks it with one read."""
        rows = self.conn.execute("SELECT salt, digest FROM inputs WHERE name = ?", (p.name,)).fetchall()
        salt, digest = (rows[0][0], rows[0][1]) if rows else (b"", "")
        if type(salt) is not bytes or type(digest) is not str:  # (edited by hand: never ours)
            return False
        if self._inputs.get(p.name) == (salt, digest):
            return True
        if p.fingerprint(salt) != digest:
            return False
        self._inputs[p.name] = (salt, digest)
        return True

    def _match_log(self) -> None:
        """Start over the projections folded from another log than this one.

        ``projections.db`` stays when ``events.db`` is replaced: a backup put back, another
        log copied in, a log cut short. Its positions then say nothing about this log, and
        catching up from them folded nothing (or the wrong rows) and reported the old figures.
        So a projection is reset when its position is below 0 or past this log's last seq, and
        every projection when the file records another log's creation stamp (``meta``
        ``created_ts``). Positions are read before the last seq: a position another process
        advanced meanwhile is never past it.
        """
        positions = dict(self.conn.execute("SELECT name, seq FROM positions"))
        try:
            last = self.reader.last_seq()
            created = self.reader.meta().get("created_ts")
        except StoreCorrupt:
            return  # a damaged log: catching up reports it (the log's problem, not the projections')
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS source(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
        recorded = self.conn.execute("SELECT value FROM source WHERE key = 'log_created_ts'").fetchall()
        other_log = bool(recorded) and created is not None and recorded[0][0] != created
        for p in self.projections.values():
            pos = positions.get(p.name, 0)
            if other_log or (type(pos) is int and not 0 <= pos <= last):  # (not a number: damaged, see position)
                self._reset(p)
        if created is not None and (not recorded or other_log):
            with _write_transaction(self.conn):
                if other_log:  # projections this projector does not hold start over when next opened
                    self.conn.execute("UPDATE positions SET version = -1 WHERE name NOT IN (%s)"
                                      % ", ".join("?" * len(self.projections)), list(self.projections))
                self.conn.execute("INSERT OR REPLACE INTO source(key, value) VALUES ('log_created_ts', ?)",
                                  (created,))

    def _reset(self, p: Projection) -> None:
        # BEGIN IMMEDIATE: a deferred transaction that reads, then writes, fails at once with
        # BUSY (no busy wait) when another process wrote in between (`lens log stats` twice).
        with _write_transaction(self.conn):
            p.drop(self.conn)
            p.create(self.conn)
            self.conn.execute(
                "INSERT OR REPLACE INTO positions(name, version, seq) VALUES (?, ?, 0)",
                (p.name, p.version),
            )
            salt = os.urandom(16)
            digest = p.fingerprint(salt)
            if digest:
                self.conn.execute("INSERT OR REPLACE INTO inputs(name, salt, digest) VALUES (?, ?, ?)",
                                  (p.name, salt, digest))
            else:
                self.conn.execute("DELETE FROM inputs WHERE name = ?", (p.name,))
                salt = b""
            self._inputs[p.name] = (salt, digest)

    def get(self, name: str) -> Projection:
        try:
            return self.projections[name]
        except KeyError:
            known = ", ".join(sorted(self.projections))
            raise UnknownProjection(f"no projection named {name!r}; known: {known}") from None

    # ------------------------------------------------------------------ folding

    def catch_up(self, names: Sequence[str] | None = None, progress: Progress | None = None) -> int:
        """Apply every committed event not yet projected; return the number of rows read.

        Safe against another process catching up the same ``projections.db`` at the same time:
        each chunk is applied in a write transaction that re-reads the positions first, so no
        row is folded twice. Decoded events are held a bounded amount at a time
        (:data:`BATCH_BYTES` of declared event sizes), not a whole read batch.
        """
        targets = [self.get(n) for n in names] if names else list(self.projections.values())
        if not targets:
            return 0
        target_seq = self.reader.last_seq()
        start = min(self.position(p.name) for p in targets)
        need_body = any(p.needs_body for p in targets)
        limit = self.reader.codec.max_event_bytes
        total = target_seq - start
        done = 0
        if progress:
            progress(0, total)
        cursor = start
        while cursor < target_seq:
            # At most BATCH rows, and no more than BATCH_BYTES of bodies (at least one row).
            rows = list(self.reader.rows(after=cursor, to=target_seq, limit=BATCH, max_bytes=BATCH_BYTES))
            if not rows:
                # The log ends at target_seq, yet nothing after cursor can be read: a damaged
                # page that SQLite skips instead of reporting. Projecting only what came before
                # and calling it done would hide the rest of the log.
                raise StoreCorrupt(
                    f"{self.reader.data_dir / EVENTS_DB}: the log's last seq is {target_seq}, but no event "
                    f"after seq {cursor} can be read; the file is damaged. `lens log verify` reports "
                    f"what it finds."
                )
            failure: CorruptEvent | None = None
            for k, r in enumerate(rows):  # a mistyped column fails every projection, body or not
                problem = row_problem(r) or _size_problem(r, limit)
                if problem is not None:
                    failure, rows = CorruptEvent(problem).at(r.seq), rows[:k]
                    break
            i = 0
            while i < len(rows):
                chunk, events = rows[i:], None
                if need_body:
                    chunk, events, failure_here = self._decode_chunk(rows[i:], limit)
                    if failure_here is not None:
                        failure = failure_here
                        rows = rows[: i + len(chunk)]
                if not chunk:
                    break
                moved_back = self._apply(targets, cursor, chunk, events)
                if moved_back is not None:  # another process reset a projection: start over there
                    cursor, failure, rows = moved_back, None, []
                    break
                done += len(chunk)
                cursor = chunk[-1].seq
                i += len(chunk)
                if progress:
                    progress(min(max(cursor - start, 0), total), total)
            if failure is not None:
                raise failure
        return done

    def _decode_chunk(
        self, rows: list[StoredRow], limit: int
    ) -> tuple[list[StoredRow], list[StoredEvent], CorruptEvent | None]:
        """Decode a prefix of ``rows`` whose declared event sizes add up to at most
        :data:`BATCH_BYTES` (at least one row); stop before a row that does not decode."""
        events: list[StoredEvent] = []
        held = 0
        for k, r in enumerate(rows):
            try:
                declared = zstandard.frame_content_size(r.body)
            except zstandard.ZstdError:
                declared = 0  # not a frame: decoding it fails below
            size = max(r.raw_size, declared if declared >= 0 else limit)
            if events and held + size > BATCH_BYTES:
                return rows[:k], events, None
            try:
                events.append(self.reader.decode(r))
            except CorruptEvent as exc:
                # Project everything before the bad row, then report it: the position stops
                # right before it, and nothing after it is skipped silently.
                return rows[:k], events, exc
            held += size
        return rows, events, None

    def _apply(
        self, targets: list[Projection], after: int, rows: list[StoredRow], events: list[StoredEvent] | None
    ) -> int | None:
        """Fold ``rows`` (read after seq ``after``) into each target in one write transaction.

        Returns ``None``, or the position to read again from when another process moved a
        target's position back (a rebuild) since these rows were read.
        """
        last = rows[-1].seq
        with self._damage_named(), _write_transaction(self.conn):
            for p in targets:
                # Another process (`lens log rebuild` with other keys in its environment) rebuilt
                # it with other inputs: start it over with ours (read under the write lock).
                if not self._built_with_ours(p):
                    self._reset(p)
            current = {p.name: self.position(p.name) for p in targets}  # under the write lock
            behind = [pos for pos in current.values() if pos < after]
            if behind:
                return min(behind)
            for p in targets:
                pos = current[p.name]
                if pos >= last:
                    continue  # already folded (by us earlier, or by another process)
                first = 0
                while rows[first].seq <= pos:
                    first += 1
                p.apply(
                    self.conn,
                    rows[first:],
                    events[first:] if (events is not None and p.needs_body) else None,
                )
                self.conn.execute("UPDATE positions SET seq = ? WHERE name = ?", (last, p.name))
        return None

    def rebuild(self, names: Sequence[str] | None = None, progress: Progress | None = None) -> int:
        """Drop and re-fold the named projections (all by default) from the first event.

        In one write transaction: a reader (a running daemon's lists and history search) sees
        the projections as they were until the rebuilt ones are committed, never emptied or
        half-built, and a rebuild that is interrupted or fails changes nothing. Another
        writer (the daemon's projector) waits meanwhile, then goes on from the rebuilt
        positions.
        """
        targets = [self.get(n) for n in names] if names else list(self.projections.values())
        with self._damage_named(), _write_transaction(self.conn):
            for p in targets:
                self._reset(p)
            return self.catch_up([p.name for p in targets], progress)

    def dump(self, name: str) -> list[tuple]:
        return self.get(name).dump(self.conn)

    # ------------------------------------------------------------------ daemon loop

    async def run(
        self, store: "object", *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow ``store`` (an :class:`events.store.EventStore`): catch up after each commit."""
        limiter = trio.CapacityLimiter(1)
        await trio.to_thread.run_sync(self.catch_up, limiter=limiter)
        task_status.started()
        seen = self.reader.last_seq()
        while True:
            seen = await store.wait_for(seen)  # type: ignore[attr-defined]
            await trio.to_thread.run_sync(self.catch_up, limiter=limiter)
