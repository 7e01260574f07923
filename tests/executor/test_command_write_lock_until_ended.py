"""A ``run_command`` whose stream Core leaves before the command's exit keeps the workspace's
write lock until the executor says the command's group has ended (or, its local executor dead,
until the pool has ended the groups it left): the gRPC call's deadline
passed, the stream failed or ended without the exit, its caller cancelled with nothing kept.
Core asks ``Stop`` by the run's id (the executor answers once the run is over), bounded by the
pool's wait (or the daemon's stop now), then lets the lock go with a warning, the executor not
stopped. A refusal, which comes before anything runs, sends no ``Stop``.

The first command traps SIGTERM and lingers in its trap, then marks its end in a file; the second
command, a write of the same domain started while the first runs, says whether it found that
mark. Everything is real: the pool, the executor process over gRPC (behind a relay where the
stream is cut, or the ``Stop`` recorded or held), the workspace tools.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime import executor_client
from runtime.executor_client import ExecutorClient
from runtime.executors import LOST_GRACE_S, ExecutorPool
from tests.procfs import read_proc
from tools.artifacts import ArtifactStore
from tools.base import ToolContext, ToolError, ToolResult, ToolSpec
from tools.workspace_tools import ABORT_STOP_ANSWER_WAIT_S, workspace_tools

from .conftest import ExecutorProcess, kill_group, remote_pool, running_pool, tool_ctx, until, wait_path
from .lock_order import Behind, second_behind_first
from .relay import Relay
from .test_commands_second_pass import every_slot_held

_n = itertools.count()
# The first command: its shell traps SIGTERM, lingers LINGER_S in the trap, then marks its end
# and exits 3 (its ``sleep`` is ended by the SIGTERM; ``wait``, so the trap runs at once). It
# prints only once the second call waits for the lock (``<name>.go``): a relay cuts its stream there.
LINGER_S = 1.0
FIRST = ("trap 'sleep {linger}; echo > {name}.ended; exit 3' TERM; echo $$ > {name}.pid; "
         "while [ ! -e {name}.go ]; do sleep 0.01; done; echo started; sleep 600 & wait")
SECOND = "if [ -e {name}.ended ]; then echo after; else echo beside; fi"
# Core's bound where the daemon's stop now is what must end its wait: not reached by a stop
# that works, and short enough that a wait the stop does not end fails the test soon.
STOP_NOW_BOUND_S = 5.0


def ctx(call_id: str) -> ToolContext:
    """A call's context with nothing to keep a cut command's output (``cut_output`` None)."""
    return tool_ctx("ses_c", call_id)


def run_command(pool: ExecutorPool, tmp_path: Path) -> ToolSpec:
    return {s.name: s for s in workspace_tools(pool, ArtifactStore(tmp_path / "artifacts"))}["run_command"]


async def first_then_second(pool: ExecutorPool, tmp_path: Path, ws: Path, first: dict[str, Any], *,
                            cancel_first: bool = False, then: Callable[[Any], Awaitable[None]] | None = None,
                            within: float = 30) -> Behind:
    """Run ``first`` (a FIRST command, its name in ``first["name"]``) and, once it has started,
    SECOND as another call, which waits for the domain's write lock; ``cancel_first``: the
    first's caller is cancelled once the second waits; ``then(lock)`` runs after that."""
    name = first.pop("name")
    run = run_command(pool, tmp_path)

    async def started(cancel: trio.CancelScope) -> None:
        await wait_path(ws / f"{name}.pid")

    async def go(cancel: trio.CancelScope, lock: Any) -> None:
        (ws / f"{name}.go").write_text("")
        if cancel_first:
            cancel.cancel()
        if then is not None:
            await then(lock)

    return await second_behind_first(
        pool, lambda: run.run({"command": FIRST.format(linger=LINGER_S, name=name), **first}, ctx("c1")),
        lambda: run.run({"command": SECOND.format(name=name)}, ctx("c2")), first_holds=started, while_waiting=go,
        within=within)


