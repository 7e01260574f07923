"""MCP servers in a running daemon (F-TOOL-5, F-TOOL-4): the daemon starts the configured stdio
servers (the real test server, ``tests/mcp/server.py``), a faux-model session calls their tools
as ``mcp__<server>__<tool>``, the inventory reports servers and tools, a server that cannot start
is reported and its tools answer ``MCP_SERVER_UNAVAILABLE``, an abort cancels a running MCP call
at the server, and stopping the daemon leaves no server process."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime.providers.names import alias_for, is_native

from ..mcp.conftest import SERVER
from ..procfs import alive
from ..providers.scripts import reply
from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, DaemonFactory, finished, run_lens, run_tool, sdks_ready, stop_daemon, wait_until


def server(*flags: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER, *flags], **extra}


async def inventory(d: Daemon, token: str) -> dict[str, Any]:
    r = await d.get("/tools/inventory", token)
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_session_calls_an_mcp_tool_and_the_inventory_lists_it(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"mcpServers": {"t": server(), "broken": server("--exit-at-start", maxRestarts=0),
                                                    "off": server(enabled=False)}})
    token = await d.pair("mcp-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]

    body = await run_tool(d, token, sid, "r1", "mcp__t__echo", {"text": "hello over stdio"})
    assert body["status"] == "ok" and body["content"] == [{"type": "text", "text": "echo: hello over stdio"}]
    started = [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.started"]
    assert started[-1]["name"] == "mcp__t__echo" and started[-1]["replay_safe"] is False
    view = await d.view(token, sid)
    assert any("echo: hello over stdio" in json.dumps(it) for it in view["items"])  # the model was given it

    body = await run_tool(d, token, sid, "r2", "mcp__t__image", {})
    aid = body["content"][1]["artifact_id"]
    assert body["content"][1] == {"type": "image", "artifact_id": aid, "mime": "image/png"}
    stored = [e["body"] for e in await d.events(token, sid) if e["kind"] == "artifact.stored"]
    assert stored[-1]["artifact_id"] == aid and stored[-1]["source"] == "mcp"
    r = await d.get(f"/artifacts/{aid}", token)
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG")

    body = await run_tool(d, token, sid, "r3", "mcp__t__fail", {})
    assert body["is_error"] and body["error_code"] == "MCP_TOOL_ERROR"
    body = await run_tool(d, token, sid, "r4", "mcp__broken__anything", {})
    assert body["is_error"] and body["error_code"] == "MCP_SERVER_UNAVAILABLE"
    assert "MCP server 'broken' failed: initialize failed: the server exited with status 7" in body["content"][0]["text"]

    inv = await inventory(d, token)
    tools = {t["name"]: t for t in inv["tools"]}
    assert tools["mcp__t__echo"]["source"] == "mcp" and tools["read_file"]["source"] == "native"
    assert tools["mcp__t__echo"]["visibleToSubagents"] and not tools["mcp__t__echo"]["replaySafe"]
    assert tools["mcp__t__add"]["readOnly"] and not tools["mcp__t__echo"]["readOnly"]
    assert tools["mcp__t__echo"]["inputSchema"]["required"] == ["text"]
    servers = {s["name"]: s for s in inv["mcpServers"]}
    assert servers["t"]["status"] == "running" and servers["t"]["toolCount"] == 11
    assert servers["t"]["stderrTail"] == "" and servers["t"]["pid"] > 0
    assert servers["broken"]["status"] == "failed" and servers["broken"]["toolCount"] == 0
    assert "the server exited with status 7" in servers["broken"]["error"]
    assert "cannot start: missing settings" in servers["broken"]["stderrTail"]
    assert servers["off"]["status"] == "disabled"
    assert not any(name.startswith(("mcp__broken__", "mcp__off__")) for name in tools)


async def test_a_server_crashing_in_a_call_is_reported_and_its_tools_answer_unavailable(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"mcpServers": {"t": server(maxRestarts=0)}})
    token = await d.pair("mcp-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "mcp__t__crash", {})
    assert body["is_error"] and body["error_code"] == "MCP_SERVER_UNAVAILABLE"
    assert "stopped during the call (the server exited with status 3)" in body["content"][0]["text"]

    async def failed() -> dict[str, Any] | None:
        inv = await inventory(d, token)
        return inv if inv["mcpServers"][0]["status"] == "failed" else None
    inv = await wait_until(failed, what="the server reported failed")
    t = inv["mcpServers"][0]
    assert t["toolCount"] == 0 and t["error"] == "the server exited with status 3"
    assert "crashing now, on purpose" in t["stderrTail"]
    assert not any(tool["source"] == "mcp" for tool in inv["tools"])
    body = await run_tool(d, token, sid, "r2", "mcp__t__echo", {"text": "anyone?"})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE"
    assert body["content"][0]["text"] == ("MCP_SERVER_UNAVAILABLE: mcp__t__echo: MCP server 't' failed: "
                                          "the server exited with status 3")


async def test_an_abort_cancels_a_running_mcp_call_at_the_server(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    log = tmp_path / "cancelled.log"
    d = await daemon_factory(config={"mcpServers": {"t": server("--cancel-log", str(log))}})
    token = await d.pair("mcp-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "/tool mcp__t__slow {}")
    await d.wait_running_call(token, sid)
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)

    async def seen() -> bool:
        return log.exists() and bool(log.read_text().strip())
    await wait_until(seen, what="the server seeing notifications/cancelled")
    body = await run_tool(d, token, sid, "r2", "mcp__t__echo", {"text": "after"})  # the server is still usable
    assert body["content"][0]["text"] == "echo: after"


async def test_stopping_the_daemon_leaves_no_server_process(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    d = await daemon_factory(config={"mcpServers": {"t": server("--pidfile", str(pidfile), "--child")}})
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    await stop_daemon(d)

    async def gone() -> bool:
        return not any(alive(p) for p in pids)
    await wait_until(gone, what="no server process left")


async def test_a_server_that_never_answers_does_not_hold_the_start_past_its_timeout(daemon_factory: DaemonFactory) -> None:
    with trio.fail_after(8):
        d = await daemon_factory(config={"mcpServers": {
            "mute": server("--hang", startupTimeoutSeconds=0.5, maxRestarts=0), "t": server()}})
    token = await d.pair("mcp-client", strong=True)
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    assert servers["mute"]["status"] == "failed"
    assert servers["mute"]["error"] == "the server did not answer initialize within 0.5 s"
    assert servers["t"]["status"] == "running"


async def test_lens_serve_refuses_a_bad_mcp_server_entry(tmp_path: Path) -> None:
    (tmp_path / "c.jsonc").write_text(json.dumps({"mcpServers": {"my server": {"command": "x"}}}))
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "lens: CONFIG_INVALID: c.jsonc: mcpServers['my server']: a server name is 1 to 32 ASCII letters" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]
    (tmp_path / "c.jsonc").write_text('{"mcpServers": {"a": {"command": "x", "envFrom": "TOKEN"}}}')
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
    assert out.returncode == 2 and "lens: CONFIG_INVALID: " in out.stderr and "envFrom" in out.stderr, out.stderr


def chat_config(loop: ScriptedServer, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the default model a Chat Completions model of the started ``loop``."""
    return {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{loop.url}/v1",
                           "models": [{"id": "chat-test"}]}], "defaultModel": "loop/chat-test", **config}


