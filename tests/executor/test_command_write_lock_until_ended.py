"""A ``run_command`` whose stream Core leaves before the command's exit keeps the workspace's
write lock until the executor says the command's group has ended: the gRPC call's deadline
passed, the stream failed or ended without the exit, its caller cancelled with nothing kept.
Core asks ``Stop`` by the run's id (the executor answers once the run is over), bounded by the
pool's wait, then lets the lock go with a warning, the executor not stopped.

The first command traps SIGTERM and lingers in its trap, then marks its end in a file; the second
command, a write of the same domain started while the first runs, says whether it found that
mark. Everything is real: the pool, the executor process over gRPC (behind a relay where the
stream is cut), the workspace tools.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime import executor_client
from runtime.executors import ExecutorPool, RemoteExecutor
from tools.artifacts import ArtifactStore
from tools.base import ToolContext, ToolError, ToolResult
from tools.workspace_tools import ABORT_STOP_ANSWER_WAIT_S, workspace_tools

from .conftest import ExecutorProcess, running_pool, until, wait_path
from .relay import Relay

_n = itertools.count()
# The first command: its shell traps SIGTERM, lingers LINGER_S in the trap, then marks its end
# and exits 3 (its ``sleep`` is ended by the SIGTERM; ``wait``, so the trap runs at once). It
# prints only once the second call waits for the lock (``<name>.go``): a relay cuts its stream there.
LINGER_S = 1.0
FIRST = ("trap 'sleep {linger}; echo > {name}.ended; exit 3' TERM; echo $$ > {name}.pid; "
         "while [ ! -e {name}.go ]; do sleep 0.01; done; echo started; sleep 600 & wait")
SECOND = "if [ -e {name}.ended ]; then echo after; else echo beside; fi"


def ctx(call_id: str) -> ToolContext:
    """A call's context with nothing to keep a cut command's output (``cut_output`` None)."""
    return ToolContext("p", "ses_c", "main", None, call_id, True)


@asynccontextmanager
async def remote_pool(executor: ExecutorProcess, tmp_path: Path, address: str | None = None,
                      **kw: Any) -> AsyncIterator[ExecutorPool]:
    """The real pool, its project ``p`` served by the module's executor (at ``address``: a relay
    in front of it)."""
    remote = RemoteExecutor(address or executor.address, executor.token)
    async with running_pool(tmp_path / "executors", {"p": executor.workspace}, remote=remote, **kw) as pool:
        yield pool


async def first_then_second(pool: ExecutorPool, tmp_path: Path, ws: Path, first: dict[str, Any], *,
                            cancel_first: bool = False) -> tuple[ToolResult | ToolError | None, ToolResult, float]:
    """Run ``first`` (a FIRST command, its name in ``first["name"]``) and, once it has started,
    SECOND as another call, which waits for the domain's write lock; ``cancel_first``: the
    first's caller is cancelled once the second waits. The first's result (or its error; None:
    cancelled), the second's, and how long the second took from its start."""
    name = first.pop("name")
    run = {s.name: s for s in workspace_tools(pool, ArtifactStore(tmp_path / "artifacts"))}["run_command"]
    results: dict[str, Any] = {}
    cancel = trio.CancelScope()

    async def run_first() -> None:
        with cancel:
            try:
                results["first"] = await run.run({"command": FIRST.format(linger=LINGER_S, name=name), **first},
                                                 ctx("c1"))
            except ToolError as exc:
                results["first"] = exc

    async def run_second() -> None:
        start = trio.current_time()
        results["second"] = await run.run({"command": SECOND.format(name=name)}, ctx("c2"))
        results["took"] = trio.current_time() - start

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_first)
            await wait_path(ws / f"{name}.pid")
            lock = (await pool.get("p")).lock
            nursery.start_soon(run_second)
            await until(lambda: lock._writers_waiting or "second" in results)
            assert "second" not in results  # (the first command holds the lock while it runs)
            (ws / f"{name}.go").write_text("")
            if cancel_first:
                cancel.cancel()
    return results.get("first"), results["second"], results["took"]


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
    async with remote_pool(executor, tmp_path) as pool:
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
        async with remote_pool(executor, tmp_path, relay.address) as pool:
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
    async with remote_pool(executor, tmp_path) as pool:
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
    async with remote_pool(executor, tmp_path) as pool:
        first, second, _ = await first_then_second(pool, tmp_path, executor.workspace,
                                                   {"name": name, "timeout_ms": 300})
    assert isinstance(first, ToolResult), first
    assert first.structured_content["timed_out"] and first.structured_content["exit_code"] == 3, first
    began_after_the_first_ended(second)


async def test_a_command_not_over_within_the_bound_lets_the_lock_go_with_a_warning(
        executor: ExecutorProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Past the pool's bound (shortened) the lock goes, as for an editing call: a warning, and
    # neither the executor nor the command is stopped for it (the trap still marks its end).
    name = f"bound{next(_n)}"
    ws = executor.workspace
    with caplog.at_level(logging.WARNING, logger="lens.executors"):
        async with remote_pool(executor, tmp_path, call_end_wait_s=0.3) as pool:
            first, second, took = await first_then_second(pool, tmp_path, ws, {"name": name}, cancel_first=True)
            await wait_path(ws / f"{name}.ended")
    assert first is None
    assert not second.is_error and said(second).startswith("beside\n"), second.content
    assert took < LINGER_S, took
    warned = [r.getMessage() for r in caplog.records if r.name == "lens.executors"]
    assert any("command of call ses_c:c1" in m and "did not say it ended within 0.3 s" in m for m in warned), warned
    assert executor.proc.poll() is None
