"""Large JSON made a piece at a time in a worker thread, the event loop given way between chunks.

``msgspec.json.encode`` holds the interpreter's lock for the whole of one call: a view of 70 MB
(a session whose items hold many large tool outputs) took 90 to 130 ms in one call, and a worker
thread making that one call holds the event loop as long as the loop making it would. So
:func:`encode_in_pieces` encodes a value in many calls, each of at most :data:`PIECE_CHARS`
characters of a string: the worker gives the lock up between two of them, and the loop runs
meanwhile. The pieces are gathered into chunks of about :data:`CHUNK_BYTES` (joining 70 MB into
one ``bytes`` held the loop 50 ms too). After each chunk the worker calls :func:`give_way`, which
releases the lock on purpose (``time.sleep(0)``), so the loop, if it waits for it, runs then
rather than at the next forced switch, 5 ms on.

The bytes are exactly ``msgspec.json.encode(data)``'s, scrubbed of the daemon's known secrets
when they are given (from every string and key, as the app's ``after_request`` scrubs a whole JSON
answer).

Its users: a large JSON answer (``runtime.json_answer``), a large event's SSE frame
(``runtime.bus.event_frame_in_pieces``) and a large request body's checks
(``runtime.http_parts.decoded_body``), each in a worker thread. They call :func:`give_way` through
this module (``pieces.give_way``, looked up at each use), so that replacing the module's attribute
(``bench/loop_gap_bench.py`` and ``bench/frame_body_gap_bench.py``, ``--variant``) reaches every
one of them.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import msgspec

from events.secrets import Secrets

PIECE_CHARS = 64 * 1024  # a string longer than this is encoded a slice at a time
CHUNK_BYTES = 256 * 1024  # the pieces are gathered into chunks of about this many bytes
SPLIT_DEPTH = 16  # a value nested deeper than this is encoded in one call (what is so deep is small)

_encode = msgspec.json.Encoder().encode


class _Chunks:
    """Pieces of JSON text gathered into chunks of about :data:`CHUNK_BYTES`."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.length = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def add(self, piece: bytes) -> None:
        self._pending.append(piece)
        self._pending_bytes += len(piece)
        if self._pending_bytes >= CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            chunk = b"".join(self._pending)
            self.chunks.append(chunk)
            self.length += len(chunk)
            self._pending, self._pending_bytes = [], 0
            give_way()


def give_way() -> None:
    """What a worker that makes large bytes a chunk at a time does after each chunk (these
    pieces, the SSE frame of a large event, a large request body's checks). Called through the
    module (``pieces.give_way``, looked up at each use), so that the benches' ``--variant`` can
    replace it for all of them."""
    # The worker lets go of the interpreter's lock after each chunk (about CHUNK_BYTES): a loop
    # waiting for it takes it then, instead of at the switch interval (5 ms) that forces a
    # hand-over. Measured by bench/loop_gap_bench.py (docs/performance.md): the largest gap
    # between a 1 ms ticker's turns, for 6 MB of escaped JSON, 10.0–12.0 ms without, 4.9–5.1 ms
    # with (medians of 7 runs on a busy machine).
    time.sleep(0)


def _string(text: str, out: _Chunks) -> None:
    if len(text) <= PIECE_CHARS:
        out.add(_encode(text))
        return
    # Each character is escaped on its own, so slices encoded apart and put together (without
    # their quotes) are the whole string's encoding.
    out.add(b'"')
    for at in range(0, len(text), PIECE_CHARS):
        out.add(_encode(text[at:at + PIECE_CHARS])[1:-1])
    out.add(b'"')


def _value(value: Any, out: _Chunks, depth: int, scrub: Callable[[Any], Any] | None) -> None:
    # (``scrub``: the daemon's secrets taken out of each string and key as the walk meets it, so
    # the worker gives way while it scrubs too; a value encoded in one call, scrubbed whole. Bytes
    # are base64 text by then, as ``to_builtins`` makes them, on this path and the one call's alike)
    if isinstance(value, str):
        _string(scrub(value) if scrub else value, out)
    elif depth >= SPLIT_DEPTH or not isinstance(value, (dict, list)) or not value:
        out.add(_encode(scrub(value) if scrub else value))
    elif isinstance(value, dict):
        if scrub:  # (keys the scrub makes equal are one, as in Secrets.scrub: the first's place, the last value)
            value = {scrub(key): item for key, item in value.items()}
        sep = b"{"
        for key, item in value.items():
            out.add(sep)
            _string(key, out)
            out.add(b":")
            _value(item, out, depth + 1, scrub)
            sep = b","
        out.add(b"}")
    else:
        sep = b"["
        for item in value:
            out.add(sep)
            _value(item, out, depth + 1, scrub)
            sep = b","
        out.add(b"]")


def encode_in_pieces(data: Any, secrets: Secrets | None = None) -> tuple[list[bytes], int]:
    """``msgspec.json.encode(data)`` (scrubbed of ``secrets``) as chunks, and their length.
    Meant for a worker thread: no single call in it holds the interpreter's lock long."""
    tree = msgspec.to_builtins(data, str_keys=True)  # (a copy of the containers: the strings are shared)
    out = _Chunks()
    _value(tree, out, 0, secrets.scrub if secrets else None)
    out.flush()
    return out.chunks, out.length