def said(result: ToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def began_after_the_first_ended(second: ToolResult) -> None:
    assert not second.is_error, second.content
    assert said(second).startswith("after\n"), said(second)  # ("beside": it ran while the first still did)


async def test_a_command_past_its_streams_deadline_holds_the_lock_until_its_group_ended(
        executor: ExecutorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Core's deadline on the stream (the command's timeout and a margin, shortened here) passes
    # while the executor is still ending the command it timed out (its trap lingers): before,
    # Core let the lock go at its deadline and the next command ran beside the trap.
    monkeypatch.setattr(executor_client, "RUN_DEADLINE_MARGIN_S", 0.2)
    name = f"deadline{next(_n)}"
    async with remote_pool(executor, tmp_path / "executors") as pool:
        first, second, took = await first_then_second(pool, tmp_path, executor.workspace,
                                                      {"name": name, "timeout_ms": 300})
    assert isinstance(first, ToolError) and first.code == "EXECUTOR_TIMEOUT", first
    began_after_the_first_ended(second)
    assert took < ABORT_STOP_ANSWER_WAIT_S + 2, took


@pytest.mark.parametrize("cut", ["unavailable", "end"])
async def test_a_command_whose_stream_is_cut_holds_the_lock_until_its_group_ended(
        executor: ExecutorProcess, tmp_path: Path, cut: str) -> None:
    # The stream fails as a lost connection does (EXECUTOR_UNAVAILABLE), or ends with no exit
    # (COMMAND_LOST), while the command runs: the executor ends it, its trap lingering; before,
    # Core let the lock go as the stream ended.
    name = f"cut{next(_n)}"
    with Relay(executor.address, cut_run=cut) as relay:  # type: ignore[arg-type]
        async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
            first, second, took = await first_then_second(pool, tmp_path, executor.workspace, {"name": name})
    code = "EXECUTOR_UNAVAILABLE" if cut == "unavailable" else "COMMAND_LOST"
    assert isinstance(first, ToolError) and first.code == code, first
    began_after_the_first_ended(second)
    assert took < ABORT_STOP_ANSWER_WAIT_S + 2, took


async def test_a_cancelled_command_with_nothing_kept_holds_the_lock_until_its_group_ended(
        executor: ExecutorProcess, tmp_path: Path) -> None:
    # A caller cancelled whose context keeps no cut output (the actor's always does, and is
    # stopped and read to the exit: the abort path) left the stream at once before.
    name = f"cancel{next(_n)}"
    async with remote_pool(executor, tmp_path / "executors") as pool:
        first, second, took = await first_then_second(pool, tmp_path, executor.workspace, {"name": name},
                                                      cancel_first=True)
    assert first is None
    began_after_the_first_ended(second)
    assert took < ABORT_STOP_ANSWER_WAIT_S + 2, took


async def test_a_command_ended_by_its_own_timeout_is_over_when_its_exit_comes(
        executor: ExecutorProcess, tmp_path: Path) -> None:
    # No gap here, before or after: the executor sends the exit once the group has ended (its
    # trap included), so the stream's end already says the command is over.
    name = f"timeout{next(_n)}"
    async with remote_pool(executor, tmp_path / "executors") as pool:
        first, second, _ = await first_then_second(pool, tmp_path, executor.workspace,
                                                   {"name": name, "timeout_ms": 300})
    assert isinstance(first, ToolResult), first
    assert first.structured_content["timed_out"] and first.structured_content["exit_code"] == 3, first
    began_after_the_first_ended(second)


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "lens.executors"]


