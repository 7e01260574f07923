"""The bus takes committed events from the store's acknowledgement, and from the log when it falls behind."""

from __future__ import annotations

import re
from pathlib import Path

import apsw
import trio
import trio.testing

from events.store import Draft, open_store
from events.types import InstructionAppended, ModelRequested, ModelResponded
from runtime.bus import DROP_DAMAGED, Bus

from .conftest import parse_block


def note(text: str, session: str = "s1") -> Draft:
    return Draft(InstructionAppended(text=text), session_id=session, project_id="p")


async def test_every_event_once_in_order_whether_handed_over_or_read_back(tmp_path: Path) -> None:
    async with open_store(tmp_path / "data") as store:
        await store.append(note("before the bus"))  # already committed: not sent live
        bus = Bus(store, inbox_max=5)
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            sub = bus.subscribe()
            one_session = bus.subscribe(session_id="s2")
            for i in range(3):  # handed over by the store
                await store.append(note(f"a{i}"))
            with trio.fail_after(10):
                while bus.position < store.last_seq:
                    await trio.sleep(0.001)
            assert bus.log_reads == 0  # nothing read back from the log
            # one group of 12 events: more than the inbox holds, so the bus reads the log for them
            await store.append(*[note(f"b{i}", session="s2" if i % 2 else "s1") for i in range(12)])
            for i in range(2):
                await store.append(note(f"c{i}"))
            with trio.fail_after(10):
                while bus.position < store.last_seq:
                    await trio.sleep(0.001)
            assert bus.log_reads >= 1  # the overflowing group came from the log
            bus.flush()
            data = sub.take() or b""
            s2 = one_session.take() or b""
            nursery.cancel_scope.cancel()
    ids = [int(x) for x in re.findall(rb"^id: (\d+)$", data, re.M)]
    assert ids == list(range(2, 19))  # seq 1 was committed before the bus started
    texts = re.findall(rb'"text":"([^"]+)"', data)
    assert texts == [f"a{i}".encode() for i in range(3)] + [f"b{i}".encode() for i in range(12)] + [b"c0", b"c1"]
    assert [int(x) for x in re.findall(rb"^id: (\d+)$", s2, re.M)] == [5 + i for i in range(12) if i % 2]


async def test_a_subscriber_too_many_bytes_behind_is_dropped_exactly_past_the_limit(tmp_path: Path) -> None:
    # Frames are counted by size as well as by number: a client that reads nothing pins at most
    # `buffer_bytes` of frames flushed in earlier ticks (events may be up to 1 MiB each), plus the
    # current tick's, then it is dropped.
    async with open_store(tmp_path / "data") as store:
        bus = Bus(store, buffer=10_000, buffer_bytes=10**9)
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            slow, fast = bus.subscribe(), bus.subscribe()

            async def commit(text: str) -> None:
                await store.append(note(text))
                with trio.fail_after(10):
                    while bus.position < store.last_seq:
                        await trio.sleep(0.001)

            await commit("x" * 5000)
            bus.flush()
            fast.take()
            await commit("y" * 5000)
            g = slow.group
            at_limit = g.bytes_total + sum(len(f.data) for f in g.pending) - slow.taken_bytes
            bus.buffer_bytes = at_limit  # slow's backlog after this flush: exactly the limit
            bus.flush()
            fast.take()
            assert g.bytes_total - slow.taken_bytes == at_limit
            assert not slow.dropped and not fast.dropped
            await commit("z")  # one more frame, in this tick: what counts is what came before it
            bus.flush()
            fast.take()
            assert not slow.dropped
            await commit("w")  # now z was flushed in an earlier tick: past the limit
            bus.flush()
            assert slow.dropped and not fast.dropped
            assert fast.take() is not None  # the other subscriber keeps getting frames
            nursery.cancel_scope.cancel()


