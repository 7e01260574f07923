"""``Stop`` through the real executor process: a command run under a ``run_id`` is ended, and its
stream still ends with its exit, which says how it ended (``stopped``, the signal or its own exit
code). Every command prints its process group id first; what is left of the group is killed on
the way out, whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from proto import executor_pb2 as pb
from runtime.executor_client import ExecutorClient, ExecutorError, ExecutorToolError
from runtime.stop_now import StopNow
from tools.command_output import StreamJoin
from tools.executor.commands import KILL_GRACE_S
from tools.executor.runs import MAX_RUN_ID_CHARS
from tools.workspace_tools import ABORT_OUTPUT_WAIT_S, ABORT_STOP_ANSWER_WAIT_S, stop_and_drain

from ..procfs import alive, all_threads_stopped
from .conftest import reaping, running_executor, wait_group_gone
from .relay import Relay
from .test_commands import BOUND_S, collect


async def _run_and_stop(client: ExecutorClient, command: str, run_id: str, groups: list[int], *,
                        before_stop: Any = None) -> tuple[bytes, pb.CommandExit, pb.StopReply]:
    """Run ``command`` (which prints ``$$`` then ``ready``), stop it once ``ready`` came, and read
    its stream to the end: the output, the exit, and what ``Stop`` answered."""
    found = None

    async def on_stdout(out: bytes) -> None:
        nonlocal found
        if not groups and b"\n" in out:
            groups.append(int(out.split(b"\n", 1)[0]))
        if found is None and b"ready\n" in out:
            if before_stop is not None:
                await before_stop(groups[0])
            found = await client.stop(run_id, BOUND_S)

    out, _err, exit_ = await collect(client, command, run_id=run_id, on_stdout=on_stdout)
    assert found is not None, (out, exit_, found)
    return out, exit_, found


async def test_a_stopped_command_s_stream_ends_with_its_exit_killed_by_sigterm(client: ExecutorClient) -> None:
    with reaping() as groups:
        out, exit_, found = await _run_and_stop(client, "echo $$; echo ready; sleep 600", "stop-1", groups)
        # (the answer comes once the command has ended, with the exit its stream sent)
        assert (found.found, found.ended, found.exit) == (True, True, exit_), found
        assert (exit_.exit_code, exit_.stopped, exit_.timed_out) == (-15, True, False), exit_
        assert out.endswith(b"ready\n"), out
        assert wait_group_gone(groups[0]) == []


async def test_a_stopped_command_that_traps_the_signal_ends_with_its_own_code_and_last_output(
        client: ExecutorClient) -> None:
    # (``wait``, not a foreground ``sleep``: a SIGTERM that came before the shell started a
    # foreground sleep would run the trap only once that sleep ended)
    with reaping() as groups:
        out, exit_, found = await _run_and_stop(
            client, "trap 'echo cleaning up; exit 3' TERM; echo $$; sleep 600 & echo ready; wait", "stop-2", groups)
        assert (found.found, found.ended, found.exit) == (True, True, exit_), found
        assert (exit_.exit_code, exit_.stopped) == (3, True), (exit_, out)
        assert out.endswith(b"ready\ncleaning up\n"), out


async def test_a_command_whose_shell_had_exited_by_itself_is_not_said_stopped(client: ExecutorClient) -> None:
    """The shell exited 3 and left a background job holding its output: the stop ends the job,
    but the command's end is its own."""
    async def shell_gone(pid: int) -> None:
        with trio.fail_after(BOUND_S):
            while alive(pid):  # (the shell may be reaped between two reads of /proc)
                await trio.sleep(0.005)

    # The executor ends what is left of a group DRAIN_GRACE_S (0.5 s) after its shell exited: a
    # Stop later than that (a loaded machine) finds the command over, with the same exit. Each
    # try checks the exit; the Stop must have found the command running in one of three.
    founds = []
    for attempt in range(3):
        with reaping() as groups:
            out, exit_, found = await _run_and_stop(client, "echo $$; echo ready; (sleep 600 &); exit 3",
                                                    f"stop-3-{attempt}", groups, before_stop=shell_gone)
            assert (exit_.exit_code, exit_.stopped) == (3, False), exit_
            assert wait_group_gone(groups[0]) == []
        founds.append(found.found)
        if found.found:
            assert (found.ended, found.exit) == (True, exit_), found
            break
    assert founds[-1] is True, founds


async def test_stop_of_no_running_command_finds_none(client: ExecutorClient) -> None:
    assert (await client.stop("never-ran", BOUND_S)).found is False
    _, _, exit_ = await collect(client, "exit 0", run_id="ran-and-ended")
    assert (exit_.exit_code, exit_.stopped) == (0, False)
    assert (await client.stop("ran-and-ended", BOUND_S)).found is False


