"""The tool catalog and its three planes (F-TOOL-1, F-TOOL-2), and ``capability_search`` (F-TOOL-3).

* **Catalog** — which tools exist: every :class:`~tools.base.ToolSpec` of the daemon's registry
  (built-in and MCP tools alike), described by :func:`describe` (name, schema digest, source,
  lifecycle).
* **Context** — what a model request offers an agent: main-only tools are withheld from
  subagents (``allowedCallers``), and *deferred* tools stay out of the tool list until the agent
  loads them with ``capability_search`` (a ``capability.loaded`` event, folded per agent). A
  subagent whose ``tools`` list names a deferred tool has it from the start (naming it assigns
  and loads it).
* **Execution** — what a call may do: ``enabled``, ``approval`` (``none`` | ``warn``: the result
  carries a warning), ``workspaceAllowlist`` (path prefixes for ``path``/``cwd`` arguments) and
  ``paramRestrictions`` (``min``/``max``/``enum`` per argument). Each field's effective value is
  the default, overridden by the config (``tools.policy``), overridden by the session
  (``PATCH /sessions/{id}`` ``toolPolicy``); :meth:`ToolCatalog.profile` says which one won.

Nothing here does I/O or reads a clock: the same registry, config, session settings and
loaded set always give the same answers.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from fnmatch import fnmatchcase
from typing import Any, Callable, Literal, Mapping, Protocol, Sequence

import msgspec

from events import types as t
from projections.tokens import UNSPACED, fold_text
from runtime.errors import short_reason, shortened_json, shortened_names  # (imports nothing: no cycle)
from runtime.providers.names import NameTable, alias_for, name_table  # (imports nothing of tools: no cycle)

from .base import ToolContext, ToolError, ToolRegistry, ToolResult, ToolSpec, _unrecordable

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
# MCP tools are deferred by default once the registry holds more than this many of them.
DEFAULT_MCP_DEFER_ABOVE = 16
MAX_QUERY_CHARS = 500
MAX_LIMIT = 20
DEFAULT_LIMIT = 5
# Arguments the workspace allowlist applies to (workspace-relative paths of the file tools and
# run_command's working directory).
PATH_ARGUMENTS = ("path", "cwd")
POLICY_FIELDS = ("enabled", "approval", "workspaceAllowlist", "paramRestrictions")
POLICY_DEFAULTS: dict[str, Any] = {"enabled": True, "approval": "none", "workspaceAllowlist": None,
                                   "paramRestrictions": {}}
MAX_POLICY_ENTRIES = 1000  # tool names or patterns in one policy map (config or session)
# The error codes of calls refused before the tool ran, by the planes or by the registry (a tool
# the calling agent was not given, a main-only tool called by a subagent, arguments past their
# size limit): no policy warning is added, nothing ran.
REFUSALS = frozenset({"TOOL_NOT_LOADED", "TOOL_DISABLED", "PATH_NOT_ALLOWED", "PARAM_NOT_ALLOWED",
                      "TOOL_NOT_NATIVE", "PTC_TOOL_NOT_ALLOWED", "TOOL_UNKNOWN", "TOOL_MAIN_ONLY",
                      "TOOL_ARGUMENTS_TOO_LARGE"})


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


class PolicyError(ValueError):
    """A policy map that cannot be used; the message names the key."""


def check_policy_map(policy: Mapping[str, ToolPolicy], where: str) -> None:
    """Raise :class:`PolicyError` for a policy map that cannot be applied as written."""
    if len(policy) > MAX_POLICY_ENTRIES:
        raise PolicyError(f"{where} has more than {MAX_POLICY_ENTRIES} entries")
    for name, p in policy.items():
        if not name or len(name) > 256:
            raise PolicyError(f"{where}: a tool name or pattern must be 1 to 256 characters")
        if p.workspace_allowlist is not None:
            for prefix in p.workspace_allowlist:
                if not isinstance(prefix, str) or _normal(prefix) is None:
                    raise PolicyError(f"{where}.{name}.workspaceAllowlist: {str(prefix)[:100]!r} must be a "
                                      f"workspace-relative path without '..' ('.' for the whole workspace)")
        for arg, r in (p.param_restrictions or {}).items():
            if r.min is not None and r.max is not None and r.min > r.max:
                raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}: min is greater than max")
            if r.min is None and r.max is None and r.enum is None:
                raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}: give min, max or enum")
            for bound in (r.min, r.max):
                if bound is not None and bound != bound:
                    raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}: a bound is not a number")
            # (a session's map is recorded in the log: an integer past 64 bits failed the append
            # and crashed the session's actor, three times and it was quarantined)
            problem = _unrecordable(r.enum) if r.enum is not None else None
            if problem is not None:
                raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}.enum: the values {problem}")


def parse_policy_map(data: Any, where: str) -> dict[str, ToolPolicy]:
    """A policy map from JSON (camelCase keys), checked; :class:`PolicyError` names the problem."""
    try:
        policy = msgspec.convert(data, dict[str, ToolPolicy])
    except msgspec.ValidationError as exc:
        raise PolicyError(f"{where}: {short_reason(exc)}") from None
    check_policy_map(policy, where)
    return policy


def stored_policy_map(saved: Mapping[str, Any]) -> dict[str, ToolPolicy]:
    """A saved map (``session.configured`` settings, as folded) for use: its entries were checked
    when saved. One that no longer converts is left out alone; the others still apply (dropping
    the whole map would drop the restrictions it holds too)."""
    out: dict[str, ToolPolicy] = {}
    for name, entry in saved.items():
        try:
            out[name] = msgspec.convert(entry, ToolPolicy)
        except msgspec.ValidationError:
            continue
    return out


def policy_json(policy: Mapping[str, ToolPolicy]) -> dict[str, Any]:
    """A policy map as stored in ``session.configured`` settings (unset fields left out)."""
    return {name: msgspec.to_builtins(p) for name, p in policy.items()}


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(p == name or fnmatchcase(name, p) for p in patterns)


def _normal(path: str) -> str | None:
    """A workspace-relative path normalised (``.`` for the root), or None when it is absolute or
    leaves the workspace (``..``). Read as the executor reads it: ``/`` is the only separator (a
    backslash is part of a name there, so ``a\\..\\src\\f`` is one file at the root, never
    ``src/f``)."""
    if not path or "\0" in path or path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return None if path else "."
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        return None
    return norm


def within_allowlist(path: str, prefixes: Sequence[str]) -> bool:
    """Whether workspace-relative ``path`` lies under one of the allowlist's ``prefixes``."""
    return _within(path, prefixes)


