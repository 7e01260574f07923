"""F-ACT-1/2: the supervisor starts actors on demand, passivates idle ones, wakes them from the
latest snapshot plus the tail, restarts crashed ones from the log, quarantines a session whose
replay keeps failing, and resumes unfinished work when it starts over an existing log."""

from __future__ import annotations

import logging
import subprocess

import apsw
import pytest
import trio

from conftest import by_kind, frozen, one, sleep_call
from events import types as t
from events.reader import LogReader
from events.schema import EVENTS_DB
from events.store import Draft, open_store
from projections.session_state import SessionState, fold
from runtime.actor import ActorDeps, Delete, GetState, Submit, WaitIdle
from runtime.errors import ActorUnavailable, AgentNotFound, SessionGone, SessionNotFound, SessionQuarantined
from runtime.projection_service import ProjectionService
from runtime.providers.faux import FauxToolCall, FauxTurn
from runtime.supervisor import STORAGE_RETRY_MAX, Supervisor
from runtime.working_context import Compact, DescribeContext
from tools.base import ToolResult, ToolSpec

from conftest import text


async def full_replay(rt, sid: str) -> SessionState:
    return fold(SessionState(sid), await rt.events(sid))


async def passivate(rt, sid: str) -> None:
    """Let virtual time pass until the idle actor has left (its last snapshot write included).

    The bound counts checks, not time: while a snapshot is written in a thread (real time, slow
    on a loaded machine) the mock clock jumps on, each check taking a virtual second."""
    for _ in range(100_000):
        if sid not in rt.sup.live_sessions:
            return
        await trio.sleep(1)
    raise AssertionError(f"{sid} never passivated")


def corrupt(data_dir, seq: int) -> None:
    """Overwrite one stored body with bytes that are not a valid frame (the runtime is stopped)."""
    conn = apsw.Connection(str(data_dir / EVENTS_DB))
    try:
        with conn:
            conn.execute("UPDATE events SET body = ? WHERE seq = ?", (b"\x00garbage-not-zstd", seq))
        assert conn.changes() == 1
    finally:
        conn.close()


async def test_idle_actors_passivate_and_wake_by_replay(runtime_factory, autojump_clock):
    async with runtime_factory(idle_seconds=5, script=[FauxTurn(when="nap", tool_calls=[sleep_call(50)])]) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "nap")
        await rt.run_to_idle(sid, "r2", "hello")
        before = await rt.state(sid)
        assert sid in rt.sup.live_sessions
        await passivate(rt, sid)
        assert trio.current_time() >= 5  # only after idle_seconds of virtual time
        woken = await rt.state(sid)  # the next call wakes it
        assert sid in rt.sup.live_sessions
        assert woken == before
        assert woken == await full_replay(rt, sid)
        st = await rt.run_to_idle(sid, "r3", "awake again")
        assert st.agents["main"].items[-1].text == "(faux) You said: awake again"


async def test_busy_actors_do_not_passivate(runtime_factory, autojump_clock):
    async with runtime_factory(idle_seconds=5, script=[FauxTurn(when="nap", tool_calls=[sleep_call(600_000)])]) as rt:
        sid = await rt.session()
        with frozen(autojump_clock):
            await rt.submit(sid, "r1", "nap")
            await rt.until(sid, lambda s: s.agents["main"].running_call is not None)
        # The sleep spans 120 idle periods: the actor stays live throughout and finishes the task.
        await rt.call(sid, WaitIdle())
        assert sid in rt.sup.live_sessions
        evs = await rt.events(sid)
        assert one(evs, "tool.finished").event.status == "ok"
        assert len(by_kind(evs, "task.started")) == 1


async def test_wake_up_uses_the_snapshot_and_equals_a_full_replay(runtime_factory, autojump_clock):
    async with runtime_factory(snapshot_every=5, idle_seconds=5) as rt:
        sid = await rt.session()
        for i in range(4):
            await rt.run_to_idle(sid, f"r{i}", f"message {i}")
        live = await rt.state(sid)
        assert live == await full_replay(rt, sid)
        await passivate(rt, sid)  # the actor's pending snapshot writes finish before it leaves
        snap = await trio.to_thread.run_sync(rt.snapshots.load, sid)
        assert snap is not None and 5 <= snap.events < live.events  # a snapshot with a tail after it
        assert snap.last_seq < live.last_seq
        assert snap == fold(SessionState(sid), [e for e in await rt.events(sid) if e.seq <= snap.last_seq])
        # Prove the wake-up reads only the tail: damage an event the snapshot already covers.
        first_seq = (await rt.events(sid))[0].seq
        ids = rt.ids
    corrupt(rt.data_dir, first_seq)
    async with runtime_factory(snapshot_every=5, ids=ids) as rt2:
        assert await rt2.state(sid) == live
        st = await rt2.run_to_idle(sid, "r9", "still here")
        assert st.agents["main"].items[-1].text == "(faux) You said: still here"


