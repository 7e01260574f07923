"""F-TOOL-1..5 and F-MOD-3 once more, as a client author who has the spec and the docs alone
drives a real daemon over HTTP: the ``faux`` provider (or a loopback Chat Completions server, to
read what a request carried), real stdio MCP servers started from the config, and ``GET
/tools/inventory``. What ``test_catalog_acceptance.py``, ``test_mcp.py`` and ``tests/mcp/`` already
hold is not repeated: a server crashing mid-call that its restart budget brings back, two servers
of one tool name, a tool name of 200 characters, arguments the tool's schema does not allow, and
a server taken out of the config between two starts while a session had loaded its tool, and a
subagent calling a tool it was not given under an ``approval: warn`` policy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from runtime.providers.names import alias_for

from ..mcp.conftest import SERVER
from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, DaemonFactory, finished, run_tool, sdks_ready, stop_daemon, wait_until
from .test_tool_catalog_http import inventory, offered

REFERENCE = str(Path(__file__).parents[1] / "mcp" / "reference_server.py")


def mcp_server(*flags: str, **kw: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER, *flags], **kw}


def faux(script: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    provider: dict[str, Any] = {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}
    if script is not None:
        provider["script"] = script
    return {"providers": [provider], "defaultModel": "faux/faux-1"}


async def server_state(d: Daemon, token: str, name: str) -> dict[str, Any]:
    return next(s for s in (await inventory(d, token))["mcpServers"] if s["name"] == name)


async def test_a_server_crashing_mid_call_is_restarted_by_its_budget_and_the_session_calls_it_again(
        daemon_factory: DaemonFactory) -> None:
    # "A server that fails or exits is restarted after 1 s … up to maxRestarts times in a row":
    # the call in flight ends MCP_SERVER_UNAVAILABLE naming the server and its exit; the session
    # goes on (a native tool answers at once), and once the server is back the same session's
    # next call of it answers.
    d = await daemon_factory(config={**faux(), "mcpServers": {"t": mcp_server(maxRestarts=1)},
                                     "tools": {"eager": ["mcp__*"]}})
    token = await d.pair("second-pass", strong=True)
    sid = await d.new_session(token)
    body = await run_tool(d, token, sid, "r1", "mcp__t__crash", {})
    assert body["is_error"] and body["error_code"] == "MCP_SERVER_UNAVAILABLE"
    assert "MCP server 't' stopped during the call (the server exited with status 3)" in body["content"][0]["text"]
    assert (await run_tool(d, token, sid, "r2", "get_system_time", {}))["status"] == "ok"

    async def back() -> dict[str, Any] | None:
        state = await server_state(d, token, "t")
        return state if state["status"] == "running" else None
    state = await wait_until(back, what="the server restarted")
    assert state["restarts"] == 1 and state["error"] is None and state["toolCount"] == 11
    assert state["stderrTail"] == ""  # (shown only while failed or restarting)
    body = await run_tool(d, token, sid, "r3", "mcp__t__echo", {"text": "back again"})
    assert body["status"] == "ok" and body["content"] == [{"type": "text", "text": "echo: back again"}]
    # (the budget is spent: a second crash in a row leaves the server failed, its tools unavailable)
    body = await run_tool(d, token, sid, "r4", "mcp__t__crash", {})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE"

    async def failed() -> dict[str, Any] | None:
        state = await server_state(d, token, "t")
        return state if state["status"] == "failed" else None
    state = await wait_until(failed, what="the server failed for good")
    assert state["error"] == "the server exited with status 3" and "crashing now, on purpose" in state["stderrTail"]
    body = await run_tool(d, token, sid, "r5", "mcp__t__echo", {"text": "anyone?"})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE" and "MCP server 't' failed" in body["content"][0]["text"]


async def test_two_servers_of_one_tool_name_each_answer_under_their_own_prefix_and_a_200_character_name_is_left_out(
        daemon_factory: DaemonFactory) -> None:
    long_name = "n" * 200
    d = await daemon_factory(config={**faux(), "tools": {"eager": ["mcp__*"]}, "mcpServers": {
        "a": mcp_server("--named", long_name, env={"WHO": "server a"}), "b": mcp_server(env={"WHO": "server b"})}})
    token = await d.pair("second-pass", strong=True)
    sid = await d.new_session(token)
    for server in ("a", "b"):
        body = await run_tool(d, token, sid, f"r-{server}", f"mcp__{server}__env", {"name": "WHO"})
        assert body["content"] == [{"type": "text", "text": f"server {server}"}], body
    inv = await inventory(d, token, sid)
    names = [t["name"] for t in inv["catalog"]]
    assert names.count("mcp__a__env") == 1 and names.count("mcp__b__env") == 1
    assert not any(long_name[:100] in n for n in names) and not any(long_name[:100] in g["name"] for g in inv["mappingGaps"])
    servers = {s["name"]: s for s in inv["mcpServers"]}
    skipped = {s["name"]: s["reason"] for s in servers["a"]["skippedTools"]}
    cut = next(n for n in skipped if n.startswith("nnn"))
    # (the name shown is cut to 128 characters: the reason says how long it was)
    assert len(cut) == 128 and skipped[cut] == "a tool name is a string of 1 to 128 characters; this one has 200", skipped
    assert servers["a"]["toolCount"] == servers["b"]["toolCount"] == 11
    body = await run_tool(d, token, sid, "r-long", f"mcp__a__{long_name}", {})
    assert body["error_code"] == "TOOL_UNKNOWN" and body["content"][0]["text"].startswith("TOOL_UNKNOWN: no tool named")


async def test_arguments_the_input_schema_does_not_allow_are_the_servers_to_refuse_and_the_session_goes_on(
        daemon_factory: DaemonFactory) -> None:
    # The daemon passes an MCP tool's arguments as the model wrote them (integers aside); the
    # server judges them against its schema. The reference server (the `mcp` package) refuses a
    # string for an integer and a missing argument as a tool error naming the argument.
    d = await daemon_factory(config={**faux(), "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"ref": {"command": sys.executable, "args": [REFERENCE]}}})
    token = await d.pair("second-pass", strong=True)
    sid = await d.new_session(token)
    for rid, args, named in (("r1", {"a": "one", "b": 2}, "a"), ("r2", {"a": 1}, "b")):
        body = await run_tool(d, token, sid, rid, "mcp__ref__add", args)
        assert body["is_error"] and body["error_code"] == "MCP_TOOL_ERROR", body
        assert named in body["content"][0]["text"] and "add" in body["content"][0]["text"], body
    body = await run_tool(d, token, sid, "r3", "mcp__ref__add", {"a": 2, "b": 3})
    assert body["status"] == "ok" and body["structured_content"] == {"result": 5}, body


async def test_a_server_taken_out_of_the_config_leaves_its_loaded_tool_unknown_and_it_comes_back_under_one_alias(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # The config applies at the next start (README, "When a config change applies"). A session
    # loaded the deferred `mcp__srv__some.tool` and called it under its F-MOD-3 alias; the next
    # start has no server `srv`: the history still goes to the model under that same alias (the
    # request does not fail), a call of the alias or of the id answers TOOL_UNKNOWN naming the
    # id, and the tool is neither offered nor in the inventory. A third start with `srv` again
    # (declared after another server: the load order changed) offers it under the same alias with
    # no new search, and the call under the alias runs it.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    loop = ScriptedServer()
    url = await loop.start(nursery)
    base = {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                           "models": [{"id": "chat-test"}]}],
            "defaultModel": "loop/chat-test", "tools": {"deferred": ["mcp__*"]}}
    loop.push(chat_stream(calls=[("c1", "capability_search", {"query": "some tool", "limit": 1})]),
              chat_stream(calls=[("c2", alias, {})]), chat_stream(text="first done"))
    d = await daemon_factory(config={**base, "mcpServers": {"srv": mcp_server("--dotted")}})
    token = await d.pair("second-pass", strong=True)
    sid = await d.new_session(token)
    await sdks_ready()
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    assert [(b["name"], b["status"]) for b in finished(await d.events(token, sid))] == [
        ("capability_search", "ok"), (dotted, "ok")]
    assert (await inventory(d, token, sid))["loaded"] == [dotted]
    await stop_daemon(d)

    loop.push(chat_stream(calls=[("c3", alias, {}), ("c4", dotted, {})]), chat_stream(text="second done"))
    d = await daemon_factory(root=d.root, config={**base, "mcpServers": {"other": mcp_server()}})
    await d.submit(token, sid, "r2", "again")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    assert not [e for e in events if e["kind"] == "model.failed"], [e["body"] for e in events if e["kind"] == "model.failed"]
    done = {b["call_id"]: b for b in finished(events)}
    for call_id in ("c3", "c4"):
        assert done[call_id]["name"] == dotted and done[call_id]["error_code"] == "TOOL_UNKNOWN", done[call_id]
        assert dotted in done[call_id]["content"][0]["text"]
    request = loop.bodies[3]
    assert alias not in offered(request) and dotted not in offered(request)
    assert [c["function"]["name"] for m in request["messages"] for c in m.get("tool_calls") or []] == ["capability_search", alias]
    inv = await inventory(d, token, sid)
    assert dotted not in [t["name"] for t in inv["catalog"]] and inv["loaded"] == []
    await stop_daemon(d)

    loop.push(chat_stream(calls=[("c5", alias, {})]), chat_stream(text="third done"))
    d = await daemon_factory(root=d.root, config={**base, "mcpServers": {"other": mcp_server(), "srv": mcp_server("--dotted")}})
    await d.submit(token, sid, "r3", "once more")
    await d.wait_idle(token, sid)
    assert alias in offered(loop.bodies[5])
    last = finished(await d.events(token, sid))[-1]
    assert (last["call_id"], last["name"], last["content"]) == ("c5", dotted, [{"type": "text", "text": "some.tool ran"}])
    assert (await inventory(d, token, sid))["loaded"] == [dotted]
    assert not [e for e in await d.events(token, sid) if e["kind"] == "capability.loaded"][1:]


SUB_SCRIPT = [
    {"when": "DELEGATE", "toolCalls": [{"name": "subagent", "arguments": {
        "prompt": "SUB-SEARCH", "tools": ["capability_search", "get_system_time"]}}]},
    {"when": "SUB-SEARCH", "toolCalls": [{"name": "capability_search", "arguments": {"query": "echo text"}}]},
    {"when": "No deferred capability", "toolCalls": [
        {"name": "mcp__t__echo", "arguments": {"text": "from the subagent"}}]},
    {"when": "MAIN-ONLY", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUB-ASKS"}}]},
    {"when": "SUB-ASKS", "toolCalls": [{"name": "ask_user", "arguments": {"questions": [{"id": "q", "text": "?"}]}}]},
    {"when": "LOAD", "toolCalls": [{"name": "capability_search", "arguments": {"query": "echo text", "limit": 1}}]},
    {"when": "Loaded mcp__t__echo", "toolCalls": [{"name": "mcp__t__echo", "arguments": {"text": "from main"}}]},
]


async def test_a_tool_not_given_to_a_subagent_is_neither_found_nor_run_and_carries_no_approval_note(
        daemon_factory: DaemonFactory) -> None:
    # A subagent whose tools list names capability_search but not the deferred mcp__t__echo: its
    # search finds nothing (it ranks what is assigned to it), its call of the tool answers
    # TOOL_UNKNOWN, and a subagent's call of a main-only tool TOOL_MAIN_ONLY. Nothing ran, so under `approval: warn`
    # neither carries the note "this call was not confirmed by a person" (as TOOL_NOT_LOADED and
    # the other refusals do not). The main agent then loads the tool and calls it on its next
    # request: it runs, with the note.
    d = await daemon_factory(config={**faux(SUB_SCRIPT), "mcpServers": {"t": mcp_server()},
                                     "tools": {"deferred": ["mcp__*"], "policy": {"*": {"approval": "warn"}}}})
    token = await d.pair("second-pass", strong=True)
    sid = await d.new_session(token)
    for rid, text in (("r1", "DELEGATE"), ("r2", "MAIN-ONLY")):
        await d.submit(token, sid, rid, text)
        await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    sub = {e["body"]["name"]: e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] != "main"}
    assert sub["capability_search"]["structured_content"]["matches"] == [], sub["capability_search"]
    assert sub["mcp__t__echo"]["error_code"] == "TOOL_UNKNOWN" and sub["ask_user"]["error_code"] == "TOOL_MAIN_ONLY"
    for name in ("mcp__t__echo", "ask_user"):
        assert [p["text"] for p in sub[name]["content"]] == [
            f"TOOL_UNKNOWN: no tool named '{name}' is available to this agent" if name == "mcp__t__echo"
            else f"TOOL_MAIN_ONLY: {name} is available to the main agent only"], sub[name]
    assert "policy warning" in sub["capability_search"]["content"][-1]["text"]  # (it ran)
    assert not [e for e in events if e["kind"] == "capability.loaded"]

    await d.submit(token, sid, "r3", "LOAD")
    await d.wait_idle(token, sid)
    main = [b for b in finished(await d.events(token, sid)) if b["name"] == "mcp__t__echo"]
    assert main[-1]["status"] == "ok" and main[-1]["content"][0] == {"type": "text", "text": "echo: from main"}
    assert "policy warning: mcp__t__echo runs under approval 'warn'" in main[-1]["content"][-1]["text"]
    inv = await inventory(d, token, sid)
    assert inv["loaded"] == ["mcp__t__echo"]
