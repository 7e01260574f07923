"""A call whose executor died under it: a replay-safe one runs once more on the child spawned in
its place; one that is not (run_command) ends EXECUTOR_UNAVAILABLE and never runs again; nor
does any call of a remote executor (not respawned).

The executor is SIGKILLed at an exact point of an ``edit_file`` call: the test-only hold of the
executor (``TEST_HOLD_ENV``) blocks the first editing call to reach the point it names and says
so in a file; the test then kills that process. Everything is real: the session actor and its
log, the pool, executor processes over gRPC.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from events.store import EventStore
from runtime.executor_client import ExecutorUnavailable
from runtime.executors import ExecutorPool, KilledWhileStarting
from runtime.providers.faux import FauxToolCall, FauxTurn
from tools.artifacts import ArtifactStore
from tools.base import ToolError
from tests.executor_hold import held_at

from .conftest import (agent_runtime, kill_group, remote_pool, run_to_idle, running_pool, start_executor, stop_process,
                       tool_ctx, tools_by_name, wait_group_gone, wait_path)

BIG = "".join(f"line {i:06d} of a file written whole or not at all\n" for i in range(60_000))  # ~3 MiB


async def kill_when_held(held: Path, killed: list[int]) -> None:
    await wait_path(held, timeout=30)
    pid = int(held.read_text())
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


async def events_of(store: EventStore, sid: str) -> list[Any]:
    return await store.read_events(after=0, limit=10_000, session_id=sid)


def one_call(events: list[Any], name: str) -> tuple[Any, Any]:
    """The only tool.started of tool ``name`` and the only tool.finished of that call."""
    started = [e.event for e in events if e.kind == "tool.started" and e.event.name == name]
    assert len(started) == 1, started
    finished = [e.event for e in events if e.kind == "tool.finished" and e.event.call_id == started[0].call_id]
    assert len(finished) == 1, finished
    return started[0], finished[0]


@pytest.mark.parametrize("point, args, before, after", [
    # killed once the file and its journal record are written, before the reply: the second run
    # answers from the journal (a second application would make "abb")
    ("before_reply", {"path": "f.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "ab"}]},
     "a\n", "ab\n"),
    # killed between the journal's pending record and the file's publication: applied afresh,
    # and the file appears whole
    ("before_publish", {"path": "big.txt", "mode": "create", "content": BIG}, None, BIG),
    ("before_reply", {"path": "big.txt", "mode": "create", "content": BIG}, None, BIG),
])
async def test_an_edit_whose_executor_dies_under_it_runs_once_more_and_applies_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, args: dict[str, Any],
        before: str | None, after: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    path = ws / args["path"]
    if before is not None:
        path.write_text(before)
    held = held_at(monkeypatch, tmp_path, point)
    script = [FauxTurn(when="please edit", tool_calls=[FauxToolCall("edit_file", args)])]
    killed: list[int] = []
    async with agent_runtime(tmp_path, ws, script) as (sup, store, _faux, pool):
        sid = await sup.create_session("proj")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_when_held, held, killed)
            await run_to_idle(sup, sid, "r1", "please edit it")
        ex = await pool.get("proj")
        assert ex.process is not None and killed and ex.process.pid != killed[0]  # ran on a new child
        events = await events_of(store, sid)
    assert path.read_text() == after
    assert [p.name for p in ws.iterdir()] == [path.name]  # no temp file left behind
    started, finished = one_call(events, "edit_file")
    assert started.replay_safe
    assert finished.status == "ok" and not finished.is_error, finished.content
    assert finished.structured_content["changed"] is True
    assert finished.rerun_after == "EXECUTOR_UNAVAILABLE"
    edited = [e.event for e in events if e.kind == "file.edited"]
    assert len(edited) == 1 and edited[0].call_id == started.call_id
    artifacts = ArtifactStore(tmp_path / "data" / "artifacts")
    assert artifacts.get(edited[0].after_artifact_id) == after.encode()  # type: ignore[arg-type]
    assert edited[0].before_artifact_id is None if before is None else \
        artifacts.get(edited[0].before_artifact_id) == before.encode()


async def test_a_command_whose_executor_dies_under_it_is_not_run_again(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ran = ws / "ran.txt"
    script = [FauxTurn(when="please run", tool_calls=[FauxToolCall("run_command", {
        "command": "echo $$ >> ran.txt; exec sleep 100"})])]
    pgid = 0

    async def kill_when_running() -> None:
        nonlocal pgid
        with trio.fail_after(30):
            while not ran.read_text().endswith("\n") if ran.exists() else True:
                await trio.sleep(0.01)
        pgid = int(ran.read_text())
        ex = await pool.get("proj")
        assert ex.process is not None
        os.kill(ex.process.pid, signal.SIGKILL)

    try:
        async with agent_runtime(tmp_path, ws, script) as (sup, store, _faux, pool):
            sid = await sup.create_session("proj")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_when_running)
                await run_to_idle(sup, sid, "r1", "please run it")
            events = await events_of(store, sid)
    finally:
        if pgid:
            kill_group(pgid)
            wait_group_gone(pgid)
    _, finished = one_call(events, "run_command")
    assert finished.status == "error" and finished.error_code == "EXECUTOR_UNAVAILABLE", finished.content
    assert finished.rerun_after is None
    assert ran.read_text() == f"{pgid}\n"  # ran once: never again on the next child


async def test_a_call_of_a_remote_executor_that_died_is_not_run_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = held_at(monkeypatch, tmp_path, "before_reply")
    remote = start_executor(tmp_path / "remote")
    try:
        async with remote_pool(remote, tmp_path / "executors") as pool:
            edit = tools_by_name(pool, tmp_path / "artifacts")["edit_file"]
            killed: list[int] = []
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(kill_when_held, held, killed)
                    with pytest.raises(ToolError) as err:
                        await edit.run({"path": "r.txt", "mode": "create", "content": "once\n"},
                                       tool_ctx("ses_r", "c1"))
        assert killed == [remote.proc.pid]
        assert err.value.code == "EXECUTOR_UNAVAILABLE"
        assert (remote.workspace / "r.txt").read_text() == "once\n"  # written, then killed before replying
    finally:
        stop_process(remote.proc)


async def test_no_other_write_runs_between_the_death_and_the_second_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A command waiting for the domain's write lock while the edit is held: it runs after the
    # edit's second run, never on the respawned child before it (it would see the old text).
    held = held_at(monkeypatch, tmp_path, "before_publish")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("old\n")
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        specs = tools_by_name(pool, tmp_path / "artifacts")
        results: dict[str, Any] = {}

        async def run(name: str, args: dict[str, Any]) -> None:
            results[name] = await specs[name].run(args, tool_ctx("ses_l", f"c_{name}"))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "edit_file", {"path": "f.txt", "mode": "rewrite", "content": "new\n"})
                await wait_path(held, timeout=30)
                lock = (await pool.get("p")).lock
                nursery.start_soon(run, "run_command", {"command": "cat f.txt > seen.txt"})
                while lock._writers_waiting == 0:  # (the command waits for the lock the edit holds)
                    await trio.sleep(0.01)
                os.kill(int(held.read_text()), signal.SIGKILL)
    edit, command = results["edit_file"], results["run_command"]
    assert not edit.is_error and edit.rerun_after == "EXECUTOR_UNAVAILABLE", edit.content
    assert not command.is_error and command.rerun_after is None, command.content
    assert (ws / "seen.txt").read_text() == "new\n"


async def test_a_call_of_a_session_aborted_before_its_executor_died_is_not_run_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from events import types as t
    from runtime.actor import Abort, Submit, WaitIdle

    held = held_at(monkeypatch, tmp_path, "before_publish")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("a\n")
    script = [FauxTurn(when="please edit", tool_calls=[FauxToolCall("edit_file", {
        "path": "f.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "ab"}]})])]
    # (the held edit never ends: the abort lets its lock go after the pool's bound, kept short)
    async with agent_runtime(tmp_path, ws, script, call_end_wait_s=0.3) as (sup, store, _faux, _pool):
        sid = await sup.create_session("proj")
        await sup.call(sid, Submit("r1", [t.TextPart("please edit it")], "followUp"))
        await wait_path(held, timeout=30)
        assert (await sup.call(sid, Abort()))["aborted"] is True
        os.kill(int(held.read_text()), signal.SIGKILL)  # the held edit's child dies after the abort
        await sup.call(sid, WaitIdle())
        events = await events_of(store, sid)
    assert (ws / "f.txt").read_text() == "a\n"
    _, finished = one_call(events, "edit_file")
    assert finished.status != "ok" and finished.rerun_after is None, finished


@pytest.mark.parametrize("point", ["before_listening", "before_hello"])
async def test_a_child_killed_while_the_pool_starts_it_is_started_once_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    # The call never reached the killed child: any call, replay-safe or not, runs on the next.
    held = held_at(monkeypatch, tmp_path, point)
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        command = tools_by_name(pool, tmp_path / "artifacts")["run_command"]
        killed: list[int] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_when_held, held, killed)
                result = await command.run({"command": "echo ran >> ran.txt"}, tool_ctx("ses_s", "c1"))
        ex = await pool.get("p")
        assert ex.process is not None and len(killed) == 1 and ex.process.pid != killed[0]
    assert not result.is_error, result.content
    assert result.rerun_after is None  # (ran once: only the child was started again)
    assert (ws / "ran.txt").read_text() == "ran\n"


async def test_a_second_child_killed_while_it_starts_ends_the_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One more start, never a loop: the second child killed at the same point ends the call, and
    # no third is started (it would claim the hold file, written again, and hold the call).
    held = held_at(monkeypatch, tmp_path, "before_hello")
    hold = tmp_path / "hold"
    ws = tmp_path / "ws"
    ws.mkdir()
    killed: list[int] = []

    async def kill_each_held() -> None:
        for _ in range(2):
            await wait_path(held, timeout=30)
            pid = int(held.read_text())
            held.unlink()
            hold.write_text("before_hello")  # (the next child started holds too)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        command = tools_by_name(pool, tmp_path / "artifacts")["run_command"]
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_each_held)
                with pytest.raises(ToolError) as err:
                    await command.run({"command": "echo ran >> ran.txt"}, tool_ctx("ses_s", "c1"))
    assert len(killed) == 2 and killed[0] != killed[1]
    assert err.value.code == "EXECUTOR_UNAVAILABLE" and "did not start: killed" in err.value.message, err.value
    assert hold.read_text() == "before_hello" and not held.exists()  # no third child claimed it
    assert not (ws / "ran.txt").exists()


@pytest.mark.parametrize("point", ["before_listening", "before_hello"])
async def test_a_child_the_pool_stops_while_it_starts_is_not_taken_for_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, point: str) -> None:
    # The pool stops (the daemon stopping) while a caller outside it waits for a child held at a
    # point of its start: the pool's own SIGTERM (and, the child not ending by it, the SIGKILL
    # after it) is no death from outside. The caller is told the executor is unavailable, and no
    # other child is started: before, the pool took it for killed and spawned one more, which
    # its closed nursery could not own (a RuntimeError and a child left running).
    held = held_at(monkeypatch, tmp_path, point)
    ws = tmp_path / "ws"
    ws.mkdir()

    async def workspace_of(project_id: str) -> Path | None:
        return ws if project_id == "p" else None

    pool = ExecutorPool(tmp_path / "executors", workspace_of)
    pool_scope = trio.CancelScope()
    got: list[BaseException] = []

    async def run_pool(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with pool_scope:
            await pool.run(task_status=task_status)

    async def ask() -> None:
        try:
            await pool.get("p")
        except Exception as exc:
            got.append(exc)

    caplog.set_level(logging.INFO, logger="lens.executors")
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(run_pool)
            nursery.start_soon(ask)
            await wait_path(held, timeout=30)
            pid = int(held.read_text())
            pool_scope.cancel()  # (the caller is not cancelled: only the pool stops)
    assert len(got) == 1 and isinstance(got[0], ExecutorUnavailable), got
    assert not isinstance(got[0], KilledWhileStarting) and "killed" not in got[0].message, got[0]
    assert not any("starting another" in r.getMessage() for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if "on port" in r.getMessage()] == []  # no other child
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # (the held child is gone, not left behind)