async def test_a_session_woken_for_short_bursts_is_snapshotted_too(runtime_factory, autojump_clock):
    """The cadence counts the events a wake-up would read again, not only what one actor
    appended: a session woken for one turn at a time (fewer than ``snapshot_every`` events per
    wake) was never snapshotted, so every wake-up replayed its whole log."""
    async with runtime_factory(snapshot_every=10, idle_seconds=5) as rt:
        sid = await rt.session()
        for i in range(6):
            await rt.run_to_idle(sid, f"r{i}", f"message {i}")
            await passivate(rt, sid)
        live = await rt.state(sid)
        await passivate(rt, sid)
        snap = await trio.to_thread.run_sync(rt.snapshots.load, sid)
        assert live.events > 30
        assert snap is not None and live.events - snap.events < 10
        assert snap == fold(SessionState(sid), [e for e in await rt.events(sid) if e.seq <= snap.last_seq])
        ids = rt.ids
    # A tail that is already long at a wake-up (snapshots were rarer before) is snapshotted then,
    # even when the wake-up only reads.
    async with runtime_factory(snapshot_every=1000, idle_seconds=5, ids=ids) as rt:
        for i in range(6, 10):
            await rt.run_to_idle(sid, f"r{i}", f"message {i}")
        live = await rt.state(sid)
    async with runtime_factory(snapshot_every=10, idle_seconds=5, ids=ids) as rt:
        assert await rt.state(sid) == live
        await passivate(rt, sid)
        snap = await trio.to_thread.run_sync(rt.snapshots.load, sid)
        assert snap is not None and snap.events == live.events


async def snapshot_then_restore(runtime_factory) -> tuple[str, object, SessionState]:
    """A session of four turns with a snapshot after them, then its log put back from a backup
    taken after the first turn (the runtime stopped): returns the session, the ids to start the
    next runtime with, and the snapshot that no longer matches the log."""
    async with runtime_factory(snapshot_every=5, idle_seconds=5) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r0", "message 0")
        kept = (await rt.events(sid))[-1].seq  # the backup ends here
        for i in range(1, 4):
            await rt.run_to_idle(sid, f"r{i}", f"message {i}")
        await passivate(rt, sid)
        snap = await trio.to_thread.run_sync(rt.snapshots.load, sid)
        assert snap is not None and snap.last_seq > kept
        ids = rt.ids
    conn = apsw.Connection(str(rt.data_dir / EVENTS_DB))
    try:
        with conn:
            conn.execute("DELETE FROM events WHERE seq > ?", (kept,))
    finally:
        conn.close()
    return sid, ids, snap


async def test_a_snapshot_past_a_log_cut_short_is_not_used(runtime_factory, autojump_clock):
    """A backup of the log put back: the snapshot in projections.db folds events the log no
    longer holds. Waking from it gave a state the log does not say (and the next append's
    session_seq clashed with it); the session wakes by replaying the log instead."""
    sid, ids, _ = await snapshot_then_restore(runtime_factory)
    async with runtime_factory(snapshot_every=5, ids=ids) as rt2:
        woken = await rt2.state(sid)
        assert woken == await full_replay(rt2, sid)
        assert [it.text for it in woken.agents["main"].items if it.role == "user"] == ["message 0"]
        st = await rt2.run_to_idle(sid, "r9", "after the restore")
        assert st.agents["main"].items[-1].text == "(faux) You said: after the restore"
        assert st == await full_replay(rt2, sid)


async def test_a_snapshot_of_the_log_before_a_restore_is_not_used_once_it_grows_again(runtime_factory, autojump_clock):
    """After a backup is put back the session carries on, and its new events can take the very
    seq and session_seq the snapshot ends at: the wake-up check alone then passed a snapshot of
    the old timeline. Snapshots past the log's end are forgotten when the runtime starts."""
    sid, ids, snap = await snapshot_then_restore(runtime_factory)
    async with runtime_factory(snapshot_every=10_000, idle_seconds=5, ids=ids) as rt2:
        for i in range(1, 4):  # the same turns again: the same seqs and session_seqs
            await rt2.run_to_idle(sid, f"n{i}", f"new {i}")
        assert (await rt2.events(sid))[-1].seq >= snap.last_seq
        assert any(e.seq == snap.last_seq and e.session_seq == snap.last_session_seq for e in await rt2.events(sid))
        await passivate(rt2, sid)
        woken = await rt2.state(sid)
        assert woken == await full_replay(rt2, sid)
        assert [it.text for it in woken.agents["main"].items if it.role == "user"] == \
            ["message 0", "new 1", "new 2", "new 3"]


