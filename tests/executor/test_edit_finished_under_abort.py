"""An edit that completes on the executor while its session's abort waits for its end is in the
session's log: its ``file.edited`` (with the copies ``revert_call`` restores from) is recorded
with the abort, after the call's ``tool.finished``, which still says the call was aborted and
that the edit was applied. The executor's ``Stop`` answer carries the call's reply, from its call
journal. An edit the abort kept from writing records nothing; an executor built before the
answer carried it leaves the record as it was (the change is not recorded). A program's edit cut
off by the program's own time limit is recorded with the program's result; an edit whose reply
had reached Core when the abort came is recorded with the abort too. An edit the daemon's stop
cut off (its abort cut while it waited, or the call itself) records nothing, and its copies are
not held past the actor; the call run again at the next start records it.

Everything is real: the session actor and its log, the pool, an executor process over gRPC held
at an exact point of the edit (``TEST_HOLD_ENV``), a relay in front of it that records the
``Stop`` Core sends (and, for an older executor, takes the new field off its answer).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
import trio

from events import types as t
from events.reader import LogReader
from events.store import EventStore
from proto import executor_pb2 as pb
from runtime import executor_client
from runtime.actor import Abort, GetState, Submit, WaitIdle
from runtime.decide import ABORTED_TEXT
from runtime.executor_client import ExecutorClient, ExecutorToolError
from runtime.executors import RemoteExecutor
from runtime.providers.faux import FauxToolCall, FauxTurn
from runtime.supervisor import Supervisor
from tests.unwritable import unwritable
from tools.artifacts import ArtifactStore
from tools.base import ToolContext, ToolResult, ToolSpec
from tools.ptc.interpreter import run_program

from .conftest import (ExecutorProcess, agent_runtime, cut_off_when_held, executor_held_at, release_held, remote_pool,
                       start_executor, stop_process, temp_files, tool_ctx, tools_by_name, until, until_ended,
                       wait_path)
from .relay import Relay

EDIT = FauxToolCall("edit_file", {"path": "f.txt", "mode": "edit",
                                  "edits": [{"old_string": "a", "new_string": "ab"}]}, call_id="edit1")
REVERT = FauxToolCall("revert_call", {"call_id": "edit1"}, call_id="revert1")
SCRIPT = [FauxTurn(when="please edit", tool_calls=[EDIT]), FauxTurn(when="please revert", tool_calls=[REVERT]),
          FauxTurn(text="done")]


async def events_of(store: EventStore, sid: str) -> list[Any]:
    return await store.read_events(after=0, limit=10_000, session_id=sid)


def without_call(reply: pb.StopReply) -> pb.StopReply:
    """A ``Stop`` answer as an executor built before ``StopReply.call`` sends it."""
    reply.ClearField("call")
    return reply


async def abort_while_held(sup: Any, sid: str, relay: Relay, held: Path, stopped: str = "edit1", *,
                           submit: tuple[str, str] = ("r1", "please edit it")) -> None:
    """Submit the edit (``submit``: the input's request id and text), abort the session once the
    executor holds it, and let the held call go on once Core has sent its ``Stop`` by
    ``<sid>:<stopped>`` (the abort waits for the call's end, holding the lock)."""
    await sup.call(sid, Submit(submit[0], [t.TextPart(submit[1])], "followUp"))
    answers: list[Any] = []

    async def abort() -> None:
        answers.append(await sup.call(sid, Abort()))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:  # (the abort gives the call up: Core asks its end)
            await cut_off_when_held(relay, held, f"{sid}:{stopped}", lambda: nursery.start_soon(abort), timeout=30)
    assert answers[0]["aborted"] is True
    await sup.call(sid, WaitIdle())


def text_of(finished: t.ToolFinished) -> str:
    return "\n".join(p.text for p in finished.content if isinstance(p, t.TextPart))


APPLIED = "[the edit was applied all the same before the call was cut off: f.txt changed; revert_call can undo it]"


@pytest.mark.parametrize("older_executor", [False, True])
async def test_an_edit_that_wrote_while_its_abort_waited_is_recorded_and_can_be_reverted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, older_executor: bool) -> None:
    with executor_held_at(monkeypatch, tmp_path) as (executor, held):  # (past its look: it writes)
        ws = executor.workspace
        with Relay(executor.address, stop_reply=without_call if older_executor else None) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote) as (sup, store, _faux, _pool):
                sid = await sup.create_session("proj")
                await abort_while_held(sup, sid, relay, held)
                events = await events_of(store, sid)
            assert (ws / "f.txt").read_text() == "ab\n"  # the edit reached the file
            kinds = [e.kind for e in events]
            finished_at = next(i for i, e in enumerate(events)
                               if e.kind == "tool.finished" and e.event.call_id == "edit1")
            finished = events[finished_at].event
            # The call's result says it was aborted, as before, and that its edit was applied (the
            # model would make it again otherwise) when that is known.
            assert (finished.status, finished.error_code) == ("interrupted", "ABORTED"), finished
            edited = [e.event for e in events if e.kind == "file.edited"]
            if older_executor:  # (no reply in the answer: nothing known of the change, as before)
                assert edited == [] and "artifact.stored" not in kinds
                assert text_of(finished) == ABORTED_TEXT
                return
            assert text_of(finished) == f"{APPLIED}\n{ABORTED_TEXT}"
            # Right after the aborted tool.finished, in the abort's write: the two copies, then the edit.
            assert kinds[finished_at + 1:finished_at + 4] == ["artifact.stored", "artifact.stored", "file.edited"]
            seqs = [events[i].seq for i in range(finished_at, finished_at + 4)]
            assert seqs == list(range(seqs[0], seqs[0] + 4))
            assert len(edited) == 1
            edit = edited[0]
            assert (edit.call_id, edit.path, edit.tool, edit.written_path) == ("edit1", "f.txt", "edit_file", "f.txt")
            stored = {e.event.artifact_id for e in events if e.kind == "artifact.stored"}
            assert {edit.before_artifact_id, edit.after_artifact_id} == stored
            assert all((tmp_path / "data" / "artifacts" / aid).read_bytes() in (b"a\n", b"ab\n") for aid in stored)

            # Replay rebuilds it: a daemon started again over the log knows the edit, and reverts it.
            async with agent_runtime(tmp_path, ws, SCRIPT[1:], remote=remote) as (sup, store, _faux, _pool):
                state = await sup.call(sid, GetState())
                assert [e.after_sha256 for e in state.file_edits["edit1"]] == [edit.after_sha256]
                await sup.call(sid, Submit("r2", [t.TextPart("please revert it")], "followUp"))
                await sup.call(sid, WaitIdle())
                events = await events_of(store, sid)
            reverted = [e.event for e in events if e.kind == "tool.finished" and e.event.call_id == "revert1"]
            assert len(reverted) == 1 and not reverted[0].is_error, reverted
            assert (ws / "f.txt").read_text() == "a\n"


