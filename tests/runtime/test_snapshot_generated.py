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

import msgspec
import trio
import trio.testing
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import types as t
from events.reader import StoredEvent
from events.store import Draft
from projections.session_state import MAIN_AGENT, SNAPSHOT_VERSION, SessionState, fold, snapshot_bytes, working_context
from projections.snapshots import decode_snapshot, encode_snapshot
from runtime.actor import SessionActor, _reset_for_fork
from session_events import Recorder, assert_usage_summed, session_events, step

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
    assert_usage_summed(want, events)
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
    assert_usage_summed(state, rec.events)


LOADABLE = ["web_fetch", "mcp__x__y", "mcp__a__b", "get_system_time"]


@BOUNDED
@given(data=st.data())
def test_a_fold_never_shortens_or_reorders_an_agents_capabilities(data):
    # AgentState.capabilities_offered counts the first of an agent's capabilities its last request
    # offered: right only while every event leaves them as they were or adds some at the end.
    # (a session's life with loads drawn between its steps, of more names, by any of its agents:
    # loads by one agent in every order, and of names it has loaded already)
    rec = Recorder("s1")
    rec.add(t.SessionCreated(model="faux/faux-1"))
    for _ in range(data.draw(st.integers(10, 30))):
        step(rec, data)
        if data.draw(st.booleans()):
            rec.add(t.CapabilityLoaded(capability_ids=data.draw(st.lists(st.sampled_from(LOADABLE), min_size=1,
                                                                         max_size=3))),
                    agent_id=data.draw(st.sampled_from(sorted(rec.state.agents) or [MAIN_AGENT])))
    state = SessionState("s1")
    for se in rec.events:
        before = {a: list(agent.capabilities) for a, agent in state.agents.items()}
        state = fold(state, [se])
        for agent_id, agent in state.agents.items():
            was = before.get(agent_id, [])
            assert agent.capabilities[:len(was)] == was, (se.event, was, agent.capabilities)
            assert len(set(agent.capabilities)) == len(agent.capabilities), agent.capabilities
            assert 0 <= agent.capabilities_offered <= len(agent.capabilities)
        if isinstance(se.event, t.ModelRequested):
            agent = state.agents[se.agent_id]
            assert agent.capabilities_offered == len(agent.capabilities)


def _appended(rec: Recorder) -> list[Draft]:
    return [Draft(e.event, project_id=e.project_id, session_id=e.session_id, agent_id=e.agent_id,
                  task_id=e.task_id, request_id=e.request_id) for e in rec.events]


async def _append_all(rt, *recs: Recorder) -> dict[str, list[StoredEvent]]:
    """Append the recorded events through the real store; each session's events as the log now
    holds them (its own ``ts``; the rest as recorded)."""
    for rec in recs:
        for draft in _appended(rec):
            await rt.store.append(draft)
    everything = await rt.events()
    assert [(e.seq, e.session_seq, e.event) for e in everything] == [
        (e.seq, e.session_seq, e.event) for rec in recs for e in rec.events]
    return {rec.session_id: [e for e in everything if e.session_id == rec.session_id] for rec in recs}


def _fork_base(source: list[StoredEvent], at: int, fork_id: str) -> SessionState:
    base = fold(SessionState(source[0].session_id), [e for e in source if e.seq <= at])
    _reset_for_fork(base, fork_id)
    return base


async def _wake(data_dir: Path, source: Recorder, fork: Recorder, at: int,
                cuts: dict[str, int | None]) -> tuple[dict[str, SessionState], dict[str, SessionState]]:
    """Append both sessions' events through the real store, store a snapshot of each as of its
    ``cuts`` entry (None: none), and wake each through the actor's own load: (woken, replayed)."""
    async with open_runtime(data_dir) as rt:
        logs = await _append_all(rt, source, fork)
        replayed = {"s1": fold(SessionState("s1"), logs["s1"]),
                    "s2": fold(_fork_base(logs["s1"], at, "s2"), logs["s2"])}
        for sid, cut in cuts.items():
            if not cut:
                continue
            base = SessionState(sid) if sid == "s1" else _fork_base(logs["s1"], at, sid)
            rt.snapshots.save(fold(base, logs[sid][:cut]))
        woken = {}
        for sid in ("s1", "s2"):
            send, recv = trio.open_memory_channel(0)
            actor = SessionActor(sid, rt.deps, recv)
            if cuts[sid]:  # (the snapshot is one the wake-up trusts: it starts from it)
                assert await actor._snapshot_upto(sid, None) is not None
            woken[sid] = await actor.load_state()
        return woken, replayed


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
    woken, replayed = trio.run(_wake, data_dir, source, fork, at, cuts,
                               clock=trio.testing.MockClock(autojump_threshold=0))
    for sid in ("s1", "s2"):
        assert_same_state(woken[sid], replayed[sid])
    # (the fork counts only its own requests: none of the source's before the fork point)
    assert_usage_summed(woken["s1"], source.events)
    assert_usage_summed(woken["s2"], fork.events)
    # (the same states as the recorder's, but for the ts the store gave the events)
    assert msgspec.structs.replace(replayed["s1"], last_ts=0) == msgspec.structs.replace(source.state, last_ts=0)
    assert msgspec.structs.replace(replayed["s2"], last_ts=0) == msgspec.structs.replace(fork.state, last_ts=0)