async def _boom(args, ctx):
    raise RuntimeError("the tool blew up")


BOOM = ToolSpec("boom", "Crashes the actor (not a ToolError).", {"type": "object"}, _boom)
BOOM_REPLAYED = ToolSpec("boom_again", "Crashes on every replay.", {"type": "object"}, _boom, replay_safe=True)
CRASHING = [FauxTurn(when="explode", tool_calls=[FauxToolCall("boom_again")])]  # (with extra_tools=[BOOM_REPLAYED])


async def quarantined_session(rt) -> str:
    """A new session whose call crashes its actor on every replay, called until it is quarantined."""
    sid = await rt.session()
    await rt.submit(sid, "r1", "explode")
    for _ in range(100):  # each ActorUnavailable is a restarted actor that crashed again
        try:
            await rt.call(sid, WaitIdle())
        except ActorUnavailable:
            continue
        except SessionQuarantined:
            return sid
    raise AssertionError(f"session {sid} was not quarantined")


async def test_a_crashing_actor_restarts_from_the_log(runtime_factory, autojump_clock, caplog):
    script = [FauxTurn(when="explode", tool_calls=[FauxToolCall("boom")])]
    async with runtime_factory(script=script, extra_tools=[BOOM]) as rt:
        other = await rt.session()
        sid = await rt.session()
        await rt.submit(sid, "r1", "explode")
        with pytest.raises(ActorUnavailable) as err:
            await rt.call(sid, WaitIdle())
        assert err.value.code == "SESSION_UNAVAILABLE"
        # The restarted actor replayed the log, reported the call as interrupted and carried on.
        st = await rt.idle(sid)
        evs = await rt.events(sid)
        fin = one(evs, "tool.finished", name="boom")
        assert (fin.event.status, fin.event.error_code) == ("interrupted", "INTERRUPTED")
        assert len(by_kind(evs, "tool.started")) == 1
        assert one(evs, "task.finished").event.status == "completed"
        assert st.agents["main"].items[-1].text.startswith("The tool answered: This tool call was interrupted")
        st = await rt.run_to_idle(sid, "r2", "are you ok")
        assert st.agents["main"].items[-1].text == "(faux) You said: are you ok"
        assert (await rt.run_to_idle(other, "o1", "unaffected")).status == "idle"
        assert st == await full_replay(rt, sid)
    crashes = [r for r in caplog.records if r.name == "lens.supervisor" and "crashed" in r.getMessage()]
    assert len(crashes) == 1 and crashes[0].levelno == logging.ERROR
    # A crash is a defect: logged with its traceback (the daemon's log formatter scrubs keys from
    # it), not only its repr, so whoever reads the log finds the line that raised.
    assert crashes[0].exc_info is not None
    assert "RuntimeError: the tool blew up" in logging.Formatter().formatException(crashes[0].exc_info)


async def test_repeated_crashes_quarantine_the_session(runtime_factory, autojump_clock, caplog):
    async with runtime_factory(script=CRASHING, extra_tools=[BOOM_REPLAYED], max_restarts=3) as rt:
        sid = await rt.session()
        await rt.submit(sid, "r1", "explode")
        with pytest.raises((ActorUnavailable, SessionQuarantined)):
            await rt.call(sid, WaitIdle())
        while True:  # each retry either meets a restarted actor (which crashes again) or the quarantine
            try:
                await rt.call(sid, WaitIdle())
            except ActorUnavailable:
                continue
            except SessionQuarantined as exc:
                assert exc.code == "SESSION_QUARANTINED"
                break
        evs = await rt.events(sid)
        q = one(evs, "session.quarantined")
        assert "RuntimeError" in q.event.reason and "the tool blew up" in q.event.reason
        assert len(by_kind(evs, "tool.started")) == 1  # re-runs do not log a second start
        with pytest.raises(SessionQuarantined):
            await rt.call(sid, Submit("r2", text("hello?")))
        # Its view reads as after a restart (it was SESSION_QUARANTINED until one): from the log,
        # with no actor woken.
        st = await rt.call(sid, GetState())
        assert st.status == "quarantined" and "the tool blew up" in (st.quarantined or "")
        assert sid not in rt.sup.live_sessions
    crashes = [r for r in caplog.records if r.name == "lens.supervisor" and "crashed" in r.getMessage()]
    assert len(crashes) == 4  # three restarts (max_restarts), then the crash needing a fourth


