"""Daemon-wide settings a client saved, as the log records them: today the saved default model
(``default_model.set``, F-MOD-5). One row per setting, the latest event's value and its ``seq``,
so the daemon reads the setting at start without a walk of the log."""

from __future__ import annotations

from typing import Sequence

import apsw

from events import types as t
from events.reader import StoredEvent, StoredRow

from .projector import Projection

DEFAULT_MODEL_KEY = "default_model"


class SettingsProjection(Projection):
    name = "settings"
    version = 1
    needs_body = True
    tables = ("settings",)

    def create(self, conn: apsw.Connection) -> None:
        # value NULL: cleared (the row stays, with the seq of the clearing event)
        conn.execute("CREATE TABLE settings(key TEXT PRIMARY KEY, value TEXT, seq INTEGER NOT NULL) WITHOUT ROWID")

    def apply(self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
        assert events is not None
        for se in events:
            if isinstance(se.event, t.DefaultModelSet):
                conn.execute("INSERT OR REPLACE INTO settings(key, value, seq) VALUES (?, ?, ?)",
                             (DEFAULT_MODEL_KEY, se.event.model, se.seq))
