"""Session snapshots in ``projections.db``: derived data that makes wake-up cost the tail only.

A snapshot is the folded :class:`~projections.session_state.SessionState` at some ``seq``,
MessagePack in a zstd frame. Snapshots of another version are ignored (and replaced), so
changing the fold only costs one full replay per session.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import zstandard

from .projector import open_projections_db
from .session_state import SNAPSHOT_VERSION, SessionState, snapshot_bytes, state_from_snapshot


class SnapshotStore:
    """Reads and writes snapshots; one connection, used from one thread at a time."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        conn.execute(
            "CREATE TABLE IF NOT EXISTS snapshots(session_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
            "version INTEGER NOT NULL, state BLOB NOT NULL) WITHOUT ROWID"
        )
        self._c = zstandard.ZstdCompressor(level=1)
        self._d = zstandard.ZstdDecompressor()

    @classmethod
    def open(cls, data_dir: Path) -> "SnapshotStore":
        return cls(open_projections_db(data_dir))

    def close(self) -> None:
        self.conn.close()

    def load(self, session_id: str) -> SessionState | None:
        rows = self.conn.execute(
            "SELECT version, state FROM snapshots WHERE session_id = ?", (session_id,)
        ).fetchall()
        if not rows or rows[0][0] != SNAPSHOT_VERSION:
            return None
        try:
            return state_from_snapshot(self._d.decompress(rows[0][1]))
        except Exception:  # a damaged snapshot is only a lost shortcut: replay instead
            return None

    def save(self, state: SessionState) -> None:
        blob = self._c.compress(snapshot_bytes(state))
        with self.conn:
            self.conn.execute(
                "INSERT OR REPLACE INTO snapshots(session_id, seq, version, state) VALUES (?, ?, ?, ?)",
                (state.session_id, state.last_seq, SNAPSHOT_VERSION, blob),
            )

    def delete(self, session_id: str) -> None:
        with self.conn:
            self.conn.execute("DELETE FROM snapshots WHERE session_id = ?", (session_id,))
