"""The tool inventory snapshot (F-TOOL-4): ``GET /api/v1/tools/inventory[?session=ID[&agent=ID]]``.

Everything is read from the daemon's registry, its :class:`~tools.catalog.ToolCatalog` and, with
``session``, that session's state (an agent's loaded capabilities and tool list, the saved tool
policy): nothing here changes anything. An agent's lists come from
:func:`runtime.agent_tools.agent_planes`, the call that builds its model requests' tool list, so
under the same policy and config the inventory and the requests cannot disagree (an agent's past
requests were offered what the policy and config of their time gave).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from projections.session_state import MAIN_AGENT, SessionState
from tools.base import ToolSpec
from tools.catalog import NOT_FROM_PROGRAMS, ToolCatalog, allowed_callers, describe
from tools.mcp.servers import tool_id

from .agent_tools import agent_planes, agent_scope, session_tool_policy
from .providers.names import describe as provider_description


def ptc_view(catalog: ToolCatalog, offered: list[ToolSpec], session_policy: dict[str, Any] | None, *,
             is_main_agent: bool = True, allowed: Sequence[str] | None = None) -> dict[str, Any] | None:
    """For an agent (the main agent unless told; ``allowed``: a subagent's tool list) with PTC in
    effect: ``native``, the tools its requests offer (``offered``, from the same call that builds
    them), and ``fromProgram``, the enabled tools it reaches only from a program. ``None`` without
    PTC or with the PTC entry disabled (the plain planes apply)."""
    native = catalog.native_names(is_main_agent=is_main_agent, allowed=allowed, session=session_policy)
    if native is None:
        return None
    fixed = catalog.ptc.native_capabilities if catalog.ptc is not None else None
    assigned = catalog.assigned(is_main_agent=is_main_agent, allowed=allowed)
    off = catalog.disabled_names(assigned, session_policy)
    return {"native": sorted(s.name for s in offered), "nativeCapabilities": fixed,
            "fromProgram": sorted(s.name for s in assigned
                                  if s.name not in native and s.name not in NOT_FROM_PROGRAMS and s.name not in off)}


def _down_server(name: str, mcp_servers: list[dict[str, Any]],
                 listings: Mapping[str, Sequence[str]]) -> dict[str, Any] | None:
    """The inventory entry of the MCP server ``name`` (``mcp__<server>__<tool>``) is a tool of,
    when that server is not running and its last listing had that tool (or it never listed one:
    nothing says the tool is gone); else None. One server at most matches: a server name holds
    no ``__`` and does not end in ``_`` (runtime/mcp_config.py), so ``mcp__a__`` begins no other
    server's tools (server ``a_`` would have made ``mcp__a____b`` a tool of ``a`` and of ``a_``)."""
    for server in mcp_servers:
        if name.startswith(tool_id(server["name"], "")) and server["status"] != "running":
            listed = listings.get(server["name"], ())
            # (a tool its last listing left out is gone, down or not: in and out of loaded as the
            # server went down and up, it stays out)
            return server if not listed or name in listed else None
    return None


def inventory(catalog: ToolCatalog, state: SessionState | None, mcp_servers: list[dict[str, Any]],
              agent_id: str | None = None, *, mcp_listings: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """The snapshot; ``agent_id`` (an agent of ``state``, checked by the caller) makes ``offered``,
    ``loaded``, ``searchable``, ``defaultAllowed``, ``ptc`` and their ``visibility`` counts that
    agent's and adds ``agent``; without it they are the main agent's (the answer as it was).
    ``mcp_servers``: the MCP servers' inventory entries (their ``name`` and ``status`` mark the
    loaded tools of the servers that are down); ``mcp_listings``: each server's last listing
    (:meth:`tools.mcp.servers.McpServers.listings`, kept while it is down): a down server's
    loaded tool stays in ``loaded`` only if that listing had it (or the server never listed)."""
    registry = catalog.registry
    specs = registry.all()
    deferred = catalog.deferred_names()
    main_visible = {s.name for s in registry.visible(is_main_agent=True)}
    sub_visible = {s.name for s in registry.visible(is_main_agent=False)}
    session_policy = session_tool_policy(state)
    who = agent_id or MAIN_AGENT
    agent, allowed, is_main = agent_scope(state, who)
    assigned = {s.name for s in catalog.assigned(is_main_agent=is_main, allowed=allowed)}
    loaded, loaded_down = [], []
    for name in agent.capabilities if agent is not None else ():
        if name in assigned:
            loaded.append(name)
        elif (server := _down_server(name, mcp_servers, mcp_listings or {})) is not None and (allowed is None or name in allowed):
            # (a loaded tool stays loaded while its server is down, out of the registry: it is
            # offered again when the server is back)
            loaded.append(name)
            loaded_down.append({"name": name, "server": server["name"], "status": server["status"]})
    offered, searchable = agent_planes(catalog, state, who)
    default_offered, _ = agent_planes(catalog, state, who, loaded=())
    profiles = {s.name: catalog.profile(s.name, session_policy) for s in specs}
    sources: dict[str, int] = {}
    for s in specs:
        sources[s.source] = sources.get(s.source, 0) + 1
    wire = catalog.names.offered_names()
    tools = []
    for s in specs:
        entry = describe(s)
        tools.append({
            **entry, "description": s.description, "mainOnly": s.main_only, "replaySafe": s.replay_safe,
            "readOnly": s.read_only, "visibleToMain": s.name in main_visible,
            "visibleToSubagents": s.name in sub_visible, "deferred": s.name in deferred,
            "allowedCallers": allowed_callers(s), "inputExamples": list(s.input_examples),
            "enabled": bool(profiles[s.name]["enabled"]["value"]), "inputSchema": s.input_schema,
            # (the name and description a provider is sent: the F-MOD-3 alias, the description
            # naming the id under an alias and followed by the input examples)
            "nativeName": wire[s.name], "offeredDescription": provider_description(s.schema(), wire[s.name]),
        })
    return {
        "session": state.session_id if state is not None else None,
        **({} if agent_id is None else {"agent": agent_id}),
        "tools": tools,
        "catalog": [describe(s) for s in specs],
        # Offered to a main agent (with ``agent``: to that agent) that loaded nothing (eager, enabled).
        "defaultAllowed": [s.name for s in default_offered],
        "runtimeRegistry": [s.name for s in specs],
        "extensionSurfaces": {"sources": sources,
                              "mcp": [s.name for s in specs if s.source == "mcp"]},
        # For the session's main agent (with ``agent``: that agent; without a session: a main agent
        # that loaded nothing); tools the effective policy disables are neither offered nor searchable.
        "loaded": loaded,
        # The loaded tools whose MCP server is not running (out of the registry, so not offered;
        # a call answers MCP_SERVER_UNAVAILABLE), each with its server's name and status.
        "loadedUnavailable": loaded_down,
        "searchable": [s.name for s in searchable],
        "offered": [s.name for s in offered],
        "mcpServers": mcp_servers,
        # Programmatic tool runs (localPtc): for the main agent (or ``agent``), the tools offered natively when
        # programmatic_tool_run is assigned and enabled (the rest are called from a program), else null.
        "ptc": ptc_view(catalog, offered, session_policy, is_main_agent=is_main, allowed=allowed),
        # Tools whose names providers cannot take as they are (F-MOD-3): sent under an alias.
        "mappingGaps": [{"name": s.name, "alias": wire[s.name]} for s in specs if wire[s.name] != s.name],
        "visibility": {"catalog": len(specs), "main": len(main_visible), "subagents": len(sub_visible),
                       "deferred": len(deferred), "offered": len(offered), "searchable": len(searchable),
                       "loaded": len(loaded),
                       "disabled": sum(1 for p in profiles.values() if not p["enabled"]["value"])},
        # Each execution field's effective value and where it came from (default|config|session).
        "executionProfile": profiles,
        "sessionToolPolicy": session_policy or {},
    }
