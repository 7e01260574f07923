"""Native tool names and stable digest aliases (F-MOD-3)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from runtime.providers.base import ProviderError
from runtime.providers.compile import prepare
from runtime.providers.names import (CALL_ID_RE, NATIVE_NAME_RE, ToolNames, alias_for, call_id_for, chat_call_id_for,
                                     name_table)

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply

ODD = ["mcp__github__search.issues", "mcp__srv__tool with spaces", "werkzeug_ß_ünïcode", "x" * 65,
       "mcp__a__" + "very_long_segment_" * 6]


def tool(name: str) -> dict:
    return {"name": name, "description": f"does {name}", "input_schema": {"type": "object", "properties": {}}}


def test_native_names_pass_through_and_others_get_valid_stable_aliases():
    assert alias_for("read_file") == "read_file"
    assert alias_for("a" * 64) == "a" * 64
    # a name is native only whole: `$` let "read_file\n" through as a name providers refuse
    assert NATIVE_NAME_RE.fullmatch(alias_for("read_file\n")) and alias_for("read_file\n") != "read_file\n"
    aliases = [alias_for(i) for i in ODD]
    assert all(NATIVE_NAME_RE.fullmatch(a) for a in aliases)
    assert len(set(aliases)) == len(ODD)
    assert aliases == [alias_for(i) for i in ODD]  # a pure function of the id
    assert alias_for("mcp__github__search.issues").startswith("mcp__github__search_issues_")
    # Ids that sanitise to the same readable text still differ by their digest.
    assert alias_for("a.b") != alias_for("a b") and alias_for("a.b")[:4] == alias_for("a b")[:4]


def test_alias_is_the_same_whatever_the_load_order():
    forward = ToolNames(["read_file", *ODD])
    backward = ToolNames([*reversed(ODD), "read_file"])
    for i in ODD + ["read_file"]:
        assert forward.native(i) == backward.native(i)
        assert forward.internal(forward.native(i)) == i
    assert forward.internal("unknown_tool") == "unknown_tool"


def test_a_collision_is_refused():
    names = ToolNames()
    names._internal[alias_for("mcp__x.y")] = "someone_else"  # noqa: SLF001 - stands in for a digest clash
    with pytest.raises(ProviderError) as info:
        names.add("mcp__x.y")
    assert info.value.code == "TOOL_NAME_COLLISION"


def test_an_id_named_as_another_ids_alias_keeps_it_and_the_other_takes_the_next_free_alias_in_any_order():
    # F-MOD-3: `mcp__s__a_<digest>` is its own name; `mcp__s__a.b`, whose alias it is, takes the
    # digest of "<id>#1", unless a third id is named so too, then of "<id>#2". The table depends
    # on the set of ids only, never their order.
    dotted = "mcp__s__a.b"
    first = alias_for(dotted)
    second = name_table([dotted, first]).offered[dotted]
    third = name_table([dotted, first, second]).offered[dotted]
    assert len({first, second, third}) == 3 and all(NATIVE_NAME_RE.fullmatch(n) for n in (second, third))
    ids = [dotted, first, second, "read_file", "mcp__s__long" + "x" * 80]
    tables = [name_table(ids).offered, name_table(reversed(ids)).offered, name_table(sorted(ids, key=len)).offered]
    assert tables[0] == tables[1] == tables[2]
    assert tables[0][first] == first and tables[0][second] == second and tables[0][dotted] == third
    assert len(set(tables[0].values())) == len(ids)
    assert name_table(ids).further == {dotted: third}  # (the few ids the request carries)
    names = ToolNames(ids, {dotted: third})
    assert names.native(dotted) == third and names.internal(third) == dotted and names.internal(first) == first


async def test_a_history_call_keeps_its_further_alias_when_neither_tool_is_offered():
    # F-MOD-3: `mcp__srv__some.tool` was offered (and called) under a further alias, its own alias
    # being the name of another tool of its server. Its server went down: neither tool is offered,
    # and the history call went out as the *other* tool's name, which a model's call then mapped
    # back to the dotted tool. The request's `tool_aliases` (the catalog's) name it either way.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    table = name_table([dotted, alias, "read_file"])
    further = table.offered[dotted]
    assert table.further == {dotted: further} and further not in (alias, dotted)
    ctx = Ctx().user("go").response("", ("call_1", dotted, {})).result("call_1", "ran")
    both = replace(ctx.request(tools=[tool(dotted), tool(alias), tool("read_file")]), tool_aliases=table.further)
    none = replace(ctx.request(tools=[tool("read_file")]), tool_aliases=table.further)
    sent = []
    for request in (both, none):
        names = (await prepare(request, load_image=None, images=False)).names
        sent.append(names.native(dotted))
        assert names.internal(further) == dotted and names.internal(alias) != dotted
    assert sent == [further, further]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_down_servers_call_goes_out_under_the_name_it_was_offered_under(protocol, server, make):
    dotted = "mcp__srv__some.tool"
    table = name_table([dotted, alias_for(dotted)])
    server.push(reply(protocol, calls=[("call_2", alias_for(dotted), {})]))
    ctx = Ctx().user("go").response("", ("call_1", dotted, {})).result("call_1", "ran")
    result = await make(protocol).stream(replace(ctx.request(tools=[tool("read_file")]), tool_aliases=table.further),
                                         Deltas())
    assert [c.name for c in result.tool_calls] == [alias_for(dotted)]  # (the other tool's own id)
    assert table.offered[dotted] in json.dumps(server.bodies[0]) and alias_for(dotted) not in json.dumps(server.bodies[0])


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_aliases_on_the_wire_and_calls_mapped_back(protocol, server, make):
    provider = make(protocol)
    mcp = "mcp__github__search.issues"
    alias = alias_for(mcp)
    # Same tools, two load orders: the wire names are the same.
    server.push(reply(protocol, calls=[("call_1", alias, {"q": "bug"})]), reply(protocol, text="found"))
    ctx = Ctx().user("search")
    first = await provider.stream(ctx.request(tools=[tool(mcp), tool("read_file")]), Deltas())
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [(mcp, {"q": "bug"})]  # internal id back
    assert first.diagnostics["tool_aliases"] == {alias: mcp}
    ctx.response("", *[(c.call_id, c.name, c.arguments) for c in first.tool_calls]).result("call_1", "1 issue")
    # Second request: other load order, and the MCP tool is no longer offered; history still
    # names it by the same alias.
    await provider.stream(ctx.request(tools=[tool("read_file")]), Deltas())
    b0, b1 = server.bodies
    if protocol == "openai-responses":
        names0 = [t["name"] for t in b0["tools"]]
        assert names0 == [alias, "read_file"]
        assert b0["tools"][0]["description"].startswith(f"[capability id: {mcp}]")
        assert [m["name"] for m in b1["input"] if m.get("type") == "function_call"] == [alias]
    elif protocol == "openai-chat":
        assert [t["function"]["name"] for t in b0["tools"]] == [alias, "read_file"]
        assert b1["messages"][2]["tool_calls"][0]["function"]["name"] == alias
    else:
        assert [t["name"] for t in b0["tools"]] == [alias, "read_file"]
        assert b1["messages"][1]["content"][0]["name"] == alias


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_history_call_under_another_tools_alias_does_not_fail_the_request(protocol, server, make):
    """A model called ``mcp__srv__some_tool_<digest>`` (the alias of the deferred, not yet offered
    ``mcp__srv__some.tool``) and then the id itself: the log keeps both names, which map to one
    native name, and every later request of the session failed (TOOL_NAME_COLLISION). The offered
    tool keeps its alias; the history's other name goes under another, and the model's call of
    the alias still comes back as the tool's id."""
    provider = make(protocol)
    mcp = "mcp__srv__some.tool"
    alias = alias_for(mcp)
    server.push(reply(protocol, calls=[("call_3", alias, {})]))
    ctx = (Ctx().user("go").response("", ("call_1", alias, {}), ("call_2", mcp, {}))
           .result("call_1", "TOOL_UNKNOWN", is_error=True).result("call_2", "TOOL_NOT_LOADED", is_error=True))
    result = await provider.stream(ctx.request(tools=[tool(mcp), tool("read_file")]), Deltas())
    assert [c.name for c in result.tool_calls] == [mcp]
    body = server.bodies[0]
    if protocol == "openai-responses":
        offered = [t["name"] for t in body["tools"]]
        called = [m["name"] for m in body["input"] if m.get("type") == "function_call"]
    elif protocol == "openai-chat":
        offered = [t["function"]["name"] for t in body["tools"]]
        called = [c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []]
    else:
        offered = [t["name"] for t in body["tools"]]
        called = [b["name"] for m in body["messages"] if isinstance(m["content"], list)
                  for b in m["content"] if b["type"] == "tool_use"]
    assert offered == [alias, "read_file"]
    assert called[1] == alias and called[0] != alias and NATIVE_NAME_RE.fullmatch(called[0])
    assert called[0].startswith("mcp__srv__some_tool_")
    # (the same history sends the same names again)
    names = ToolNames([mcp, "read_file"])
    assert [names.add_called(alias), names.add_called(mcp)] == called


