"""A ``revert_call`` the daemon's stop cut off is recorded with the restores it completed.

``revert_call`` is not replay-safe: the session's restart records it interrupted and never runs
it again. Restores it completed on the executor before the stop (each under
``<session>:<call>/<n>``, one after another) changed the workspace: the restart asks the
executor's call journal about them (``Stop`` by each id, whose answer carries a completed call's
reply) and records a ``file.reverted`` of those it completed (``partial`` when not all) in the
write of the interrupted result, so that the state, the file history, a later replay and a
second ``revert_call`` agree with the workspace. Nothing completed: nothing recorded; the
executor out of reach at the restart: the call is recorded interrupted as before, and a warning
names it.

Everything is real: the session actor and its log, the pool, an executor process over gRPC held
at an exact point of a restore (``TEST_HOLD_ENV``, set by a relay in front of it as that restore
passes), the daemon's stop (``stopping``), a restart over the same log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from events import types as t
from proto import executor_pb2 as pb
from runtime.actor import INTERRUPTED_TEXT, Abort, GetState, Submit, WaitIdle
from runtime.executors import ExecutorPool, RemoteExecutor
from tests.executor_hold import held_at

from .conftest import (ExecutorProcess, agent_runtime, executor_held_at, release_held, remote_pool, run_to_idle,
                       running_pool, tool_ctx, tools_by_name, until, wait_path)
from .relay import Relay
from .test_edit_finished_under_abort import events_of, log_of, text_of
from .test_revert_in_part import (EDIT_TWO, SCRIPT, assert_the_rest_reverted, finished_of, restore_held_second, statuses,
                                  with_two_files)

TOOLS = {"more_tools": lambda pool: [EDIT_TWO]}
PART = ("[the revert was applied in part before the call was cut off: b.txt restored; revert_call of call "
        "edit1 again restores the rest]")
WHOLE = "[the revert was applied all the same before the call was cut off: b.txt, a.txt restored]"


async def cut_by_the_stop(tmp_path: Path, relay: Relay, token: str, ws: Path, held: Path, *, abort: bool,
                          held_restore: int) -> str:
    """Session edit1 (a.txt, then b.txt), then revert1 of it, cut off by the daemon's stop while
    the executor holds restore ``held_restore``; with ``abort``, an abort waits for that
    restore's end (Core's ``Stop`` sent) when the stop comes. Returns the session's id once that
    runtime has ended and the held restore has been let go (with the abort, once it completed)."""
    stopping = trio.Event()
    remote = RemoteExecutor(relay.address, token)
    stopped = f"revert1/{held_restore}"
    with trio.fail_after(30):
        async with trio.open_nursery() as helpers:
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote, stopping=stopping, **TOOLS) as (
                    sup, _store, _faux, _pool):
                sid = await sup.create_session("proj")
                await run_to_idle(sup, sid, "r1", "step-edit")
                await sup.call(sid, Submit("r2", [t.TextPart("step-revert-one")], "followUp"))
                await wait_path(held, timeout=20)
                if abort:
                    helpers.start_soon(sup.call, sid, Abort())  # (never answered: the stop cuts it)
                    await until(lambda: f"{sid}:{stopped}" in relay.stops)  # (the abort waits for its end)
                stopping.set()
                if abort:
                    async def release_once_stopped() -> None:
                        release_held(tmp_path)

                    # (runs once this task waits, which it first does leaving the block below: past
                    # the stop's cancel of the actors, which cuts the abort's wait)
                    helpers.start_soon(release_once_stopped)
            if abort:
                await until(lambda: (ws / "a.txt").read_text() == "a\n")  # (the restore completed)
            else:  # (let go once the executor has answered Core's Stop, not once the relay has it:
                # received and not run, the restore then writes nothing, its look finding the stop)
                await until(lambda: f"{sid}:{stopped}" in relay.stops_answered)
                release_held(tmp_path)
            helpers.cancel_scope.cancel()  # (the client's request goes with the stop)
    events = log_of(tmp_path, sid)
    assert [e.kind for e in events if e.kind in ("run.aborted", "file.reverted")
            or (e.kind == "tool.finished" and e.event.call_id == "revert1")] == []
    return sid


@pytest.mark.parametrize("abort", [False, True], ids=["stop", "stop-with-an-abort-waiting"])
async def test_a_revert_the_daemons_stop_cut_off_is_recorded_at_restart_with_the_restores_it_completed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, abort: bool) -> None:
    # The daemon's stop cuts the call while the executor holds its second restore: received and not
    # run (the restore is stopped and writes nothing: b.txt alone restored), or past its look with
    # an abort waiting for its end (the restore completes, and the stop cuts the abort: both).
    point = "before_publish" if abort else "call:restore"
    with executor_held_at(monkeypatch, tmp_path, "nothing yet") as (executor, held):
        ws = with_two_files(executor.workspace)
        with Relay(executor.address, before_call=restore_held_second(tmp_path, point)) as relay:
            sid = await cut_by_the_stop(tmp_path, relay, executor.token, ws, held, abort=abort, held_restore=1)
            assert (ws / "b.txt").read_text() == "b\n" and (ws / "a.txt").read_text() == ("a\n" if abort else "A\n")

            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote, **TOOLS) as (sup, store, _faux, _pool):
                with trio.fail_after(30):
                    await sup.call(sid, WaitIdle())
                state = await sup.call(sid, GetState())
                events = await events_of(store, sid)
            at = finished_of(events, "revert1")
            finished = events[at].event
            # Interrupted, as before, and what it did said first; in its write, right after it, the
            # revert of what was restored (partial when not all).
            assert (finished.status, finished.error_code) == ("interrupted", "INTERRUPTED")
            assert text_of(finished) == f"{WHOLE if abort else PART}\n{INTERRUPTED_TEXT}"
            assert events[at + 1].kind == "file.reverted" and events[at + 1].seq == events[at].seq + 1
            reverted = events[at + 1].event
            assert [e.kind for e in events].count("file.reverted") == 1
            if abort:
                assert (reverted.call_id, reverted.reverted_call_id, reverted.paths, reverted.partial) == (
                    "revert1", "edit1", ["b.txt", "a.txt"], False)
                assert "edit1" not in state.file_edits
                assert statuses(events) == {"a.txt": ("reverted", [True]), "b.txt": ("reverted", [True])}
                async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote, **TOOLS) as (sup, store, _faux, _pool):
                    assert "edit1" not in (await sup.call(sid, GetState())).file_edits  # (a replay agrees)
                return
            assert (reverted.call_id, reverted.reverted_call_id, reverted.paths, reverted.partial) == (
                "revert1", "edit1", ["b.txt"], True)
            assert [e.path for e in state.file_edits["edit1"]] == ["a.txt"]
            assert statuses(events) == {"a.txt": ("modified", [False]), "b.txt": ("reverted", [True])}

            # A second restart's replay agrees, records nothing more, and revert_call of the call
            # again restores the rest.
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote, **TOOLS) as (sup, store, _faux, _pool):
                assert [e.path for e in (await sup.call(sid, GetState())).file_edits["edit1"]] == ["a.txt"]
                state = await run_to_idle(sup, sid, "r3", "step-revert-two")
                events = await events_of(store, sid)
    assert [e.kind for e in events].count("file.reverted") == 2
    assert_the_rest_reverted(ws, events, state)


async def test_a_revert_the_daemons_stop_cut_off_before_any_restore_records_nothing_but_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with executor_held_at(monkeypatch, tmp_path, "nothing yet") as (executor, held):
        ws = with_two_files(executor.workspace)
        with Relay(executor.address, before_call=restore_held_second(tmp_path, "call:restore", n=0)) as relay:
            sid = await cut_by_the_stop(tmp_path, relay, executor.token, ws, held, abort=False, held_restore=0)
            asked = len(relay.stops)
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=RemoteExecutor(relay.address, executor.token),
                                     **TOOLS) as (sup, store, _faux, _pool):
                with trio.fail_after(30):
                    await sup.call(sid, WaitIdle())
                state = await sup.call(sid, GetState())
                events = await events_of(store, sid)
            assert relay.stops[asked:] == [f"{sid}:revert1/0"]  # (the first restore unknown: no more asked)
    assert (ws / "a.txt").read_text() == "A\n" and (ws / "b.txt").read_text() == "B\n"
    finished = events[finished_of(events, "revert1")].event
    assert (finished.status, finished.error_code, text_of(finished)) == ("interrupted", "INTERRUPTED",
                                                                         INTERRUPTED_TEXT)
    assert "file.reverted" not in [e.kind for e in events]
    assert [e.path for e in state.file_edits["edit1"]] == ["a.txt", "b.txt"]


async def test_a_revert_cut_off_whose_executor_is_out_of_reach_at_restart_is_recorded_interrupted_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with executor_held_at(monkeypatch, tmp_path, "nothing yet") as (executor, held):
        ws = with_two_files(executor.workspace)
        with Relay(executor.address, before_call=restore_held_second(tmp_path, "call:restore")) as relay:
            sid = await cut_by_the_stop(tmp_path, relay, executor.token, ws, held, abort=False, held_restore=1)
            gone = relay.address
    # (the relay is closed: nothing listens at its address any more)
    with caplog.at_level(logging.WARNING):
        async with agent_runtime(tmp_path, ws, SCRIPT, remote=RemoteExecutor(gone, executor.token),
                                 **TOOLS) as (sup, store, _faux, _pool):
            with trio.fail_after(30):
                await sup.call(sid, WaitIdle())
            events = await events_of(store, sid)
    finished = events[finished_of(events, "revert1")].event
    assert (finished.status, finished.error_code, text_of(finished)) == ("interrupted", "INTERRUPTED",
                                                                         INTERRUPTED_TEXT)
    assert "file.reverted" not in [e.kind for e in events]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "revert1" in r.getMessage()]
    assert len(warned) == 1 and f"call {sid}:revert1 (revert_call)" in warned[0], warned
    assert "could not be reached" in warned[0], warned


async def test_an_abort_while_the_restart_asks_records_the_restores_confirmed_by_then(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # revert1 cut off while the executor holds restore /1 (b.txt restored); at the restart /0 is
    # confirmed, the Stop asking about /1 is held, and an abort comes: its record carries the revert
    # of b.txt found by then.
    with executor_held_at(monkeypatch, tmp_path, "nothing yet") as (executor, held):
        ws = with_two_files(executor.workspace)
        with Relay(executor.address, before_call=restore_held_second(tmp_path, "call:restore")) as relay:
            sid = await cut_by_the_stop(tmp_path, relay, executor.token, ws, held, abort=False, held_restore=1)
            second = f"{sid}:revert1/1"
            asked = relay.stops.count(second)
            relay.hold_stop = lambda run_id: run_id == second
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=RemoteExecutor(relay.address, executor.token),
                                     **TOOLS) as (sup, store, _faux, _pool):
                with trio.fail_after(30):
                    await until(lambda: relay.stops.count(second) > asked)  # (/0 answered, /1 held)
                    assert (await sup.call(sid, Abort()))["aborted"]
                    await sup.call(sid, WaitIdle())
                state = await sup.call(sid, GetState())
                events = await events_of(store, sid)
            assert relay.stops[-2:] == [f"{sid}:revert1/0", second] and not relay.held_past
    assert (ws / "a.txt").read_text() == "A\n" and (ws / "b.txt").read_text() == "b\n"
    at = finished_of(events, "revert1")
    finished = events[at].event
    assert (finished.status, finished.error_code) == ("interrupted", "ABORTED")
    assert text_of(finished).startswith(PART), text_of(finished)
    assert events[at + 1].kind == "file.reverted" and events[at + 1].seq == events[at].seq + 1
    reverted = events[at + 1].event
    assert (reverted.call_id, reverted.reverted_call_id, reverted.paths, reverted.partial) == (
        "revert1", "edit1", ["b.txt"], True)
    assert [e.kind for e in events].count("file.reverted") == 1 and "run.aborted" in [e.kind for e in events]
    assert [e.path for e in state.file_edits["edit1"]] == ["a.txt"]
    assert statuses(events) == {"a.txt": ("modified", [False]), "b.txt": ("reverted", [True])}


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """Trio's clock running as real time does, which the test moves on past a bound at once."""
    return trio.testing.MockClock(rate=1)


