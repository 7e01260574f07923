"""The config sections the tool catalog reads (:mod:`tools.catalog`): ``tools`` (the context
plane's deferral, the execution policy's map) and ``localPtc`` (the programmatic tool run)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# MCP tools are deferred by default once the registry holds more than this many of them.
DEFAULT_MCP_DEFER_ABOVE = 16


class _C(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


class ParamRestriction(_C, forbid_unknown_fields=True):
    """Bounds on one argument: numbers within ``min``..``max``; any value one of ``enum``."""

    min: float | None = None
    max: float | None = None
    enum: list[Any] | None = None


class ToolPolicy(_C, forbid_unknown_fields=True):
    """Execution-plane fields for a tool (or a ``*`` pattern of tools); ``None``: not set here."""

    enabled: bool | None = None
    approval: Literal["none", "warn"] | None = None
    workspace_allowlist: list[str] | None = None
    param_restrictions: dict[str, ParamRestriction] | None = None


class ToolsConfig(_C):
    """Config ``tools``: the context plane's deferral and the execution policy."""

    deferred: list[str] = []  # names or fnmatch patterns (``mcp__*``) deferred on top of the defaults
    eager: list[str] = []  # names or patterns never deferred (wins over ``deferred``)
    mcp_defer_above: int = DEFAULT_MCP_DEFER_ABOVE  # more MCP tools than this: all deferred
    # Which deferred tools a request lists: "loaded" (only once loaded: the list grows as the
    # agent loads) or "assigned" (all assigned from the first request, so the list never changes;
    # a call still needs the tool loaded first).
    disclose: Literal["loaded", "assigned"] = "loaded"
    policy: dict[str, ToolPolicy] = {}


class LocalPtcConfig(_C, forbid_unknown_fields=True):
    """Config ``localPtc``: the programmatic tool run (its section present turns it on)."""

    enabled: bool = True
    # The tools a request offers natively to an agent that has PTC (names or patterns), besides
    # the PTC entry; ``None``: its eager tools. ``[]``: the PTC entry only.
    native_capabilities: list[str] | None = None
