"""Which artifacts the log names: the set the daemon's start-up sweep of ``artifacts/`` keeps.

An artifact is named wherever its id (a SHA-256 in hex) appears in an event: an image part of an
input or a tool result, a ``file.edited``'s before and after copies, an ``artifact.stored``, a
text line naming a fetched or returned binary, structured content, and the body of a kind this
build does not know (:class:`~events.types.Opaque`). Rather than list those fields (and miss the
next one added), every run of 64 lowercase hex digits anywhere in an event's body counts: a
string that only looks like an id keeps a file that could have gone, never the other way round.
One row per id, whatever the number of events naming it; rows are never removed (the log is
never cut), so an id named once stays named, a quarantined or deleted session's included.
"""

from __future__ import annotations

import re
from typing import Sequence

import apsw
import msgspec

from events.reader import StoredEvent, StoredRow

from .projector import Projection

# An id's shape (events.ids.SHA256_RE), found inside the encoded body: MessagePack keeps a
# string's UTF-8 bytes whole, so a run of hex digits in a string is a run in the encoding. But
# the run may begin before the string does: a string's length is written just before it, and a
# length byte can be a hex digit in ASCII (a text of 99 bytes beginning with an id is
# ``\xd9c<id>…``: the run is "c" and the id). So each run is cut into ids from its start and
# from its end, and also read from each of its first :data:`_LENGTH_BYTES` + 1 digits: up to four
# hex bytes of a length (str32's) before an id, hex text after it, or both, still name it.
_HEX_RUN = re.compile(rb"[0-9a-f]{64,}")
_LENGTH_BYTES = 4


def named_ids(event: object) -> set[str]:
    """The artifact ids ``event`` (a decoded event body) may name."""
    found: set[str] = set()
    for m in _HEX_RUN.finditer(msgspec.msgpack.encode(event)):
        run = m.group().decode()
        found.update(run[i:i + 64] for i in range(0, len(run) - 63, 64))
        found.update(run[len(run) - i - 64:len(run) - i] for i in range(0, len(run) - 63, 64))
        found.update(run[i:i + 64] for i in range(1, min(_LENGTH_BYTES, len(run) - 64) + 1))
    return found


class ArtifactNames(Projection):
    name = "artifact_names"
    version = 2  # (2: ids after a length byte that is a hex digit; an older table is folded again)
    needs_body = True
    tables = ("artifact_names",)

    def create(self, conn: apsw.Connection) -> None:
        conn.execute("CREATE TABLE artifact_names(id TEXT PRIMARY KEY) WITHOUT ROWID")

    def apply(self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
        assert events is not None
        ids: set[str] = set()
        for se in events:
            ids |= named_ids(se.event)
        if ids:
            conn.executemany("INSERT OR IGNORE INTO artifact_names(id) VALUES (?)", [(i,) for i in sorted(ids)])

    def dump(self, conn: apsw.Connection) -> list[tuple]:
        return [("artifact_names",), *conn.execute("SELECT id FROM artifact_names ORDER BY id")]

    @staticmethod
    def named(conn: apsw.Connection, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that some event names (looked up 500 at a time)."""
        found: set[str] = set()
        for i in range(0, len(ids), 500):
            part = list(ids[i:i + 500])
            sql = f"SELECT id FROM artifact_names WHERE id IN ({', '.join('?' * len(part))})"
            found.update(row[0] for row in conn.execute(sql, part) if type(row[0]) is str)
        return found