async def test_a_restart_with_the_local_executor_records_the_restores_confirmed_however_long_it_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: trio.testing.MockClock) -> None:
    # The default executor, the pool's own child: revert1's first restore (b.txt) is held past its
    # look until the daemon's stop has cut the call, then completes; the second is never sent. The
    # restart starts a child cold, which takes longer than the asks' bound (held before it
    # listens, the clock moved on 5 s): it is not given up, and b.txt's restore is confirmed.
    held = held_at(monkeypatch, tmp_path, "nothing yet")
    hold = tmp_path / "hold"
    ws = with_two_files(tmp_path / "ws")
    stopping = trio.Event()
    with trio.fail_after(60):
        async with trio.open_nursery() as helpers:
            async with agent_runtime(tmp_path, ws, SCRIPT, stopping=stopping, **TOOLS) as (sup, _store, _faux, _pool):
                sid = await sup.create_session("proj")
                await run_to_idle(sup, sid, "r1", "step-edit")
                hold.write_text("before_publish")  # (the next write to reach it: revert1's restore /0)
                await sup.call(sid, Submit("r2", [t.TextPart("step-revert-one")], "followUp"))
                await wait_path(held, timeout=20)
                stopping.set()

                async def release_once_stopped() -> None:
                    release_held(tmp_path)

                # (runs once this task waits, which it first does leaving the block: past the stop's
                # cancel of the actors, whose wait for the restore's end it lets go)
                helpers.start_soon(release_once_stopped)
    assert (ws / "b.txt").read_text() == "b\n" and (ws / "a.txt").read_text() == "A\n"
    assert "revert1" not in [getattr(e.event, "call_id", None) for e in log_of(tmp_path, sid)
                             if e.kind == "tool.finished"]
    held.unlink()
    Path(f"{hold}.release").unlink()
    hold.write_text("before_listening")  # (the restart's child holds before it listens)

    async def start_slowly() -> None:
        await wait_path(held, timeout=20)
        clock.jump(5)  # (past the asks' bound, well within the pool's own for a start)
        release_held(tmp_path)

    async with agent_runtime(tmp_path, ws, SCRIPT, **TOOLS) as (sup, store, _faux, _pool):
        with trio.fail_after(60):
            async with trio.open_nursery() as helpers:
                helpers.start_soon(start_slowly)
                await sup.call(sid, WaitIdle())
        events = await events_of(store, sid)
    at = finished_of(events, "revert1")
    finished = events[at].event
    assert (finished.status, finished.error_code) == ("interrupted", "INTERRUPTED")
    assert text_of(finished) == f"{PART}\n{INTERRUPTED_TEXT}"
    reverted = events[at + 1].event
    assert events[at + 1].kind == "file.reverted" and (reverted.paths, reverted.partial) == (["b.txt"], True)
    assert statuses(events) == {"a.txt": ("modified", [False]), "b.txt": ("reverted", [True])}


