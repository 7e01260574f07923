"""HTTP routes of the models and tools a session can use (F-MOD-5, F-TOOL-4).

* ``GET /api/v1/models`` — ``{models: [...], default: {effective, source, saved}}``.
* ``PUT /api/v1/models/default {model}`` (strong trust) — save the default model of new sessions
  (null clears it; recorded as ``default_model.set``); answers ``default``'s shape.
* ``GET /api/v1/tools/inventory?session=&agent=`` — the tool inventory (``runtime/tool_inventory.py``);
  with ``session``, that session's main agent's loaded and searchable tools and its overrides;
  with ``agent`` too, that agent's (a subagent's id as the session view's ``agents`` gives it).
"""

from __future__ import annotations

from typing import Any

from quart import Response
from quart_trio import QuartTrio

from events import types as t
from events.store import Draft

from . import actor as a
from .errors import AgentNotFound
from .http_parts import ApiError, Body, check_session_settings, id_filter, json_response, read_body, require_strong
from .providers.catalog import ProviderCatalog
from .services import Services


class DefaultModelBody(Body):
    """``PUT /models/default``: the model to save as the default, or null to clear it."""

    model: str | None


def default_view(catalog: ProviderCatalog) -> dict[str, Any]:
    """``{effective, source, saved}``: the default model of new sessions, the step of the chain
    it comes from (``cli`` | ``saved`` | ``config`` | ``default``) and the saved default
    (``None``: none saved), which ``--model`` hides from ``effective``."""
    return {"effective": catalog.default_model, "source": catalog.default_source, "saved": catalog.saved_default}


def add_model_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/models")
    async def models() -> Response:
        catalog = svc.catalog
        return json_response({"models": [m.to_json() for m in catalog.models()], "default": default_view(catalog)})

    @app.put("/api/v1/models/default")
    async def save_default_model() -> Response:
        """Save (or clear, with null) the default model of new sessions (F-MOD-5): a listed
        model of an enabled provider. Recorded as ``default_model.set``; ``--model`` still wins."""
        require_strong("save the default model")
        body = await read_body(DefaultModelBody)
        catalog = svc.catalog
        if body.model is not None:
            check_session_settings(body.model, None)
            catalog.check_default(body.model)  # MODEL_UNKNOWN / PROVIDER_DISABLED (the key is not checked)
        async with svc.default_model_lock:
            if body.model != catalog.saved_default:  # (the same value again records nothing)
                res = await svc.store.append(Draft(t.DefaultModelSet(model=body.model)))
                catalog.set_saved_default(body.model, res.seq)
        return json_response(default_view(catalog))

    @app.get("/api/v1/tools/inventory")
    async def tools_inventory() -> Response:
        """The tool inventory (F-TOOL-4, runtime/tool_inventory.py); with ``session``, that
        session's main agent's loaded and searchable tools and its policy overrides; with
        ``agent`` (or ``agentId``) too, that agent's offered, loaded and searchable tools: an id
        the session does not have is 404 ``AGENT_NOT_FOUND``, ``agent`` without ``session`` 400."""
        from tools.catalog import ToolCatalog

        from .tool_inventory import inventory

        sid = id_filter("session", "sessionId", "session")
        agent_id = id_filter("agent", "agentId", "agent")
        if agent_id is not None and sid is None:
            raise ApiError("INVALID_ARGUMENT", "agent names an agent of a session; give session too")
        state = await svc.call(sid, a.GetState()) if sid is not None else None
        if agent_id is not None and state is not None and agent_id not in state.agents:
            raise AgentNotFound(f"session {sid!r} has no agent {agent_id!r}")
        deps = svc.supervisor.deps
        catalog = deps.tool_catalog or ToolCatalog(deps.tools)
        servers = svc.mcp.inventory() if svc.mcp is not None else []
        listings = svc.mcp.listings() if svc.mcp is not None else {}
        return json_response(inventory(catalog, state, servers, agent_id, mcp_listings=listings))
