"""The model's tools (SPEC §5–§7) as a model calls them: the faux model sends the arguments as a
JSON text (escaping what JSON escapes), the daemon runs the call, the result is read from the log.
Edges found only this way; what the tools' own suites pin is not redone."""

from __future__ import annotations

import json
import sys

from tools.files.errors import MAX_TEXT_BYTES

from ..mcp.conftest import SERVER as MCP_SERVER
from .conftest import Daemon, DaemonFactory, finished, question_opened, run_tool, stop_daemon

MiB = 1 << 20

PTC = "programmatic_tool_run"
AFTER = "after the request this call answers: it is callable from your next request"
TIME_DEFERRED = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}], "script": [
    {"when": "SEARCH-THEN-PROGRAM", "toolCalls": [
        {"name": "capability_search", "arguments": {"query": "current time"}},
        {"name": PTC, "arguments": {"code": "print(get_system_time()['unix_ms'] > 0)"}}]},
    {"when": "PROGRAM-LOADS", "toolCalls": [
        {"name": PTC, "arguments": {"code": "capability_search(query='current time')\n"
                                            "print(capability_search(query='current time')['loaded'])\n"
                                            "print(get_system_time()['unix_ms'] > 0)"}}]},
    {"when": "SEARCH-TWICE", "toolCalls": [
        {"name": "capability_search", "arguments": {"query": "current time"}},
        {"name": "capability_search", "arguments": {"query": "current time"}}]}]}],
    "defaultModel": "faux/faux-1", "localPtc": {}, "tools": {"deferred": ["get_system_time"]}}


def big_faux() -> dict:
    """A config whose faux model's context window and whose request bodies hold an input of tens
    of MiB (a `/tool` line carrying 8 MiB of escaped text)."""
    return {"server": {"maxBodyBytes": 64 * MiB},
            "providers": [{"id": "faux", "protocol": "faux",
                           "models": [{"id": "faux-1", "contextWindow": 100_000_000}]}],
            "defaultModel": "faux/faux-1"}


