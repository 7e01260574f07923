"""Fixtures of the web tool tests: loopback HTTP servers (tests/web/server.py) and the tools.

``web_server`` runs on 127.0.0.1; ``other_server`` on 127.0.0.2 (another loopback address, so a
test can allow one of them by network and not the other). Both live in the test's nursery.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tools.artifacts import ArtifactStore
from tools.base import ToolContext, ToolRegistry, ToolResult
from tools.web import web_fetch_tool

from .server import WebServer


@pytest.fixture
async def web_server(nursery: trio.Nursery) -> WebServer:
    server = WebServer("127.0.0.1")
    await nursery.start(server.run)
    return server


@pytest.fixture
async def other_server(nursery: trio.Nursery) -> WebServer:
    server = WebServer("127.0.0.2")
    await nursery.start(server.run)
    return server


@pytest.fixture
def artifacts(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def ctx() -> ToolContext:
    return ToolContext(project_id="prj_1", session_id="ses_1", agent_id="main", task_id=None, call_id="call_1",
                       is_main_agent=True)


async def call(registry: ToolRegistry, name: str, args: Any) -> ToolResult:
    """One call through the registry, as the session actor makes it (arguments as JSON text)."""
    return await registry.run(name, args if isinstance(args, str) else json.dumps(args), ctx())


@pytest.fixture
def full(artifacts: ArtifactStore) -> ToolRegistry:
    """web_fetch with full access (what web.allowPrivateAddresses grants)."""
    return ToolRegistry([web_fetch_tool(artifacts, full_access=True)])


@pytest.fixture
def public_only(artifacts: ArtifactStore) -> ToolRegistry:
    """web_fetch as configured by default: public addresses only."""
    return ToolRegistry([web_fetch_tool(artifacts)])


def text_of(result: ToolResult) -> str:
    return "".join(getattr(p, "text", "") for p in result.content)
