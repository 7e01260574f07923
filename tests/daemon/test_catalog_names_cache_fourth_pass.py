"""F-MOD-3..5 and F-TOOL-1..4 a fourth time, through a real daemon: the planes' answers for a
tool whose MCP server is down (the test server ``tests/mcp/server.py``, the ``faux`` provider),
directly and from a program, and the inventory against the tools the Anthropic, Chat Completions
and Responses SDKs send to a loopback server, the same bytes every turn and after a restart.
What the first three passes (``test_catalog_acceptance.py``, ``test_catalog_mcp_second_pass.py``,
``test_catalog_mcp_third_pass.py``), ``tests/providers/test_names.py`` and
``tests/providers/test_caching.py`` hold is not repeated."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import pytest
import trio

from runtime.providers.names import alias_for

from ..mcp.conftest import SERVER
from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import Received, Reply, ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from ..providers.servers.openai_responses import response_stream
from .conftest import DaemonFactory, run_tool, sdks_ready, stop_daemon, wait_until
from .test_catalog_mcp_second_pass import faux
from .test_tool_catalog_http import inventory

DELEGATE = [
    {"when": "DELEGATE", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUB-CALLS",
                                                                          "tools": ["get_system_time"]}}]},
    {"when": "SUB-CALLS", "toolCalls": [{"name": "mcp__t__echo", "arguments": {"text": "from the subagent"}}]},
]


async def test_each_plane_answers_with_its_own_code_whether_the_tools_server_is_up_or_down(
        daemon_factory: DaemonFactory) -> None:
    # F-TOOL-2: a tool the policy disables answers TOOL_DISABLED and a deferred one not loaded
    # TOOL_NOT_LOADED, and only a tool the agent may call answers for its server being down. Once
    # the server had failed, its tools left the registry and every call of one answered
    # MCP_SERVER_UNAVAILABLE: the disabled tool (a model would wait for it to come back) and the
    # deferred one not loaded alike. A subagent not given the tool is told it has none, as before.
    d = await daemon_factory(config={
        **faux(DELEGATE), "mcpServers": {"t": {"command": sys.executable, "args": [SERVER], "maxRestarts": 0}},
        "tools": {"eager": ["mcp__t__echo", "mcp__t__crash"], "deferred": ["mcp__t__slow"],
                  "policy": {"mcp__t__env": {"enabled": False}}}})
    token = await d.pair("fourth-pass", strong=True)
    sid = await d.new_session(token)
    expected = {"mcp__t__env": ("TOOL_DISABLED", "mcp__t__env is disabled by the tool policy"),
                "mcp__t__slow": ("TOOL_NOT_LOADED", "mcp__t__slow is deferred: load it with capability_search "
                                                    "first (it is callable from the next request)")}
    for name, (code, message) in expected.items():
        body = await run_tool(d, token, sid, f"up-{name}", name, {})
        assert (body["error_code"], body["content"][0]["text"]) == (code, f"{code}: {message}"), body
    assert (await run_tool(d, token, sid, "crash", "mcp__t__crash", {}))["error_code"] == "MCP_SERVER_UNAVAILABLE"

    async def failed() -> bool:
        return (await inventory(d, token))["mcpServers"][0]["status"] == "failed"
    await wait_until(failed, what="server t failed for good")
    down = "MCP server 't' failed: the server exited with status 3"
    for name, (code, message) in expected.items():
        body = await run_tool(d, token, sid, f"down-{name}", name, {})
        assert (body["error_code"], body["content"][0]["text"]) == (code, f"{code}: {message} ({name}: {down})"), body
    body = await run_tool(d, token, sid, "down-echo", "mcp__t__echo", {"text": "x"})
    assert body["content"][0]["text"] == f"MCP_SERVER_UNAVAILABLE: mcp__t__echo: {down}"
    await d.submit(token, sid, "sub", "DELEGATE")
    await d.wait_idle(token, sid)
    [sub] = [e["body"] for e in await d.events(token, sid)
             if e["kind"] == "tool.finished" and e["agent_id"] != "main" and e["body"]["name"] == "mcp__t__echo"]
    assert sub["error_code"] == "TOOL_UNKNOWN", sub


async def test_the_inventory_says_each_offered_tool_as_the_model_is_sent_it_before_and_after_a_load(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # F-TOOL-4 against the Anthropic SDK at a loopback server: for each tool the inventory says
    # is offered, `nativeName`, `offeredDescription` and `inputSchema` are the name, description
    # and input schema the request carried, in the request's order, before and after
    # capability_search loads the deferred `mcp__t__some.tool` (sent under its digest alias, its
    # description naming its id). The context plane's input examples (`inputExamples`) reach the
    # model with the tool's description: capability_search's were listed, and never sent.
    loop = ScriptedServer()
    url = await loop.start(nursery)
    dotted = "mcp__t__some.tool"
    loop.push(message_stream(calls=[("call_1", "capability_search", {"query": dotted, "limit": 1})]),
              message_stream(text="done"))
    d = await daemon_factory(config={
        "providers": [{"id": "an", "protocol": "anthropic", "baseUrl": url, "models": [{"id": "claude-t"}]}],
        "defaultModel": "an/claude-t", "tools": {"deferred": ["mcp__*"]},
        "mcpServers": {"t": {"command": sys.executable, "args": [SERVER, "--dotted"]}}})
    token = await d.pair("fourth-pass", strong=True)
    sid = await d.new_session(token)
    await sdks_ready()
    before = await inventory(d, token, sid)
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    after = await inventory(d, token, sid)
    assert dotted not in before["offered"] and dotted in after["offered"]
    for inv, body in ((before, loop.bodies[0]), (after, loop.bodies[1])):
        by_name = {tool["name"]: tool for tool in inv["tools"]}
        said = [(by_name[n]["nativeName"], by_name[n]["offeredDescription"], by_name[n]["inputSchema"])
                for n in inv["offered"]]
        sent = [(tool["name"], tool["description"], tool["input_schema"]) for tool in body["tools"]]
        assert said == sent
    tool = {t["name"]: t for t in after["tools"]}
    assert tool[dotted]["nativeName"] == alias_for(dotted)
    assert tool[dotted]["offeredDescription"] == f"[capability id: {dotted}] A dotted name"
    search = tool["capability_search"]
    assert search["inputExamples"] and search["offeredDescription"].startswith(search["description"] + "\n")
    for example in search["inputExamples"]:
        assert json.dumps(example, ensure_ascii=False) in search["offeredDescription"]


PTC = "programmatic_tool_run"
# A program calling each tool both ways, as a function and through call_tool, printing how each
# call ended (the code and message a program's ToolError carries)
PROGRAM = """for name, args in [('mcp__t__slow', {}), ('mcp__t__echo', {'text': 'x'})]:
    for how in ['function', 'call_tool']:
        try:
            if how == 'call_tool':
                call_tool(name, args)
            elif name == 'mcp__t__slow':
                mcp__t__slow()
            else:
                mcp__t__echo(text='x')
            print(name, how, 'ok')
        except ToolError as e:
            print(name, how, e.code, e.message)
