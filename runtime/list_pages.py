"""Pages of the project and session lists (``GET /projects``, ``GET /sessions``).

Both lists answer whole when asked as the spec writes them. A client may ask for a page instead:
``limit`` rows (1 to :data:`LIST_LIMIT_MAX`) after the row whose id is ``after`` (from the first
row when absent); the answer then carries ``nextAfter``, the id to ask after for the next page,
or ``null`` after the last row. A cursor is a row's id, not a position: rows made or deleted
between two pages never shift a page (a new session comes first in the newest-first list, so
paging on from an id never meets it twice or skips one).

The project list may also be read newest first (``order=newest``): the exact reverse of its
own order, ties in one millisecond included, so that its first page, reversed, is the end of
the list as a whole read gives it (the dashboard shows a list of thousands of projects so).

Each order is served by an index of its table that holds the sort key (``projects_created``,
``sessions_created``, ``sessions_project``): a page reads its rows from the index, from the
cursor on, and never sorts the table. The cursor's condition is written so that its first term
bounds the index's range (``created_ts <= ?``), not as an ``OR`` SQLite cannot seek with.

Pure: the SQL of a page, given the rows' order and the cursor row's sort key; the route reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from projections.catalog import SESSION_COLUMNS

LIST_LIMIT_MAX = 1000  # rows in one page of a list


@dataclass(frozen=True)
class ListOrder:
    """A list's read: the ``columns`` of its ``table`` it answers with, in the order of
    ``created_ts`` (newest first when ``newest_first``), then ``id`` (descending when
    ``ids_descending``) among rows made in the same millisecond."""

    table: str
    columns: str
    newest_first: bool
    ids_descending: bool = False

    @property
    def select(self) -> str:
        return f"SELECT {self.columns} FROM {self.table}"

    @property
    def order_by(self) -> str:
        return (f" ORDER BY created_ts {'DESC' if self.newest_first else 'ASC'},"
                f" id {'DESC' if self.ids_descending else 'ASC'}")

    def cursor_sql(self) -> str:
        """The SQL of the key of the row ``after`` names: ``(created_ts, id)`` or no row."""
        return f"SELECT created_ts, id FROM {self.table} WHERE id = ?"

    def page(self, where: list[str], args: list[Any], after_key: tuple[int, str] | None,
             limit: int | None) -> tuple[str, tuple[Any, ...]]:
        """The ``WHERE … ORDER BY … LIMIT`` tail of a read of this list, after :attr:`select`
        (``where`` / ``args``: the route's own filters). A paged read asks for one row more than ``limit``: whether it
        came says whether a next page exists."""
        where, args = list(where), list(args)
        if after_key is not None:
            ts, rid = after_key
            later = "<" if self.newest_first else ">"
            next_id = "<" if self.ids_descending else ">"
            # (rows after the cursor: made later in this order, or in its millisecond with an id after it)
            where.append(f"created_ts {later}= ? AND (created_ts {later} ? OR id {next_id} ?)")
            args += [ts, ts, rid]
        sql = (" WHERE " + " AND ".join(where) if where else "") + self.order_by
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit + 1)
        return sql, tuple(args)


def split_page(rows: list[tuple], limit: int | None) -> tuple[list[tuple], bool]:
    """``rows`` read by :meth:`ListOrder.page`, cut to ``limit``, and whether more follow."""
    if limit is None or len(rows) <= limit:
        return rows, False
    return rows[:limit], True


PROJECT_COLUMNS = "id, name, workspace, created_ts, seq"
PROJECTS = ListOrder("projects", PROJECT_COLUMNS, newest_first=False)
PROJECTS_NEWEST = ListOrder("projects", PROJECT_COLUMNS, newest_first=True, ids_descending=True)  # (order=newest)
SESSIONS = ListOrder("sessions", SESSION_COLUMNS, newest_first=True)
