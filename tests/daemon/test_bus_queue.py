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

import trio

from events.store import Draft, EventStore, open_store
from events.types import InstructionAppended, ModelRequested, ModelResponded
from runtime.bus import FRAME_OFF_LOOP_CHARS, Bus, Subscription

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