@pytest.mark.parametrize("length", [MAX_RUN_ID_CHARS, MAX_RUN_ID_CHARS + 1])
async def test_a_run_id_of_at_most_128_characters_is_taken(client: ExecutorClient, length: int) -> None:
    if length <= MAX_RUN_ID_CHARS:
        _, _, exit_ = await collect(client, "exit 0", run_id="r" * length)
        assert exit_.exit_code == 0
        return
    with pytest.raises(ExecutorToolError) as caught:
        await collect(client, "touch should-not-run", run_id="r" * length)
    assert caught.value.code == "INVALID_ARGUMENT", caught.value
    assert str(caught.value) == f"run_id must be at most {MAX_RUN_ID_CHARS} characters; it has {length}"


async def test_a_run_id_in_use_is_refused_and_nothing_starts(client: ExecutorClient, executor: Any,
                                                              workspace: Path) -> None:
    other = ExecutorClient(executor.address, executor.token)  # (one stream per task and client)
    with reaping() as groups, contextlib.closing(other):
        with trio.fail_after(BOUND_S):
            async with client.run("echo $$; sleep 600", run_id="twice") as events:
                ev = await events.receive()
                groups.append(int(ev.stdout.split(b"\n", 1)[0]))
                with pytest.raises(ExecutorToolError) as caught:
                    await collect(other, "touch second-ran", run_id="twice")
                assert caught.value.code == "RUN_ID_IN_USE", caught.value
                assert not (workspace / "second-ran").exists()
        assert wait_group_gone(groups[0]) == []


async def test_an_executor_without_stop_leaves_the_abort_as_it_was(executor: Any) -> None:
    """An executor built before ``Stop`` (a relay without it: UNIMPLEMENTED): Core's stop-and-read
    reads the output on its way for the abort's wait from the ``Stop`` sent, not the longer bound
    on an answer, and knows no exit; leaving the stream ends the command, as before."""
    with Relay(executor.address, missing=("Stop",)) as relay, reaping() as groups:
        client = ExecutorClient(relay.address, executor.token)
        with contextlib.closing(client):
            await client.hello()
            with pytest.raises(ExecutorError) as caught:
                await client.stop("old", BOUND_S)
            assert "UNIMPLEMENTED" in str(caught.value), caught.value
            out = bytearray()
            join = StreamJoin(out.extend, whole_lines=True)
            with trio.fail_after(BOUND_S):
                async with client.run("echo $$; echo ready; sleep 600", run_id="old") as events:
                    while b"ready\n" not in out:
                        ev = await events.receive()
                        join.write(ev.WhichOneof("event"), ev.stdout or ev.stderr)
                    groups.append(int(out.split(b"\n", 1)[0]))
                    began = trio.current_time()
                    assert await stop_and_drain(client, "old", events, join) == (None, False)
                    assert trio.current_time() - began < ABORT_OUTPUT_WAIT_S + 1
            assert wait_group_gone(groups[0]) == []


TRAPPING = "trap 'echo cleaning up; exit 3' TERM; echo $$; sleep 600 & echo ready; wait"


async def _until_ready(client: ExecutorClient, command: str, run_id: str, groups: list[int],
                       aborted: Any) -> tuple[bytes, Any]:
    """Run ``command`` (which prints ``$$`` then ``ready``) under ``run_id``; once ``ready`` came,
    ``await aborted(events, join)`` (an abort's stop-and-read) inside the stream: the output and
    what it returned."""
    out = bytearray()
    join = StreamJoin(out.extend, whole_lines=True)
    with trio.fail_after(BOUND_S):
        async with client.run(command, run_id=run_id) as events:
            while b"ready\n" not in out:
                ev = await events.receive()
                if isinstance(ev, Exception):
                    raise ev
                join.write(ev.WhichOneof("event"), ev.stdout or ev.stderr)
            groups.append(int(out.split(b"\n", 1)[0]))
            got = await aborted(events, join)
    join.flush()
    return bytes(out), got


