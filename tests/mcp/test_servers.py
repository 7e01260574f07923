"""MCP servers over stdio (F-TOOL-5), without the daemon: :class:`tools.mcp.McpServers` runs the
real test server (``tests/mcp/server.py``) as a child process and puts its tools into a real
:class:`~tools.base.ToolRegistry`. Every wait is bounded; nothing sleeps for ordering."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime.config import parse_config
from runtime.mcp_config import McpServerConfig
from runtime.providers.names import alias_for
from tools.catalog_names import CatalogNames
from tools.mcp.client import MAX_ANSWERS_QUEUED

from ..procfs import alive
from .conftest import LIMIT, SERVER, srv, wait_for


async def test_tools_enter_the_registry_with_prefixed_names_and_answer(start: Any) -> None:
    r = await start({"t": srv("--page-size", "3")})  # four pages of tools/list
    state = r.state("t")
    assert state["status"] == "running" and state["error"] is None
    assert state["protocolVersion"] == "2025-11-25" and state["serverInfo"]["name"] == "lens-test-server"
    assert state["tools"] == [f"mcp__t__{n}" for n in
                              ("echo", "add", "image", "fail", "rpc_error", "crash", "slow", "big", "grow", "env",
                                       "garbage")]
    assert [s["name"] for s in state["skippedTools"]] == ["bad schema", "no_schema"]
    echo = r.registry.get("mcp__t__echo")
    assert echo is not None and echo.source == "mcp" and not echo.replay_safe and not echo.read_only
    assert echo.input_schema["required"] == ["text"]
    assert r.registry.get("mcp__t__add").read_only  # annotations.readOnlyHint
    # visible to the main agent and to subagents
    assert "mcp__t__echo" in {s.name for s in r.registry.visible(is_main_agent=False)}

    res = await r.call("mcp__t__echo", {"text": "héllo"})
    assert not res.is_error and res.content[0].text == "echo: héllo"
    res = await r.call("mcp__t__add", {"a": 2, "b": 3})
    assert res.structured_content == {"sum": 5} and res.content[0].text == "5"


async def test_integers_nested_in_an_mcp_tools_arguments_reach_the_server_as_integers(start: Any) -> None:
    # JSON Schema counts 5.0 as an integer; the registry converted only top-level arguments, so
    # a server whose schema types integers inside an array or object was sent 5.0 there.
    r = await start({"t": srv("--nested")})
    args = {"sizes": [5.0, 1e3, 2.5], "box": {"w": 3.0, "ratio": 2.0, "h": 4.0},
            "points": [{"x": -0.0, "y": 1.0}], "free": [6.0]}
    res = await r.call("mcp__t__shapes", args)
    assert not res.is_error, res.content
    assert json.loads(res.content[0].text) == args  # (equal as numbers; as JSON text they differ:)
    assert res.content[0].text == json.dumps(
        {"box": {"h": 4.0, "ratio": 2.0, "w": 3}, "free": [6.0], "points": [{"x": 0, "y": 1.0}],
         "sizes": [5, 1000, 2.5]}, sort_keys=True)


async def test_integers_an_mcp_tool_reaches_through_refs_and_branches_reach_the_server_as_integers(start: Any) -> None:
    # The conversion did not follow $ref, anyOf/oneOf or allOf: Pydantic's Optional[int] and a
    # model under $defs were sent 5.0. A branch that allows any number keeps what was sent.
    r = await start({"t": srv("--nested")})
    args = {"limit": 5.0, "at": {"x": 1.0, "y": 2.0}, "path": [{"x": -0.0}, {"x": 3.0, "y": 4.5}],
            "size": 1e3, "scale": 2.0}
    res = await r.call("mcp__t__models", args)
    assert not res.is_error, res.content
    assert json.loads(res.content[0].text) == args
    assert res.content[0].text == json.dumps(
        {"at": {"x": 1, "y": 2.0}, "limit": 5, "path": [{"x": 0}, {"x": 3, "y": 4.5}], "scale": 2.0, "size": 1000},
        sort_keys=True)
    res = await r.call("mcp__t__models", {"limit": 5.5, "at": None})
    assert res.content[0].text == '{"at": null, "limit": 5.5}'


async def test_results_map_images_errors_and_the_output_cap(start: Any, tmp_path: Path) -> None:
    r = await start({"t": srv()})
    res = await r.call("mcp__t__image")
    assert res.content[0].text == "a pixel"
    image = res.content[1]
    assert image.mime == "image/png"
    assert (tmp_path / "artifacts" / image.artifact_id).exists()
    assert [(e.artifact_id, e.source) for e in res.events] == [(image.artifact_id, "mcp")]

    res = await r.call("mcp__t__fail")
    assert res.is_error and res.error_code == "MCP_TOOL_ERROR" and res.content[0].text == "it failed on purpose"
    res = await r.call("mcp__t__rpc_error")
    assert res.is_error and res.error_code == "MCP_REQUEST_FAILED" and "nope (JSON-RPC error -32000)" in res.content[0].text
    assert "MCP server 't' answered 'rpc_error' with an error" in res.content[0].text  # (it named no server)

    res = await r.call("mcp__t__big", {"bytes": 300 * 1024})
    assert len(res.content[0].text) == 256 * 1024
    assert res.content[-1].text == f"[output truncated: {44 * 1024} more bytes of text above the 262144-byte cap]"
    res = await r.call("mcp__t__big", {"bytes": 256 * 1024 + 1})  # one byte past the cap: said in the singular
    assert res.content[-1].text == "[output truncated: 1 more byte of text above the 262144-byte cap]"
    res = await r.call("mcp__t__big", {"bytes": 8 * 1024 * 1024})  # one 8 MiB JSON-RPC line
    assert len(res.content[0].text) == 256 * 1024 and res.content[-1].text.startswith("[output truncated: 8126464 more")


async def test_list_changed_refreshes_the_tools(start: Any) -> None:
    r = await start({"t": srv()})
    assert r.registry.get("mcp__t__extra.tool") is None
    res = await r.call("mcp__t__grow")
    assert res.content[0].text == "grown"
    await wait_for(lambda: r.registry.get("mcp__t__extra.tool") is not None, "the new tool listed")
    assert r.state("t")["toolCount"] == 12
    assert (await r.call("mcp__t__extra.tool")).content[0].text == "extra!"


async def test_a_call_past_its_timeout_is_cancelled_at_the_server(start: Any, tmp_path: Path) -> None:
    log = tmp_path / "cancelled.log"
    r = await start({"t": srv("--cancel-log", str(log), call_timeout_seconds=0.3)})
    res = await r.call("mcp__t__slow")
    assert res.is_error and res.error_code == "MCP_TIMEOUT"
    await wait_for(lambda: log.exists() and log.read_text().strip(), "the server seeing notifications/cancelled")
    # the server stays usable
    assert (await r.call("mcp__t__echo", {"text": "still here"})).content[0].text == "echo: still here"


async def test_a_call_cancelled_by_its_caller_sends_cancelled(start: Any, tmp_path: Path) -> None:
    log = tmp_path / "cancelled.log"
    r = await start({"t": srv("--cancel-log", str(log))})
    with trio.move_on_after(0.3):  # (what a session's abort does to a running call)
        await r.call("mcp__t__slow")
        raise AssertionError("slow answered")
    await wait_for(lambda: log.exists() and log.read_text().strip(), "the server seeing notifications/cancelled")


async def test_a_crash_withdraws_the_tools_and_restarts_with_a_budget(start: Any) -> None:
    r = await start({"t": srv(max_restarts=1)})
    res = await r.call("mcp__t__crash")
    assert res.is_error and res.error_code == "MCP_SERVER_UNAVAILABLE"
    assert res.content[0].text == ("MCP_SERVER_UNAVAILABLE: mcp__t__crash: MCP server 't' stopped during the call "
                                   "(the server exited with status 3)")
    await wait_for(lambda: r.state("t")["status"] == "running" and r.state("t")["restarts"] == 1, "the restart")
    assert (await r.call("mcp__t__echo", {"text": "back"})).content[0].text == "echo: back"
    await r.call("mcp__t__crash")
    await wait_for(lambda: r.state("t")["status"] == "failed", "giving up")
    state = r.state("t")
    assert state["toolCount"] == 0 and "exited with status 3" in state["error"]
    assert "crashing now, on purpose" in state["stderrTail"]
    assert r.registry.get("mcp__t__echo") is None
    assert "mcp__t__echo" not in {s.name for s in r.registry.visible(is_main_agent=True)}
    res = await r.call("mcp__t__echo", {"text": "x"})
    assert res.error_code == "MCP_SERVER_UNAVAILABLE"
    assert res.content[0].text == ("MCP_SERVER_UNAVAILABLE: mcp__t__echo: MCP server 't' failed: "
                                   "the server exited with status 3")  # (it named no tool)
    # a name under no server's prefix is still an unknown tool
    assert (await r.call("mcp__other__echo")).error_code == "TOOL_UNKNOWN"


async def test_a_server_writing_something_that_is_not_json_rpc_is_stopped(start: Any) -> None:
    r = await start({"t": srv(max_restarts=0)})
    res = await r.call("mcp__t__garbage")
    assert res.error_code == "MCP_SERVER_UNAVAILABLE"
    assert "the server wrote a line that is not JSON on stdout: b'this is not JSON-RPC'" in res.content[0].text
    await wait_for(lambda: r.state("t")["status"] == "failed", "the server given up")
    assert r.state("t")["pid"] is None


ANSWER = b'{"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "caf@"}]}}'


@pytest.mark.parametrize(("line", "said"), [
    # (given bytes, the JSON parser guessed the encoding: a BOM's line was said to break at the
    # BOM's length before the real byte, one starting with NUL read as UTF-16, and a surrogate
    # encoded in UTF-8 let through)
    (b"\xef\xbb\xbf" + ANSWER.replace(b"@", b"\xe9"), "not UTF-8 on stdout (byte 0xe9 at offset 83;"),
    (b"\x00" + ANSWER.replace(b"@", b"e"), "not JSON on stdout: b'\\x00{"),
    (ANSWER.replace(b"@", b"\xed\xa0\x80"), "not UTF-8 on stdout (byte 0xed at offset 80;"),
], ids=["bom", "nul", "surrogate"])
async def test_a_line_is_read_as_strict_utf8_before_its_json(start: Any, line: bytes, said: str) -> None:
    r = await start({"t": srv(max_restarts=0)})
    res = await r.call("mcp__t__garbage", {"hex": line.hex()})
    assert res.error_code == "MCP_SERVER_UNAVAILABLE"
    assert f"the server wrote a line that is {said}" in res.content[0].text, res.content[0].text


async def test_servers_that_cannot_start_are_reported_and_bounded(start: Any) -> None:
    with trio.fail_after(5):  # the start-up timeout bounds a server that never answers initialize
        r = await start({"hang": srv("--hang", startup_timeout_seconds=0.5, max_restarts=0),
                         "exits": srv("--exit-at-start", max_restarts=0),
                         "missing": McpServerConfig(command="/nonexistent/lens-mcp-server", max_restarts=0),
                         "old": srv("--protocol", "1999-01-01", max_restarts=0),
                         "off": srv(enabled=False),
                         "ok": srv()})
    states = {s["name"]: s for s in r.servers.inventory()}
    assert states["hang"]["status"] == "failed"
    assert states["hang"]["error"] == "the server did not answer initialize within 0.5 s"
    assert states["exits"]["status"] == "failed" and "cannot start: missing settings" in states["exits"]["stderrTail"]
    assert "exited with status 7" in states["exits"]["error"]
    assert "cannot start '/nonexistent/lens-mcp-server'" in states["missing"]["error"]
    assert "protocol version '1999-01-01'" in states["old"]["error"]
    assert states["off"]["status"] == "disabled" and states["off"]["toolCount"] == 0
    assert states["ok"]["status"] == "running"
    for name in ("hang", "exits", "old", "off"):
        res = await r.call(f"mcp__{name}__echo", {"text": "x"})
        assert res.error_code == "MCP_SERVER_UNAVAILABLE", name
    assert (await r.call("mcp__off__echo")).content[0].text == \
        "MCP_SERVER_UNAVAILABLE: mcp__off__echo: MCP server 'off' is disabled in the config"


async def test_stopping_leaves_no_process_of_the_server(start: Any, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    r = await start({"t": srv("--pidfile", str(pidfile), "--child")})
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    r.cancel.cancel()
    await wait_for(lambda: r.state("t")["status"] == "stopped", "the server stopped")
    await wait_for(lambda: not any(alive(p) for p in pids), "no process left")
    assert r.registry.get("mcp__t__echo") is None


async def test_the_environment_is_the_base_plus_what_is_named(start: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LENS_TEST_SHARED", "shared-value")
    monkeypatch.setenv("LENS_TEST_PRIVATE", "private-value")
    r = await start({"t": srv(env_from=["LENS_TEST_SHARED"], env={"LITERAL": "lit"})})
    assert (await r.call("mcp__t__env", {"name": "LENS_TEST_SHARED"})).content[0].text == "shared-value"
    assert (await r.call("mcp__t__env", {"name": "LITERAL"})).content[0].text == "lit"
    assert (await r.call("mcp__t__env", {"name": "LENS_TEST_PRIVATE"})).content[0].text == "<unset>"
    assert (await r.call("mcp__t__env", {"name": "PATH"})).content[0].text == os.environ["PATH"]


async def test_an_env_from_name_the_daemon_does_not_set_is_reported_by_name(
        start: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # An unset `envFrom` variable was skipped with a log line naming neither the server nor the
    # variable's place: the inventory said nothing. The server starts without it (a pass-through
    # of what is not there), and its entry names it (never a value), as a disabled one's does.
    monkeypatch.setenv("LENS_TEST_SHARED", "shared-value")
    monkeypatch.delenv("LENS_TEST_NOT_SET", raising=False)
    monkeypatch.delenv("LENS_TEST_GIVEN_LITERALLY", raising=False)
    names = ["LENS_TEST_NOT_SET", "LENS_TEST_SHARED", "LENS_TEST_GIVEN_LITERALLY", "LENS_TEST_NOT_SET"]
    r = await start({"t": srv(env_from=names, env={"LENS_TEST_GIVEN_LITERALLY": "lit"}),
                     "off": srv(env_from=["LENS_TEST_NOT_SET"], enabled=False),
                     "fine": srv(env_from=["LENS_TEST_SHARED"])})
    state = r.state("t")
    assert state["status"] == "running" and state["error"] is None, state
    assert state["envFromUnset"] == ["LENS_TEST_NOT_SET"]
    assert r.state("off")["envFromUnset"] == ["LENS_TEST_NOT_SET"] and r.state("fine")["envFromUnset"] == []
    assert (await r.call("mcp__t__env", {"name": "LENS_TEST_NOT_SET"})).content[0].text == "<unset>"
    assert (await r.call("mcp__t__env", {"name": "LENS_TEST_SHARED"})).content[0].text == "shared-value"
    said = [rec.getMessage() for rec in caplog.records if "envFrom" in rec.getMessage()]
    assert said == ["MCP server t: envFrom names LENS_TEST_NOT_SET, not set in the daemon's environment; the "
                    "server starts without it"], said
    assert "shared-value" not in json.dumps(r.servers.inventory()) and "shared-value" not in caplog.text


@pytest.mark.parametrize(("servers", "words"), [
    ({"a b": {"command": "x"}}, ["mcpServers['a b']", "1 to 32 ASCII letters"]),
    ({"a__b": {"command": "x"}}, ["mcpServers['a__b']", "without '__'"]),
    ({"a_": {"command": "x"}}, ["mcpServers['a_']", "not ending in '_'"]),  # (a_ + _b = a + __b)
    ({"x" * 33: {"command": "x"}}, ["1 to 32"]),
    ({"a": {"command": ""}}, ["mcpServers['a']: command must be"]),
    ({"a": {}}, ["missing required field `command`"]),
    ({"a": {"command": "x", "envFrom": ["A=B"]}}, ["'A=B' is not an environment variable name"]),
    ({"a": {"command": "x", "callTimeoutSeconds": 0}}, ["callTimeoutSeconds must be 0.1 to 86400"]),
    ({"a": {"command": "x", "maxRestarts": -1}}, ["maxRestarts must be 0 to 100"]),
    ({"a": {"command": "x", "args": "--flag"}}, ["Expected `array`, got `str`"]),
])
def test_bad_server_entries_are_refused_with_a_clear_message(servers: dict[str, Any], words: list[str]) -> None:
    from runtime.config import ConfigError
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps({"mcpServers": servers}), "c.jsonc")
    for w in words:
        assert w in info.value.message, (w, info.value.message)


PASTED_KEY = "ghp_" + "A1b2C3d4E5f6" * 3


@pytest.mark.parametrize(("entry", "place"), [
    ({"envFrom": ["GH_HOST", PASTED_KEY]}, "envFrom[1]"),
    ({"envFrom": [f" sk-proj-{PASTED_KEY[4:]}"]}, "envFrom[0]"),  # (not a name either: was quoted as one)
    ({"env": {"GH_HOST": "github.com", PASTED_KEY: "x"}}, "the name of env's entry 2"),
])
def test_a_key_pasted_in_place_of_an_env_name_is_refused_without_being_shown(entry: dict[str, Any], place: str) -> None:
    # `"envFrom": ["ghp_…"]` passed the name's check and was echoed as a name in the inventory's
    # envFromUnset and the log, as apiKeyEnv, tokenEnv and webSearch.apiKeyEnv no longer are.
    from runtime.config import ConfigError
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps({"mcpServers": {"gh": {"command": "x", **entry}}}), "c.jsonc")
    assert info.value.code == "CONFIG_INVALID"
    assert info.value.message == (f"c.jsonc: mcpServers['gh']: {place} holds what looks like a key itself, not the "
                                  "name of an environment variable (the value is not shown): put the key in a "
                                  "variable and give its name here")
    # names that only look like a key's variable are names
    parse_config(json.dumps({"mcpServers": {"gh": {"command": "x", "envFrom": ["GH_TOKEN", "SK_PROJ_KEY_OF_MINE_1"],
                                                   "env": {"GHP_MODE": "1"}}}}), "c.jsonc")


async def test_a_call_cancelled_while_the_server_is_being_stopped_ends_cancelled(start: Any) -> None:
    # A daemon's shutdown cancels the sessions and stops the servers at once: the cancelled call's
    # notifications/cancelled then meets a closed stdin. That must not turn the cancellation into
    # an MCP_SERVER_UNAVAILABLE result (recorded, and the agent loop going on during shutdown).
    r = await start({"t": srv()})
    conn = r.servers.servers["t"].conn
    outcome: list[Any] = []
    scope = trio.CancelScope()

    async def caller() -> None:
        with scope:
            outcome.append(await r.call("mcp__t__slow"))
        outcome.append("cancelled")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()  # (the request is out; the caller waits)
        conn.proc.stdin.close()  # what stopping the server does first
        scope.cancel()
    assert outcome == ["cancelled"]


async def test_a_working_directory_that_does_not_exist_is_named_as_the_cause(start: Any, tmp_path: Path) -> None:
    # Both failed as "cannot start '<python>': No such file or directory", which blamed the command.
    missing = str(tmp_path / "no-such-dir")
    no_cmd = McpServerConfig(command=str(tmp_path / "no-such-cmd"), max_restarts=0)
    r = await start({"cwd": srv(cwd=missing, max_restarts=0), "cmd": no_cmd})
    assert r.state("cwd")["status"] == "failed"
    assert r.state("cwd")["error"].endswith(f"(working directory {missing!r}): No such file or directory")
    assert r.state("cmd")["error"] == f"cannot start {str(tmp_path / 'no-such-cmd')!r}: No such file or directory"


async def test_a_working_directory_is_a_home_directory_only_by_a_leading_tilde(
        start: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `./~x` was user x's home (pathlib drops the `./`, then expands `~x`), and a `~user` with no
    # home raised out of the server's task: only a `~` that begins the path as written is a home.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~root").mkdir()
    r = await start({"here": srv(cwd="./~root", max_restarts=0),
                     "nohome": srv(cwd="~no-such-user-of-lens/x", max_restarts=0)})
    assert r.state("here")["status"] == "running", r.state("here")
    assert r.state("nohome")["status"] == "failed"
    assert r.state("nohome")["error"] == ("working directory '~no-such-user-of-lens/x': there is no home "
                                          "directory of user 'no-such-user-of-lens'")
    res = await r.call("mcp__here__env", {"name": "*cwd"})
    assert not res.is_error and res.content[0].text == str(tmp_path / "~root"), res


async def test_a_server_that_declares_no_tools_runs_with_none(start: Any) -> None:
    # It was reported failed ("Method not found") after restarting maxRestarts times: tools/list
    # was asked of a server whose capabilities offer no tools.
    r = await start({"plain": srv("--no-tools")})
    state = r.state("plain")
    assert (state["status"], state["error"], state["toolCount"], state["restarts"]) == ("running", None, 0, 0)


async def test_text_that_strict_json_refuses_is_cleaned_or_its_tool_left_out(start: Any) -> None:
    # Python's JSON reader takes "\ud800" escapes and Infinity; the inventory's encoder and the
    # SDKs' refuse them: GET /tools/inventory answered 500, and every model request offering such
    # a tool failed (the actors crashed on a description, a request failed on the schema).
    import msgspec

    r = await start({"t": srv("--bad-json")})
    state = r.state("t")
    assert state["status"] == "running"
    skipped = {s["name"]: s["reason"] for s in state["skippedTools"]}
    assert "not sendable as JSON" in skipped["inf_schema"] and "not sendable as JSON" in skipped["sur_schema"]
    assert skipped["bad?name"] == "the name holds spaces or control characters"
    assert "mcp__t__odd_text" in state["tools"] and "mcp__t__echo" in state["tools"]
    assert r.registry.get("mcp__t__odd_text").description == "text ? here"
    assert r.registry.get("mcp__t__odd_desc").description == "odd_desc (MCP server t)"  # (was "{'not': 'a string'}")
    msgspec.json.encode(r.servers.inventory())  # (raised UnicodeEncodeError)
    res = await r.call("mcp__t__rpc_error")
    assert res.error_code == "MCP_REQUEST_FAILED" and res.content[0].text == "MCP_REQUEST_FAILED: MCP server 't' answered 'rpc_error' with an error: no?pe (JSON-RPC error ?)"


async def test_a_tool_list_cut_at_the_page_or_tool_limit_says_so(start: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Pages past the limit (or after the page that reached the tool limit) were left unread and
    # nothing said so: neither the inventory nor the log.
    caplog.set_level("WARNING", logger="lens.mcp")
    by_pages = await start({"pages": srv("--page-size", "2"), "one": srv("--page-size", "13")}, max_pages=3)
    r = await start({"tools": srv("--page-size", "4"), "whole": srv("--page-size", "13")}, max_tools=5)
    pages = by_pages.state("pages")  # (13 tools on 7 pages: 3 read)
    assert pages["status"] == "running" and pages["toolCount"] == 6 and pages["skippedTools"] == []
    assert pages["listCut"] == ("tools/list was read up to 3 pages (3 page(s), 6 tool(s)); the server offered "
                                "more pages, which were not read: their tools are not available")
    tools = r.state("tools")  # (page 2 reached 5 tools: its 3 past the limit skipped, pages 3 and 4 not read)
    assert tools["toolCount"] == 5 and [s["reason"] for s in tools["skippedTools"]] == ["more than 5 tools"] * 3
    assert tools["listCut"] is not None and tools["listCut"].startswith("tools/list was read up to 5 tools (2 page(s), 8 tool(s))")
    assert by_pages.state("one")["listCut"] is None and by_pages.state("one")["toolCount"] == 11
    whole = r.state("whole")  # (every tool on one page: nothing unread; the ones past 5 skipped, as before)
    assert whole["listCut"] is None and whole["toolCount"] == 5 and len(whole["skippedTools"]) == 8
    warnings = [m for m in caplog.messages if "tools/list was read up to" in m]
    assert sorted(warnings) == [f"MCP server pages: {pages['listCut']}", f"MCP server tools: {tools['listCut']}"]


@pytest.mark.parametrize(("cursor", "said"), [("12", "12"), ("[12]", "an array")])
async def test_a_cursor_given_again_is_said_as_a_limit_is_and_quoted_as_json(start: Any, cursor: str, said: str) -> None:
    # (13 tools on 4 pages, the last one's cursor the number 12: that page is asked for and given
    # again, its tool listed twice, and its cursor given again ends the list; `str()` quoted it
    # '12'. An array is named, not written: one nested deep could not be)
    r = await start({"n": srv("--page-size", "4", "--last-cursor-json", cursor)})
    n = r.state("n")
    assert n["status"] == "running" and n["toolCount"] == 11, n
    assert n["listCut"] == (f"tools/list was read up to a cursor the server gave again, {said} (5 page(s), 14 tool(s)); "
                            "asked for, it would list the pages read again: their tools are available")


async def test_a_tool_list_cut_is_logged_when_the_cut_starts_or_changes_not_at_each_listing(
        start: Any, caplog: pytest.LogCaptureFixture) -> None:
    # The warning was logged at every list_changed re-listing: a server that keeps announcing
    # changes repeated it as often, and a listing no longer cut said nothing.
    caplog.set_level("INFO", logger="lens.mcp")
    r = await start({"t": srv("--shrink", "--page-size", "2")}, max_pages=5)  # (14 tools on 7 pages)
    cut = r.state("t")["listCut"]
    assert cut is not None and r.state("t")["toolCount"] == 10

    def said(text: str) -> list[str]:
        return [m for m in caplog.messages if text in m]
    for n in (1, 2):  # (grow adds a tool past the cut: the same cut each time)
        assert (await r.call("mcp__t__grow")).content[0].text == "grown"
        await wait_for(lambda: len(said("changed its tools")) == n, "the re-listing")
    assert r.state("t")["listCut"] == cut
    assert said("tools/list was read up to") == [f"MCP server t: {cut}"]
    assert (await r.call("mcp__t__shrink")).content[0].text == "shrunk"
    await wait_for(lambda: len(said("changed its tools")) == 3, "the re-listing")
    assert r.state("t")["listCut"] is None and r.state("t")["toolCount"] == 4
    assert said("no longer cut") == ["MCP server t: tools/list was read to its end: no longer cut"]
    assert len(said("tools/list was read up to")) == 1


async def test_a_server_that_exits_while_its_child_holds_the_pipes_is_seen_to_exit(start: Any, tmp_path: Path) -> None:
    # (the child inherits stdout, which therefore never ends: only the server's exit says it is gone)
    pidfile = tmp_path / "pids"
    r = await start({"t": srv("--pidfile", str(pidfile), "--child", max_restarts=0, call_timeout_seconds=3600)})
    pids = [int(p) for p in pidfile.read_text().split()]
    res = await r.call("mcp__t__crash")  # (bounded by the fixture's limit, far below the call timeout)
    assert res.error_code == "MCP_SERVER_UNAVAILABLE" and "exited with status 3" in res.content[0].text
    await wait_for(lambda: r.state("t")["status"] == "failed", "the server given up")
    assert "exited with status 3" in r.state("t")["error"] and r.state("t")["pid"] is None
    await wait_for(lambda: not any(alive(p) for p in pids), "no process left")  # (the child went with its group)


async def test_a_huge_tool_list_is_reported_in_bounded_form(start: Any) -> None:
    # One page of thousands of tools: each one past the tool limit was named in skippedTools, so a
    # page of a million made an inventory of a million entries (and as many checks on the event loop).
    from tools.mcp.servers import MAX_SKIPPED, MAX_TOOLS
    r = await start({"t": srv("--many", "2500", "--page-size", "3000")})  # (13 + 2500 tools, 2 of them unusable)
    state = r.state("t")
    assert state["status"] == "running" and state["toolCount"] == MAX_TOOLS and state["listCut"] is None
    assert len(state["skippedTools"]) == MAX_SKIPPED + 1
    assert state["skippedTools"][0] == {"name": "bad schema", "reason": "the name holds spaces or control characters"}
    assert state["skippedTools"][-2]["reason"] == f"more than {MAX_TOOLS} tools"
    untold = 2513 - MAX_TOOLS - MAX_SKIPPED
    assert state["skippedTools"][-1] == {"name": f"({untold} more)", "reason": f"{untold} more tools were left out; "
                                         f"skippedTools names at most {MAX_SKIPPED}"}


async def test_a_message_nested_too_deep_to_read_is_called_that(start: Any) -> None:
    # (it was reported as "a line that is not JSON", which it is)
    r = await start({"t": srv("--deep", "600", max_restarts=0)})
    state = r.state("t")
    assert state["status"] == "failed"
    assert state["error"].startswith("the server wrote JSON nested too deep to read on stdout: b'{\"jsonrpc\"")


async def test_a_tool_whose_schema_is_past_256_kib_is_left_out(start: Any) -> None:
    # (megabytes of text in a schema went with every model request of every session)
    MAX_SCHEMA_BYTES = 256 * 1024
    r = await start({"at": srv("--wide", str(MAX_SCHEMA_BYTES)), "past": srv("--wide", str(MAX_SCHEMA_BYTES + 1))})
    assert "mcp__at__wide" in r.state("at")["tools"]
    assert len(r.registry.get("mcp__at__wide").input_schema["description"]) == MAX_SCHEMA_BYTES - 34
    past = r.state("past")
    assert past["status"] == "running" and "mcp__past__wide" not in past["tools"] and "mcp__past__echo" in past["tools"]
    assert {"name": "wide", "reason": f"inputSchema is larger than {MAX_SCHEMA_BYTES} bytes of JSON"} in past["skippedTools"]


async def test_a_line_past_the_message_limit_is_refused_wherever_its_newline_falls(start: Any) -> None:
    # The limit was checked on what was buffered before a chunk's newline was looked for: a line
    # up to 64 KiB past it, whose end came in the same read as its newline, was taken.
    from tools.mcp.client import MAX_MESSAGE_BYTES
    r = await start({"t": srv(max_restarts=0)})
    res = await r.call("mcp__t__big", {"line": MAX_MESSAGE_BYTES})
    assert not res.is_error and res.content[-1].text.startswith("[output truncated")
    res = await r.call("mcp__t__big", {"line": MAX_MESSAGE_BYTES + 1})
    assert res.error_code == "MCP_SERVER_UNAVAILABLE"
    assert f"the server wrote a message larger than {MAX_MESSAGE_BYTES} bytes" in res.content[0].text


async def test_a_server_announcing_a_change_after_every_listing_is_listed_at_most_once_a_second(
        start: Any, autojump_clock: Any) -> None:
    # It was listed again at once, without end (thousands of listings and log lines a second).
    # (virtual time moves only when every task waits: listings made without waiting take none)
    RELIST_INTERVAL = 1.0  # (tools.mcp.servers)
    autojump_clock.autojump_threshold = math.inf  # (the start waits on the process: no deadline may jump)
    r = await start({"t": srv("--flood", "--page-size", "100")})  # (one page per listing)
    autojump_clock.autojump_threshold = 0.5
    began = trio.current_time()

    async def listings() -> int:
        return int((await r.call("mcp__t__listings")).content[0].text)

    async def bound() -> None:  # (in real seconds: while the daemon never waits, virtual time stands still)
        await trio.to_thread.run_sync(time.sleep, 3 * LIMIT, abandon_on_cancel=True)
        raise AssertionError(f"the listings did not let the clock move within {3 * LIMIT} s")
    async with trio.open_nursery() as guard:
        guard.start_soon(bound)
        while (n := await listings()) < 4:
            await trio.sleep(RELIST_INTERVAL)
        guard.cancel_scope.cancel()
    assert trio.current_time() - began >= (n - 2) * RELIST_INTERVAL
    assert r.state("t")["status"] == "running" and "mcp__t__echo" in r.state("t")["tools"]


async def test_a_response_whose_id_is_of_another_type_answers_no_request(start: Any) -> None:
    # A response id `true` answered request 1 (`True == 1` in Python): a server's `initialize`
    # answer with id `true` was taken. An id that is a boolean, a float or a string answers no
    # request of ours (all integers), as an unknown id answers none; the right answer still counts.
    r = await start({"t": srv("--odd-ids", max_restarts=0)})
    state = r.state("t")
    assert state["status"] == "running" and state["protocolVersion"] == "2025-11-25", state
    res = await r.call("mcp__t__echo", {"text": "hi"})
    assert not res.is_error and [c.text for c in res.content] == ["echo: hi"]


async def test_stopping_ends_a_child_that_left_the_servers_group(start: Any, tmp_path: Path) -> None:
    # A child started in a session of its own (setsid) escaped the group's signals and ran on
    # after the server stopped, re-parented to init. It is found while still the server's
    # descendant and signalled with the group; the one in the group goes as before.
    pidfile = tmp_path / "pids"
    r = await start({"t": srv("--pidfile", str(pidfile), "--child", "--setsid-child")})
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 3 and all(alive(p) for p in pids)
    assert os.getsid(pids[2]) == pids[2] != os.getpgid(pids[0])
    r.cancel.cancel()
    await wait_for(lambda: r.state("t")["status"] == "stopped", "the server stopped")
    await wait_for(lambda: not any(alive(p) for p in pids), "no process left")


async def test_the_walk_for_escaped_children_leaves_the_event_loop_free(start: Any, tmp_path: Path,
                                                                        nursery: trio.Nursery,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The walk through /proc for a stopped server's escaped children reads every process's stat:
    # it runs in a worker thread. Here its listing of /proc is held (the real listing, made late)
    # until a task on the event loop lets it go: a walk on the event loop would wait for that task
    # in vain (5 s at most) and record so. The children are still found and stopped.
    pidfile = tmp_path / "pids"
    r = await start({"t": srv("--pidfile", str(pidfile), "--child", "--setsid-child")})
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 3 and all(alive(p) for p in pids)
    listdir, started, let_go, waited = os.listdir, threading.Event(), threading.Event(), []

    def held_listdir(path: Any = ".") -> list[str]:
        if path == "/proc":
            started.set()
            waited.append(let_go.wait(timeout=5.0))  # (True: the event loop ran meanwhile)
        return listdir(path)

    async def let_it_go() -> None:
        await wait_for(started.is_set, "a walk started")
        let_go.set()

    monkeypatch.setattr(os, "listdir", held_listdir)
    nursery.start_soon(let_it_go)
    r.cancel.cancel()
    await wait_for(lambda: r.state("t")["status"] == "stopped", "the server stopped")
    monkeypatch.undo()
    assert waited and all(waited), f"the walk held the event loop: {waited}"
    await wait_for(lambda: not any(alive(p) for p in pids), "no process left")


async def test_what_a_server_killed_from_outside_leaves_is_ended(start: Any, tmp_path: Path) -> None:
    # A server killed from outside (SIGKILL to its pid) with a child in a session of its own, and a
    # process a double fork orphaned at once: both went to init, beyond the daemon's reach, and ran
    # on. The server's parent (tools/reaper.py, a child subreaper) adopts them and ends them
    # once the server is gone.
    pidfile = tmp_path / "pids"
    r = await start({"t": srv("--pidfile", str(pidfile), "--setsid-child", "--double-fork-child", max_restarts=0)})
    pids = [int(p) for p in pidfile.read_text().split()]
    try:
        assert len(pids) == 3 and all(alive(p) for p in pids)
        assert os.getsid(pids[1]) == pids[1] and os.getsid(pids[2]) == pids[2]
        os.kill(pids[0], signal.SIGKILL)
        await wait_for(lambda: r.state("t")["status"] == "failed", "the server seen to exit")
        assert "killed by signal 9" in r.state("t")["error"] or "SIGKILL" in r.state("t")["error"], r.state("t")
        await wait_for(lambda: not any(alive(p) for p in pids), "no process left")
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


async def test_stopping_ends_a_process_the_server_orphaned_by_a_double_fork(start: Any, tmp_path: Path) -> None:
    # Orphaned at once, it was never the server's descendant when the server was stopped; now it is
    # the reaper's, and found with the server's other escaped children.
    pidfile = tmp_path / "pids"
    r = await start({"t": srv("--pidfile", str(pidfile), "--double-fork-child")})
    pids = [int(p) for p in pidfile.read_text().split()]
    try:
        assert len(pids) == 2 and all(alive(p) for p in pids)
        r.cancel.cancel()
        await wait_for(lambda: r.state("t")["status"] == "stopped", "the server stopped")
        await wait_for(lambda: not any(alive(p) for p in pids), "no process left")
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def private_kib(pid: int) -> int:
    """Memory of ``pid`` that no other process shares (``Private_Dirty`` of smaps_rollup), in KiB."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Private_Dirty:"))