async def test_an_edit_that_wrote_while_its_abort_waited_on_a_full_disk_is_said_applied_and_not_undoable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The copies revert_call restores from cannot be stored (the artifacts' directory refuses new
    # files, as a full disk does): no file.edited without them, but the result still says the
    # edit was applied, and that revert_call cannot undo it, as a call not cut off says.
    artifacts_dir = tmp_path / "data" / "artifacts"
    artifacts_dir.mkdir(parents=True)
    with executor_held_at(monkeypatch, tmp_path) as (executor, held):
        ws = executor.workspace
        with Relay(executor.address) as relay, unwritable(artifacts_dir):
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote) as (sup, store, _faux, _pool):
                sid = await sup.create_session("proj")
                await abort_while_held(sup, sid, relay, held)
                events = await events_of(store, sid)
        assert (ws / "f.txt").read_text() == "ab\n"
        [finished] = [e.event for e in events if e.kind == "tool.finished" and e.event.call_id == "edit1"]
        assert (finished.status, finished.error_code) == ("interrupted", "ABORTED"), finished
        assert text_of(finished) == (
            "[the edit was applied all the same before the call was cut off: f.txt changed, but the copies "
            "revert_call restores from could not be stored; revert_call cannot undo it]\n" + ABORTED_TEXT)
        assert [e for e in events if e.kind in ("file.edited", "artifact.stored")] == []
        assert list(artifacts_dir.iterdir()) == []


