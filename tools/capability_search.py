"""``capability_search`` (F-TOOL-3): the tool an agent searches its deferred tools with and
loads the best matches (a ``capability.loaded`` event), ranked by :mod:`tools.catalog_ranking`."""

from __future__ import annotations

import json
from typing import Any, Sequence

from events import types as t
from runtime.errors import shortened_json, shortened_names  # (imports nothing: no cycle)

from .base import ToolContext, ToolError, ToolResult, ToolSpec
from .catalog import CAPABILITY_SEARCH, ToolCatalog, callable_from_nowhere, why_from_nowhere
from .catalog_ranking import COMMON_WORDS, named, rank, tokens
from .workspace_tools import int_arg

MAX_QUERY_CHARS = 500
MAX_LIMIT = 20
DEFAULT_LIMIT = 5


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
        return why_from_nowhere(spec.name), True
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
        # (an optional argument sent as null is that argument left out: its default)
        limit = int_arg(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        load = args.get("load")
        if load is None:
            load = True
        elif not isinstance(load, bool):
            raise ToolError("INVALID_ARGUMENT", f"load must be true or false, got {shortened_json(load)}")
        loaded = list(ctx.loaded_capabilities() if ctx.loaded_capabilities is not None else [])
        _offered, searchable = catalog.planes(is_main_agent=ctx.is_main_agent, allowed=ctx.agent_tools or None,
                                              loaded=loaded, session=ctx.tool_policy)
        deferred = catalog.deferred_names()
        assigned = catalog.assigned(is_main_agent=ctx.is_main_agent, allowed=ctx.agent_tools or None)
        off = catalog.disabled_names(assigned, ctx.tool_policy)
        already = [s for s in assigned if s.name in deferred and s.name in set(loaded) and s.name not in off]
        have = set(loaded)
        loading = set(ctx.capabilities_loading() if ctx.capabilities_loading is not None else ())
        # (at equal scores the tools not loaded yet come first: "github" again loads the next ones
        # of a server's tools, where the ones loaded by the first search filled the limit again)
        wire = catalog.names.offered_names()
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
            # (listed loaded, but not callable yet: an earlier call of this answer loaded them)
            since = [m["name"] for m in matches if m["name"] in loading and m["name"] not in new]
            if since:
                tail += (f" {', '.join(since)} {'was' if len(since) == 1 else 'were'} loaded since your last request: "
                         f"callable from your next request.")
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