async def test_a_command_the_executor_answers_not_over_lets_the_lock_go_with_a_warning(
        executor: ExecutorProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The executor answers the Stop before the group has ended (found, not ended: its own wait is
    # bounded by the Stop's deadline, the pool's bound, shortened): the lock goes, as for an
    # editing call, with a warning, and neither the executor nor the command is stopped for it
    # (the trap still marks its end).
    name = f"answered{next(_n)}"
    ws = executor.workspace
    with caplog.at_level(logging.WARNING, logger="lens.executors"):
        async with remote_pool(executor, tmp_path / "executors", call_end_wait_s=0.3) as pool:
            first, second, _ = await first_then_second(pool, tmp_path, ws, {"name": name}, cancel_first=True)
            await wait_path(ws / f"{name}.ended")
    assert first is None
    assert not second.is_error and said(second).startswith("beside\n"), second.content
    assert any("command of call ses_c:c1" in m and "did not say it ended within 0.3 s" in m
               for m in warned(caplog)), warned(caplog)
    assert executor.proc.poll() is None


async def test_a_stop_never_answered_holds_the_lock_for_cores_bound_only(
        executor: ExecutorProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The relay holds the Stop: the executor never hears of it, and Core never gets an answer.
    # Core's own bound (shortened) is what lets the lock go: the second command waited that long
    # at least, and the warning names the command.
    name = f"unanswered{next(_n)}"
    with caplog.at_level(logging.WARNING, logger="lens.executors"), Relay(executor.address, hold_stop=True) as relay:
        async with remote_pool(executor, tmp_path / "executors", address=relay.address,
                               call_end_wait_s=0.5) as pool:
            first, second, took = await first_then_second(pool, tmp_path, executor.workspace, {"name": name},
                                                          cancel_first=True)
    assert first is None
    assert len(relay.stops) == 1, relay.stops  # (asked once, never answered)
    assert not second.is_error, second.content
    assert 0.5 <= took < ABORT_STOP_ANSWER_WAIT_S, took  # (the shortened bound, not the default's 4 s)
    assert any("the command of call ses_c:c1 was given up, and the executor of project p did not say it ended "
               "within 0.5 s" in m for m in warned(caplog)), warned(caplog)


async def test_stop_now_ends_the_wait_for_a_stop_never_answered(
        executor: ExecutorProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The daemon's stop now (a second stop signal) ends the wait at once, the Stop still held and
    # Core's bound (5 s) not reached: the second command runs before it. (The wait is shielded:
    # the bound is what ends it should the stop not, so it is kept short.)
    name = f"stopnow{next(_n)}"
    with caplog.at_level(logging.WARNING, logger="lens.executors"), Relay(executor.address, hold_stop=True) as relay:
        async with remote_pool(executor, tmp_path / "executors", address=relay.address,
                               call_end_wait_s=STOP_NOW_BOUND_S) as pool:
            async def stop_now(lock: Any) -> None:
                await until(lambda: relay.stops)  # (Core asked, and waits for the answer)
                assert lock._writers_waiting  # (the second still waits)
                pool.stop_now.set()

            first, second, took = await first_then_second(pool, tmp_path, executor.workspace, {"name": name},
                                                          cancel_first=True, then=stop_now, within=15)
    assert first is None
    assert not second.is_error, second.content
    assert took < STOP_NOW_BOUND_S, took
    # (the warning says what ended the wait: not the bound, which was far off)
    messages = [m for m in warned(caplog) if "ses_c:c1" in m]
    assert any("the command of call ses_c:c1 was given up, and the executor of project p had not said it ended "
               "when the daemon's stop ended the wait for it" in m for m in messages), messages
    assert not any("within" in m for m in messages), messages


async def test_a_command_refused_for_the_executors_slots_is_sent_again_and_never_stopped(
        executor: ExecutorProcess, client: ExecutorClient, tmp_path: Path) -> None:
    # A refusal comes before anything runs: no Stop is sent for it. Were one sent, the executor
    # would remember the run id as stopped and refuse the resend under it CANCELLED.
    with Relay(executor.address) as relay:
        async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
            run = run_command(pool, tmp_path)
            ended: list[Any] = []
            with trio.fail_after(30):
                async with every_slot_held(client) as free_one:  # (another client holds the executor's slots)
                    async with trio.open_nursery() as nursery:
                        async def command() -> None:
                            ended.append(await run.run({"command": "echo ran", "timeout_ms": 20_000}, ctx("c1")))

                        nursery.start_soon(command)
                        await until(lambda: any(" TOO_MANY_COMMANDS: " in f for f in relay.run_failures))
                        assert ended == []  # (refused by the executor, sent again)
                        free_one()
    [result] = ended
    assert not result.is_error and result.structured_content["exit_code"] == 0, result.content
    assert said(result).startswith("ran\n"), result.content
    assert relay.stops == []


# A command whose background writer (in the command's group, deaf to SIGTERM) outlives its
# executor: it rewrites ``<name>.beat`` every 10 ms; its pid is in ``<name>.writer``, the group's
# in ``<name>.pid``. The second write says whether the writer still ran when it began (a writer
# killed and ended but not yet waited for by its parent is a zombie: it runs no more; the pool's
# reap returns only once no process of the group runs, so a killed writer is never still ending).
OUTLIVING = ("echo $$ > {name}.pid; (trap '' TERM; while :; do echo > {name}.beat; sleep 0.01; done) & "
             "echo $! > {name}.writer; wait")
WRITER_SEEN = ("s=$(cut -d' ' -f3 /proc/$(cat {name}.writer)/stat 2>/dev/null); "
               "if [ -n \"$s\" ] && [ \"$s\" != Z ] && [ \"$s\" != X ]; then echo beside; else echo after; fi")


async def executor_dies_under_a_command(tmp_path: Path, *, call_end_wait_s: float | None = None,
                                        while_unreaped: Callable[[ExecutorPool], Awaitable[None]] | None = None,
                                        before_reap: Callable[[], None] | None = None) -> Behind:
    """Run OUTLIVING on project "p"'s local child, kill that child outright once the writer runs
    and a second write (WRITER_SEEN, project "q" on the same workspace: its own child, which reaps
    nothing of p's) waits for the lock. The test holds the dead child's standard output open,
    which the pool reads to its end before it reaps the child and ends its groups: that reap
    waits until the test lets it go, so the order is seen, not raced. It is let go once the
    second write has run (the lock let go before the reap), or once the first has found its child
    dead and still holds the lock; ``while_unreaped(pool)`` then runs first, and the output is
    let go after the second write has run; ``before_reap()`` runs just before it is let go
    otherwise."""
    name = f"died{next(_n)}"
    ws = tmp_path / "ws"
    ws.mkdir()
    pgid = 0
    held: list[int] = []
    try:
        async with running_pool(tmp_path / "executors", {"p": ws, "q": ws}, call_end_wait_s=call_end_wait_s) as pool:
            run = run_command(pool, tmp_path)
            await pool.get("q")  # (its child is up: the second write begins as soon as it may)
            ex = await pool.get("p")
            assert ex.process is not None
            process = ex.process
            second_ran = trio.Event()

            async def writing(cancel: trio.CancelScope) -> None:
                nonlocal pgid
                await wait_path(ws / f"{name}.beat")  # (the writer runs)
                await wait_path(ws / f"{name}.writer")
                pgid = int((ws / f"{name}.pid").read_text())

            async def killed(cancel: trio.CancelScope, lock: Any) -> None:
                held.append(os.open(f"/proc/{process.pid}/fd/1", os.O_WRONLY))
                process.kill()
                # (found dead: waited for, so no zombie is left; read from /proc, as trio's
                # returncode would wait for it itself)
                await until(lambda: second_ran.is_set() or (read_proc(process.pid) is None
                                                            and lock._writers_waiting))
                if while_unreaped is not None and not second_ran.is_set():
                    await while_unreaped(pool)
                    await until(second_ran.is_set)
                elif before_reap is not None:
                    before_reap()
                os.close(held.pop())

            async def second() -> ToolResult:
                try:
                    return await run.run({"command": WRITER_SEEN.format(name=name)}, tool_ctx("ses_c", "c2", "q"))
                finally:
                    second_ran.set()

            return await second_behind_first(
                pool, lambda: run.run({"command": OUTLIVING.format(name=name)}, ctx("c1")), second,
                first_holds=writing, while_waiting=killed)
    finally:
        for fd in held:
            os.close(fd)
        if pgid:
            kill_group(pgid)


async def test_a_command_whose_local_executor_died_holds_the_lock_until_its_groups_are_ended(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The child running the command is killed outright: its Stop fails. Before, the lock went at
    # once, and the pool ended the groups the child left only once it had reaped it: the domain's
    # next write began beside the command's writer.
    with caplog.at_level(logging.INFO, logger="lens.executors"):
        first, second, took = await executor_dies_under_a_command(tmp_path)
    assert isinstance(first, ToolError) and first.code == "EXECUTOR_UNAVAILABLE", first
    began_after_the_first_ended(second)
    assert took < ABORT_STOP_ANSWER_WAIT_S + 2, took
    assert any("the command of call ses_c:c1 was given up as the executor of project p died" in m
               and "were ended before the workspace's next write" in m for m in warned(caplog)), warned(caplog)
    assert not any("may run beside it" in m for m in warned(caplog)), warned(caplog)


async def test_the_wait_for_a_dead_executors_groups_is_bounded(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The pool does not end the dead child's groups within Core's bound (shortened): the lock
    # goes after it, with a warning that says so.
    with caplog.at_level(logging.WARNING, logger="lens.executors"):
        first, second, took = await executor_dies_under_a_command(
            tmp_path, call_end_wait_s=0.5, while_unreaped=lambda pool: trio.lowlevel.checkpoint())
    assert isinstance(first, ToolError) and first.code == "EXECUTOR_UNAVAILABLE", first
    assert not second.is_error and said(second).startswith("beside\n"), second.content
    assert 0.5 <= took < ABORT_STOP_ANSWER_WAIT_S, took
    assert any("the command of call ses_c:c1 was given up, and the executor of project p died under it, and the "
               "commands it left were not ended within 0.5 s" in m for m in warned(caplog)), warned(caplog)


async def test_stop_now_ends_the_wait_for_a_dead_executors_groups(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The daemon's stop now ends the wait for the pool's reap at once (Core's bound, 5 s, not
    # reached), and the warning says so, not that a bound passed.
    async def stop_now(pool: ExecutorPool) -> None:
        pool.stop_now.set()

    with caplog.at_level(logging.WARNING, logger="lens.executors"):
        first, second, took = await executor_dies_under_a_command(tmp_path, call_end_wait_s=STOP_NOW_BOUND_S,
                                                                  while_unreaped=stop_now)
    assert isinstance(first, ToolError) and first.code == "EXECUTOR_UNAVAILABLE", first
    assert not second.is_error and said(second).startswith("beside\n"), second.content
    assert took < STOP_NOW_BOUND_S, took
    messages = [m for m in warned(caplog) if "ses_c:c1" in m]
    assert any("died under it, and the daemon's stop ended the wait for the commands it left to be ended" in m
               for m in messages), messages
    assert not any("within" in m for m in messages), messages


async def test_a_stop_past_its_own_deadline_reads_as_the_bound_passing(
        executor: ExecutorProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        mock_clock: trio.testing.MockClock) -> None:
    # The Stop's own gRPC deadline and Core's scope are the same bound, on two clocks: which
    # passed first was a race. Here trio's clock stands still while the relay holds the Stop, so
    # Core's scope cannot end the wait: the Stop's DEADLINE_EXCEEDED does, and reads as the bound
    # passing, not as an executor that "could not be asked". (Were no deadline sent, nothing on
    # trio's clock would end the wait: the relay's hold, bounded in real time, fails it then.)
    mock_clock.rate = 1.0  # (the pool starts on real time)
    with caplog.at_level(logging.WARNING, logger="lens.executors"), Relay(executor.address, hold_stop=True) as relay:
        async with remote_pool(executor, tmp_path / "executors", address=relay.address,
                               call_end_wait_s=0.3) as pool:
            ex = await pool.get("p")
            mock_clock.rate = 0.0
            try:
                assert await pool.call_ended(ex, "held") is None
            finally:
                mock_clock.rate = 1.0
    assert not relay.held_past  # (the Stop's own deadline ended it, not the relay's bound)
    assert relay.stops == ["held"]
    messages = [m for m in warned(caplog) if "call held" in m]
    assert messages == ["call held was given up, and the executor of project p did not say it ended within 0.3 s: "
                        "the workspace's next write may run beside it"], messages


@pytest.mark.parametrize("stop_now", [False, True])
async def test_a_local_executor_known_dead_is_not_asked(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                        stop_now: bool) -> None:
    # The child has died and the pool has reaped it (its exit status read, its groups ended)
    # before the wait begins: no Stop is made (none takes a place in the pool's send order), and
    # the log says the commands were ended, even at the daemon's stop now (the reap is done:
    # there is nothing left to wait for, nor to warn of).
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        ex = await pool.get("p")
        assert ex.process is not None and ex.gone is not None
        ex.process.kill()
        with trio.fail_after(10):
            await ex.gone.wait()
        assert ex.process.returncode is not None
        if stop_now:
            pool.stop_now.set()
        sent = pool.send_order.next().seq
        with caplog.at_level(logging.INFO, logger="lens.executors"):
            assert await pool.call_ended(ex, "run1") is None
        assert pool.send_order.next().seq == sent + 1  # (no Stop took a place in between)
    messages = [m for m in warned(caplog) if "run1" in m]
    assert messages == [f"call run1 was given up as the executor of project p died (pid {ex.process.pid}, killed by "
                        f"SIGKILL): the process groups of the commands it left were ended before the workspace's "
                        f"next write (a process that left its group runs on until its command's reaper ends "
                        f"it)"], messages


async def test_a_live_local_executor_that_cannot_be_asked_is_not_waited_for(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, mock_clock: trio.testing.MockClock) -> None:
    # An earlier call found the child unreachable (``lost``), but it runs, and its Stop fails on
    # its closed channel, not for want of the child: the wait ends at once with the warning. The
    # clock jumps to the next deadline whenever nothing can run: a wait for the child to exit
    # would show as LOST_GRACE_S of trio time.
    mock_clock.rate = 1.0  # (the pool starts on real time)
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        ex = await pool.get("p")
        assert ex.process is not None
        ex.client.lost = True  # (as a call that found it unreachable leaves it)
        ex.client.close()
        mock_clock.autojump_threshold = 0
        try:
            start = trio.current_time()
            with caplog.at_level(logging.WARNING, logger="lens.executors"):
                assert await pool.call_ended(ex, "run1") is None
            took = trio.current_time() - start
        finally:
            mock_clock.autojump_threshold = math.inf
        assert ex.process.returncode is None
    assert took < LOST_GRACE_S / 2, took
    messages = [m for m in warned(caplog) if "run1" in m]
    assert len(messages) == 1, messages
    assert "the executor of project p could not be asked whether it ended (ValueError(" in messages[0], messages


def records_dir_a_file(tmp_path: Path) -> None:
    """The dead child's ``commands/`` replaced by a file: the registry cannot be opened at all
    (its ``mkdir`` fails), the pool's reap fails with the OSError."""
    [record] = (tmp_path / "executors").glob("*/commands/[0-9]*")  # (p's command: the one running)
    record.parent.rename(record.parent.with_name("moved"))
    record.parent.write_text("")


def record_unreadable(tmp_path: Path) -> None:
    """The running command's record replaced by a directory: the registry opens, but that record
    cannot be read (nor removed), so its group is not killed and the reap says it failed."""
    [record] = (tmp_path / "executors").glob("*/commands/[0-9]*")
    record.rename(record.with_name("moved"))
    record.mkdir()


@pytest.mark.parametrize(("spoil", "cause"), [(records_dir_a_file, "cannot end the commands executor"),
                                              (record_unreadable, "cannot read")])
async def test_a_dead_executors_groups_the_reap_cannot_end_are_warned_of(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, spoil: Callable[[Path], None], cause: str) -> None:
    # The reap of the dead child cannot end its groups: its state's commands directory cannot be
    # opened (an OSError out of the registry), or the running command's record cannot be read
    # (end_left says it failed). Either way it ends nothing, and the log says so, not that the
    # commands were ended; the command's writer runs on beside the next write.
    with caplog.at_level(logging.INFO, logger="lens.executors"):
        first, second, took = await executor_dies_under_a_command(tmp_path, before_reap=lambda: spoil(tmp_path))
    assert isinstance(first, ToolError) and first.code == "EXECUTOR_UNAVAILABLE", first
    assert not second.is_error and said(second).startswith("beside\n"), second.content
    messages = [m for m in warned(caplog) if "ses_c:c1" in m]
    assert messages == ["the command of call ses_c:c1 was given up, and the executor of project p died under it, "
                        "and the commands it left could not all be ended: the workspace's next write may run "
                        "beside it"], messages
    assert any(r.getMessage().startswith(cause) for r in caplog.records), caplog.records  # (the path taken)
