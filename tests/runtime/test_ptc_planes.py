"""The catalog planes with ``programmatic_tool_run`` assigned (F-TOOL-3, tools/catalog.py):
which tools a request offers natively (eager tools and the PTC entry, or the fixed
``localPtc.nativeCapabilities`` list), that loading never changes that list, that a native call
of any other tool is refused, and which tools a program may call."""

from __future__ import annotations

import json
from typing import Any

import pytest

import runtime.providers.names
import tools.catalog_names
from projections.session_state import AgentState, SessionState
from runtime.agent_tools import can_load_skills
from runtime.config import ConfigError, parse_config
from runtime.providers.names import alias_for
from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec
from tools.capability_search import capability_search_tool
from tools.catalog import CAPABILITY_SEARCH, NOT_FROM_PROGRAMS, PTC, ToolCatalog
from tools.ptc.tool import ptc_tool


async def _ok(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.text("ran")


def spec(name: str, **kw: Any) -> ToolSpec:
    return ToolSpec(name, "", {"type": "object"}, _ok, **kw)


def catalog(specs: list[ToolSpec], config: dict[str, Any]) -> ToolCatalog:
    cfg = parse_config(json.dumps(config))
    reg = ToolRegistry(specs)
    cat = ToolCatalog(reg, cfg.tools, cfg.local_ptc)
    reg.add(capability_search_tool(cat))
    if cat.ptc is not None:
        reg.add(ptc_tool(cat))
    return cat


def names(specs: list[ToolSpec]) -> list[str]:
    return [s.name for s in specs]


TOOLS = [spec("read"), spec("edit"), spec("later"), spec("other"), spec("ask_user"), spec("boss", main_only=True)]


def test_without_a_localptc_section_nothing_changes():
    cat = catalog(TOOLS, {"tools": {"deferred": ["later", "other"]}})
    assert cat.ptc is None and cat.registry.get(PTC) is None
    assert cat.native_names(is_main_agent=True, allowed=None) is None
    offered, _ = cat.planes(is_main_agent=True, allowed=None, loaded=["later"])
    assert "later" in names(offered)  # (loaded deferred tools are native without PTC)
    off = catalog(TOOLS, {"localPtc": {"enabled": False}})
    assert off.ptc is None and off.registry.get(PTC) is None


def test_with_ptc_the_eager_tools_and_the_entry_are_native_and_loading_does_not_change_them():
    cat = catalog(TOOLS, {"tools": {"deferred": ["later", "other"]}, "localPtc": {}})
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert names(offered) == ["read", "edit", "ask_user", "boss", CAPABILITY_SEARCH, PTC]
    assert names(searchable) == ["later", "other"]
    offered2, searchable2 = cat.planes(is_main_agent=True, allowed=None, loaded=["later"])
    assert names(offered2) == ["read", "edit", "ask_user", "boss", CAPABILITY_SEARCH, PTC]  # not "later"
    assert names(searchable2) == ["other"]
    offered3, _ = cat.planes(is_main_agent=True, allowed=None, loaded=["later", "other"])
    assert CAPABILITY_SEARCH not in names(offered3)  # (nothing left to search)
    # a subagent: main-only tools withheld; one whose list leaves PTC out is as without PTC
    sub, _ = cat.planes(is_main_agent=False, allowed=None, loaded=())
    assert "boss" not in names(sub) and PTC in names(sub)
    assert cat.native_names(is_main_agent=False, allowed=["read", "later"]) is None
    plain, _ = cat.planes(is_main_agent=False, allowed=["read", "later"], loaded=())
    assert names(plain) == ["read", "later"]


async def test_a_tool_a_program_cannot_call_stays_native_when_the_config_defers_it():
    """`job`, `ask_user`, `skill`, `subagent` cannot be called from a program: deferred by the
    config, they were neither offered natively nor callable from a program — unreachable. Now they
    stay native like a listed deferred tool: shown, loaded through capability_search, then called."""
    cat = catalog(TOOLS, {"tools": {"deferred": ["later", "ask_user"]}, "localPtc": {}})
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert "ask_user" in names(offered) and "later" not in names(offered)
    assert CAPABILITY_SEARCH in names(offered) and names(searchable) == ["later", "ask_user"]
    assert await run_checked(cat, "ask_user") == "TOOL_NOT_LOADED"
    assert await run_checked(cat, "ask_user", loaded=["ask_user"]) is None
    assert await run_checked(cat, "ask_user", loaded=["ask_user"], from_program=True) == "PTC_TOOL_NOT_ALLOWED"
    assert await run_checked(cat, "later", loaded=["later"]) == "TOOL_NOT_NATIVE"  # (others: from a program)
    assert await run_checked(cat, "later", loaded=["later"], from_program=True) is None


@pytest.mark.parametrize(("fixed", "native"), [
    ([], [PTC]),
    (["read"], ["read", PTC]),
    (["later", "e*"], ["edit", "later", PTC]),  # (a listed deferred tool is shown before its load)
    ([CAPABILITY_SEARCH], [CAPABILITY_SEARCH, PTC]),
    (["nonexistent"], [PTC]),
])
def test_native_capabilities_fix_the_native_list(fixed: list[str], native: list[str]):
    cat = catalog(TOOLS, {"tools": {"deferred": ["later", "other"]}, "localPtc": {"nativeCapabilities": fixed}})
    offered, _ = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert sorted(names(offered)) == sorted(native)
    offered2, _ = cat.planes(is_main_agent=True, allowed=None, loaded=["later", "other"])
    assert sorted(names(offered2)) == sorted(native)


async def run_checked(cat: ToolCatalog, name: str, *, loaded: list[str] = (), from_program: bool = False,
                      main: bool = True) -> str | None:
    check = cat.check(loaded=list(loaded), allowed=None, session=None, is_main_agent=main, from_program=from_program)
    ctx = ToolContext("p1", "ses_1", "main", None, "call_1", main)
    return (await cat.registry.run(name, "{}", ctx, check=check)).error_code


async def test_a_native_call_outside_the_native_list_is_refused_and_a_program_may_make_it():
    cat = catalog(TOOLS, {"tools": {"deferred": ["later"]}, "localPtc": {"nativeCapabilities": ["read", "later"]}})
    assert await run_checked(cat, "read") is None
    assert await run_checked(cat, "edit") == "TOOL_NOT_NATIVE"
    assert await run_checked(cat, "edit", from_program=True) is None
    # listed but deferred: shown natively, a call still needs the load (either way)
    assert await run_checked(cat, "later") == "TOOL_NOT_LOADED"
    assert await run_checked(cat, "later", from_program=True) == "TOOL_NOT_LOADED"
    assert await run_checked(cat, "later", loaded=["later"]) is None
    # what a program cannot call, whatever the lists say
    assert "ask_user" in NOT_FROM_PROGRAMS and PTC in NOT_FROM_PROGRAMS
    assert await run_checked(cat, "ask_user", from_program=True) == "PTC_TOOL_NOT_ALLOWED"
    assert await run_checked(cat, PTC, from_program=True) == "PTC_TOOL_NOT_ALLOWED"
    assert await run_checked(cat, "ask_user") == "TOOL_NOT_NATIVE"  # (not listed: unreachable, as configured)


async def test_a_tool_the_policy_disables_is_refused_as_disabled_however_it_is_called():
    """A tool both disabled and deferred answered TOOL_NOT_LOADED (and with PTC, TOOL_NOT_NATIVE
    or PTC_TOOL_NOT_ALLOWED), sending the model to a capability_search that then said it was
    disabled, or to a program that was then refused. The policy's refusal comes first."""
    cat = catalog(TOOLS, {"tools": {"deferred": ["later"], "policy": {"later": {"enabled": False},
                                                                      "ask_user": {"enabled": False}}}})
    assert await run_checked(cat, "later") == "TOOL_DISABLED"
    ptc = catalog(TOOLS, {"tools": {"deferred": ["later"], "policy": {"later": {"enabled": False},
                                                                      "ask_user": {"enabled": False}}},
                          "localPtc": {"nativeCapabilities": ["read"]}})
    for name, from_program in (("later", False), ("later", True), ("ask_user", False), ("ask_user", True)):
        assert await run_checked(ptc, name, from_program=from_program) == "TOOL_DISABLED", (name, from_program)
    assert await run_checked(ptc, "later", from_program=True, loaded=["later"]) == "TOOL_DISABLED"


async def test_with_the_ptc_entry_disabled_the_agent_has_the_plain_planes():
    """Disabled by the policy, the PTC entry was left out of the request, but the planes stayed
    PTC's: the deferred tools were searchable and loadable, and a native call of one was refused
    TOOL_NOT_NATIVE, so nothing could call them. Now the agent is as without PTC."""
    cat = catalog(TOOLS, {"tools": {"deferred": ["later", "other"], "policy": {PTC: {"enabled": False}}},
                          "localPtc": {"nativeCapabilities": ["read"]}})
    assert cat.native_names(is_main_agent=True, allowed=None) is None
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert names(offered) == ["read", "edit", "ask_user", "boss", CAPABILITY_SEARCH]
    assert names(searchable) == ["later", "other"]
    offered, _ = cat.planes(is_main_agent=True, allowed=None, loaded=["later"])
    assert "later" in names(offered) and "edit" in names(offered)
    check = cat.check(loaded=["later"], allowed=None, session=None)
    ctx = ToolContext("p1", "ses_1", "main", None, "call_1", True)
    assert (await cat.registry.run("later", "{}", ctx, check=check)).error_code is None
    assert (await cat.registry.run("edit", "{}", ctx, check=check)).error_code is None
    assert (await cat.registry.run(PTC, "{}", ctx, check=check)).error_code == "TOOL_DISABLED"
    # the session's policy decides either way
    on = {PTC: {"enabled": True}}
    assert cat.native_names(is_main_agent=True, allowed=None, session=on) == {"read", PTC}
    assert names(cat.planes(is_main_agent=True, allowed=None, loaded=["later"], session=on)[0]) == ["read", PTC]
    check = cat.check(loaded=["later"], allowed=None, session=on)
    assert (await cat.registry.run("later", "{}", ctx, check=check)).error_code == "TOOL_NOT_NATIVE"
    enabled = catalog(TOOLS, {"tools": {"deferred": ["later"]}, "localPtc": {}})
    assert enabled.native_names(is_main_agent=False, allowed=None, session={"prog*": {"enabled": False}}) is None


@pytest.mark.parametrize(("local_ptc", "words"), [
    ({"nativeCapabilities": [""]}, ["localPtc.nativeCapabilities"]),
    ({"nativeCapabilities": ["x" * 257]}, ["localPtc.nativeCapabilities", "1 to 256"]),
    ({"nativeCapabilities": ["t"] * 1001}, ["localPtc.nativeCapabilities", "more than 1000"]),
    ({"nativeCapability": []}, ["nativeCapability"]),
    ({"enabled": "yes"}, ["localPtc.enabled"]),
])
def test_a_bad_localptc_section_is_refused_naming_the_key(local_ptc: dict[str, Any], words: list[str]):
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps({"localPtc": local_ptc}), "lens.jsonc")
    for w in words:
        assert w in info.value.message, info.value.message


