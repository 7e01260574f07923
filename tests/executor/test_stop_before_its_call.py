"""A ``Stop`` that reaches the executor before the call it names (the call still on its way, or
waiting for a server thread): the executor remembers the id, bounded in count and age, and an
editing call or a command arriving later under it is refused ``CANCELLED`` before it does
anything: nothing is written, nothing is run, no journal record is left.

Everything is real: an executor process over gRPC, the pool and the workspace tools behind a
relay that holds a call back until its ``Stop`` has been answered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from events import types as t
from proto import executor_pb2 as pb
from runtime.executor_client import CALL_TIMEOUT_S, ExecutorClient, ExecutorToolError
from tools.executor.commands import run_command
from tools.executor.runs import STOPPED_IDS_KEEP_S, STOPPED_IDS_MOST, StoppedIds
from tools.executor.server import TEST_HOOKS_ENV, TEST_STOPPED_IDS_ENV, TOKEN_ENV
from tests.executor_hold import held_at

from .conftest import (ExecutorProcess, remote_pool, running_executor, running_pool, start_executor, stop_process,
                       tool_ctx, tools_by_name, until, until_ended, wait_path)
from .relay import Holding, Relay, give_up_held
from .test_commands import BOUND_S, collect

REFUSED_EDIT = "a Stop named this call before it came (its caller gave up); nothing was changed"
REFUSED_RUN = "a Stop named this run_id before the command came; nothing was run"


def journal_records(executor: ExecutorProcess) -> list[str]:
    return sorted(p.name for p in (executor.state / "calls").iterdir())


async def test_an_edit_arriving_after_its_stop_is_refused_and_writes_nothing(
        client: ExecutorClient, executor: ExecutorProcess, workspace: Path) -> None:
    records = journal_records(executor)
    reply = await client.stop("ses_s:late-edit", BOUND_S)
    assert (reply.found, reply.ended) == (False, False)
    with pytest.raises(ExecutorToolError) as caught:
        await client.call("edit_file", {"path": "late.txt", "mode": "create", "content": "x\n"},
                          call_id="ses_s:late-edit")
    assert (caught.value.code, caught.value.message) == ("CANCELLED", REFUSED_EDIT)
    assert not (workspace / "late.txt").exists()
    assert journal_records(executor) == records  # (no record: the call never began)
    # another id is not touched by it
    await client.call("edit_file", {"path": "late.txt", "mode": "create", "content": "y\n"},
                      call_id="ses_s:other-edit")
    assert (workspace / "late.txt").read_text() == "y\n"


async def test_a_restore_arriving_after_its_stop_is_refused(client: ExecutorClient, workspace: Path) -> None:
    (workspace / "kept.txt").write_text("after\n")
    await client.stop("ses_s:revert:0", BOUND_S)
    with pytest.raises(ExecutorToolError) as caught:
        await client.call("restore", {"path": "kept.txt", "content_hex": b"before\n".hex(),
                                      "expect_sha256": None}, call_id="ses_s:revert:0")
    assert caught.value.code == "CANCELLED"
    assert (workspace / "kept.txt").read_text() == "after\n"


async def test_a_command_arriving_after_its_stop_is_refused_and_nothing_runs(
        client: ExecutorClient, workspace: Path) -> None:
    reply = await client.stop("late-run", BOUND_S)
    assert (reply.found, reply.ended) == (False, False)
    with pytest.raises(ExecutorToolError) as caught:
        await collect(client, "touch late-ran", run_id="late-run")
    assert (caught.value.code, caught.value.message) == ("CANCELLED", REFUSED_RUN)
    assert not (workspace / "late-ran").exists()
    # (a command under another id runs: the refusal is the stopped id's alone)
    _, _, exit_ = await collect(client, "touch other-ran", run_id="other-run")
    assert exit_.exit_code == 0 and (workspace / "other-ran").exists()


async def test_a_call_after_a_stop_that_found_it_running_is_refused_too(
        client: ExecutorClient, workspace: Path) -> None:
    # A command stopped while it ran, then one more Run under its id (a copy of the given-up
    # one, late): refused as well, not run a second time.
    out = bytearray()

    async def stop_when_started(so_far: bytes) -> None:
        if b"ready" in so_far and not out:
            out.extend(so_far)
            assert (await client.stop("stopped-running", BOUND_S)).found

    _, _, exit_ = await collect(client, "echo ready; sleep 600", run_id="stopped-running",
                                on_stdout=stop_when_started)
    assert exit_.stopped
    with pytest.raises(ExecutorToolError) as caught:
        await collect(client, "touch again-ran", run_id="stopped-running")
    assert caught.value.code == "CANCELLED"
    assert not (workspace / "again-ran").exists()


async def test_an_id_past_the_count_bound_is_forgotten_and_its_call_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The executor remembers 2 ids here (the test-only setting): a third Stop forgets the first.
    monkeypatch.setenv(TEST_STOPPED_IDS_ENV, "2")
    async with running_executor(tmp_path) as (executor, client):
        ws = executor.workspace
        for n in (1, 2, 3):
            await client.stop(f"ses_b:c{n}", BOUND_S)
        for n in (2, 3):  # (the last two, at the bound: still refused)
            with pytest.raises(ExecutorToolError) as caught:
                await client.call("edit_file", {"path": f"f{n}.txt", "mode": "create", "content": "x"},
                                  call_id=f"ses_b:c{n}")
            assert caught.value.code == "CANCELLED"
            with pytest.raises(ExecutorToolError) as caught:
                await collect(client, f"touch ran{n}", run_id=f"ses_b:c{n}")
            assert caught.value.code == "CANCELLED"
        # one past it: forgotten, run as any call
        await client.call("edit_file", {"path": "f1.txt", "mode": "create", "content": "x"}, call_id="ses_b:c1")
        _, _, exit_ = await collect(client, "touch ran1", run_id="ses_b:c1")
        assert exit_.exit_code == 0
        assert sorted(p.name for p in ws.iterdir()) == ["f1.txt", "ran1"]


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_test_setting_of_the_stopped_ids_that_is_no_count_is_refused_at_start(tmp_path: Path, value: str) -> None:
    # (1, the least, starts: the bound test above runs with 2)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {**os.environ, TOKEN_ENV: "t" * 32, TEST_HOOKS_ENV: "1", TEST_STOPPED_IDS_ENV: value}
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(workspace),
                           "--listen", "127.0.0.1:0", "--state", str(tmp_path / "state")],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"lens executor: INVALID_ARGUMENT: {TEST_STOPPED_IDS_ENV} {value!r} is not a whole "
                           f"number of at least 1 (how many ids a Stop named the executor remembers)\n")


async def test_the_least_count_of_stopped_ids_remembers_the_last_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_STOPPED_IDS_ENV, "1")
    async with running_executor(tmp_path) as (executor, client):
        await client.stop("ses_b:c1", BOUND_S)
        await client.stop("ses_b:c2", BOUND_S)
        with pytest.raises(ExecutorToolError) as caught:
            await client.call("edit_file", {"path": "f2.txt", "mode": "create", "content": "x"}, call_id="ses_b:c2")
        assert caught.value.code == "CANCELLED"
        await client.call("edit_file", {"path": "f1.txt", "mode": "create", "content": "x"}, call_id="ses_b:c1")
        assert sorted(p.name for p in executor.workspace.iterdir()) == ["f1.txt"]


def test_stopped_ids_are_kept_up_to_the_count_and_the_age_and_no_further() -> None:
    now = [0.0]
    ids = StoppedIds(clock=lambda: now[0])
    for n in range(STOPPED_IDS_MOST):
        ids.remember(f"s:{n}")
    assert len(ids) == STOPPED_IDS_MOST and "s:0" in ids  # at the count: all kept
    ids.remember("s:one-more")
    assert len(ids) == STOPPED_IDS_MOST and "s:0" not in ids and "s:1" in ids  # one past: the oldest goes
    aged = StoppedIds(clock=lambda: now[0])
    aged.remember("s:a")
    now[0] = 10.0
    aged.remember("s:b")
    now[0] = STOPPED_IDS_KEEP_S
    assert "s:a" in aged  # at the age: kept
    now[0] = STOPPED_IDS_KEEP_S + 0.001
    assert "s:a" not in aged and "s:b" in aged  # past it: forgotten, the younger kept
    aged.remember("s:a")  # (named again: kept from now)
    now[0] = STOPPED_IDS_KEEP_S + 10.5
    assert "s:a" in aged and "s:b" not in aged
    # (an id of any length costs the same: its digest is kept)
    aged.remember("x" * 1_000_000)
    assert "x" * 1_000_000 in aged and "x" * 999_999 not in aged
    assert "" not in aged and (aged.remember("") or len(aged)) == 2  # (no id: nothing to remember)


def test_a_stopped_id_is_kept_as_long_as_cores_call_may_still_arrive() -> None:
    # A call arriving later than its deadline (sent before its Stop) is not run by grpc at all.
    assert STOPPED_IDS_KEEP_S >= CALL_TIMEOUT_S


async def test_an_aborted_edit_that_reaches_the_executor_after_its_stop_writes_nothing(tmp_path: Path) -> None:
    # Core's own path: the edit's caller is cancelled while its Call is still on its way (held by
    # the relay); Core sends Stop by the call id, which finds nothing and is answered at once, and
    # the lock is let go; the Call arriving after it is refused, and the file stays as it was.
    executor = start_executor(tmp_path / "remote")
    ws = executor.workspace
    (ws / "f.txt").write_text("a\n")
    replies: list[pb.ToolReply] = []

    def seen(reply: pb.ToolReply) -> pb.ToolReply:
        replies.append(reply)
        return reply

    holding = Holding(lambda request: request.tool == "edit_file")  # (the call on its way)
    try:
        with Relay(executor.address, before_call=holding, edit_reply=seen) as relay:
            async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
                edit = tools_by_name(pool, tmp_path / "artifacts")["edit_file"]
                with trio.fail_after(20):
                    # aborted, as before: no result; its lock let go (the domain's next write may
                    # begin), then the Call goes on to the executor, after its Stop
                    await give_up_held(lambda: edit.run({"path": "f.txt", "mode": "rewrite", "content": "b\n"},
                                                        tool_ctx("ses_r", "c1")),
                                       holding, (await pool.get("p")).lock)
                    await until(lambda: bool(replies))
        assert (replies[0].ok, replies[0].error_code) == (False, "CANCELLED")
        assert (ws / "f.txt").read_text() == "a\n"
        assert not any(".lens-" in p.name for p in ws.iterdir())
    finally:
        stop_process(executor.proc)


async def test_an_aborted_command_that_reaches_the_executor_after_its_stop_never_runs(tmp_path: Path) -> None:
    # Core's own path for a command: run_command's stream is open, its Run held by the relay; the
    # abort sends Stop by the run id, which finds nothing, reads on for a moment, and leaves the
    # stream. The Run arriving after all that is refused, and the command never starts.
    executor = start_executor(tmp_path / "remote")
    ws = executor.workspace
    let_go, held = threading.Event(), threading.Event()

    def hold(request: pb.CommandRequest) -> None:  # (the relay's thread: the Run on its way)
        held.set()
        assert let_go.wait(20)

    try:
        with Relay(executor.address, before_run=hold) as relay:
            async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
                run = tools_by_name(pool, tmp_path / "artifacts")["run_command"]
                cut: list[Any] = []
                context = tool_ctx("ses_r", "c2", cut_output=lambda text, was_cut, end: cut.append((text, end)))
                cancel = trio.CancelScope()
                outcome: list[Any] = []

                async def aborted() -> None:
                    with cancel:
                        outcome.append(await run.run({"command": "touch ran"}, context))
                    outcome.append(cancel.cancelled_caught)

                with trio.fail_after(20):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(aborted)
                        await until(held.is_set)
                        cancel.cancel()
                        await until(lambda: bool(outcome))
                    assert outcome == [True] and cut == [("", None)]  # aborted, nothing printed, no exit
                    let_go.set()  # the Run goes on to the executor, after its Stop
                    await until(lambda: bool(relay.run_failures))
        assert relay.run_failures == ["ABORTED CANCELLED: " + REFUSED_RUN]
        assert not (ws / "ran").exists()
    finally:
        let_go.set()
        stop_process(executor.proc)


@pytest.mark.parametrize("point", ["before_reply", "before_publish"])
async def test_a_replay_safe_edit_given_up_then_run_again_by_its_owner_is_not_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    # The edit's caller gives up while the executor holds the call (its journal record and file
    # written: before_reply; its record pending, the file not: before_publish); Core's Stop by the
    # call id is remembered. The session then runs the replay-safe call again under its id (a
    # restart's re-run, marked): it is answered from the journal or applied, once, and says what
    # it changed, so that revert_call can undo it. A copy sent unmarked is still refused.
    held = held_at(monkeypatch, tmp_path, point)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a\n")
    args = {"path": "f.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "ab"}]}
    async with running_pool(tmp_path / "executors", {"p": ws}, call_end_wait_s=0.3) as pool:
        edit = tools_by_name(pool, tmp_path / "artifacts")["edit_file"]
        cancel = trio.CancelScope()
        outcome: list[Any] = []

        async def given_up() -> None:
            with cancel:
                await edit.run(args, tool_ctx("ses_g", "c1"))
            outcome.append(cancel.cancelled_caught)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(given_up)
                await wait_path(held, timeout=20)
                cancel.cancel()
                await until(lambda: bool(outcome))  # (its Stop sent, the bound passed: the lock let go)
            assert outcome == [True]
            Path(f"{tmp_path / 'hold'}.release").write_text("")  # the held call goes on and ends
            ex = await pool.get("p")
            await until_ended(ex.client, "ses_g:c1")
            again = await edit.run(args, tool_ctx("ses_g", "c1", rerun=True))
            with pytest.raises(ExecutorToolError) as caught:
                await ex.client.call("edit_file", args, call_id="ses_g:c1")
            assert caught.value.code == "CANCELLED"
    assert not again.is_error, again.content
    assert again.structured_content["changed"] is True
    assert (ws / "f.txt").read_text() == "ab\n"  # applied once
    edited = [e for e in again.events if isinstance(e, t.FileEdited)]
    assert len(edited) == 1 and edited[0].before_sha256 is not None and edited[0].after_sha256 is not None


def test_a_command_whose_caller_went_away_before_it_started_is_never_spawned(tmp_path: Path) -> None:
    # A Run given its server thread after its caller went away (its deadline, up to an hour, may
    # outlast the stopped ids' memory): its gRPC context is cancelled by then. The shell is not
    # spawned and nothing is yielded; its gate was opened before the first look at the caller,
    # and the command could run for a moment.
    items = list(run_command("touch ran", tmp_path, timeout_ms=10_000, max_output=1024, cancelled=lambda: True))
    assert items == []
    assert not (tmp_path / "ran").exists()
