"""The faux provider's scripted chunks: the event loop runs between two of them.

A script of many chunks without ``chunkDelayMs`` was streamed in one step of the loop (an answer
of 3.2 MB in 1,500 chunks held every session and stream of the daemon 55 ms). What is streamed,
and in what order, is the script's; a cancellation still lands only after the last chunk, as
before (no delay: the answer is streamed whole)."""

from __future__ import annotations

import trio

from runtime.providers.base import Delta
from runtime.providers.faux import FauxProvider, FauxTurn

from .conftest import Ctx

CHUNKS = [f"chunk {i} " for i in range(300)]


async def test_another_task_runs_between_the_chunks_of_a_long_script() -> None:
    provider = FauxProvider("faux", [FauxTurn(chunks=CHUNKS, reasoning="first")])
    ran = 0  # how many steps the other task has taken
    seen: list[tuple[str, str, int]] = []

    async def other() -> None:
        nonlocal ran
        while True:
            ran += 1
            await trio.lowlevel.checkpoint()

    def on_delta(d: Delta) -> None:
        seen.append((d.kind, d.text, ran))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.lowlevel.checkpoint()  # (the other task has begun)
        result = await provider.stream(Ctx().user("hi").request(), on_delta)
        nursery.cancel_scope.cancel()
    assert [(kind, text) for kind, text, _ in seen] == [("reasoning", "first")] + [("text", c) for c in CHUNKS]
    assert result.text == "".join(CHUNKS)
    steps = [n for kind, _, n in seen if kind == "text"]
    # Each scheduling batch runs every ready task once, in either order: between a chunk and the
    # one two after it, the other task has had a whole batch.
    assert all(later > earlier for earlier, later in zip(steps, steps[2:])), steps


async def test_a_script_without_delays_is_streamed_whole_when_cancelled() -> None:
    provider = FauxProvider("faux", [FauxTurn(chunks=CHUNKS)])
    seen: list[str] = []
    with trio.CancelScope() as scope:

        def on_delta(d: Delta) -> None:
            seen.append(d.text)
            scope.cancel()  # (at the first chunk)

        result = await provider.stream(Ctx().user("hi").request(), on_delta)
    assert seen == CHUNKS and result.text == "".join(CHUNKS)