def _crashing(times: int, reruns: list[bool] | None = None) -> ToolSpec:
    """A replay-safe tool that crashes the actor on its first ``times`` runs, then answers: each
    restarted actor runs it again, so ``times`` crashes in a row need ``times`` restarts.
    ``reruns`` gets each run's ``ctx.rerun``."""
    runs = [0]

    async def run(args, ctx):
        runs[0] += 1
        if reruns is not None:
            reruns.append(ctx.rerun)
        if runs[0] <= times:
            raise RuntimeError(f"crash {runs[0]}")
        return ToolResult(content=[t.TextPart("survived")])

    return ToolSpec("crash_then_answer", "Crashes the actor a given number of times.", {"type": "object"}, run,
                    replay_safe=True)


@pytest.mark.parametrize("max_restarts, crashes, quarantined", [
    (2, 2, False),  # at the limit: two restarts, the third actor finishes the call
    (2, 3, True),   # one past: a third restart would be needed
    (0, 1, True),   # none: the first crash quarantines
    (1, 1, False),
])
async def test_max_restarts_counts_restarts(runtime_factory, autojump_clock, caplog, max_restarts, crashes,
                                            quarantined):
    """``sessions.maxRestarts`` is how many times a crashing actor is restarted in a row; the crash
    that would need one more quarantines the session. It counted crashes: 2 quarantined at the
    second crash (one restart), and 0 and 1 both at the first."""
    script = [FauxTurn(when="explode", tool_calls=[FauxToolCall("crash_then_answer")])]
    async with runtime_factory(script=script, extra_tools=[_crashing(crashes)], max_restarts=max_restarts) as rt:
        sid = await rt.session()
        await rt.submit(sid, "r1", "explode")
        for _ in range(100):  # each ActorUnavailable is an actor that crashed (restarted, or quarantined next)
            try:
                st = await rt.call(sid, WaitIdle())
                break
            except ActorUnavailable:
                continue
            except SessionQuarantined:
                break
        st = await rt.call(sid, GetState())
        evs = await rt.events(sid)
        if quarantined:
            assert st.status == "quarantined" and f"crash {crashes}" in (st.quarantined or "")
            assert len(by_kind(evs, "session.quarantined")) == 1
        else:
            assert st.status == "idle" and not by_kind(evs, "session.quarantined")
            assert st.agents["main"].items[-1].text == "The tool answered: survived"
    crashed = [r.getMessage() for r in caplog.records if r.name == "lens.supervisor" and "crashed" in r.getMessage()]
    assert len(crashed) == crashes
    assert f"crashed ({crashes} in a row; at most {max_restarts} restarts)" in crashed[-1]


async def test_a_restarts_run_of_a_replay_safe_call_again_says_so_to_the_tool(runtime_factory, autojump_clock):
    # (the workspace tools send it to the executor, which then does not refuse the call for the
    # Stop that gave up its first run: tests/executor/test_stop_before_its_call.py)
    reruns: list[bool] = []
    script = [FauxTurn(when="explode", tool_calls=[FauxToolCall("crash_then_answer")])]
    async with runtime_factory(script=script, extra_tools=[_crashing(2, reruns)], max_restarts=3) as rt:
        sid = await rt.session()
        await rt.submit(sid, "r1", "explode")
        for _ in range(100):  # each ActorUnavailable is an actor that crashed and was restarted
            try:
                await rt.call(sid, WaitIdle())
                break
            except ActorUnavailable:
                continue
        st = await rt.call(sid, GetState())
        assert st.agents["main"].items[-1].text == "The tool answered: survived"
    assert reruns == [False, True, True]  # the first run, then each restart's run of it again


async def test_a_quarantined_session_describes_its_context_as_its_view_reads(runtime_factory, autojump_clock):
    """``GET …/context`` of a session quarantined in this process was SESSION_QUARANTINED while
    its view, read from the log without an actor, was not: it is read the same way now."""
    async with runtime_factory(script=CRASHING, extra_tools=[BOOM_REPLAYED], max_restarts=3) as rt:
        sid = await quarantined_session(rt)
        described = await rt.call(sid, DescribeContext("main"))
        st = await rt.call(sid, GetState())
        main = st.agents["main"]
        assert [i["id"] for i in described["items"]] == [it.id for it in main.items]
        assert described["workingItemIds"] == [it.id for it in main.items]
        assert described["estimatedTokens"] > 0
        with pytest.raises(AgentNotFound) as err:
            await rt.call(sid, DescribeContext("agent_nope"))
        assert err.value.code == "AGENT_NOT_FOUND"
        with pytest.raises(SessionQuarantined):
            await rt.call(sid, Compact())
        assert sid not in rt.sup.live_sessions


