"""A ``revert_call`` that restored part of its call's files is in the session's log.

``revert_call`` restores a call's edits one by one, last first. One that stops part way (a
restore refused: the file changed since; or the call cut off by an abort after some restores
completed) has changed those files back: its ``file.reverted`` records them (``partial``), in
the write of its error or aborted result, so that the state, a restart's replay and the file
history drop those edits alone, and a second ``revert_call`` of the call restores the rest.

Everything is real: the session actor and its log, the pool, an executor process over gRPC (held
at an exact point of the second restore, ``TEST_HOLD_ENV``, set by a relay in front of it as
that restore passes), the program's calls through the actor's ``call_tool``.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest
import trio

from events import types as t
from proto import executor_pb2 as pb
from runtime.actor import GetState, Submit, WaitIdle
from runtime.decide import ABORTED_TEXT
from runtime.executors import RemoteExecutor
from runtime.providers.faux import FauxToolCall, FauxTurn
from runtime.workspace_api import changes
from tools.base import ToolContext, ToolError, ToolResult, ToolSpec
from tools.ptc.interpreter import run_program

from .conftest import (agent_runtime, cut_off_when_held, executor_held_at, remote_pool, run_to_idle, temp_files,
                       tool_ctx, tools_by_name, until_ended)
from .relay import Relay
from .test_edit_finished_under_abort import TIME_LIMIT_S, abort_while_held, events_of, text_of

EDITS = [("a.txt", "A\n"), ("b.txt", "B\n")]  # (made in this order: a revert restores b.txt first)


async def edit_two(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    assert ctx.call_tool is not None
    for n, (path, content) in enumerate(EDITS, 1):
        result = await ctx.call_tool(f"{ctx.call_id}.{n}", "edit_file", {"path": path, "mode": "rewrite",
                                                                         "content": content})
        assert not result.is_error, result.content
    return ToolResult.text("a.txt and b.txt edited")


# A program's calls, as programmatic_tool_run's are: both edits are the call edit1's.
EDIT_TWO = ToolSpec("edit_two", "edits a.txt, then b.txt", {"type": "object"}, edit_two, read_only=False)
SCRIPT = [FauxTurn(when="step-edit", tool_calls=[FauxToolCall("edit_two", {}, call_id="edit1")]),
          FauxTurn(when="step-revert-one", tool_calls=[FauxToolCall("revert_call", {"call_id": "edit1"},
                                                                    call_id="revert1")]),
          FauxTurn(when="step-revert-two", tool_calls=[FauxToolCall("revert_call", {"call_id": "edit1"},
                                                                    call_id="revert2")]),
          FauxTurn(text="done")]


def finished_of(events: list[Any], call_id: str) -> int:
    """The index of call ``call_id``'s only ``tool.finished``."""
    [at] = [i for i, e in enumerate(events) if e.kind == "tool.finished" and e.event.call_id == call_id]
    return at


def statuses(events: list[Any]) -> dict[str, tuple[str, list[bool]]]:
    """The file history of these events: by path, its status and whether each edit is reverted."""
    return {f["path"]: (f["status"], [e["reverted"] for e in f["edits"]]) for f in changes(events)}


def assert_the_rest_reverted(ws: Path, events: list[Any], state: Any) -> None:
    """revert2, the call of edit1 reverted again after b.txt alone was, restored a.txt: both files
    are back, its whole `file.reverted` of a.txt follows its result, edit1 is gone from the state
    and the file history says both reverted."""
    assert (ws / "a.txt").read_text() == "a\n" and (ws / "b.txt").read_text() == "b\n"
    at = finished_of(events, "revert2")
    assert not events[at].event.is_error, events[at].event.content
    reverted = events[at + 1].event
    assert (reverted.reverted_call_id, reverted.paths, reverted.partial) == ("edit1", ["a.txt"], False)
    assert "edit1" not in state.file_edits
    assert statuses(events) == {"a.txt": ("reverted", [True]), "b.txt": ("reverted", [True])}


def with_two_files(ws: Path) -> Path:
    """``ws``, made if it is not there, with a.txt and b.txt as the edits of :data:`EDITS` find them."""
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    return ws


def restore_held_second(tmp_path: Path, point: str, n: int = 1) -> Any:
    """A relay's ``before_call`` that has the executor hold the second restore (``n``: restore
    ``n``, counted from 0) at ``point``."""
    def hold(request: pb.ToolRequest) -> None:
        if request.tool == "restore" and request.call_id.endswith(f"/{n}"):
            (tmp_path / "hold").write_text(point)

    return hold


