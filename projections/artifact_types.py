"""The MIME type each artifact was stored with: what ``GET /artifacts/{id}`` may serve it as.

An ``artifact.stored`` carries the type its source gave (a fetched body's ``Content-Type``, an
MCP block's ``mimeType``, ``application/octet-stream`` for a file's copies). Bytes are named by
their digest alone, so the same bytes may be stored more than once, by sources that disagree:
the first type recorded for an id is kept (a rebuild folds the log in the same order, so it keeps
the same one). The daemon serves the type only where the bytes agree with it
(``runtime.artifacts_api.artifact_type``); this table is what was claimed, never trusted alone.
"""

from __future__ import annotations

from typing import Sequence

import apsw

from events.reader import StoredEvent, StoredRow
from events.types import ArtifactStored

from .projector import Projection

# A type longer than this is no type a source meant (MCP's are cut to 100 characters already).
MIME_MAX_CHARS = 200


def stored_type(mime: str) -> str:
    """``mime`` without parameters, lowercased (``Application/PDF; x=1`` -> ``application/pdf``)."""
    return mime.split(";", 1)[0].strip().lower()[:MIME_MAX_CHARS]


class ArtifactTypes(Projection):
    name = "artifact_types"
    version = 1
    needs_body = True
    tables = ("artifact_types",)

    def create(self, conn: apsw.Connection) -> None:
        conn.execute("CREATE TABLE artifact_types(id TEXT PRIMARY KEY, mime TEXT NOT NULL) WITHOUT ROWID")

    def apply(self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
        assert events is not None
        found = [(se.event.artifact_id, stored_type(se.event.mime)) for se in events
                 if isinstance(se.event, ArtifactStored)]
        if found:
            conn.executemany("INSERT OR IGNORE INTO artifact_types(id, mime) VALUES (?, ?)", found)

    @staticmethod
    def type_of(conn: apsw.Connection, aid: str) -> str | None:
        """The type ``aid`` was first stored with, or ``None`` if no ``artifact.stored`` names it."""
        for (mime,) in conn.execute("SELECT mime FROM artifact_types WHERE id = ?", (aid,)):
            return mime if type(mime) is str else None
        return None