@pytest.mark.parametrize("passivating", [False, True])
async def test_crashes_the_session_recovered_from_between_are_not_consecutive(runtime_factory, autojump_clock,
                                                                               caplog, passivating):
    """Each input makes the model call a tool that crashes the actor; each time the restarted
    actor reports the call interrupted and the session ends its run idle. That is no crash loop
    (only a new input sets it going again), yet it was quarantined at the third crash while the
    actor stayed awake, and never when it passivated in between: the count was per actor
    lifetime. A run that ended at rest now starts the count afresh, awake or not."""
    script = [FauxTurn(when="explode", tool_calls=[FauxToolCall("boom")])]
    async with runtime_factory(script=script, extra_tools=[BOOM], idle_seconds=5, max_restarts=3) as rt:
        sid = await rt.session()
        for i in range(4):
            await rt.submit(sid, f"r{i}", "explode")
            with pytest.raises(ActorUnavailable):
                await rt.call(sid, WaitIdle())
            st = await rt.idle(sid)  # (the restarted actor carries on)
            assert st.status == "idle" and st.agents["main"].items[-1].text.startswith("The tool answered")
            if passivating:
                await passivate(rt, sid)
        evs = await rt.events(sid)
        assert not by_kind(evs, "session.quarantined")
        assert [e.event.status for e in by_kind(evs, "tool.finished")] == ["interrupted"] * 4
    crashes = [r for r in caplog.records if r.name == "lens.supervisor" and "crashed" in r.getMessage()]
    assert len(crashes) == 4 and all("crashed (1 in a row; at most 3 restarts)" in r.getMessage() for r in crashes)


def _immutable(paths: list, on: bool) -> bool:
    flag = "+i" if on else "-i"
    return all(subprocess.run(["chattr", flag, str(p)], capture_output=True).returncode == 0 for p in paths)


async def test_the_storage_back_off_starts_again_once_writes_succeed(runtime_factory, autojump_clock, caplog):
    # The wait before restarting an actor the event log failed doubled at each fault for the
    # life of the session's actor, also across faults with good writes between: a fault a day
    # after the last one waited from where that one had left off (up to 30 s).
    async with runtime_factory() as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r0", "before")
        data = rt.store.data_dir
        # (not events.db-shm: a write to a mapped page of an immutable file is a SIGBUS)
        locked = [data] + [data / name for name in ("events.db", "events.db-wal")]
        for fault in range(2):
            if not _immutable(locked, True):
                _immutable(locked, False)
                pytest.skip("chattr +i is not available here: cannot make the event log unwritable")
            try:
                for attempt in range(2):  # (the second meets the restarted actor: still failing)
                    with pytest.raises(ActorUnavailable, match="cannot write its event log"):
                        await rt.submit(sid, f"f{fault}.{attempt}", "during the fault")
                    # A call during the pause before the restart is refused at once: wait it out
                    # (the clock jumps), so that the next call meets the restarted actor.
                    await trio.sleep(STORAGE_RETRY_MAX)
            finally:
                _immutable(locked, False)
            st = await rt.run_to_idle(sid, f"ok{fault}", "after the fault")
            assert st.agents["main"].items[-1].text == "(faux) You said: after the fault"
    waits = [r.getMessage().rsplit("retrying in ", 1)[1] for r in caplog.records
             if r.name == "lens.supervisor" and "the event log failed" in r.getMessage()]
    assert waits == ["1 s", "2 s", "1 s", "2 s"]


async def test_a_quarantined_session_can_be_deleted(runtime_factory, autojump_clock):
    """F-ACT-6: a quarantined session refused its soft delete (SESSION_QUARANTINED), so it stayed
    listed for good; now only ``session.deleted`` is recorded (nothing runs to abort), by the
    supervisor while the quarantine is its own and by the actor after a restart."""
    async with runtime_factory(script=CRASHING, extra_tools=[BOOM_REPLAYED]) as rt:
        now = await quarantined_session(rt)
        later = await quarantined_session(rt)
        n = len(await rt.events(now))
        answers: list[object] = []

        async def delete() -> None:
            try:
                answers.append(await rt.call(now, Delete()))
            except SessionGone as exc:
                answers.append(exc.code)

        async with trio.open_nursery() as nursery:  # two at once (no actor serializes them): one event
            nursery.start_soon(delete)
            nursery.start_soon(delete)
        assert sorted(answers, key=str) == ["SESSION_DELETED", {"deleted": True}]
        evs = await rt.events(now)
        assert [e.kind for e in evs[n:]] == ["session.deleted"] and evs[-1].project_id == "p1"
        assert (await rt.state(now)).status == "deleted"
        for cmd in (Delete(), Submit("r2", text("more"))):
            with pytest.raises(SessionGone):
                await rt.call(now, cmd)
        ids = rt.ids
    async with runtime_factory(script=CRASHING, extra_tools=[BOOM_REPLAYED], ids=ids) as rt2:
        n = len(await rt2.events(later))
        assert await rt2.call(later, Delete()) == {"deleted": True}
        assert [e.kind for e in (await rt2.events(later))[n:]] == ["session.deleted"]
        st = await rt2.state(later)
        assert st.status == "deleted"
        with pytest.raises(SessionGone):
            await rt2.call(now, Delete())


