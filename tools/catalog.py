"""The tool catalog and its three planes (F-TOOL-1, F-TOOL-2); ``capability_search`` (F-TOOL-3)
is :mod:`tools.capability_search`.

* **Catalog** — which tools exist: every :class:`~tools.base.ToolSpec` of the daemon's registry
  (built-in and MCP tools alike), described by :func:`describe` (name, schema digest, source,
  lifecycle); the names they are offered under are :mod:`tools.catalog_names`.
* **Context** — what a model request offers an agent: main-only tools are withheld from
  subagents (``allowedCallers``), and *deferred* tools stay out of the tool list until the agent
  loads them with ``capability_search`` (a ``capability.loaded`` event, folded per agent). A
  subagent whose ``tools`` list names a deferred tool has it from the start (naming it assigns
  and loads it).
* **Execution** — what a call may do: ``enabled``, ``approval`` (``none`` | ``warn``: the result
  carries a warning), ``workspaceAllowlist`` (path prefixes for ``path``/``cwd`` arguments) and
  ``paramRestrictions`` (``min``/``max``/``enum`` per argument). Each field's effective value is
  the default, overridden by the config (``tools.policy``), overridden by the session
  (``PATCH /sessions/{id}`` ``toolPolicy``); :meth:`ToolCatalog.profile` says which one won. The
  policy maps are :mod:`tools.catalog_policy`; the config sections, :mod:`tools.catalog_config`.

Nothing here does I/O or reads a clock: the same registry, config, session settings and
loaded set always give the same answers.
"""

from __future__ import annotations

import hashlib
import json
from fnmatch import fnmatchcase
from typing import Any, Callable, Mapping, Sequence

import msgspec

from .base import ToolRegistry, ToolResult, ToolSpec
from .catalog_config import LocalPtcConfig, ToolPolicy, ToolsConfig
from .catalog_names import CatalogNames, ListedTools
from .catalog_policy import (PATH_ARGUMENTS, POLICY_DEFAULTS, POLICY_FIELDS, same_json, stored_policy_map,
                             within_allowlist)

LIFECYCLES = ("current", "compat", "dead-candidate")
SOURCES = ("native", "mcp")
CAPABILITY_SEARCH = "capability_search"
# The programmatic tool run entry (PTC, tools/ptc): an agent it is assigned to calls its deferred
# tools (and any other assigned tool outside its native list) from a program.
PTC = "programmatic_tool_run"
# Tools a program cannot call: PTC itself, and the tools that wait on a person, run an agent,
# place instructions after the round's results or outlive the call (call them natively).
NOT_FROM_PROGRAMS = frozenset({PTC, "ask_user", "subagent", "skill", "job"})
_WHY_NOT_FROM_PROGRAMS = {  # (what a refused call's message says of each)
    PTC: "programs do not nest",
    "ask_user": "it waits for a person's answer, which a program cannot",
    "subagent": "it runs another agent, which a program cannot wait for",
    "skill": "its instructions are placed after the round's tool results, which a program's call has not",
    "job": "it starts work that outlives the program",
}
# The error codes of calls refused before the tool ran, by the planes or by the registry (a tool
# the calling agent was not given, a main-only tool called by a subagent, arguments past their
# size limit): no policy warning is added, nothing ran.
REFUSALS = frozenset({"TOOL_NOT_LOADED", "TOOL_DISABLED", "PATH_NOT_ALLOWED", "PARAM_NOT_ALLOWED",
                      "TOOL_NOT_NATIVE", "PTC_TOOL_NOT_ALLOWED", "TOOL_UNKNOWN", "TOOL_MAIN_ONLY",
                      "TOOL_ARGUMENTS_TOO_LARGE"})


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(p == name or fnmatchcase(name, p) for p in patterns)