async def test_an_edit_the_abort_kept_from_writing_records_no_file_edited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with executor_held_at(monkeypatch, tmp_path, "call:edit_file") as (executor, held):  # (received, before its look)
        ws = executor.workspace
        with Relay(executor.address) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote) as (sup, store, _faux, pool):
                sid = await sup.create_session("proj")
                await abort_while_held(sup, sid, relay, held)
                await until_ended((await pool.get("proj")).client, f"{sid}:edit1")  # (it went on, found the stop)
                events = await events_of(store, sid)
        finished = [e.event for e in events if e.kind == "tool.finished" and e.event.call_id == "edit1"]
        assert [(f.status, f.error_code) for f in finished] == [("interrupted", "ABORTED")]
        assert [e for e in events if e.kind in ("file.edited", "artifact.stored")] == []
        assert (ws / "f.txt").read_text() == "a\n" and temp_files(ws) == []


async def test_a_stop_answer_carries_the_reply_of_the_editing_call_that_completed_by_its_id(
        client: ExecutorClient, workspace: Path) -> None:
    (workspace / "stopped.txt").write_text("one\n")
    edit = {"path": "stopped.txt", "mode": "edit", "edits": [{"old_string": "one", "new_string": "two"}]}
    await client.call("edit_file", edit, call_id="ses_f:done")
    reply = await client.stop("ses_f:done", 5)  # (ended before its Stop: its journal record answers)
    assert not reply.found and reply.HasField("call")
    assert (reply.call.ok, reply.call.before, reply.call.after, reply.call.written_path) == (
        True, b"one\n", b"two\n", b"stopped.txt")
    assert '"changed": true' in reply.call.result_json
    # A call that failed, an id no call ran under, a command's run id: no reply.
    with pytest.raises(ExecutorToolError):
        await client.call("edit_file", {**edit, "edits": [{"old_string": "none", "new_string": "x"}]},
                          call_id="ses_f:failed")
    async with client.run("true", run_id="ses_f:command") as stream:
        async for _ in stream:
            pass
    for id_ in ("ses_f:failed", "ses_f:never", "ses_f:command"):
        assert not (await client.stop(id_, 5)).HasField("call"), id_


async def test_an_edit_past_its_deadline_that_wrote_while_core_waited_answers_as_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Core's call gives up at its deadline (shortened here, 120 s otherwise: the edit's is the only
    # call the executor gets), then waits for the call's end; the call, past its look, writes:
    # its result is the reply the Stop carries.
    monkeypatch.setattr(executor_client, "CALL_TIMEOUT_S", 1.0)
    with executor_held_at(monkeypatch, tmp_path) as (executor, held):
        with Relay(executor.address) as relay:
            async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
                edit = tools_by_name(pool, tmp_path / "artifacts")["edit_file"]
                results: list[Any] = []
                with trio.fail_after(30):
                    async with trio.open_nursery() as nursery:
                        async def run() -> None:
                            results.append(await edit.run({"path": "f.txt", "mode": "rewrite", "content": "b\n"},
                                                          tool_ctx("ses_d", "c1")))

                        nursery.start_soon(run)
                        await cut_off_when_held(relay, held, "ses_d:c1")  # (cut off by its deadline)
        result = results[0]
        assert not result.is_error and result.structured_content["changed"] is True, result.content
        edited = [e for e in result.events if isinstance(e, t.FileEdited)]
        assert [(e.path, e.before_sha256 is not None) for e in edited] == [("f.txt", True)]
        assert (executor.workspace / "f.txt").read_text() == "b\n"