async def test_eight_mib_of_text_that_json_escapes_is_written(daemon_factory: DaemonFactory) -> None:
    # 8 MiB of newlines is 16 MiB of JSON text ("\n" twice over): the registry refused the call as
    # TOOL_ARGUMENTS_TOO_LARGE ("arguments exceed 16777216 bytes") though its input is within the
    # file tools' 8 MiB (one byte past is their own TOO_LARGE, pinned by tests/executor's suites)
    d = await daemon_factory(config=big_faux())
    token = await d.pair("big-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    ws = d.root / "workspaces" / "p"
    body = await run_tool(d, token, sid, "r1", "edit_file",
                          {"path": "lines.txt", "mode": "create", "content": "\n" * MAX_TEXT_BYTES})
    assert body["structured_content"] == {"path": "lines.txt", "changed": True, "units_applied": 1,
                                          "bytes_written": MAX_TEXT_BYTES}, body["content"]
    assert (ws / "lines.txt").read_bytes() == b"\n" * MAX_TEXT_BYTES


async def test_a_deferred_tool_loaded_in_an_answer_is_callable_from_the_next_request_not_in_that_answer(
        daemon_factory: DaemonFactory) -> None:
    # SPEC F-TOOL-3: a loaded capability "becomes callable from the next model request", and the
    # search says so ("callable from your next request"); a program's load is held to it. A call
    # of the tool later in the answer that searched for it ran all the same (the model had no
    # schema of it: the request it answered did not offer it), while the same call earlier in
    # that answer was refused: the outcome hung on the order of the calls.
    script = [{"when": f"LOAD-{order}", "toolCalls": [
        {"name": n, "arguments": a} for n, a in (
            [("capability_search", {"query": "echo"}), ("mcp__t__echo", {"text": "same answer"})] if order == "first"
            else [("mcp__t__add", {"a": 1, "b": 2}), ("capability_search", {"query": "mcp__t__add", "limit": 1})])]}
        for order in ("first", "second")]
    d, token, sid = await _session(daemon_factory, _mcp_deferred(script), "deferred-client")
    for order in ("first", "second"):
        await d.submit(token, sid, order, f"LOAD-{order}")
        await d.wait_idle(token, sid)
    done = finished(await d.events(token, sid))
    by_name = {b["name"]: b for b in done}
    assert by_name["capability_search"]["structured_content"]["loaded"] == ["mcp__t__add"]
    for name, said in (("mcp__t__echo", "loaded by capability_search after the request this call answers: it is "
                                        "callable from your next request"),
                       ("mcp__t__add", "is deferred: load it with capability_search first")):
        body = by_name[name]
        assert body["error_code"] == "TOOL_NOT_LOADED", body
        assert said in body["content"][0]["text"], body
    loads = [e["body"] for e in await d.events(token, sid) if e["kind"] == "capability.loaded"]
    assert [b["capability_ids"] for b in loads] == [["mcp__t__echo"], ["mcp__t__add"]]

    # the next request offers them
    body = await run_tool(d, token, sid, "next", "mcp__t__echo", {"text": "next request"})
    assert body["content"] == [{"type": "text", "text": "echo: next request"}], body
    body = await run_tool(d, token, sid, "next-2", "mcp__t__add", {"a": 1, "b": 2})
    assert body["content"] == [{"type": "text", "text": "3"}], body


async def test_the_calls_of_an_answer_a_restart_cut_are_judged_by_the_request_that_answer_replies_to(
        daemon_factory: DaemonFactory) -> None:
    # The daemon stops while a question of the answer is open, after the search before it was
    # recorded: the answer's later calls run once it is back, with the tools folded from the log.
    # The one loaded in an earlier answer is callable; the one that answer's search loaded is not.
    ask = {"questions": [{"id": "go", "text": "Go on?", "options": [{"id": "yes", "label": "Yes"}]}]}
    config = _mcp_deferred([
        {"when": "LOAD-ADD", "toolCalls": [{"name": "capability_search", "arguments": {"query": "mcp__t__add"}}]},
        {"when": "SEARCH-ASK-CALL", "toolCalls": [
            {"name": "capability_search", "arguments": {"query": "mcp__t__echo"}},
            {"name": "ask_user", "arguments": ask},
            {"name": "mcp__t__echo", "arguments": {"text": "same answer"}},
            {"name": "mcp__t__add", "arguments": {"a": 1, "b": 2}}]}])
    d, token, sid = await _session(daemon_factory, config, "deferred-client")
    await d.submit(token, sid, "load", "LOAD-ADD")
    await d.wait_idle(token, sid)
    await question_opened(d, token, sid, "ask", "SEARCH-ASK-CALL")
    events = await d.events(token, sid)
    assert [b["name"] for b in finished(events)] == ["capability_search"] * 2
    assert [e["body"]["name"] for e in events if e["kind"] == "tool.started"][-1] == "ask_user"
    await stop_daemon(d)

    d = await daemon_factory(config=config, root=d.root)
    await d.wait_idle(token, sid)
    by_name = {b["name"]: b for b in finished(await d.events(token, sid))}
    assert by_name["ask_user"]["error_code"] == "INTERRUPTED", by_name["ask_user"]
    echo = by_name["mcp__t__echo"]
    assert echo["error_code"] == "TOOL_NOT_LOADED", echo
    assert f"mcp__t__echo was loaded by capability_search {AFTER}" in echo["content"][0]["text"], echo
    assert by_name["mcp__t__add"]["content"] == [{"type": "text", "text": "3"}], by_name["mcp__t__add"]
    body = await run_tool(d, token, sid, "next", "mcp__t__echo", {"text": "next request"})
    assert body["content"] == [{"type": "text", "text": "echo: next request"}], body


async def _session(daemon_factory: DaemonFactory, config: dict, client: str) -> tuple[Daemon, str, str]:
    """A daemon of ``config``, a strong credential of ``client`` and a new session."""
    d = await daemon_factory(config=config)
    token = await d.pair(client, strong=True)
    return d, token, (await d.session(token, (await d.project(token))["id"]))["id"]


def _mcp_deferred(script: list[dict]) -> dict:
    """A config of the faux provider playing ``script`` and the test MCP server ``t`` deferred."""
    return {"providers": [{"id": "faux", "protocol": "faux", "script": script,
                           "models": [{"id": "faux-1", "contextWindow": 1_000_000}]}],
            "defaultModel": "faux/faux-1", "tools": {"deferred": ["mcp__t__*"]},
            "mcpServers": {"t": {"command": sys.executable, "args": [MCP_SERVER]}}}


async def _answer(d: Daemon, token: str, sid: str, cue: str) -> list[dict]:
    """Submit ``cue`` (a faux script's answer) and wait for the session to go idle: that answer's
    ``tool.finished`` bodies."""
    before = len(finished(await d.events(token, sid)))
    await d.submit(token, sid, cue.lower(), cue)
    await d.wait_idle(token, sid)
    return finished(await d.events(token, sid))[before:]


async def test_a_program_after_a_search_in_its_answer_cannot_call_the_tool_the_search_loaded(
        daemon_factory: DaemonFactory) -> None:
    # A program's call is checked against what the request its answer replies to offered, as a
    # direct call is: the search before it in the answer loaded the tool for the next request.
    d, token, sid = await _session(daemon_factory, TIME_DEFERRED, "ptc-client")
    search, program = await _answer(d, token, sid, "SEARCH-THEN-PROGRAM")
    assert search["structured_content"]["loaded"] == ["get_system_time"], search
    assert program["error_code"] == "PTC_TOOL_FAILED", program
    assert (f"get_system_time failed: TOOL_NOT_LOADED: get_system_time was loaded by capability_search {AFTER}"
            in program["content"][0]["text"]), program
    # the next request offers it to a program
    body = await run_tool(d, token, sid, "next", PTC, {"code": "print(get_system_time()['unix_ms'] > 0)"})
    assert body["status"] == "ok" and body["content"][0]["text"] == "True\n", body


async def test_a_program_that_loads_a_tool_itself_is_told_it_is_callable_from_the_next_request(
        daemon_factory: DaemonFactory) -> None:
    # It was told "is deferred: load it with capability_search first", which it had just done.
    d, token, sid = await _session(daemon_factory, TIME_DEFERRED, "ptc-client")
    [program] = await _answer(d, token, sid, "PROGRAM-LOADS")
    text = program["content"][0]["text"]
    assert program["error_code"] == "PTC_TOOL_FAILED", program
    assert f"get_system_time failed: TOOL_NOT_LOADED: get_system_time was loaded by capability_search {AFTER}" in text
    assert "load it with capability_search first" not in text, text
    assert text.startswith("[]\n"), text  # (the second search loaded nothing again)
    assert [c["name"] for c in program["structured_content"]["calls"]] == ["capability_search"] * 2 + ["get_system_time"]
    loads = [e["body"] for e in await d.events(token, sid) if e["kind"] == "capability.loaded"]
    assert [(b["capability_ids"], b["call_id"]) for b in loads] == [(["get_system_time"], program["call_id"])]
    # the next request's program calls it
    body = await run_tool(d, token, sid, "again", PTC, {"code": "print(get_system_time()['unix_ms'] > 0)"})
    assert body["status"] == "ok", body


async def test_a_second_search_in_an_answer_says_the_tool_the_first_loaded_is_callable_from_the_next_request(
        daemon_factory: DaemonFactory) -> None:
    # It listed the tool "loaded" and said "Nothing new was loaded." and nothing of when it may
    # be called (the first search said "callable from your next request").
    d, token, sid = await _session(daemon_factory, TIME_DEFERRED, "search-client")
    first, second = await _answer(d, token, sid, "SEARCH-TWICE")
    assert first["structured_content"]["loaded"] == ["get_system_time"], first
    assert second["structured_content"]["loaded"] == [], second
    assert [m["loaded"] for m in second["structured_content"]["matches"]] == [True], second
    text = second["content"][0]["text"]
    assert text.endswith("Nothing new was loaded. get_system_time was loaded since your last request: "
                         "callable from your next request."), text
    # from the next request on it is loaded like any other: nothing said of it
    body = await run_tool(d, token, sid, "later", "capability_search", {"query": "current time"})
    assert body["content"][0]["text"].endswith("\nNothing new was loaded."), body