async def test_a_quarantined_sessions_deletion_is_asked_of_the_log_once(runtime_factory, autojump_clock, monkeypatch):
    """A call that changes a quarantined session asks whether it was deleted (SESSION_DELETED
    then, else SESSION_QUARANTINED). Only a "deleted" was kept, so every call to a quarantined,
    undeleted session read the log again; now the answer is kept either way, and a delete made
    here turns it."""
    async with runtime_factory(script=CRASHING, extra_tools=[BOOM_REPLAYED], max_restarts=3) as rt:
        sid = await quarantined_session(rt)
        with pytest.raises(SessionQuarantined):
            await rt.call(sid, Submit("r2", text("more")))
        reads: list[str] = []
        real = trio.to_thread.run_sync

        async def counting(fn, *args, **kwargs):
            if getattr(fn, "__qualname__", "").startswith("EventStore.read_events"):
                reads.append(fn.__qualname__)
            return await real(fn, *args, **kwargs)

        monkeypatch.setattr(trio.to_thread, "run_sync", counting)
        for n in range(3):
            with pytest.raises(SessionQuarantined):
                await rt.call(sid, Submit(f"r{n + 3}", text("more")))
        assert reads == []
        assert await rt.call(sid, Delete()) == {"deleted": True}
        reads.clear()
        for cmd in (Submit("r9", text("more")), WaitIdle()):
            with pytest.raises(SessionGone):
                await rt.call(sid, cmd)
        assert reads == []


async def test_repeated_failed_replays_quarantine_the_session(runtime_factory, autojump_clock, caplog):
    async with runtime_factory() as rt:
        healthy = await rt.session()
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        await rt.run_to_idle(healthy, "h1", "hello")
        bad_seq = one(await rt.events(sid), "input.submitted").seq
        ids = rt.ids
    corrupt(rt.data_dir, bad_seq)
    async with runtime_factory(ids=ids, max_restarts=3) as rt2:
        with pytest.raises(SessionQuarantined) as err:
            await rt2.call(sid, GetState())
        assert err.value.code == "SESSION_QUARANTINED"
        with pytest.raises(SessionQuarantined):  # answered at once from now on
            await rt2.call(sid, Submit("r2", text("hello?")))
        with pytest.raises(SessionQuarantined):  # its log cannot be read: no view either
            await rt2.call(sid, GetState())
        # Other sessions are unaffected.
        st = await rt2.run_to_idle(healthy, "h2", "still fine")
        assert st.agents["main"].items[-1].text == "(faux) You said: still fine"
    crashes = [r for r in caplog.records if r.name == "lens.supervisor" and sid in r.getMessage()]
    assert len(crashes) == 4  # three restarts, then the failed replay needing a fourth
    with LogReader(rt.data_dir) as reader:
        (row,) = list(reader.rows(session_id=sid, kinds=["session.quarantined"]))
        q = reader.decode(row)
    assert q.session_id == sid and "CorruptEvent" in q.event.reason
    # It carries the session's project like the session's other events (read from the rows'
    # columns: the session's bodies do not all decode), so a stream filtered by project gets it.
    assert q.project_id == "p1"