async def test_a_programs_edit_that_wrote_while_its_abort_waited_is_recorded_under_the_programs_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A program's call goes through the actor's call_tool (as programmatic_tool_run's calls do):
    # its edit is recorded under the program's own call id, as its finished edits are.
    async def program(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        assert ctx.call_tool is not None
        return await ctx.call_tool(f"{ctx.call_id}.1", "edit_file", EDIT.arguments)

    prog = ToolSpec("prog", "runs one edit as a program's call", {"type": "object"}, program, read_only=False)
    script = [FauxTurn(when="please edit", tool_calls=[FauxToolCall("prog", {}, call_id="edit1")])]
    with executor_held_at(monkeypatch, tmp_path) as (executor, held):
        ws = executor.workspace
        with Relay(executor.address) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, script, remote=remote, more_tools=lambda pool: [prog]) as (
                    sup, store, _faux, _pool):
                sid = await sup.create_session("proj")
                await abort_while_held(sup, sid, relay, held, stopped="edit1.1")
                state = await sup.call(sid, GetState())
                events = await events_of(store, sid)
        kinds = [e.kind for e in events]
        at = next(i for i, e in enumerate(events) if e.kind == "tool.finished" and e.event.call_id == "edit1")
        assert (events[at].event.status, events[at].event.error_code) == ("interrupted", "ABORTED")
        assert kinds[at + 1:at + 4] == ["artifact.stored", "artifact.stored", "file.edited"]
        assert events[at + 3].event.call_id == "edit1"  # (the program's call)
        assert [e.after_sha256 for e in state.file_edits["edit1"]] == [events[at + 3].event.after_sha256]
        assert (ws / "f.txt").read_text() == "ab\n"


# The program's time limit, passed by a jump of the clock (shorter than every other bound the
# jump passes over: the runtime's 60 s, the call's own deadline).
TIME_LIMIT_S = 10.0


@pytest.mark.parametrize("result_fits", [True, False])
async def test_a_programs_edit_cut_off_by_its_own_time_limit_is_recorded_with_the_programs_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock, result_fits: bool) -> None:
    # No abort: the program's time limit (the interpreter's own deadline) cancels its edit_file
    # while the executor holds it past its look; the edit completes while Core waits for its end.
    # The program's result (PTC_TIMEOUT) is followed by the copies and the file.edited, in its
    # write, and says the edit was applied; no copy stays held once it is recorded. A result the
    # log cannot hold (past maxEventBytes) is recorded as RESULT_NOT_RECORDED, which says so too.
    # The limit is passed once the executor holds the edit (the clock jumped to it), not on a
    # real-time bound the edit might not reach the hold within on a loaded machine.
    mock_clock.rate = 1.0  # (the pool, the executor's waits: real time)
    async def program(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        assert ctx.call_tool is not None
        call_tool = ctx.call_tool

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            return (await call_tool(f"{ctx.call_id}.1", name, arguments)).structured_content

        code = 'edit_file(path="f.txt", mode="edit", edits=[{"old_string": "a", "new_string": "ab"}])'
        outcome = await run_program(code, call, ["edit_file"], deadline=trio.current_time() + TIME_LIMIT_S)
        assert outcome.error is not None
        return ToolResult.error(outcome.error.code, outcome.error.message + ("" if result_fits else "x" * 70_000))

    prog = ToolSpec("prog", "runs an edit as a timed program", {"type": "object"}, program, read_only=False)
    artifacts = ArtifactStore(tmp_path / "data" / "artifacts")
    script = [FauxTurn(when="please edit", tool_calls=[FauxToolCall("prog", {}, call_id="p1")]), FauxTurn(text="ok")]
    with executor_held_at(monkeypatch, tmp_path) as (executor, held):
        ws = executor.workspace
        with Relay(executor.address) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, script, remote=remote, artifacts=artifacts,
                                     more_tools=lambda pool: [prog], max_event_bytes=65536) as (
                    sup, store, _faux, _pool):
                sid = await sup.create_session("proj")
                await sup.call(sid, Submit("r1", [t.TextPart("please edit it")], "followUp"))
                await cut_off_when_held(relay, held, f"{sid}:p1.1", lambda: mock_clock.jump(TIME_LIMIT_S),
                                        timeout=30)  # (its time limit passes once it is held)
                with trio.fail_after(30):
                    await sup.call(sid, WaitIdle())
                state = await sup.call(sid, GetState())
                events = await events_of(store, sid)
                held_on = artifacts.held_for_good()  # (while the actor lives: its end lets go too)
        kinds = [e.kind for e in events]
        at = next(i for i, e in enumerate(events) if e.kind == "tool.finished" and e.event.call_id == "p1")
        finished = events[at].event
        assert (finished.status, finished.error_code) == (
            "error", "PTC_TIMEOUT" if result_fits else "RESULT_NOT_RECORDED"), finished
        assert text_of(finished).endswith(f"\n{APPLIED}"), text_of(finished)
        assert kinds[at + 1:at + 4] == ["artifact.stored", "artifact.stored", "file.edited"]
        assert events[at + 3].seq == events[at].seq + 3  # (in the result's write)
        edit = events[at + 3].event
        assert (edit.call_id, edit.path) == ("p1", "f.txt")
        assert [e.after_sha256 for e in state.file_edits["p1"]] == [edit.after_sha256]
        assert (ws / "f.txt").read_text() == "ab\n"
        assert held_on == set() == artifacts.held_for_good()  # (named now: no hold is left behind)


