"""A write whose caller gave up (an abort, a deadline) keeps its domain's write lock until the
executor's call has ended: the executor's ``Stop`` by the call's id says when; past the pool's
bound the lock is let go with a warning, and the executor is not stopped.

The executor is held at an exact point of an ``edit_file`` call (its journal record written, the
file not yet) by its test-only hold (``TEST_HOLD_ENV``), and let go on (``<hold>.release``) or
never. Everything is real: the pool, executor processes over gRPC, the workspace tools.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests import procfs
from tests.executor_hold import held_at
from tools.artifacts import ArtifactStore
from tools.base import ToolContext
from tools.executor.runs import EditingCalls, StopLatch
from tools.workspace_tools import workspace_tools

from .conftest import running_pool, temp_files, tool_ctx, until_ended, wait_path
from .lock_order import second_behind_first


def ctx(call_id: str) -> ToolContext:
    return tool_ctx("ses_w", call_id)


async def give_up_then_write(pool: Any, tmp_path: Path, held: Path, old: str,
                             while_waiting: Any) -> tuple[dict[str, Any], int]:
    """Rewrite f.txt ("a") to "b" (held by the executor), give that call up, then edit ``old``
    into "c" at once; ``while_waiting(lock)`` runs while the second write waits for the lock.
    Returns the results and the held executor's pid."""
    edit = {s.name: s for s in workspace_tools(pool, ArtifactStore(tmp_path / "artifacts"))}["edit_file"]
    pid: list[int] = []

    async def held_then_given_up(cancel: trio.CancelScope) -> None:
        await wait_path(held, timeout=20)
        pid.append(int(held.read_text()))
        cancel.cancel()

    async def waiting(cancel: trio.CancelScope, lock: Any) -> None:
        await while_waiting(lock)

    behind = await second_behind_first(
        pool, lambda: edit.run({"path": "f.txt", "mode": "rewrite", "content": "b\n"}, ctx("c1")),
        lambda: edit.run({"path": "f.txt", "mode": "edit", "edits": [{"old_string": old, "new_string": "c"}]},
                         ctx("c2")),
        first_holds=held_then_given_up, while_waiting=waiting)
    assert behind.first is None  # (given up: its caller cancelled)
    return {"second": behind.second}, pid[0]


async def test_a_given_up_write_holds_the_lock_until_the_executor_ended_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = held_at(monkeypatch, tmp_path, "before_publish")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a\n")

    async def release(lock: Any) -> None:
        assert (ws / "f.txt").read_text() == "a\n"  # the held call has not written yet
        Path(f"{tmp_path / 'hold'}.release").write_text("")

    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        results, pid = await give_up_then_write(pool, tmp_path, held, "b", release)
        ex = await pool.get("p")
        assert ex.process is not None and ex.process.pid == pid  # (the executor answered: kept)
    # The second write began once the first had written "b": it edited that (before the fix it
    # ran beside the held call, found "a", and failed NO_MATCH).
    second = results["second"]
    assert not second.is_error, second.content
    assert (ws / "f.txt").read_text() == "c\n"


