"""An MCP server built with the ``mcp`` package (the reference implementation), over stdio: the
other side of :mod:`tests.mcp.test_reference`. ``CANCEL_LOG`` (environment): a file where the
``wait`` tool writes a line when the server cancels it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).parent))
from server import PNG_1X1  # noqa: E402  (the same 1x1 PNG as the hand-written server)

srv = MCPServer("reference", version="2.3")


@srv.tool()
def greet(name: str) -> str:
    """Say hello to someone."""
    return f"hello {name}"


@srv.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@srv.tool(name="pixel.png")
def pixel() -> Image:
    """A 1x1 PNG."""
    return Image(data=PNG_1X1, format="png")


@srv.tool()
def boom() -> str:
    """Always raises."""
    raise ValueError("boom on purpose")  # (the server reports only that the tool failed)


@srv.tool()
async def wait(ctx: Context) -> str:
    """Waits until cancelled."""
    try:
        await anyio.sleep(600)
    finally:
        with open(os.environ["CANCEL_LOG"], "a") as f:
            f.write("cancelled\n")
    return "never"


if __name__ == "__main__":
    srv.run()
