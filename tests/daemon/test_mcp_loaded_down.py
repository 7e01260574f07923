"""A deferred MCP tool a session loaded, while its server is down: it stays loaded ("Tool catalog,
policy planes and capability_search"), and the inventory says so, marking it with its server's
state. A real daemon over HTTP, the ``faux`` provider, the test server over stdio."""

from __future__ import annotations

import sys
from typing import Any

from ..mcp.conftest import SERVER
from .conftest import DaemonFactory, run_tool, wait_until
from .test_tool_catalog_http import inventory

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}


async def test_a_loaded_tool_of_a_server_that_is_down_stays_in_loaded_marked_with_the_servers_state(
        daemon_factory: DaemonFactory) -> None:
    # `loaded` left such a tool out: a client saw the load undone while the session still had it
    # (its next request offers it again once the server is back).
    d = await daemon_factory(config={**FAUX, "tools": {"deferred": ["mcp__t__echo"]},
                                     "mcpServers": {"t": {"command": sys.executable, "args": [SERVER],
                                                          "maxRestarts": 0}}})
    token = await d.pair("loaded-down", strong=True)
    sid = await d.new_session(token)
    body = await run_tool(d, token, sid, "r1", "capability_search", {"query": "mcp__t__echo", "limit": 1})
    assert body["status"] == "ok", body
    inv = await inventory(d, token, sid)
    assert inv["loaded"] == ["mcp__t__echo"] and "mcp__t__echo" in inv["offered"]
    up = inv
    assert (await run_tool(d, token, sid, "r2", "mcp__t__crash", {}))["error_code"] == "MCP_SERVER_UNAVAILABLE"

    async def failed() -> dict[str, Any] | None:
        inv = await inventory(d, token, sid)
        return inv if inv["mcpServers"][0]["status"] == "failed" else None
    inv = await wait_until(failed, what="server t failed for good")
    assert inv["loaded"] == ["mcp__t__echo"], inv["loaded"]
    assert inv["loadedUnavailable"] == [{"name": "mcp__t__echo", "server": "t", "status": "failed"}]
    assert inv["visibility"]["loaded"] == 1 and "mcp__t__echo" not in inv["offered"]
    assert up["loadedUnavailable"] == []  # (while the server ran: nothing marked)
    # without a session: nothing loaded, nothing marked
    inv = await inventory(d, token)
    assert inv["loaded"] == [] and inv["loadedUnavailable"] == []
    body = await run_tool(d, token, sid, "r3", "mcp__t__echo", {"text": "x"})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE", body
