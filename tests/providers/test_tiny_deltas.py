"""An answer streamed in tiny deltas (F-MOD-1): the readers kept a list of the deltas until the
answer ended, a string object (about 50 bytes) and a list slot for each, so an answer of
one-character deltas took some 30 times its bytes in memory; near ``log.maxEventBytes`` (32 MiB)
that is about a gigabyte for one request. They now join the pieces as they come
(:func:`runtime.providers.sdk.add_piece`).

Measured with tracemalloc as the growth of what is held between a quarter and three quarters of
the answer's deltas, both taken in the live-delta callback: what reading one chunk of frames
allocates and frees (buffers of the server, the HTTP client, the SDK) is the same at both points
and cancels out, so the figure is what the deltas in between left behind. (At the last delta the
frames that end the stream, which repeat the whole text, are in those buffers.)"""

from __future__ import annotations

import tracemalloc

import pytest

from runtime.providers.base import Delta

from .conftest import PROTOCOLS, Ctx, stream_traced
from .scripts import reply
from .servers.base import Reply, sse

N = 8000  # deltas
PIECE = "あ"  # one character, 3 bytes of UTF-8 (ASCII and Latin-1 characters are shared objects in CPython)


# (Responses' reasoning deltas are only streamed live: the answer's reasoning comes from its final event.)
@pytest.mark.parametrize("protocol, kind", [(p, k) for p in PROTOCOLS for k in ("text", "reasoning")
                                            if (p, k) != ("openai-responses", "reasoning")])
async def test_an_answer_of_one_character_deltas_is_held_in_about_its_bytes(protocol, kind, server, make):
    provider = make(protocol, max_retries=0)
    scripted = reply(protocol, **({"text": [PIECE] * N} if kind == "text" else {"reasoning": [PIECE] * N, "text": "b"}))
    # (40 frames at a time, each chunk sent once the client has read the one before: no body
    # waits whole in a buffer)
    frames = sse(scripted.events or [])
    server.push(reply(protocol, text="warm"), Reply(chunks=[b"".join(frames[i:i + 40]) for i in range(0, len(frames), 40)]))
    await provider.stream(Ctx().user("hi").request(), lambda d: None)  # (imports, pools: before measuring)
    held: dict[int, int] = {}
    seen = 0

    def on_delta(d: Delta) -> None:
        nonlocal seen
        if d.kind == kind and d.text == PIECE:
            seen += 1
            if seen in (N // 4, 3 * N // 4):
                held[seen] = tracemalloc.get_traced_memory()[0]

    result = await stream_traced(provider, on_delta)
    assert (result.text if kind == "text" else result.reasoning).count(PIECE) == N
    grown = held[3 * N // 4] - held[N // 4]
    answer = len((PIECE * (N // 2)).encode())  # 12,000 bytes of UTF-8 between the two points
    # Joined, the answer's characters take 2 bytes each here (a string of them is UCS-2), and a
    # merge in progress at most as much again; kept as a list of deltas, some 84 bytes each
    # (4,000 of them: 340 kB). The HTTP client's read buffer may be larger at one point than at
    # the other: up to 64 KiB.
    assert grown < 4 * answer + 64 * 1024, (grown, answer)
