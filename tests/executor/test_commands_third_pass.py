"""Commands and the execution-domain lock as a stranger tries them, a third time: through a
real executor process (and the Core tools over the pool where the model's view matters)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest
import trio

from runtime.executor_client import ExecutorClient
from runtime.executors import Executor
from tests.procfs import read_proc
from tools.base import ToolError, ToolSpec
from tools.executor.commands import Chunk, Exit, _shell_alive, run_command

from .conftest import (ExecutorProcess, poll_until, reaping, remote_pool, start_executor, stop_process, tool_ctx,
                       tools_by_name, until, wait_group_gone)
from .test_commands import BOUND_S, collect
from .test_tools import CoreTools, core, sub  # noqa: F401  (fixtures)


# What a shell leaves ignoring SIGTERM keeps the reaper 2.5 s past the shell's exit (its half
# second, then SIGKILL 2 s after its SIGTERM): a timeout of 2 s falls in that time when the
# shell ends within it (it exits at once: the 2 s are a loaded host's room to start it).
IGNORING = "trap '' TERM; exec sleep 30"


def _gone(pid: int) -> bool:
    return (p := read_proc(pid)) is None or p.state in ("Z", "X")


@pytest.mark.parametrize("command, code", [
    (f"echo $$; ({IGNORING}) & echo started", 0),                        # (holding the output pipe)
    (f"echo $$; (({IGNORING}) >/dev/null 2>&1 &); echo started", 0),     # (holding nothing of it)
    # (out of the group, in a session and group of its own: `$!`, the pid setsid runs as)
    (f"echo $$; setsid sh -c \"{IGNORING}\" & echo $! started; exit 3", 3),
])
async def test_a_shell_done_within_its_timeout_is_not_said_timed_out_for_its_leftovers(
        client: ExecutorClient, command: str, code: int) -> None:
    # Before: a shell that exited at once was reported `timed_out` (beside its own exit) when
    # the ending of what it left ran past the timeout.
    with reaping() as groups:
        out, _, ex = await collect(client, command, timeout_ms=2_000)
        pgid, *escaped, said = out.split()
        groups += [int(pgid), *map(int, escaped)]
        assert said == b"started", out
        assert (ex.exit_code, ex.timed_out) == (code, False), ex
        assert ex.duration_ms < 6_000, ex  # (its 2.5 s, with room for a loaded host)
        assert wait_group_gone(int(pgid)) == []  # what it left is ended all the same
        for pid in map(int, escaped):  # (the setsid one too, out of the group)
            assert poll_until(lambda: _gone(pid), BOUND_S), read_proc(pid)


async def test_a_shell_done_within_its_timeout_reads_as_an_exit_to_the_model(core: CoreTools, sub: str) -> None:
    _, res = await core.run("run_command", {"command": f"({IGNORING}) & echo started", "timeout_ms": 2_000,
                                            "cwd": sub})
    assert not res.is_error, res.content
    assert res.content[0].text == "started\n\n[exit 0]"
    assert res.structured_content["timed_out"] is False


async def test_a_shell_still_running_at_its_timeout_is_timed_out(client: ExecutorClient) -> None:
    # (the other side of the same line: a leftover does not hide the shell's own overrun)
    with reaping() as groups:
        out, _, ex = await collect(client, "echo $$; sleep 30 & sleep 30", timeout_ms=1_000)
        groups.append(int(out.split()[0]))
        assert ex.timed_out and ex.exit_code == -15, ex
        assert wait_group_gone(groups[-1]) == []


@pytest.mark.parametrize("args, says", [
    ({"timeout_ms": 3_600_001}, "timeout_ms must be an integer from 0 to 3600000, got 3600001"),
    ({"timeout_ms": -1}, "timeout_ms must be an integer from 0 to 3600000, got -1"),
    ({"timeout_ms": 1.5}, "timeout_ms must be an integer from 0 to 3600000, got 1.5"),
    ({"timeout_ms": "100"}, 'timeout_ms must be an integer from 0 to 3600000, got "100"'),
    ({"timeout_ms": True}, "timeout_ms must be an integer from 0 to 3600000, got true"),
    ({"timeout_ms": 10 ** 30}, "timeout_ms must be an integer from 0 to 3600000, got 1000000000000000000000000000000"),
    ({"max_output_bytes": 16 * 1024 * 1024 + 1}, "max_output_bytes must be an integer from 0 to 16777216, got 16777217"),
])
async def test_a_refused_timeout_or_cap_is_named_with_the_value_received(core: CoreTools, sub: str, workspace: Path,
                                                                           args: dict, says: str) -> None:
    # Before: the range alone, whatever was sent (web_search and capability_search name the value).
    _, res = await core.run("run_command", {"command": "touch ran", "cwd": sub, **args})
    assert res.is_error and res.error_code == "INVALID_ARGUMENT"
    assert res.content[0].text == f"INVALID_ARGUMENT: {says}", res.content
    assert not (workspace / sub / "ran").exists()  # nothing ran


@pytest.mark.parametrize("timeout_ms", [3_600_000, 0, None])  # (None: null is the argument left out)
async def test_a_timeout_at_its_most_or_zero_runs(core: CoreTools, sub: str, timeout_ms: int | None) -> None:
    _, res = await core.run("run_command", {"command": "echo ran", "timeout_ms": timeout_ms, "cwd": sub})
    assert not res.is_error and res.content[0].text == "ran\n\n[exit 0]", res.content


@pytest.mark.parametrize("command, timeout_ms, timed_out, code", [
    ("echo $$; kill -STOP $PPID; exit 0", 2_000, False, 0),     # (the shell exits in time, its parent stopped)
    ("echo $$; kill -STOP $PPID; exit 0", 60_000, False, 0),    # (... and is not held to its timeout)
    ("echo $$; kill -STOP $PPID; sleep 30 & exit 3", 60_000, False, 3),  # (nor by what it left)
    ("echo $$; kill -STOP $PPID; yes & exit 4", 60_000, False, 4),  # (what it left writing on)
    ("echo $$; kill -STOP $PPID; sleep 30", 1_000, True, -15),  # (the shell runs past its timeout)
])
async def test_a_command_that_stops_its_parent_ends_as_its_shell_did_promptly(
        client: ExecutorClient, command: str, timeout_ms: int, timed_out: bool, code: int) -> None:
    # The shell's parent (the reaper) reaps it and reports its end. Before: a command that stopped
    # it (SIGSTOP) held its end until the reaper was killed outright, 7 s past the timeout, and was
    # reported killed by SIGKILL whatever had ended the shell.
    with reaping() as groups:
        out, _, ex = await collect(client, command, timeout_ms=timeout_ms)
        groups.append(int(out.split()[0]))
        assert (ex.timed_out, ex.exit_code) == (timed_out, code), ex
        assert ex.duration_ms < 5_000, ex  # (before: 10 s, or the whole timeout)
        assert wait_group_gone(groups[-1]) == []


def test_a_command_that_stops_its_parent_leaves_nothing_running_while_its_caller_stops_reading(
        tmp_path: Path) -> None:
    # The timer thread holds the timeout for a caller parked between two chunks. Before: it saw
    # the shell exited and returned, the reaper stopped, and the `sleep 600` ran on for as long as
    # the caller did not read (`exit 0, not timed out, 5657 ms` after a 5 s stall).
    with reaping() as groups:
        run = run_command("sleep 600 >/dev/null 2>&1 & echo $$ $!; kill -STOP $PPID; exit 0", tmp_path,
                          timeout_ms=500, max_output=1024, cancelled=lambda: False)
        first = next(run)
        assert isinstance(first, Chunk), first
        pgid, left = (int(word) for word in first.data.split())
        groups.append(pgid)
        # not reading now
        assert poll_until(lambda: _gone(left), BOUND_S), read_proc(left)
        *rest, end = list(run)
        assert isinstance(end, Exit) and (end.exit_code, end.timed_out) == (0, False), end
        assert wait_group_gone(pgid) == []


def test_a_process_in_the_shells_pid_is_the_shell_only_as_the_reapers_child() -> None:
    # Asked at the deadline, after the shell may have been reaped and its group emptied
    # (`setsid … & exit 0`): its pid, reused by another process, was taken for the shell
    # (pid_max may be 32,768), and the command said timed out for a shell that had exited.
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)  # (a group's leader, as the shell)
    try:
        assert _shell_alive(other.pid, reaper=os.getpid())  # (this process is its parent)
        assert not _shell_alive(other.pid, reaper=os.getppid())  # (another process: not its parent)
    finally:
        other.kill()
        other.wait()
    assert not _shell_alive(other.pid, reaper=os.getpid())  # (gone)


# ---------------------------------------------------------------------------- F-EXE-8 the domain lock


async def _outcome(spec: ToolSpec, args: dict, call_id: str) -> tuple[str | None, str]:
    """A tool's end as (error code or None, text): a refusal raised before any result is one too."""
    try:
        res = await spec.run(args, tool_ctx("ses_lock3", call_id))
    except ToolError as exc:
        return exc.code, exc.message
    return res.error_code, res.content[0].text


