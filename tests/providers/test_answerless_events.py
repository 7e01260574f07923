"""Events that carry nothing of the answer (F-MOD-1): keep-alive comments, frames without data,
empty deltas, pings and events of kinds a reader does not know. A server may send them for as
long as ``timeoutSeconds`` (a stream without a byte of the answer ends then), and a fast one sends
millions meanwhile: what a reader keeps for each must not add up. Measured with tracemalloc as the
growth of what is held between two text deltas with ``FLOOD`` such events between them, both
taken in the live-delta callback (what reading one chunk of frames allocates and frees is the same
at both points and cancels out); the body is sent 32 KiB at a time, each chunk once the client has
read the one before. (Each read leaves trio a cancel scope's deadline to drop later, some 200 bytes,
a thousand at most: reads of smaller chunks would measure those.)

Nor is an empty delta streamed live: on Responses and Anthropic each was a ``model.delta`` frame
to every viewer of the session."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from runtime.providers.base import Delta

from .conftest import PROTOCOLS, Ctx, Deltas, stream_traced
from .scripts import reply
from .servers.base import Reply, sse

FLOOD = 10_000  # events between the two points measured
B, C = "B-mark", "C-mark"  # the text deltas at those points
CHUNK = 32 * 1024  # bytes the server sends at a time

UNKNOWN = {
    "openai-responses": b'event: response.mystery\ndata: {"type": "response.mystery", "sequence_number": 1}\n\n',
    # (Chat's chunks have no kind: one without choices carries nothing)
    "openai-chat": b'data: {"id": "r1", "object": "chat.completion.chunk", "created": 1700000000, "model": "m", '
                   b'"choices": []}\n\n',
    "anthropic": b'event: mystery\ndata: {"type": "mystery"}\n\n',
}
FILLERS = ("keep-alive", "empty frame", "empty delta", "unknown event", "ping")


def _filler(protocol: str, kind: str, delta_frame: bytes) -> bytes:
    if kind == "keep-alive":
        return b": keep-alive\n\n"
    if kind == "empty frame":
        return b"data:\n\n"
    if kind == "empty delta":  # (the text delta at B, emptied)
        return delta_frame.replace(f'"{B}"'.encode(), b'""')
    if kind == "ping":
        return b'event: ping\ndata: {"type": "ping"}\n\n'
    return UNKNOWN[protocol]


def flooded(protocol: str, kind: str, before: int = 200) -> Reply:
    """An answer "a" B C "d" with ``before`` fillers ahead of B and ``FLOOD`` between B and C."""
    frames = sse(reply(protocol, text=["a", B, C, "d"]).events or [])
    at_b = next(i for i, f in enumerate(frames) if f'"{B}"'.encode() in f)
    at_c = next(i for i, f in enumerate(frames) if f'"{C}"'.encode() in f)
    filler = _filler(protocol, kind, frames[at_b])
    body = b"".join([*frames[:at_b], filler * before, frames[at_b], filler * FLOOD, *frames[at_c:]])
    return Reply(chunks=[body[i:i + CHUNK] for i in range(0, len(body), CHUNK)])


CASES = [(p, k) for p in PROTOCOLS for k in FILLERS if k != "ping" or p == "anthropic"]


@pytest.mark.parametrize("protocol, kind", CASES)
async def test_a_flood_of_events_without_the_answer_holds_nothing(protocol, kind, server, make):
    provider = make(protocol, max_retries=0)
    server.push(reply(protocol, text="warm"), flooded(protocol, kind))
    await provider.stream(Ctx().user("hi").request(), Deltas())  # (imports, pools: before measuring)
    held: dict[str, int] = {}
    streamed: list[str] = []
    empty = 0  # (counted, not kept: kept, they would be what is measured)

    def on_delta(d: Delta) -> None:
        nonlocal empty
        if not d.text:
            empty += 1
            return
        streamed.append(d.text)
        if d.text in (B, C):
            gc.collect()  # (cycles a read leaves are collected at times: not at both points alike)
            held[d.text] = tracemalloc.get_traced_memory()[0]

    result = await stream_traced(provider, on_delta)
    assert result.text == f"a{B}{C}d"
    assert (streamed, empty) == (["a", B, C, "d"], 0)  # (an empty delta is not streamed live)
    grown = held[C] - held[B]
    # Each event kept even as a list slot (8 bytes) would be 80 kB here; between the points the
    # client reads up to 60 chunks (the deadlines trio keeps, above) and its read buffer may be
    # larger at one point than at the other, by a chunk.
    assert grown < 48 * 1024, grown
