"""Our stdio client against a server built with the ``mcp`` package (the reference
implementation, ``tests/mcp/reference_server.py``): handshake and version, tools with their
schemas and annotations, text, structured and image results, a tool raising, a call cancelled."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from runtime.mcp_config import McpServerConfig

from .conftest import wait_for

REFERENCE = str(Path(__file__).with_name("reference_server.py"))


async def test_the_reference_server_works_through_our_client(start: Any, tmp_path: Path) -> None:
    log = tmp_path / "cancelled.log"
    r = await start({"ref": McpServerConfig(command=sys.executable, args=[REFERENCE],
                                            env={"CANCEL_LOG": str(log)})})
    state = r.state("ref")
    assert state["status"] == "running", state
    assert state["serverInfo"]["name"] == "reference" and state["protocolVersion"] == "2025-11-25"
    assert sorted(state["tools"]) == ["mcp__ref__add", "mcp__ref__boom", "mcp__ref__greet", "mcp__ref__pixel.png",
                                      "mcp__ref__wait"]
    greet = r.registry.get("mcp__ref__greet")
    assert greet.input_schema["required"] == ["name"] and greet.description == "Say hello to someone."
    assert r.registry.get("mcp__ref__add").read_only and not greet.read_only

    res = await r.call("mcp__ref__greet", {"name": "Lens"})
    assert not res.is_error and res.content[0].text == "hello Lens"
    res = await r.call("mcp__ref__add", {"a": 2, "b": 40})
    assert res.content[0].text == "42" and res.structured_content == {"result": 42}
    res = await r.call("mcp__ref__pixel.png")
    assert res.content[0].mime == "image/png" and res.events[0].source == "mcp"
    res = await r.call("mcp__ref__boom")
    assert res.is_error and res.error_code == "MCP_TOOL_ERROR" and res.content[0].text == "Error executing tool boom"
    res = await r.call("mcp__ref__greet", {})  # the server validates the arguments
    assert res.is_error and "name" in res.content[0].text

    with trio.move_on_after(0.5):
        await r.call("mcp__ref__wait")
        raise AssertionError("wait answered")
    await wait_for(lambda: log.exists() and "cancelled" in log.read_text(), "the server cancelling the call")
    assert (await r.call("mcp__ref__greet", {"name": "again"})).content[0].text == "hello again"