@asynccontextmanager
async def _remote_tools(tmp_path: Path) -> AsyncIterator[tuple[ExecutorProcess, dict[str, ToolSpec], Executor]]:
    """A real executor process reached over gRPC as a project's remote executor: yields it, the
    workspace tools calling it by name, and the project's executor (with its domain lock)."""
    remote = start_executor(tmp_path / "remote")
    try:
        async with remote_pool(remote, tmp_path / "executors") as pool:
            tools = tools_by_name(pool, tmp_path / "artifacts")
            yield remote, tools, await pool.get("p")
    finally:
        stop_process(remote.proc)


async def test_waiters_cancelled_behind_a_command_leave_the_lock_free_and_never_run(tmp_path: Path) -> None:
    async with _remote_tools(tmp_path) as (remote, tools, ex):
        ws = remote.workspace
        (ws / "f.txt").write_text("f\n")
        ended: dict[str, tuple[str | None, str]] = {}
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                async def holder() -> None:
                    ended["holder"] = await _outcome(tools["run_command"], {
                        "command": "touch go; while [ ! -e release ]; do sleep 0.01; done"}, "c1")

                nursery.start_soon(holder)
                await until((ws / "go").exists)
                scopes: list[trio.CancelScope] = []
                for name, args in [("read_file", {"path": "f.txt"}),
                                   ("run_command", {"command": "touch ran"}),
                                   ("edit_file", {"path": "g.txt", "mode": "create", "content": "g\n"})]:
                    scope = trio.CancelScope()
                    scopes.append(scope)

                    async def waiter(scope: trio.CancelScope = scope, name: str = name, args: dict = args) -> None:
                        with scope:
                            ended[name] = await _outcome(tools[name], args, f"w_{name}")

                    nursery.start_soon(waiter)
                await until(lambda: ex.lock._writers_waiting == 2)  # (the command and the edit wait)
                for scope in scopes:
                    scope.cancel()
                await until(lambda: ex.lock._writers_waiting == 0)
                assert not ex.lock.idle  # (the holder's command still runs)
                (ws / "release").touch()
        assert ended == {"holder": (None, "\n[exit 0]")}  # the waiters gave up, never ran
        assert ex.lock.idle
        assert not (ws / "ran").exists() and not (ws / "g.txt").exists()
        assert await _outcome(tools["read_file"], {"path": "f.txt"}, "after") == (None, "f\n")