def _planted(events: list[StoredEvent], cut: int) -> dict[str, tuple[int, bytes]]:
    """Snapshot rows (version, stored blob) a wake-up must not trust, each with a state that
    differs from the log's, keyed by what is wrong with them."""
    c = zstandard.ZstdCompressor(level=1)
    head = fold(SessionState("s1"), events[:cut])
    wrong = stored_copy(head)
    wrong.todos = [t.TodoItem("x", "not in the log")]
    good = encode_snapshot(head, c)
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x10
    past = fold(SessionState("s1"), events)  # as of events the log no longer holds (cut back by a restore)
    past.last_seq += 5
    past.last_session_seq += 5
    past.todos = [t.TodoItem("y", "from a longer log")]
    other = stored_copy(head)  # the right seq in another numbering: another timeline's log
    other.last_session_seq += 1
    other.todos = [t.TodoItem("z", "another timeline")]
    # The same seq and session_seq in a timeline the log no longer holds: a backup put back, and
    # the session went on writing as many events as before (the delete of snapshots past the
    # log's end at start-up did not run: projections.db was held by another process).
    timeline = fold(SessionState("s1"), [msgspec.structs.replace(e, ts=e.ts + 7) for e in events[:cut]])
    timeline.todos = [t.TodoItem("w", "said in the other timeline")]
    return {
        "of the same numbering in another timeline": (SNAPSHOT_VERSION, encode_snapshot(timeline, c)),
        "older version": (SNAPSHOT_VERSION - 1, encode_snapshot(wrong, c)),
        "a flipped bit": (SNAPSHOT_VERSION, bytes(flipped)),
        "cut short": (SNAPSHOT_VERSION, good[: len(good) // 2]),
        "empty": (SNAPSHOT_VERSION, b""),
        "not a snapshot": (SNAPSHOT_VERSION, b"\x00garbage\xff" * 3),
        "newer than the log": (SNAPSHOT_VERSION, encode_snapshot(past, c)),
        "another timeline": (SNAPSHOT_VERSION, encode_snapshot(other, c)),
        "as the log says (trusted)": (SNAPSHOT_VERSION, good),
    }


async def _wake_with(data_dir: Path, rec: Recorder, cut: int) -> tuple[dict[str, SessionState], SessionState]:
    async with open_runtime(data_dir) as rt:
        events = (await _append_all(rt, rec))["s1"]
        out = {}
        for what, (version, blob) in _planted(events, cut).items():
            with rt.snapshots.conn:
                rt.snapshots.conn.execute("INSERT OR REPLACE INTO snapshots(session_id, seq, version, state) "
                                          "VALUES (?, ?, ?, ?)", ("s1", 1, version, blob))
            send, recv = trio.open_memory_channel(0)
            actor = SessionActor("s1", rt.deps, recv)
            trusted = await actor._snapshot_upto("s1", None) is not None
            assert trusted == what.endswith("(trusted)"), what
            out[what] = await actor.load_state()
        return out, fold(SessionState("s1"), events)


@settings(max_examples=8, deadline=timedelta(seconds=30),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_snapshot_of_another_version_damaged_newer_than_the_log_or_of_another_timeline_is_replayed_past(
        tmp_path_factory, data):
    rec = session_events(data, max_steps=25)
    cut = data.draw(st.integers(1, len(rec.events)))
    data_dir = tmp_path_factory.mktemp("planted") / "data"
    woken, replayed = trio.run(_wake_with, data_dir, rec, cut, clock=trio.testing.MockClock(autojump_threshold=0))
    for what, state in woken.items():
        try:
            assert_same_state(state, replayed)
        except AssertionError as exc:
            raise AssertionError(f"a snapshot {what}: the woken state is not the log's") from exc
