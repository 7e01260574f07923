"""Frames waiting in the bus's queue behind a large event's frame (made in a worker thread).

The bus is driven directly: the store hands it each committed group (its listener), a delta or a
stream joining offers what is acknowledged, and the test runs the bus's maker until the queue is
empty. Nothing waits on time for ordering: the only wait is for the worker's frame.
"""

from __future__ import annotations

import re
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest
import trio

from events.store import Draft, EventStore, open_store
from events.types import InstructionAppended, ModelRequested, ModelResponded
from runtime.bus import DROP_QUEUE, DROP_SLOW, FRAME_OFF_LOOP_CHARS, Bus, Subscription

from .conftest import parse_block

LARGE = "L" * (FRAME_OFF_LOOP_CHARS + 1)


def note(text: str, session: str = "s1") -> Draft:
    return Draft(InstructionAppended(text=text), session_id=session, project_id="p")


def requested(session: str = "s1") -> Draft:
    return Draft(ModelRequested(provider="faux", model="m"), session_id=session, project_id="p", agent_id="main")


def responded(text: str, session: str = "s1") -> Draft:
    return Draft(ModelResponded(text=text), session_id=session, project_id="p", agent_id="main")


@asynccontextmanager
async def driven_bus(tmp_path: Path, **kw) -> AsyncIterator[tuple[EventStore, Bus]]:
    """A bus fed by the store's acknowledgements, with no task of its own running."""
    async with open_store(tmp_path / "data") as store:
        bus = Bus(store, **kw)
        bus.position = store.last_seq
        stop = store.on_commit(bus._committed)
        try:
            yield store, bus
        finally:
            stop()


