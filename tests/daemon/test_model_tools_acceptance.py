"""The model's tools (SPEC §5–§7) as a model calls them: the faux model sends the arguments as a
JSON text (escaping what JSON escapes), the daemon runs the call, the result is read from the log.
Edges found only this way; what the tools' own suites pin is not redone."""

from __future__ import annotations

import json
import sys

from tools.files.errors import MAX_TEXT_BYTES

from ..mcp.conftest import SERVER as MCP_SERVER
from .conftest import DaemonFactory, finished, run_tool, stop_daemon

MiB = 1 << 20


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
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": script,
                             "models": [{"id": "faux-1", "contextWindow": 1_000_000}]}],
              "defaultModel": "faux/faux-1", "tools": {"deferred": ["mcp__t__*"]},
              "mcpServers": {"t": {"command": sys.executable, "args": [MCP_SERVER]}}}
    d = await daemon_factory(config=config)
    token = await d.pair("deferred-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
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

    # the next request offers them, and after a restart (the state replayed from the log) too
    body = await run_tool(d, token, sid, "next", "mcp__t__echo", {"text": "next request"})
    assert body["content"] == [{"type": "text", "text": "echo: next request"}], body
    await stop_daemon(d)
    d = await daemon_factory(config=config)
    body = await run_tool(d, token, sid, "restarted", "mcp__t__add", {"a": 1, "b": 2})
    assert body["content"] == [{"type": "text", "text": "3"}], body
