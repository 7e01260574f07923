"""A command's cwd judged by the workspace allowlist starts the command there or nowhere.

Core judges where a ``cwd`` leads (``resolve``) and then starts the command (``Run``): two calls.
Core reaches the module's real executor process through a gRPC relay
(``tests/executor/relay.py``) that swaps the directory for a symlink exactly between them, so
the race is forced on every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest

from proto import executor_pb2 as pb
from runtime.executors import RemoteExecutor
from tools.artifacts import ArtifactStore
from tools.workspace_tools import workspace_tools

from .conftest import ExecutorProcess, running_pool
from .relay import Relay
from .test_tools import CoreTools


@pytest.fixture
async def swapping(executor: ExecutorProcess, tmp_path: Path) -> AsyncIterator[tuple[CoreTools, list[str]]]:
    base = executor.workspace / "judged"
    (base / "src").mkdir(parents=True, exist_ok=True)
    (base / "secrets").mkdir(exist_ok=True)
    seen: list[str] = []

    def swap(req: pb.CommandRequest) -> None:  # (in the relay's thread, before Run is passed on)
        seen.append(req.cwd_leads_to)
        if (base / "src").is_dir() and not (base / "src").is_symlink():
            (base / "src").rename(base / "src.old")
            (base / "src").symlink_to("secrets")

    with Relay(executor.address, before_run=swap) as relay:
        remote = RemoteExecutor(relay.address, executor.token)
        async with running_pool(tmp_path / "executors", {"p1": executor.workspace}, remote=remote) as pool:
            yield CoreTools(workspace_tools(pool, ArtifactStore(tmp_path / "artifacts")), ArtifactStore(tmp_path / "a")), seen


async def test_a_cwd_swapped_after_the_allowlist_judged_it_is_not_entered(
        swapping: tuple[CoreTools, list[str]], workspace: Path) -> None:
    core, seen = swapping
    _, res = await core.run("run_command", {"command": "touch ran_here", "cwd": "judged/src"},
                            allowlist=["judged/src"])
    assert res.is_error and res.error_code == "CWD_MOVED", res.content
    assert seen == ["judged/src"]
    assert not (workspace / "judged" / "secrets" / "ran_here").exists()
    assert not (workspace / "judged" / "src.old" / "ran_here").exists()
    # without an allowlist nothing was judged, and the command starts where the cwd leads
    _, res = await core.run("run_command", {"command": "pwd -P", "cwd": "judged/src"})
    assert not res.is_error and seen[-1] == ""
