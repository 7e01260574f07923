"""``events.db`` read and changed behind Lens's back, as a hand edit, a restored backup or a
damaged disk would: for tests of what Lens makes of such a log.

Always through apsw, the SQLite library Lens itself uses, never the standard ``sqlite3``: a store
or daemon may hold the same file open in the test's own process, and POSIX locks belong to the
process, so a second SQLite library closing its descriptor of the file drops the locks the first
one holds (SQLite's own warning); the WAL index can then be shrunk under a reader that has it
mapped (a SIGBUS, seen once in CI)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import apsw
import trio

from events.store import Draft, EventStore
from events.types import ProjectCreated


def edit_log(data_dir: Path, sql: str, args: tuple[Any, ...] = ()) -> None:
    """Run one statement on ``data_dir``'s events.db in a transaction of its own."""
    conn = apsw.Connection(str(data_dir / "events.db"))
    conn.set_busy_timeout(5000)  # (a daemon may be writing)
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def log_rows(data_dir: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple]:
    """The rows of one query on ``data_dir``'s events.db, opened read-only."""
    conn = apsw.Connection(str(data_dir / "events.db"), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        return list(conn.execute(sql, args))
    finally:
        conn.close()


def body_of_row(data_dir: Path, seq: int) -> bytes:
    """The stored body of the row ``seq``, as the log holds it."""
    return log_rows(data_dir, "SELECT body FROM events WHERE seq = ?", (seq,))[0][0]


async def log_with_its_wal(data_dir: Path, into: Path, n: int) -> None:
    """Append ``n`` events to a new log in ``data_dir``, one commit each, and copy its
    ``events.db`` and ``events.db-wal`` into ``into`` while the store is still open (closing it
    would checkpoint the WAL into events.db and remove it)."""
    store = EventStore.open(data_dir, synchronous="OFF")
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            for i in range(n):
                await store.append(Draft(ProjectCreated(name=f"p{i}", workspace="/ws"), project_id=f"p{i}"))
            into.mkdir(mode=0o700)
            for name in ("events.db", "events.db-wal"):
                shutil.copyfile(data_dir / name, into / name)
            store.close_writer()
    finally:
        store.close()