"""


def not_native(name: str) -> str:
    return f"{name} is called through {PTC}: call it from a program ({name}(...) in the code you pass to {PTC})"


def not_loaded(name: str) -> str:
    return f"{name} is deferred: load it with capability_search first (it is callable from the next request)"


async def test_with_ptc_a_down_servers_tool_answers_what_it_answers_up_directly_and_from_a_program(
        daemon_factory: DaemonFactory) -> None:
    # F-TOOL-2/3 with `localPtc`: a deferred MCP tool is called from a program, never directly,
    # whether its server is up or down. Once the server had failed, a direct call of the deferred
    # tool not loaded answered TOOL_NOT_LOADED ("load it with capability_search", which changes
    # nothing: it stays out of the native list) and of the loaded one MCP_SERVER_UNAVAILABLE, where
    # both answer TOOL_NOT_NATIVE while it runs; and a program's function-style call of either was
    # PTC_NAME_ERROR (its functions were the registry's tools) while call_tool gave the plane's code.
    d = await daemon_factory(config={
        **faux(), "localPtc": {}, "mcpServers": {"t": {"command": sys.executable, "args": [SERVER], "maxRestarts": 0}},
        "tools": {"eager": ["mcp__t__crash"], "deferred": ["mcp__t__slow", "mcp__t__echo"]}})
    token = await d.pair("fourth-pass", strong=True)
    sid = await d.new_session(token)
    loaded = await run_tool(d, token, sid, "load", "capability_search", {"query": "mcp__t__echo"})
    assert loaded["structured_content"]["loaded"] == ["mcp__t__echo"], loaded
    for name in ("mcp__t__slow", "mcp__t__echo"):
        body = await run_tool(d, token, sid, f"up-{name}", name, {"text": "x"})
        assert body["content"][0]["text"] == f"TOOL_NOT_NATIVE: {not_native(name)}", body
    program = await run_tool(d, token, sid, "up-program", PTC, {"code": PROGRAM})
    assert program["content"][0]["text"].splitlines() == [
        f"mcp__t__slow function TOOL_NOT_LOADED {not_loaded('mcp__t__slow')}",
        f"mcp__t__slow call_tool TOOL_NOT_LOADED {not_loaded('mcp__t__slow')}",
        "mcp__t__echo function ok", "mcp__t__echo call_tool ok"], program

    assert (await run_tool(d, token, sid, "crash", "mcp__t__crash", {}))["error_code"] == "MCP_SERVER_UNAVAILABLE"

    async def failed() -> bool:
        return (await inventory(d, token))["mcpServers"][0]["status"] == "failed"
    await wait_until(failed, what="server t failed for good")
    down = "MCP server 't' failed: the server exited with status 3"
    for name in ("mcp__t__slow", "mcp__t__echo"):
        body = await run_tool(d, token, sid, f"down-{name}", name, {"text": "x"})
        assert body["content"][0]["text"] == f"TOOL_NOT_NATIVE: {not_native(name)} ({name}: {down})", body
    program = await run_tool(d, token, sid, "down-program", PTC, {"code": PROGRAM})
    assert program["content"][0]["text"].splitlines() == [
        f"mcp__t__slow function TOOL_NOT_LOADED {not_loaded('mcp__t__slow')} (mcp__t__slow: {down})",
        f"mcp__t__slow call_tool TOOL_NOT_LOADED {not_loaded('mcp__t__slow')} (mcp__t__slow: {down})",
        f"mcp__t__echo function MCP_SERVER_UNAVAILABLE mcp__t__echo: {down}",
        f"mcp__t__echo call_tool MCP_SERVER_UNAVAILABLE mcp__t__echo: {down}"], program


async def test_a_disabled_tool_is_refused_as_disabled_before_deferred_and_a_name_never_listed_is_not_judged(
        daemon_factory: DaemonFactory) -> None:
    # F-TOOL-2: a tool both disabled (here by a pattern) and deferred answered TOOL_NOT_LOADED,
    # server up or down, inviting a capability_search that then said it was disabled; the policy's
    # refusal comes first. And a name its server never listed (a typo) answered TOOL_DISABLED by
    # the pattern once the server was down, TOOL_UNKNOWN while it ran: only a tool the server
    # listed is judged by the planes while it is down; another name gets the server's state.
    d = await daemon_factory(config={
        **faux(), "mcpServers": {"t": {"command": sys.executable, "args": [SERVER], "maxRestarts": 0}},
        "tools": {"deferred": ["mcp__t__env"],
                  "policy": {"mcp__*": {"enabled": False}, "mcp__t__crash": {"enabled": True}}}})
    token = await d.pair("fourth-pass", strong=True)
    sid = await d.new_session(token)
    disabled = "TOOL_DISABLED: mcp__t__env is disabled by the tool policy"
    body = await run_tool(d, token, sid, "up-env", "mcp__t__env", {})
    assert body["content"][0]["text"] == disabled, body
    body = await run_tool(d, token, sid, "up-typo", "mcp__t__nosuch", {})
    assert body["content"][0]["text"] == "TOOL_UNKNOWN: no tool named 'mcp__t__nosuch' is available to this agent"
    search = await run_tool(d, token, sid, "search", "capability_search", {"query": "mcp__t__env"})
    assert "mcp__t__env is disabled by the tools policy" in search["content"][0]["text"], search

    assert (await run_tool(d, token, sid, "crash", "mcp__t__crash", {}))["error_code"] == "MCP_SERVER_UNAVAILABLE"

    async def failed() -> bool:
        return (await inventory(d, token))["mcpServers"][0]["status"] == "failed"
    await wait_until(failed, what="server t failed for good")
    down = "MCP server 't' failed: the server exited with status 3"
    body = await run_tool(d, token, sid, "down-env", "mcp__t__env", {})
    assert body["content"][0]["text"] == f"{disabled} (mcp__t__env: {down})", body
    body = await run_tool(d, token, sid, "down-typo", "mcp__t__nosuch", {})
    assert body["content"][0]["text"] == f"MCP_SERVER_UNAVAILABLE: mcp__t__nosuch: {down}", body


# How each protocol's request carries a tool: (name, description, input schema).
SENT_AS: dict[str, Callable[[dict[str, Any]], tuple[str, str, Any]]] = {
    "openai-chat": lambda tool: (tool["function"]["name"], tool["function"]["description"],
                                 tool["function"]["parameters"]),
    "openai-responses": lambda tool: (tool["name"], tool["description"], tool["parameters"]),
}
ANSWER: dict[str, Callable[[], Reply]] = {"openai-chat": lambda: chat_stream(text="done"),
                                          "openai-responses": lambda: response_stream(text="done")}


@pytest.mark.parametrize("protocol", sorted(SENT_AS))
async def test_the_inventory_says_each_offered_tool_as_the_openai_protocols_are_sent_it(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, protocol: str) -> None:
    # F-TOOL-4 and F-MOD-3 through the official OpenAI SDK (Chat Completions and Responses) at a
    # loopback server: each offered tool's `nativeName`, `offeredDescription` and `inputSchema`
    # are what the request carried, in its order: the dotted MCP tool under its alias with its id
    # named, capability_search and programmatic_tool_run with their input examples.
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(ANSWER[protocol]())
    d = await daemon_factory(config={
        "providers": [{"id": "p", "protocol": protocol, "baseUrl": f"{url}/v1", "models": [{"id": "m"}]}],
        "defaultModel": "p/m", "localPtc": {}, "tools": {"deferred": ["mcp__t__slow"]},
        "mcpServers": {"t": {"command": sys.executable, "args": [SERVER, "--dotted"]}}})
    token = await d.pair("fourth-pass", strong=True)
    sid = await d.new_session(token)
    await sdks_ready()
    inv = await inventory(d, token, sid)
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    by_name = {tool["name"]: tool for tool in inv["tools"]}
    said = [(by_name[n]["nativeName"], by_name[n]["offeredDescription"], by_name[n]["inputSchema"])
            for n in inv["offered"]]
    assert said == [SENT_AS[protocol](tool) for tool in loop.bodies[0]["tools"]]
    dotted = "mcp__t__some.tool"
    assert dotted in inv["offered"] and by_name[dotted]["nativeName"] == alias_for(dotted)
    assert by_name[dotted]["offeredDescription"] == f"[capability id: {dotted}] A dotted name"
    for name in ("capability_search", PTC):
        assert name in inv["offered"] and by_name[name]["inputExamples"], name
        assert by_name[name]["offeredDescription"].startswith(by_name[name]["description"] + "\n\nInput examples:\n")


def tools_bytes(received: Received) -> bytes:
    """The bytes of a request body's top-level ``tools`` value, exactly as they were sent."""
    text = received.raw.decode("utf-8")
    decoder = json.JSONDecoder()
    at = 0
    while (at := text.find('"tools":', at)) != -1:
        start = at + len('"tools":')
        while text[start] == " ":
            start += 1
        value, end = decoder.raw_decode(text, start)
        if value == received.body["tools"]:
            return received.raw[len(text[:start].encode()):len(text[:end].encode())]
        at = start
    raise AssertionError("no top-level tools in the request")