# What the reaper may hold beyond a bare `python -I -S` of the same interpreter: ctypes (for
# prctl) and its own code, about 0.9-1.0 MiB measured, and for an MCP server the thread that
# watches the daemon's pidfd (its stack's touched pages and `select`), about 0.2 MiB more:
# 1200-1204 KiB measured, which met the former bound of 1200 exactly. Importing `signal` (its
# enums bring in enum, functools, collections) made it 1.5 MiB without the watch; a process's
# private memory right after its start does not depend on the machine's load.
REAPER_OVER_BARE_KIB = 1400


async def test_the_reaper_holds_little_more_than_a_bare_interpreter(start: Any, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    r = await start({"t": srv("--pidfile", str(pidfile))})
    server = int(pidfile.read_text().split()[0])
    reaper = r.state("t")["pid"]
    with open(f"/proc/{server}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[1]) == reaper  # (the server's parent)
    bare = await trio.lowlevel.open_process(
        [sys.executable, "-I", "-S", "-c", "import sys; sys.stdout.write('up\\n'); sys.stdout.flush(); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert bare.stdout is not None
        with trio.fail_after(LIMIT):
            assert await bare.stdout.receive_some(3) == b"up\n"
        over = private_kib(reaper) - private_kib(bare.pid)
    finally:
        bare.kill()
        await bare.wait()
        await bare.stdin.aclose()  # type: ignore[union-attr]
        await bare.stdout.aclose()  # type: ignore[union-attr]
    assert over <= REAPER_OVER_BARE_KIB, f"the reaper holds {over} KiB more than a bare interpreter"


async def test_a_listing_the_server_refuses_after_list_changed_keeps_the_server_and_its_tools(start: Any) -> None:
    # A list that changes between two pages of a listing makes the next page's cursor stale, and
    # the server refuses it (-32602, as the MCP spec says of an invalid cursor), then announces the
    # change. That is no reason to stop the server: its tools stay as they were listed, calls in
    # flight go on, and the change it announces is listed.
    r = await start({"t": srv("--stale-cursor")})
    pid = r.state("t")["pid"]
    assert "mcp__t__extra.tool" not in r.state("t")["tools"]
    res = await r.call("mcp__t__change_mid_list")
    assert res.content[0].text == "changing"
    await wait_for(lambda: r.state("t")["error"] is not None or r.state("t")["status"] != "running",
                   "the refused listing being seen")
    state = r.state("t")
    assert state["status"] == "running" and state["pid"] == pid and state["restarts"] == 0, state
    assert "invalid cursor: the tool list changed" in state["error"] and "kept" in state["error"]
    assert "mcp__t__echo" in state["tools"]
    assert (await r.call("mcp__t__echo", {"text": "still here"})).content[0].text == "echo: still here"
    await wait_for(lambda: "mcp__t__extra.tool" in r.state("t")["tools"], "the change announced after it listed")
    state = r.state("t")
    assert state["pid"] == pid and state["error"] is None and state["restarts"] == 0
    assert (await r.call("mcp__t__extra.tool")).content[0].text == "extra!"


async def test_requests_of_the_server_with_ids_no_answer_can_carry_are_refused_not_crashed_on(
        start: Any, tmp_path: Path) -> None:
    # A server's own request (ping) whose id is a lone surrogate (an escape JSON allows, UTF-8
    # cannot carry) made the reply unencodable: the reader died, the server was reported an
    # internal error, and the call in flight waited for its timeout. Ids MCP allows (a string, an
    # integer) are answered; any other is refused as JSON-RPC says, with the id null.
    log = tmp_path / "replies.log"
    r = await start({"t": srv("--reply-log", str(log))})
    pid = r.state("t")["pid"]
    res = await r.call("mcp__t__odd_requests")
    assert not res.is_error and res.content[0].text == "asked"

    def replies() -> list[Any]:
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    await wait_for(lambda: len(replies()) == 6, "six answers")
    invalid = {"code": -32600, "message": "Invalid Request: a request id is a string or an integer"}
    assert replies() == [{"jsonrpc": "2.0", "id": None, "error": invalid}] * 5 + [
        {"jsonrpc": "2.0", "id": "p1", "result": {}}]
    state = r.state("t")
    assert state["status"] == "running" and state["pid"] == pid and state["error"] is None
    assert (await r.call("mcp__t__echo", {"text": "on"})).content[0].text == "echo: on"


async def test_a_flood_of_pings_from_a_server_reading_nothing_leaves_its_call_answered(
        start: Any, tmp_path: Path) -> None:
    # A server sending pings while it reads nothing (its stdin fills with the answers) held the
    # reader in the answer's write: the server, blocked in turn on its full stdout, never sent
    # the call's result, and both waited for ever. Answers to a server's requests now leave from
    # a queue of their own, bounded: those past it are dropped, and the reader goes on.
    log = tmp_path / "replies.log"
    r = await start({"t": srv("--reply-log", str(log))})
    pid = r.state("t")["pid"]
    n = 20_000  # (answers of about 40 bytes each: far past a pipe's 64 KiB)
    with trio.fail_after(LIMIT):
        res = await r.call("mcp__t__ping_flood", {"n": n})
    assert not res.is_error and res.content[0].text == "flooded"
    assert (await r.call("mcp__t__echo", {"text": "after"})).content[0].text == "echo: after"

    def replies() -> list[Any]:
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    await wait_for(lambda: len(replies()) >= MAX_ANSWERS_QUEUED, "the answers the server had not read")
    got = replies()
    assert all(x == {"jsonrpc": "2.0", "id": x["id"], "result": {}} for x in got), got[:3]
    ids = [int(x["id"][1:]) for x in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and len(ids) <= n  # (in order, each once)
    state = r.state("t")
    assert state["status"] == "running" and state["pid"] == pid and state["error"] is None


async def test_a_result_of_thousands_of_blocks_stores_and_holds_a_bounded_number(start: Any, tmp_path: Path) -> None:
    r = await start({"t": srv("--blocks")})
    res = await r.call("mcp__t__blocks", {"n": 1500, "kind": "audio"})
    assert not res.is_error
    assert len(res.events) == 100 and len(set(e.artifact_id for e in res.events)) == 100
    assert len(list((tmp_path / "artifacts").iterdir())) == 100
    assert res.content[-2].text == "[900 more binaries left out: at most 100 are stored per result]"
    assert res.content[-1].text == "[500 more content blocks left out: at most 1000 are read per result]"

    res = await r.call("mcp__t__blocks", {"n": 300_000, "kind": "text"})
    assert [p.text for p in res.content] == ["b"] * 1000 + [
        "[299000 more content blocks left out: at most 1000 are read per result]"]


async def test_a_call_given_up_while_its_request_was_being_written_leaves_the_stream_whole(
        start: Any, tmp_path: Path) -> None:
    r = await start({"t": srv("--deaf", call_timeout_seconds=0.5)})
    until = tmp_path / "listen"
    assert (await r.call("mcp__t__deaf", {"until": str(until)})).content[0].text == "deaf"
    # (a request far larger than a pipe holds: its writing is under way when the call times out)
    res = await r.call("mcp__t__echo", {"text": "y" * (1024 * 1024)})
    assert res.error_code == "MCP_TIMEOUT"
    until.touch()
    res = await r.call("mcp__t__echo", {"text": "after"})
    assert res.content[0].text == "echo: after", res.content
    assert r.state("t")["status"] == "running" and r.state("t")["restarts"] == 0


async def test_a_relative_command_is_found_from_the_servers_working_directory_and_its_absence_says_so(
        start: Any, tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "server.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {srv().args[0]} \"$@\"\n")
    script.chmod(0o755)
    r = await start({"found": McpServerConfig(command="./bin/server.sh", cwd=str(tmp_path), max_restarts=0),
                     "lost": McpServerConfig(command="./server.sh", cwd=str(tmp_path), max_restarts=0)})
    assert r.state("found")["status"] == "running"
    assert (await r.call("mcp__found__echo", {"text": "hi"})).content[0].text == "echo: hi"
    # (it said "cannot start './server.sh': No such file or directory", not where it was looked for)
    assert r.state("lost")["error"] == (f"cannot start './server.sh' (a relative path, from the working directory "
                                        f"{str(tmp_path)!r}): No such file or directory")


async def test_megabytes_on_stderr_keep_a_bounded_tail_and_the_crash_is_reported(start: Any) -> None:
    r = await start({"t": srv("--shout", max_restarts=0)})
    res = await r.call("mcp__t__shout", {"bytes": 32 * 1024 * 1024})
    assert res.error_code == "MCP_SERVER_UNAVAILABLE" and "exited with status 5" in res.content[0].text
    await wait_for(lambda: r.state("t")["status"] == "failed", "giving up")
    tail = r.state("t")["stderrTail"]
    assert len(tail) == 4096 and tail.endswith("eeeEND")


# The test server with ``--dotted`` at its first start and ``--no-tools`` at every later one.
DOTTED_THEN_NONE = ("import os, sys\n"
                    "marker, server = sys.argv[1:3]\n"
                    "flag = '--no-tools' if os.path.exists(marker) else '--dotted'\n"
                    "open(marker, 'a').close()\n"
                    "os.execv(sys.executable, [sys.executable, server, flag])\n")


async def test_a_server_restarting_with_no_tools_takes_its_names_out_of_the_names_table(
        start: Any, tmp_path: Path) -> None:
    # F-MOD-3: a down server's tools keep their names (its last listing); one that restarts
    # listing none changes the names and not the registry (its tools left it when it went down):
    # a table kept while the registry stays the same would still map its tool's digest alias to
    # a tool that no longer exists.
    cfg = McpServerConfig(command=sys.executable, args=["-c", DOTTED_THEN_NONE, str(tmp_path / "started"), SERVER],
                          max_restarts=1)
    r = await start({"t": cfg})
    names = CatalogNames(r.registry, r.servers)
    dotted = "mcp__t__some.tool"
    alias = alias_for(dotted)
    assert alias != dotted and names.ids_for([alias]) == [dotted]
    first = names.offered_names()
    assert (await r.call("mcp__t__crash")).error_code == "MCP_SERVER_UNAVAILABLE"
    await wait_for(lambda: r.state("t")["status"] == "restarting", "the server down")
    assert r.registry.get(dotted) is None
    assert names.ids_for([alias]) == [dotted] and names.offered_names() is first  # (as last listed)
    await wait_for(lambda: r.state("t")["status"] == "running" and r.state("t")["restarts"] == 1, "the restart")
    assert r.state("t")["toolCount"] == 0
    assert names.ids_for([alias]) == [alias] and dotted not in names.offered_names()
