"""The tool catalog and its planes (tools/catalog.py, F-TOOL-1..3), through the real registry:
deferral rules, what a request offers an agent, ``capability_search`` ranking and loading, and
the execution policy (default < config < session) with each field's source."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from events import types as t
from runtime.config import ConfigError, parse_config
from runtime.providers.names import alias_for, name_table
from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec
from tools.capability_search import MAX_LIMIT, MAX_QUERY_CHARS, capability_search_tool
from tools.catalog import CAPABILITY_SEARCH, ToolCatalog, describe
from tools.catalog_config import ToolsConfig
from tools.catalog_names import CatalogNames
from tools.catalog_policy import PolicyError, parse_policy_map
from tools.catalog_ranking import rank, score
from tools.registry import builtin_tools


async def _ok(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.text("ran " + json.dumps(args, sort_keys=True))


def spec(name: str, description: str = "", **kw: Any) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object"}, _ok, **kw)


def catalog(specs: list[ToolSpec], config: dict[str, Any] | None = None) -> ToolCatalog:
    reg = ToolRegistry(specs)
    cat = ToolCatalog(reg, parse_config(json.dumps({"tools": config or {}})).tools)
    reg.add(capability_search_tool(cat))
    return cat


def ctx(*, main: bool = True, tools: list[str] | None = None, loaded: list[str] | None = None) -> ToolContext:
    return ToolContext("p1", "ses_1", "main" if main else "sub_1", "task_1", "call_9", main,
                       agent_tools=tools, loaded_capabilities=lambda: list(loaded or []))


def names(specs: list[ToolSpec]) -> list[str]:
    return [s.name for s in specs]


MCP = [spec(f"mcp__s__tool{i}", f"tool number {i}", source="mcp") for i in range(3)]


# --------------------------------------------------------------------------- catalog plane


def test_every_tool_has_a_catalog_entry_with_a_stable_schema_digest():
    cat = catalog([spec("a", "x"), spec("old", "y", lifecycle="compat")])
    entries = {e["name"]: e for e in (describe(s) for s in cat.registry.all())}
    assert entries["a"]["lifecycle"] == "current" and entries["old"]["lifecycle"] == "compat"
    assert entries["a"]["source"] == "native" and entries["a"]["schemaDigest"].startswith("sha256:")
    assert describe(spec("a", "x"))["schemaDigest"] == entries["a"]["schemaDigest"]
    assert describe(spec("a", "x changed"))["schemaDigest"] != entries["a"]["schemaDigest"]


# --------------------------------------------------------------------------- context plane


def test_built_in_and_few_mcp_tools_are_eager_by_default():
    cat = catalog([*builtin_tools().all(), *MCP])
    assert cat.deferred_names() == set()
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert searchable == [] and CAPABILITY_SEARCH not in names(offered)  # nothing to search: not offered


def test_mcp_tools_are_deferred_above_the_threshold_and_eager_patterns_win():
    assert catalog(MCP, {"mcpDeferAbove": 3}).deferred_names() == set()
    assert catalog(MCP, {"mcpDeferAbove": 2}).deferred_names() == {s.name for s in MCP}
    assert catalog(MCP, {"mcpDeferAbove": 0, "eager": ["mcp__s__tool1"]}).deferred_names() == {"mcp__s__tool0", "mcp__s__tool2"}
    assert catalog([spec("a"), *MCP], {"deferred": ["mcp__*", "a"]}).deferred_names() == {"a", *(s.name for s in MCP)}
    assert catalog([spec("a", deferred=True)]).deferred_names() == {"a"}  # a spec's own default
    assert CAPABILITY_SEARCH not in catalog([spec("a")], {"deferred": ["*"]}).deferred_names()


def test_a_request_offers_eager_and_loaded_tools_and_the_search_while_something_is_searchable():
    cat = catalog([spec("a"), spec("b"), spec("c", main_only=True)], {"deferred": ["b", "c"]})
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert names(offered) == ["a", CAPABILITY_SEARCH] and names(searchable) == ["b", "c"]
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=["b"])
    assert names(offered) == ["a", "b", CAPABILITY_SEARCH] and names(searchable) == ["c"]
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=["b", "c"])
    assert names(offered) == ["a", "b", "c"] and searchable == []
    # a subagent never sees a main-only tool; one whose tools list names a deferred tool has it
    offered, searchable = cat.planes(is_main_agent=False, allowed=None, loaded=())
    assert names(offered) == ["a", CAPABILITY_SEARCH] and names(searchable) == ["b"]
    offered, searchable = cat.planes(is_main_agent=False, allowed=["a", "b"], loaded=())
    assert names(offered) == ["a", "b"] and searchable == []


# --------------------------------------------------------------------------- ranking


def test_ranking_is_by_name_words_then_prefixes_then_description_ties_by_name():
    issues = spec("mcp__gh__list_issues", "List the issues of a repository")
    search = spec("mcp__gh__search_code", "Search code; finds issues mentioned in comments")
    other = spec("mcp__db__query", "Run a SQL query")
    assert score("issues", issues) == 3 and score("iss", issues) == 2 and score("repository", issues) == 1
    assert score("issues", search) == 1 and score("xyz", issues) == 0
    assert score("mcp__gh__list_issues", issues) == 11 + 3 * 4  # the exact name, and each of its words
    assert score("MCP__GH__List_Issues", issues) == 10 + 3 * 4  # the name in other case
    assert score("issues issues ISSUES", issues) == 3  # distinct words count once, case-folded
    assert [s.name for _, s in rank("issues", [other, search, issues])] == ["mcp__gh__list_issues", "mcp__gh__search_code"]
    a, b = spec("b_tool", "time"), spec("a_tool", "time")
    assert [s.name for _, s in rank("time", [a, b])] == ["a_tool", "b_tool"]
    assert rank("nothing matches", [a, b]) == []



def test_a_new_file_ranks_edit_file_first_and_an_update_patch_file():
    # patch_file's description once said "new file" and "create" (to send a new file elsewhere),
    # which ranked it level with edit_file, the call that makes one, for "create a new file".
    from tools.workspace_tools import workspace_tools

    files = [s for s in workspace_tools(None, None) if s.name in ("edit_file", "patch_file")]  # type: ignore[arg-type]
    for query in ("create a new file", "new file", "create file"):
        (top, first), (nxt, _) = rank(query, files)
        assert first.name == "edit_file" and top > nxt, query
    (top, first), (nxt, _) = rank("apply a patch to a file", files)
    assert first.name == "patch_file" and top > nxt
    # Only ASCII letter/digit runs were words: a Chinese, Russian or accented query matched
    # nothing (or only through a stray ASCII run such as "caf" of "café").
    weather = spec("mcp__cn__天气查询", "查询城市的天气预报")
    pogoda = spec("mcp__ru__погода", "Прогноз погоды для города")
    menu = spec("mcp__fr__carte", "La carte du Café : plats, crème brûlée et prix")
    street = spec("street_index", "Jede Straße der Stadt")
    specs = [weather, pogoda, menu, street]
    assert score("天气", weather) == 3 and score("天气预报", weather) == 3 + 1 + 1  # (天气 in the name; 气预, 预报 in the text)
    assert score("城市", weather) == 1 and score("城市天气", weather) == 1 + 3
    assert score("ПОГОДА", pogoda) == 3 and score("прогноз", pogoda) == 1 and score("погод", pogoda) == 2
    assert score("café", menu) == 1 and score("cafe", menu) == 1 and score("CRÈME BRULEE", menu) == 2
    assert score("straße", street) == 1 and score("STRASSE", street) == 1
    assert score("ｃａｆｅ", menu) == 1  # (full-width letters)
    korean = spec("mcp__kr__weather", "도시의 날씨를 확인합니다")  # (Hangul: bigrams too, so 날씨 is in 날씨를)
    assert score("날씨", korean) == 1 and score("날씨 확인", korean) == 2
    assert score("ガイド", spec("g", "ｶﾞｲﾄﾞを読む")) == 2 and score("カイト", spec("g", "ｶﾞｲﾄﾞを読む")) == 0
    assert score("mcp__cn__天气查询", weather) == 11 + 3 * 5
    assert [(sc, s.name) for sc, s in rank("天气 погода café", specs)] == [
        (3, "mcp__cn__天气查询"), (3, "mcp__ru__погода"), (1, "mcp__fr__carte")]
    assert rank("天气", [pogoda, menu]) == []
    assert [s.name for _, s in rank("天气", [spec("b", "天气"), spec("a", "天气")])] == ["a", "b"]  # (ties by name)


def test_one_han_kana_or_hangul_character_finds_the_text_holding_it():
    # Such runs were read as bigrams only: a query of one character ("天") matched nothing but a
    # text holding that character alone.
    weather = spec("mcp__cn__天气查询", "查询城市的天气预报")
    rain = spec("rain", "明天下雨吗")
    sky = spec("sky", "天")
    guide = spec("mcp__jp__ガイド", "ｶﾞｲﾄﾞを読む")
    korean = spec("mcp__kr__weather", "도시의 날씨를 확인합니다")
    assert score("天", weather) == 2 and score("天", rain) == 1 and score("天", sky) == 1  # (name, then text)
    assert score("询", weather) == 2 and score("市", weather) == 1 and score("雪", weather) == 0
    assert score("ド", guide) == 2 and score("読", guide) == 1 and score("ト", guide) == 0  # (voicing kept)
    assert score("날", korean) == 1 and score("씨 weather", korean) == 1 + 3
    assert score("天气", rain) == 0 and score("天气", weather) == 3  # (two or more: bigrams, as before)
    assert [(sc, s.name) for sc, s in rank("天", [sky, rain, weather, korean])] == [
        (2, "mcp__cn__天气查询"), (1, "rain"), (1, "sky")]  # (ties by name)
    assert rank("天", [sky, rain, weather]) == rank("天", [weather, rain, sky])

def test_thai_lao_khmer_and_burmese_words_inside_a_run_are_found():
    # Each run of these scripts (written without spaces) was one word: a word inside it matched
    # nothing. They are read as Chinese is now: bigrams of letters (vowel signs and tone marks
    # folded away, as the history index drops them), one letter finding the text holding it.
    thai = spec("th_weather", "ค้นหาพยากรณ์อากาศของเมือง")  # (each: "find the weather forecast of a city")
    lao = spec("lo_weather", "ຊອກຫາພະຍາກອນອາກາດຂອງເມືອງ")
    khmer = spec("km_weather", "ស្វែងរកព្យាករណ៍អាកាសធាតុនៃទីក្រុង")
    burmese = spec("my_weather", "မြို့၏မိုးလေဝသခန့်မှန်းချက်ကိုရှာပါ")
    specs = [thai, lao, khmer, burmese]
    for query, found in [("อากาศ", thai), ("พยากรณ์อากาศ", thai), ("ອາກາດ", lao), ("អាកាសធាតុ", khmer),
                         ("မိုးလေဝသ", burmese)]:
        assert [s.name for _, s in rank(query, specs)] == [found.name], query
    assert score("อากาศ", thai) == 4  # (its bigrams อา, าก, กา, าศ: each in the text)
    assert score("ศาอก", thai) == 0  # (its letters in another order)
    assert score("ศ", thai) == 1 and score("ศ", lao) == 0  # one letter
    assert score("ค้น", thai) == score("คน", thai) == 1  # (the tone mark is folded away)
    assert score("อากาศ", spec("mcp__th__อากาศวันนี้", "x")) == 3 * 4  # (in the name)


# --------------------------------------------------------------------------- capability_search


async def search(cat: ToolCatalog, args: Any, c: ToolContext | None = None) -> ToolResult:
    return await cat.registry.run(CAPABILITY_SEARCH, json.dumps(args), c or ctx())


async def test_capability_search_loads_the_best_matches_with_a_capability_loaded_event():
    cat = catalog([spec("a"), *MCP], {"deferred": ["mcp__*"]})
    res = await search(cat, {"query": "tool number", "limit": 2})
    assert not res.is_error
    assert [m["name"] for m in res.structured_content["matches"]] == ["mcp__s__tool0", "mcp__s__tool1"]
    assert res.structured_content["loaded"] == ["mcp__s__tool0", "mcp__s__tool1"]
    assert res.structured_content["searchable"] == 3
    assert res.events == [t.CapabilityLoaded(capability_ids=["mcp__s__tool0", "mcp__s__tool1"], call_id="call_9")]
    assert "callable from your next request" in res.content[0].text
    # already loaded: listed as loaded, not loaded again
    res = await search(cat, {"query": "tool number"}, ctx(loaded=["mcp__s__tool0"]))
    assert res.structured_content["loaded"] == ["mcp__s__tool1", "mcp__s__tool2"]
    assert [m["loaded"] for m in res.structured_content["matches"]] == [True, True, True]
    # load: false ranks only; an eager tool is never a match; no match loads nothing
    res = await search(cat, {"query": "tool number", "load": False})
    assert res.events == [] and res.structured_content["loaded"] == []
    res = await search(cat, {"query": "a"})
    assert res.structured_content["matches"] == [] and res.events == [] and "No deferred capability" in res.content[0].text


async def test_capability_search_quotes_the_query_as_json_as_its_refusals_do():
    # "No deferred capability matches 'x'" was Python's repr: a query holding a quote came back
    # as "…matches 'the \'zap\' tool'" or in double quotes, neither of them JSON.
    cat = catalog([spec("mcp__w__get_weather", "Get the weather", source="mcp")], {"deferred": ["mcp__*"]})
    res = await search(cat, {"query": 'the "zap" tool\'s café'})
    assert res.content[0].text == 'No deferred capability matches "the \\"zap\\" tool\'s café" (1 searchable).'
    res = await search(cat, {"query": "'?!'"})
    assert res.error_code == "INVALID_ARGUMENT"
    assert res.content[0].text.startswith('INVALID_ARGUMENT: query "\'?!\'" holds no word to search for'), res.content


async def test_capability_search_ranks_only_what_is_assigned_to_the_agent():
    cat = catalog([spec("mcp__s__main_thing", "thing", main_only=True, source="mcp"),
                   spec("mcp__s__thing", "thing", source="mcp")], {"deferred": ["mcp__*"]})
    res = await search(cat, {"query": "thing"}, ctx(main=False))
    assert res.structured_content["loaded"] == ["mcp__s__thing"]
    res = await search(cat, {"query": "thing"}, ctx(main=False, tools=[CAPABILITY_SEARCH, "mcp__s__main_thing"]))
    assert res.structured_content["matches"] == []


async def test_a_query_of_common_words_or_punctuation_loads_nothing():
    # Every description holds "the", "for", "a": a query of such words ranked and loaded tools
    # that had nothing to do with it, and "get the weather" loaded the issue tracker too. A query
    # with no letter or digit at all found nothing, said only as "no match".
    weather = spec("mcp__w__get_weather", "Get the weather forecast for a city", source="mcp")
    issue = spec("mcp__gh__create_issue", "Create an issue in the tracker", source="mcp")
    cat = catalog([weather, issue], {"deferred": ["mcp__*"]})
    assert score("the", issue) == 0 and score("for a", weather) == 0
    assert score("get", weather) == 3  # (a common word is still a word of a name)
    for query in ("the", "for a", "What is the", "how to use it"):
        res = await search(cat, {"query": query})
        assert res.structured_content["matches"] == [] and res.events == [], (query, res.structured_content)
        assert "Common words" in res.content[0].text
    res = await search(cat, {"query": "get the weather"})
    assert [m["name"] for m in res.structured_content["matches"]] == ["mcp__w__get_weather"]
    assert res.structured_content["loaded"] == ["mcp__w__get_weather"]
    for query in ("?!", "...", "___", "— …", "🙂"):
        res = await search(cat, {"query": query})
        assert res.error_code == "INVALID_ARGUMENT" and "no word to search for" in res.content[0].text, query
        assert res.events == []


async def test_the_exact_name_of_one_of_two_tools_differing_only_by_case_loads_that_one():
    # The name's bonus was case-folded: both scored alike and the tie went by name, so the query
    # "mcp__s__echo" with limit 1 loaded "mcp__s__Echo".
    cat = catalog([spec("mcp__s__Echo", "Echo upper", source="mcp"), spec("mcp__s__echo", "Echo lower", source="mcp")],
                  {"deferred": ["mcp__*"]})
    for name in ("mcp__s__echo", "mcp__s__Echo"):
        res = await search(cat, {"query": name, "limit": 1})
        assert res.structured_content["loaded"] == [name], (name, res.structured_content)
    res = await search(cat, {"query": "MCP__S__ECHO", "limit": 2})  # (neither exactly: both, by name)
    assert [m["name"] for m in res.structured_content["matches"]] == ["mcp__s__Echo", "mcp__s__echo"]


async def test_searching_again_loads_the_next_of_equally_matching_tools():
    # Seven tools of one server match "github" alike: the first search loaded five, and the same
    # search again listed the same five (loaded, first by name) and loaded nothing, for good.
    gh = [spec(f"mcp__github__t{i}", f"tool {i}", source="mcp") for i in range(7)]
    cat = catalog(gh, {"deferred": ["mcp__*"]})
    first = (await search(cat, {"query": "github"})).structured_content["loaded"]
    assert first == [f"mcp__github__t{i}" for i in range(5)]
    res = await search(cat, {"query": "github"}, ctx(loaded=first))
    assert res.structured_content["loaded"] == ["mcp__github__t5", "mcp__github__t6"]
    assert [m["name"] for m in res.structured_content["matches"]] == [
        "mcp__github__t5", "mcp__github__t6", "mcp__github__t0", "mcp__github__t1", "mcp__github__t2"]
    assert all(m["loaded"] for m in res.structured_content["matches"])
    # (a better match already loaded still comes first: no worse one is loaded in its place)
    res = await search(cat, {"query": "mcp__github__t0", "limit": 1}, ctx(loaded=first))
    assert [m["name"] for m in res.structured_content["matches"]] == ["mcp__github__t0"]
    assert res.structured_content["loaded"] == [] and res.events == []


@pytest.mark.parametrize(("args", "ok"), [
    ({"query": "x", "limit": 1}, True), ({"query": "x", "limit": MAX_LIMIT}, True),
    ({"query": "x", "limit": 0}, False), ({"query": "x", "limit": MAX_LIMIT + 1}, False),
    ({"query": "x", "limit": True}, False), ({"query": "x", "limit": 2.5}, False),
    # (a number with a zero fraction is an integer, at each limit and one past it too)
    ({"query": "x", "limit": 1.0}, True), ({"query": "x", "limit": float(MAX_LIMIT)}, True),
    ({"query": "x", "limit": 0.0}, False), ({"query": "x", "limit": MAX_LIMIT + 1.0}, False),
    ({"query": "x", "limit": 1e20}, False),
    ({"query": "q" * MAX_QUERY_CHARS}, True), ({"query": "q" * (MAX_QUERY_CHARS + 1)}, False),
    ({"query": "   "}, False), ({}, False), ({"query": 3}, False), ({"query": "x", "load": "yes"}, False),
    ({"query": "x", "other": 1}, False),
])
async def test_capability_search_argument_limits(args: dict[str, Any], ok: bool):
    res = await search(catalog(MCP, {"deferred": ["mcp__*"]}), args)
    assert res.is_error is (not ok), res.content
    if not ok:
        assert res.error_code == "INVALID_ARGUMENT"


# --------------------------------------------------------------------------- execution plane


def test_the_effective_policy_is_default_then_config_then_session_with_sources():
    cat = catalog([spec("run"), spec("mcp__s__x", source="mcp")], {"policy": {
        "mcp__*": {"approval": "warn", "enabled": False},
        "run": {"paramRestrictions": {"timeout_ms": {"max": 1000}}},
        "mcp__s__x": {"enabled": True}}})
    p = cat.profile("run")
    assert p["enabled"] == {"value": True, "source": "default"}
    assert p["approval"] == {"value": "none", "source": "default"}
    assert p["paramRestrictions"] == {"value": {"timeout_ms": {"max": 1000.0}}, "source": "config"}
    p = cat.profile("mcp__s__x")  # a pattern, then the exact name
    assert p["approval"] == {"value": "warn", "source": "config"} and p["enabled"] == {"value": True, "source": "config"}
    p = cat.profile("run", {"run": {"enabled": False, "workspaceAllowlist": ["src"]}})
    assert p["enabled"] == {"value": False, "source": "session"}
    assert p["workspaceAllowlist"] == {"value": ["src"], "source": "session"}
    assert p["paramRestrictions"]["source"] == "config"  # a field the session leaves unset stays as it was
    p = cat.profile("mcp__s__x", {"*": {"approval": "none"}})
    assert p["approval"] == {"value": "none", "source": "session"}


async def run_checked(cat: ToolCatalog, name: str, args: dict[str, Any], *, session: dict[str, Any] | None = None,
                      loaded: list[str] | None = None) -> ToolResult:
    check = cat.check(loaded=loaded or [], allowed=None, session=session)
    return await cat.registry.run(name, json.dumps(args), ctx(), check=check)


async def test_calls_outside_the_policy_are_refused_before_the_tool_runs():
    cat = catalog([spec("read"), spec("run"), spec("later")], {"deferred": ["later"], "policy": {
        "run": {"paramRestrictions": {"timeout_ms": {"min": 10, "max": 1000}, "shell": {"enum": ["sh", "bash"]}}},
        "read": {"workspaceAllowlist": ["src", "docs/public"]}}})

    async def code(name: str, args: dict[str, Any], **kw: Any) -> str | None:
        return (await run_checked(cat, name, args, **kw)).error_code

    assert await code("later", {}) == "TOOL_NOT_LOADED"
    assert await code("later", {}, loaded=["later"]) is None
    assert await code("run", {"timeout_ms": 1000}) is None and await code("run", {"timeout_ms": 10}) is None
    assert await code("run", {"timeout_ms": 1001}) == "PARAM_NOT_ALLOWED"
    assert await code("run", {"timeout_ms": 9.5}) == "PARAM_NOT_ALLOWED"
    assert await code("run", {"timeout_ms": True}) == "PARAM_NOT_ALLOWED"
    assert await code("run", {"timeout_ms": "5"}) == "PARAM_NOT_ALLOWED"
    assert await code("run", {}) is None  # (absent: the tool's own default)
    assert await code("run", {"shell": "bash"}) is None and await code("run", {"shell": "zsh"}) == "PARAM_NOT_ALLOWED"
    for ok in ["src", "src/a.py", "./src/x/../y", "docs/public/i.md"]:
        assert await code("read", {"path": ok}) is None, ok
    for bad in ["srcx/a.py", "docs/private", "/etc/passwd", "src/../../x", "..", "", "C:/x", "docs"]:
        assert await code("read", {"path": bad}) == "PATH_NOT_ALLOWED", bad
    assert await code("read", {"path": "README"}, session={"read": {"workspaceAllowlist": ["."]}}) is None
    assert await code("read", {"path": "src/a"}, session={"read": {"workspaceAllowlist": []}}) == "PATH_NOT_ALLOWED"
    assert await code("read", {"path": "src/a"}, session={"read": {"enabled": False}}) == "TOOL_DISABLED"
    cmd = catalog([ToolSpec("cmd", "", {"type": "object", "properties": {"cwd": {"type": "string"}}}, _ok)],
                  {"policy": {"cmd": {"workspaceAllowlist": ["build"]}}})
    assert (await run_checked(cmd, "cmd", {"cwd": "build/x"})).error_code is None
    assert (await run_checked(cmd, "cmd", {"command": "x"})).error_code == "PATH_NOT_ALLOWED"  # (no cwd: the root)
    assert (await run_checked(cmd, "cmd", {})).error_code is None  # (no command run: no directory to check)
    assert (await run_checked(cmd, "cmd", {"cwd": ""})).error_code == "PATH_NOT_ALLOWED"
    ran = await run_checked(cat, "run", {"timeout_ms": 5})
    assert ran.is_error and "at least 10" in ran.content[0].text


def test_approval_warn_gives_a_note_for_the_result():
    cat = catalog([spec("run")], {"policy": {"run": {"approval": "warn"}}})
    assert "policy warning" in (cat.warning("run", None) or "")
    assert cat.warning("run", {"run": {"approval": "none"}}) is None


@pytest.mark.parametrize(("tools", "words"), [
    ({"policy": {"run": {"aproval": "warn"}}}, ["aproval"]),
    ({"policy": {"run": {"approval": "ask"}}}, ["approval"]),
    ({"policy": {"run": {"workspaceAllowlist": ["../up"]}}}, ["tools.policy.run.workspaceAllowlist", "'../up'"]),
    ({"policy": {"run": {"workspaceAllowlist": ["/abs"]}}}, ["workspaceAllowlist"]),
    ({"policy": {"run": {"paramRestrictions": {"t": {"min": 5, "max": 1}}}}}, ["min is greater than max"]),
    ({"policy": {"run": {"paramRestrictions": {"t": {}}}}}, ["give min, max or enum"]),
    ({"policy": {"": {"enabled": False}}}, ["1 to 256"]),
    ({"deferred": [""]}, ["tools.deferred"]),
    ({"mcpDeferAbove": -1}, ["tools.mcpDeferAbove"]),
])
def test_a_bad_tools_config_is_refused_naming_the_key(tools: dict[str, Any], words: list[str]):
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps({"tools": tools}), "lens.jsonc")
    for w in words:
        assert w in info.value.message, info.value.message


def test_a_session_policy_map_is_checked_like_the_config():
    assert parse_policy_map({"run": {"enabled": False}}, "toolPolicy")["run"].enabled is False
    with pytest.raises(PolicyError, match="toolPolicy"):
        parse_policy_map({"run": {"enabled": "no"}}, "toolPolicy")
    assert ToolsConfig().mcp_defer_above == 16


# --------------------------------------------------------------------------- the fold


def test_capability_loaded_and_tool_policy_fold_per_agent_and_survive_a_snapshot():
    from events.reader import StoredEvent
    from projections.session_state import SessionState, apply, snapshot_bytes, state_from_snapshot

    def ev(seq: int, event: Any, agent: str = "main") -> StoredEvent:
        return StoredEvent(seq, 0, "p1", "ses_1", seq, agent, None, "", None, event)  # (apply reads the event, not kind)

    s = SessionState("ses_1")
    for i, e in enumerate([
        ev(1, t.CapabilityLoaded(capability_ids=["a", "b", "a"], call_id="c1")),
        ev(2, t.CapabilityLoaded(capability_ids=["b", "c"])),
        ev(3, t.CapabilityLoaded(capability_ids=["z"]), agent="sub_1"),
        ev(4, t.SessionConfigured(settings={"toolPolicy": {"run": {"enabled": False}, "x": {"approval": "warn"}}})),
        ev(5, t.SessionConfigured(settings={"toolPolicy": {"x": None, "y": {"enabled": True}}})),
    ]):
        apply(s, e)
    assert s.agents["main"].capabilities == ["a", "b", "c"] and s.agents["sub_1"].capabilities == ["z"]
    assert s.settings["toolPolicy"] == {"run": {"enabled": False}, "y": {"enabled": True}}
    again = state_from_snapshot(snapshot_bytes(s))
    assert again.agents["main"].capabilities == ["a", "b", "c"] and again.settings == s.settings


async def test_disclose_assigned_lists_deferred_tools_from_the_first_request_but_calls_still_need_a_load():
    cat = catalog([spec("a"), spec("b"), spec("c")], {"deferred": ["b"], "disclose": "assigned"})
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert names(offered) == ["a", "b", "c", CAPABILITY_SEARCH] and names(searchable) == ["b"]
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=["b"])
    assert names(offered) == ["a", "b", "c", CAPABILITY_SEARCH] and searchable == []  # (the same list)
    assert (await run_checked(cat, "b", {})).error_code == "TOOL_NOT_LOADED"
    assert (await run_checked(cat, "b", {}, loaded=["b"])).error_code is None


async def test_a_tool_the_policy_disables_is_neither_offered_nor_searchable_but_a_call_is_still_refused():
    # A disabled tool was offered to the model (and ranked and loaded by capability_search), which
    # then called it only to be refused TOOL_DISABLED.
    cat = catalog([spec("a"), spec("b"), spec("c"), spec("d"), spec("e")],
                  {"deferred": ["c", "d"], "policy": {"b": {"enabled": False}, "d": {"enabled": False},
                                                      "e": {"approval": "warn", "workspaceAllowlist": ["src"]}}})
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=())
    assert names(offered) == ["a", "e", CAPABILITY_SEARCH] and names(searchable) == ["c"]  # (e: restricted, not off)
    session = {"c": {"enabled": False}, "b": {"enabled": True}}  # (the session's override wins, either way)
    offered, searchable = cat.planes(is_main_agent=True, allowed=None, loaded=(), session=session)
    assert names(offered) == ["a", "b", "e"] and searchable == []  # (nothing left to search: no search tool)
    offered, _ = cat.planes(is_main_agent=True, allowed=None, loaded=["d"])  # (loaded, then disabled)
    assert "d" not in names(offered)
    assert (await run_checked(cat, "b", {})).error_code == "TOOL_DISABLED"  # (named anyway: refused)
    res = await search(cat, {"query": "c d"}, dataclasses.replace(ctx(loaded=["d"]), tool_policy=session))
    assert res.structured_content["matches"] == [] and res.events == []
    res = await search(cat, {"query": "c d"}, ctx(loaded=["d"]))
    assert [m["name"] for m in res.structured_content["matches"]] == ["c"]
    cat = catalog([spec("a"), spec("b")], {"disclose": "assigned", "deferred": ["b"], "policy": {"*": {"enabled": False},
                                                                                            "a": {"enabled": True}}})
    assert names(cat.planes(is_main_agent=True, allowed=None, loaded=())[0]) == ["a"]  # (capability_search: off too)


async def test_a_query_naming_a_tool_a_subagent_cannot_load_says_why_for_each_reason():
    # (the daemon test covers the disabled and the eager tool; these are a subagent's reasons)
    tools = [spec("mcp__s__echo", "Echo", source="mcp"), spec("mcp__s__add", "Add", source="mcp"),
             spec("mcp__s__secret", "Main only", source="mcp", main_only=True)]
    cat = catalog(tools, {"deferred": ["mcp__*"]})
    cases = {("mcp__s__secret", None): "mcp__s__secret is not assigned to you",
             ("mcp__s__add", (CAPABILITY_SEARCH, "mcp__s__echo")): "mcp__s__add is not assigned to you"}
    for (query, given), why in cases.items():
        res = await search(cat, {"query": query}, ctx(main=False, tools=list(given) if given else None))
        assert res.content[0].text == f"No deferred capability matches {json.dumps(query)}: {why}. Nothing was loaded.", query
        assert res.structured_content["matches"] == [] and res.events == []
    # one its list gave it is searched as words (nothing else is assigned here), the answer saying so first
    res = await search(cat, {"query": "mcp__s__echo"}, ctx(main=False, tools=[CAPABILITY_SEARCH, "mcp__s__echo"]))
    assert res.content[0].text.startswith("mcp__s__echo is in your tool list already. No deferred capability matches")
    assert res.structured_content["matches"] == [] and res.events == []
    # the main agent is given the main-only tool, alone
    res = await search(cat, {"query": "mcp__s__secret"})
    assert res.structured_content["loaded"] == ["mcp__s__secret"]


async def test_a_query_naming_a_tool_the_agent_has_already_searches_the_deferred_tools_as_words():
    # "job" (a native tool's name) answered "job is not deferred ... Nothing was loaded." and
    # hid mcp__ci__job_status, which the same word found before
    tools = [spec("job", "Run a command in the background"), spec("read_file", "Read a file"),
             spec("mcp__ci__job_status", "A CI job's status", source="mcp"),
             spec("mcp__fs__read_file", "Read a file of the remote disk", source="mcp"),
             spec("mcp__ci__retry", "Retry a pipeline", source="mcp")]
    cat = catalog(tools, {"deferred": ["mcp__*"]})
    for query, found in (("job", ["mcp__ci__job_status"]), ("JOB", ["mcp__ci__job_status"]),
                         ("read_file", ["mcp__fs__read_file"])):
        res = await search(cat, {"query": query, "load": False})
        got = [m["name"] for m in res.structured_content["matches"]]
        assert got[:1] == found, (query, got)
        name = query.lower()
        assert res.content[0].text.startswith(f"{name} is in your tool list already.\n- {found[0]} "), res.content[0].text
    # loaded as any match is
    res = await search(cat, {"query": "job", "limit": 1})
    assert res.structured_content["loaded"] == ["mcp__ci__job_status"] and len(res.events) == 1


async def test_an_mcp_tools_description_cut_in_the_search_result_shows_no_piece_of_a_key():
    # A description is quoted cut to 300 characters: the keys are replaced whole first (the store's
    # scrub of whole keys finds no piece a cut made first leaves).
    from events.secrets import Secrets

    key = "sk-proj-Q7mZ4kT1vB8nR3wY6pJ0dF5hGcanaryMcp"
    cat = catalog([spec("mcp__s__keyed", "keyed tool " + "k" * 270 + key, source="mcp")], {"deferred": ["mcp__*"]})
    keyed = dataclasses.replace(ctx(), secrets=Secrets({key: "LENS_TEST_KEY"}))
    res = await search(cat, {"query": "keyed tool"}, keyed)
    text = res.content[0].text
    assert "keyed tool kkk" in text and not [key[i:i + 8] for i in range(len(key) - 7) if key[i:i + 8] in text], text


async def test_what_reaches_the_matches_past_the_limit_is_said_only_when_it_does():
    # "The same search again loads the next ones" looped for good when the one past the limit
    # scored lower than the ones loaded: they stay first. Only a tie is reached again; else the
    # answer names the limit that reaches them (at most MAX_LIMIT) or narrower words.
    def tail(res: ToolResult) -> str:
        return res.content[0].text.rsplit("\n", 1)[-1]

    high, low = spec("mcp__s__alpha_beta", "first", source="mcp"), spec("mcp__s__alpha", "beta", source="mcp")
    cat = catalog([high, low], {"deferred": ["mcp__*"]})
    assert (score("alpha beta", high), score("alpha beta", low)) == (6, 4)
    for loaded in ([], ["mcp__s__alpha_beta"]):  # (the first search, then the same again: the same words)
        res = await search(cat, {"query": "alpha beta", "limit": 1}, ctx(loaded=loaded))
        assert res.structured_content["loaded"] == ([] if loaded else ["mcp__s__alpha_beta"])
        assert res.structured_content["more"] == 1
        assert tail(res).endswith(" 1 more match past the limit of 1, not loaded, scoring lower than the ones "
                                  "shown (the same search again shows the same): a limit of 2 loads it."), tail(res)
    res = await search(cat, {"query": "alpha beta", "limit": 1, "load": False})
    assert tail(res).endswith(" 1 more match past the limit of 1; a limit of 2 shows it."), tail(res)

    # 19 tools score above three: MAX_LIMIT reaches one of the three, narrower words the rest
    tools = [spec(f"mcp__s__alpha_beta{i:02}", "x", source="mcp") for i in range(19)]
    tools += [spec(f"mcp__s__alpha{i}", "beta", source="mcp") for i in range(3)]
    cat = catalog(tools, {"deferred": ["mcp__*"]})
    top = [f"mcp__s__alpha_beta{i:02}" for i in range(19)]
    assert MAX_LIMIT == 20
    res = await search(cat, {"query": "alpha beta", "limit": 19})
    assert res.structured_content["loaded"] == top and res.structured_content["more"] == 3
    assert tail(res).endswith(" 3 more match past the limit of 19, not loaded, scoring lower than the ones shown "
                              "(the same search again shows the same): a limit of 20 loads 1 of them, narrower "
                              "words the rest."), tail(res)
    res = await search(cat, {"query": "alpha beta", "limit": 19, "load": False})
    assert tail(res).endswith(" 3 more match past the limit of 19; a limit of 20 shows 1 of them, narrower words "
                              "the rest."), tail(res)
    res = await search(cat, {"query": "alpha beta", "limit": 19, "load": False}, ctx(loaded=top[:18]))
    assert tail(res).endswith(" 3 more match past the limit of 19; a limit of 20 shows 1 of them, narrower words "
                              "the rest."), tail(res)  # (the one of the 19 not loaded is sorted first, shown)
    res = await search(cat, {"query": "alpha beta", "limit": 20}, ctx(loaded=top))  # (a tie at the lowest score)
    assert res.structured_content["loaded"] == ["mcp__s__alpha0"] and res.structured_content["more"] == 2
    assert tail(res).endswith(" 2 more match past the limit of 20, not loaded: the same search again loads the "
                              "next one."), tail(res)

    # 20 tools score above two: at MAX_LIMIT only narrower words reach the two
    cat = catalog([*tools[:19], spec("mcp__s__alpha_beta19", "x", source="mcp"), *tools[19:21]],
                  {"deferred": ["mcp__*"]})
    res = await search(cat, {"query": "alpha beta", "limit": 20, "load": False})
    assert tail(res).endswith(" 2 more match past the limit of 20; narrower words show them."), tail(res)
    for loaded in ([], [*top, "mcp__s__alpha_beta19"]):
        res = await search(cat, {"query": "alpha beta", "limit": 20}, ctx(loaded=loaded))
        assert tail(res).endswith(" 2 more match past the limit of 20, not loaded, scoring lower than the ones shown "
                                  "(the same search again shows the same): narrower words load them."), tail(res)

    # at a tie the same search again does load them: all of them, or the next ones that fit
    tied = [spec(f"mcp__s__alpha_beta{i:02}", "x", source="mcp") for i in range(22)]
    cat = catalog(tied, {"deferred": ["mcp__*"]})
    res = await search(cat, {"query": "alpha beta", "limit": 20})
    assert res.structured_content["more"] == 2
    assert tail(res).endswith(" 2 more match past the limit of 20, not loaded: the same search again loads them."), tail(res)
    res = await search(cat, {"query": "alpha beta", "limit": 1})
    assert tail(res).endswith(" 21 more match past the limit of 1, not loaded: the same search again loads the "
                              "next one."), tail(res)
    res = await search(cat, {"query": "alpha beta", "limit": 19, "load": False})
    assert tail(res).endswith(" 3 more match past the limit of 19; a limit of 20 shows 1 of them, narrower words "
                              "the rest."), tail(res)
    res = await search(cat, {"query": "alpha beta", "limit": 19, "load": False}, ctx(loaded=[t.name for t in tied[20:]]))
    assert tail(res).endswith(" 1 more match past the limit of 19; a limit of 20 shows it."), tail(res)


def test_the_names_table_is_made_once_and_again_when_the_tools_change():
    # F-MOD-3: the table of offered names (a digest per id: tens of ms for ten thousand MCP tools)
    # was made again on every request, inventory and search; it is made again only when the
    # catalog's ids change, and then it follows them.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    cat = catalog([spec(dotted), spec("read_file")])
    first = cat.names.offered_names()
    assert first[dotted] == alias and cat.names.further_aliases() == {}
    assert cat.names.offered_names() is first  # (nothing changed: the same table)
    cat.registry.add(spec(alias))
    further = name_table([dotted, alias]).further
    assert cat.names.further_aliases() == further and cat.names.offered_names()[dotted] == further[dotted] != alias
    assert cat.names.offered_names()[alias] == alias
    cat.registry.remove(alias)
    assert cat.names.offered_names()[dotted] == alias and cat.names.further_aliases() == {}


def test_the_names_table_is_kept_without_looking_at_every_name_until_a_tool_is_added_or_removed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Whether the table was still good was decided by building the set of every tool's name and
    # comparing it, on each request and each name a model gives that is no tool id: the
    # registry's version says so now; a change of the set still makes the table again.
    looked: list[int] = []
    known_names = CatalogNames.known_names

    def counted(self: CatalogNames) -> set[str]:  # (the real set, counted)
        looked.append(1)
        return known_names(self)
    monkeypatch.setattr(CatalogNames, "known_names", counted)
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    cat = catalog([spec(dotted), spec("read_file")])
    first = cat.names.offered_names()
    for _ in range(100):
        assert cat.names.ids_for([alias, "nope"]) == [dotted, "nope"]
        assert cat.names.offered_names() is first and cat.names.further_aliases() == {}
    assert len(looked) == 1
    cat.registry.add(spec("other"))  # (a new tool: looked at once more, and the same table kept for
    cat.registry.remove("other")     # a set that came back as it was)
    assert cat.names.offered_names() is first and len(looked) == 2
    cat.registry.add(spec(alias))
    assert cat.names.ids_for([alias]) == [alias] and cat.names.offered_names() is not first
    assert len(looked) == 3


def test_a_name_a_model_gives_is_its_tools_id_by_the_catalogs_table_as_the_tools_change():
    # F-MOD-3: a model may give a tool's offered name where no request maps it back (a program's
    # call_tool, a subagent's tools list, a call of a tool it was not offered): the tool's id, a
    # digest alias and a further alias are that tool, any other name stays as given. Read from
    # the catalog's one table (offered_names), so the answers follow the tools.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    cat = catalog([spec(dotted), spec("read_file")])
    assert cat.names.ids_for(["read_file", dotted, alias, "nope"]) == ["read_file", dotted, dotted, "nope"]
    cat.registry.add(spec(alias))
    further = cat.names.further_aliases()[dotted]
    assert cat.names.ids_for([alias, further, dotted]) == [alias, dotted, dotted]  # (the name is the other tool's now)
    cat.registry.add(spec(further))  # (a third tool named so: the dotted one takes the next further alias)
    next_further = cat.names.further_aliases()[dotted]
    assert next_further not in (alias, further)
    assert cat.names.ids_for([alias, next_further, further]) == [alias, dotted, further]
    cat.registry.remove(alias)
    cat.registry.remove(further)
    assert cat.names.ids_for([alias, further, next_further]) == [dotted, further, next_further]  # (none offered so now)
    assert cat.names.ids_for([]) == []