async def test_the_offered_tools_are_the_same_bytes_every_turn_and_after_a_restart(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # F-MOD-4: a provider's prompt cache holds the tools first; a tool list that changed by one
    # byte between turns (the order of the tools, of an input schema's keys, of the examples
    # added to a description, an alias) or once the daemon and its MCP server started again would
    # write the whole prefix again. Three turns through the Anthropic SDK, the last after a
    # restart: the request's `tools` are the same bytes each time.
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(message_stream(text="one"), message_stream(text="two"), message_stream(text="three"))
    config = {"providers": [{"id": "an", "protocol": "anthropic", "baseUrl": url, "models": [{"id": "claude-t"}]}],
              "defaultModel": "an/claude-t", "localPtc": {}, "tools": {"deferred": ["mcp__t__slow"]},
              "mcpServers": {"t": {"command": sys.executable, "args": [SERVER, "--dotted"]}}}
    d = await daemon_factory(config=config)
    token = await d.pair("fourth-pass", strong=True)
    sid = await d.new_session(token)
    await sdks_ready()
    for rid in ("r1", "r2"):
        await d.submit(token, sid, rid, f"turn {rid}")
        await d.wait_idle(token, sid)
    await stop_daemon(d)
    d = await daemon_factory(config=config, root=d.root)
    await d.submit(token, sid, "r3", "turn r3")
    await d.wait_idle(token, sid)
    assert len(loop.requests) == 3
    sent = [tools_bytes(r) for r in loop.requests]
    names = [tool["name"] for tool in loop.bodies[0]["tools"]]
    assert {"capability_search", PTC, alias_for("mcp__t__some.tool")} <= set(names), names
    assert json.loads(sent[0]) == loop.bodies[0]["tools"]
    assert sent[1] == sent[0] and sent[2] == sent[0]