def asked_at_restart(pool: ExecutorPool, tmp_path: Path) -> Callable[[], Awaitable[list[t._Event]]]:
    """``revert_call``'s ask at a restart (its ``completed_when_interrupted``) about call revert1 of
    session ses_r, whose target edit1 edited b.txt, over ``pool``'s project p."""
    spec = tools_by_name(pool, tmp_path / "artifacts")["revert_call"]
    edit = t.FileEdited(call_id="edit1", path="b.txt", before_sha256="0" * 64, after_sha256="1" * 64)
    ctx = tool_ctx("ses_r", "revert1", file_edits=lambda cid: [edit] if cid == "edit1" else [])
    assert spec.completed_when_interrupted is not None
    ask = spec.completed_when_interrupted
    return lambda: ask('{"call_id": "edit1"}', ctx)


async def test_a_restart_whose_stop_cannot_be_sent_records_nothing_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A closed channel fails the Stop with a bare ValueError: not confirmed, never the actor's crash.
    ws = with_two_files(tmp_path / "ws")
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        (await pool.get("p")).client.close()
        with caplog.at_level(logging.WARNING), trio.fail_after(10):
            assert await asked_at_restart(pool, tmp_path)() == []
    warned = [r.getMessage() for r in caplog.records if "revert1" in r.getMessage()]
    assert len(warned) == 1 and "(0 of 1)" in warned[0] and "could not be asked about them" in warned[0], warned
    assert "ValueError(" in warned[0], warned


async def test_a_restart_whose_stop_answer_cannot_be_read_records_nothing_and_says_why(
        tmp_path: Path, executor: ExecutorProcess, caplog: pytest.LogCaptureFixture) -> None:
    # The answer carries a completed call whose reply is no JSON object: logged, and not confirmed.
    def unreadable(reply: pb.StopReply) -> pb.StopReply:
        return pb.StopReply(found=False, ended=True, call=pb.ToolReply(ok=True, result_json="not json"))

    with Relay(executor.address, stop_reply=unreadable) as relay:
        async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
            with caplog.at_level(logging.WARNING), trio.fail_after(10):
                assert await asked_at_restart(pool, tmp_path)() == []
        assert relay.stops == ["ses_r:revert1/0"]
    warned = [r.getMessage() for r in caplog.records if "revert1" in r.getMessage()]
    assert len(warned) == 1 and "cannot be read" in warned[0], warned
