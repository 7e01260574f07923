"""F-ACT-2: a session woken from (latest snapshot + tail) is exactly the full replay, over
generated event sequences (see ``session_events``), with snapshots taken at every point.

"Exactly" is the whole folded state (every agent's Full Context, its edits and the Working
Context derived from them, the queue and inputs, usage, todos, questions, jobs, skills), compared
as values and as the bytes a snapshot stores. Bounded: a fixed number of examples per test, each
under a deadline, derandomized by the suite's Hypothesis profile.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import types as t
from events.store import Draft
from projections.session_state import SNAPSHOT_VERSION, SessionState, fold, snapshot_bytes, working_context
from projections.snapshots import decode_snapshot, encode_snapshot
from runtime.actor import SessionActor, _reset_for_fork
from session_events import Recorder, session_events

import zstandard

from conftest import open_runtime

BOUNDED = settings(max_examples=60, deadline=timedelta(seconds=20),
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_same_state(got: SessionState, want: SessionState) -> None:
    for agent_id, agent in want.agents.items():
        assert agent_id in got.agents, agent_id
        assert got.agents[agent_id].items == agent.items, agent_id  # the Full Context
        assert working_context(got.agents[agent_id]) == working_context(agent), agent_id
    assert got.usage == want.usage
    assert got.todos == want.todos
    assert got == want
    assert snapshot_bytes(got) == snapshot_bytes(want)


def stored_copy(state: SessionState) -> SessionState:
    """``state`` as a wake-up reads it back from ``projections.db`` (the stored blob's format)."""
    return decode_snapshot(encode_snapshot(state, zstandard.ZstdCompressor(level=1)))


@BOUNDED
@given(data=st.data())
def test_a_snapshot_at_every_point_plus_its_tail_equals_the_full_replay(data):
    rec = session_events(data)
    events = rec.events
    want = rec.state
    assert_same_state(fold(SessionState("s1"), events), want)  # (the recorder folded as it drew)
    for cut in range(len(events) + 1):
        woken = stored_copy(fold(SessionState("s1"), events[:cut]))
        assert_same_state(fold(woken, events[cut:]), want)


@BOUNDED
@given(data=st.data())
def test_snapshots_taken_after_every_event_in_a_row_equal_the_full_replay(data):
    rec = session_events(data)
    state = SessionState("s1")
    for se in rec.events:  # (a session passivated and woken after each of its events)
        state = stored_copy(fold(state, [se]))
    assert_same_state(state, rec.state)


def _appended(rec: Recorder) -> list[Draft]:
    return [Draft(e.event, project_id=e.project_id, session_id=e.session_id, agent_id=e.agent_id,
                  task_id=e.task_id, request_id=e.request_id) for e in rec.events]


async def _wake(data_dir: Path, source: Recorder, fork: Recorder, cuts: dict[str, int | None]) -> dict[str, SessionState]:
    """Append both sessions' events through the real store, store a snapshot of each as of its
    ``cuts`` entry (None: none), and wake each through the actor's own load."""
    async with open_runtime(data_dir) as rt:
        for draft in _appended(source) + _appended(fork):
            await rt.store.append(draft)
        everything = await rt.events()
        assert [e.seq for e in everything] == [e.seq for e in source.events + fork.events]
        for rec in (source, fork):
            cut = cuts[rec.session_id]
            if cut is None:
                continue
            head = rec.events[:cut]
            if rec is fork:  # (a fork's snapshot folds its source up to the fork point first)
                base = fold(SessionState("s1"), [e for e in source.events if e.seq <= fork_point(fork)])
                _reset_for_fork(base, fork.session_id)
                state = fold(base, head)
            else:
                state = fold(SessionState(rec.session_id), head)
            if head:
                rt.snapshots.save(state)
        out = {}
        for sid in (source.session_id, fork.session_id):
            send, recv = trio.open_memory_channel(0)
            out[sid] = await SessionActor(sid, rt.deps, recv).load_state()
        return out


def fork_point(fork: Recorder) -> int:
    ev = fork.events[0].event
    assert isinstance(ev, t.SessionCreated) and ev.forked_from_seq is not None
    return ev.forked_from_seq


@settings(max_examples=15, deadline=timedelta(seconds=30),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_session_and_its_fork_woken_through_the_store_equal_their_full_replays(tmp_path_factory, data):
    source = session_events(data, "s1", max_steps=25)
    at = data.draw(st.sampled_from(source.events)).seq
    base = fold(SessionState("s1"), [e for e in source.events if e.seq <= at])
    _reset_for_fork(base, "s2")
    fork = Recorder("s2", first_seq=source.seq + 1, state=base)
    fork.add(t.SessionCreated(model=base.model, forked_from_session="s1", forked_from_seq=at))
    session_events(data, "s2", max_steps=15, rec=fork)
    cuts = {"s1": data.draw(st.one_of(st.none(), st.integers(0, len(source.events)))),
            "s2": data.draw(st.one_of(st.none(), st.integers(0, len(fork.events))))}
    data_dir = tmp_path_factory.mktemp("wake") / "data"
    woken = trio.run(_wake, data_dir, source, fork, cuts, clock=trio.testing.MockClock(autojump_threshold=0))
    assert_same_state(woken["s1"], source.state)
    assert_same_state(woken["s2"], fork.state)


def _planted(rec: Recorder, cut: int) -> dict[str, tuple[int, bytes]]:
    """Snapshot rows (version, stored blob) a wake-up must not trust, each with a state that
    differs from the log's, keyed by what is wrong with them."""
    c = zstandard.ZstdCompressor(level=1)
    head = fold(SessionState("s1"), rec.events[:cut])
    wrong = stored_copy(head)
    wrong.todos = [t.TodoItem("x", "not in the log")]
    good = encode_snapshot(head, c)
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x10
    past = stored_copy(rec.state)  # as of events the log no longer holds (cut back by a restore)
    past.last_seq += 5
    past.last_session_seq += 5
    past.todos = [t.TodoItem("y", "from a longer log")]
    other = stored_copy(head)  # the right seq in another numbering: another timeline's log
    other.last_session_seq += 1
    other.todos = [t.TodoItem("z", "another timeline")]
    return {
        "older version": (SNAPSHOT_VERSION - 1, encode_snapshot(wrong, c)),
        "a flipped bit": (SNAPSHOT_VERSION, bytes(flipped)),
        "cut short": (SNAPSHOT_VERSION, good[: len(good) // 2]),
        "empty": (SNAPSHOT_VERSION, b""),
        "not a snapshot": (SNAPSHOT_VERSION, b"\x00garbage\xff" * 3),
        "newer than the log": (SNAPSHOT_VERSION, encode_snapshot(past, c)),
        "another timeline": (SNAPSHOT_VERSION, encode_snapshot(other, c)),
    }


async def _wake_with(data_dir: Path, rec: Recorder, rows: dict[str, tuple[int, bytes]]) -> dict[str, SessionState]:
    async with open_runtime(data_dir) as rt:
        for draft in _appended(rec):
            await rt.store.append(draft)
        out = {}
        for what, (version, blob) in rows.items():
            with rt.snapshots.conn:
                rt.snapshots.conn.execute("INSERT OR REPLACE INTO snapshots(session_id, seq, version, state) "
                                          "VALUES (?, ?, ?, ?)", ("s1", 1, version, blob))
            send, recv = trio.open_memory_channel(0)
            out[what] = await SessionActor("s1", rt.deps, recv).load_state()
        return out


@settings(max_examples=8, deadline=timedelta(seconds=30),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_snapshot_of_another_version_damaged_newer_than_the_log_or_of_another_timeline_is_replayed_past(
        tmp_path_factory, data):
    rec = session_events(data, max_steps=25)
    cut = data.draw(st.integers(1, len(rec.events)))
    data_dir = tmp_path_factory.mktemp("planted") / "data"
    woken = trio.run(_wake_with, data_dir, rec, _planted(rec, cut), clock=trio.testing.MockClock(autojump_threshold=0))
    for what, state in woken.items():
        try:
            assert_same_state(state, rec.state)
        except AssertionError as exc:
            raise AssertionError(f"a snapshot {what} was trusted") from exc