def test_localptc_limits_at_their_edges_are_accepted():
    cfg = parse_config(json.dumps({"localPtc": {"nativeCapabilities": ["x" * 256] + ["t"] * 999}}))
    assert cfg.local_ptc is not None and len(cfg.local_ptc.native_capabilities or []) == 1000


@pytest.mark.parametrize(("config", "settings", "agent", "can"), [
    ({}, {}, "main", True),
    ({}, {}, "sub_read", False),  # (a subagent whose tools leave skill out)
    ({}, {}, "sub_skill", True),
    ({}, {"toolPolicy": {"skill": {"enabled": False}}}, "main", False),
    ({"tools": {"policy": {"skill": {"enabled": False}}}}, {}, "main", False),
    ({"tools": {"deferred": ["skill"]}}, {}, "main", True),  # (searchable: loaded by capability_search first)
    ({"localPtc": {}}, {}, "main", True),  # (no program can call it: native)
    ({"localPtc": {"nativeCapabilities": []}}, {}, "main", False),
    ({"localPtc": {"nativeCapabilities": ["skill"]}}, {}, "sub_skill", True),
    # Deferred and left out of a fixed native list: searchable, yet once loaded a direct call is
    # TOOL_NOT_NATIVE and a program's PTC_TOOL_NOT_ALLOWED: it cannot be called from anywhere.
    ({"tools": {"deferred": ["skill"]}, "localPtc": {"nativeCapabilities": []}}, {}, "main", False),
    ({"tools": {"deferred": ["skill"]}, "localPtc": {"nativeCapabilities": ["read"]}}, {}, "main", False),
    ({"tools": {"deferred": ["skill"]}, "localPtc": {"nativeCapabilities": ["capability_search"]}}, {}, "main",
     False),
    ({"tools": {"deferred": ["skill"]}, "localPtc": {"nativeCapabilities": ["skill"]}}, {}, "main", True),
    ({"tools": {"deferred": ["skill"]}, "localPtc": {}}, {}, "main", True),  # (stays native: see native_names)
])
def test_an_agent_can_load_a_skill_where_skill_is_offered_or_searchable_to_it(config, settings, agent, can):
    # Which form of the system prompt an agent is sent (with the skills listing or without it).
    cat = catalog([*TOOLS, spec("skill")], config)
    state = SessionState("ses_1", project_id="p", settings=settings, agents={
        "main": AgentState("main"), "sub_read": AgentState("sub_read", role="subagent", tools=["read"]),
        "sub_skill": AgentState("sub_skill", role="subagent", tools=["read", "skill"])})
    assert can_load_skills(cat, state, agent) is can