@contextlib.contextmanager
def frozen(pid: int) -> Any:
    """The process ``pid`` gets no time (SIGSTOP) until the block ends (SIGCONT), or a SIGCONT sent
    within it. The block begins once every thread of it is stopped: on a loaded host a thread of
    the executor could still answer a call sent right after the signal."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10  # (a bound for the machine, not the thing tested)
    while not all_threads_stopped(pid):
        assert time.monotonic() < deadline, f"process {pid} did not stop within 10 s of SIGSTOP"
        time.sleep(0.001)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_the_wait_for_the_exit_counts_from_the_executor_s_answer_on_a_slow_host(
        client: ExecutorClient, executor: Any) -> None:
    """The executor gets no time from just before the stop until 0.6 s later, longer than
    ``ABORT_OUTPUT_WAIT_S`` (a loaded host): the exit still comes back, with the trap's code
    and last line, since the wait counts from the executor's answer to ``Stop``."""
    took: list[float] = []

    async def aborted(events: Any, join: StreamJoin) -> Any:
        async with trio.open_nursery() as nursery:
            with frozen(executor.pid):
                async def thaw() -> None:
                    await trio.sleep(0.6)  # (a slow host: the executor gets no time for this long)
                    os.kill(executor.pid, signal.SIGCONT)

                nursery.start_soon(thaw)
                began = trio.current_time()
                with trio.CancelScope(shield=True):  # (as an abort calls it: its own bounds only)
                    ended, whole = await stop_and_drain(client, "slow-host", events, join)
                took.append(trio.current_time() - began)
                assert whole  # (the stream was read to its exit)
        return ended

    with reaping() as groups:
        out, ended = await _until_ready(client, TRAPPING, "slow-host", groups, aborted)
        assert ended is not None, (out, took)
        assert (ended.exit_code, ended.stopped) == (3, True), ended
        assert out.endswith(b"ready\ncleaning up\n"), out
        assert 0.6 <= took[0] < ABORT_STOP_ANSWER_WAIT_S, took
        assert wait_group_gone(groups[0]) == []


# A command whose cleanup on SIGTERM takes longer than ABORT_OUTPUT_WAIT_S (the trap's own
# ``sleep``: the command's length, not an ordering of the test), well within the executor's grace.
SLOW_CLEANUP_S = 0.75
SLOW_TRAP = (f"trap 'sleep {SLOW_CLEANUP_S}; echo cleaning up; exit 3' TERM; echo $$; "
             "sleep 600 & echo ready; wait")


async def _timed_stop(client: ExecutorClient, command: str, run_id: str) -> tuple[bytes, Any, float]:
    """Run ``command`` under ``run_id`` and, once it is ready, stop and read it as an abort does
    (shielded, its own bounds only): the output, what the stop-and-read returned, how long it took."""
    took: list[float] = []

    async def aborted(events: Any, join: StreamJoin) -> Any:
        began = trio.current_time()
        with trio.CancelScope(shield=True):
            ended, whole = await stop_and_drain(client, run_id, events, join)
        took.append(trio.current_time() - began)
        assert whole == (ended is not None)  # (an exit here is the stream's own)
        return ended

    with reaping() as groups:
        out, ended = await _until_ready(client, command, run_id, groups, aborted)
        assert wait_group_gone(groups[0]) == []
    return out, ended, took[0]


async def test_a_command_whose_cleanup_outlasts_the_output_wait_is_read_to_its_own_exit(
        client: ExecutorClient) -> None:
    """The command's trap takes longer than ``ABORT_OUTPUT_WAIT_S`` to end it: the executor
    answers ``Stop`` once the command has ended, so its own exit 3 and last line are read (before,
    the answer came at once and the read gave up 0.25 s later with no exit)."""
    assert ABORT_OUTPUT_WAIT_S < SLOW_CLEANUP_S < KILL_GRACE_S
    out, ended, took = await _timed_stop(client, SLOW_TRAP, "slow-cleanup")
    assert ended is not None, (out, took)
    assert (ended.exit_code, ended.stopped) == (3, True), ended
    assert out.endswith(b"ready\ncleaning up\n"), out
    assert SLOW_CLEANUP_S <= took < ABORT_STOP_ANSWER_WAIT_S, took


async def test_a_command_that_ignores_sigterm_is_read_to_its_sigkill_after_the_grace(client: ExecutorClient) -> None:
    """A command that ignores SIGTERM is killed ``KILL_GRACE_S`` after the stop: the abort waits
    that long, no longer than its bound, and gets the SIGKILL exit (before: none, after 0.25 s)."""
    out, ended, took = await _timed_stop(client, "trap '' TERM; echo $$; sleep 600 & echo ready; wait", "ignores-term")
    assert ended is not None, (out, took)
    assert (ended.exit_code, ended.stopped) == (-signal.SIGKILL, True), ended
    assert out.endswith(b"ready\n"), out
    assert KILL_GRACE_S <= took < ABORT_STOP_ANSWER_WAIT_S, took


