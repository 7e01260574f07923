"""Per-kind counts and sizes of the log: what ``lens log stats`` reads.

Works from stored columns only (no decoding), so it is cheap to keep and to rebuild.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import apsw

from events.reader import StoredEvent, StoredRow

from .projector import Projection, ProjectionsDamaged


class KindStats(Projection):
    name = "stats"
    version = 1
    needs_body = False
    tables = ("stats_kinds",)

    def create(self, conn: apsw.Connection) -> None:
        conn.execute(
            "CREATE TABLE stats_kinds("
            "kind TEXT PRIMARY KEY, events INTEGER NOT NULL, "
            "stored_bytes INTEGER NOT NULL, raw_bytes INTEGER NOT NULL) WITHOUT ROWID"
        )

    def apply(
        self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None
    ) -> None:
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in rows:
            a = acc[r.kind]
            a[0] += 1
            a[1] += len(r.body)
            a[2] += r.raw_size
        conn.executemany(
            "INSERT INTO stats_kinds(kind, events, stored_bytes, raw_bytes) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(kind) DO UPDATE SET events = events + excluded.events, "
            "stored_bytes = stored_bytes + excluded.stored_bytes, "
            "raw_bytes = raw_bytes + excluded.raw_bytes",
            [(k, *v) for k, v in acc.items()],
        )

    @staticmethod
    def read(conn: apsw.Connection) -> list[tuple[str, int, int, int]]:
        """(kind, events, stored_bytes, raw_bytes) per kind, by kind. A row of other types (the
        table edited by hand) is :class:`~projections.projector.ProjectionsDamaged`."""
        rows = list(conn.execute("SELECT kind, events, stored_bytes, raw_bytes FROM stats_kinds ORDER BY kind"))
        for row in rows:
            if type(row[0]) is not str or any(type(v) is not int for v in row[1:]):
                raise ProjectionsDamaged(conn.filename or "projections.db", f"stats_kinds holds the row {row!r}")
        return rows