async def chat_session(daemon_factory: DaemonFactory, nursery: trio.Nursery, config: dict[str, Any],
                       *replies: Any) -> tuple[ScriptedServer, Daemon, str, str]:
    """A daemon with ``config`` whose default model is a loopback Chat Completions server scripted
    with ``replies`` (:func:`chat_config`), a strong credential, a new session, and the SDKs'
    one-off import waited for (11 to 29 s on a loaded host, bounded apart from the turn)."""
    loop = ScriptedServer()
    await loop.start(nursery)
    loop.push(*replies)
    d = await daemon_factory(config=chat_config(loop, config))
    token = await d.pair("mcp-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await sdks_ready()
    return loop, d, token, sid


async def test_a_real_provider_sees_a_digest_alias_and_the_call_reaches_the_mcp_tool(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # F-MOD-3: "mcp__my-server__some.tool" is not a native tool name (the dot); the model is
    # offered a stable alias, and its call under the alias runs the MCP tool by its internal id.
    internal = "mcp__my-server__some.tool"
    alias = alias_for(internal)
    assert alias != internal and is_native(alias)
    loop, d, token, sid = await chat_session(daemon_factory, nursery, {"mcpServers": {"my-server": server("--dotted")}},
                                             chat_stream(calls=[("call_1", alias, {})]), chat_stream(text="done"))
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    offered = [tool["function"]["name"] for tool in loop.bodies[0]["tools"]]
    assert alias in offered and internal not in offered
    assert "mcp__my-server__echo" in offered  # (already native: sent as is)
    events = await d.events(token, sid)
    started = [e["body"] for e in events if e["kind"] == "tool.started"]
    assert [s["name"] for s in started] == [internal]
    assert finished(events)[-1]["content"] == [{"type": "text", "text": "some.tool ran"}]
    history_calls = [c["function"]["name"] for m in loop.bodies[1]["messages"] for c in m.get("tool_calls") or []]
    assert history_calls == [alias]


NATIVE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def offered_names(protocol: str, body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] if protocol == "openai-chat" else tool["name"] for tool in body["tools"]]


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
async def test_mcp_tools_of_a_long_or_non_ascii_name_are_offered_as_aliases_on_every_protocol(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, protocol: str) -> None:
    # F-MOD-3 as a stranger tests it: an MCP tool whose id is past 64 characters, and one named
    # in Chinese. Every name each protocol is offered is native ([A-Za-z0-9_-], at most 64, all
    # different); the model's calls under the aliases reach the server under the tool's own name;
    # the log keeps the internal ids, and the history sent back keeps the aliases.
    loop = ScriptedServer()
    url = await loop.start(nursery)
    long_id = "mcp__weather-station-server__read_the_weather_forecast_for_the_whole_week"
    i18n_id = "mcp__weather-station-server__天气查询"
    assert len(long_id) > 64
    aliases = [alias_for(long_id), alias_for(i18n_id)]
    loop.push(reply(protocol, calls=[("call_1", aliases[0], {}), ("call_2", aliases[1], {})]),
              reply(protocol, text=["done"], rid="r2"))
    base = f"{url}/v1" if protocol != "anthropic" else url
    d = await daemon_factory(config={
        "providers": [{"id": "loop", "protocol": protocol, "baseUrl": base, "maxRetries": 0,
                       "models": [{"id": "m"}]}],
        "defaultModel": "loop/m",
        "mcpServers": {"weather-station-server": server("--long-name", "--i18n")},
        "tools": {"mcpDeferAbove": 100}})  # (all offered eagerly: more than 16 are deferred by default)
    token = await d.pair("mcp-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await sdks_ready()  # (the first turn's one-off import, 11 to 29 s on a loaded host, bounded apart)
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    offered = offered_names(protocol, loop.bodies[0])
    assert all(NATIVE.fullmatch(n) for n in offered) and len(set(offered)) == len(offered), offered
    assert set(aliases) <= set(offered) and long_id not in offered and i18n_id not in offered, (aliases, offered)
    events = await d.events(token, sid)
    assert [e["body"]["name"] for e in events if e["kind"] == "tool.started"] == [long_id, i18n_id]
    results = finished(events)
    assert results[0]["content"] == [{"type": "text", "text": "the long-named tool ran"}], results[0]
    # (the test server knows no tool of that name: its refusal quotes the name it was called by)
    assert "unknown tool 天气查询" in json.dumps(results[1], ensure_ascii=False), results[1]
    # (the tools' descriptions name the capability id, on purpose: the history is what is checked)
    history = json.dumps({k: v for k, v in loop.bodies[1].items() if k != "tools"}, ensure_ascii=False)
    for internal in (long_id, i18n_id):
        at = history.find(internal)
        assert at < 0, history[max(0, at - 300):at + 200]
    assert all(a in history for a in aliases)
    assert offered_names(protocol, loop.bodies[1]) == offered  # the same names on the next request


async def test_a_model_calling_the_alias_or_the_id_of_a_tool_not_offered_gets_that_tools_answer(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # F-MOD-3: a model called the alias of the deferred "mcp__srv__some.tool" before loading it:
    # the log kept the alias as the tool's name and the call answered TOOL_UNKNOWN (the alias is
    # no tool of the catalog), where the tool's own id answered TOOL_NOT_LOADED. The two names
    # in the history then failed every later request (TOOL_NAME_COLLISION). Now the alias's
    # call is recorded under the id and answers as the tool; loaded, both names run it.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    loop, d, token, sid = await chat_session(
        daemon_factory, nursery, {"tools": {"deferred": [dotted]}, "mcpServers": {"srv": server("--dotted")}},
        chat_stream(calls=[("c1", alias, {}), ("c2", dotted, {}), ("c3", "mcp__srv__Echo", {"text": "x"})]),
        chat_stream(calls=[("c4", "capability_search", {"query": "some tool", "limit": 1})]),
        chat_stream(calls=[("c5", alias, {}), ("c6", dotted, {})]),
        chat_stream(text="done"))
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    assert not [e for e in events if e["kind"] == "model.failed"], [e["body"] for e in events if e["kind"] == "model.failed"]
    done = {b["call_id"]: b for b in finished(events)}
    assert [done[c]["name"] for c in ("c1", "c2", "c5", "c6")] == [dotted] * 4
    assert done["c1"]["error_code"] == done["c2"]["error_code"] == "TOOL_NOT_LOADED"
    assert done["c3"]["error_code"] == "TOOL_UNKNOWN"  # (names differ by case: another name, no tool)
    assert done["c4"]["structured_content"]["loaded"] == [dotted]
    assert done["c5"]["content"] == done["c6"]["content"] == [{"type": "text", "text": "some.tool ran"}]
    assert len(loop.bodies) == 4 and alias in offered_names("openai-chat", loop.bodies[2])
    assert alias not in offered_names("openai-chat", loop.bodies[0])


async def test_a_capability_search_for_a_tools_alias_loads_that_tool(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # The model knows "mcp__srv__some.tool" by its alias (offered so to it, or to the agent that
    # named it): searched by that name, the tool got no exact-name bonus (the alias is no name
    # of the catalog; its digest is no word of the id) and tied with "mcp__srv__some-tool" on the
    # words both share, the tie going by name: the search loaded the other tool.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    loop, d, token, sid = await chat_session(
        daemon_factory, nursery,
        {"tools": {"deferred": ["mcp__srv__*"]}, "mcpServers": {"srv": server("--dotted", "--named", "some-tool")}},
        chat_stream(calls=[("c1", "capability_search", {"query": alias, "limit": 1})]),
        chat_stream(calls=[("c2", alias, {})]),
        chat_stream(text="done"))
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    done = {b["call_id"]: b for b in finished(await d.events(token, sid))}
    found = done["c1"]["structured_content"]
    assert found["loaded"] == [dotted], found
    assert [m["name"] for m in found["matches"]] == [dotted]
    assert done["c2"]["name"] == dotted and done["c2"]["content"] == [{"type": "text", "text": "some.tool ran"}]
    assert alias in offered_names("openai-chat", loop.bodies[1])


async def test_a_subagent_started_with_a_tools_list_naming_an_alias_has_that_tool(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # The main model is offered "mcp__srv__some.tool" as its alias and names it so in a
    # subagent's tools list: that was refused ("there is no tool mcp__srv__some_tool_…").
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    loop, d, token, sid = await chat_session(
        daemon_factory, nursery, {"mcpServers": {"srv": server("--dotted")}},
        chat_stream(calls=[("c1", "subagent", {"prompt": "run it", "tools": [alias, "read_file"]})]),
        chat_stream(calls=[("c2", alias, {})]), chat_stream(text="sub done"), chat_stream(text="done"))
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    started = [e for e in events if e["kind"] == "agent.started"]
    assert [e["body"]["tools"] for e in started] == [[dotted, "read_file"]], [e["body"] for e in finished(events)]
    assert sorted(offered_names("openai-chat", loop.bodies[1])) == sorted([alias, "read_file"])
    done = {b["call_id"]: b for b in finished(events)}
    assert done["c2"]["name"] == dotted and done["c2"]["content"] == [{"type": "text", "text": "some.tool ran"}]
    assert done["c1"]["status"] == "ok"


async def test_a_daemon_stopped_during_an_mcp_call_reports_it_interrupted_at_the_next_start(
        daemon_factory: DaemonFactory) -> None:
    # Shutdown stops the servers while it cancels the sessions: the call was recorded as
    # MCP_SERVER_UNAVAILABLE ("stopped during the call") and the agent went on asking its model
    # during the shutdown. A cancelled call records nothing; the next start says it was interrupted.
    config = {"mcpServers": {"t": server()}}
    d = await daemon_factory(config=config)
    token = await d.pair("mcp-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "/tool mcp__t__slow {}")
    await d.wait_running_call(token, sid)
    await stop_daemon(d)
    d2 = await daemon_factory(root=d.root, config=config)
    await d2.wait_idle(token, sid)
    bodies = finished(await d2.events(token, sid))
    assert [(b["name"], b["error_code"]) for b in bodies] == [("mcp__t__slow", "INTERRUPTED")]


async def daemon_with_chat_model(daemon_factory: DaemonFactory, nursery: trio.Nursery,
                                 config: dict[str, Any]) -> tuple[ScriptedServer, Daemon, str]:
    """A daemon with ``config`` whose default model is a loopback Chat Completions server scripted
    to answer "fine" once (its request bodies show what was offered), and a strong credential."""
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(chat_stream(text="fine"))
    d = await daemon_factory(config={
        "providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "models": [{"id": "chat-test"}]}],
        "defaultModel": "loop/chat-test", **config})
    return loop, d, await d.pair("mcp-client", strong=True)


async def test_a_server_writing_text_strict_json_refuses_breaks_neither_the_inventory_nor_the_sessions(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # A tool description holding a lone surrogate crashed every session's actor at its first model
    # request (quarantined after 3 tries), an infinite number in a schema failed every request, and
    # the inventory answered 500.
    loop, d, token = await daemon_with_chat_model(daemon_factory, nursery, {"mcpServers": {"t": server("--bad-json")}})
    r = await d.get("/tools/inventory", token)
    assert r.status_code == 200, r.text
    servers = r.json()["mcpServers"]
    assert servers[0]["serverInfo"]["name"] == "lens-test-server?"
    assert {"inf_schema", "sur_schema"} <= {s["name"] for s in servers[0]["skippedTools"]}
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    view = await d.wait_idle(token, sid)
    kinds = [e["kind"] for e in await d.events(token, sid)]
    assert view["status"] == "idle" and "model.responded" in kinds and "model.failed" not in kinds, kinds
    offered = {tool["function"]["name"]: tool["function"] for tool in loop.bodies[0]["tools"]}
    assert offered["mcp__t__odd_text"]["description"] == "text ? here" and "mcp__t__inf_schema" not in offered


async def test_a_tool_list_past_100_pages_is_reported_cut(daemon_factory: DaemonFactory,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    # The 101st page and later were not read, and neither the inventory nor the log said so.
    caplog.set_level("WARNING", logger="lens.mcp")
    d = await daemon_factory(config={"mcpServers": {"long": server("--page-size", "1", "--many", "100"),
                                                    "short": server("--page-size", "1")}})
    token = await d.pair("mcp-client", strong=True)
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    long = servers["long"]  # (113 tools on 113 pages: the first 100 read, two of them unusable)
    assert long["status"] == "running" and long["toolCount"] == 98 and long["tools"][-1] == "mcp__long__t86"
    assert long["listCut"] == ("tools/list was read up to 100 pages (100 page(s), 100 tool(s)); the server offered "
                               "more pages, which were not read: their tools are not available")
    assert servers["short"]["listCut"] is None and servers["short"]["toolCount"] == 11
    assert f"MCP server long: {long['listCut']}" in caplog.messages


async def test_a_tool_list_ends_at_an_empty_cursor_and_at_a_cursor_given_again(
        daemon_factory: DaemonFactory, caplog: pytest.LogCaptureFixture) -> None:
    # A last page with `nextCursor: ""` (servers write it for "no more pages") or with a cursor
    # the server gave already was asked for again, 100 pages in all: every tool came back "listed
    # twice" (hundreds of skipped entries for 13 tools) and the listing was reported cut, its
    # tools "not available". The empty cursor ends the list; a cursor given again ends it, said so.
    caplog.set_level("WARNING", logger="lens.mcp")
    d = await daemon_factory(config={"tools": {"eager": ["mcp__*"]}, "mcpServers": {
        "empty": server("--page-size", "4", "--last-cursor", ""),
        "again": server("--page-size", "4", "--last-cursor", "8")}})
    token = await d.pair("mcp-client", strong=True)
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    unusable = [{"name": "bad schema", "reason": "the name holds spaces or control characters"},
                {"name": "no_schema", "reason": "inputSchema is not a JSON object schema (type: object)"}]
    for name in ("empty", "again"):  # (13 tools on 4 pages, two of them unusable)
        srv = servers[name]
        assert srv["status"] == "running" and srv["toolCount"] == 11, srv
        assert srv["skippedTools"] == unusable and len(srv["tools"]) == len(set(srv["tools"])) == 11
    assert servers["empty"]["listCut"] is None
    assert servers["again"]["listCut"] == ('tools/list was read up to a cursor the server gave again, "8" (4 page(s), '
                                           "13 tool(s)); asked for, it would list the pages read again: their tools "
                                           "are available")
    assert [m for m in caplog.messages if "tools/list" in m] == [f"MCP server again: {servers['again']['listCut']}"]
    sid = await d.new_session(token)
    body = await run_tool(d, token, sid, "r1", "mcp__again__echo", {"text": "listed once"})
    assert body["content"] == [{"type": "text", "text": "echo: listed once"}], body


async def test_a_tool_whose_schema_nests_too_deep_is_left_out_not_offered(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # A schema nested deep enough to pass the JSON reader but not the SDK's JSON writer (which
    # adds levels around it) was registered: every model request offering it failed with a
    # retryable PROVIDER_ERROR (RecursionError), in every session.
    loop, d, token = await daemon_with_chat_model(daemon_factory, nursery, {
        "mcpServers": {"t": server("--deep", "470"), "ok": server("--deep", "48")}, "tools": {"eager": ["mcp__*"]}})
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    assert servers["t"]["status"] == "running" and "mcp__t__echo" in servers["t"]["tools"]
    assert {"name": "deep", "reason": "inputSchema nests more than 100 levels deep"} in servers["t"]["skippedTools"]
    assert "mcp__ok__deep" in servers["ok"]["tools"]  # (99 levels: offered)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    view = await d.wait_idle(token, sid)
    kinds = [e["kind"] for e in await d.events(token, sid)]
    assert view["status"] == "idle" and "model.responded" in kinds and "model.failed" not in kinds, kinds
    offered = {tool["function"]["name"] for tool in loop.bodies[0]["tools"]}
    assert "mcp__ok__deep" in offered and "mcp__t__deep" not in offered and "mcp__t__echo" in offered


async def test_misbehaving_servers_leave_the_daemon_serving_and_nothing_behind(
        daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    # A server that exits in a call while its child holds the pipes (its call waited for the call
    # timeout, here an hour), one announcing a change after every listing, one that never answers
    # initialize: another session's native tool keeps working, each failure names its server,
    # stopping leaves no process, and the log verifies.
    orphan, flood = tmp_path / "orphan.pids", tmp_path / "flood.pids"
    d = await daemon_factory(config={"mcpServers": {
        "orphan": server("--child", "--pidfile", str(orphan), maxRestarts=0, callTimeoutSeconds=3600),
        "flood": server("--flood", "--page-size", "100", "--pidfile", str(flood)),
        "mute": server("--hang", startupTimeoutSeconds=0.5, maxRestarts=0)}, "tools": {"eager": ["mcp__*"]}})
    token = await d.pair("mcp-client", strong=True)
    project = (await d.project(token))["id"]
    a, b = [(await d.session(token, project))["id"] for _ in range(2)]
    pids = [int(p) for f in (orphan, flood) for p in f.read_text().split()]
    results: dict[str, dict[str, Any]] = {}

    async def call(sid: str, name: str) -> None:
        results[name] = await run_tool(d, token, sid, "r1", name, {})
    async with trio.open_nursery() as both:
        both.start_soon(call, a, "mcp__orphan__crash")
        both.start_soon(call, b, "get_system_time")
    assert results["mcp__orphan__crash"]["error_code"] == "MCP_SERVER_UNAVAILABLE"
    assert ("MCP server 'orphan' stopped during the call (the server exited with status 3)"
            in results["mcp__orphan__crash"]["content"][0]["text"])
    assert not results["get_system_time"]["is_error"]
    body = await run_tool(d, token, b, "r2", "mcp__mute__echo", {})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE" and "MCP server 'mute' failed" in body["content"][0]["text"]
    body = await run_tool(d, token, b, "r3", "mcp__flood__echo", {"text": "still here"})
    assert body["content"] == [{"type": "text", "text": "echo: still here"}]
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    assert servers["orphan"]["status"] == "failed" and servers["orphan"]["error"] == "the server exited with status 3"
    assert servers["flood"]["status"] == "running" and servers["mute"]["status"] == "failed"
    await stop_daemon(d)

    async def gone() -> bool:
        return not any(alive(p) for p in pids)
    await wait_until(gone, what="no server process left")
    verify = await run_lens(d.root, "log", "verify", "--data", "data", check=False)
    assert verify.returncode == 0, (verify.stdout, verify.stderr)
