"""Programmatic tool runs calling MCP tools in a running daemon (F-TOOL-3 with F-TOOL-5): a
program calls a real stdio MCP server's tools (tests/mcp/server.py) through the faux model's
session, gets their text, structured results, images and failures, and a program cut off by its
time limit or by an abort cancels the call in flight at the server and says which call it was."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from runtime.providers.names import alias_for

from ..mcp.conftest import SERVER
from .conftest import DaemonFactory, run_tool, wait_until

PTC = "programmatic_tool_run"


def server(*flags: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER, *flags], **extra}


async def test_a_program_calls_many_mcp_tools_and_sees_their_results_and_failures(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"localPtc": {}, "mcpServers": {"t": server()}})
    token = await d.pair("ptc-mcp", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    program = ("print(mcp__t__echo(text='hi'))\n"
               "print(mcp__t__add(a=1, b=2)['sum'])\n"
               "print(mcp__t__image())\n"
               "for name in ['mcp__t__fail', 'mcp__t__rpc_error']:\n"
               "    try:\n"
               "        call_tool(name, {})\n"
               "    except ToolError as e:\n"
               "        print(name, e.code)\n")
    body = await run_tool(d, token, sid, "r1", PTC, {"code": program})
    assert body["status"] == "ok", body
    assert body["content"][0]["text"] == ("echo: hi\n3\na pixel\nmcp__t__fail MCP_TOOL_ERROR\n"
                                          "mcp__t__rpc_error MCP_REQUEST_FAILED\n")
    image = body["content"][1]
    assert image["type"] == "image" and image["mime"] == "image/png"  # (the image goes with the result)
    r = await d.get(f"/artifacts/{image['artifact_id']}", token)
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG")
    assert [(c["name"], c["ok"], c.get("error_code")) for c in body["structured_content"]["calls"]] == [
        ("mcp__t__echo", True, None), ("mcp__t__add", True, None), ("mcp__t__image", True, None),
        ("mcp__t__fail", False, "MCP_TOOL_ERROR"), ("mcp__t__rpc_error", False, "MCP_REQUEST_FAILED")]


async def test_a_program_past_its_time_limit_cancels_its_mcp_call_and_lists_it_as_cut_off(
        daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    log = tmp_path / "cancelled.log"
    d = await daemon_factory(config={"localPtc": {}, "mcpServers": {"t": server("--cancel-log", str(log))}})
    token = await d.pair("ptc-mcp", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", PTC, {"code": "print(mcp__t__echo(text='a'))\nmcp__t__slow()",
                                                     "timeout_ms": 1000})
    assert body["error_code"] == "PTC_TIMEOUT" and body["content"][0]["text"].startswith("echo: a\n")
    root = body["call_id"]
    # every call is listed with ok and error_code, also the one the time limit cut off
    assert body["structured_content"]["calls"] == [
        {"call_id": f"{root}.1", "name": "mcp__t__echo", "ok": True},
        {"call_id": f"{root}.2", "name": "mcp__t__slow", "ok": False, "error_code": "PTC_TIMEOUT"}]

    async def cancelled() -> bool:
        return log.exists() and bool(log.read_text().strip())
    await wait_until(cancelled, what="the server seeing notifications/cancelled")

    # an abort mid-call cancels it at the server too, and the server serves the next program
    await d.submit(token, sid, "r2", f"/tool {PTC} " + json.dumps({"code": "mcp__t__slow()"}))
    await d.wait_running_call(token, sid)
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)

    async def both() -> bool:
        return len(log.read_text().split()) == 2
    await wait_until(both, what="the second cancel at the server")
    finished = [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"]
    assert finished[-1]["status"] == "interrupted" and finished[-1]["error_code"] == "ABORTED"
    body = await run_tool(d, token, sid, "r3", PTC, {"code": "print(mcp__t__echo(text='after'))"})
    assert body["content"][0]["text"] == "echo: after\n"


async def test_a_programs_call_of_the_alias_of_a_tool_whose_server_is_down_is_listed_under_the_tools_id(
        daemon_factory: DaemonFactory) -> None:
    # F-MOD-3: a program may call a tool by the digest alias the model is offered. Once the
    # tool's server failed the tool left the registry, and the program's call was listed under
    # the alias; it is listed under the tool's id, as a call the model makes is.
    d = await daemon_factory(config={"localPtc": {}, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"t": server("--dotted", maxRestarts=0)}})
    token = await d.pair("ptc-mcp", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    assert (await run_tool(d, token, sid, "r1", "mcp__t__crash", {}))["error_code"] == "MCP_SERVER_UNAVAILABLE"

    async def failed() -> bool:
        r = await d.get("/tools/inventory", token)
        return r.json()["mcpServers"][0]["status"] == "failed"
    await wait_until(failed, what="server t failed for good")
    alias = alias_for("mcp__t__some.tool")
    program = ("try:\n"
               f"    call_tool({alias!r}, {{}})\n"
               "except ToolError as e:\n"
               "    print(e.code)\n")
    body = await run_tool(d, token, sid, "r2", PTC, {"code": program})
    assert body["content"][0]["text"] == "MCP_SERVER_UNAVAILABLE\n", body
    assert [(c["name"], c["ok"], c.get("error_code")) for c in body["structured_content"]["calls"]] == [
        ("mcp__t__some.tool", False, "MCP_SERVER_UNAVAILABLE")]


async def test_a_program_calls_a_tool_by_its_further_alias_and_the_other_by_its_own_name(
        daemon_factory: DaemonFactory) -> None:
    # F-MOD-3: `some.tool` travels as `mcp__t__some_tool_<digest>`, a name the same server gives a
    # tool of its own; that tool keeps it and `some.tool` is offered under a further alias. A
    # program calls each by the name the model is offered, and each call reaches its own tool.
    dotted = "mcp__t__some.tool"
    alias = alias_for(dotted)
    d = await daemon_factory(config={"localPtc": {}, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"t": server("--named", "some.tool",
                                                                "--named", alias.removeprefix("mcp__t__"))}})
    token = await d.pair("ptc-mcp", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    further = {t["name"]: t["nativeName"] for t in (await d.get("/tools/inventory", token)).json()["tools"]}[dotted]
    assert further not in (dotted, alias)
    program = (f"print(call_tool({further!r}, {{'text': 'dotted'}}))\n"
               f"print(call_tool({alias!r}, {{'text': 'exact'}}))\n")
    body = await run_tool(d, token, sid, "r1", PTC, {"code": program})
    assert body["content"][0]["text"] == f"some.tool: dotted\n{alias.removeprefix('mcp__t__')}: exact\n", body
    assert [(c["name"], c["ok"]) for c in body["structured_content"]["calls"]] == [(dotted, True), (alias, True)]
