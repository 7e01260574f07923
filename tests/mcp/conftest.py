"""Fixtures of the MCP suite: ``start(configs, **limits)`` runs :class:`tools.mcp.McpServers` over a real
:class:`~tools.base.ToolRegistry` and :class:`~tools.artifacts.ArtifactStore` (ready after each
server's first start) and stops it after the test; the servers are real child processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio

from runtime.mcp_config import McpServerConfig
from tools.artifacts import ArtifactStore
from tools.base import ToolContext, ToolRegistry, ToolResult
from tools.mcp import McpServers
from tools.registry import builtin_tools

SERVER = str(Path(__file__).with_name("server.py"))
LIMIT = 30.0  # seconds: a bound on each wait, not a time (as tests/daemon/conftest.py)
CTX = ToolContext("p", "s", "main", None, "c1", True)


def srv(*flags: str, **kw: Any) -> McpServerConfig:
    return McpServerConfig(command=sys.executable, args=[SERVER, *flags], **kw)


async def wait_for(predicate: Any, what: str) -> None:
    with trio.move_on_after(LIMIT):
        while not predicate():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"{what} did not hold within {LIMIT} s")


class Running:
    def __init__(self, servers: McpServers, registry: ToolRegistry, cancel: trio.CancelScope) -> None:
        self.servers, self.registry, self.cancel = servers, registry, cancel

    def state(self, name: str) -> dict[str, Any]:
        return next(s for s in self.servers.inventory() if s["name"] == name)

    async def call(self, name: str, args: dict[str, Any] | None = None) -> ToolResult:
        with trio.fail_after(LIMIT):
            return await self.registry.run(name, json.dumps(args or {}), CTX)


@pytest.fixture
async def start(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Any]:
    scopes: list[trio.CancelScope] = []
    done: list[trio.Event] = []

    async def go(configs: dict[str, McpServerConfig], **limits: int) -> Running:
        registry = builtin_tools()
        servers = McpServers(configs, registry, ArtifactStore(tmp_path / "artifacts"), **limits)
        scope, finished = trio.CancelScope(), trio.Event()

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await servers.run(task_status=task_status)
            finally:
                finished.set()

        with trio.fail_after(LIMIT):
            await nursery.start(run)
        scopes.append(scope)
        done.append(finished)
        return Running(servers, registry, scope)

    yield go
    for scope, finished in zip(scopes, done):
        scope.cancel()
        with trio.fail_after(LIMIT):
            await finished.wait()
