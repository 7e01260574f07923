"""F-ACT-6 and F-ACT-7: configuration by event (from the next model request), naming, soft
delete, and forks from any ``seq`` of a session."""

from __future__ import annotations

import pytest
import trio

from conftest import by_kind, frozen, one, sleep_call
from projections.session_state import SessionState, apply
from runtime.actor import Configure, Delete, GetState, Submit, Withdraw
from runtime.errors import ForkPointInvalid, ForkSourceUnreadable, ModelUnavailable, SessionGone, SessionNotFound
from runtime.providers.faux import FauxTurn
from conftest import text
from test_supervisor import corrupt, passivate


def main_items(state: SessionState):
    return state.agents["main"].items


async def test_fork_takes_the_contexts_as_of_a_seq_and_is_independent(runtime_factory, autojump_clock):
    script = [FauxTurn(when="nap first", tool_calls=[sleep_call(10)])]
    async with runtime_factory(script=script) as rt:
        src = await rt.session(name="source")
        await rt.run_to_idle(src, "r1", "first question")
        await rt.run_to_idle(src, "r2", "nap first")
        evs = await rt.events(src)
        cut = by_kind(evs, "task.finished")[0].seq  # after the first answer
        expected = SessionState(src)
        for e in evs:
            if e.seq <= cut:
                apply(expected, e)
        source_before = await rt.state(src)

        fork = await rt.sup.fork_session(src, cut, name="retry")
        st = await rt.state(fork)
        assert fork != src
        assert main_items(st) == main_items(expected)
        assert [it.text for it in main_items(st)] == ["first question", "(faux) You said: first question"]
        assert (st.forked_from_session, st.forked_from_seq, st.name) == (src, cut, "retry")
        assert st.status == "idle" and st.queue == [] and st.inputs == {} and st.running_task is None
        assert st.project_id == source_before.project_id
        created = one(await rt.events(fork), "session.created")
        assert (created.event.forked_from_session, created.event.forked_from_seq) == (src, cut)
        assert created.project_id == "p1"

        # Independent afterwards, both ways.
        st = await rt.run_to_idle(fork, "f1", "a different turn")
        assert [it.text for it in main_items(st)][2:] == ["a different turn", "(faux) You said: a different turn"]
        assert main_items(await rt.state(src)) == main_items(source_before)
        await rt.run_to_idle(src, "r3", "source moves on")
        assert main_items(await rt.state(fork)) == main_items(st)
        assert all(e.session_id == fork for e in await rt.events(fork))
        fork_state = await rt.state(fork)
        ids = rt.ids
    # A fork wakes by replay (its base comes from the source's log) with the same state.
    async with runtime_factory(ids=ids) as rt2:
        assert await rt2.state(fork) == fork_state


async def test_fork_in_the_middle_of_a_tool_round_starts_idle(rt, autojump_clock):
    rt.faux.script = [FauxTurn(when="nap", tool_calls=[sleep_call(10), sleep_call(20)])]
    src = await rt.session()
    await rt.run_to_idle(src, "r1", "nap")
    cut = one(await rt.events(src), "tool.started", arguments='{"milliseconds": 20}').seq
    fork = await rt.sup.fork_session(src, cut)
    st = await rt.state(fork)
    main = st.agents["main"]
    assert st.status == "idle" and main.pending_calls == [] and main.running_call is None
    assert [it.role for it in main.items] == ["user", "tool_call", "tool_call", "tool_result"]
    st = await rt.run_to_idle(fork, "f1", "carry on")
    assert st.agents["main"].items[-1].text == "(faux) You said: carry on"


async def test_fork_refuses_a_seq_of_another_session(rt, autojump_clock):
    a = await rt.session()
    b = await rt.session()
    await rt.run_to_idle(a, "r1", "hello")
    seq_of_a = (await rt.events(a))[-1].seq
    with pytest.raises(ForkPointInvalid) as err:
        await rt.sup.fork_session(b, seq_of_a)
    assert err.value.code == "VALIDATION_FAILED"  # (as the HTTP body's rule answers a seq below 1)
    for bad in (0, -3, seq_of_a + 1000):
        with pytest.raises(ForkPointInvalid):
            await rt.sup.fork_session(a, bad)
    with pytest.raises(SessionNotFound):
        await rt.sup.fork_session("ses_missing", seq_of_a)
    assert sorted({e.session_id for e in await rt.events()}) == sorted([a, b])  # nothing created


