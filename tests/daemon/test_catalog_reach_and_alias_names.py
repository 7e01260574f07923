"""F-TOOL-1/2/4 and F-MOD-3, through a real daemon (the ``faux`` provider, the test MCP server
``tests/mcp/server.py`` over stdio): ``capability_search`` offers only a tool some plane can
call, and an MCP tool named as another tool's digest alias keeps its name, the other tool taking
a further alias. What the earlier passes' tests hold is not repeated."""

from __future__ import annotations

import json
from typing import Any

import trio

from runtime.providers.names import alias_for, name_table

from ..providers.servers.openai_chat import chat_stream
from .conftest import DaemonFactory, finished, run_tool, stop_daemon, wait_until
from .test_catalog_mcp_second_pass import faux
from .test_mcp import NATIVE, chat_config, chat_session, server
from .test_tool_catalog_http import inventory

PTC = "programmatic_tool_run"


async def test_a_deferred_tool_no_plane_can_call_is_not_searchable_and_search_does_not_load_it(
        daemon_factory: DaemonFactory) -> None:
    # With `localPtc.nativeCapabilities` fixed, a deferred `skill` left out of it was searchable:
    # capability_search loaded it, and then a direct call answered TOOL_NOT_NATIVE (a load does not
    # change a fixed native list) and a program's PTC_TOOL_NOT_ALLOWED: loaded, callable from
    # nowhere. Such a tool is not searchable; one a program can call still is.
    d = await daemon_factory(config={**faux(), "localPtc": {"nativeCapabilities": ["capability_search"]},
                                     "tools": {"deferred": ["skill", "get_system_time"]}})
    token = await d.pair("reach", strong=True)
    sid = await d.new_session(token)
    inv = await inventory(d, token, sid)
    assert "skill" not in inv["searchable"] and "get_system_time" in inv["searchable"], inv["searchable"]
    assert "skill" not in inv["offered"] and "skill" not in inv["ptc"]["fromProgram"], inv["ptc"]

    found = await run_tool(d, token, sid, "s1", "capability_search", {"query": "skill"})
    assert found["structured_content"]["loaded"] == [], found
    text = found["content"][0]["text"]
    assert text.startswith('No deferred capability matches "skill": skill is left out of your tools by '
                           "localPtc.nativeCapabilities, and a program cannot call it"), text
    assert text.endswith("Nothing was loaded."), text
    direct = await run_tool(d, token, sid, "s2", "skill", {"name": "review"})
    assert direct["error_code"] == "TOOL_NOT_NATIVE", direct  # (what it answered loaded too, before)

    # A deferred tool a program can call is searched and loaded, and then runs from a program.
    time = await run_tool(d, token, sid, "s3", "capability_search", {"query": "get_system_time"})
    assert time["structured_content"]["loaded"] == ["get_system_time"], time
    program = await run_tool(d, token, sid, "s4", PTC, {"code": "t = get_system_time()\nprint(\"ran\")"})
    assert program.get("error_code") is None and program["content"][0]["text"].startswith("ran"), program
    assert (await inventory(d, token, sid))["searchable"] == [], "nothing left that a plane can call"


