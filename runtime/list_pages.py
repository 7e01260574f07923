"""Pages of the project and session lists (``GET /projects``, ``GET /sessions``).

Both lists answer whole when asked as the spec writes them. A client may ask for a page instead:
``limit`` rows (1 to :data:`LIST_LIMIT_MAX`) after the row whose id is ``after`` (from the first
row when absent); the answer then carries ``nextAfter``, the id to ask after for the next page,
or ``null`` after the last row. A cursor is a row's id, not a position: rows made or deleted
between two pages never shift a page (a new session comes first in the newest-first list, so
paging on from an id never meets it twice or skips one).

Pure: the SQL of a page, given the rows' order and the cursor row's sort key; the route reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LIST_LIMIT_MAX = 1000  # rows in one page of a list


@dataclass(frozen=True)
class ListOrder:
    """The order a list's rows are answered in: ``created_ts`` (newest first when
    ``newest_first``), then ``id`` ascending among rows made in the same millisecond."""

    table: str
    newest_first: bool

    @property
    def order_by(self) -> str:
        return f" ORDER BY created_ts {'DESC' if self.newest_first else 'ASC'}, id"

    def cursor_sql(self) -> str:
        """The SQL of the key of the row ``after`` names: ``(created_ts, id)`` or no row."""
        return f"SELECT created_ts, id FROM {self.table} WHERE id = ?"

    def page(self, where: list[str], args: list[Any], after_key: tuple[int, str] | None,
             limit: int | None) -> tuple[str, tuple[Any, ...]]:
        """The ``WHERE … ORDER BY … LIMIT`` tail of a read of this list (``where`` / ``args``:
        the route's own filters). A paged read asks for one row more than ``limit``: whether it
        came says whether a next page exists."""
        where, args = list(where), list(args)
        if after_key is not None:
            ts, rid = after_key
            later = "<" if self.newest_first else ">"
            where.append(f"(created_ts {later} ? OR (created_ts = ? AND id > ?))")
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


PROJECTS = ListOrder("projects", newest_first=False)
SESSIONS = ListOrder("sessions", newest_first=True)
