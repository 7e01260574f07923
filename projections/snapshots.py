"""Session snapshots in ``projections.db``: derived data that makes wake-up cost the tail only.

A snapshot is the folded :class:`~projections.session_state.SessionState` at some ``seq``:
MessagePack in zstd frames. Snapshots of another version are ignored (and replaced), so
changing the fold only costs one full replay per session.

Layout (``_Blob``): one frame of the state with every agent's ``items`` left out, then each
agent's items in frames of :data:`CHUNK_ITEMS`. Loading decompresses the next frame in a helper
thread (zstd releases the GIL) while this thread decodes the previous one, so the two halves of
the load overlap; the items decoded are exactly the state's items, in order. The stored bytes
end with a CRC-32 of everything before it: zstd frames carry no checksum of their own here, and a
flipped bit could otherwise decode into another state.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import zlib
from pathlib import Path

import apsw
import msgspec
import zstandard

from .projector import open_projections_db
from .session_state import SNAPSHOT_VERSION, Item, SessionState, snapshot_bytes, state_from_snapshot

CHUNK_ITEMS = 4096  # items per frame: ~2-3 MiB of MessagePack for tool-output-heavy sessions


log = logging.getLogger("lens.snapshots")


class _Blob(msgspec.Struct, array_like=True):
    state: bytes  # zstd frame: the SessionState, every agent's items left out
    items: list[tuple[str, list[bytes]]]  # per agent id: zstd frames of its items, in order


_blob_encoder = msgspec.msgpack.Encoder()
_blob_decoder = msgspec.msgpack.Decoder(_Blob)
_items_decoder = msgspec.msgpack.Decoder(list[Item])


def encode_snapshot(state: SessionState, compressor: zstandard.ZstdCompressor) -> bytes:
    """The stored form of ``state`` (``state`` itself is not changed)."""
    head = msgspec.structs.replace(
        state, agents={aid: msgspec.structs.replace(a, items=[]) for aid, a in state.agents.items()}
    )
    chunks = [
        (aid, [compressor.compress(_blob_encoder.encode(a.items[i : i + CHUNK_ITEMS]))
               for i in range(0, len(a.items), CHUNK_ITEMS)])
        for aid, a in state.agents.items()
        if a.items
    ]
    body = _blob_encoder.encode(_Blob(compressor.compress(snapshot_bytes(head)), chunks))
    return body + zlib.crc32(body).to_bytes(4, "big")


def decode_snapshot(data: bytes) -> SessionState:
    """The state stored by :func:`encode_snapshot`; raises on damaged data."""
    body = memoryview(data)[:-4]
    if len(data) < 4 or zlib.crc32(body).to_bytes(4, "big") != bytes(data[-4:]):
        raise ValueError("snapshot checksum mismatch")
    blob = _blob_decoder.decode(body)
    state = state_from_snapshot(zstandard.ZstdDecompressor().decompress(blob.state))
    frames = [(aid, frame) for aid, fs in blob.items for frame in fs]
    if not frames:
        return state
    ready: queue.SimpleQueue[bytes | BaseException] = queue.SimpleQueue()

    def decompress_all() -> None:
        d = zstandard.ZstdDecompressor()
        try:
            for _aid, frame in frames:
                ready.put(d.decompress(frame))
        except BaseException as exc:  # handed to the decoding thread, which raises it
            ready.put(exc)

    helper = threading.Thread(target=decompress_all, name="lens-snapshot-zstd", daemon=True)
    helper.start()
    enabled = gc.isenabled()
    gc.disable()  # see state_from_snapshot: nothing decoded here can be garbage
    try:
        for aid, _frame in frames:
            raw = ready.get()
            if isinstance(raw, BaseException):
                raise raw
            state.agents[aid].items.extend(_items_decoder.decode(raw))
    finally:
        if enabled:
            gc.enable()
        helper.join()
    return state


class SnapshotStore:
    """Reads and writes snapshots; one connection, used from one thread at a time."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        conn.execute(
            "CREATE TABLE IF NOT EXISTS snapshots(session_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
            "version INTEGER NOT NULL, state BLOB NOT NULL) WITHOUT ROWID"
        )
        self._c = zstandard.ZstdCompressor(level=1)

    @classmethod
    def open(cls, data_dir: Path) -> "SnapshotStore":
        return cls(open_projections_db(data_dir))

    def close(self) -> None:
        self.conn.close()

    # A snapshot is only a shortcut: when projections.db cannot be read or written (damaged,
    # deleted under the daemon, a full disk) the session replays its log instead. Letting the
    # error through crashed the actor, three times, and quarantined a healthy session for good.

    def load(self, session_id: str) -> SessionState | None:
        try:
            rows = self.conn.execute(
                "SELECT version, state FROM snapshots WHERE session_id = ?", (session_id,)
            ).fetchall()
        except apsw.Error as exc:
            log.warning("snapshot of %s unreadable (%s); replaying its log", session_id, exc)
            return None
        if not rows or rows[0][0] != SNAPSHOT_VERSION:
            return None
        try:
            return decode_snapshot(rows[0][1])
        except Exception:  # a damaged snapshot is only a lost shortcut: replay instead
            return None

    def save(self, state: SessionState) -> None:
        blob = encode_snapshot(state, self._c)
        try:
            with self.conn:
                self.conn.execute(
                    "INSERT OR REPLACE INTO snapshots(session_id, seq, version, state) VALUES (?, ?, ?, ?)",
                    (state.session_id, state.last_seq, SNAPSHOT_VERSION, blob),
                )
        except apsw.Error as exc:
            log.warning("snapshot of %s not saved (%s)", state.session_id, exc)

    def forget_after(self, last_seq: int) -> int:
        """Delete the snapshots that end past ``last_seq`` (the log's last seq when the daemon
        starts): the log was put back from a backup, and once it grows again a snapshot of the
        old timeline could not be told from one of the new. Returns how many were deleted."""
        try:
            with self.conn:
                self.conn.execute("DELETE FROM snapshots WHERE seq > ?", (last_seq,))
                return self.conn.changes()
        except apsw.Error as exc:  # (the wake-up check still refuses them while the log is short)
            log.warning("snapshots past seq %s not deleted (%s)", last_seq, exc)
            return 0

    def delete(self, session_id: str) -> None:
        try:
            with self.conn:
                self.conn.execute("DELETE FROM snapshots WHERE session_id = ?", (session_id,))
        except apsw.Error as exc:  # a stale snapshot is harmless: the log after it says the rest
            log.warning("snapshot of %s not deleted (%s)", session_id, exc)
