"""A JSON answer that may be large (a session's view, a page of its events), encoded in a worker
thread a piece at a time when it is large, never in one call on the event loop.

A large answer is made by :func:`runtime.pieces.encode_in_pieces` (many calls, none holding the
interpreter's lock long, the worker giving the loop way after each chunk): its chunks are the
answer's body, sent one after the other with the whole length declared. The bytes are exactly
``msgspec.json.encode(data)``'s. The daemon's known secrets are scrubbed there, from every string
and key, as the app's ``after_request`` scrubs a whole JSON answer (it leaves a body made of
pieces to its route): what it would make of the same answer.
"""

from __future__ import annotations

from typing import Any, AsyncIterator

import trio
from quart import Response

from events.secrets import Secrets

from .http_parts import json_response
from .json_chars import PIECES_FROM_CHARS
from .pieces import encode_in_pieces


async def json_answer(data: Any, secrets: Secrets | None = None, status: int = 200, *, chars: int) -> Response:
    """``data`` as a JSON answer. ``chars``: about how many characters of JSON its strings make
    (the caller's cheap estimate, :mod:`runtime.json_chars`: a view's texts, their escapes counted
    near the threshold, or the bytes a page of events declares, each counted as the most it can
    become). Up to :data:`PIECES_FROM_CHARS` it is encoded on the loop in one call, as any answer (a few
    milliseconds at most; the app's ``after_request`` scrubs it); past that by
    :func:`encode_in_pieces` in a worker thread, whose walk costs more in all but gives the loop
    the lock back between pieces. ``data`` must not change meanwhile: a view or a page built for
    this answer alone."""
    if chars <= PIECES_FROM_CHARS:
        return json_response(data, status)
    chunks, length = await trio.to_thread.run_sync(encode_in_pieces, data, secrets)
    return Response(_body(chunks), status, {"Content-Type": "application/json", "Content-Length": str(length)})


async def _body(chunks: list[bytes]) -> AsyncIterator[bytes]:
    # (an asynchronous iterable: Quart runs a plain one's iteration through asyncio)
    while chunks:
        yield chunks.pop(0)