async def test_a_sweep_between_the_calls_lease_end_and_the_aborts_record_leaves_the_copies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The call's lease ends (its task is over) before the abort records the copies: a sweep
    # then (the daemon sweeps soon after a lease ends unrecorded, as here) finds them named by
    # nothing, and must leave them; the abort names them, and no hold outlives it.
    artifacts = ArtifactStore(tmp_path / "data" / "artifacts")
    swept: list[tuple[list[str], list[str]]] = []

    def sweep() -> None:  # (every artifact, none named yet: only the holds keep them)
        names = artifacts.leftovers(2 ** 62).artifacts
        kept, failed = artifacts.remove(names)
        assert failed == []
        swept.append((names, kept))

    artifacts.on_orphans(sweep)
    with executor_held_at(monkeypatch, tmp_path) as (executor, held):
        ws = executor.workspace
        with Relay(executor.address) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote, artifacts=artifacts) as (
                    sup, store, _faux, _pool):
                sid = await sup.create_session("proj")
                await abort_while_held(sup, sid, relay, held)
                events = await events_of(store, sid)
                held_on = artifacts.held_for_good()  # (while the actor lives: its end lets go too)
        stored = {e.event.artifact_id for e in events if e.kind == "artifact.stored"}
        edited = [e.event for e in events if e.kind == "file.edited"]
        assert len(stored) == 2 and [(e.before_artifact_id, e.after_artifact_id) for e in edited] == [
            (edited[0].before_artifact_id, edited[0].after_artifact_id)] and edited[0].after_artifact_id in stored
        assert swept and all(set(names) == stored and set(kept) == stored for names, kept in swept), swept
        assert {artifacts.get(aid) for aid in stored} == {b"a\n", b"ab\n"}  # (still there, whole)
        assert held_on == set() == artifacts.held_for_good()


COPIES = {hashlib.sha256(b"a\n").hexdigest(), hashlib.sha256(b"ab\n").hexdigest()}  # (f.txt before and after)


def log_of(tmp_path: Path, sid: str) -> list[Any]:
    """The session's events, read from the log once its runtime has ended."""
    with LogReader(tmp_path / "data") as log:
        return list(log.events(session_id=sid))