async def test_a_remote_executor_killed_under_a_command_frees_the_lock_and_every_waiter_is_told(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # (the command's group is killed on the way out: a killed executor cannot end it, docs/executor.md)
    with reaping() as groups, caplog.at_level(logging.WARNING, logger="lens.executors"):
        async with _remote_tools(tmp_path) as (remote, tools, ex):
            ws = remote.workspace
            ended: dict[str, tuple[str | None, str]] = {}
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    async def run(name: str, args: dict) -> None:
                        ended[name] = await _outcome(tools[name], args, f"k_{name}")

                    nursery.start_soon(run, "run_command", {"command": "echo $$ > pg; exec sleep 30"})
                    await until(lambda: (ws / "pg").exists() and (ws / "pg").read_text().endswith("\n"))
                    groups.append(int((ws / "pg").read_text()))
                    nursery.start_soon(run, "read_file", {"path": "."})
                    nursery.start_soon(run, "edit_file", {"path": "g.txt", "mode": "create", "content": "g\n"})
                    await until(lambda: ex.lock._writers_waiting == 1)
                    os.kill(remote.proc.pid, signal.SIGKILL)
            assert {name: code for name, (code, _) in ended.items()} == {
                "run_command": "EXECUTOR_UNAVAILABLE", "read_file": "EXECUTOR_UNAVAILABLE",
                "edit_file": "EXECUTOR_UNAVAILABLE"}, ended
            assert ex.lock.idle and not (ws / "g.txt").exists()
            with trio.fail_after(5):  # the next call is told at once, not held
                assert (await _outcome(tools["run_command"], {"command": "true"}, "next"))[0] == "EXECUTOR_UNAVAILABLE"
            assert ex.lock.idle
    # The command under way when the executor died (registered, silent: its pid went to a file)
    # is given up with the warning; the next one, refused at connect, never reached an executor:
    # no Stop, no warning (there was one, "the command of call ses_lock3:next was given up").
    warned = [r.getMessage() for r in caplog.records if r.name == "lens.executors"]
    assert [m for m in warned if "the command of call ses_lock3:" in m] == [
        m for m in warned if "the command of call ses_lock3:k_run_command was given up" in m] != [], warned


@pytest.mark.parametrize("cwd, code", [
    ("in/../out", "PATH_OUTSIDE_WORKSPACE"),   # (a link out reached after a `..`)
    ("chain", "PATH_OUTSIDE_WORKSPACE"),       # (a link to a link out)
    ("in/../../../x", "PATH_OUTSIDE_WORKSPACE"),  # (the sub directory, the root, above it)
    ("dangling", "NOT_FOUND"),
    ("loop", "TOO_MANY_LINKS"),
])
async def test_a_cwd_escaping_through_links_or_dots_runs_nothing(core: CoreTools, sub: str, workspace: Path,
                                                                 cwd: str, code: str) -> None:
    base = workspace / sub
    (base / "in").mkdir()
    (base / "out").symlink_to(workspace.parent)
    (base / "chain").symlink_to("out")
    (base / "dangling").symlink_to("nowhere")
    (base / "loop").symlink_to("loop")
    _, res = await core.run("run_command", {"command": "touch ran", "cwd": f"{sub}/{cwd}"})
    assert res.is_error and res.error_code == code, res.content
    assert f"{sub}/{cwd}" in res.content[0].text
    assert not list(workspace.parent.glob("ran")) and not (base / "ran").exists()
