"""The store compresses a large batch of appends in its writer thread, never on the event loop.

zstd gives up the interpreter's lock while it compresses, but a call made on the event loop holds
the loop all the same: a body of a few megabytes (a large tool output, a long input) took 20 to
30 ms there, every session, request and stream of the daemon waiting. A small batch is still
compressed where it is handed over (``COMPRESS_ON_LOOP_BYTES``). The profiler
(:mod:`tests.loop_profile`) watches the calling thread only (here: trio's), and sees a call of a built-in (``c_call``) with the frame
that makes it (``Codec.compress_many``, whose ``raws`` are the batch).

These run against every store harness of tests/conftest.py, like the contract suite."""

from __future__ import annotations

import random
from typing import Any, ContextManager

import trio
import zstandard

from events.store import COMPRESS_ON_LOOP_BYTES, Draft
from events.types import InstructionAppended

from ..loop_profile import on_this_thread


def compressions_on_this_thread() -> ContextManager[list[int]]:
    """The sizes of the batches (bytes of MessagePack) zstd compressed on this thread while the
    block runs."""

    def record(frame: Any, event: str, arg: Any) -> int | None:
        if event != "c_call" or not isinstance(getattr(arg, "__self__", None), zstandard.ZstdCompressor):
            return None
        caller = frame  # (compress_many, or the comprehension in it)
        while caller is not None and "raws" not in caller.f_locals:
            caller = caller.f_back
        return sum(map(len, caller.f_locals["raws"])) if caller is not None else -1

    return on_this_thread(record)


def text_of(size: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghij \n") for _ in range(size))


async def test_a_large_batch_is_compressed_in_the_writer_thread(store: Any, store_harness: Any) -> None:
    big = text_of(2_000_000, 1)
    with compressions_on_this_thread() as on_loop:
        alone = await store.append(Draft(InstructionAppended(text=big), session_id="s1"))
        async with trio.open_nursery() as nursery:  # (appends of one trio batch: one hand-over)
            for i in range(40):
                nursery.start_soon(store.append, Draft(InstructionAppended(text=f"small {i}"), session_id=f"s{i % 3}"))
    assert on_loop and all(0 < size <= COMPRESS_ON_LOOP_BYTES for size in on_loop)  # the small ones only
    with store_harness.reader() as reader:  # (what was committed, decompressed by a reader of its own)
        events = {se.seq: se.event.text for se in reader.events()}
    assert events[alone.seqs[0]] == big and len(events) == 41
    assert sorted(events[s] for s in events if s != alone.seqs[0]) == sorted(f"small {i}" for i in range(40))