async def test_an_executor_that_does_not_end_a_given_up_write_within_the_bound_is_not_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A slow write (held past the bound) keeps its executor: its commands run on (a background
    # job's, which holds no lock), and once it goes on it finds the file changed under it and
    # writes nothing, leaving no temp file. The lock is let go after the bound, as before the wait.
    held = held_at(monkeypatch, tmp_path, "before_publish")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a\n")

    async def nothing(lock: Any) -> None:
        pass

    async with running_pool(tmp_path / "executors", {"p": ws}, call_end_wait_s=1.0) as pool:
        ex = await pool.get("p")
        async with ex.client.run("echo $$ > job.pid; exec sleep 60", run_id="job"):  # (as a job runs it)
            await wait_path(ws / "job.pid")
            job = int((ws / "job.pid").read_text())
            start = trio.current_time()
            results, pid = await give_up_then_write(pool, tmp_path, held, "a", nothing)
            assert trio.current_time() - start < 15  # (not held for good: the bound)
            assert await pool.get("p") is ex and ex.process is not None and ex.process.pid == pid
            assert procfs.alive(pid) and procfs.alive(job)  # neither the executor nor its job killed
            second = results["second"]
            assert not second.is_error, second.content
            assert (ws / "f.txt").read_text() == "c\n"
            Path(f"{tmp_path / 'hold'}.release").write_text("")  # the slow write goes on
            await until_ended(ex.client, "ses_w:c1")
            assert procfs.alive(job)
    assert (ws / "f.txt").read_text() == "c\n"  # (it found "c" where it read "a": FILE_CHANGED)
    assert temp_files(ws) == []


async def test_a_stop_before_the_calls_look_is_answered_at_once_and_the_call_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = held_at(monkeypatch, tmp_path, "call:edit_file")  # (received, not yet run)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a\n")
    async with running_pool(tmp_path / "executors", {"p": ws}, call_end_wait_s=30) as pool:
        edit = {s.name: s for s in workspace_tools(pool, ArtifactStore(tmp_path / "artifacts"))}["edit_file"]
        cancel = trio.CancelScope()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                async def first() -> None:
                    with cancel:
                        await edit.run({"path": "f.txt", "mode": "rewrite", "content": "b\n"}, ctx("c1"))
                    assert cancel.cancelled_caught

                nursery.start_soon(first)
                await wait_path(held, timeout=20)
                ex = await pool.get("p")
                cancel.cancel()
                # The next write proceeds while the call is still held: the Stop was answered at
                # once (one that waited for the call's end would take the executor's 8 s bound).
                with trio.fail_after(6):
                    second = await edit.run({"path": "f.txt", "mode": "edit",
                                             "edits": [{"old_string": "a", "new_string": "c"}]}, ctx("c2"))
                assert not second.is_error, second.content
                reply = await ex.client.stop("ses_w:c1", 2)  # (the call's, still held)
                assert reply.found and reply.ended
                Path(f"{tmp_path / 'hold'}.release").write_text("")
                await until_ended(ex.client, "ses_w:c1")
    assert (ws / "f.txt").read_text() == "c\n"  # the given-up call wrote nothing
    assert temp_files(ws) == []


def test_a_stop_before_the_calls_look_leaves_it_nothing_to_write() -> None:
    # The executor's side of the answer: a Stop that came before the call's look (whether its
    # caller waits) makes that look fail, and is answered at once; one after it waits for the end.
    early = StopLatch()
    early.set()
    assert early.claim() is False and not early.claimed
    late = StopLatch()
    assert late.claim() is True
    late.set()
    assert late.claimed
    for latch in (early, late):
        latch.close()


def test_a_stop_by_an_id_two_calls_run_under_waits_for_both() -> None:
    # A call sent again while the first still runs under the same id has its own latch: the Stop
    # reaches both, and answers ended only once every one that may be writing has ended.
    calls = EditingCalls()
    with calls.running("s:c") as first, calls.running("s:c") as second:
        assert second.claim()  # (the second looked: it may be writing; the first has not)
        assert calls.stop("s:c", 0.05) is False  # (not ended within the bound: the second's end)
        assert first.claim() is False  # the first finds the stop: it writes nothing
    assert calls.stop("s:c", 0.05) is None  # none runs by that id now
    answers: list[bool | None] = []
    first_stack, second_stack = contextlib.ExitStack(), contextlib.ExitStack()
    first = first_stack.enter_context(calls.running("s:d"))
    second = second_stack.enter_context(calls.running("s:d"))
    assert first.claim() and second.claim()
    waiter = threading.Thread(target=lambda: answers.append(calls.stop("s:d", 10)))
    waiter.start()
    deadline = time.monotonic() + 10
    while not (first.is_set() and second.is_set()) and time.monotonic() < deadline:
        time.sleep(0.001)  # (bounded poll: the Stop has reached both)
    first_stack.close()  # the first ended; the second may still be writing
    assert answers == []
    second_stack.close()
    waiter.join(10)
    assert answers == [True]


async def test_a_stop_that_cannot_be_sent_is_taken_as_not_confirmed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A closed channel raises a bare ValueError ("Cannot invoke RPC: Channel closed!"): the wait
    # ends with the warning all the same, and nothing escapes the caller's write.
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        ex = await pool.get("p")
        ex.client.close()
        with caplog.at_level(logging.WARNING, logger="lens.executors"), trio.fail_after(5):
            await pool.call_ended(ex, "ses_w:c1")
    warned = [r.getMessage() for r in caplog.records if r.name == "lens.executors"]
    assert any("ses_w:c1" in m and "could not be asked whether it ended" in m for m in warned), warned
