"""The on-disk layout of a data directory and of ``events.db``, and how it is opened.

Opening never rewrites what it finds: a directory holding something that is not a Lens log
(another SQLite database, an older layout of files) is refused with a message naming what was
found and what to do. See docs/storage-format.md.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping

import apsw

from .codec import DEFAULT_MAX_EVENT_BYTES
from .errors import (
    DataDirMissing,
    DataDirNotReadable,
    DataDirNotWritable,
    ForeignStore,
    StoreBusy,
    StoreCorrupt,
    StoreOpenError,
    UnsupportedFormat,
    clipped,
    quoted,
)
from .walcheck import holds_a_commit

FORMAT = "lens-events"
FORMAT_VERSION = 1
EVENTS_DB = "events.db"
PROJECTIONS_DB = "projections.db"
LOCK_FILE = "lock"
# Entries a Lens data directory may hold besides events.db; anything else means the directory
# belongs to something else (or to an older layout) and is not touched.
KNOWN_ENTRIES = frozenset(
    {
        EVENTS_DB,
        EVENTS_DB + "-wal",
        EVENTS_DB + "-shm",
        EVENTS_DB + "-journal",
        PROJECTIONS_DB,
        PROJECTIONS_DB + "-wal",
        PROJECTIONS_DB + "-shm",
        PROJECTIONS_DB + "-journal",
        LOCK_FILE,
        "artifacts",
        "executors",
    }
)

# meta key: the largest maximum event size a writer of this log has used (absent: none above the
# default). Readers decode up to it, so an event stored under a raised limit stays readable after
# the limit is lowered, and by `lens log`, which reads no config.
MAX_EVENT_BYTES_KEY = "max_event_bytes"
# A recorded maximum is taken up to this (the highest log.maxEventBytes the config accepts): the
# bound of what one decompression may allocate however the meta row was edited.
RECORDED_MAX_EVENT_BYTES_CEILING = 1024**3

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
BUSY_TIMEOUT_MS = 10_000

SCHEMA = f"""
CREATE TABLE meta(
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE events(
    seq         INTEGER PRIMARY KEY,      -- global, gap-free, never reused
    ts          INTEGER NOT NULL,         -- UTC milliseconds, non-decreasing with seq
    project_id  TEXT,
    session_id  TEXT,
    session_seq INTEGER,                  -- 1, 2, 3 ... per session
    agent_id    TEXT,
    task_id     TEXT,
    kind        TEXT NOT NULL,            -- the event's stable tag, for queries only
    request_id  TEXT,
    dict_id     INTEGER NOT NULL DEFAULT 0,
    raw_size    INTEGER NOT NULL,         -- MessagePack bytes before compression
    body        BLOB NOT NULL,            -- one zstd frame, content size + checksum
    UNIQUE(session_id, session_seq)
);
CREATE UNIQUE INDEX events_request ON events(session_id, request_id)
    WHERE request_id IS NOT NULL;
CREATE TABLE dictionaries(
    dict_id      INTEGER PRIMARY KEY,
    data         BLOB NOT NULL,
    created_ts   INTEGER NOT NULL,
    sample_count INTEGER NOT NULL
);
INSERT INTO meta(key, value) VALUES ('format', '{FORMAT}'), ('format_version', '{FORMAT_VERSION}');
"""


class WalNeedsWriteAccess(StoreOpenError):
    code = "STORE_WAL_UNREADABLE"


class JournalNeedsRecovery(StoreOpenError):
    code = "STORE_NEEDS_RECOVERY"


def recorded_max_event_bytes(meta: Mapping[str, Any]) -> int:
    """The largest maximum event size the log's events may have been written under: the one
    recorded (see :data:`MAX_EVENT_BYTES_KEY`), at most :data:`RECORDED_MAX_EVENT_BYTES_CEILING`;
    the default maximum when none is recorded, or the value is no whole number or below the
    default (an edited row: writers record only maximums above it)."""
    value = meta.get(MAX_EVENT_BYTES_KEY)
    if isinstance(value, int):  # stored as a number by hand
        value = str(value)
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return DEFAULT_MAX_EVENT_BYTES
    if len(value) > 12:  # (int() refuses thousands of digits; any such number is past the ceiling)
        return RECORDED_MAX_EVENT_BYTES_CEILING
    return max(DEFAULT_MAX_EVENT_BYTES, min(int(value), RECORDED_MAX_EVENT_BYTES_CEILING))


ACTIVE_DICT_KEY = "active_dict_id"


def recorded_active_dictionary(meta: Mapping[str, Any]) -> int | None:
    """The id of the dictionary ``meta`` names for new bodies (see :data:`ACTIVE_DICT_KEY`), or
    ``None`` when none is named or the value is not one a writer records (ASCII decimal digits:
    ``'²'`` passes ``str.isdigit`` but not ``int``; no leading zero, and not ``'0'``, which the
    codec takes for no dictionary). Whether the log holds that dictionary is the caller's to check."""
    value = meta.get(ACTIVE_DICT_KEY)
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 10:
        return None
    if value.startswith("0"):  # (a writer records str(id) of an id above 0)
        return None
    return int(value)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# How far the log's last ts may stand ahead of this machine's clock. The writer stamps each
# event with the larger of the clock and the last ts written, so that a clock stepped back a
# little never makes stamps go back. A ts further ahead than this when the store opens (an
# edited row, a clock once set years ahead) is not carried on: the writer stamps from the clock
# again and records the step back in the meta table (TS_STEP_BACK_KEY), and it is reported. A
# day: well past any clock correction (NTP, time zones set wrong), well short of a clock set a
# year ahead.
TS_AHEAD_LIMIT_MS = 24 * 3600 * 1000

# The meta key recording a step back of the stamps: ``ts_step_back:<seq>`` = ``"<ts before> <ts>"``,
# written with the event at ``seq``, the first stamped from the clock again.
TS_STEP_BACK_KEY = "ts_step_back:"


def ts_ahead(ts: int, now: int, seq: int | None = None) -> str | None:
    """``TS_AHEAD_OF_CLOCK: …`` when ``ts`` (the log's last, at ``seq`` when known) is more
    than :data:`TS_AHEAD_LIMIT_MS` ahead of ``now`` (both UTC milliseconds), else ``None``.
    Said by ``lens serve`` at start and by ``lens log verify``; the row is never rewritten."""
    if ts - now <= TS_AHEAD_LIMIT_MS:
        return None
    ahead = ts - now
    days, hours = divmod(ahead // 3_600_000, 24)
    where = f" (seq {seq})" if seq is not None else ""
    return (f"TS_AHEAD_OF_CLOCK: ts {ts}{where} is {days} day(s) {hours} hour(s) ahead of this machine's clock "
            f"({now}); the daemon stamps the events it appends from the clock, a step back it records in the "
            f"log's meta. Check the clock (date -u); the row stays as it is (the log is never rewritten)")


def ts_steps_back(meta: dict[str, str]) -> dict[int, tuple[int, int]]:
    """The steps back the writer recorded (see :data:`TS_STEP_BACK_KEY`): seq -> (ts before, ts).
    A key or value of another shape is left out (``lens log verify`` then reports the step)."""
    out: dict[int, tuple[int, int]] = {}
    for key, value in meta.items():
        if not key.startswith(TS_STEP_BACK_KEY):
            continue
        try:
            before, ts = (int(v) for v in str(value).split(" "))
            out[int(key[len(TS_STEP_BACK_KEY):])] = (before, ts)
        except ValueError:
            continue
    return out


def check_data_dir(data_dir: Path, *, create: bool) -> Path:
    """Return ``data_dir`` resolved, creating it when ``create``; refuse foreign contents."""
    data_dir = Path(data_dir)
    try:
        return _check_data_dir(data_dir, create)
    except PermissionError:
        raise DataDirNotReadable(
            f"data directory {data_dir} cannot be read (permission denied); run Lens as a user "
            f"who may read it, or pass --data with another directory"
        ) from None


def data_dir_problem(value: str) -> str | None:
    """Why ``value`` (a ``--data`` argument) names no usable data directory, or ``None``.

    An empty path meant the working directory, which no one means by an empty argument; a path
    that is not UTF-8 (a byte such as ``\\xff`` in a name) cannot reach SQLite, which opens files
    by UTF-8 names. The ``lens`` commands and the benchmark refuse both as usage errors, before
    anything is made; :func:`check_data_dir` refuses the second for callers that pass a path.
    """
    if not value:
        return "an empty path names no directory; pass --data DIR"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return (f"{value.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8 (SQLite opens files by "
                f"UTF-8 names); rename the directory or pass another --data")
    return None


def _not_a_directory_on_the_way(data_dir: Path) -> str | None:
    """What stands on the way to ``data_dir`` where a directory should (``FILE/sub``: the file;
    ``LOOP/sub``: a loop of links), or ``None``. Such a path names no directory: neither a missing
    one a reader could be told to create, nor one the writer could make."""
    try:
        os.stat(data_dir)
        return None
    except NotADirectoryError:
        pass
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return None  # (missing, or not ours to judge here: the checks below name it)
        return f"a symbolic link on its path is in a loop of links ({exc.strerror})"
    for above in reversed(data_dir.parents):
        if above.exists() and not above.is_dir():
            return f"{above} is {'a file' if above.is_file() else 'not a directory'}"
    return "a part of its path is not a directory"


def _check_data_dir(data_dir: Path, create: bool) -> Path:
    try:
        str(data_dir).encode("utf-8")
    except UnicodeEncodeError:  # before anything is made (apsw could not open it: a traceback)
        raise StoreOpenError(f"data directory {data_dir_problem(str(data_dir))}") from None
    if data_dir.is_symlink() and not data_dir.exists():
        raise StoreOpenError(
            f"data directory {data_dir} is a symbolic link to {os.readlink(data_dir)}, which does not "
            f"lead to a directory (missing, or a loop of links); point it at one, or remove it"
        )
    blocked = _not_a_directory_on_the_way(data_dir)
    if blocked is not None:
        raise StoreOpenError(f"data directory {data_dir} is not a directory: {blocked}; pass --data with a directory")
    if not data_dir.exists():
        if not create:
            raise DataDirMissing(
                f"data directory {data_dir} does not exist; pass --data with the directory "
                f"of an existing Lens log (the daemon creates one on first start)"
            )
        try:
            data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the log holds every conversation
        except OSError as exc:
            raise DataDirNotWritable(
                f"cannot create data directory {data_dir}: {exc.strerror}"
            ) from None
    if not data_dir.is_dir():
        hint = ""
        if data_dir.name == EVENTS_DB and data_dir.is_file():  # `--data .lens/events.db`
            hint = f"; it is the event log itself: pass --data {data_dir.parent}, the directory that holds it"
        raise StoreOpenError(f"data directory {data_dir} is not a directory{hint}")
    events_db = data_dir / EVENTS_DB
    if events_db.is_symlink() and not events_db.exists():
        raise StoreOpenError(
            f"{events_db} is a symbolic link to {os.readlink(events_db)}, which does not lead to a "
            f"file (missing, or a loop of links); point it at the log, or remove it"
        )
    if events_db.exists() and not events_db.is_file():
        raise StoreOpenError(f"{events_db} is not a file; it is not a Lens event log")
    if not create:  # (the writer checks under its lock: a daemon running there may have lost the file's name)
        refuse_wal_without_its_log(data_dir, daemon_may_run=True)
    if not events_db.exists():
        foreign = sorted(p.name for p in data_dir.iterdir() if p.name not in KNOWN_ENTRIES)
        if foreign:
            shown = ", ".join(foreign[:8]) + (" …" if len(foreign) > 8 else "")
            raise ForeignStore(
                f"data directory {data_dir} holds no {EVENTS_DB} but other files ({shown}): "
                f"an older layout or another program's data. Lens does not convert or overwrite "
                f"it; start a new data directory with --data NEW_DIR, or move these files away."
            )
        if not create:
            raise DataDirMissing(
                f"data directory {data_dir} holds no event log ({EVENTS_DB}); "
                f"start the daemon with --data {data_dir} to create one"
            )
    if create and not os.access(data_dir, os.W_OK):
        raise DataDirNotWritable(f"data directory {data_dir} is not writable")
    if create and events_db.exists() and not os.access(events_db, os.W_OK):
        # SQLite would open it read-only without a word, and every append would then fail.
        raise DataDirNotWritable(
            f"{events_db} is not writable (a read-only file); the daemon appends to it. Make it "
            f"writable (chmod u+w), or read it with `lens log …`, which never writes it"
        )
    return data_dir


def refuse_wal_without_its_log(data_dir: Path, *, daemon_may_run: bool) -> None:
    """:class:`StoreCorrupt` when ``data_dir`` holds an ``events.db-wal`` with a commit frame in it
    (see :func:`~events.walcheck.holds_a_commit`), or bytes that are no WAL, but no ``events.db``.
    A WAL of a header alone, or of frames without a commit, holds nothing SQLite would read: it is
    let be, as an empty one (a directory without a log).

    ``daemon_may_run``: the caller does not hold the writer's lock (a reader), so a daemon may be
    running there still, writing the file it holds open after its name was removed; the advice
    is then for when none is. The writer checks with its lock held (and, before it makes the
    lock, when no ``lock`` file is there: no daemon can be running then).

    No Lens log has that shape: the writer makes ``events.db`` before its WAL gets any bytes and
    never removes it, so the file was removed or moved from under its WAL. Opening the log would
    make a new, empty ``events.db``, whose WAL SQLite deletes, and the writer would start a new log
    in place of the commits still in it. Nothing is touched; the user restores the file, or
    removes the WAL to start a new log there."""
    wal = data_dir / (EVENTS_DB + "-wal")
    # The WAL is read first, then the database file (as in refuse_empty_beside_a_wal): a log being
    # made between the two reads has its file before its WAL has bytes.
    try:
        st = os.lstat(wal)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or os.path.lexists(data_dir / EVENTS_DB):
        return
    proviso = "if no Lens daemon is running on this directory, " if daemon_may_run else ""
    try:
        commits = holds_a_commit(wal)
    except OSError:  # (one that cannot be read is named as holding the log's writes: nothing is lost)
        commits = True
    if commits is False:
        return  # (a header, or frames without a commit: nothing SQLite would read, as an empty WAL)
    if commits is None:
        raise StoreCorrupt(
            f"data directory {data_dir} holds no {EVENTS_DB}, but {wal.name} beside where it belongs holds "
            f"{st.st_size} bytes that are no SQLite WAL (no WAL header SQLite would read): no commit of the log "
            f"is in them, but opening a new log there would delete them. Nothing was changed; look at what "
            f"the file is, then restore {EVENTS_DB} from a backup, or remove {wal.name} "
            f"(and {EVENTS_DB}-shm) to start a new log in this directory"
        )
    raise StoreCorrupt(
        f"data directory {data_dir} holds no {EVENTS_DB}, but {wal.name} beside where it belongs holds "
        f"{st.st_size} bytes of the log's writes: the database file was removed or moved, and opening "
        f"a new log there would delete that WAL (every commit still in it). Nothing was changed; "
        f"{proviso}restore {EVENTS_DB} from where it went or from a backup, keeping {wal.name} as it is "
        f"(or, to start a new log in this directory, remove {wal.name} and {EVENTS_DB}-shm first)"
    )


def schema_entries(conn: apsw.Connection) -> list[tuple[str, str]]:
    """The ``(type, name)`` of every table and view in ``conn``'s main schema (SQLite's own
    ``sqlite_*`` tables included), in the schema's order."""
    return [(str(kind), str(name)) for kind, name in
            conn.execute("SELECT type, name FROM sqlite_schema WHERE type IN ('table', 'view')")]


def _tables(conn: apsw.Connection) -> list[str]:
    return [name for kind, name in schema_entries(conn) if kind == "table"]


@contextmanager
def probe(path: Path, *, through_wal: bool = False) -> Iterator[apsw.Connection | None]:
    """A read-only connection to the SQLite file ``path`` for a look before the real open
    (``None`` when SQLite cannot open it), closed on leaving.

    By default the read is immutable: it reads the main file alone and makes nothing beside it
    (no ``-wal``, no ``-shm``), so a foreign WAL database is not given side files by being
    looked at. ``through_wal`` reads the file through its ``-wal`` too, read-only (such a
    connection never checkpoints, so neither file changes), but SQLite may make a ``-shm``, its
    index of the WAL, beside a file that has none."""
    uri = "file:" + urllib.parse.quote(str(path.absolute())) + ("?mode=ro" if through_wal else "?mode=ro&immutable=1")
    try:
        conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error:
        yield None
        return
    try:
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
        yield conn
    finally:
        conn.close()


def not_sqlite(where: Path) -> ForeignStore:
    """The refusal of a file that is not a SQLite database (readers and the writer alike)."""
    return ForeignStore(
        f"{where} is not a SQLite database (format found: unknown bytes); it is not a Lens "
        f"event log. Start a new data directory with --data NEW_DIR."
    )


def check_format(conn: apsw.Connection, where: Path) -> None:
    """Raise unless ``conn`` is a Lens event log of the version this build reads."""
    try:
        tables = _tables(conn)
    except apsw.NotADBError:
        raise not_sqlite(where) from None
    if "meta" not in tables:
        raise ForeignStore(
            f"{where} is a SQLite database without a Lens format marker (tables found: "
            f"{', '.join(sorted(tables)) or 'none'}); it is not a Lens event log. "
            f"Start a new data directory with --data NEW_DIR."
        )
    try:
        pairs = list(conn.execute("SELECT key, value FROM meta"))
        meta = dict(pairs)
    except (apsw.SQLError, ValueError, TypeError):  # a meta table of another shape
        pairs, meta = [], None
    if meta is None or len(meta) != len(pairs):  # another shape, or one key twice (no primary key)
        raise ForeignStore(
            f"{where} has a meta table that is not a Lens format marker; it is not a Lens event "
            f"log. Start a new data directory with --data NEW_DIR."
        )
    fmt, version = meta.get("format"), meta.get("format_version")
    version = str(version) if isinstance(version, int) else version  # stored as a number by hand
    if fmt != FORMAT:
        found = "no storage format" if fmt is None else f"storage format {quoted(fmt)}, not {FORMAT!r}"
        raise ForeignStore(
            f"{where} records {found}; it is not a Lens event "
            f"log. Start a new data directory with --data NEW_DIR."
        )
    if version is not None and not (isinstance(version, str) and version.isascii() and version.isdigit()):
        raise StoreCorrupt(  # a version is a whole number: what else is there was damaged or edited
            f"{where} carries the {FORMAT} marker, but its format version is {quoted(version)}, which no "
            f"Lens release writes; the file was damaged or edited. Restore it from a backup, or "
            f"start a new data directory with --data NEW_DIR."
        )
    if version != str(FORMAT_VERSION):
        found = "that records no format version" if version is None else f"of format version {clipped(version)}"
        raise UnsupportedFormat(
            f"{where} is a {FORMAT} log {found}; this Lens reads version "
            f"{FORMAT_VERSION}. Use the Lens release that wrote it (its `lens log decode` exports "
            f"every event as JSON lines), or start a new data directory with --data NEW_DIR."
        )
    for table, columns in _REQUIRED_COLUMNS.items():
        info = list(conn.execute(f"PRAGMA table_info({table})"))  # (cid, name, type, notnull, default, pk)
        found = {row[1] for row in info}
        if not found:
            raise StoreCorrupt(
                f"{where} carries the {FORMAT} v{FORMAT_VERSION} marker but has no {table} "
                f"table; the file was damaged or edited. Restore it from a backup, or start a new "
                f"data directory with --data NEW_DIR."
            )
        if table == "events":
            seq = [row for row in info if row[1] == "seq"]
            if seq and (str(seq[0][2]).upper() != "INTEGER" or seq[0][5] != 1):
                raise StoreCorrupt(
                    f"{where} carries the {FORMAT} v{FORMAT_VERSION} marker but events.seq is not "
                    f"the table's INTEGER PRIMARY KEY; the table was rebuilt by hand. Restore it "
                    f"from a backup, or start a new data directory with --data NEW_DIR."
                )
        missing = [c for c in columns if c not in found]
        if missing:
            raise StoreCorrupt(
                f"{where} carries the {FORMAT} v{FORMAT_VERSION} marker but its {table} table "
                f"lacks column(s) {', '.join(missing)}; the file was damaged or edited. Restore "
                f"it from a backup, or start a new data directory with --data NEW_DIR."
            )


# What readers and the writer rely on in a log of this version (see SCHEMA).
_REQUIRED_COLUMNS = {
    "events": ("seq", "ts", "project_id", "session_id", "session_seq", "agent_id", "task_id",
               "kind", "request_id", "dict_id", "raw_size", "body"),
    "dictionaries": ("dict_id", "data", "created_ts", "sample_count"),
}


def translate_open_error(exc: Exception, path: Path, *, write: bool = True) -> StoreOpenError:
    if isinstance(exc, (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError)):
        if not write or not os.access(path, os.R_OK):
            return DataDirNotReadable(f"cannot read {path} (permission denied or not openable: {exc})")
        return DataDirNotWritable(f"cannot open {path} for writing ({exc}); is the directory read-only?")
    if isinstance(exc, apsw.NotADBError):
        return not_sqlite(path)
    if isinstance(exc, apsw.IOError):
        for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if side.exists() and not side.is_file():  # a FIFO, a directory: not the log's fault
                return StoreOpenError(
                    f"{side} is not a regular file, so SQLite cannot use it beside {path.name} "
                    f"({exc}); it cannot hold any of the log's data: remove it (SQLite makes a "
                    f"new one) or fix what put it there"
                )
    if isinstance(exc, (apsw.IOError, apsw.FullError)):
        # The system failed a read or a write (of the file, or of the -wal/-shm beside it, which
        # even a reader may have to create): a full or failing disk, not damaged contents.
        return StoreOpenError(
            f"cannot open {path}: SQLite could not read or write it or its -wal/-shm files ({exc}); "
            f"the disk may be full or failing. Free some space (or fix the disk) and try again; this "
            f"is not a sign that the log is damaged"
        )
    if isinstance(exc, apsw.BusyError):
        return store_busy(path, exc)
    if isinstance(exc, apsw.CorruptError):
        return StoreCorrupt(
            f"{path} is damaged: SQLite cannot read it ({exc}). Restore it from a backup, or start "
            f"a new data directory with --data NEW_DIR (`lens log verify` reports what it finds)."
        )
    return StoreOpenError(f"cannot open {path}: {exc}")


def store_busy(path: Path | str, exc: Exception) -> StoreBusy:
    """The refusal of a database another process holds locked past the busy timeout."""
    return StoreBusy(f"cannot open {path}: another process holds it locked (SQLite: {exc}); try again "
                     f"when it is done")


# SQLite opens no path longer than this (SQLITE_MAX_PATHNAME, in bytes, with its terminator)...
MAX_SQLITE_PATH = 512
# ... and it opens the database's side files too: the longest is "<path>-journal".
SIDE_SUFFIXES = ("-journal", "-wal", "-shm")
LONGEST_SIDE_SUFFIX = max(map(len, SIDE_SUFFIXES))


def check_path_length(path: Path) -> None:
    length = len(os.fsencode(path.absolute()))
    if length + LONGEST_SIDE_SUFFIX >= MAX_SQLITE_PATH:
        raise StoreOpenError(
            f"the path of {path} is {length} bytes long; SQLite opens paths of up to "
            f"{MAX_SQLITE_PATH - 1} bytes, and {path.name}{SIDE_SUFFIXES[0]} beside it must fit too "
            f"(so at most {MAX_SQLITE_PATH - 1 - LONGEST_SIDE_SUFFIX}). Use a shorter --data path "
            f"(a symbolic link to the directory will do)"
        )


def check_side_files(path: Path) -> None:
    """Refuse to open ``path`` when one of SQLite's side files beside it is not a regular file: a
    FIFO there blocks SQLite's open for ever (its hot-journal check reads it)."""
    for suffix in SIDE_SUFFIXES:
        side = path.with_name(path.name + suffix)
        try:
            mode = os.lstat(side).st_mode
        except FileNotFoundError:
            continue
        except OSError:
            continue  # (SQLite reports what it cannot open)
        if not stat.S_ISREG(mode):
            raise StoreOpenError(
                f"{side} is not a regular file, so SQLite cannot use it beside {path.name}; it "
                f"cannot hold any of the log's data: remove it (SQLite makes a new one) or fix "
                f"what put it there"
            )


def create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (an empty file is an empty SQLite
    database). SQLite would create it 0644 under the usual umask, and its ``-wal`` and ``-shm``
    files take the database file's mode: the conversations in them stay the owner's. A failure
    is left for SQLite to report as it would."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except OSError:
        pass


def refuse_foreign_early(path: Path) -> None:
    """Refuse a SQLite file that is certainly not a Lens log of this version before SQLite opens
    it for real, and before the writer makes its ``lock`` file beside it.

    Opening a database in WAL mode makes SQLite create its ``-wal`` and ``-shm`` files beside it,
    so a foreign one would be refused with two new files left in the user's directory (and the
    writer's ``lock`` before them). An immutable read of the main file creates nothing: tables
    there without ``meta`` are not a Lens log (its tables are made in one transaction, so a
    checkpointed Lens log has all or none), and a ``meta`` of another format or version is
    written once, when the log is made. Any other finding (no tables yet, a file SQLite cannot
    read, damage) is left to the real open, which names it.
    """
    if not path.is_file():
        return
    with probe(path) as conn:
        if conn is None:
            return
        try:
            if _tables(conn):
                check_format(conn, path)  # raises ForeignStore / UnsupportedFormat naming what it found
        except apsw.NotADBError:
            raise not_sqlite(path) from None
        except (apsw.Error, StoreCorrupt):
            return


def open_write_connection(data_dir: Path, synchronous: Synchronous = "FULL") -> apsw.Connection:
    """Open (creating if new) ``events.db`` for the single writer. Checks the format marker."""
    path = data_dir / EVENTS_DB
    check_path_length(path)
    check_side_files(path)
    refuse_wal_without_its_log(data_dir, daemon_may_run=False)  # (the caller holds the writer's lock)
    refuse_empty_beside_a_wal(path)
    refuse_foreign_early(path)
    create_private(path)
    try:
        conn = apsw.Connection(str(path))
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
        existing = _tables(conn)
        if not existing:
            try:  # a new log in a file made by someone else (an empty events.db): the owner's only
                os.chmod(path, 0o600)
            except OSError:
                pass
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
            if mode != "wal":
                raise StoreOpenError(f"{path}: cannot switch to WAL journal (got {mode})")
            with conn:
                conn.execute(SCHEMA)
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('created_ts', ?)", (str(now_ms()),)
                )
        else:
            check_format(conn, path)
            if conn.readonly("main"):  # (opened read-only: the file or its mount refuses writes)
                raise DataDirNotWritable(f"{path} can only be opened read-only; the daemon appends to it")
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
        conn.execute(f"PRAGMA synchronous={synchronous}")
    except apsw.Error as exc:
        raise translate_open_error(exc, path) from None
    return conn


def _empty_file(path: Path, *, missing: bool = False) -> bool:
    """``path`` is a regular file of 0 bytes (or, with ``missing``, does not exist)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return missing
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def refuse_empty_beside_a_wal(path: Path) -> None:
    """:class:`StoreCorrupt` when ``path`` is a file of 0 bytes and its ``-wal`` holds something.

    SQLite deletes the WAL of a database file of 0 bytes when it opens it (read-only too, where
    the directory can be written), so the commits in it would be gone before any check could see
    them, and the writer would start a new log in their place. No Lens log looks like that (the
    file gets its first page when the log is made, before anything is written to the WAL): it was
    cut short or replaced, and both files are left as they are for the user to restore."""
    wal = path.with_name(path.name + "-wal")
    # The WAL is read first, then the database file: a log being made gets its first page before
    # its WAL gets any bytes, and never goes back to 0 bytes, so a WAL with bytes read first finds
    # the file's page after it. Read the other way round, a daemon making the log between the two
    # reads (the file seen empty, then the WAL seen written) looked like this damage.
    try:
        size = os.stat(wal).st_size
    except OSError:
        return
    if size > 0 and _empty_file(path):
        raise StoreCorrupt(
            f"{path} is empty, but {wal.name} beside it holds {size} bytes of the log's writes: the "
            f"database file was cut short or replaced, and SQLite would delete that WAL (every commit "
            f"still in it) on opening an empty database. Nothing was changed; restore {path.name} from "
            f"a backup, keeping {wal.name} as it is"
        )


def open_read_connection(data_dir: Path) -> apsw.Connection:
    """Open ``events.db`` read-only; works on a read-only directory too."""
    path = data_dir / EVENTS_DB
    if not os.access(path, os.R_OK):
        raise DataDirNotReadable(f"cannot read {path} (permission denied)")
    check_path_length(path)
    check_side_files(path)
    refuse_empty_beside_a_wal(path)
    if _empty_file(path) and _empty_file(data_dir / (EVENTS_DB + "-wal"), missing=True):
        # (the daemon makes the file empty first: it stopped before writing the log's tables)
        raise DataDirMissing(
            f"{path} is empty: no event log has been written to it yet; start the daemon with "
            f"--data {data_dir} to create one"
        )
    refuse_foreign_early(path)
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    uri = "file:" + urllib.parse.quote(str(path.absolute()))  # `%`, `?`, `#` are URI syntax
    try:
        conn = apsw.Connection(f"{uri}?mode=ro", flags=flags)
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
        check_format(conn, path)
        return conn
    except (apsw.CantOpenError, apsw.ReadOnlyError):
        # A WAL database in a directory we cannot write (no -shm can be made): read it as an
        # immutable file. Nothing can be writing it if we cannot write there either, but an
        # immutable open ignores the WAL, so committed events still in it would be invisible.
        journal = data_dir / (EVENTS_DB + "-journal")
        if journal.exists() and journal.stat().st_size > 0:
            raise JournalNeedsRecovery(
                f"{path}: {journal.name} holds the rollback journal of a write that was "
                f"interrupted; reading without rolling it back would show changes that never "
                f"committed. Open the log once with write access (`lens serve --data "
                f"{data_dir}` rolls it back), then read it"
            ) from None
        wal = data_dir / (EVENTS_DB + "-wal")
        if wal.is_dir() or (wal.exists() and wal.stat().st_size > 0 and not os.access(wal, os.R_OK)):
            raise DataDirNotReadable(f"cannot read {wal} (permission denied, or not a file)") from None
        if wal.exists() and wal.stat().st_size > 0 and os.access(data_dir, os.W_OK):
            raise DataDirNotReadable(
                f"cannot open {path} with its {wal.name}: SQLite refused the read-only open "
                f"(check the permissions of {EVENTS_DB}-shm and {wal.name})"
            ) from None
        if wal.exists() and wal.stat().st_size > 0:
            raise WalNeedsWriteAccess(
                f"{path}: committed events are still in {wal.name}, and reading them needs write access "
                f"to {data_dir} (or its {EVENTS_DB}-shm file); open it where it is writable, or copy the "
                f"data directory somewhere writable first"
            ) from None
    except apsw.NotADBError:
        raise not_sqlite(path) from None
    except apsw.Error as exc:
        raise translate_open_error(exc, path, write=False) from None
    try:
        conn = apsw.Connection(f"{uri}?mode=ro&immutable=1", flags=flags)
        check_format(conn, path)
        return conn
    except apsw.Error as exc:
        raise translate_open_error(exc, path, write=False) from None