async def test_a_quarantine_is_recorded_once_across_restarts(runtime_factory, autojump_clock, caplog):
    """A session quarantined because its log cannot be replayed had unfinished work, so every
    start woke it: three more failed replays and one more ``session.quarantined`` per restart.
    Quarantined sessions are not woken at start, and a quarantine the log holds is not recorded
    again when a call finds the replay still failing."""
    async with runtime_factory(script=[FauxTurn(when="nap", tool_calls=[sleep_call(10_000_000)])]) as rt:
        sid = await rt.session()
        with frozen(autojump_clock):
            await rt.submit(sid, "r1", "nap")  # a task left running: work for the next start
            await rt.until(sid, lambda s: s.agents["main"].running_call is not None)
        bad = one(await rt.events(sid), "input.submitted").seq
        ids = rt.ids
    corrupt(rt.data_dir, bad)

    async def quarantines(rt) -> int:
        return len(await rt.store.read_events(session_id=sid, kinds=["session.quarantined"]))

    async with runtime_factory(ids=ids) as rt:  # woken at start: quarantined
        await rt.quarantine_of(sid)
        assert await quarantines(rt) == 1
    for projections in (False, True):  # the log scan, then the sessions projection
        caplog.clear()
        async with runtime_factory(ids=ids, projections=projections) as rt:
            await trio.sleep(100)
            assert sid not in rt.sup.live_sessions
            assert not [r for r in caplog.records if r.name == "lens.supervisor"]  # not woken
            await rt.quarantine_of(sid)  # a call still finds it quarantined
            assert await quarantines(rt) == 1


async def test_unknown_session_is_not_found(rt, autojump_clock):
    with pytest.raises(SessionNotFound) as err:
        await rt.call("ses_nope", GetState())
    assert err.value.code == "SESSION_NOT_FOUND"
    with pytest.raises(SessionNotFound):
        await rt.call("ses_nope", Submit("r1", text("hi")))
    assert await rt.events("ses_nope") == []


@pytest.mark.parametrize("projections", [False, True], ids=["log-scan", "sessions-projection"])
async def test_a_supervisor_started_over_unfinished_work_resumes_it(runtime_factory, autojump_clock, projections):
    script = [FauxTurn(when="long nap", tool_calls=[sleep_call(100_000)])]
    async with runtime_factory(script=script) as rt:
        sid = await rt.session()
        idle_sid = await rt.session()
        with frozen(autojump_clock):
            await rt.submit(sid, "r1", "long nap")
            st = await rt.until(sid, lambda s: s.agents["main"].running_call is not None)
            call_id = st.agents["main"].running_call
            await rt.submit(sid, "r2", "queued behind it")
            before = await rt.events()
        ids = rt.ids
    # The daemon stopped mid-call: tool.started without tool.finished, r2 queued.
    assert [e.kind for e in before if e.session_id == sid][-2:] == ["tool.started", "input.submitted"]
    async with runtime_factory(script=script, ids=ids, projections=projections) as rt2:
        assert rt2.sup.live_sessions == [sid]  # woken at start, before any call
        st = await rt2.idle(sid)
        evs = await rt2.events(sid)
        assert [e.to_json() for e in evs[: len([b for b in before if b.session_id == sid])]] == [
            b.to_json() for b in before if b.session_id == sid]
        # sleep_milliseconds is replay-safe: re-run, not reported as interrupted.
        fin = one(evs, "tool.finished")
        assert (fin.event.call_id, fin.event.status) == (call_id, "ok")
        assert len(by_kind(evs, "tool.started")) == 1
        assert [e.event.input_request_id for e in by_kind(evs, "task.started")] == ["r1", "r2"]
        assert [e.event.status for e in by_kind(evs, "task.finished")] == ["completed", "completed"]
        assert st.inputs["r1"].status == st.inputs["r2"].status == "settled"
        assert idle_sid not in rt2.sup.live_sessions


async def test_an_unknown_session_id_holds_no_actor_after_its_answer(runtime_factory, autojump_clock):
    # A lookup of an id that is not a session answers SESSION_NOT_FOUND and leaves at once,
    # instead of holding an actor (and its memory) for idle_seconds per id asked.
    async with runtime_factory(idle_seconds=300) as rt:
        start = trio.current_time()
        for i in range(50):
            with pytest.raises(SessionNotFound):
                await rt.sup.call(f"ses_unknown_{i}", GetState())
        await trio.sleep(0.001)  # let the actors' tasks finish leaving
        assert not [s for s in rt.sup.live_sessions if s.startswith("ses_unknown_")]
        assert trio.current_time() - start < 1  # no idle wait was needed
        sid = await rt.session()  # a real session still lives on as before
        await rt.run_to_idle(sid, "r1", "hello")
        assert sid in rt.sup.live_sessions