def taken_by_a_sweep(artifacts: ArtifactStore) -> set[str]:
    """What a sweep now finds in the store and takes (every artifact: none is named), and it
    takes all it finds (none held)."""
    names = artifacts.leftovers(2 ** 62).artifacts
    assert artifacts.remove(names) == ([], [])
    return set(names)


@dataclass
class HeldEdit:
    """An executor of its own holding the session's edit past its look (:func:`executor_held_at`),
    the relay in front of it recording Core's ``Stop``, the project's executor reached through the
    relay, and the store of the copies, as the daemon's (the actors' leases on)."""

    executor: ExecutorProcess
    held: Path
    relay: Relay
    remote: RemoteExecutor
    artifacts: ArtifactStore


@contextmanager
def edit_held_behind_a_relay(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HeldEdit]:
    """A :class:`HeldEdit` over ``tmp_path`` (its log and copies in ``data``); the relay and the
    executor stopped when the block ends, whatever happened."""
    artifacts = ArtifactStore(tmp_path / "data" / "artifacts")
    with executor_held_at(monkeypatch, tmp_path) as (executor, held), Relay(executor.address) as relay:
        yield HeldEdit(executor, held, relay, RemoteExecutor(relay.address, executor.token), artifacts)


@asynccontextmanager
async def stopping_daemon(tmp_path: Path, held_edit: HeldEdit
                          ) -> AsyncIterator[tuple[Supervisor, str, trio.Event, trio.Nursery]]:
    """The daemon's runtime (:func:`agent_runtime`) over ``held_edit``'s executor, its session's
    edit submitted and held there: the supervisor, the session, the daemon's stop event, and a
    nursery for the requests of its clients. Leaving the block stops the runtime (the daemon's
    stop, once the event is set), then cancels what the nursery still runs (a client's request
    goes with the stop); all of it within 30 s."""
    stopping = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as callers:
            async with agent_runtime(tmp_path, held_edit.executor.workspace, SCRIPT, remote=held_edit.remote,
                                     artifacts=held_edit.artifacts, stopping=stopping) as (sup, _store, _faux, _pool):
                sid = await sup.create_session("proj")
                await sup.call(sid, Submit("r1", [t.TextPart("please edit it")], "followUp"))
                await wait_path(held_edit.held, timeout=20)
                yield sup, sid, stopping, callers
            callers.cancel_scope.cancel()


async def test_an_abort_the_daemons_stop_cut_while_it_waited_records_nothing_and_lets_the_copies_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The abort waits for the cut-off edit's end; the daemon's stop cuts the abort there, so it
    # records nothing (the call is run again at the next start). The edit completes meanwhile:
    # its copies, handed to the actor and held for the abort's record (ArtifactStore.keep), are
    # let go, so that a sweep may take them.
    with edit_held_behind_a_relay(monkeypatch, tmp_path) as held_edit:
        executor, relay, artifacts = held_edit.executor, held_edit.relay, held_edit.artifacts
        async with stopping_daemon(tmp_path, held_edit) as (sup, sid, stopping, callers):
            callers.start_soon(sup.call, sid, Abort())  # (never answered: the stop cuts it)
            await until(lambda: f"{sid}:edit1" in relay.stops)  # (the abort waits for the call's end)
            stopping.set()

            async def release_once_stopped() -> None:
                release_held(tmp_path)

            # (a task started now runs once this one waits, which it first does as it leaves the
            # block below: past the stop's cancel of the actors, the abort's wait; the client's
            # request goes with the stop)
            callers.start_soon(release_once_stopped)
        assert (executor.workspace / "f.txt").read_text() == "ab\n"  # (the edit completed)
    events = log_of(tmp_path, sid)
    assert [e.kind for e in events if e.kind in ("run.aborted", "tool.finished", "artifact.stored",
                                                   "file.edited")] == []
    assert artifacts.held_for_good() == set() == artifacts.in_flight()
    assert taken_by_a_sweep(artifacts) == COPIES  # (stored, handed over, and no longer held)