async def test_a_programs_call_by_a_further_alias_reaches_that_tool_through_the_catalogs_one_names_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """F-MOD-3: ``some.tool``'s digest alias is another tool's own name, so it is offered under a
    further alias. A program calls each tool by the name the model is offered and reaches it;
    the names were mapped back through a table made anew for every call (a digest per tool of
    the catalog, on each ``call_tool`` of a name that is no tool's id). The catalog's table is
    made once."""
    builds: list[int] = []
    name_table = runtime.providers.names.name_table

    def counted(ids: Any) -> runtime.providers.names.NameTable:  # (the real table, counted wherever it is made)
        builds.append(1)
        return name_table(ids)
    for module in (runtime.providers.names, tools.catalog_names):
        monkeypatch.setattr(module, "name_table", counted)

    async def own_name(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.text(ctx.call_id)

    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    cat = catalog([ToolSpec(dotted, "", {"type": "object"}, own_name),
                   ToolSpec(alias, "", {"type": "object"}, own_name), spec("read")], {"localPtc": {}})
    further = cat.names.further_aliases()[dotted]
    assert further not in (dotted, alias) and len(builds) == 1
    ran: list[str] = []

    async def call_tool(sub_id: str, name: str, args: dict[str, Any], cut: Any = None) -> ToolResult:
        ran.append(name)
        check = cat.check(loaded=(), allowed=None, session=None, from_program=True)
        sub = ToolContext("p1", "ses_1", "main", None, sub_id, True)
        return await cat.registry.run(name, json.dumps(args), sub, check=check)

    ctx = ToolContext("p1", "ses_1", "main", None, "call_1", True, call_tool=call_tool)
    program = "\n".join(f"print(call_tool({n!r}, {{}}))" for n in (further, alias, further, "read", further))
    result = await cat.registry.run(PTC, json.dumps({"code": program}), ctx)
    assert result.error_code is None, result.content
    assert ran == [dotted, alias, dotted, "read", dotted]
    assert [c["name"] for c in result.structured_content["calls"]] == ran
    assert result.content[0].text == "call_1.1\ncall_1.2\ncall_1.3\nran\ncall_1.5\n"
    assert len(builds) == 1  # (five calls, three of them by a further alias: no table made again)