async def test_an_mcp_tool_named_as_another_tools_alias_keeps_its_name_and_the_other_takes_a_further_alias(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # F-MOD-3: `some.tool` travels as `mcp__srv__some_tool_<digest>`; a tool the same server names
    # `some_tool_<digest>` has that name as its own. The first of the listing kept the name and
    # the other was left out of the catalog (so which one a model could call depended on the
    # server's order). Now the exact name is the tool's that has it, whatever the order; the
    # dotted tool goes under a further alias; both are offered, called and shown in the inventory,
    # the same after a restart whose server lists them the other way round.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    further = name_table([dotted, alias]).offered[dotted]
    assert further not in (alias, dotted) and NATIVE.fullmatch(further) and further.startswith("mcp__srv__some_tool_")

    def config(*order: str) -> dict[str, Any]:
        return {"tools": {"mcpDeferAbove": 100},
                "mcpServers": {"srv": server(*(a for name in order for a in ("--named", name)))}}

    def names_of(inv: dict[str, Any]) -> dict[str, str]:
        return {t["name"]: t["nativeName"] for t in inv["tools"] if t["name"] in (dotted, alias)}

    loop, d, token, sid = await chat_session(
        daemon_factory, nursery, config("some.tool", alias.removeprefix("mcp__srv__")),
        chat_stream(calls=[("call_1", alias, {"text": "exact"}), ("call_2", further, {"text": "dotted"})]),
        chat_stream(text="done"), chat_stream(text="again"))
    inv = await inventory(d, token)
    assert names_of(inv) == {alias: alias, dotted: further}, names_of(inv)
    skipped = {x["name"] for x in inv["mcpServers"][0]["skippedTools"]}
    assert not skipped & {"some.tool", alias.removeprefix("mcp__srv__")}, inv["mcpServers"][0]["skippedTools"]
    assert {"name": dotted, "alias": further} in inv["mappingGaps"] and alias not in {g["name"] for g in inv["mappingGaps"]}
    by_name = {t["name"]: t for t in inv["tools"]}
    assert by_name[dotted]["offeredDescription"].startswith(f"[capability id: {dotted}] "), by_name[dotted]
    assert by_name[alias]["offeredDescription"] == by_name[alias]["description"]

    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    assert not [e["body"] for e in events if e["kind"] == "model.failed"]
    offered = [tool["function"]["name"] for tool in loop.bodies[0]["tools"]]
    assert offered.count(alias) == 1 and offered.count(further) == 1 and len(set(offered)) == len(offered), offered
    assert [e["body"]["name"] for e in events if e["kind"] == "tool.started"] == [alias, dotted]
    assert [b["content"][0]["text"] for b in finished(events)] == [f"{alias.removeprefix('mcp__srv__')}: exact",
                                                                   "some.tool: dotted"]
    sent_back = json.dumps(loop.bodies[1]["messages"])
    assert f'"name": "{further}"' in sent_back and f'"name": "{alias}"' in sent_back, sent_back[-600:]

    await stop_daemon(d)  # (the server lists the two the other way round now)
    d = await daemon_factory(config=chat_config(loop, config(alias.removeprefix("mcp__srv__"), "some.tool")),
                             root=d.root)
    assert names_of(await inventory(d, token)) == {alias: alias, dotted: further}
    await d.submit(token, sid, "r2", "again")
    await d.wait_idle(token, sid)
    assert sorted(tool["function"]["name"] for tool in loop.bodies[2]["tools"]) == sorted(offered)
    assert json.dumps(loop.bodies[2]["messages"]).count(f'"name": "{further}"') == 1  # (the history as it was sent)


async def test_a_call_of_a_tool_under_a_further_alias_keeps_that_name_once_its_server_is_down(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # F-MOD-3: the dotted tool was called under its further alias; then its server failed and both
    # tools left the registry. The next request offered neither, and sent the history's call under
    # `mcp__srv__some_tool_<digest>`, the other tool's own name: a model calling that tool by its
    # name had its call mapped to the dotted one. The history keeps the name it was offered under.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    further = name_table([dotted, alias]).offered[dotted]
    loop, d, token, sid = await chat_session(
        daemon_factory, nursery, {"tools": {"mcpDeferAbove": 100}, "mcpServers": {"srv": server(
            "--named", "some.tool", "--named", alias.removeprefix("mcp__srv__"), maxRestarts=0)}},
        chat_stream(calls=[("call_1", further, {"text": "dotted"})]),
        chat_stream(calls=[("call_2", "mcp__srv__crash", {})]), chat_stream(text="done"), chat_stream(calls=[("call_3", alias, {"text": "exact"})]), chat_stream(text="down"))
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    assert [b.get("error_code") for b in finished(await d.events(token, sid))] == [None, "MCP_SERVER_UNAVAILABLE"]

    async def failed() -> dict[str, Any] | None:
        inv = await inventory(d, token)
        return inv if inv["mcpServers"][0]["status"] == "failed" else None
    inv = await wait_until(failed, what="the server reported failed")
    assert not {dotted, alias} & {t["name"] for t in inv["tools"]}, "both tools left the registry"

    await d.submit(token, sid, "r3", "again")
    await d.wait_idle(token, sid)
    assert len(loop.bodies) == 5
    assert not {dotted, alias, further} & {tool["function"]["name"] for tool in loop.bodies[3]["tools"]}
    history = [c["function"]["name"] for m in loop.bodies[3]["messages"] for c in m.get("tool_calls") or []]
    assert further in history and alias not in history, history
    events = await d.events(token, sid)
    assert [e["body"]["name"] for e in events if e["kind"] == "tool.started"][-1] == alias  # (not the dotted tool)
