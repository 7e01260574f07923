"""A session that loaded deferred MCP tools, and waits on an MCP server's state through ``GET
/tools/inventory``: the set-up of the tests of a server that goes down (a real daemon over HTTP,
the ``faux`` provider, the test server ``tests/mcp/server.py`` over stdio)."""

from __future__ import annotations

import sys
from typing import Any

from ..mcp.conftest import SERVER
from .conftest import Daemon, DaemonFactory, run_tool, wait_until

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}


def mcp_server(*flags: str, **kw: Any) -> dict[str, Any]:
    """The test server's ``mcpServers`` entry, with ``flags`` and other fields (``maxRestarts``)."""
    return {"command": sys.executable, "args": [SERVER, *flags], **kw}


async def inventory(d: Daemon, token: str, sid: str | None = None, agent: str | None = None) -> dict[str, Any]:
    params = {**({"session": sid} if sid else {}), **({"agent": agent} if agent else {})}
    r = await d.get("/tools/inventory", token, params=params or None)
    assert r.status_code == 200, r.text[:300]
    return r.json()


async def loaded_session(daemon_factory: DaemonFactory, config: dict[str, Any],
                         load: list[str]) -> tuple[Daemon, str, str]:
    """A daemon of ``config`` (with the faux provider), a paired token and a session whose main
    agent loaded each tool of ``load`` (deferred ones) by capability_search."""
    d = await daemon_factory(config={**FAUX, **config})
    token = await d.pair("mcp-down", strong=True)
    sid = await d.new_session(token)
    for i, name in enumerate(load):
        body = await run_tool(d, token, sid, f"load{i}", "capability_search", {"query": name, "limit": 1})
        assert body["status"] == "ok", body
    return d, token, sid


async def crash(d: Daemon, token: str, sid: str, request_id: str, server: str = "t") -> None:
    """Have the server's ``crash`` tool make it exit (the call answers MCP_SERVER_UNAVAILABLE)."""
    body = await run_tool(d, token, sid, request_id, f"mcp__{server}__crash", {})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE", body


async def server_in(d: Daemon, token: str, sid: str | None, status: str, server: str = "t",
                    agent: str | None = None, **fields: Any) -> dict[str, Any]:
    """The first inventory (of ``sid``, ``agent``) whose server ``server`` has ``status`` (and
    the inventory entry's ``fields``, such as ``restarts``)."""
    async def there() -> dict[str, Any] | None:
        inv = await inventory(d, token, sid, agent)
        entry = next(s for s in inv["mcpServers"] if s["name"] == server)
        wanted = {"status": status, **fields}
        return inv if all(entry.get(k) == v for k, v in wanted.items()) else None
    return await wait_until(there, what=f"server {server} {status} {fields or ''}".rstrip())
