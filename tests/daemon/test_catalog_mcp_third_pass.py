"""F-TOOL-1/2/4/5 a third time, as a client author with the spec and the docs alone drives a real
daemon over HTTP: the ``faux`` provider, real stdio MCP servers started from the config (the test
server ``tests/mcp/server.py`` and ``odd_mcp_server.py`` beside this file), ``GET
/tools/inventory``. What the first two passes (``test_catalog_acceptance.py``,
``test_catalog_mcp_second_pass.py``), ``test_mcp.py`` and ``tests/mcp/`` hold is not repeated:
input schemas JSON Schema does not allow, two sessions calling one server at once, an error
result carrying an image and structured content, a server that writes a banner on stdout before
the handshake or a byte that is not UTF-8 in a result, one answering in JSON-RPC batches, a result of structured content alone, one server's failure and the deferral of another's tools (`mcpDeferAbove`), the
alias of a tool whose server is down, and a provider's key kept from a server unless named."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import trio

from runtime.providers.names import alias_for

from .conftest import DaemonFactory, finished, run_tool, wait_until
from .mcp_down import FAUX, crash, loaded_session, mcp_server, server_in
from .test_tool_catalog_http import inventory

ODD = str(Path(__file__).with_name("odd_mcp_server.py"))


def odd_server(*flags: str, **kw: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [ODD, *flags], **kw}


async def test_a_tool_whose_input_schema_json_schema_does_not_allow_is_left_out_naming_the_place(
        daemon_factory: DaemonFactory) -> None:
    # Providers check every offered tool's schema against JSON Schema's meta-schema and refuse
    # the whole request when one fails: a server's tool whose `properties` is a list was offered
    # to every session, and a real provider would have failed each of their model requests. Such
    # a tool is left out (skippedTools says where its schema goes wrong); the server's valid
    # tools, unusual ones included, stay offered, and each schema offered passes the meta-schema.
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"o": odd_server("--loose")}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    inv = await inventory(d, token, sid)
    server = inv["mcpServers"][0]
    assert server["status"] == "running" and server["tools"] == ["mcp__o__mixed", "mcp__o__ok", "mcp__o__fine"]
    prefix = "inputSchema is not a valid JSON Schema, which providers refuse: "
    assert {s["name"]: s["reason"] for s in server["skippedTools"]} == {
        "props_list": prefix + "#/properties: an object of schemas, not an array",
        "required_text": prefix + "#/required: a list of property names, not a string",
        "prop_number": prefix + "#/properties/n: a schema is an object or a boolean, not a number",
        "type_word": prefix + "#/properties/when/type: not one of the JSON types ['array', 'boolean', "
                              "'integer', 'null', 'number', 'object', 'string'] or a list of them",
        "deep_items": prefix + "#/$defs/a~1b/items: a schema is an object or a boolean, not a string",
        "empty_any": prefix + "#/properties/v/anyOf: a non-empty list of schemas, not an empty list"}
    assert [n for n in inv["offered"] if n.startswith("mcp__")] == server["tools"]
    for tool in inv["tools"]:  # (every schema a request would carry, native tools' too)
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
    body = await run_tool(d, token, sid, "r1", "mcp__o__props_list", {})
    assert body["error_code"] == "TOOL_UNKNOWN" and "mcp__o__props_list" in body["content"][0]["text"]
    body = await run_tool(d, token, sid, "r2", "mcp__o__fine", {"type": "x"})
    assert body["status"] == "ok" and body["content"][0] == {"type": "text", "text": "fine said so"}


async def test_two_sessions_call_one_server_at_once_and_a_call_left_waiting_holds_back_no_other(
        daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    # One server, one stdin: a call that waits (`slow`, answered only when cancelled) in one
    # session does not hold back another session's call of the same server; the abort of the
    # first cancels it at the server, and the server answers both sessions after.
    log = tmp_path / "cancelled.log"
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"t": mcp_server("--cancel-log", str(log))}})
    token = await d.pair("third-pass", strong=True)
    a, b = await d.new_session(token), await d.new_session(token)
    await d.submit(token, a, "ra", "/tool mcp__t__slow {}")
    await d.wait_running_call(token, a)
    body = await run_tool(d, token, b, "rb", "mcp__t__echo", {"text": "beside a waiting call"})
    assert body["status"] == "ok" and body["content"] == [{"type": "text", "text": "echo: beside a waiting call"}]
    assert (await d.view(token, a))["status"] == "running" and finished(await d.events(token, a)) == []
    r = await d.post(f"/sessions/{a}/abort", token)
    assert r.status_code == 200, r.text
    await d.wait_idle(token, a)
    [slow] = finished(await d.events(token, a))
    assert slow["name"] == "mcp__t__slow" and slow["error_code"] == "ABORTED"

    async def seen() -> bool:
        return log.exists() and bool(log.read_text().strip())
    await wait_until(seen, what="the server seeing notifications/cancelled")
    for sid, rid in ((a, "ra2"), (b, "rb2")):
        body = await run_tool(d, token, sid, rid, "mcp__t__echo", {"text": sid})
        assert body["content"] == [{"type": "text", "text": f"echo: {sid}"}]


async def test_an_error_result_keeps_its_image_and_structured_content(daemon_factory: DaemonFactory) -> None:
    # `isError: true` with a text, an image and structuredContent: MCP_TOOL_ERROR with the
    # server's text, the image stored as an artifact the client can fetch, and the structured
    # content kept beside the error.
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]}, "mcpServers": {"o": odd_server()}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    body = await run_tool(d, token, sid, "r1", "mcp__o__mixed", {})
    assert body["is_error"] and body["error_code"] == "MCP_TOOL_ERROR"
    text, image = body["content"]
    assert text == {"type": "text", "text": "mixed said so"}
    assert image["type"] == "image" and image["mime"] == "image/png"
    assert body["structured_content"] == {"error": {"code": "MCP_TOOL_ERROR", "message": "mixed said so"},
                                          "structured": {"tool": "mixed"}}
    r = await d.get(f"/artifacts/{image['artifact_id']}", token)
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG")


async def test_a_server_writing_a_banner_on_stdout_before_the_handshake_is_failed_naming_the_line(
        daemon_factory: DaemonFactory) -> None:
    # A server that logs to stdout breaks the stdio transport ("MCP servers (F-TOOL-5)": a line
    # that is not JSON-RPC ends the connection). The daemon starts and serves; the inventory and
    # a call of the server's tool both say which line it was.
    with trio.fail_after(20):
        d = await daemon_factory(config={**FAUX, "mcpServers": {
            "b": odd_server("--banner", "Server listening on stdio", maxRestarts=0)}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    [server] = (await inventory(d, token))["mcpServers"]
    why = "initialize failed: the server wrote a line that is not JSON on stdout: b'Server listening on stdio'"
    assert server["status"] == "failed" and server["error"] == why and server["tools"] == []
    body = await run_tool(d, token, sid, "r1", "mcp__b__ok", {})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE"
    assert body["content"][0]["text"] == f"MCP_SERVER_UNAVAILABLE: mcp__b__ok: MCP server 'b' failed: {why}"
    assert (await run_tool(d, token, sid, "r2", "get_system_time", {}))["status"] == "ok"


async def test_a_server_writing_a_byte_that_is_not_utf8_is_failed_saying_so_and_naming_the_byte(
        daemon_factory: DaemonFactory) -> None:
    # MCP's stdio messages are UTF-8. A result line that is JSON but for one byte of Latin-1 ends
    # the connection as a line that is not JSON-RPC does ("MCP servers (F-TOOL-5)"), and the call,
    # the inventory and the daemon's log said "a line that is not JSON", of a line that reads as
    # JSON. They say it is not UTF-8, with the byte and its offset in the line; the session goes on.
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"l": odd_server("--latin1", maxRestarts=0)}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    body = await run_tool(d, token, sid, "r1", "mcp__l__latin1", {})
    assert body["error_code"] == "MCP_SERVER_UNAVAILABLE", body
    text = body["content"][0]["text"]
    m = re.search(r"the server wrote a line that is not UTF-8 on stdout \(byte 0xe9 at offset (\d+); MCP "
                  r"messages are UTF-8\): (b'.*')\)$", text)
    assert m is not None and "not JSON" not in text, text
    head = "MCP_SERVER_UNAVAILABLE: mcp__l__latin1: MCP server 'l' stopped during the call ("
    assert text.startswith(head)
    line = ast.literal_eval(m.group(2))
    assert line.endswith(b'"text": "caf\xe9"}]}}') and line.index(b"\xe9") == int(m.group(1))

    async def failed() -> dict[str, Any] | None:
        [server] = (await inventory(d, token))["mcpServers"]
        return server if server["status"] == "failed" else None
    server = await wait_until(failed, what="server l failed")
    assert server["error"] == text[len(head):-1], server
    assert (await run_tool(d, token, sid, "r2", "get_system_time", {}))["status"] == "ok"


async def test_a_server_answering_in_json_rpc_batches_is_read_message_by_message(
        daemon_factory: DaemonFactory) -> None:
    # JSON-RPC 2.0 lets a peer send an array of messages, and MCP 2025-03-26 (a version the daemon
    # takes) has clients receive them. A server of that version answering `tools/list` as a batch
    # (a log notification, then the answer) was failed at start for writing "something that is
    # not JSON-RPC 2.0". Its messages are read in order: it runs, its tools answer.
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"b": odd_server("--batch", maxRestarts=0)}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    [server] = (await inventory(d, token))["mcpServers"]
    assert server["status"] == "running" and server["error"] is None, server
    assert server["protocolVersion"] == "2025-03-26" and server["tools"] == ["mcp__b__mixed", "mcp__b__ok"]
    body = await run_tool(d, token, sid, "r1", "mcp__b__ok", {})
    assert body["status"] == "ok" and body["content"][0] == {"type": "text", "text": "ok said so"}, body


async def test_a_batch_that_is_empty_nested_or_holds_no_message_is_refused_and_a_ping_in_one_answered(
        daemon_factory: DaemonFactory) -> None:
    # A batch is read message by message only when each entry is one: `[]`, `[[…]]` and a batch
    # with one good entry and one bad end the connection, saying what was written; a server's
    # ping inside a batch is answered, as one on a line of its own is.
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]}, "mcpServers": {
        kind: odd_server("--batch-odd", kind, maxRestarts=0) for kind in ("empty", "nested", "mixed", "ping")}})
    token = await d.pair("third-pass", strong=True)
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    answer = (b'{"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "mixed", "description": "An error result '
              b'with an image and structured content", ')
    for kind, line in (("empty", b"[]"), ("nested", b"[[" + answer), ("mixed", b"[" + answer)):
        assert servers[kind]["status"] == "failed", servers[kind]
        assert servers[kind]["error"].startswith(f"the server wrote something that is not JSON-RPC 2.0: {line!r}"[:-1])
    assert servers["ping"]["status"] == "running" and servers["ping"]["tools"][-1] == "mcp__ping__pongs"
    body = await run_tool(d, token, await d.new_session(token), "r1", "mcp__ping__pongs", {})
    assert body["content"] == [{"type": "text", "text": '[{"jsonrpc": "2.0", "id": "p1", "result": {}}]'}], body


async def test_a_result_of_structured_content_alone_shows_the_model_its_json(daemon_factory: DaemonFactory) -> None:
    # MCP has a tool that returns `structuredContent` repeat it as text, but a server need not.
    # A result of structured content and no content blocks reached the model as an empty result
    # (a model sees a result's content alone): the data never reached it, and an error result
    # said "reported an error without a message". The JSON is the result's text when its content
    # gives none; the structured content stays as it was.
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"o": odd_server("--structured")}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    data = '{"city":"Oslo","temperature":21.5}'
    body = await run_tool(d, token, sid, "r1", "mcp__o__data", {})
    assert body["status"] == "ok" and body["content"] == [{"type": "text", "text": data}], body
    assert body["structured_content"] == {"city": "Oslo", "temperature": 21.5}
    view = (await d.get(f"/sessions/{sid}", token)).json()
    assert view["items"][-1]["text"] == f"The tool answered: {data}"  # (the faux model echoes what it was sent)
    body = await run_tool(d, token, sid, "r2", "mcp__o__data_error", {})
    assert body["error_code"] == "MCP_TOOL_ERROR" and body["content"] == [{"type": "text", "text": data}], body
    assert body["structured_content"] == {"error": {"code": "MCP_TOOL_ERROR", "message": data},
                                          "structured": {"city": "Oslo", "temperature": 21.5}}


async def test_a_tool_name_of_128_characters_is_taken_and_one_of_129_is_left_out_saying_its_length(
        daemon_factory: DaemonFactory) -> None:
    # MCP names a tool in at most 128 characters. At the limit it is taken (offered under an
    # alias, its id being past 64); one past it is left out, and its skipped entry, whose name is
    # shown cut to 128 characters, said only "a tool name is a string of 1 to 128 characters"
    # of a name 128 characters long as shown. The reason says the length the server sent.
    at, past = "n" * 128, "m" * 129
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"s": mcp_server("--named", at, "--named", past)}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    [server] = (await inventory(d, token))["mcpServers"]
    assert f"mcp__s__{at}" in server["tools"] and not any(past[:100] in n for n in server["tools"])
    assert {"name": past[:128], "reason": "a tool name is a string of 1 to 128 characters; this one has 129"} in \
        server["skippedTools"], server["skippedTools"]
    body = await run_tool(d, token, sid, "r1", f"mcp__s__{at}", {"text": "at the limit"})
    assert body["content"] == [{"type": "text", "text": f"{at}: at the limit"}], body


async def test_a_server_whose_initialize_answer_gives_no_protocol_version_is_failed_saying_so(
        daemon_factory: DaemonFactory) -> None:
    # An `initialize` answer without `protocolVersion` was failed as a server speaking "MCP
    # protocol version 'None'", Python's word for what the server left out. It says so in JSON's.
    d = await daemon_factory(config={**FAUX, "mcpServers": {"v": odd_server("--no-version", maxRestarts=0)}})
    token = await d.pair("third-pass", strong=True)
    [server] = (await inventory(d, token))["mcpServers"]
    assert server["status"] == "failed" and server["error"] == (
        "the server's initialize answer gives no protocolVersion; Lens speaks 2025-11-25, 2025-06-18, "
        "2025-03-26, 2024-11-05"), server


async def test_a_tool_name_or_a_protocol_version_of_another_type_is_said_in_jsons_words(
        daemon_factory: DaemonFactory) -> None:
    # A tool without a name was said to have a name that "is null", an array one "a list", and a
    # protocolVersion 20250326 was quoted as a string: what was sent is said as JSON says it.
    d = await daemon_factory(config={**FAUX, "mcpServers": {"n": odd_server("--odd-names"),
                                                            "v": odd_server("--number-version", maxRestarts=0)}})
    token = await d.pair("third-pass", strong=True)
    servers = {s["name"]: s for s in (await inventory(d, token))["mcpServers"]}
    rule = "a tool name is a string of 1 to 128 characters; this one "
    assert servers["n"]["skippedTools"] == [{"name": "#2", "reason": rule + "is missing"},
                                            {"name": "#3", "reason": rule + "is null"},
                                            {"name": "#4", "reason": rule + "is an array"},
                                            {"name": "", "reason": rule + "is empty"}], servers["n"]
    assert servers["v"]["status"] == "failed" and servers["v"]["error"] == (
        "the server's initialize answer gives a protocolVersion that is a number, not a version string; Lens "
        "speaks 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05"), servers["v"]


async def test_a_server_going_down_does_not_make_another_servers_deferred_tools_eager(
        daemon_factory: DaemonFactory) -> None:
    # `tools.mcpDeferAbove: 11` with two servers of 11 tools: all 22 deferred. One server fails
    # for good; the other's tools were counted with the registry alone and became eager (offered,
    # callable without a load), and would have been withdrawn from the model again at the
    # failed server's return. The count is of the tools each server listed last, down or not.
    d, token, sid = await loaded_session(daemon_factory, {"tools": {"mcpDeferAbove": 11}, "mcpServers": {
        "t": mcp_server(maxRestarts=0), "u": mcp_server()}}, load=["mcp__t__crash"])
    inv = await inventory(d, token, sid)
    assert inv["loaded"] == ["mcp__t__crash"] and "mcp__u__echo" not in inv["offered"]
    assert inv["visibility"]["deferred"] == 22
    await crash(d, token, sid, "r2")
    inv = await server_in(d, token, sid, "failed")
    assert not any(n.startswith("mcp__u__") for n in inv["offered"]), inv["offered"]
    assert inv["visibility"]["deferred"] == 11 and "mcp__u__echo" in inv["searchable"]
    body = await run_tool(d, token, sid, "r3", "mcp__u__echo", {"text": "still deferred"})
    assert body["error_code"] == "TOOL_NOT_LOADED", body


async def test_a_call_of_the_alias_of_a_tool_whose_server_is_down_is_logged_under_the_tools_id(
        daemon_factory: DaemonFactory) -> None:
    # F-MOD-3: a model knows `mcp__t__some.tool` by its digest alias, and the log keeps the id.
    # Once its server failed, the tool left the registry and a call of the alias was recorded
    # under the alias, its MCP_SERVER_UNAVAILABLE naming the alias. It is named by the id.
    d = await daemon_factory(config={**FAUX, "tools": {"eager": ["mcp__*"]},
                                     "mcpServers": {"t": mcp_server("--dotted", maxRestarts=0)}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    alias = alias_for("mcp__t__some.tool")
    body = await run_tool(d, token, sid, "r1", alias, {})
    assert body["name"] == "mcp__t__some.tool" and body["content"] == [{"type": "text", "text": "some.tool ran"}]
    assert (await run_tool(d, token, sid, "r2", "mcp__t__crash", {}))["error_code"] == "MCP_SERVER_UNAVAILABLE"

    async def failed() -> bool:
        return (await inventory(d, token))["mcpServers"][0]["status"] == "failed"
    await wait_until(failed, what="server t failed for good")
    body = await run_tool(d, token, sid, "r3", alias, {})
    assert body["name"] == "mcp__t__some.tool" and body["error_code"] == "MCP_SERVER_UNAVAILABLE", body
    assert body["content"][0]["text"] == ("MCP_SERVER_UNAVAILABLE: mcp__t__some.tool: MCP server 't' failed: "
                                          "the server exited with status 3")
    started = [e["body"]["name"] for e in await d.events(token, sid) if e["kind"] == "tool.started"]
    assert started == ["mcp__t__some.tool", "mcp__t__crash", "mcp__t__some.tool"]


async def test_a_providers_key_reaches_only_the_server_whose_env_from_names_it_and_no_answer(
        daemon_factory: DaemonFactory, monkeypatch: Any) -> None:
    # "MCP servers (F-TOOL-5)": provider keys stay with the daemon unless `envFrom` names them.
    # Server `plain` does not see the provider's key; `given` does, and what it answers with
    # the key in it reaches the session scrubbed of it.
    key = "sk-t5-" + "k" * 40
    monkeypatch.setenv("LENS_T5_PROVIDER_KEY", key)
    provider = {**FAUX["providers"][0], "apiKeyEnv": "LENS_T5_PROVIDER_KEY"}
    d = await daemon_factory(config={**FAUX, "providers": [provider], "tools": {"eager": ["mcp__*"]}, "mcpServers": {
        "plain": mcp_server(), "given": mcp_server(envFrom=["LENS_T5_PROVIDER_KEY"])}})
    token = await d.pair("third-pass", strong=True)
    sid = await d.new_session(token)
    body = await run_tool(d, token, sid, "r1", "mcp__plain__env", {"name": "LENS_T5_PROVIDER_KEY"})
    assert body["content"] == [{"type": "text", "text": "<unset>"}], body
    body = await run_tool(d, token, sid, "r2", "mcp__given__env", {"name": "LENS_T5_PROVIDER_KEY"})
    assert body["content"] == [{"type": "text", "text": "[redacted LENS_T5_PROVIDER_KEY]"}], body
    assert key not in str(await d.events(token, sid)) and key not in str(await d.view(token, sid))
