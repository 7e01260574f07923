"""F-MOD-3..5 and F-TOOL-1, 2, 4 a fourth time, through a real daemon: the planes' answers for a
tool whose MCP server is down (the test server ``tests/mcp/server.py``, the ``faux`` provider),
and the inventory against the tools the Anthropic SDK sends to a loopback server.
What the first three passes (``test_catalog_acceptance.py``, ``test_catalog_mcp_second_pass.py``,
``test_catalog_mcp_third_pass.py``), ``tests/providers/test_names.py`` and
``tests/providers/test_caching.py`` hold is not repeated."""

from __future__ import annotations

import json
import sys

import trio

from runtime.providers.names import alias_for

from ..mcp.conftest import SERVER
from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import DaemonFactory, run_tool, sdks_ready, wait_until
from .test_catalog_mcp_second_pass import faux, new_session
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
    sid = await new_session(d, token)
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
    sid = await new_session(d, token)
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