async def make_queued(bus: Bus) -> None:
    """Run the bus's maker until every queued frame is handed to the groups."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bus._maker)
        with trio.fail_after(20):
            while bus._queue:
                await trio.sleep(0.001)  # (the worker thread makes the frame)
        nursery.cancel_scope.cancel()


def taken(sub: Subscription) -> list[tuple[str | None, int | None, str]]:
    """What ``sub`` takes now: (event, id, text) of each frame, in order."""
    data = b""
    while (more := sub.take()) is not None:
        data += more
    out = []
    for block in data.split(b"\n\n"):
        if block:
            m = parse_block(block)
            body = m.json()
            text = body.get("text", body.get("body", {}).get("text"))
            out.append((m.event, m.id, text if text is None or len(text) < 20 else f"{len(text)} chars"))
    return out


async def test_a_stream_joining_while_frames_queue_gets_no_delta_queued_before_it(tmp_path: Path) -> None:
    # Deltas published before a stream joined reached it after its log replay, which may already
    # hold the request's model.responded: a delta after its request's end. What streamed before
    # the join is the stream's model.partial (its replay shows the request open), never live.
    async with driven_bus(tmp_path) as (store, bus):
        a = bus.subscribe()
        await store.append(note(LARGE))  # seq 1: its frame is made in a worker
        await store.append(requested())  # seq 2
        bus.publish_delta("s1", "main", "text", "hello")
        b = bus.subscribe()  # the request open: its replay ends at seq 2
        assert bus._queue and b.start == 2
        partial = [parse_block(x) for x in b.partial.split(b"\n\n") if x]
        assert [(m.event, m.json()["text"]) for m in partial] == [("model.partial", "hello")]
        bus.publish_delta("s1", "main", "text", " world")  # after the join: live
        await store.append(responded("hello world"))  # seq 3
        c = bus.subscribe()  # the request over: no partial, no delta
        assert c.partial == b""
        await make_queued(bus)
        bus.flush()
        assert taken(a) == [("instruction.appended", 1, f"{len(LARGE)} chars"), ("model.requested", 2, None),
                            ("model.delta", None, "hello"), ("model.delta", None, " world"),
                            ("model.responded", 3, "hello world")]
        assert taken(b) == [("model.delta", None, " world"), ("model.responded", 3, "hello world")]
        assert taken(c) == []


async def test_frames_behind_large_ones_reach_a_stream_in_the_order_offered(tmp_path: Path) -> None:
    # Two large events with small events and deltas between and after them: the stream gets every
    # frame in the order offered, each once, whatever waits in the queue.
    async with driven_bus(tmp_path) as (store, bus):
        one_session = bus.subscribe(session_id="s1")
        every = bus.subscribe()
        await store.append(note("a"))  # offered with the delta below: no queue yet
        bus.publish_delta("s1", "main", "text", "d0")
        await store.append(note(LARGE))  # seq 2
        await store.append(note("b"), note("c", session="s2"))  # 3, 4
        bus.publish_delta("s1", "main", "text", "d1")
        await store.append(note(LARGE + "2"))  # 5
        bus.publish_delta("s1", "main", "text", "d2")
        await store.append(note("e"))  # 6
        assert len(bus._queue) == 6 and bus.sent == 1 and bus.position == 5  # (6 is in the inbox)
        bus._offer_inbox_now()
        await make_queued(bus)
        bus.flush()
        large, large2 = f"{len(LARGE)} chars", f"{len(LARGE) + 1} chars"
        want = [("instruction.appended", 1, "a"), ("model.delta", None, "d0"), ("instruction.appended", 2, large),
                ("instruction.appended", 3, "b"), ("instruction.appended", 4, "c"), ("model.delta", None, "d1"),
                ("instruction.appended", 5, large2), ("model.delta", None, "d2"), ("instruction.appended", 6, "e")]
        assert taken(every) == want
        assert taken(one_session) == [w for w in want if w[1] != 4]
        assert bus.sent == bus.position == 6


async def test_a_stream_cut_off_while_frames_queue_gets_nothing_more_and_the_others_everything(tmp_path: Path) -> None:
    async with driven_bus(tmp_path, buffer=2) as (store, bus):
        slow, fast = bus.subscribe(), bus.subscribe()
        await store.append(note("a"), note("b"), note("c"))
        bus._offer_inbox_now()
        bus.flush()
        fast.take()
        await store.append(note(LARGE))  # 4, queued
        await store.append(note("d"))  # 5, behind it
        bus._offer_inbox_now()
        await make_queued(bus)  # 4 and 5 handed on to the group
        await store.append(note(LARGE + "2"))  # 6
        await store.append(note("e"))  # 7
        bus._offer_inbox_now()
        bus.flush()  # slow has taken none of 3 frames flushed before: past its buffer of 2
        assert slow.dropped and slow not in bus.subscribers and len(bus._queue) == 2
        await make_queued(bus)
        bus.flush()
        assert [t[1] for t in taken(fast)] == [4, 5, 6, 7]
        # its stream writes stream.dropped naming the last seq it took (none: it resumes from the
        # log from the start), and the bus never writes to it again
        assert slow.last == 0 and not slow.parked and slow.writes == 0


async def test_the_last_stream_leaving_while_frames_queue_makes_no_frame_and_a_new_one_reads_the_log(
        tmp_path: Path) -> None:
    async with driven_bus(tmp_path) as (store, bus):
        gone = bus.subscribe()
        await store.append(note(LARGE))
        await store.append(note("after"))
        bus.publish_delta("s1", "main", "text", "d")
        assert len(bus._queue) == 3
        bus.unsubscribe(gone)
        await make_queued(bus)  # nobody to send them to: the queue is dropped, nothing is made
        assert not bus._queue and bus.sent == bus.position == 2
        later = bus.subscribe()
        assert later.start == 2 and later.skip_through == 0 and not later.stale
        await store.append(note("next"))
        bus._offer_inbox_now()
        bus.flush()
        assert taken(later) == [("instruction.appended", 3, "next")]
        assert gone.take() is None


async def test_an_error_making_a_queued_frame_ends_the_bus(tmp_path: Path) -> None:
    # As an error making a frame on the loop did: it is raised in the bus's task (the maker).
    from events.reader import StoredEvent
    from events.types import Opaque

    async with driven_bus(tmp_path) as (store, bus):
        bus.subscribe()
        unencodable = StoredEvent(1, 1, "p", "s1", 1, None, None, "x.y", None,
                                  Opaque("x.y", {"items": [object()] * (FRAME_OFF_LOOP_CHARS // 100)}))
        bus._offer_events([unencodable])
        assert len(bus._queue) == 1
        with pytest.RaisesGroup(TypeError, flatten_subgroups=True):
            await make_queued(bus)


async def test_past_its_bound_the_queue_is_dropped_and_every_stream_resumes_from_the_log(tmp_path: Path) -> None:
    # A frame being made held every frame offered after it without bound: now, past `queue_max`
    # frames (or `queue_max_bytes` of made frames), every stream is cut off as a stream too far
    # behind is (stream.dropped naming what it was sent) and the queue is forgotten.
    async with driven_bus(tmp_path, queue_max=3) as (store, bus):
        every, one = bus.subscribe(), bus.subscribe(session_id="s1")
        await store.append(note("a"))
        bus._offer_inbox_now()
        bus.flush()
        assert [t[1] for t in taken(every)] == [1]
        await store.append(note(LARGE))  # 2
        await store.append(note("b"), note("c"))  # 3, 4: three frames queued, at the bound
        bus._offer_inbox_now()
        assert len(bus._queue) == 3 and not every.dropped and not one.dropped
        bus.publish_delta("s1", "main", "text", "d")  # one more: past it
        assert every.dropped and one.dropped and not bus.groups and not bus._queue
        assert (every.last, one.last, bus.queue_overflows) == (1, 0, 1)
        # its stream.dropped says why: the queue overflowed, not the client falling behind
        assert every.drop_reason == one.drop_reason == DROP_QUEUE != DROP_SLOW
        await make_queued(bus)
        later = bus.subscribe()  # a stream resuming: nothing queued, it reads the log up to 4
        assert later.start == 4 and later.skip_through == 0
        await store.append(note("e"))
        bus._offer_inbox_now()
        bus.flush()
        assert taken(later) == [("instruction.appended", 5, "e")]


async def test_the_queue_is_bounded_by_the_bytes_of_its_made_frames_too(tmp_path: Path) -> None:
    bound = len(LARGE) + 5000  # (the large event counts its characters until its frame is made)
    async with driven_bus(tmp_path, queue_max_bytes=bound) as (store, bus):
        sub = bus.subscribe()
        await store.append(note(LARGE))
        await store.append(note("x" * 3000))
        bus._offer_inbox_now()
        assert not sub.dropped and len(LARGE) + 3000 <= bus._queue_bytes < bound
        await store.append(note("y" * 3000))
        bus._offer_inbox_now()
        assert sub.dropped and not bus._queue and bus._queue_bytes == 0


async def test_a_frame_still_to_be_made_counts_its_characters_in_the_queues_bytes(tmp_path: Path) -> None:
    # A queued large event counted no bytes until its frame was made: twenty of them (each past
    # FRAME_OFF_LOOP_CHARS characters) queued with the queue's bytes at 0, under any byte bound.
    async with driven_bus(tmp_path, queue_max_bytes=5000) as (store, bus):
        sub = bus.subscribe()
        for _ in range(20):
            await store.append(note(LARGE))
        bus._offer_inbox_now()
        assert sub.dropped and bus.queue_overflows == 1 and not bus._queue and bus._queue_bytes == 0
    async with driven_bus(tmp_path / "2") as (store, bus):
        sub = bus.subscribe()
        await store.append(note(LARGE))
        await store.append(note("x" * 3000))
        bus._offer_inbox_now()
        unmade = bus._queue[0]
        assert unmade.chars >= len(LARGE) and bus._queue_bytes == unmade.chars + len(bus._queue[1].data)
        await make_queued(bus)  # made: its count is replaced by its frame's bytes, then handed on
        assert bus._queue_bytes == 0 and not sub.dropped
        bus.flush()
        assert [t[1] for t in taken(sub)] == [1, 2]


async def test_the_maker_has_a_worker_thread_of_its_own(tmp_path: Path) -> None:
    # With every thread of trio's default limiter taken (SSE replays of large events, large
    # bodies), a live stream's large frame is still made.
    default = trio.to_thread.current_default_thread_limiter()
    holders = [object() for _ in range(int(default.total_tokens))]
    for h in holders:
        default.acquire_on_behalf_of_nowait(h)
    try:
        async with driven_bus(tmp_path) as (store, bus):
            sub = bus.subscribe()
            await store.append(note(LARGE))
            bus._offer_inbox_now()
            assert bus._queue
            with trio.fail_after(5):
                await make_queued(bus)
            bus.flush()
            assert [t[1] for t in taken(sub)] == [1]
            assert bus.maker_limiter.total_tokens == 1 and bus._queue_bytes == 0
    finally:
        for h in holders:
            default.release_on_behalf_of(h)


async def test_a_stream_too_far_behind_is_dropped_as_the_client_not_keeping_up(tmp_path: Path) -> None:
    async with driven_bus(tmp_path, buffer=2) as (store, bus):
        slow, fast = bus.subscribe(), bus.subscribe()
        for i in range(2):
            await store.append(note(f"a{i}"), note(f"b{i}"), note(f"c{i}"))
            bus._offer_inbox_now()
            bus.flush()
            taken(fast)
        assert slow.dropped and slow.drop_reason == DROP_SLOW and not fast.dropped


async def test_with_no_stream_left_nothing_is_made_or_queued_and_nothing_overflows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The frames kept being made and queued behind the large one after the last stream left, and
    # the queue then overflowed: "every stream was cut off" logged, an overflow counted, no stream.
    async with driven_bus(tmp_path) as (store, bus):
        gone = bus.subscribe()
        await store.append(note(LARGE))
        bus._offer_inbox_now()
        for i in range(9_990):
            bus.publish_delta("s1", "main", "text", f"d{i}")
        assert len(bus._queue) == 9_991 and bus._queue_bytes > len(LARGE)
        bus.unsubscribe(gone)
        for i in range(20):
            bus.publish_delta("s1", "main", "text", f"e{i}")
        await store.append(note("after"))
        bus._offer_inbox_now()
        assert not bus._queue and bus._queue_bytes == 0 and bus.queue_overflows == 0
        assert "cut off" not in caplog.text and not gone.dropped
        assert bus.position == 2
        later = bus.subscribe()
        await store.append(note("next"))
        bus._offer_inbox_now()
        bus.flush()
        assert later.start == 2 and taken(later) == [("instruction.appended", 3, "next")]