async def test_a_fork_takes_the_configuration_as_of_its_seq(runtime_factory, autojump_clock):
    """State as of the fork point includes the session's configuration: the fork took the
    source's model and thinking level of now (its saved settings were already as of the seq)."""
    async with runtime_factory(extra_providers=["faux2"]) as rt:
        src = await rt.session(model="faux/faux-1", thinking_level="low")
        await rt.run_to_idle(src, "r1", "hello")
        cut = (await rt.events(src))[-1].seq
        await rt.call(src, Configure(model="faux2/model-b", thinking_level="high"))
        later = (await rt.events(src))[-1].seq
        early = await rt.sup.fork_session(src, cut)
        late = await rt.sup.fork_session(src, later)
        st = await rt.state(early)
        assert (st.model, st.thinking_level) == ("faux/faux-1", "low")
        created = one(await rt.events(early), "session.created").event
        assert (created.model, created.thinking_level) == ("faux/faux-1", "low")
        st = await rt.state(late)
        assert (st.model, st.thinking_level) == ("faux2/model-b", "high")
        await rt.run_to_idle(early, "f1", "again")
        req = one(await rt.events(early), "model.requested").event
        assert (req.provider, req.model, req.thinking_level) == ("faux", "faux-1", "low")


async def test_a_fork_made_at_or_after_a_deletion_is_a_live_session(runtime_factory, autojump_clock):
    """The deletion (or quarantine) is the source's own: a fork from its ``session.deleted`` was
    born deleted (every input 409 SESSION_DELETED) while the session list showed it live."""
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        await rt.call(src, Delete())
        cut = one(await rt.events(src), "session.deleted").seq
        fork = await rt.sup.fork_session(src, cut)
        st = await rt.state(fork)
        assert not st.deleted and st.status == "idle" and [it.text for it in main_items(st)][:1] == ["hello"]
        st = await rt.run_to_idle(fork, "f1", "once more")
        assert main_items(st)[-1].text == "(faux) You said: once more"
        ids = rt.ids
    async with runtime_factory(ids=ids) as rt2:  # replayed alike
        st = await rt2.state(fork)
        assert not st.deleted and main_items(st)[-1].text == "(faux) You said: once more"
        assert (await rt2.state(src)).deleted


async def test_a_fork_of_a_long_session_wakes_without_its_source(runtime_factory, autojump_clock):
    """F-ACT-2 for forks: a fork's state is its source's up to the fork point, and it was folded
    from the source's first event on each wake-up (and for each fork made), whatever snapshots
    there were. A fork's state now starts from the source's latest snapshot that ends by the fork
    point, and what it folds counts towards a snapshot of the fork; so does a fork of a fork."""
    async with runtime_factory(snapshot_every=10, idle_seconds=5) as rt:
        src = await rt.session()
        for i in range(4):
            await rt.run_to_idle(src, f"r{i}", f"message {i}")
        evs = await rt.events(src)
        await passivate(rt, src)
        fork = await rt.sup.fork_session(src, evs[-1].seq)
        st = await rt.state(fork)
        await passivate(rt, fork)
        await passivate(rt, src)
        ids = rt.ids
    corrupt(rt.data_dir, evs[0].seq)  # neither wake-up nor a new fork may read it any more
    async with runtime_factory(snapshot_every=10, idle_seconds=5, ids=ids) as rt2:
        assert await rt2.state(fork) == st
        st = await rt2.run_to_idle(fork, "f1", "from the fork")
        assert main_items(st)[-1].text == "(faux) You said: from the fork"
        again = await rt2.sup.fork_session(fork, (await rt2.events(fork))[-1].seq)
        st = await rt2.run_to_idle(again, "g1", "from the fork's fork")
        assert [it.text for it in main_items(st)][-4:] == [
            "from the fork", "(faux) You said: from the fork",
            "from the fork's fork", "(faux) You said: from the fork's fork"]