async def test_a_subscriber_joining_does_not_hold_back_what_the_others_are_owed(tmp_path: Path) -> None:
    """A stream opening on a filter flushed the group's pending frames for itself; the streams
    already on it were not told until the group's next frame (up to a heartbeat later)."""
    async with open_store(tmp_path / "data") as store:
        bus = Bus(store)
        waiting = bus.subscribe(session_id="s1")
        waiting.parked = True  # its task waits for the bus to wake it
        bus.publish_delta("s1", "main", "text", "owed")
        joined = bus.subscribe(session_id="s1")  # before the tick that would flush the frame
        assert not waiting.wake.is_set()
        bus.flush()  # the next tick
        assert waiting.wake.is_set()
        assert b'"text":"owed"' in (waiting.take() or b"")
        assert joined.take() is None  # it joined after the frame was offered
        bus.publish_delta("s1", "main", "text", "next")
        bus.flush()
        assert b'"text":"next"' in (joined.take() or b"") and b'"text":"next"' in (waiting.take() or b"")


async def test_a_damaged_event_the_bus_reads_back_drops_its_subscribers_and_the_bus_goes_on(tmp_path: Path) -> None:
    # The bus reads the log itself when it falls behind (or to fill a gap). A damaged body there
    # raised out of the bus's task, which took the daemon's service nursery (every stream) down.
    # Now the events before it are delivered, every subscriber is dropped (stream.dropped: a client
    # resumes from the replay, which names the damaged event), and the bus goes on past it.
    async with open_store(tmp_path / "data") as store:
        bus = Bus(store, inbox_max=5)
        damaged: list[int] = []

        def damage(events: list) -> None:  # the group is committed: damage one of its rows
            if len(events) == 12 and not damaged:
                damaged.append(events[5].seq)
                conn = apsw.Connection(str(store.data_dir / "events.db"))
                conn.execute("UPDATE events SET body = X'28b52ffd0000' WHERE seq = ?", (damaged[0],))
                conn.close()

        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            store.on_commit(damage)
            sub = bus.subscribe()
            await store.append(note("a0"))
            # one group of 12: more than the inbox holds, so the bus reads it back from the log
            await store.append(*[note(f"b{i}") for i in range(12)])
            with trio.fail_after(10):
                while bus.position < store.last_seq:
                    await trio.sleep(0.001)
            bus.flush()
            data = sub.take() or b""
            assert sub.dropped and sub.drop_reason == DROP_DAMAGED  # (not the client's fault)
            later = bus.subscribe()
            await store.append(note("c0"))
            with trio.fail_after(10):
                while bus.position < store.last_seq:
                    await trio.sleep(0.001)
            bus.flush()
            after = later.take() or b""
            nursery.cancel_scope.cancel()
    assert damaged == [7]
    assert [int(x) for x in re.findall(rb"^id: (\d+)$", data, re.M)] == list(range(1, 7))  # up to the damaged one
    assert re.findall(rb'"text":"([^"]+)"', after) == [b"c0"]


async def test_a_stream_joining_mid_answer_gets_the_partial_of_the_request_its_replay_shows(tmp_path: Path) -> None:
    # A delta published right after its model.requested was acknowledged (the bus's task has not
    # run: the request is still in the inbox) is kept for that request, and a stream joining then
    # gets it as a model.partial frame; live deltas come after it, in its chunks.
    async with open_store(tmp_path / "data") as store:
        bus = Bus(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            before = bus.subscribe(session_id="s1")
            await store.append(Draft(ModelRequested(provider="faux", model="m"), session_id="s1", project_id="p",
                                     agent_id="main"))
            bus.publish_delta("s1", "main", "text", "so far")  # no checkpoint: the inbox holds the request
            joined = bus.subscribe(project_id="p")
            assert joined.start == store.last_seq  # it reads the request from the log ...
            partial = [parse_block(b) for b in joined.partial.split(b"\n\n") if b]
            assert [(m.event, m.json()) for m in partial] == [  # ... then gets what streamed of it
                ("model.partial", {"session_id": "s1", "agent_id": "main", "kind": "text", "text": "so far"})]
            bus.publish_delta("s1", "main", "text", " and more")
            bus.flush()
            assert b'"text":" and more"' in (joined.take() or b"")
            got = before.take() or b""  # the earlier stream: the request, then both deltas live
            assert got.index(b"model.requested") < got.index(b'"so far"') < got.index(b'" and more"')
            assert b"model.partial" not in got
            await store.append(Draft(ModelResponded(text="so far and more"), session_id="s1", project_id="p",
                                     agent_id="main"))
            with trio.fail_after(10):
                while bus.position < store.last_seq:
                    await trio.sleep(0.001)
            assert bus.subscribe(session_id="s1").partial == b""  # the request is over
            nursery.cancel_scope.cancel()