async def test_an_edit_the_daemons_stop_cut_off_lets_its_copies_go_and_is_recorded_when_run_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No abort: the daemon's stop cancels the running edit, which completes while Core waits for
    # its end. Its copies, handed to the actor and held (ArtifactStore.keep), are never recorded by
    # it (its end comes first): they are let go when it ends, so that a sweep may take them. The
    # next start runs the call again (the executor answers it from its journal) and records the
    # edit once, its copies stored again.
    with edit_held_behind_a_relay(monkeypatch, tmp_path) as held_edit:
        executor, artifacts = held_edit.executor, held_edit.artifacts
        async with stopping_daemon(tmp_path, held_edit) as (sup, sid, stopping, helpers):
            stopping.set()
            # (the call cut off: Core asks its end)
            helpers.start_soon(cut_off_when_held, held_edit.relay, held_edit.held, f"{sid}:edit1")
        # (leaving the block cancels the actors: the daemon's stop)
        assert (executor.workspace / "f.txt").read_text() == "ab\n"  # (the edit completed)
        events = log_of(tmp_path, sid)
        assert [e.kind for e in events if e.kind in ("tool.finished", "artifact.stored", "file.edited")] == []
        assert artifacts.held_for_good() == set() == artifacts.in_flight()
        assert taken_by_a_sweep(artifacts) == COPIES

        with trio.fail_after(30):
            async with agent_runtime(tmp_path, executor.workspace, SCRIPT[2:], remote=held_edit.remote,
                                     artifacts=artifacts) as (sup, store, _faux, _pool):
                await sup.call(sid, WaitIdle())
                events = await events_of(store, sid)
    finished = [e.event for e in events if e.kind == "tool.finished" and e.event.call_id == "edit1"]
    assert [(f.status, f.is_error) for f in finished] == [("ok", False)], finished
    [edit] = [e.event for e in events if e.kind == "file.edited"]
    assert (edit.call_id, edit.path) == ("edit1", "f.txt")
    assert {artifacts.get(edit.before_artifact_id), artifacts.get(edit.after_artifact_id)} == {b"a\n", b"ab\n"}
    assert (executor.workspace / "f.txt").read_text() == "ab\n"  # (applied once)
    assert artifacts.held_for_good() == set()


async def test_an_edit_whose_reply_had_come_when_the_abort_cut_its_call_off_is_recorded_with_it(
        tmp_path: Path) -> None:
    # The executor answered (the file is written) but its reply named no file written, so Core
    # asks resolve; the abort comes while it does. No Stop is needed: the reply is in Core's
    # hands, and is recorded as an edit completed under the abort.
    gate = threading.Event()
    executor = start_executor(tmp_path / "remote")
    ws = executor.workspace
    (ws / "f.txt").write_text("a\n")

    def no_written_path(reply: pb.ToolReply) -> pb.ToolReply:
        reply.ClearField("written_path")
        return reply

    def hold_resolve(request: pb.ToolRequest) -> None:
        if request.tool == "resolve" and "edit_file" in relay.tools:
            gate.wait(30)

    try:
        with Relay(executor.address, edit_reply=no_written_path, before_call=hold_resolve) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            try:
                async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote) as (sup, store, _faux, _pool):
                    sid = await sup.create_session("proj")
                    await sup.call(sid, Submit("r1", [t.TextPart("please edit it")], "followUp"))
                    await until(lambda: relay.tools[-2:] == ["edit_file", "resolve"], timeout=30)
                    with trio.fail_after(30):
                        assert (await sup.call(sid, Abort()))["aborted"] is True
                    events = await events_of(store, sid)
            finally:
                gate.set()
        assert relay.stops == []
        kinds = [e.kind for e in events]
        at = next(i for i, e in enumerate(events) if e.kind == "tool.finished" and e.event.call_id == "edit1")
        finished = events[at].event
        assert (finished.status, finished.error_code) == ("interrupted", "ABORTED")
        assert text_of(finished) == f"{APPLIED}\n{ABORTED_TEXT}"
        assert kinds[at + 1:at + 4] == ["artifact.stored", "artifact.stored", "file.edited"]
        edit = events[at + 3].event
        assert (edit.call_id, edit.path, edit.written_path) == ("edit1", "f.txt", None)
        assert (ws / "f.txt").read_text() == "ab\n"
    finally:
        stop_process(executor.proc)