async def test_call_ids_anthropic_refuses_travel_under_an_alias_with_their_results(server, make):
    """Anthropic takes a tool_use id only of [A-Za-z0-9_-]; ids an OpenAI-compatible server made
    (``functions.read_file:0``) reach it after a switch of model, and failed every request."""
    provider = make("anthropic")
    server.push(reply("anthropic", text="ok"))
    ctx = (Ctx().user("go").response("", ("functions.read_file:0", "read_file", {"path": "a"}), ("toolu_01", "read_file", {}))
           .result("functions.read_file:0", "a").result("toolu_01", "b").user("next"))
    await provider.stream(ctx.request(), Deltas())
    messages = server.bodies[0]["messages"]
    uses = [b["id"] for b in messages[1]["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for b in messages[2]["content"] if b["type"] == "tool_result"]
    assert uses == results == [call_id_for("functions.read_file:0"), "toolu_01"]
    assert uses[0].startswith("functions_read_file_0_") and CALL_ID_RE.fullmatch(uses[0])
    assert [it.call.call_id for it in ctx.items if it.call is not None][0] == "functions.read_file:0"  # the items keep theirs


async def test_a_call_id_past_64_characters_travels_to_responses_under_an_alias(server, make):
    """The Responses API refuses a call_id longer than 64 characters; one recorded from another
    server reaches it after a switch of model."""
    provider = make("openai-responses")
    server.push(reply("openai-responses", text="ok"))
    long_id = "chatcmpl-tool-" + "0123456789abcdef" * 4 + "_0"
    ctx = Ctx().user("go").response("", (long_id, "read_file", {"path": "a"}), ("call_ok", "read_file", {})) \
        .result(long_id, "a").result("call_ok", "b").user("next")
    await provider.stream(ctx.request(), Deltas())
    inp = server.bodies[0]["input"]
    calls = [m["call_id"] for m in inp if m.get("type") == "function_call"]
    outputs = [m["call_id"] for m in inp if m.get("type") == "function_call_output"]
    assert calls == outputs == [call_id_for(long_id), "call_ok"]
    assert len(calls[0]) == 64 and calls[0].startswith("chatcmpl-tool-0123456789abcdef")


async def test_a_call_id_past_40_characters_travels_to_chat_completions_under_an_alias(server, make):
    """OpenAI's Chat Completions refuses a ``tool_calls[].id`` longer than 40 characters (400
    "string too long"); vLLM names its calls ``chatcmpl-tool-`` and 32 hex digits (46), so a
    session moved from a vLLM model to OpenAI's failed every request. Shorter ids of any form go
    as they are (compatible servers' own forms, such as Kimi's ``functions.<tool>:<n>``)."""
    provider = make("openai-chat")
    server.push(reply("openai-chat", text="ok"))
    long_id = "chatcmpl-tool-" + "0123456789abcdef" * 2
    ctx = Ctx().user("go").response("", (long_id, "read_file", {"path": "a"}), ("functions.read_file:1", "read_file", {})) \
        .result(long_id, "a").result("functions.read_file:1", "b").user("next")
    await provider.stream(ctx.request(), Deltas())
    messages = server.bodies[0]["messages"]
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == results == [chat_call_id_for(long_id), "functions.read_file:1"]
    assert len(calls[0]) == 40 and calls[0].startswith("chatcmpl-tool-")
    assert [it.call.call_id for it in ctx.items if it.call is not None][0] == long_id  # the items keep theirs


def _sent_call_ids(protocol: str, body: dict) -> tuple[list[str], list[str]]:
    """The ids a request body gives its calls and its results, in order."""
    if protocol == "openai-chat":
        return ([c["id"] for m in body["messages"] for c in m.get("tool_calls") or []],
                [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"])
    if protocol == "openai-responses":
        return ([m["call_id"] for m in body["input"] if m.get("type") == "function_call"],
                [m["call_id"] for m in body["input"] if m.get("type") == "function_call_output"])
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return [b["id"] for b in blocks if b["type"] == "tool_use"], [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_id_alias_never_equals_another_call_id_of_the_request(server, make, protocol):
    """A digest alias was not checked against the request's other ids: a call recorded under the
    very id another call's alias is (a server may make ids of any form) went to the provider
    under the same id, and each result could be read as the other call's. The alias taken then
    is another digest of the id, the same for the same ids."""
    aliased = "chatcmpl-tool-" + "0123456789abcdef" * 2 if protocol == "openai-chat" else "functions.read_file:0"
    wire = chat_call_id_for if protocol == "openai-chat" else call_id_for
    taken = wire(aliased)  # (an id sent as it is: the alias of the other)
    assert wire(taken) == taken != aliased
    provider = make(protocol)
    bodies = []
    for order in [(aliased, taken), (taken, aliased)]:  # (either order: the same ids)
        server.push(reply(protocol, text="ok"))
        ctx = Ctx().user("go").response("", *[(i, "read_file", {"path": i}) for i in order])
        for i in order:
            ctx.result(i, f"result of {i}")
        await provider.stream(ctx.request(), Deltas())
        calls, results = _sent_call_ids(protocol, server.bodies[-1])
        assert calls == results and len(set(calls)) == 2, calls  # one id per call, its result's
        sent = dict(zip(order, calls))
        assert sent[taken] == taken and sent[aliased] != wire(aliased)
        assert (CALL_ID_RE.fullmatch(sent[aliased]) and len(sent[aliased]) == len(taken)
                and sent[aliased].startswith(taken[:12]))  # the same form and readable part
        bodies.append(sent)
    assert bodies[0] == bodies[1]