async def test_a_revert_refused_on_its_second_file_records_the_first_and_a_second_revert_restores_the_rest(
        tmp_path: Path) -> None:
    ws = with_two_files(tmp_path / "ws")
    tools = {"more_tools": lambda pool: [EDIT_TWO]}
    async with agent_runtime(tmp_path, ws, SCRIPT, **tools) as (sup, store, _faux, _pool):
        sid = await sup.create_session("proj")
        await run_to_idle(sup, sid, "r1", "step-edit")
        (ws / "a.txt").write_text("by hand\n")  # (the file restored second: CONFLICT)
        state = await run_to_idle(sup, sid, "r2", "step-revert-one")
        events = await events_of(store, sid)
    assert (ws / "b.txt").read_text() == "b\n" and (ws / "a.txt").read_text() == "by hand\n"
    at = finished_of(events, "revert1")
    finished = events[at].event
    # The call's result is the refusal, as it was: its code, its message with what was restored.
    assert (finished.status, finished.error_code) == ("error", "CONFLICT")
    assert text_of(finished) == ("CONFLICT: a.txt: the file changed since that call; not restored "
                                 "(reverted so far: b.txt)")
    # In its write, right after it: the revert of what was restored, said partial.
    assert events[at + 1].kind == "file.reverted" and events[at + 1].seq == events[at].seq + 1
    reverted = events[at + 1].event
    assert (reverted.call_id, reverted.reverted_call_id, reverted.paths, reverted.partial) == (
        "revert1", "edit1", ["b.txt"], True)
    assert [e.path for e in state.file_edits["edit1"]] == ["a.txt"]
    assert statuses(events) == {"a.txt": ("modified", [False]), "b.txt": ("reverted", [True])}

    # A restart's replay agrees; with the hand change undone, the call reverted again restores a.txt.
    async with agent_runtime(tmp_path, ws, SCRIPT, **tools) as (sup, store, _faux, _pool):
        state = await sup.call(sid, GetState())
        assert [e.path for e in state.file_edits["edit1"]] == ["a.txt"]
        (ws / "a.txt").write_text("A\n")
        state = await run_to_idle(sup, sid, "r3", "step-revert-two")
        events = await events_of(store, sid)
    assert_the_rest_reverted(ws, events, state)


@pytest.mark.parametrize("point", ["call:restore", "before_publish"])
async def test_a_revert_cut_off_by_an_abort_records_the_restores_that_completed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    # The second restore is held by the executor: received and not run ("call:restore", the abort
    # keeps it from writing), or past its look ("before_publish": it completes while the abort
    # waits for its end, and the Stop's answer says so). The first restore completed before.
    completed = point == "before_publish"
    with executor_held_at(monkeypatch, tmp_path, "nothing yet") as (executor, held):
        ws = with_two_files(executor.workspace)
        with Relay(executor.address, before_call=restore_held_second(tmp_path, point)) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote, more_tools=lambda pool: [EDIT_TWO]) as (
                    sup, store, _faux, pool):
                sid = await sup.create_session("proj")
                await run_to_idle(sup, sid, "r1", "step-edit")
                await abort_while_held(sup, sid, relay, held, stopped="revert1/1", submit=("r2", "step-revert-one"))
                await until_ended((await pool.get("proj")).client, f"{sid}:revert1/1")
                state = await sup.call(sid, GetState())
                events = await events_of(store, sid)
            assert (ws / "b.txt").read_text() == "b\n" and temp_files(ws) == []
            assert (ws / "a.txt").read_text() == ("a\n" if completed else "A\n")
            at = finished_of(events, "revert1")
            finished = events[at].event
            assert (finished.status, finished.error_code) == ("interrupted", "ABORTED")
            assert events[at + 1].kind == "file.reverted" and events[at + 1].seq == events[at].seq + 1
            reverted = events[at + 1].event
            if completed:  # (every restore done: a whole revert)
                assert (reverted.call_id, reverted.paths, reverted.partial) == ("revert1", ["b.txt", "a.txt"], False)
                assert text_of(finished) == ("[the revert was applied all the same before the call was cut off: "
                                             f"b.txt, a.txt restored]\n{ABORTED_TEXT}")
                assert "edit1" not in state.file_edits
                assert statuses(events) == {"a.txt": ("reverted", [True]), "b.txt": ("reverted", [True])}
                return
            assert (reverted.call_id, reverted.paths, reverted.partial) == ("revert1", ["b.txt"], True)
            assert text_of(finished) == ("[the revert was applied in part before the call was cut off: b.txt "
                                         "restored; revert_call of call edit1 again restores the rest]\n"
                                         f"{ABORTED_TEXT}")
            assert [e.path for e in state.file_edits["edit1"]] == ["a.txt"]
            assert statuses(events) == {"a.txt": ("modified", [False]), "b.txt": ("reverted", [True])}

            # Reverted again (a restart's replay first): the rest is restored.
            async with agent_runtime(tmp_path, ws, SCRIPT, remote=remote, more_tools=lambda pool: [EDIT_TWO]) as (
                    sup, store, _faux, _pool):
                assert [e.path for e in (await sup.call(sid, GetState())).file_edits["edit1"]] == ["a.txt"]
                state = await run_to_idle(sup, sid, "r3", "step-revert-two")
                events = await events_of(store, sid)
            assert (ws / "a.txt").read_text() == "a\n"
            assert not events[finished_of(events, "revert2")].event.is_error
            assert "edit1" not in state.file_edits


