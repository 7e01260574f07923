"""``events.db`` read and changed behind Lens's back (its writer closed), as a hand edit, a
restored backup or a damaged disk would: for tests of what Lens makes of such a log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw


def edit_log(data_dir: Path, sql: str, args: tuple[Any, ...] = ()) -> None:
    """Run one statement on ``data_dir``'s events.db in a transaction of its own."""
    conn = apsw.Connection(str(data_dir / "events.db"))
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def log_rows(data_dir: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple]:
    """The rows of one query on ``data_dir``'s events.db, opened read-only."""
    conn = apsw.Connection(str(data_dir / "events.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(sql, args))
    finally:
        conn.close()


def body_of_row(data_dir: Path, seq: int) -> bytes:
    """The stored body of the row ``seq``, as the log holds it."""
    return log_rows(data_dir, "SELECT body FROM events WHERE seq = ?", (seq,))[0][0]