async def test_an_executor_that_never_answers_the_stop_holds_the_abort_no_longer_than_its_bound(
        client: ExecutorClient, executor: Any) -> None:
    """The executor gets no time at all during the stop: the stop-and-read ends, with no exit, at
    ``ABORT_STOP_ANSWER_WAIT_S`` from the ``Stop`` sent; leaving the stream then ends the command
    once the executor runs again."""
    took: list[float] = []

    async def aborted(events: Any, join: StreamJoin) -> Any:
        with frozen(executor.pid):
            began = trio.current_time()
            ended, whole = await stop_and_drain(client, "never-answers", events, join)
            assert not whole
            took.append(trio.current_time() - began)
        return ended

    with reaping() as groups:
        out, ended = await _until_ready(client, TRAPPING, "never-answers", groups, aborted)
        assert ended is None, ended
        assert ABORT_STOP_ANSWER_WAIT_S <= took[0] < ABORT_STOP_ANSWER_WAIT_S + 1, took
        assert out.endswith(b"ready\n"), out
        assert wait_group_gone(groups[0]) == []


async def test_an_abort_whose_executor_is_gone_does_not_wait(tmp_path: Path) -> None:
    """The executor is killed while the command runs: its ``Stop`` fails and its stream ends at
    once, so the stop-and-read returns with no exit within ``ABORT_OUTPUT_WAIT_S`` (not the
    bound on an answer)."""
    took: list[float] = []
    async with running_executor(tmp_path) as (gone, client):

        async def aborted(events: Any, join: StreamJoin) -> Any:
            gone.proc.kill()
            gone.proc.wait()
            began = trio.current_time()
            ended, whole = await stop_and_drain(client, "gone", events, join)
            assert not whole
            took.append(trio.current_time() - began)
            return ended

        with reaping() as groups:
            out, ended = await _until_ready(client, "echo $$; echo ready; sleep 600", "gone", groups, aborted)
            assert ended is None, ended
            assert took[0] < ABORT_OUTPUT_WAIT_S + 0.5, took
            assert out.endswith(b"ready\n"), out


async def test_an_exit_only_the_stop_answer_gave_is_said_to_leave_the_output_unread(executor: Any) -> None:
    """The executor answers ``Stop`` with the exit, but the stream's exit (and whatever it sent
    with it) never reaches Core (a relay withholds it): the stop-and-read gives the answer's exit
    at its bound, saying the stream was not read to it, so the caller marks the output cut."""
    with Relay(executor.address, withhold_exit=True) as relay, reaping() as groups:
        client = ExecutorClient(relay.address, executor.token)
        with contextlib.closing(client):
            await client.hello()
            took: list[float] = []

            async def aborted(events: Any, join: StreamJoin) -> Any:
                began = trio.current_time()
                with trio.CancelScope(shield=True):
                    got = await stop_and_drain(client, "withheld", events, join)
                took.append(trio.current_time() - began)
                return got

            out, (ended, whole) = await _until_ready(client, TRAPPING, "withheld", groups, aborted)
            assert ended is not None and (ended.exit_code, ended.stopped) == (3, True), ended
            assert not whole
            assert ABORT_STOP_ANSWER_WAIT_S <= took[0] < ABORT_STOP_ANSWER_WAIT_S + 1, took
        assert wait_group_gone(groups[0]) == []


async def test_the_daemons_second_stop_signal_ends_the_wait_for_a_stop_the_executor_never_answers(
        client: ExecutorClient, executor: Any) -> None:
    """The executor gets no time during the stop (a remote one, stuck): the stop-and-read would
    wait ``ABORT_STOP_ANSWER_WAIT_S``; the daemon's stop now (a second stop signal) ends it at
    once, as it ends the stop's other waits, with no exit known."""
    stop_now = StopNow()
    took: list[float] = []

    async def aborted(events: Any, join: StreamJoin) -> Any:
        async with trio.open_nursery() as nursery:
            with frozen(executor.pid):
                async def second_signal() -> None:
                    await trio.sleep(0.3)
                    stop_now.set()

                nursery.start_soon(second_signal)
                began = trio.current_time()
                with trio.CancelScope(shield=True):  # (as an abort calls it)
                    got = await stop_and_drain(client, "stop-now", events, join, stop_now)
                took.append(trio.current_time() - began)
        return got

    with reaping() as groups:
        out, (ended, whole) = await _until_ready(client, TRAPPING, "stop-now", groups, aborted)
        assert (ended, whole) == (None, False)
        assert 0.3 <= took[0] < ABORT_STOP_ANSWER_WAIT_S - 2, took
        assert out.endswith(b"ready\n"), out
        assert wait_group_gone(groups[0]) == []