def _within(path: str, prefixes: Sequence[str]) -> bool:
    norm = _normal(path)
    if norm is None:
        return False
    for prefix in prefixes:
        p = _normal(prefix)
        if p is not None and (p == "." or norm == p or norm.startswith(p + "/")):
            return True
    return False


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality (as JSON Schema's ``enum`` compares): ``true`` is not ``1``, ``1`` is ``1.0``.
    Python's ``==`` takes ``True == 1`` and ``False == 0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


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


# --------------------------------------------------------------------------- ranking

# Scripts written without spaces between words (Han, kana, Hangul; Thai, Lao, Khmer, Burmese: the
# history index's ``UNSPACED``): a run of them is read as its overlapping character bigrams
# ("天气预报" -> 天气, 气预, 预报), so a query word of two or more such characters finds the text it
# occurs in (a query word of one such character finds the text holding it: :func:`score`). The
# vowel signs and tone marks of Thai, Lao, Khmer and Burmese are folded away first, as the
# history index drops them. Other scripts' words are runs of letters and digits.
_TOKEN = re.compile(rf"(?P<cjk>[{UNSPACED}]+)|(?:(?![{UNSPACED}])[^\W_])+")  # (``_`` separates, as in tool names)


def _fold(text: str) -> str:
    """``text`` as the ranking compares it: case-folded (``Straße`` is ``STRASSE``), compatibility
    forms unified (full-width letters) and diacritics dropped (``Café`` is ``cafe``; the vowel signs
    and tone marks of Thai, Lao, Khmer and Burmese too), as the history index folds (kana keep
    their voicing: が is not か)."""
    return text.lower() if text.isascii() else fold_text(text.casefold())


def tokens(text: str) -> list[str]:
    """The words of ``text``, folded: runs of letters and digits of any script (``mcp__t__echo``
    -> mcp, t, echo; ``Прогноз погоды`` -> прогноз, погоды), runs of Han, kana, Hangul, Thai,
    Lao, Khmer or Burmese as their character bigrams (a lone character as itself)."""
    out: list[str] = []
    for m in _TOKEN.finditer(_fold(text)):
        run = m.group()
        if m.group("cjk") is not None and len(run) > 1:
            out += [run[i:i + 2] for i in range(len(run) - 1)]
        else:
            out.append(run)
    return out


def _characters(text: str) -> set[str]:
    """The letters of ``text``'s runs of two or more characters of an unspaced script, folded:
    a query of one such letter is a word too short for bigrams, and finds the text holding it
    (as the history index, which reads these scripts by single letters, finds it)."""
    return {c for m in _TOKEN.finditer(_fold(text)) if m.group("cjk") is not None and len(m.group()) > 1
            for c in m.group()}


# English function words: a query word among them scores only as a whole word of a tool's name.
# Every description holds some ("Get the weather for a city"), so "the" or "for a" ranked and
# loaded tools that had nothing to do with what was asked.
COMMON_WORDS = frozenset(
    "a about an and any are as at be by can could do does for from get give has have how i if in "
    "into is it its let me my need of on or our please should so some than that the their them "
    "then there these this those to us use using want was we what when where which who why will "
    "with would you your".split())


def score(query: str, spec: ToolSpec, offered: Mapping[str, str] | None = None) -> int:
    """How well ``query`` matches a tool: for each distinct query word, 3 if it is a word of the
    tool's name, else 2 if a name word starts with it (3+ letters) or, for one letter of an
    unspaced script (Han, kana, Hangul, Thai…), holds it, else 1 if it is (or, with 3+ letters,
    starts) a word of the description or is one of its letters of such scripts; plus 10 when the
    query is the tool's name (case-folded), 11 when it is the name exactly as written (two tools
    whose names differ only by case: the one named is first). The name a model is offered for a
    tool (its digest alias, when its id is no native name) counts as its name for that bonus. A
    word of :data:`COMMON_WORDS` scores only as a name word."""
    name_words = set(tokens(spec.name))
    name_chars = _characters(spec.name)
    desc_words = set(tokens(spec.description)) | _characters(spec.description)
    total = named(query, spec, offered)
    for w in dict.fromkeys(tokens(query)):
        if w in name_words:
            total += 3
        elif w in COMMON_WORDS:
            continue
        elif (len(w) >= 3 and any(n.startswith(w) for n in name_words)) or w in name_chars:
            total += 2
        elif w in desc_words or (len(w) >= 3 and any(d.startswith(w) for d in desc_words)):
            total += 1
    return total


def named(query: str, spec: ToolSpec, offered_as: Mapping[str, str] | None = None) -> int:
    """The bonus of a query that is ``spec``'s name (or the name it is offered under, from
    ``offered_as``, :meth:`ToolCatalog.offered_names`; else its digest alias): 11 exactly as
    written, 10 in another case, else 0."""
    asked = query.strip()
    offered = (offered_as or {}).get(spec.name) or alias_for(spec.name)
    return (11 if asked in (spec.name, offered) else
            10 if _fold(asked) in (_fold(spec.name), _fold(offered)) else 0)


def rank(query: str, specs: Sequence[ToolSpec], offered: Mapping[str, str] | None = None) -> list[tuple[int, ToolSpec]]:
    """The tools matching ``query`` (score above 0), best first; ties by name (``offered``: the
    names the tools are offered under, as :func:`named` takes them)."""
    scored = [(score(query, s, offered), s) for s in specs]
    return sorted([x for x in scored if x[0] > 0], key=lambda x: (-x[0], x[1].name))


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


def _not_loaded(name: str) -> ToolResult:
    return ToolResult.error("TOOL_NOT_LOADED", f"{name} is deferred: load it with {CAPABILITY_SEARCH} first "
                                               f"(it is callable from the next request)")


def callable_from_nowhere(name: str, *, native: bool) -> bool:
    """Whether ``name`` is callable neither directly nor from a program: outside the native list
    of PTC (``native``: in it, or no such list in effect) and one of :data:`NOT_FROM_PROGRAMS`.
    Only a fixed ``localPtc.nativeCapabilities`` leaves such a tool out. It is not offered, a
    search neither finds nor loads it (a load changes no native list), and a call is refused
    ``TOOL_NOT_NATIVE``."""
    return not native and name in NOT_FROM_PROGRAMS


def _why_from_nowhere(name: str) -> str:
    """Why ``name`` is :func:`callable_from_nowhere`."""
    return (f"{name} is left out of your tools by localPtc.nativeCapabilities, and a program cannot call it "
            f"({_WHY_NOT_FROM_PROGRAMS[name]})")


def _disabled(name: str) -> ToolResult:
    return ToolResult.error("TOOL_DISABLED", f"{name} is disabled by the tool policy")


class ListedTools(Protocol):
    """The tools the MCP servers listed last, those of servers that are down now included
    (:class:`tools.mcp.McpServers`)."""

    def listed_tools(self) -> list[str]: ...

    def listed_tool_count(self) -> int: ...


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
        self._names: tuple[set[str], NameTable, dict[str, str]] | None = None  # (_name_table's answer)

    # ---------------------------------------------------------------- context plane

    def known_names(self) -> set[str]:
        """The registry's tools and the MCP tools of servers that are down now (as last listed):
        the ids a digest alias a model gives is mapped back to (F-MOD-3: the log holds ids)."""
        names = {s.name for s in self.registry.all()}
        return names | set(self.mcp_listed.listed_tools()) if self.mcp_listed is not None else names

    def offered_names(self) -> dict[str, str]:
        """{id: the name providers are sent} for :meth:`known_names` (F-MOD-3): a tool's own name
        when it is native, even when it is another tool's digest alias; that other tool then goes
        under a further alias (:func:`runtime.providers.names.name_table`). Not to be changed."""
        return self._name_table()[0].offered

    def further_aliases(self) -> dict[str, str]:
        """{id: its further alias} for the few :meth:`known_names` whose digest alias is another
        tool's own name, those of a server that is down included: what a model request carries
        (``ModelRequest.tool_aliases``), so its history's calls keep their names. Not to be changed."""
        return self._name_table()[0].further

    def ids_for(self, names: Sequence[str]) -> list[str]:
        """``names`` (tool names a model gave) as tool ids: a name one of :meth:`known_names` is
        offered under (its digest or further alias) as that id, any other name unchanged. A model
        may give one where no request's table maps it back: a call of a tool it was not offered,
        a subagent's ``tools`` list, a program's ``call_tool``."""
        if all(self.registry.get(n) is not None for n in names):
            return list(names)  # (the common case: ids, and no table to look at)
        ids = self._name_table()[1]
        return [ids.get(n, n) for n in names]

    def _name_table(self) -> tuple[NameTable, dict[str, str]]:
        """:meth:`known_names`' :func:`name_table`, and {offered name: id} where the two differ,
        made again only when those names change (a digest per id: tens of milliseconds for ten
        thousand MCP tools, on every request and every name a program calls a tool by)."""
        known = self.known_names()
        if self._names is None or self._names[0] != known:
            table = name_table(known)
            self._names = (known, table, {n: i for i, n in table.offered.items() if n != i})
        return self._names[1], self._names[2]

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
              from_program: bool = False) -> PlaneCheck:
        """The ``check`` for :meth:`ToolRegistry.run`, refusing in this order: a tool the effective
        policy disables (``TOOL_DISABLED``: however it is called, it cannot run); from a program
        (``from_program``), one of :data:`NOT_FROM_PROGRAMS` (``PTC_TOOL_NOT_ALLOWED``); with PTC
        assigned, a native call of a tool outside the native list (``TOOL_NOT_NATIVE``); a deferred
        tool not loaded (``TOOL_NOT_LOADED``); then what :meth:`policy_refusal` refuses of the
        arguments (a path outside the allowlist, an argument outside its restriction).

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
                return ToolResult.error("TOOL_NOT_NATIVE", f"{_why_from_nowhere(name)}: it cannot be called here")
            if native is not None and not is_native:
                return ToolResult.error("TOOL_NOT_NATIVE", f"{name} is called through {PTC}: call it from "
                                        f"a program ({name}(...) in the code you pass to {PTC})")
            if deferred and name not in have:
                return _not_loaded(name)
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
                if isinstance(value, str) and not _within(value, prefixes):
                    return ToolResult.error("PATH_NOT_ALLOWED", f"{spec.name}: {arg} {value[:200]!r} is outside "
                                            f"the workspace allowlist ({', '.join(prefixes) or 'empty'})")
        for arg, r in (p["paramRestrictions"] or {}).items():
            if arg not in args:
                continue  # (the tool's own default applies)
            value = args[arg]
            if r.get("enum") is not None and not any(_same_json(value, e) for e in r["enum"]):
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


# --------------------------------------------------------------------------- capability_search


def _not_searchable(spec: ToolSpec, assigned: Sequence[ToolSpec], off: set[str], deferred: set[str],
                    listed: set[str], native: set[str] | None) -> tuple[str, bool]:
    """Why ``spec``, which a query names, is not among the tools an agent's search may load, and
    whether that ends the search. It does for a deferred tool the agent cannot load (not assigned,
    disabled, or with PTC in effect outside the native list and no program's to call): its name's
    words would load other tools of its server in its place. A tool in the agent's tool list
    already (an eager one, or one a subagent's list gave it) does not: its name is a word of other
    tools too (``job``: ``mcp__ci__job_status``), and those are searched."""
    if spec.name not in {s.name for s in assigned}:
        return f"{spec.name} is not assigned to you", spec.name in deferred
    if spec.name in off:
        return f"{spec.name} is disabled by the tools policy", spec.name in deferred
    if callable_from_nowhere(spec.name, native=native is None or spec.name in native):
        return _why_from_nowhere(spec.name), True
    if spec.name in listed or spec.name not in deferred:
        return f"{spec.name} is in your tool list already", False
    return f"{spec.name} cannot be loaded", True  # (not reached: every other case is ranked)


def _ordered(ranked: list[tuple[int, ToolSpec]], have: set[str]) -> list[tuple[int, ToolSpec]]:
    """``ranked`` in a search's order: by score, then the tools not in ``have`` (not loaded yet)
    first, then by name."""
    return sorted(ranked, key=lambda x: (-x[0], x[1].name in have, x[1].name))


def _more_past(ranked: list[tuple[int, ToolSpec]], past: set[str], limit: int, load: bool, have: set[str]) -> str:
    """What a search says of the matches ``past`` its ``limit`` that are not loaded, and what
    reaches them, as the same search would rank them once this one's loads are made (``have``).
    The same search again loads them only when one ties the lowest score shown (not loaded, it
    comes first at that score); one scoring lower stays behind the ones shown for good, so the
    answer names the limit that reaches it (at most :data:`MAX_LIMIT`), else narrower words."""
    at = [i for i, (_score, s) in enumerate(_ordered(ranked, have)) if s.name in past]
    n = len(at)
    it = "it" if n == 1 else "them"
    does, do = ("loads", "load") if load else ("shows", "show")
    within = sum(1 for i in at if i < limit)
    if load and within:  # (then every one past the limit is not loaded: the rest come later)
        return (f"{n} more match past the limit of {limit}, not loaded: the same search again loads "
                f"{it if within == n else 'the next one' if within == 1 else f'the next {within}'}.")
    need, reach = at[-1] + 1, sum(1 for i in at if i < MAX_LIMIT)
    if need <= MAX_LIMIT:
        how = f"a limit of {need} {does} {it}"
    elif reach and limit < MAX_LIMIT:
        how = f"a limit of {MAX_LIMIT} {does} {reach} of them, narrower words the rest"
    else:
        how = f"narrower words {do} {it}"
    if load:
        return (f"{n} more match past the limit of {limit}, not loaded, scoring lower than the ones shown (the same "
                f"search again shows the same): {how}.")
    return f"{n} more match past the limit of {limit}; {how}."


def capability_search_tool(catalog: ToolCatalog) -> ToolSpec:
    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        unknown = set(args) - {"query", "limit", "load"}
        if unknown:
            raise ToolError("INVALID_ARGUMENT", f"{CAPABILITY_SEARCH} does not take {shortened_names(unknown)}")
        if "query" not in args:
            raise ToolError("INVALID_ARGUMENT", f"{CAPABILITY_SEARCH} needs 'query'")
        query = args["query"]
        if not isinstance(query, str):
            raise ToolError("INVALID_ARGUMENT", f"query must be a string, got {shortened_json(query)}")
        if not query.strip():
            raise ToolError("INVALID_ARGUMENT", "query is empty (or only white space)")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError("INVALID_ARGUMENT", f"query is {len(query):,} characters, more than {MAX_QUERY_CHARS}")
        words = tokens(query)
        if not words:
            raise ToolError("INVALID_ARGUMENT", f"query {shortened_json(query)} holds no word to search for (letters or "
                            f"digits): name what the tool does, such as 'issue tracker'")
        limit = args.get("limit", DEFAULT_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ToolError("INVALID_ARGUMENT", f"limit must be an integer from 1 to {MAX_LIMIT}, got {shortened_json(limit)}")
        load = args.get("load", True)
        if not isinstance(load, bool):
            raise ToolError("INVALID_ARGUMENT", f"load must be true or false, got {shortened_json(load)}")
        loaded = list(ctx.loaded_capabilities() if ctx.loaded_capabilities is not None else [])
        _offered, searchable = catalog.planes(is_main_agent=ctx.is_main_agent, allowed=ctx.agent_tools or None,
                                              loaded=loaded, session=ctx.tool_policy)
        deferred = catalog.deferred_names()
        assigned = catalog.assigned(is_main_agent=ctx.is_main_agent, allowed=ctx.agent_tools or None)
        off = catalog.disabled_names(assigned, ctx.tool_policy)
        already = [s for s in assigned if s.name in deferred and s.name in set(loaded) and s.name not in off]
        have = set(loaded)
        # (at equal scores the tools not loaded yet come first: "github" again loads the next ones
        # of a server's tools, where the ones loaded by the first search filled the limit again)
        wire = catalog.offered_names()
        ranked = rank(query, [*searchable, *already], wire)
        note = ""  # (what the answer says first: a named tool the agent has already)
        # A query that is a tool's name finds that tool alone (both, for two names differing only
        # by case): every tool of its server shares the words "mcp" and the server's name, and
        # those loaded tools nobody asked for beside it.
        if any(named(query, x[1], wire) for x in ranked):
            ranked = [x for x in ranked if named(query, x[1], wire)]
        else:
            # A query naming a deferred tool this search cannot load answers why, and loads nothing
            # in its place (the other tools of its server, by the shared words); one naming a tool
            # the agent has already is searched as words, the answer saying so first.
            named_here = [x for x in catalog.registry.all() if named(query, x, wire)]
            if named_here:
                native = catalog.native_names(is_main_agent=ctx.is_main_agent, allowed=ctx.agent_tools or None,
                                              session=ctx.tool_policy)
                why, final = _not_searchable(named_here[0], assigned, off, deferred, have | set(ctx.agent_tools or ()),
                                             native)
                if final:
                    return ToolResult.text(f"No deferred capability matches {json.dumps(query, ensure_ascii=False)}: "
                                           f"{why}. Nothing was loaded.",
                                           {"matches": [], "loaded": [], "searchable": len(searchable), "more": 0})
                note = why
        ordered = _ordered(ranked, have)
        top = ordered[:limit]
        past = {s.name for _score, s in ordered[limit:] if s.name not in have}  # (matches past the limit, not loaded)
        more = len(past)
        new = [s.name for _score, s in top if s.name not in have] if load else []
        matches = [{"name": s.name, "description": s.description, "score": sc,
                    "loaded": s.name in have or s.name in new,
                    **({"inputExamples": list(s.input_examples)} if s.input_examples else {})} for sc, s in top]
        if not matches:
            text = f"No deferred capability matches {json.dumps(query, ensure_ascii=False)} ({len(searchable)} searchable)."
            if all(w in COMMON_WORDS for w in words):
                text += " Common words such as 'the' or 'for' match only tool names: name what the tool does."
        else:
            lines = [f"- {m['name']} (score {m['score']}{', loaded' if m['loaded'] else ''}): {ctx.secrets.cut(m['description'], 300)}"
                     for m in matches]
            tail = (f"Loaded {', '.join(new)}: callable from your next request." if new
                    else "Nothing new was loaded." if load else "Not loaded (load: false).")
            if more:
                tail += f" {_more_past(ranked, past, limit, load, have | set(new))}"
            text = "\n".join([*lines, tail])
        if note:
            text = f"{note}. {text}" if not matches else f"{note}.\n{text}"
        events: list[t._Event] = [t.CapabilityLoaded(capability_ids=new, call_id=ctx.call_id)] if new else []
        return ToolResult.text(text, {"matches": matches, "loaded": new, "searchable": len(searchable), "more": more},
                               events=events)

    return ToolSpec(
        CAPABILITY_SEARCH,
        "Search the deferred tools assigned to you (name and description words) and load the best "
        "matches: loaded tools are in your tool list from your next request.",
        {"type": "object", "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS, "description": "words to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": f"default {DEFAULT_LIMIT}"},
            "load": {"type": "boolean", "description": "load the matches (default true)"}},
         "required": ["query"], "additionalProperties": False},
        run, replay_safe=True,
        input_examples=({"query": "issue tracker"}, {"query": "time", "limit": 3, "load": False}))
