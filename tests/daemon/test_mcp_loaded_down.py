"""A deferred MCP tool a session loaded, while its server is down: it stays loaded ("Tool catalog,
policy planes and capability_search"), and the inventory says so, marking it with its server's
state, until the server is back; a tool the server's last listing left out stays out. A real
daemon over HTTP, the ``faux`` provider, the test server over stdio (set-up: ``mcp_down.py``)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from .conftest import DaemonFactory, run_tool
from .mcp_down import crash, inventory, loaded_session, mcp_server, server_in


async def test_a_loaded_tool_of_a_server_that_is_down_stays_in_loaded_marked_with_the_servers_state(
        daemon_factory: DaemonFactory) -> None:
    # `loaded` left such a tool out: a client saw the load undone while the session still had it
    # (its next request offers it again once the server is back).
    d, token, sid = await loaded_session(daemon_factory, {
        "tools": {"deferred": ["mcp__t__echo"]}, "mcpServers": {"t": mcp_server(maxRestarts=0)}}, load=["mcp__t__echo"])
    inv = await inventory(d, token, sid)
    assert inv["loaded"] == ["mcp__t__echo"] and "mcp__t__echo" in inv["offered"]
    up = inv
    await crash(d, token, sid, "r2")
    inv = await server_in(d, token, sid, "failed")
    assert inv["loaded"] == ["mcp__t__echo"], inv["loaded"]
    assert inv["loadedUnavailable"] == [{"name": "mcp__t__echo", "server": "t", "status": "failed"}]
    assert inv["visibility"]["loaded"] == 1 and "mcp__t__echo" not in inv["offered"]
    assert up["loadedUnavailable"] == []  # (while the server ran: nothing marked)
    # without a session: nothing loaded, nothing marked
    inv = await inventory(d, token)
    assert inv["loaded"] == [] and inv["loadedUnavailable"] == []
    body = await run_tool(d, token, sid, "r3", "mcp__t__echo", {"text": "x"})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE", body


async def test_a_loaded_tool_the_servers_last_listing_left_out_stays_out_of_loaded_while_it_is_down(
        daemon_factory: DaemonFactory) -> None:
    # The server stops listing `fail`: it leaves `loaded` (the registry has it no more). When the
    # server then went down, `fail` came back into `loaded` (and loadedUnavailable), to leave
    # again once the server was up: in and out with the server's state. Only the tools of its
    # last listing are kept while it is down.
    d, token, sid = await loaded_session(daemon_factory, {
        "tools": {"deferred": ["mcp__t__echo", "mcp__t__fail"]},
        "mcpServers": {"t": mcp_server("--shrink", maxRestarts=0)}}, load=["mcp__t__echo", "mcp__t__fail"])
    assert (await inventory(d, token, sid))["loaded"] == ["mcp__t__echo", "mcp__t__fail"]
    assert (await run_tool(d, token, sid, "r1", "mcp__t__shrink", {}))["status"] == "ok"
    inv = await server_in(d, token, sid, "running", toolCount=4)  # (shrink, echo, add, image)
    assert inv["loaded"] == ["mcp__t__echo"] and inv["loadedUnavailable"] == []
    os.kill(inv["mcpServers"][0]["pid"], signal.SIGKILL)  # (its crash tool is no longer listed)
    inv = await server_in(d, token, sid, "failed")
    assert inv["loaded"] == ["mcp__t__echo"], inv["loaded"]
    assert inv["loadedUnavailable"] == [{"name": "mcp__t__echo", "server": "t", "status": "failed"}]
    assert inv["visibility"]["loaded"] == 1


async def test_a_loaded_tool_of_a_server_that_comes_back_is_offered_again_and_no_longer_marked(
        daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    # maxRestarts 1: the server crashes, is restarted (held at its start until the test lets it
    # go, so that its time down is seen), and is back: the tool is offered and callable again.
    d, token, sid = await loaded_session(daemon_factory, {
        "tools": {"deferred": ["mcp__t__echo"]},
        "mcpServers": {"t": mcp_server("--hold-restart", str(tmp_path), maxRestarts=1)}}, load=["mcp__t__echo"])
    await crash(d, token, sid, "r1")
    inv = await server_in(d, token, sid, "restarting")
    assert inv["loaded"] == ["mcp__t__echo"] and "mcp__t__echo" not in inv["offered"]
    assert inv["loadedUnavailable"] == [{"name": "mcp__t__echo", "server": "t", "status": "restarting"}]
    (tmp_path / "go").touch()
    inv = await server_in(d, token, sid, "running", restarts=1)
    assert inv["loaded"] == ["mcp__t__echo"] and inv["loadedUnavailable"] == []
    assert "mcp__t__echo" in inv["offered"] and inv["visibility"]["loaded"] == 1
    body = await run_tool(d, token, sid, "r2", "mcp__t__echo", {"text": "back"})
    assert body["status"] == "ok" and body["content"] == [{"type": "text", "text": "echo: back"}], body


async def test_a_subagents_loaded_tool_of_a_server_that_is_down_is_in_its_own_inventory_alone(
        daemon_factory: DaemonFactory) -> None:
    # `&agent=`: the subagent loaded the tool, the main agent did not; each answer is its agent's.
    d, token, sid = await loaded_session(daemon_factory, {
        "tools": {"deferred": ["mcp__t__echo"]}, "mcpServers": {"t": mcp_server(maxRestarts=0)}}, load=[])
    load = {"query": "mcp__t__echo", "limit": 1}
    body = await run_tool(d, token, sid, "s1", "subagent", {"prompt": f"/tool capability_search {json.dumps(load)}"},
                          agent="main")
    assert body["status"] == "ok", body
    [sub] = [a["agentId"] for a in (await d.view(token, sid))["agents"] if a["role"] == "subagent"]
    assert (await inventory(d, token, sid, sub))["loaded"] == ["mcp__t__echo"]
    await crash(d, token, sid, "r1")
    inv = await server_in(d, token, sid, "failed", agent=sub)
    assert inv["agent"] == sub and inv["loaded"] == ["mcp__t__echo"]
    assert inv["loadedUnavailable"] == [{"name": "mcp__t__echo", "server": "t", "status": "failed"}]
    main = await inventory(d, token, sid)
    assert main["loaded"] == [] and main["loadedUnavailable"] == []
