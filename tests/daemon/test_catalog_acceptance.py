"""F-TOOL-3..6 read as a client author reads them, checked through the daemon's HTTP only: the
inventory a client fetches, sessions driven by the ``faux`` provider (or a loopback
OpenAI-compatible server, to read the tool list a request carried), MCP servers started from the
config as real child processes, skills in a real workspace read by a real executor. Each test
takes one sentence of the spec and its limits (exactly at the limit and one past it)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import trio

from ..mcp.conftest import SERVER
from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, DaemonFactory, error_of, run_tool
from .test_tool_catalog_http import inventory, offered

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}


def mcp_server(*flags: str, **kw: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER, *flags], **kw}


async def test_mcp_names_of_64_characters_are_sent_as_they_are_and_one_past_under_an_alias(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # F-TOOL-5 with F-MOD-3: a server name of 32 characters (the longest the config takes) and
    # tools whose `mcp__<server>__<tool>` name is 64 characters (native), 65 (aliased) and one
    # with a character outside [A-Za-z0-9_-] (aliased). The request carries the alias, the call
    # made under it reaches the server's tool, and history keeps the internal id.
    server = "s" * 32
    at, past = "t" * (64 - len(f"mcp__{server}__")), "u" * (65 - len(f"mcp__{server}__"))
    full_at, full_past, dotted = f"mcp__{server}__{at}", f"mcp__{server}__{past}", f"mcp__{server}__some.tool"
    assert len(full_at) == 64 and len(full_past) == 65
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config={
        "providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "models": [{"id": "chat-test"}]}],
        "defaultModel": "loop/chat-test", "tools": {"eager": ["mcp__*"]},
        "mcpServers": {server: mcp_server("--dotted", "--named", at, "--named", past)}})
    token = await d.pair("catalog-client", strong=True)
    inv = await inventory(d, token)
    gaps = {g["name"]: g["alias"] for g in inv["mappingGaps"]}
    assert full_at in inv["runtimeRegistry"] and full_past in inv["runtimeRegistry"]
    assert full_at not in gaps and set(gaps) >= {full_past, dotted}
    assert all(len(alias) <= 64 and alias.replace("_", "").replace("-", "").isalnum() for alias in gaps.values())
    alias = gaps[full_past]
    loop.push(chat_stream(calls=[("call_1", alias, {"text": "one past"}), ("call_2", full_at, {"text": "at"})]),
              chat_stream(text="done"))
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "call them")
    await d.wait_idle(token, sid)
    names = offered(loop.bodies[0])
    assert full_at in names and alias in names and gaps[dotted] in names
    assert full_past not in names and dotted not in names
    finished = {e["body"]["name"]: e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"}
    assert finished[full_past]["content"] == [{"type": "text", "text": f"{past}: one past"}]
    assert finished[full_at]["content"] == [{"type": "text", "text": f"{at}: at"}]


async def test_an_mcp_server_writing_garbage_mid_call_is_a_clear_error_and_the_daemon_serves_on(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={**FAUX, "mcpServers": {
        "g": mcp_server(maxRestarts=0), "missing": {"command": "/nonexistent/lens-mcp-server", "maxRestarts": 0}}})
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "mcp__g__garbage", {})
    assert body["is_error"] and body["error_code"] == "MCP_SERVER_UNAVAILABLE"
    assert "MCP server 'g'" in body["content"][0]["text"] and "not JSON" in body["content"][0]["text"]
    body = await run_tool(d, token, sid, "r2", "mcp__missing__echo", {})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE" and "/nonexistent/lens-mcp-server" in body["content"][0]["text"]
    body = await run_tool(d, token, sid, "r3", "get_system_time", {})
    assert body["status"] == "ok"
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    assert servers["g"]["status"] == "failed" and "not JSON" in servers["g"]["error"]
    assert servers["missing"]["status"] == "failed" and "cannot start" in servers["missing"]["error"]
    assert (await d.get("/health")).status_code == 200


async def test_the_inventory_names_every_part_f_tool_4_lists_with_each_fields_source(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={**FAUX, "mcpServers": {"m": mcp_server()},
                                     "tools": {"deferred": ["sleep_milliseconds"],
                                               "policy": {"run_command": {"approval": "warn"}}}})
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {
        "run_command": {"paramRestrictions": {"timeout_ms": {"max": 1000}}}}})
    assert r.status_code == 200, r.text
    inv = await inventory(d, token, sid)
    for key in ("catalog", "defaultAllowed", "runtimeRegistry", "extensionSurfaces", "loaded", "searchable",
                "mcpServers", "mappingGaps", "visibility", "executionProfile"):
        assert key in inv, key
    assert inv["session"] == sid and inv["searchable"] == ["sleep_milliseconds"] and inv["loaded"] == []
    assert inv["extensionSurfaces"]["sources"] == {"native": len(inv["catalog"]) - 11, "mcp": 11}
    profile = inv["executionProfile"]["run_command"]
    assert profile["enabled"]["source"] == "default" and profile["approval"] == {"value": "warn", "source": "config"}
    assert profile["paramRestrictions"] == {"value": {"timeout_ms": {"max": 1000.0}}, "source": "session"}
    without = await inventory(d, token)  # no session: the config's profile
    assert without["session"] is None and without["executionProfile"]["run_command"]["paramRestrictions"]["source"] == "default"
    r = await d.get("/tools/inventory", token, params={"session": "ses_nobody"})
    assert r.status_code == 404 and error_of(r) == "SESSION_NOT_FOUND"
    for bad in ("", "not an id", "ses_" + "x" * 300):
        r = await d.get("/tools/inventory", token, params={"session": bad})
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (bad[:20], r.status_code, r.text)
        assert "session" in r.json()["error"]["message"], r.text


SKILL_SCRIPT = [{"when": "LIST", "toolCalls": [{"name": "skill", "arguments": {}}]},
                {"when": "LOAD-TEN", "toolCalls": [{"name": "skill", "arguments": {"name": "ten"}}]},
                {"when": "LOAD-ELEVEN", "toolCalls": [{"name": "skill", "arguments": {"name": "eleven"}}]},
                {"when": "LOAD-LINKED", "toolCalls": [{"name": "skill", "arguments": {"name": "linked"}}]},
                {"when": "LOAD-DEEP", "toolCalls": [{"name": "skill", "arguments": {"name": "deep"}}]}]


async def test_skills_of_the_three_roots_are_listed_with_load_state_and_resources_sampled_up_to_10(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"providers": [{"id": "faux", "protocol": "faux", "script": SKILL_SCRIPT}],
                                     "defaultModel": "faux/faux-1"})
    token = await d.pair("skill-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    for root, name, count in (("skills", "ten", 10), (".agents/skills", "eleven", 11)):
        (ws / root / name / "refs").mkdir(parents=True)
        (ws / root / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {count} resources\n---\nUSE-{name}\n")
        for i in range(count):
            (ws / root / name / "refs" / f"r{i:02d}.md").write_text("x\n")
    # (samples are read 3 levels down: a file below is not sampled, but there is more than was shown)
    (ws / "skills" / "deep" / "a" / "b" / "c").mkdir(parents=True)
    (ws / "skills" / "deep" / "SKILL.md").write_text("USE-deep\n")
    (ws / "skills" / "deep" / "a" / "b" / "shown.md").write_text("x\n")
    (ws / "skills" / "deep" / "a" / "b" / "c" / "below.md").write_text("x\n")
    (ws / ".codex" / "skills" / "plain").mkdir(parents=True)
    (ws / ".codex" / "skills" / "plain" / "SKILL.md").write_text("No front matter at all.\n")
    (ws / "elsewhere" / "linked").mkdir(parents=True)
    (ws / "elsewhere" / "linked" / "SKILL.md").write_text("---\nname: linked\n---\nLINKED\n")
    os.symlink("../elsewhere/linked", ws / "skills" / "linked")
    sid = (await d.session(token, project["id"]))["id"]

    async def result(rid: str, text: str) -> dict[str, Any]:
        await d.submit(token, sid, rid, text)
        await d.wait_idle(token, sid)
        return [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"][-1]

    listed = (await result("r1", "LIST"))["structured_content"]["skills"]
    assert [(s["name"], s["base_dir"], s["loaded"]) for s in listed] == [
        ("deep", "skills/deep", False), ("ten", "skills/ten", False), ("eleven", ".agents/skills/eleven", False), ("plain", ".codex/skills/plain", False)]
    ten = (await result("r2", "LOAD-TEN"))["structured_content"]
    assert ten["resources"] == [f"refs/r{i:02d}.md" for i in range(10)] and ten["more_resources"] is False
    eleven = await result("r3", "LOAD-ELEVEN")
    assert eleven["structured_content"]["resources"] == [f"refs/r{i:02d}.md" for i in range(10)]
    assert eleven["structured_content"]["more_resources"] is True
    assert ".agents/skills/eleven" in eleven["content"][0]["text"]  # the resource base dir
    linked = await result("r4", "LOAD-LINKED")
    assert linked["is_error"] and "linked" in linked["content"][0]["text"]
    deep = (await result("r5", "LOAD-DEEP"))["structured_content"]
    assert deep["resources"] == ["a/b/shown.md"] and deep["more_resources"] is True
    listed = (await result("r6", "LIST"))["structured_content"]["skills"]
    assert {s["name"]: s["loaded"] for s in listed} == {"deep": True, "ten": True, "eleven": True, "plain": False}
    view = await d.view(token, sid)
    system = [it["text"] for it in view["items"] if it.get("role") == "system" and "USE-" in (it.get("text") or "")]
    assert len(system) == 3 and "USE-ten" in system[0] and "USE-eleven" in system[1] and "USE-deep" in system[2]