async def test_a_fork_is_snapshotted_as_it_is_made(runtime_factory, autojump_clock):
    """A fork of a short session (fewer events than ``snapshotEvery``) was read back through its
    source on each wake-up, and a chain of forks each made from the last through every link (400
    of them took 45 s to make, 2 s now). A fork is snapshotted as it is made."""
    async with runtime_factory(idle_seconds=5) as rt:  # snapshot_every 500: far more than these
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        first = (await rt.events(src))[0].seq
        chain: list[str] = []
        cur = src
        for _ in range(3):
            cur = await rt.sup.fork_session(cur, (await rt.events(cur))[-1].seq)
            chain.append(cur)
        states = {f: await rt.state(f) for f in chain}
        for f in (src, *chain):
            await passivate(rt, f)
        for f in chain:
            assert await trio.to_thread.run_sync(rt.snapshots.load, f) == states[f]
        ids = rt.ids
    corrupt(rt.data_dir, first)  # no fork reads its source any more
    async with runtime_factory(ids=ids) as rt2:
        for f in chain:
            assert await rt2.state(f) == states[f]
        deeper = await rt2.sup.fork_session(chain[-1], (await rt2.events(chain[-1]))[-1].seq)
        st = await rt2.run_to_idle(deeper, "d1", "deep")
        assert [it.text for it in main_items(st)] == [
            "hello", "(faux) You said: hello", "deep", "(faux) You said: deep"]


async def test_a_source_with_a_damaged_event_is_forked_before_it(runtime_factory, autojump_clock):
    """"Try again from here" for a session quarantined because an event of its log is damaged: a
    fork woke the whole source first (SESSION_QUARANTINED, even for a seq before the damage); now
    it reads the source up to the fork point only, and a fork point past the damage is the log's
    EVENT_CORRUPT naming the event (the actor made for it crashed: SESSION_UNAVAILABLE, "retry")."""
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        await rt.run_to_idle(src, "r2", "again")
        evs = await rt.events(src)
        bad = one(evs, "input.submitted", request_id="r2").seq
        ids = rt.ids
    corrupt(rt.data_dir, bad)
    async with runtime_factory(ids=ids) as rt2:
        await rt2.quarantine_of(src)
        fork = await rt2.sup.fork_session(src, bad - 1)
        st = await rt2.run_to_idle(fork, "f1", "once more")
        assert [it.text for it in main_items(st)] == [
            "hello", "(faux) You said: hello", "once more", "(faux) You said: once more"]
        n = len(await rt2.store.read_events(limit=1000, kinds=["session.created"]))
        with pytest.raises(ForkSourceUnreadable) as err:
            await rt2.sup.fork_session(src, evs[-1].seq)
        assert err.value.code == "EVENT_CORRUPT" and f"seq {bad}:" in err.value.message
        assert len(await rt2.store.read_events(limit=1000, kinds=["session.created"])) == n  # nothing created


async def test_a_fork_at_an_item_a_fork_inherited_from_a_deleted_or_damaged_session(runtime_factory, autojump_clock):
    """A fork of a fork at a seq it inherited is made from the session that recorded it: when that
    one is deleted, the new session is still made and runs (its forkedFrom names the deleted one);
    when that one's log is damaged before the seq, the log's code names that session."""
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        evs = await rt.events(src)
        fork = await rt.sup.fork_session(src, evs[-1].seq)
        answer = main_items(await rt.state(src))[-1].seq  # (its answer)
        await rt.call(src, Delete())
        made = await rt.sup.fork_session(fork, answer)
        [created] = await rt.store.read_events(session_id=made, limit=1)
        assert (created.event.forked_from_session, created.event.forked_from_seq) == (src, answer)
        st = await rt.run_to_idle(made, "f1", "once more")
        assert [it.text for it in main_items(st)] == [
            "hello", "(faux) You said: hello", "once more", "(faux) You said: once more"]
        bad = one(evs, "input.submitted", request_id="r1").seq
        ids = rt.ids
    corrupt(rt.data_dir, bad)
    async with runtime_factory(ids=ids) as rt2:
        with pytest.raises(ForkSourceUnreadable) as err:
            await rt2.sup.fork_session(fork, answer)
        assert err.value.code == "EVENT_CORRUPT" and f"session {src!r}" in err.value.message


