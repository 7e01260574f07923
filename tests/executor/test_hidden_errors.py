"""What a tool makes of a failure to reach its executor: an expected failure (the system's, the
pool's typed errors) keeps its code; a programming error is not passed off as one.

The skill reads, the workspace tools and the job tool each turned *any* exception of the pool's
``get`` into ``EXECUTOR_UNAVAILABLE``: the AttributeError of a spawn racing the pool's stop read
as "the executor is unavailable", and nobody saw the defect. The failure is forced at the
third-party call under the pool (``trio.lowlevel.open_process``), with the real pool running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest
import trio

from runtime.executors import ExecutorPool
from tools.base import ToolContext, ToolError
from tools.jobs import job_tool
from tools.skills import workspace_reader

from .conftest import running_pool, tool_ctx, tools_by_name

BOUND_S = 30.0


def ctx(call_id: str) -> ToolContext:
    # (jobs: any object says the session can run jobs; the start fails before it is used)
    return tool_ctx("ses_hidden", call_id, jobs=object())


@pytest.fixture
async def pool(tmp_path: Path) -> AsyncIterator[ExecutorPool]:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        yield pool


def _callers(pool: ExecutorPool, tmp_path: Path) -> dict[str, Callable[[], Awaitable[Any]]]:
    specs = tools_by_name(pool, tmp_path / "artifacts")
    job = job_tool(pool)
    return {
        "skill read": lambda: workspace_reader(pool, "p", "c1")({"path": "SKILL.md"}),
        "read_file": lambda: specs["read_file"].run({"path": "a.txt"}, ctx("c2")),
        "run_command": lambda: specs["run_command"].run({"command": "true"}, ctx("c3")),
        "job start": lambda: job.run({"action": "start", "command": "true"}, ctx("c4")),
    }


CALLERS = ["skill read", "read_file", "run_command", "job start"]


@pytest.mark.parametrize("caller", CALLERS)
async def test_a_programming_error_under_the_pool_is_not_executor_unavailable(
        pool: ExecutorPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caller: str) -> None:
    async def defect(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError("'NoneType' object has no attribute 'start_soon'")

    monkeypatch.setattr(trio.lowlevel, "open_process", defect)
    with trio.fail_after(BOUND_S), pytest.raises(AttributeError, match="start_soon"):
        await _callers(pool, tmp_path)[caller]()


@pytest.mark.parametrize("caller", CALLERS)
async def test_a_child_that_cannot_be_started_is_still_executor_unavailable(
        pool: ExecutorPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caller: str) -> None:
    async def no_fork(*args: Any, **kwargs: Any) -> Any:
        raise BlockingIOError(11, "Resource temporarily unavailable")  # (fork: EAGAIN)

    monkeypatch.setattr(trio.lowlevel, "open_process", no_fork)
    with trio.fail_after(BOUND_S), pytest.raises(ToolError) as caught:
        await _callers(pool, tmp_path)[caller]()
    assert caught.value.code == "EXECUTOR_UNAVAILABLE"
    assert "Resource temporarily unavailable" in caught.value.message


@pytest.mark.parametrize("caller", CALLERS)
async def test_a_pool_that_is_not_running_keeps_its_typed_code(tmp_path: Path, caller: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()

    async def workspace_of(project_id: str) -> Path | None:
        return ws

    stopped = ExecutorPool(tmp_path / "executors", workspace_of)  # (never run)
    with trio.fail_after(BOUND_S), pytest.raises(ToolError) as caught:
        await _callers(stopped, tmp_path)[caller]()
    assert caught.value.code == "EXECUTOR_UNAVAILABLE"
    assert "the executor pool is not running" in caught.value.message


async def test_an_unknown_project_keeps_its_code(pool: ExecutorPool) -> None:
    with trio.fail_after(BOUND_S), pytest.raises(ToolError) as caught:
        await workspace_reader(pool, "nope", "c5")({"path": "SKILL.md"})
    assert caught.value.code == "PROJECT_NOT_FOUND"


async def test_a_tool_refusal_from_the_executor_keeps_its_code(pool: ExecutorPool, tmp_path: Path) -> None:
    specs = tools_by_name(pool, tmp_path / "artifacts")
    with trio.fail_after(BOUND_S), pytest.raises(ToolError) as caught:
        await specs["read_file"].run({"path": "missing.txt"}, ctx("c6"))
    assert caught.value.code == "NOT_FOUND", caught.value
