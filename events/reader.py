"""Reading the log: stored rows in ``seq`` order, decoded on demand.

A :class:`LogReader` owns one read-only apsw connection. It is synchronous (blocking I/O that
releases the GIL); async callers reach it through ``trio.to_thread`` with a limiter of one per
reader, which is what :class:`events.store.EventStore` does for the daemon.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Sequence

import apsw
import msgspec

from .codec import TAG_OF, Codec, FramePlan, usable_dictionaries
from .errors import CorruptEvent, StoreCorrupt, UnknownDictionary, quoted
from .schema import EVENTS_DB, check_data_dir, open_read_connection, recorded_max_event_bytes
from .types import Opaque, _Event, body_of

SEQ_MIN, SEQ_MAX = -(2**63), 2**63 - 1  # SQLite's integers: bounds beyond are clamped
# What one page of :meth:`LogReader.rows` may hold (bodies, by the larger of stored and declared
# size): reads of a log of large events — the CLI, projections — run in bounded memory.
PAGE_BYTES = 32 * 1024 * 1024

# What SQLite raises on a damaged file or table (a busy or locked database is not damage).
_DAMAGE = (apsw.CorruptError, apsw.NotADBError, apsw.IOError, apsw.SQLError, apsw.FormatError)

ROW_COLUMNS = (
    "seq, ts, project_id, session_id, session_seq, agent_id, task_id, kind, request_id, "
    "dict_id, raw_size, body"
)


class BadText:
    """Stands in a row for a TEXT value whose bytes are not UTF-8 (a damaged or hand-edited row);
    :func:`row_problem` names it, so readers report that row instead of failing the whole read."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def __repr__(self) -> str:
        return f"BadText({self.raw[:40]!r})"


_COLUMN_NAMES = [c.strip() for c in ROW_COLUMNS.split(",")]
# The same columns with every TEXT value as its stored bytes (and a flag saying it was TEXT), for
# a page SQLite cannot hand over as Python strings: seq is an INTEGER PRIMARY KEY, never text.
_CAREFUL_COLUMNS = ", ".join(
    ["seq"]
    + [f"CASE WHEN typeof({c}) = 'text' THEN CAST({c} AS BLOB) ELSE {c} END" for c in _COLUMN_NAMES[1:]]
    + [f"typeof({c}) = 'text'" for c in _COLUMN_NAMES[1:]]
)


