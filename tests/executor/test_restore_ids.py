"""A ``revert_call``'s restores and a model's calls never share an executor call id.

The executor journals, replays and refuses a stopped id by call id. A model may name a call with
a ``:`` (the id rule allows it): an edit ``c1:0`` and the first restore of a ``revert_call`` named
``c1`` were both ``session:c1:0``, so the later of the two was answered from the other's journal
record (``CALL_ID_REUSED``) or, within the stopped ids' memory, refused ``CANCELLED`` for the
other's ``Stop``. Everything is real: the session actor with a scripted model, the pool, executor
processes over gRPC (a relay holds a call back while its caller gives it up).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from events import types as t
from events.ids import is_id
from proto import executor_pb2 as pb
from runtime.actor import recordable_call_id
from runtime.providers.faux import FauxToolCall, FauxTurn
from tools.workspace_tools import restore_call_id

from .conftest import agent_runtime, run_to_idle, start_executor, stop_process, until
from .relay import Holding, Relay, give_up_held
from .test_rerun import events_of
from .test_tools import core_tools

EDIT_B = {"path": "b.txt", "mode": "rewrite", "content": "edited\n"}
EDIT_A = {"path": "a.txt", "mode": "rewrite", "content": "edited\n"}


def test_a_restores_id_is_of_no_form_a_recorded_call_id_takes() -> None:
    restore = restore_call_id("ses_x", "c1", 0)
    assert restore == "ses_x:c1/0"
    # (every call's id is <session>:<recorded id>, and a recorded id keeps to the id rule)
    assert not is_id(restore.partition(":")[2])
    assert recordable_call_id("c1/0") != "c1/0"


@pytest.mark.parametrize("order", ["revert first", "edit first"])
async def test_a_model_call_named_like_a_reverts_restore_runs_as_its_own_call(tmp_path: Path, order: str) -> None:
    # revert first: c0 edits a.txt, c1 reverts c0, then the model names an edit of b.txt "c1:0";
    # edit first: "c1:0" edits b.txt, c0 edits a.txt, then c1 reverts c0. The later of the two
    # calls ran under the earlier's journal record: CALL_ID_REUSED, nothing done.
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    edit_a = FauxTurn(when="step-edit-a", tool_calls=[FauxToolCall("edit_file", EDIT_A, call_id="c0")])
    revert = FauxTurn(when="step-revert", tool_calls=[FauxToolCall("revert_call", {"call_id": "c0"}, call_id="c1")])
    named = FauxTurn(when="step-edit-b", tool_calls=[FauxToolCall("edit_file", EDIT_B, call_id="c1:0")])
    script = [edit_a, revert, named] if order == "revert first" else [named, edit_a, revert]
    async with agent_runtime(tmp_path, ws, script) as (sup, store, _faux, _pool):
        sid = await sup.create_session("proj")
        for n, turn in enumerate(script):
            await run_to_idle(sup, sid, f"r{n}", turn.when)
        events = await events_of(store, sid)
    finished = {e.event.call_id: e.event for e in events if e.kind == "tool.finished"}
    assert sorted(finished) == ["c0", "c1", "c1:0"]  # (recorded as the model named them)
    assert [(c, finished[c].status) for c in sorted(finished)] == [("c0", "ok"), ("c1", "ok"), ("c1:0", "ok")], \
        [f.content for f in finished.values()]
    assert (ws / "a.txt").read_text() == "a\n"  # reverted
    assert (ws / "b.txt").read_text() == "edited\n"  # edited
    reverted = [e.event for e in events if e.kind == "file.reverted"]
    assert [(r.reverted_call_id, r.paths) for r in reverted] == [("c0", ["a.txt"])]


@pytest.mark.parametrize("order", ["revert given up first", "edit given up first"])
async def test_a_given_up_restore_or_edit_does_not_refuse_the_call_named_like_it(tmp_path: Path, order: str) -> None:
    # The first of the two calls is given up while its Call is on its way (the relay holds it):
    # Core's Stop names its id, and the executor remembers it. The second, under the id that was
    # the same, was refused CANCELLED for that Stop.
    executor = start_executor(tmp_path / "remote")
    ws = executor.workspace
    (ws / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    replies: list[pb.ToolReply] = []

    def seen(reply: pb.ToolReply) -> pb.ToolReply:
        replies.append(reply)
        return reply

    holding = Holding(lambda request: request.call_id.startswith(f"{core.session_id}:c1"))
    try:
        with Relay(executor.address, before_call=holding, edit_reply=seen) as relay:
            async with core_tools(executor, tmp_path, address=relay.address) as (core, _):
                with trio.fail_after(30):
                    _, edited = await core.run("edit_file", EDIT_A, call_id="c0")
                    assert not edited.is_error, edited.content
                    if order == "revert given up first":
                        await give_up_held(lambda: core.run("revert_call", {"call_id": "c0"}, call_id="c1"), holding)
                        _, second = await core.run("edit_file", EDIT_B, call_id="c1:0")
                        assert (ws / "b.txt").read_text() == "edited\n"
                    else:
                        await give_up_held(lambda: core.run("edit_file", EDIT_B, call_id="c1:0"), holding)
                        _, second = await core.run("revert_call", {"call_id": "c0"}, call_id="c1")
                        assert (ws / "a.txt").read_text() == "a\n"
                        assert [e for e in second.events if isinstance(e, t.FileReverted)]
                    assert not second.is_error, second.content
                    await until(lambda: len(replies) == 3)  # (the held call, let go, has been answered)
        assert [r.error_code for r in replies if not r.ok] == ["CANCELLED"]  # (the given-up call alone)
    finally:
        holding.let_go()
        stop_process(executor.proc)
