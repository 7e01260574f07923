"""F-ACT-2 / F-CTX-1: replay properties over event sequences produced by real sessions.

A module fixture runs a few scripted sessions on the real runtime (tools, subagent, failure,
steer, withdraw, abort, configure, fork) and appends Working Context edits through the store
with the session's envelope; hypothesis then checks, on those logs:

* folding in chunks (with snapshot round trips between them) equals folding at once;
* a snapshot at any cut plus the tail equals a full replay (also through the SnapshotStore);
* ``working_context`` after any sequence of snip / unsnip / include_result / prune edits behaves
  as documented, and the Full Context never changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Runtime, frozen, open_runtime, sleep_call
from events import types as t
from events.reader import StoredEvent
from events.store import Draft, open_store
from projections.projector import open_projections_db
from projections.session_state import (
    REMOVED_PLACEHOLDER,
    SessionState,
    apply,
    fold,
    pruned_placeholder,
    snapshot_bytes,
    state_from_snapshot,
    working_context,
)
from projections.snapshots import SnapshotStore
from runtime.actor import Abort, Configure, Steer, Withdraw
from runtime.providers.faux import FauxError, FauxToolCall, FauxTurn

SCRIPT = [
    FauxTurn(when="nap twice", tool_calls=[sleep_call(5), sleep_call(6)]),
    FauxTurn(when="long nap", tool_calls=[sleep_call(100_000)]),
    FauxTurn(when="fail please", error=FauxError("RATE_LIMITED", "slow down")),
    FauxTurn(when="plan it", tool_calls=[FauxToolCall("todo", {"items": [{"id": "a", "text": "step"}]})]),
    FauxTurn(when="delegate please", tool_calls=[FauxToolCall("subagent", {"prompt": "SUBJOB go"})]),
    FauxTurn(when="SUBJOB", tool_calls=[FauxToolCall("get_system_time")]),
    FauxTurn(when="unix_ms", text="sub says 42", input_tokens=9, output_tokens=3),
]


@dataclass
class Recorded:
    logs: dict[str, list[StoredEvent]]  # session id -> its events, in seq order
    main_session: str
    edits: list[StoredEvent]  # the context edits appended through the store


async def _produce(data_dir: Path) -> Recorded:
    clock = trio.lowlevel.current_clock()
    async with open_runtime(data_dir, script=SCRIPT) as rt:
        a = await rt.session(name="a")
        for rid, msg in [("r1", "hello"), ("r2", "nap twice"), ("r3", "fail please"), ("r4", "plan it")]:
            await rt.run_to_idle(a, rid, msg)
        # A name with another field, then alone, as ``PATCH /sessions/{id}`` sends them: one
        # command, its events in one append; the log replayed gives what the actor holds.
        await rt.call(a, Configure(thinking_level="high", name="renamed"))
        await rt.call(a, Configure(name="renamed again"))
        log = await rt.events(a)
        assert [e.kind for e in log[-3:]] == ["session.configured", "session.named", "session.named"]
        live, replayed = await rt.state(a), full(log, a)
        assert (live.thinking_level, live.name) == (replayed.thinking_level, replayed.name) == ("high", "renamed again")
        await rt.run_to_idle(a, "r5", "delegate please")
        with frozen(clock):
            await rt.submit(a, "r6", "long nap")
            await rt.until(a, lambda s: s.agents["main"].running_call is not None)
            await rt.submit(a, "r7", "withdraw me")
            await rt.submit(a, "r8", "steer me")
            await rt.call(a, Withdraw("r7"))
            await rt.call(a, Steer("r8"))
        await rt.idle(a)
        with frozen(clock):
            await rt.submit(a, "r9", "long nap")
            await rt.until(a, lambda s: s.agents["main"].running_call is not None)
            await rt.submit(a, "r10", "aborted before it ran")
            await rt.call(a, Abort())
        await rt.run_to_idle(a, "r11", "after the abort")

        b = await rt.session()
        await rt.run_to_idle(b, "b1", "delegate please")
        cut = [e for e in await rt.events(a) if e.kind == "task.finished"][1].seq
        fork = await rt.sup.fork_session(a, cut)
        await rt.run_to_idle(fork, "f1", "nap twice")

        # Jobs and skills, appended as the actor records them (a job left running, one finished,
        # a skill due this round, one loaded, one unloaded): snapshots and chunked folds keep them.
        # Appended while the session's actor is passivated, so the wake that follows reads them
        # (an actor that was live would meet them at its next write, at a moment of the
        # scheduler's choosing: before or after the edits below).
        state = await rt.state(a)
        await passivated(rt, a)
        for ev in (t.JobStarted(job_id="job_1", command="make serve"),
                   t.JobStarted(job_id="job_2", command="make test", call_id="c_job"),
                   t.JobFinished(job_id="job_2", status="exited", exit_code=0, output_tail="ok\n"),
                   t.ToolFinished(call_id="c_skill", name="skill", content=[t.TextPart("loaded")],
                                  structured_content={"name": "review", "instructions_follow": True}),
                   t.SkillLoaded(name="other", instructions="OTHER-STEPS", base_dir="skills/other", digest="d1"),
                   t.SkillLoaded(name="gone", instructions="GONE-STEPS", base_dir="skills/gone"),
                   t.SkillUnloaded(name="gone")):
            await rt.store.append(Draft(ev, project_id=state.project_id, session_id=a, agent_id="main"))

        # The wake records job_1 lost and reports it (a task), and the due load of a skill no
        # workspace holds as failed; then the edits go in behind the passivated actor again.
        await rt.idle(a)
        await passivated(rt, a)
        # Working Context edits, appended the way an edit command would (the session's envelope).
        state = await rt.state(a)
        await passivated(rt, a)
        main = state.agents["main"]
        results = [it for it in main.items if it.role == "tool_result"]
        users = [it for it in main.items if it.role == "user"]
        edits = [
            t.ContextEdited(op="snip", item_ids=[results[0].id, users[0].id]),
            t.ContextEdited(op="prune", item_ids=[results[1].id, results[2].id]),
            t.ContextEdited(op="include_result", item_ids=[results[2].id]),
            t.ContextCompacted(summary="what happened so far", replaced_item_ids=[main.items[1].id, main.items[2].id]),
            t.ContextEdited(op="include_result", item_ids=[main.items[2].id]),
        ]
        first_edit = None
        for ev in edits:
            res = await rt.store.append(Draft(ev, project_id=state.project_id, session_id=a, agent_id="main"))
            first_edit = first_edit or res.seq
        logs = {sid: await rt.events(sid) for sid in (a, b, fork)}
    return Recorded(logs, a, [e for e in logs[a] if e.seq >= first_edit])


async def passivated(rt: Runtime, session_id: str) -> None:
    """Let the session's actor go idle and passivate (its idle timer, on the test's mock clock)."""
    for _ in range(1000):
        if session_id not in rt.sup.live_sessions:
            return
        await trio.sleep(60)
    raise AssertionError(f"session {session_id} never passivated")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    data_dir = tmp_path_factory.mktemp("replay") / "data"
    return trio.run(_produce, data_dir, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_recorded_sessions_cover_the_interesting_kinds(recorded: Recorded):
    kinds = {e.kind for log in recorded.logs.values() for e in log}
    assert {
        "session.created", "session.configured", "session.named", "input.submitted", "input.placed",
        "input.withdrawn", "input.requeued", "task.started", "task.finished", "model.requested",
        "model.responded", "model.failed", "tool.started", "tool.finished", "todo.updated",
        "agent.started", "agent.finished", "run.aborted", "context.edited", "context.compacted",
        "job.started", "job.finished", "skill.loaded", "skill.unloaded",
    } <= kinds
    main = full(recorded.logs[recorded.main_session], recorded.main_session)
    # (the actor, finding events it did not write, restarted: it records job_1 lost, and the due
    # load of a skill no workspace holds as failed)
    assert {j.job_id: j.status for j in main.jobs.values()} == {"job_1": "lost", "job_2": "exited"}
    assert sorted(main.agents["main"].skills) == ["other"]
    assert [e.kind for e in recorded.edits] == ["context.edited"] * 3 + ["context.compacted", "context.edited"]


def full(events: list[StoredEvent], sid: str) -> SessionState:
    return fold(SessionState(sid), events)


@settings(max_examples=40)
@given(data=st.data())
def test_fold_in_chunks_equals_fold_at_once(recorded: Recorded, data):
    sid = data.draw(st.sampled_from(sorted(recorded.logs)))
    events = recorded.logs[sid]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=8)))
    roundtrip = data.draw(st.booleans())
    state = SessionState(sid)
    start = 0
    for cut in [*cuts, len(events)]:
        fold(state, events[start:cut])
        start = max(start, cut)
        if roundtrip:  # as if the actor passivated here and woke from a snapshot
            state = state_from_snapshot(snapshot_bytes(state))
    expected = full(events, sid)
    assert state == expected
    assert snapshot_bytes(state) == snapshot_bytes(expected)


@settings(max_examples=40)
@given(data=st.data())
def test_snapshot_at_any_cut_plus_tail_equals_full_replay(recorded: Recorded, data):
    sid = data.draw(st.sampled_from(sorted(recorded.logs)))
    events = recorded.logs[sid]
    cut = data.draw(st.integers(0, len(events)))
    head = full(events[:cut], sid)
    snaps = SnapshotStore(open_projections_db(Path("."), memory=True))
    try:
        snaps.save(head)
        loaded = snaps.load(sid)
    finally:
        snaps.close()
    assert loaded is not None and loaded == head
    resumed = fold(loaded, events[cut:])
    assert resumed == full(events, sid)
    # The original state keeps folding identically too (the snapshot was a copy).
    assert fold(head, events[cut:]) == resumed


# --------------------------------------------------------------------------- Working Context


def check_working_context(state: SessionState, agent_id: str, ops: list[tuple[str, str]]) -> None:
    """Check ``working_context`` against a per-item model of the documented edits.

    ``ops`` are every (op, item id) applied to the agent, in order, compaction aside. The model:
    items keep the Full Context's order but summaries, which stand where what they replaced began;
    the last of snip / include_result decides (unsnip undoes a snip), a compaction hides what it
    replaced unless included, a user's hide wins over everything; pruned results not included show
    a placeholder; a result is shown only with its call (an included result brings it back), and a
    shown call whose result is hidden gets a placeholder result.
    """
    agent = state.agents[agent_id]
    mode: dict[str, str] = {}  # id -> "snipped" | "included"
    pruned: set[str] = set()
    user_hidden: set[str] = set()
    for op, item_id in ops:
        if op == "snip":
            mode[item_id] = "snipped"
        elif op == "unsnip":
            if mode.get(item_id) == "snipped":
                mode.pop(item_id)
        elif op == "include_result":
            mode[item_id] = "included"
        elif op == "prune":
            pruned.add(item_id)
        elif op == "hide":
            user_hidden.add(item_id)
        elif op == "unhide":
            user_hidden.discard(item_id)
    replaced = {i for it in agent.items if it.role == "summary" for i in it.replaced_ids}

    def included(item_id: str) -> bool:
        return mode.get(item_id) == "included" and item_id not in user_hidden

    def hidden(item_id: str) -> bool:
        if item_id in user_hidden:
            return True
        return not included(item_id) and (mode.get(item_id) == "snipped" or item_id in replaced)

    result_of = {it.call_id: it for it in agent.items if it.role == "tool_result"}
    call_shown: dict[str, bool] = {}
    for it in agent.items:
        if it.role == "tool_call":
            res = result_of.get(it.call.call_id)
            call_shown[it.call.call_id] = not hidden(it.id) or (
                res is not None and included(res.id) and it.id not in user_hidden)

    wc = working_context(agent)
    by_id = {it.id: it for it in wc}
    full_ids = [it.id for it in agent.items]
    # The Working Context is drawn from the Full Context, in its order, each item at most once,
    # except that a summary stands where the first item it replaced stood (a summary of a
    # summary where that one stood): after every item before that one, before every item after.
    positions = [full_ids.index(it.id) for it in wc]
    assert len(set(positions)) == len(positions)
    stands: dict[int, int] = {}
    for i, it in enumerate(agent.items):
        if it.role == "summary":
            stands[i] = min([i, *(stands.get(full_ids.index(r), full_ids.index(r))
                                  for r in it.replaced_ids if r in full_ids)])
    others = [p for p in positions if p not in stands]
    assert others == sorted(others)
    for n, p in enumerate(positions):
        if p in stands:
            assert all(q < stands[p] for q in others if q in positions[:n]), (wc, ops)
            assert all(q >= stands[p] for q in others if q in positions[n + 1:]), (wc, ops)
    for it in agent.items:
        if it.role == "tool_call":
            assert (it.id in by_id) == call_shown[it.call.call_id], (it.id, ops)
            if it.id in by_id:
                assert by_id[it.id] == it
            continue
        if it.role == "tool_result":
            if not call_shown.get(it.call_id, False):
                assert it.id not in by_id, (it.id, "shown without its call", ops)
            elif hidden(it.id):
                assert by_id[it.id].text == REMOVED_PLACEHOLDER and by_id[it.id].structured is None, (it.id, ops)
            elif it.id in pruned and not included(it.id):
                assert by_id[it.id].text == pruned_placeholder(it.id) and by_id[it.id].structured is None, (it.id, ops)
            else:
                assert by_id[it.id] == it, (it.id, ops)
            continue
        if hidden(it.id):
            assert it.id not in by_id, (it.id, ops)
        else:
            assert by_id.get(it.id) == it, (it.id, ops)  # unedited items pass through untouched
    # Well formed: every call shown has its result shown (when it has one), and vice versa.
    shown_calls = {it.call.call_id for it in wc if it.role == "tool_call"}
    shown_results = {it.call_id for it in wc if it.role == "tool_result"}
    assert shown_results <= shown_calls
    assert {c for c in shown_calls if c in result_of} <= shown_results


def test_the_recorded_edits_shape_the_working_context(recorded: Recorded):
    sid = recorded.main_session
    events = recorded.logs[sid]
    first_edit = recorded.edits[0].seq
    before = full([e for e in events if e.seq < first_edit], sid)
    after = full(events, sid)
    summary = [it for it in after.agents["main"].items if it.role == "summary"]
    # The Full Context only gained the summary item; nothing was rewritten or removed.
    assert [it for it in after.agents["main"].items if it.role != "summary"] == before.agents["main"].items
    assert len(summary) == 1 and summary[0].text == "what happened so far"
    # (a skill.unloaded before the edits snipped its instructions)
    ops = [("snip", i) for i in before.agents["main"].snipped]
    ops += [(e.event.op, i) for e in recorded.edits if e.kind == "context.edited" for i in e.event.item_ids]
    check_working_context(after, "main", ops)
    wc_ids = [it.id for it in working_context(after.agents["main"])]
    snipped_result, snipped_user = recorded.edits[0].event.item_ids
    assert snipped_user not in wc_ids
    assert summary[0].id in wc_ids
    # Other agents' contexts are untouched by the main agent's edits.
    for agent_id, agent in after.agents.items():
        if agent_id != "main":
            assert working_context(agent) == agent.items


EDIT_OPS = st.sampled_from(["snip", "unsnip", "include_result", "prune", "hide", "unhide"])


@settings(max_examples=150)
@given(data=st.data())
def test_working_context_follows_any_edit_sequence(recorded: Recorded, data):
    sid = recorded.main_session
    events = [e for e in recorded.logs[sid] if e.seq < recorded.edits[0].seq]  # no edits yet
    state = full(events, sid)
    agent_id = data.draw(st.sampled_from(sorted(state.agents)))
    items = state.agents[agent_id].items
    full_before = msgspec.msgpack.encode(items)
    # Edits on a few items, each tool item with its partner, so that edits interact.
    pool = set(data.draw(st.lists(st.sampled_from([it.id for it in items]), min_size=1, max_size=3)))
    for it in items:
        partner = it.call.call_id if it.role == "tool_call" else it.call_id
        if partner and any(o.id in pool and (o.call_id == partner or (o.call and o.call.call_id == partner))
                           for o in items):
            pool.add(it.id)
    ids = sorted(pool)
    picks = data.draw(st.lists(st.tuples(EDIT_OPS, st.lists(st.sampled_from(ids), min_size=1, max_size=2)),
                               max_size=10))
    seq = state.last_seq
    # (what a skill.unloaded snipped before)
    ops: list[tuple[str, str]] = [("snip", i) for i in state.agents[agent_id].snipped]
    for op, item_ids in picks:
        seq += 1
        apply(state, StoredEvent(seq, 0, state.project_id, sid, state.last_session_seq + 1, agent_id, None,
                                 "context.edited", None, t.ContextEdited(op=op, item_ids=item_ids)))
        ops.extend((op, i) for i in item_ids)
        # After every edit: the Full Context is exactly what it was.
        assert msgspec.msgpack.encode(state.agents[agent_id].items) == full_before
        check_working_context(state, agent_id, ops)
    # The edits survive a snapshot round trip.
    assert working_context(state_from_snapshot(snapshot_bytes(state)).agents[agent_id]) == working_context(
        state.agents[agent_id])


async def test_compaction_then_include_result_reaches_the_model(runtime_factory, autojump_clock):
    """End to end: edits appended through the store shape the next request; include_result
    brings back a result a compaction replaced, together with its call."""
    script = [FauxTurn(when="nap", tool_calls=[sleep_call(3)])]
    async with runtime_factory(script=script) as rt:
        sid = await rt.session()
        st0 = await rt.run_to_idle(sid, "r1", "nap")
        items = st0.agents["main"].items
        assert [it.role for it in items] == ["user", "tool_call", "tool_result", "assistant"]
        ids = rt.ids
    user, call, result, answer = items
    async with open_store(rt.data_dir) as store:
        for ev in (t.ContextCompacted(summary="earlier: a nap", replaced_item_ids=[user.id, call.id, result.id, answer.id]),
                   t.ContextEdited(op="include_result", item_ids=[result.id])):
            await store.append(Draft(ev, project_id=st0.project_id, session_id=sid, agent_id="main"))
    async with runtime_factory(script=script, ids=ids) as rt2:
        st = await rt2.run_to_idle(sid, "r2", "what did we do")
        assert [it.id for it in st.agents["main"].items[:4]] == [it.id for it in items]  # Full Context intact
        sent = rt2.faux.requests[0].items
        # The summary stands where the first item it replaced (the user's message) stood; the
        # re-attached call and result come after it, at their own place.
        assert [(it.role, it.text) for it in sent] == [
            ("summary", "earlier: a nap"), ("tool_call", ""), ("tool_result", result.text), ("user", "what did we do")]
        assert sent[1].call == call.call and sent[2].call_id == call.call.call_id
        assert st.agents["main"].items[-1].text == "(faux) You said: what did we do"