def _careful_row(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of :data:`_CAREFUL_COLUMNS` as a row of :data:`ROW_COLUMNS` (bad text as :class:`BadText`)."""
    n = len(_COLUMN_NAMES)
    row = list(values[:n])
    for i, was_text in enumerate(values[n:], start=1):
        if was_text:
            try:
                row[i] = row[i].decode("utf-8")
            except UnicodeDecodeError:
                row[i] = BadText(row[i])
    return tuple(row)


def _seq_back(batch: list[tuple[Any, ...]], prev_seq: int) -> int | None:
    """Where in ``batch`` (a session's rows in ``session_seq`` order, after a row at
    ``prev_seq``) a row's ``seq`` is not above the one before it, or None. The writer numbers a
    session's events in the order it gives them seqs, so the two orders agree in every log it
    wrote; rows whose numbers were swapped would be read, and replayed, out of seq order. One
    comparison of the page against its sorted self, in C; the loop only on an edited log."""
    seqs = [r[0] for r in batch]
    if seqs[0] > prev_seq and seqs == sorted(seqs):
        return None
    last = prev_seq
    for i, seq in enumerate(seqs):
        if seq <= last:
            return i
        last = seq
    return None


def numbering_step(session_id: object, last: int, session_seq: int) -> tuple[int, str | None]:
    """One row of a session met in ``seq`` order, after its rows numbered up to ``last`` (0
    before its first): the number to go on from, and what is wrong with this row's
    ``session_seq`` (None when it is ``last + 1``). The writer numbers a session 1, 2, … in seq
    order; this is the rule ``lens log verify`` reports by and a read names the edited row by. A
    number below the next (two rows swapped, say) does not move the count, so the correct row
    after it is not made a third, invented problem."""
    want = last + 1
    if session_seq == want:
        return session_seq, None
    if session_seq < want:
        return last, (f"session {session_id}: session_seq {session_seq} comes after the session's session_seq "
                      f"{last} (its numbering is out of step with seq)")
    return session_seq, f"session {session_id}: session_seq {session_seq}, expected {want}"


class _CarefulPage(list):  # type: ignore[type-arg]
    """A page read through :data:`_CAREFUL_COLUMNS`: some row may hold :class:`BadText`."""


class StoredRow(msgspec.Struct, frozen=True, gc=False):
    """One row of ``events`` as stored (body still compressed).

    A frozen msgspec Struct (built ten times faster than a frozen dataclass); constructed
    positionally in column order, compared and hashed by value.
    """

    seq: int
    ts: int
    project_id: str | None
    session_id: str | None
    session_seq: int | None
    agent_id: str | None
    task_id: str | None
    kind: str
    request_id: str | None
    dict_id: int
    raw_size: int
    body: bytes


class StoredEvent(msgspec.Struct, frozen=True, gc=False):
    """A decoded event with its envelope (a frozen msgspec Struct, like :class:`StoredRow`)."""

    seq: int
    ts: int
    project_id: str | None
    session_id: str | None
    session_seq: int | None
    agent_id: str | None
    task_id: str | None
    kind: str
    request_id: str | None
    event: _Event | Opaque

    def to_json(self) -> dict[str, Any]:
        """The decoded shape printed by ``lens log decode``, the events API and SSE ``data:``."""
        return {
            "seq": self.seq,
            "ts": self.ts,
            "project_id": self.project_id,
            "session_id": self.session_id,
            "session_seq": self.session_seq,
            "agent_id": self.agent_id,
            "task_id": self.task_id,
            "kind": self.kind,
            "request_id": self.request_id,
            "body": body_of(self.event),
        }


class EventPage(msgspec.Struct, frozen=True):
    """The events of one read, and the decoded bytes of their bodies as their rows declare them
    (``raw_size``: the MessagePack before compression; a damaged row's declaration counts 0): what
    is known of the page's size before anything is made of it."""

    events: list[StoredEvent]
    raw_bytes: int


_SQL_TYPE = {bytes: "a blob", str: "text", int: "an integer", float: "a real number", type(None): "NULL"}
_INT, _TEXT, _OPTIONAL_INT, _OPTIONAL_TEXT = (int,), (str,), (int, type(None)), (str, type(None))
_ROW_TYPES = (
    ("seq", _INT), ("ts", _INT), ("project_id", _OPTIONAL_TEXT), ("session_id", _OPTIONAL_TEXT),
    ("session_seq", _OPTIONAL_INT), ("agent_id", _OPTIONAL_TEXT), ("task_id", _OPTIONAL_TEXT),
    ("kind", _TEXT), ("request_id", _OPTIONAL_TEXT), ("dict_id", _INT), ("raw_size", _INT),
    ("body", (bytes,)),
)


def row_problem(row: StoredRow | tuple[Any, ...]) -> str | None:
    """What is wrong with the types of a row's columns (a :class:`StoredRow` or a tuple in
    :data:`ROW_COLUMNS` order), or ``None``.

    The ``events`` table is not STRICT, so a hand-edited row can hold text where an integer or a
    blob belongs; readers report such a row as corrupt instead of failing on it.
    """
    values = row if type(row) is tuple else msgspec.structs.astuple(row)
    for (name, types), value in zip(_ROW_TYPES, values):
        if type(value) not in types:
            if type(value) is BadText:
                return f"column {name} holds text that is not valid UTF-8 ({quoted(value.raw, 40)})"
            if name == "body":
                return f"the body is stored as {_SQL_TYPE.get(type(value), type(value).__name__)}, not as a blob"
            return f"column {name} holds {quoted(value)}, which is not {'an integer' if int in types else 'text'}"
    if values[4] is None and values[3] is not None:  # the writer numbers every event of a session
        return (f"the event belongs to session {quoted(values[3])} but has no session_seq (the session's "
                f"numbering was edited)")
    return None


def decode_row(codec: Codec, row: StoredRow) -> StoredEvent:
    """Decode ``row``; raises :class:`CorruptEvent` naming its ``seq``."""
    problem = row_problem(row)
    if problem is not None:
        raise CorruptEvent(problem).at(row.seq)
    try:
        event = codec.decode(row.kind, row.body, row.dict_id)
    except CorruptEvent as exc:
        raise exc.at(row.seq) from None
    return StoredEvent(
        row.seq,
        row.ts,
        row.project_id,
        row.session_id,
        row.session_seq,
        row.agent_id,
        row.task_id,
        row.kind,
        row.request_id,
        event,
    )


class LogReader:
    """Read-only access to one data directory's log.

    Raises the :mod:`events.errors` open errors when the directory is missing or foreign.
    Close it with :meth:`close` (or use it as a context manager). ``max_event_bytes`` bounds
    what decoding one body may allocate; ``None``: the log's recorded maximum (see
    :func:`events.schema.recorded_max_event_bytes`).
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        max_event_bytes: int | None = None,
        connection: apsw.Connection | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        if connection is None:
            check_data_dir(self.data_dir, create=False)
            connection = open_read_connection(self.data_dir)
        self.conn = connection
        # Decoding is bounded by ``max_event_bytes``; by default by the largest maximum a writer of
        # this log used (recorded in meta; 32 MiB when none is): what the store accepted under a
        # raised limit stays readable by a reader that has no config (`lens log`, projections).
        if max_event_bytes is None:
            max_event_bytes = recorded_max_event_bytes(self.meta())
        self.codec = Codec(max_event_bytes=max_event_bytes)
        # Stored dictionaries that cannot be loaded, with why: the bodies needing one fail (naming
        # it), the rest of the log stays readable; `lens log verify` lists them.
        self.damaged_dictionaries: dict[int, str] = {}
        self.refresh_dictionaries()

    def __enter__(self) -> "LogReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------------ metadata

    def _query(self, what: str, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read; SQLite reporting damage becomes :class:`StoreCorrupt` naming ``what``."""
        try:
            return self.conn.execute(sql, args).fetchall()
        except _DAMAGE as exc:
            raise self._damaged(what, exc) from None

    def _damaged(self, what: str, exc: apsw.Error) -> StoreCorrupt:
        return StoreCorrupt(
            f"{self.data_dir / EVENTS_DB}: SQLite cannot read {what} ({exc}); the file is "
            f"damaged. `lens log verify` reports what it finds."
        )

    def meta(self) -> dict[str, str]:
        return dict(self._query("the meta table", "SELECT key, value FROM meta"))

    def dictionaries(self) -> dict[int, bytes]:
        """The ``dictionaries`` table as stored (damaged rows included)."""
        try:
            return dict(self._query("the dictionaries", "SELECT dict_id, data FROM dictionaries"))
        except UnicodeDecodeError:  # a value stored as text that is not UTF-8: damaged either way
            return dict(self._query(
                "the dictionaries",
                "SELECT CASE WHEN typeof(dict_id) = 'text' THEN CAST(dict_id AS BLOB) ELSE dict_id END, "
                "CASE WHEN typeof(data) = 'text' THEN 'text' ELSE data END FROM dictionaries"))

    def last_seq(self) -> int:
        return self._query("the last seq", "SELECT coalesce(max(seq), 0) FROM events")[0][0]

    def session_last_seq(self, session_id: str, to: int | None = None) -> int:
        """The ``seq`` of session ``session_id``'s last event (at most ``to``), 0 when none: a walk
        back from the end of the session's ``(session_id, session_seq)`` index."""
        rows = self._query(
            "a session's last seq",
            "SELECT seq FROM events WHERE session_id = ? AND seq <= ? ORDER BY session_seq DESC LIMIT 1",
            (session_id, SEQ_MAX if to is None else min(to, SEQ_MAX)))
        return rows[0][0] if rows else 0

    def session_kinds(self, session_id: str, seq: int, *, back: bool, limit: int) -> list[tuple[int, Any]]:
        """``(seq, kind)`` of at most ``limit`` events of session ``session_id`` from its rows'
        columns, never a body: walking back from ``seq`` (itself included) with ``back``, else
        forward from after it. A walk of a session's neighbourhood of any size (an event up to
        ``max_event_bytes`` costs no more than a small one); page on from the last ``seq`` read."""
        seq = max(SEQ_MIN, min(seq, SEQ_MAX))
        if back:
            sql = ("SELECT seq, kind FROM events WHERE session_id = ? AND seq <= ? "
                   "ORDER BY session_seq DESC LIMIT ?")
        else:
            sql = ("SELECT seq, kind FROM events WHERE session_id = ? AND seq > ? "
                   "ORDER BY session_seq LIMIT ?")
        return [(r[0], r[1]) for r in self._query("a session's event kinds", sql, (session_id, seq, limit))]

    def session_project(self, session_id: str) -> str | None:
        """The project of session ``session_id``: the ``project_id`` of its first event that has
        one (``None`` when none does, or that column is not readable text). Read from the row's
        columns, never from a body, so a session whose bodies do not decode still has one."""
        try:
            rows = self._query(
                "a session's project",
                "SELECT project_id FROM events WHERE session_id = ? AND typeof(project_id) = 'text' "
                "ORDER BY session_seq LIMIT 1",
                (session_id,))
        except UnicodeDecodeError:  # the column holds bytes that are not UTF-8 (hand-edited)
            return None
        return rows[0][0] if rows else None

    def refresh_dictionaries(self) -> None:
        """Load dictionaries stored since the last call (a damaged one is recorded, not loaded)."""
        known = set(self.codec.dictionary_ids) | set(self.damaged_dictionaries)
        fresh = {k: v for k, v in self.dictionaries().items() if k not in known}
        good, damaged = usable_dictionaries(fresh)
        for dict_id, data in good.items():
            self.codec.add_dictionary(dict_id, data)
        for dict_id, reason in damaged.items():
            self.codec.mark_damaged(dict_id, reason)
        self.damaged_dictionaries.update(damaged)

    # ------------------------------------------------------------------ rows

    def _pages(
        self,
        *,
        after: int = 0,
        to: int | None = None,
        session_id: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int | None = None,
        page: int = 2000,
        after_session_seq: int | None = None,
        max_bytes: int | None = None,
        page_bytes: int | None = None,
        project_id: str | None = None,
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Pages of row tuples in :data:`ROW_COLUMNS` order (filters as in :meth:`rows`), one
        read transaction each. ``page_bytes`` ends each page (not the read) before its rows pass
        that many bytes (at least one row per page)."""
        if after >= SEQ_MAX or (to is not None and to <= SEQ_MIN):
            return  # nothing can lie past the largest integer SQLite stores
        after = max(after, SEQ_MIN)
        to = None if to is None else min(to, SEQ_MAX)
        where = ["seq > ?"]
        args: list[Any] = [after]
        if to is not None:
            where.append("seq <= ?")
            args.append(to)
        if session_id is not None:
            where.append("session_id = ?")
            args.append(session_id)
        if kinds:
            where.append(f"kind IN ({', '.join('?' for _ in kinds)})")
            args.extend(kinds)
        if project_id is not None:
            where.append("project_id = ?")
            args.append(project_id)
        order, ss_arg, careful = "seq", -1, False
        if session_id is not None and self._unnumbered_in(session_id, after, to):
            # A row of the session without a session_seq (an edited log) lies outside every range
            # of UNIQUE(session_id, session_seq): read this session by seq instead, every row
            # checked (careful pages), so that row is reported rather than silently left out.
            careful = True
            if after_session_seq is not None:
                where.append("(session_seq > ? OR session_seq IS NULL)")
                args.append(after_session_seq)
        elif session_id is not None:
            # A session's rows are read as a range of UNIQUE(session_id, session_seq), in its order
            # (the same as seq's: both grow with each append of the session), so a page costs its
            # rows. By seq alone, SQLite walked and sorted every row of the session after ``after``
            # for each page: paging through a long session took the square of its length.
            order = "session_seq"
            if to is not None:
                where.append("session_seq <= ?")
                args.append(self._session_seq_upto(session_id, to))
            if after > 0:
                after_session_seq = max(after_session_seq or 0, self._session_seq_upto(session_id, after))
            elif after_session_seq is None:  # (from the start a number below 1 is read too: met and named)
                after_session_seq = SEQ_MIN
            if after_session_seq is not None:
                ss_arg = len(args)
                where.append("session_seq > ?")
                args.append(after_session_seq)
        elif after_session_seq is not None:
            where.append("session_seq > ?")
            args.append(after_session_seq)
        sql = f"SELECT {ROW_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?"
        remaining = limit
        cursor = after
        left = max_bytes or 0  # with max_bytes: the decoded body bytes the read may still hold
        execute = self.conn.execute
        careful_sql = sql.replace(ROW_COLUMNS, _CAREFUL_COLUMNS, 1)
        prev_seq, prev_row = SEQ_MIN - 1, None  # (a session read in session_seq order: the last row so far)

        def fetch(rows: apsw.Cursor) -> tuple[list[tuple[Any, ...]], bool]:
            """The page's rows, and whether page_bytes cut it short."""
            nonlocal left
            if max_bytes is not None:
                batch, left = _fetch_within(rows, left, first=cursor == after)
                return batch, False
            if page_bytes is not None:
                batch, spare = _fetch_within(rows, page_bytes, first=True)
                return batch, spare < 0
            return rows.fetchall(), False

        while remaining is None or remaining > 0:
            n = page if remaining is None else min(page, remaining)
            try:
                try:
                    batch, cut = fetch(execute(sql, (*args, n)))
                except UnicodeDecodeError:  # some TEXT value of the page is not UTF-8: read it as bytes
                    batch, cut = fetch(execute(careful_sql, (*args, n)))
                    batch = _CarefulPage(map(_careful_row, batch))
            except _DAMAGE as exc:
                where = f"the events after seq {cursor}" if cursor > 0 else "the events table"
                raise self._damaged(where, exc) from None
            if order == "session_seq" and batch:
                back = _seq_back(batch, prev_seq)
                if back is not None:  # the rows before it, then the row that was edited
                    if back:
                        yield type(batch)(batch[:back])
                    row, before = batch[back], batch[back - 1] if back else prev_row
                    raise self._misnumbered_in(session_id, row, before)
                prev_row = batch[-1]
                prev_seq = prev_row[0]
            if batch:
                yield _CarefulPage(batch) if careful and type(batch) is not _CarefulPage else batch
            if len(batch) < n and not cut:
                return  # the end, or the read's byte budget is spent
            cursor = batch[-1][0]
            if ss_arg >= 0 and isinstance(batch[-1][4], int):
                # A session's range: its numbering pages the read, and seq stays the caller's
                # bound, so a row numbered out of step with seq is met (and reported), not skipped.
                args[ss_arg] = batch[-1][4]
            else:
                args[0] = cursor
            if remaining is not None:
                remaining -= len(batch)

    def _misnumbered_in(self, session_id: str, row: tuple[Any, ...], before: tuple[Any, ...]) -> CorruptEvent:
        """The error for a session read in ``session_seq`` order that met ``row`` at a seq below
        that of the row ``before`` it. That row need not be the edited one (two rows' numbers
        swapped far apart: the row read after the first of them is correct), so the session's
        numbers are walked in seq order, as ``lens log verify`` walks them, and the first row
        out of step is named; only a corrupt log takes this path."""
        last = 0
        for seq, number in self._query("the events table", "SELECT seq, session_seq FROM events WHERE session_id = ? "
                                       "AND session_seq IS NOT NULL ORDER BY seq", (session_id,)):
            if type(number) is not int:
                continue  # (a mistyped number is its row's own problem, reported when that row is read)
            last, problem = numbering_step(quoted(session_id), last, number)
            if problem is not None:
                if "out of step" not in problem:
                    problem += " (its numbering is out of step with seq"
                    problem += f": session_seq {before[4]!r} is at seq {before[0]}, session_seq {row[4]!r} at seq {row[0]})"
                return CorruptEvent(problem).at(seq)
        return CorruptEvent(  # (not reached: two orders that disagree hold a row out of step)
            f"the event holds session_seq {row[4]!r} of session {quoted(session_id)}, but its seq is below that of "
            f"session_seq {before[4]!r} (seq {before[0]}): the session's numbering is out of step with seq "
            f"(edited)").at(row[0])

    def _unnumbered_in(self, session_id: str, after: int, to: int | None) -> bool:
        """Whether the session has a row without a ``session_seq`` with ``after < seq <= to``:
        one probe of the start of its ``(session_id, session_seq)`` index, where NULLs sort."""
        return bool(self._query(
            "the events table",
            "SELECT 1 FROM events WHERE session_id = ? AND session_seq IS NULL AND seq > ? AND seq <= ? LIMIT 1",
            (session_id, after, SEQ_MAX if to is None else to)))

    def _session_seq_upto(self, session_id: str, seq: int) -> int:
        """The largest ``session_seq`` of the session's rows with ``seq`` at most ``seq`` (0 for
        none), found by bisection over UNIQUE(session_id, session_seq): a few index probes."""
        def first_from(ss: int) -> tuple[Any, ...] | None:
            found = self._query("the events table", "SELECT session_seq, seq FROM events WHERE session_id = ? "
                                "AND session_seq >= ? ORDER BY session_seq LIMIT 1", (session_id, ss))
            return found[0] if found else None

        top = self._query("the events table", "SELECT max(session_seq) FROM events WHERE session_id = ?", (session_id,))
        lo, hi = 0, top[0][0] if top and isinstance(top[0][0], int) else 0
        while lo < hi:  # rows up to session_seq lo lie at or before seq; those past hi after it
            mid = (lo + hi + 1) // 2
            row = first_from(mid)
            if row is None or not isinstance(row[1], int) or row[1] > seq:
                hi = mid - 1
            else:
                lo = max(mid, row[0] if isinstance(row[0], int) else mid)
        return lo

    def rows(
        self,
        *,
        after: int = 0,
        to: int | None = None,
        session_id: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int | None = None,
        page: int = 2000,
        after_session_seq: int | None = None,
        max_bytes: int | None = None,
        page_bytes: int | None = PAGE_BYTES,
        project_id: str | None = None,
    ) -> Iterator[StoredRow]:
        """Stored rows with ``after < seq <= to`` in ``seq`` order, optionally filtered.

        ``after_session_seq`` (with ``session_id``) keeps rows with ``session_seq`` above it: a
        session's tail read as an index range instead of a walk of the whole session.
        ``max_bytes`` ends the read before the rows' decoded bodies (``raw_size``) would pass it,
        but never before its first row: a page of a few huge events stays a few events.
        Reads in pages so no read transaction is held for long; ``page_bytes`` bounds what one
        page holds (stored bodies or declared sizes, whichever is larger), so a long read of
        large events runs in bounded memory. ``project_id`` keeps the rows of one project (the
        others are skipped in SQL, never decoded; no index: bound the read with ``to``).
        """
        for page_rows in self._pages(
            after=after, to=to, session_id=session_id, kinds=kinds, limit=limit, page=page,
            after_session_seq=after_session_seq, max_bytes=max_bytes, page_bytes=page_bytes,
            project_id=project_id,
        ):
            for r in page_rows:
                yield StoredRow(*r)

    def decode(self, row: StoredRow) -> StoredEvent:
        """Decode one row (loading dictionaries trained since this reader opened)."""
        try:
            return decode_row(self.codec, row)
        except UnknownDictionary:
            self.refresh_dictionaries()
            return decode_row(self.codec, row)

    def events(self, **filters: Any) -> Iterator[StoredEvent]:
        """Decoded events; see :meth:`rows` for the filters. Raises on the first corrupt row.

        The replay path. Each page's frames are decompressed in one GIL-free zstd call (on a
        helper thread while the previous page is decoded, once a read spans several pages),
        checked against their row (dictionary, checksum flag, size, kind), and decoded
        straight from the row tuples with no :class:`StoredRow` per row. A row that fails any
        check goes through :meth:`Codec.decode`, which names the problem.
        """
        return self._events(filters, None)

    def page(self, **filters: Any) -> EventPage:
        """The events of :meth:`events` (read whole) with the decoded bytes their rows declare."""
        sizes: list[int] = []
        events = list(self._events(filters, sizes))
        return EventPage(events, sum(sizes))

    def _events(self, filters: dict[str, Any], sizes: list[int] | None) -> Iterator[StoredEvent]:
        """:meth:`events`; with ``sizes``, each page's declared decoded bytes are appended to it
        (one sum a page; the loop over rows, the replay path, gains no branch)."""
        codec = self.codec
        decode = codec.decode
        decode_raw = codec.raw_decoder.decode
        tag_of = TAG_OF.get
        not_typed = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)
        for page_rows, raws in _decompressed_pages(codec, self._pages(**filters)):
            careful = type(page_rows) is _CarefulPage
            if sizes is not None:
                sizes.append(sum(r[10] for r in page_rows if type(r[10]) is int and r[10] > 0))
            for row, raw in zip(page_rows, raws):
                if careful:  # text that is not UTF-8 somewhere in this page
                    problem = row_problem(row)
                    if problem is not None:
                        raise CorruptEvent(problem).at(row[0])
                elif row[4] is None and row[3] is not None:  # a session's event without its number,
                    # met by a read of the whole log (a session's read finds it with one probe). A
                    # read across sessions goes by seq and checks no session's numbering further:
                    # that check cost the replay path about 5% a row, and nothing read by seq
                    # depends on the numbers (`lens log verify` and a session's read check them).
                    raise CorruptEvent(row_problem(row) or "no session_seq").at(row[0])
                # Columns by index, not unpacked: unpacking touches every column object
                # (the compressed body too), which costs a cache miss per row on long reads.
                event = None
                if raw is not None:
                    try:
                        event = decode_raw(raw)
                    except not_typed:
                        pass
                    else:
                        if tag_of(type(event)) != row[7]:
                            event = None
                if event is None:  # not decompressed with its page, or it did not decode
                    problem = row_problem(row)
                    if problem is not None:
                        raise CorruptEvent(problem).at(row[0])
                    try:
                        try:
                            event = decode(row[7], row[11], row[9])
                        except UnknownDictionary:
                            self.refresh_dictionaries()
                            event = decode(row[7], row[11], row[9])
                    except CorruptEvent as exc:
                        raise exc.at(row[0]) from None
                yield StoredEvent(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], event)

    def event_count(self) -> int:
        return self._query("the events table", "SELECT count(*) FROM events")[0][0]


def _fetch_within(rows: apsw.Cursor, left: int, *, first: bool) -> tuple[list[tuple[Any, ...]], int]:
    """The rows of ``rows`` whose bodies — decoded (``raw_size``) or stored, whichever is larger —
    fit in ``left`` bytes, and the bytes left after them (-1 once a row did not fit); the read's
    ``first`` row always fits. Rows past the budget are never fetched (a page of 2,000 events of
    megabytes each is not held and then cut), and the statement is reset there, which ends its
    read."""
    out: list[tuple[Any, ...]] = []
    for row in rows:
        size = row[10] if type(row[10]) is int and row[10] > 0 else 0  # (damage is named later)
        body = row[11]
        if type(body) is bytes and len(body) > size:  # a damaged row may declare less than it holds
            size = len(body)
        if size > left and (out or not first):
            rows.close()
            return out, -1
        left -= size
        out.append(row)
        first = False
    return out, left


# A read of at least this many rows in its first page gets a helper thread that decompresses the
# next page while this one is decoded (the zstd call holds no GIL, so the two run side by side).
PIPELINE_MIN_ROWS = 1000
# Pages fetched and queued for the helper beyond the one being decoded. The helper needs the GIL
# back after each zstd call, which the decoding thread yields only every switch interval (5 ms):
# with one page of slack the reader often waited for it.
READ_AHEAD_PAGES = 2


def _decompressed_pages(
    codec: Codec, pages: Iterator[list[tuple[Any, ...]]]
) -> Iterator[tuple[list[tuple[Any, ...]], Sequence[Any]]]:
    """Each page with its frames decompressed (``None`` where a row needs the checked path)."""
    first = next(pages, None)
    if first is None:
        return
    if len(first) < PIPELINE_MIN_ROWS:
        yield first, codec.decompress_rows(_frame_plan(codec, first))
        for page in pages:
            yield page, codec.decompress_rows(_frame_plan(codec, page))
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lens-log-reader") as pool:
        ahead = deque([(first, pool.submit(codec.decompress_rows, _frame_plan(codec, first)))])
        try:
            while ahead:
                while len(ahead) <= READ_AHEAD_PAGES:  # fetched while the helper decompresses
                    nxt = next(pages, None)
                    if nxt is None:
                        break
                    ahead.append((nxt, pool.submit(codec.decompress_rows, _frame_plan(codec, nxt))))
                page, pending = ahead.popleft()
                yield page, pending.result()
        finally:
            for _page, pending in ahead:
                pending.cancel()


def _frame_plan(codec: Codec, page: list[tuple[Any, ...]]) -> FramePlan:
    """Group a page's rows by dictionary for :meth:`Codec.decompress_rows` (in this thread)."""
    return codec.plan_frames(page)