async def test_pending_work_from_the_projection_matches_the_log_scan(tmp_path):
    # The supervisor's start-up question asked two ways: the sessions projection (plus the events
    # it has not projected yet) must find every session the full scan of the log finds.
    def put(sid: str, *events: t._Event) -> list[Draft]:
        return [Draft(ev, project_id="p1", session_id=sid, agent_id="main") for ev in events]

    created = t.SessionCreated(model="faux/echo")
    submitted = t.InputSubmitted(content=[t.TextPart("hi")])
    data = tmp_path / "data"
    async with open_store(data) as store:
        await store.append(*put("running", created, submitted, t.InputPlaced("r"), t.TaskStarted("r")))
        await store.append(*put("queued", created, submitted))
        await store.append(*put("done", created, submitted, t.InputPlaced("r"), t.TaskStarted("r"), t.TaskFinished()))
        await store.append(*put("withdrawn", created, submitted, t.InputWithdrawn("r")))
        # (a quarantined session is never woken at start: its replay failed, or it may run nothing)
        await store.append(*put("quarantined", created, submitted, t.InputPlaced("r"), t.TaskStarted("r"),
                                t.SessionQuarantined(reason="replay failed")))
        service = ProjectionService(data, store)
        sup = Supervisor(ActorDeps(store, None, None, None, None))  # type: ignore[arg-type]  # (the scan reads only the store)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                assert await service.sessions_with_pending_work() == ["queued", "running"]
                assert sorted(await sup.sessions_with_pending_work()) == ["queued", "running"]
                nursery.cancel_scope.cancel()
            # Events past the projected position: "done" gets new work, "running" finishes.
            await store.append(*put("done", submitted))
            await store.append(*put("running", t.TaskFinished()))
            await store.append(*put("idle-chat", created))
            assert sorted(await sup.sessions_with_pending_work()) == ["done", "queued"]
            found = await service.sessions_with_pending_work()  # not caught up: a superset
            assert found == ["done", "queued", "running"]
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)  # caught up again: exact
                assert await service.sessions_with_pending_work() == ["done", "queued"]
                nursery.cancel_scope.cancel()
            service.error = "a stalled projector"  # cannot tell: the supervisor scans the log
            assert await service.sessions_with_pending_work() is None
        finally:
            service.close()


async def test_a_job_without_its_end_is_pending_work_both_ways(tmp_path):
    # A background job the log shows running belongs to a run that a restart ended: its session
    # is woken at start (the actor then records the job lost and reports it).
    def put(sid: str, *events: t._Event) -> list[Draft]:
        return [Draft(ev, project_id="p1", session_id=sid, agent_id="main") for ev in events]

    created = t.SessionCreated(model="faux/echo")
    data = tmp_path / "data"
    async with open_store(data) as store:
        await store.append(*put("job-running", created, t.JobStarted(job_id="job_1", command="sleep 9")))
        await store.append(*put("job-ended", created, t.JobStarted(job_id="job_2", command="true"),
                                t.JobFinished(job_id="job_2", status="exited", exit_code=0)))
        service = ProjectionService(data, store)
        sup = Supervisor(ActorDeps(store, None, None, None, None))  # type: ignore[arg-type]
        try:
            assert await sup.sessions_with_pending_work() == ["job-running"]
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                assert await service.sessions_with_pending_work() == ["job-running"]
                nursery.cancel_scope.cancel()
            await store.append(*put("job-running", t.JobFinished(job_id="job_1", status="lost")))
            await store.append(*put("job-ended", t.JobStarted(job_id="job_3", command="sleep 9")))
            assert await sup.sessions_with_pending_work() == ["job-ended"]
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                assert await service.sessions_with_pending_work() == ["job-ended"]
                nursery.cancel_scope.cancel()
        finally:
            service.close()


async def test_a_defect_reading_a_quarantined_session_is_not_its_quarantine(runtime_factory, autojump_clock,
                                                                              monkeypatch):
    """A quarantined session's reads (its view) caught any exception as SESSION_QUARANTINED, so a
    slip of ours in that read was passed off as the session's state. Only what a broken log's read
    raises (the log's errors, a failing storage) is the quarantine; a defect is raised as itself.
    (That a real corruption still quarantines is test_repeated_failed_replays_quarantine_the_session.)"""
    async with runtime_factory(script=CRASHING, extra_tools=[BOOM_REPLAYED], max_restarts=3) as rt:
        sid = await quarantined_session(rt)
        st = await rt.call(sid, GetState())  # read from the log: it reads whole
        assert st.status == "quarantined"

        # trio's worker-thread hop, through which the store reads, fails as a defect would.
        real = trio.to_thread.run_sync

        async def failing(fn, *args, **kwargs):
            if getattr(fn, "__qualname__", "").startswith("EventStore.read_events"):
                raise AttributeError("a slip of ours")
            return await real(fn, *args, **kwargs)

        monkeypatch.setattr(trio.to_thread, "run_sync", failing)
        with pytest.raises(AttributeError, match="a slip of ours"):
            await rt.call(sid, GetState())
        monkeypatch.setattr(trio.to_thread, "run_sync", real)
        assert (await rt.call(sid, GetState())).status == "quarantined"