async def test_a_programs_revert_cut_off_by_its_own_time_limit_is_recorded_with_the_programs_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock) -> None:
    # No abort: the program's time limit cancels its revert_call while the executor holds the
    # second restore, received and not run (it is kept from writing). The first restore is recorded
    # after the program's result (PTC_TIMEOUT), in its write, under the program's call.
    mock_clock.rate = 1.0  # (the pool, the executor's waits: real time)

    async def program(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        assert ctx.call_tool is not None
        call_tool = ctx.call_tool

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            return (await call_tool(f"{ctx.call_id}.1", name, arguments)).structured_content

        outcome = await run_program('revert_call(call_id="edit1")', call, ["revert_call"],
                                    deadline=trio.current_time() + TIME_LIMIT_S)
        assert outcome.error is not None
        return ToolResult.error(outcome.error.code, outcome.error.message)

    prog = ToolSpec("prog", "reverts edit1 as a timed program", {"type": "object"}, program, read_only=False)
    script = [*SCRIPT[:1], FauxTurn(when="step-program", tool_calls=[FauxToolCall("prog", {}, call_id="p1")]),
              FauxTurn(text="ok")]
    with executor_held_at(monkeypatch, tmp_path, "nothing yet") as (executor, held):
        ws = with_two_files(executor.workspace)
        with Relay(executor.address, before_call=restore_held_second(tmp_path, "call:restore")) as relay:
            remote = RemoteExecutor(relay.address, executor.token)
            async with agent_runtime(tmp_path, ws, script, remote=remote,
                                     more_tools=lambda pool: [EDIT_TWO, prog]) as (sup, store, _faux, _pool):
                sid = await sup.create_session("proj")
                await run_to_idle(sup, sid, "r1", "step-edit")
                await sup.call(sid, Submit("r2", [t.TextPart("step-program")], "followUp"))
                await cut_off_when_held(relay, held, f"{sid}:p1.1/1", lambda: mock_clock.jump(TIME_LIMIT_S),
                                        timeout=30)  # (its time limit passes once it is held)
                with trio.fail_after(30):
                    await sup.call(sid, WaitIdle())
                state = await sup.call(sid, GetState())
                events = await events_of(store, sid)
        assert (ws / "b.txt").read_text() == "b\n" and (ws / "a.txt").read_text() == "A\n"
        at = finished_of(events, "p1")
        finished = events[at].event
        assert (finished.status, finished.error_code) == ("error", "PTC_TIMEOUT"), finished
        assert text_of(finished).endswith("\n[the revert was applied in part before the call was cut off: b.txt "
                                          "restored; revert_call of call edit1 again restores the rest]")
        assert events[at + 1].kind == "file.reverted" and events[at + 1].seq == events[at].seq + 1
        reverted = events[at + 1].event
        assert (reverted.call_id, reverted.reverted_call_id, reverted.paths, reverted.partial) == (
            "p1", "edit1", ["b.txt"], True)
        assert [e.path for e in state.file_edits["edit1"]] == ["a.txt"]


async def edited_as_one_call(pool: Any, tmp_path: Path, sid: str, files: list[tuple[str, str]]) -> list[t.FileEdited]:
    """The ``file.edited`` of call ``e1`` rewriting each of ``files`` (path, content), in order (as a
    program's calls ``e1.<n>``, whose edits are its call's)."""
    edit = tools_by_name(pool, tmp_path / "artifacts")["edit_file"]
    made: list[t.FileEdited] = []
    for n, (path, content) in enumerate(files, 1):
        result = await edit.run({"path": path, "mode": "rewrite", "content": content}, tool_ctx(sid, f"e1.{n}"))
        assert not result.is_error, result.content
        made += [e for e in result.events if isinstance(e, t.FileEdited)]
    return made


@pytest.mark.parametrize("gone", ["a.txt", "b.txt"])
async def test_a_restores_copy_that_cannot_be_read_names_its_file_and_what_was_restored(
        executor: Any, tmp_path: Path, gone: str) -> None:
    # The copy a restore writes back is gone (a.txt's, restored second; b.txt's, restored first):
    # the error names the file and what was restored before it, as an executor's refusal does;
    # only a revert that restored something records it (partial), and the state keeps the rest.
    sub = f"gone-{gone[0]}"
    with_two_files(executor.workspace / sub)
    sid = f"ses_gone_{gone[0]}"
    async with remote_pool(executor, tmp_path / "executors") as pool:
        made = await edited_as_one_call(pool, tmp_path, sid, [(f"{sub}/{p}", c) for p, c in EDITS])
        [lost] = [e.before_artifact_id for e in made if e.path == f"{sub}/{gone}"]
        assert lost is not None
        (tmp_path / "artifacts" / lost).unlink()
        revert = tools_by_name(pool, tmp_path / "artifacts")["revert_call"]
        ctx = tool_ctx(sid, "r1", file_edits=lambda cid: list(made) if cid == "e1" else [])
        if gone == "b.txt":  # (nothing restored: the refusal alone, no file.reverted)
            with pytest.raises(ToolError) as refused:
                await revert.run({"call_id": "e1"}, ctx)
            assert (refused.value.code, refused.value.message) == (
                "ARTIFACT_NOT_FOUND", f"{sub}/b.txt: no artifact {lost!r} (reverted so far: none)")
            assert [(executor.workspace / sub / p).read_text() for p in ("a.txt", "b.txt")] == ["A\n", "B\n"]
            return
        result = await revert.run({"call_id": "e1"}, ctx)
    assert result.is_error and result.error_code == "ARTIFACT_NOT_FOUND"
    assert result.structured_content["error"]["message"] == (
        f"{sub}/a.txt: no artifact {lost!r} (reverted so far: {sub}/b.txt)")
    assert result.events == [t.FileReverted(call_id="r1", reverted_call_id="e1", paths=[f"{sub}/b.txt"],
                                            partial=True)]
    assert [(executor.workspace / sub / p).read_text() for p in ("a.txt", "b.txt")] == ["A\n", "b\n"]


async def test_a_revert_cut_off_before_its_first_restore_hands_nothing_to_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cancelled while the executor holds its first restore, received and not run (the Stop keeps
    # it from writing): nothing was restored, and no file.reverted goes with the cut-off result.
    taken: list[list[Any]] = []
    with executor_held_at(monkeypatch, tmp_path, "call:restore") as (executor, held):
        with Relay(executor.address) as relay:
            async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
                made = await edited_as_one_call(pool, tmp_path, "ses_cut", [("f.txt", "b\n")])
                revert = tools_by_name(pool, tmp_path / "artifacts")["revert_call"]
                ctx = dataclasses.replace(tool_ctx("ses_cut", "r1", file_edits=lambda cid: list(made)),
                                          cut_events=lambda *handed: taken.append(list(handed)))
                results: list[Any] = []
                with trio.fail_after(30):
                    async with trio.open_nursery() as nursery:
                        with trio.CancelScope() as scope:
                            # (answered: the restore, let go before the executor had the
                            # Stop, would find its caller, the relay, waiting, and write)
                            nursery.start_soon(functools.partial(cut_off_when_held, relay, held, "ses_cut:r1/0",
                                                                 scope.cancel, answered=True))
                            results.append(await revert.run({"call_id": "e1"}, ctx))
        assert scope.cancelled_caught and results == [] and taken == []
        assert (executor.workspace / "f.txt").read_text() == "b\n"