async def test_a_stop_about_a_call_whose_journal_record_cannot_be_read_is_answered_without_it(
        executor: Any, client: ExecutorClient, workspace: Path) -> None:
    (workspace / "unread.txt").write_text("one\n")
    edit = {"path": "unread.txt", "mode": "edit", "edits": [{"old_string": "one", "new_string": "two"}]}
    await client.call("edit_file", edit, call_id="ses_u:c1")
    name = hashlib.sha256(b"ses_u:c1").hexdigest() + ".json"
    [record] = list(executor.state.rglob(name))
    record.unlink()
    record.mkdir()  # (read as a file: EISDIR, an OSError the journal does not translate)
    reply = await client.stop("ses_u:c1", 5)
    assert not reply.found and not reply.HasField("call")
    assert "stopped call could not be read" in executor.stderr.read_text()


@pytest.mark.parametrize("bad", ["not ok", "not JSON", "not an object"])
async def test_a_stop_answer_whose_call_cannot_be_read_leaves_the_cancellation_going_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, bad: str) -> None:
    """A completed call the answer cannot give (not ``ok``, its result not JSON or JSON but not an
    object) is logged as not recorded; the cancellation goes on, the caller's actor alive."""

    def spoiled(reply: pb.StopReply) -> pb.StopReply:
        if bad == "not ok":
            reply.call.ok = False
            reply.call.error_code = "IO_ERROR"
        else:
            reply.call.result_json = "{not json" if bad == "not JSON" else "[]"
        return reply

    taken: list[list[Any]] = []
    ctx = dataclasses.replace(tool_ctx("ses_x", "c1"), cut_events=lambda *handed: taken.append(list(handed)))
    with executor_held_at(monkeypatch, tmp_path) as (executor, held):
        with Relay(executor.address, stop_reply=spoiled) as relay:
            async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
                edit = tools_by_name(pool, tmp_path / "artifacts")["edit_file"]
                results: list[Any] = []
                with trio.fail_after(30):
                    async with trio.open_nursery() as nursery:
                        with trio.CancelScope() as scope:
                            nursery.start_soon(cut_off_when_held, relay, held, "ses_x:c1", scope.cancel)
                            results.append(await edit.run({"path": "f.txt", "mode": "rewrite", "content": "b\n"},
                                                          ctx))
        assert scope.cancelled_caught and results == [] and taken == []
        assert (executor.workspace / "f.txt").read_text() == "b\n"  # (written: only its record is lost)
        assert "completed while its caller had gone, but the executor's answer about it cannot be read" in caplog.text


@pytest.mark.parametrize("tool", ["restore", "edit_file", "read_file"])
@pytest.mark.parametrize("result_json", ["[]", "null", "3", '"changed"'])
def test_a_reply_whose_result_is_json_but_not_an_object_is_refused_with_a_code(tool: str, result_json: str) -> None:
    """Every tool's result is a JSON object: another (a ``restore``'s ``[]`` too, which the
    outcome asks ``removed`` of) is the executor's error, not an AttributeError."""
    with pytest.raises(ExecutorToolError) as caught:
        executor_client.tool_outcome(tool, pb.ToolReply(ok=True, result_json=result_json))
    assert caught.value.code == "EXECUTOR_ERROR" and "is not a JSON object" in str(caught.value)