async def test_configure_applies_from_the_next_model_request(runtime_factory, autojump_clock):
    script = [FauxTurn(when="nap", tool_calls=[sleep_call(1000)])]
    async with runtime_factory(script=script, extra_providers=["faux2"]) as rt:
        sid = await rt.session()
        with frozen(autojump_clock):
            await rt.submit(sid, "r1", "nap")
            await rt.until(sid, lambda s: s.agents["main"].running_call is not None)
            ans = await rt.call(sid, Configure(model="faux2/model-b", thinking_level="high"))
            assert ans == {"model": "faux2/model-b", "thinkingLevel": "high"}
        st = await rt.idle(sid)
        evs = await rt.events(sid)
        requested = by_kind(evs, "model.requested")
        assert [(r.event.provider, r.event.model, r.event.thinking_level) for r in requested] == [
            ("faux", "faux-1", None), ("faux2", "model-b", "high")]
        conf = one(evs, "session.configured")
        assert requested[0].seq < conf.seq < requested[1].seq
        assert len(rt.faux.requests) == 1 and len(rt.providers["faux2"].requests) == 1
        assert rt.providers["faux2"].requests[0].thinking_level == "high"
        assert (st.model, st.thinking_level) == ("faux2/model-b", "high")
        # Only thinking_level changes: the model stays.
        await rt.call(sid, Configure(thinking_level="low"))
        st = await rt.run_to_idle(sid, "r2", "hi")
        last = by_kind(await rt.events(sid), "model.requested")[-1].event
        assert (last.provider, last.model, last.thinking_level) == ("faux2", "model-b", "low")


async def test_configure_refuses_an_unknown_model(rt, autojump_clock):
    sid = await rt.session()
    n = len(await rt.events(sid))
    for ref in ("nope/x", "faux", "faux/"):
        with pytest.raises(ModelUnavailable) as err:
            await rt.call(sid, Configure(model=ref))
        assert err.value.code == "MODEL_UNKNOWN"
    assert len(await rt.events(sid)) == n
    with pytest.raises(ModelUnavailable):
        await rt.session(model="nope/x")
    st = await rt.run_to_idle(sid, "r1", "still fine")
    assert one(await rt.events(sid), "model.requested").event.provider == "faux" and st.model is None


async def test_rename(rt, autojump_clock):
    sid = await rt.session(name="first")
    assert (await rt.state(sid)).name == "first"
    await rt.call(sid, Configure(name="second"))
    assert (await rt.state(sid)).name == "second"
    assert one(await rt.events(sid), "session.named").event.name == "second"
    n = len(await rt.events(sid))
    await rt.call(sid, Configure(name="second"))  # (the name it has: nothing recorded)
    assert len(await rt.events(sid)) == n
    # with another field: both events, next to each other (one append)
    await rt.call(sid, Configure(thinking_level="high", name="third"))
    added = (await rt.events(sid))[n:]
    assert [e.kind for e in added] == ["session.configured", "session.named"]
    assert added[1].seq == added[0].seq + 1
    st = await rt.state(sid)
    assert (st.thinking_level, st.name) == ("high", "third")


async def test_soft_delete_keeps_events_and_refuses_later_work(runtime_factory, autojump_clock):
    async with runtime_factory() as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        before = await rt.events(sid)
        assert await rt.call(sid, Delete()) == {"deleted": True}
        after = await rt.events(sid)
        assert [e.to_json() for e in after[: len(before)]] == [e.to_json() for e in before]
        assert [e.kind for e in after[len(before):]] == ["session.deleted"]
        for cmd in (Submit("r2", text("more")), Withdraw("r1"), Configure(thinking_level="x"), Configure(name="n"), Delete()):
            with pytest.raises(SessionGone) as err:
                await rt.call(sid, cmd)
            assert err.value.code == "SESSION_DELETED"
        assert (await rt.state(sid)).status == "deleted"
        ids = rt.ids
    async with runtime_factory(ids=ids) as rt2:  # still deleted after a restart
        with pytest.raises(SessionGone):
            await rt2.call(sid, Submit("r2", text("more")))
        assert (await rt2.call(sid, GetState())).deleted


async def test_delete_while_running_stops_the_run_first(rt, autojump_clock):
    rt.faux.script = [FauxTurn(when="nap", tool_calls=[sleep_call(100_000)])]
    sid = await rt.session()
    with frozen(autojump_clock):
        await rt.submit(sid, "r1", "nap")
        await rt.until(sid, lambda s: s.agents["main"].running_call is not None)
        await rt.submit(sid, "r2", "queued")
        await rt.call(sid, Delete())
    evs = await rt.events(sid)
    assert [e.kind for e in evs][-5:] == [
        "tool.finished", "run.aborted", "task.finished", "input.withdrawn", "session.deleted"]
    assert one(evs, "task.finished").event.status == "aborted"
    assert (await rt.idle(sid)).status == "deleted"
