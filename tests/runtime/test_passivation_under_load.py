"""F-ACT-1 under load: inputs that arrive as an actor passivates, the mailbox at its bound, and
a thousand sessions woken at once — each against the log (every input recorded once and
answered, every woken state equal to its full replay)."""

from __future__ import annotations

import trio
import trio.testing

from conftest import by_kind, frozen, text
from events import types as t
from events.store import Draft
from projections.session_state import SessionState, fold
from runtime.actor import Submit
from runtime.supervisor import MAILBOX

from test_supervisor import full_replay, passivate

IDLE = 5.0


async def test_inputs_arriving_as_the_actor_passivates_are_each_recorded_once_and_run(runtime_factory, autojump_clock):
    """The input lands before, at and after the idle deadline (same virtual instant included):
    it either reaches the actor about to leave, or finds the mailbox closed and wakes a new one."""
    async with runtime_factory(idle_seconds=IDLE) as rt:
        sid = await rt.session()
        offsets = [IDLE - 0.001, IDLE, IDLE, IDLE + 0.001, IDLE, IDLE * 2]
        answers = []
        for i, offset in enumerate(offsets * 4):
            await rt.run_to_idle(sid, f"w{i}", f"wake {i}")  # the idle timer starts again
            await trio.sleep(offset)
            answers.append(await rt.submit(sid, f"r{i}", f"input {i}"))
        await rt.idle(sid)
        events = await rt.events(sid)
        submitted = [e.request_id for e in by_kind(events, "input.submitted")]
        assert sorted(submitted) == sorted({*submitted}) and len(submitted) == 2 * len(offsets * 4)
        placed = [e.event.input_request_id for e in by_kind(events, "input.placed")]
        assert sorted(placed) == sorted(submitted)  # each run once
        seqs = {e.request_id: e.seq for e in by_kind(events, "input.submitted")}
        assert all(a["seq"] == seqs[f"r{i}"] and not a["duplicate"] for i, a in enumerate(answers))
        assert await rt.state(sid) == await full_replay(rt, sid)
        await passivate(rt, sid)
        assert await rt.state(sid) == await full_replay(rt, sid)


async def test_the_mailbox_holds_its_bound_and_callers_past_it_wait_for_room(runtime_factory, autojump_clock):
    """Documented (F-ACT-1, "Audit: sessions and actors"): the mailbox holds MAILBOX commands;
    a caller past that waits for room rather than failing, and every caller is answered."""
    async with runtime_factory(idle_seconds=IDLE) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r0", "hello")
        await passivate(rt, sid)
        for callers in (MAILBOX, MAILBOX + 1):
            answers: list[object] = []

            async def ask(i: int) -> None:
                answers.append(await rt.call(sid, Submit(f"m{callers}-{i}", text(f"in {i}"), "followUp")))

            # The woken actor cannot start serving while its snapshot read waits for this limiter.
            async with trio.open_nursery() as nursery:
                async with rt.deps.snapshot_limiter:
                    for i in range(callers):
                        nursery.start_soon(ask, i)
                    await trio.testing.wait_all_tasks_blocked()
                    stats = rt.sup._actors[sid].send.statistics()
                    assert stats.current_buffer_used == MAILBOX
                    assert stats.tasks_waiting_send == callers - MAILBOX
            assert len(answers) == callers
            await rt.idle(sid)
            await passivate(rt, sid)
        events = await rt.events(sid)
        submitted = [e.request_id for e in by_kind(events, "input.submitted")]
        assert len(submitted) == 1 + MAILBOX + MAILBOX + 1 == len(set(submitted))
        assert len(by_kind(events, "input.placed")) == len(submitted)


async def test_a_thousand_sessions_woken_at_once_each_equal_their_full_replay(runtime_factory, autojump_clock):
    """All live at once (none passivates meanwhile), each from its snapshot or its whole log."""
    async with runtime_factory(idle_seconds=IDLE, snapshot_every=7) as rt:
        # Logs written as the actor writes them, some long enough for a snapshot of their own.
        sids = [f"ses_{n:04d}" for n in range(1000)]

        async def write(n: int, sid: str) -> None:
            await rt.store.append(Draft(t.SessionCreated(model="faux/faux-1"), project_id="p1", session_id=sid))
            for k in range(n % 4):  # (one request id per append)
                task = dict(project_id="p1", session_id=sid, task_id=f"task_{k}")
                await rt.store.append(
                    Draft(t.InputSubmitted(content=text(f"{sid} {k}")), project_id="p1", session_id=sid,
                          request_id=f"r{k}"),
                    Draft(t.TaskStarted(input_request_id=f"r{k}"), **task),
                    Draft(t.InputPlaced(input_request_id=f"r{k}"), **task), Draft(t.TaskFinished(), **task))

        async with trio.open_nursery() as nursery:
            for n, sid in enumerate(sids):
                nursery.start_soon(write, n, sid)
        # Half of them were woken before and left a snapshot behind.
        for sid in sids[::2]:
            await rt.state(sid)
        for sid in sids[::2]:
            await passivate(rt, sid)
        assert rt.sup.live_sessions == []
        woken: dict[str, SessionState] = {}

        async def wake(sid: str) -> None:
            woken[sid] = await rt.state(sid)

        with frozen(autojump_clock):  # (none passivates again while the others wake)
            async with trio.open_nursery() as nursery:
                for sid in sids:
                    nursery.start_soon(wake, sid)
            assert len(rt.sup.live_sessions) == 1000
        everything = await rt.events()
        for sid in sids:
            assert woken[sid] == fold(SessionState(sid), [e for e in everything if e.session_id == sid]), sid
            assert [it.text for it in woken[sid].agents["main"].items] == [f"{sid} {k}" for k in range(int(sid[-4:]) % 4)]
        # The wake-ups queued their snapshots behind the limiter's one thread, in order: once it is
        # ours, every snapshot queued before is written (the check read it while hundreds waited).
        await trio.testing.wait_all_tasks_blocked()
        async with rt.deps.snapshot_limiter:
            pass
        assert await trio.to_thread.run_sync(rt.snapshots.load, sids[3]) is not None  # (13 events: snapshotted)