def schema_digest(spec: ToolSpec) -> str:
    """A short digest of what the model is told about a tool (name, description, schema)."""
    text = json.dumps(spec.schema(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def allowed_callers(spec: ToolSpec) -> list[str]:
    return ["main"] if spec.main_only else ["main", "subagent"]


def describe(spec: ToolSpec) -> dict[str, Any]:
    """The catalog plane's entry for one tool."""
    return {"name": spec.name, "source": spec.source, "lifecycle": spec.lifecycle,
            "schemaDigest": schema_digest(spec)}


# --------------------------------------------------------------------------- the catalog


class PlaneCheck:
    """The ``check`` of :meth:`ToolCatalog.check` for :meth:`ToolRegistry.run`: called with a
    registry tool and its decoded arguments; :meth:`absent` judges by its name alone a tool out
    of the registry whose MCP server is down."""

    def __init__(self, check: Callable[[ToolSpec, dict[str, Any]], ToolResult | None],
                 absent: Callable[[str], ToolResult | None]) -> None:
        self._check = check
        self.absent = absent

    def __call__(self, spec: ToolSpec, args: dict[str, Any]) -> ToolResult | None:
        return self._check(spec, args)


def _not_loaded(name: str, loading: bool = False) -> ToolResult:
    if loading:  # (loaded by a call of the answer this call is part of: the request did not offer it)
        return ToolResult.error("TOOL_NOT_LOADED", f"{name} was loaded by {CAPABILITY_SEARCH} after the request "
                                                   f"this call answers: it is callable from your next request")
    return ToolResult.error("TOOL_NOT_LOADED", f"{name} is deferred: load it with {CAPABILITY_SEARCH} first "
                                               f"(it is callable from the next request)")


def callable_from_nowhere(name: str, *, native: bool) -> bool:
    """Whether ``name`` is callable neither directly nor from a program: outside the native list
    of PTC (``native``: in it, or no such list in effect) and one of :data:`NOT_FROM_PROGRAMS`.
    Only a fixed ``localPtc.nativeCapabilities`` leaves such a tool out. It is not offered, a
    search neither finds nor loads it (a load changes no native list), and a call is refused
    ``TOOL_NOT_NATIVE``."""
    return not native and name in NOT_FROM_PROGRAMS


def why_from_nowhere(name: str) -> str:
    """Why ``name`` is :func:`callable_from_nowhere`."""
    return (f"{name} is left out of your tools by localPtc.nativeCapabilities, and a program cannot call it "
            f"({_WHY_NOT_FROM_PROGRAMS[name]})")


def _disabled(name: str) -> ToolResult:
    return ToolResult.error("TOOL_DISABLED", f"{name} is disabled by the tool policy")


class ToolCatalog:
    """The planes over one registry and the config's ``tools`` section."""

    def __init__(self, registry: ToolRegistry, config: ToolsConfig | None = None,
                 ptc: LocalPtcConfig | None = None, mcp_listed: ListedTools | None = None) -> None:
        """``mcp_listed``: the tools the MCP servers listed last, those of servers that are down
        included; ``tools.mcpDeferAbove`` is compared with their number (or with the MCP tools of
        the registry, if more), so a server's restart does not turn another's tools eager and
        back."""
        self.registry = registry
        self.config = config or ToolsConfig()
        self.ptc = ptc if ptc is not None and ptc.enabled else None
        self.mcp_listed = mcp_listed
        self.names = CatalogNames(registry, mcp_listed)

    # ---------------------------------------------------------------- context plane

    def deferred_names(self) -> set[str]:
        """The tools deferred for every agent (before any loads)."""
        specs = self.registry.all()
        many_mcp = self._many_mcp(specs)
        return {s.name for s in specs if self._deferred(s.name, s.deferred, s.source, many_mcp)}

    def deferred_absent(self, name: str) -> bool:
        """Whether ``name``, a tool an MCP server that is down listed last (out of the registry
        meanwhile), is deferred by the same rules as :meth:`deferred_names`."""
        if self.mcp_listed is None or name not in self.mcp_listed.listed_tools():
            return False
        return self._deferred(name, False, "mcp", self._many_mcp(self.registry.all()))

    def _many_mcp(self, specs: Sequence[ToolSpec]) -> bool:
        mcp_count = sum(1 for s in specs if s.source == "mcp")
        if self.mcp_listed is not None:
            mcp_count = max(mcp_count, self.mcp_listed.listed_tool_count())  # (counted: once a request)
        return mcp_count > self.config.mcp_defer_above

    def _deferred(self, name: str, own: bool, source: str, many_mcp: bool) -> bool:
        cfg = self.config
        if name == CAPABILITY_SEARCH or _matches(name, cfg.eager):
            return False
        return own or _matches(name, cfg.deferred) or (many_mcp and source == "mcp")

    def assigned(self, *, is_main_agent: bool, allowed: Sequence[str] | None) -> list[ToolSpec]:
        return self.registry.visible(is_main_agent=is_main_agent, allowed=allowed)

    def native_names(self, *, is_main_agent: bool, allowed: Sequence[str] | None,
                     session: Mapping[str, Any] | None = None) -> set[str] | None:
        """With :data:`PTC` assigned to the agent, the tools its requests offer natively (its eager
        tools, the PTC entry and the tools a program cannot call, or ``localPtc.nativeCapabilities``
        and the PTC entry); every other assigned tool is called from a program. ``None``: PTC is not
        assigned, or the effective policy disables it (``session``: the session's saved
        ``toolPolicy``), and nothing changes: the agent has the plain planes (its deferred tools
        loaded through ``capability_search`` and called natively), since no program can run.

        A tool of :data:`NOT_FROM_PROGRAMS` deferred by the config stays native (shown before it is
        loaded; a call still needs the load): called from nowhere else, it would be unreachable.
        A fixed list is taken as written."""
        assigned = self.assigned(is_main_agent=is_main_agent, allowed=allowed)
        names = {s.name for s in assigned}
        if PTC not in names or self.disabled_names([s for s in assigned if s.name == PTC], session):
            return None
        deferred = self.deferred_names()
        return {n for n in names if self._native(n, n in deferred)}

    def _native(self, name: str, deferred: bool) -> bool:
        """Whether an agent with PTC in effect is offered ``name`` natively (:meth:`native_names`'
        rule for one tool; ``deferred``: whether the tool is deferred)."""
        fixed = self.ptc.native_capabilities if self.ptc is not None else None
        if fixed is not None:
            return name == PTC or _matches(name, fixed)
        return not deferred or name in NOT_FROM_PROGRAMS

    def disabled_names(self, specs: Sequence[ToolSpec], session: Mapping[str, Any] | None = None) -> set[str]:
        """Of ``specs``, the tools the effective execution policy disables outright (``enabled:
        false`` from the config or the session's ``toolPolicy``)."""
        sets_enabled = any(p.enabled is not None for p in self.config.policy.values()) or any(
            p.enabled is not None for p in stored_policy_map(session or {}).values())
        if not sets_enabled:  # (the common case: no profile to work out per tool)
            return set()
        return {s.name for s in specs if not self.profile(s.name, session)["enabled"]["value"]}

    def planes(self, *, is_main_agent: bool, allowed: Sequence[str] | None, loaded: Sequence[str],
               session: Mapping[str, Any] | None = None) -> tuple[list[ToolSpec], list[ToolSpec]]:
        """(offered, searchable): the tools a model request offers the agent, and the deferred
        tools assigned to it and not loaded yet (listed only with ``disclose: "assigned"``).
        ``capability_search`` is offered only while something is searchable. With PTC assigned
        the offered list is :meth:`native_names` (loading never changes it; with the PTC entry
        disabled, the plain planes). A tool the effective
        policy disables (``session``: the session's saved ``toolPolicy``) is in neither list: a
        call of it is refused (``TOOL_DISABLED``), so offering it would only invite that call."""
        deferred = self.deferred_names()
        have = set(loaded) | set(allowed or ())
        native = self.native_names(is_main_agent=is_main_agent, allowed=allowed, session=session)
        assigned = self.assigned(is_main_agent=is_main_agent, allowed=allowed)
        off = self.disabled_names(assigned, session)
        assigned = [s for s in assigned if s.name not in off]
        if native is not None:
            searchable = [s for s in assigned if s.name in deferred and s.name not in have
                          and not callable_from_nowhere(s.name, native=s.name in native)]
            listed = self.ptc is not None and self.ptc.native_capabilities is not None
            # (capability_search: while something is searchable, or when the fixed list names it)
            offered = [s for s in assigned if s.name in native
                       and (s.name != CAPABILITY_SEARCH or searchable or listed)]
            return offered, searchable
        offered: list[ToolSpec] = []
        searchable: list[ToolSpec] = []
        search_spec = None
        for s in assigned:
            if s.name == CAPABILITY_SEARCH:
                search_spec = s
            elif s.name in deferred and s.name not in have:
                searchable.append(s)
            else:
                offered.append(s)
        show_search = bool(searchable)
        if self.config.disclose == "assigned":  # (one list whatever is loaded: the search stays too)
            listed = {x.name for x in searchable} | {x.name for x in offered}
            offered = [x for x in assigned if x.name in listed]
            show_search = any(x.name in deferred for x in offered)
        if search_spec is not None and show_search:
            offered.append(search_spec)
        return offered, searchable

    # ---------------------------------------------------------------- execution plane

    def profile(self, name: str, session: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        """Each execution field's effective value for tool ``name`` and where it came from
        (``default`` | ``config`` | ``session``). Within one layer, patterns apply in order,
        then an exact name."""
        out = {f: {"value": v, "source": "default"} for f, v in POLICY_DEFAULTS.items()}
        layers: list[tuple[str, Mapping[str, ToolPolicy]]] = [("config", self.config.policy)]
        if session:
            layers.append(("session", stored_policy_map(session)))
        for source, policy in layers:
            entries = [p for k, p in policy.items() if k != name and fnmatchcase(name, k)]
            if name in policy:
                entries.append(policy[name])
            for p in entries:
                values = msgspec.to_builtins(p)
                for f in POLICY_FIELDS:
                    if f in values:
                        out[f] = {"value": values[f], "source": source}
        return out

    def check(self, *, loaded: Sequence[str], allowed: Sequence[str] | None,
              session: Mapping[str, Any] | None, is_main_agent: bool = True,
              from_program: bool = False, loading: Sequence[str] = ()) -> PlaneCheck:
        """The ``check`` for :meth:`ToolRegistry.run`, refusing in this order: a tool the effective
        policy disables (``TOOL_DISABLED``: however it is called, it cannot run); from a program
        (``from_program``), one of :data:`NOT_FROM_PROGRAMS` (``PTC_TOOL_NOT_ALLOWED``); with PTC
        assigned, a native call of a tool outside the native list (``TOOL_NOT_NATIVE``); a deferred
        tool not loaded (``TOOL_NOT_LOADED``; ``loaded`` is what the request the call answers
        offered, and a tool in ``loading``, loaded since, is told it is callable from the next
        request); then what :meth:`policy_refusal` refuses of the arguments (a path outside the
        allowlist, an argument outside its restriction).

        Its ``absent`` applies the same refusals, in the same order, to a tool an MCP server that
        is down listed last (out of the registry meanwhile), as they would apply were it there;
        None for any other name (the server's state is the answer then)."""
        have = set(loaded) | set(allowed or ())
        native = None if from_program else self.native_names(is_main_agent=is_main_agent, allowed=allowed,
                                                               session=session)

        def refusal(name: str, deferred: bool, is_native: bool) -> ToolResult | None:
            # (one sequence for a registered tool and a down server's: the order is the contract)
            if not self.profile(name, session)["enabled"]["value"]:
                return _disabled(name)
            if from_program and name in NOT_FROM_PROGRAMS:
                return ToolResult.error("PTC_TOOL_NOT_ALLOWED", f"{name} cannot be called from a program: "
                                        f"{_WHY_NOT_FROM_PROGRAMS[name]}; call it directly (a tool call "
                                        f"of your own, outside {PTC})")
            if callable_from_nowhere(name, native=is_native):
                return ToolResult.error("TOOL_NOT_NATIVE", f"{why_from_nowhere(name)}: it cannot be called here")
            if native is not None and not is_native:
                return ToolResult.error("TOOL_NOT_NATIVE", f"{name} is called through {PTC}: call it from "
                                        f"a program ({name}(...) in the code you pass to {PTC})")
            if deferred and name not in have:
                return _not_loaded(name, name in loading)
            return None

        def absent(name: str) -> ToolResult | None:
            if self.mcp_listed is None or name not in self.mcp_listed.listed_tools():
                return None  # (a name its server never listed: no tool to judge)
            deferred = self.deferred_absent(name)
            return refusal(name, deferred, native is None or self._native(name, deferred))

        def check(spec: ToolSpec, args: dict[str, Any]) -> ToolResult | None:
            return (refusal(spec.name, spec.name in self.deferred_names(), native is None or spec.name in native)
                    or self.policy_refusal(spec, args, session))

        return PlaneCheck(check, absent)

    def policy_refusal(self, spec: ToolSpec, args: Mapping[str, Any],
                       session: Mapping[str, Any] | None) -> ToolResult | None:
        """The execution plane's refusal of a call of ``spec`` with ``args`` under the effective
        policy (``session``: the session's saved ``toolPolicy``): a disabled tool
        (``TOOL_DISABLED``), a path outside the allowlist (``PATH_NOT_ALLOWED``), an argument outside
        its restriction (``PARAM_NOT_ALLOWED``); None when the policy lets it run. Part of
        :meth:`check`, and what a user's own ``/skill:`` command is held to (it is no model's
        call: the context plane does not apply to it)."""
        p = {f: v["value"] for f, v in self.profile(spec.name, session).items()}
        if not p["enabled"]:
            return _disabled(spec.name)
        prefixes = p["workspaceAllowlist"]
        if prefixes is not None:
            props = spec.input_schema.get("properties") if isinstance(spec.input_schema, dict) else None
            for arg in PATH_ARGUMENTS:
                value = args.get(arg)
                # (a command without a cwd runs at the workspace root; a call that runs none,
                # such as job list/read/stop, has no directory to check)
                takes_cwd = isinstance(props, dict) and "cwd" in props
                if value is None and arg == "cwd" and takes_cwd and "command" in args:
                    value = "."
                if isinstance(value, str) and not within_allowlist(value, prefixes):
                    return ToolResult.error("PATH_NOT_ALLOWED", f"{spec.name}: {arg} {value[:200]!r} is outside "
                                            f"the workspace allowlist ({', '.join(prefixes) or 'empty'})")
        for arg, r in (p["paramRestrictions"] or {}).items():
            if arg not in args:
                continue  # (the tool's own default applies)
            value = args[arg]
            if r.get("enum") is not None and not any(same_json(value, e) for e in r["enum"]):
                return ToolResult.error("PARAM_NOT_ALLOWED", f"{spec.name}: {arg} must be one of "
                                        f"{json.dumps(r['enum'])[:300]}")
            if r.get("min") is not None or r.get("max") is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    return ToolResult.error("PARAM_NOT_ALLOWED", f"{spec.name}: {arg} must be a number")
                if r.get("min") is not None and value < r["min"]:
                    return ToolResult.error("PARAM_NOT_ALLOWED", f"{spec.name}: {arg} must be at least {r['min']:g}")
                if r.get("max") is not None and value > r["max"]:
                    return ToolResult.error("PARAM_NOT_ALLOWED", f"{spec.name}: {arg} must be at most {r['max']:g}")
        return None

    def allowlist(self, name: str, session: Mapping[str, Any] | None) -> list[str] | None:
        """The workspace allowlist in effect for tool ``name`` (None: none)."""
        return self.profile(name, session)["workspaceAllowlist"]["value"]

    def warning(self, name: str, session: Mapping[str, Any] | None) -> str | None:
        """The note an ``approval: warn`` tool's result carries, else None."""
        if self.profile(name, session)["approval"]["value"] == "warn":
            return f"[policy warning: {name} runs under approval 'warn'; this call was not confirmed by a person]"
        return None
