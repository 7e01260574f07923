"""F-MOD-6 when the key comes back as content: a provider (or a model) that echoes the key in
its streamed answer, its reasoning and its tool-call arguments, a command that prints it, a
workspace file and a background job holding it.

``lens serve`` runs as a real process with the keys in its environment, each keyed provider
pointed at a loopback server speaking its wire protocol. The key must reach none of: the log
(``events.db`` and ``projections.db`` bytes, every zstd frame decompressed, ``lens log
decode``), the SSE stream (the answers' ``model.delta`` frames included), any HTTP answer, the
daemon's stdout and stderr. Where it stood, the marker naming its variable stands instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from events.secrets import marker

from ..providers.servers import anthropic as an
from ..providers.servers import openai_chat as oc
from ..providers.servers import openai_responses as orr
from ..providers.servers.base import Reply, ScriptedServer
from .conftest import (LIMIT, Daemon, DaemonFactory, ServeProcess, as_daemon, run_lens, run_tool, served_once,
                       wait_until)
from .keyleaks import KEYS, SLOW, Recorder, leaks, leaks_everywhere, loop_config, stream_caught_up, watch, watched

PROVIDERS = [("chat", "OPENAI_API_KEY"), ("resp", "LENS_TEST_RESPONSES_KEY"), ("anth", "ANTHROPIC_API_KEY")]


def echoing_answer(pid: str, key: str) -> Reply:
    """An answer that quotes ``key``: cut across text deltas, in its reasoning, and in the
    arguments of a command that prints it and the workspace file holding every key."""
    text = [f"Your key is {key[:10]}", key[10:25], f"{key[25:]}, keep it."]
    # (Responses joins reasoning summary parts with a blank line: its key stays in one part.)
    reasoning = [f"the header said {key} so"] if pid == "resp" else [f"the header said {key[:5]}", f"{key[5:]} so"]
    calls = [("call_1", "run_command", {"command": f"echo {key}; cat notes.txt"})]
    if pid == "chat":
        return oc.chat_stream(text=text, reasoning=reasoning, calls=calls)
    if pid == "resp":
        return orr.response_stream(text=text, reasoning=reasoning, calls=calls)
    return an.message_stream(text=text, thinking=reasoning, calls=calls)


def plain_answer(pid: str) -> Reply:
    return {"chat": oc.chat_stream, "resp": orr.response_stream, "anth": an.message_stream}[pid](text="done")


async def test_a_key_echoed_as_content_is_stored_streamed_and_shown_as_its_marker(tmp_path: Path) -> None:
    async with watched(tmp_path, "echo-client") as w:
        d, token, project = w.d, w.token, w.project
        Path(project["workspace"], "notes.txt").write_text(
            "".join(f"{name}={value}\n" for name, value in KEYS.items()))
        sids = [await echoed(d, token, project, w.server, pid, name) for pid, name in PROVIDERS]
        sids.append(await commands_and_jobs(d, token, project))
        for sid in sids:
            await d.get(f"/sessions/{sid}", token)
            await d.get(f"/sessions/{sid}/context", token)
            await d.get(f"/sessions/{sid}/workspace/file", token, params={"path": "notes.txt"})
        await d.post("/history/search", token, {"projectId": project["id"], "query": "key"})

    found, decoded = await leaks_everywhere(w)
    assert not found, "\n".join(found)
    # Where the keys stood, their markers stand: in the log, the stream's deltas and the file's page.
    for name in KEYS:
        assert marker(name) in decoded, name
    deltas = "".join(json.loads(line[6:])["text"] for line in w.sse.decode().splitlines()
                     if line.startswith("data: ") and '"kind": "text"' in line.replace('":"', '": "'))
    assert marker("OPENAI_API_KEY") in deltas and marker("ANTHROPIC_API_KEY") in deltas, deltas
    page = next(data for where, data in w.recorder.seen if where.endswith("/workspace/file"))
    assert marker("LENS_TEST_RESPONSES_KEY").encode() in page


async def echoed(d: Daemon, token: str, project: dict[str, Any], server: ScriptedServer, pid: str, name: str) -> str:
    """A session whose provider echoes its key; what was recorded holds the marker instead."""
    r = await d.post("/sessions", token, {"projectId": project["id"], "model": f"{pid}/m"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    server.push(echoing_answer(pid, KEYS[name]))
    server.push(plain_answer(pid))
    await d.submit(token, sid, f"{pid}-1", "what is my key?")
    await d.wait_idle(token, sid, timeout=SLOW)
    events = await d.events(token, sid)
    answer = next(e["body"] for e in events if e["kind"] == "model.responded")
    assert answer["text"] == f"Your key is {marker(name)}, keep it.", answer
    assert marker(name) in answer["reasoning"], answer
    assert json.loads(answer["tool_calls"][0]["arguments"])["command"] == f"echo {marker(name)}; cat notes.txt", answer
    result = json.dumps(next(e["body"] for e in events if e["kind"] == "tool.finished"))
    assert all(marker(n) in result for n in KEYS), result  # (the echo and the file's three lines)
    # The key went back to the model as its marker: the next request holds no key in its body.
    assert not leaks("the request after the tool call", json.dumps(server.requests[-1].body))
    return sid


async def commands_and_jobs(d: Daemon, token: str, project: dict[str, Any]) -> str:
    """``env`` run by the command tool, and a background job printing the file of keys whose
    output is read over HTTP (held in memory, not read from the log)."""
    r = await d.post("/sessions", token, {"projectId": project["id"], "model": "faux/faux-1"})
    sid = r.json()["id"]
    await d.submit(token, sid, "env-1", "/tool run_command " + json.dumps({"command": "env"}))
    await d.wait_idle(token, sid)
    job = await notes_printed_by_a_job(d, token, sid)
    out = (await d.get(f"/sessions/{sid}/jobs/{job['jobId']}", token)).json()
    assert out["source"] == "memory" and marker("OPENAI_API_KEY") in out["output"], out
    await d.wait_idle(token, sid)
    return sid


async def notes_printed_by_a_job(d: Daemon, token: str, sid: str) -> dict[str, Any]:
    """The session's first job, ``cat notes.txt``, started by the model, once it has ended."""
    await d.submit(token, sid, "job-1", "/tool job " + json.dumps({"action": "start", "command": "cat notes.txt"}))

    async def finished() -> dict[str, Any] | None:
        jobs = (await d.get(f"/sessions/{sid}/jobs", token)).json()["jobs"]
        return jobs[0] if jobs and jobs[0]["status"] != "running" else None

    return await wait_until(finished, SLOW, "the job's end")

async def test_an_mcp_server_given_a_key_that_prints_it_as_it_fails_is_reported_without_it(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # A server's stderr tail (and its error) is in the tool inventory, which any paired client
    # reads: a server the config hands a provider's key (envFrom) printed it there as it failed.
    key = KEYS["OPENAI_API_KEY"]
    monkeypatch.setenv("LENS_TEST_ECHO_KEY", key)
    noisy = {"command": sys.executable, "maxRestarts": 0, "envFrom": ["LENS_TEST_ECHO_KEY"],
             "args": ["-c", "import os, sys; sys.stderr.write('bad key ' + os.environ['LENS_TEST_ECHO_KEY']); sys.exit(7)"]}
    d = await daemon_factory(config={
        "providers": [{"id": "chat", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1",
                       "apiKeyEnv": "LENS_TEST_ECHO_KEY", "models": [{"id": "m"}]},
                      {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}],
        "defaultModel": "faux/faux-1", "mcpServers": {"noisy": noisy}})
    token = await d.pair("mcp-client", strong=False)
    r = await d.get("/tools/inventory", token)
    assert r.status_code == 200, r.text
    assert not leaks("the tool inventory", r.content, [key]), r.text
    (noisy_state,) = r.json()["mcpServers"]
    assert noisy_state["status"] == "failed" and noisy_state["stderrTail"] == f"bad key {marker('LENS_TEST_ECHO_KEY')}"


SLASHED = ("LENS_TEST_SEARCH_KEY", "tvly-dev-K3jH8gF2/dS5aP9oI+uY4tR7e=CanarySlashD4")


async def test_keys_stored_before_escaped_in_json_or_cut_by_a_page_are_not_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A session's input holds a key while the daemon does not know it (stored as written); the
    # daemon restarted with the key known shows that event without it. With it known: a command
    # printing JSON in which the key stands escaped, and a file and a job output read in pages,
    # one ending inside the key.
    name, key = "OPENAI_API_KEY", KEYS["OPENAI_API_KEY"]
    slash_name, slashed = SLASHED
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({
        "providers": [{"id": "chat", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1",
                       "apiKeyEnv": name, "models": [{"id": "m"}]},
                      {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}],
        "defaultModel": "faux/faux-1", "webSearch": {"apiKeyEnv": slash_name}}))
    for n in [*KEYS, slash_name]:
        monkeypatch.delenv(n, raising=False)
    recorder = Recorder()
    sse_bytes = bytearray()
    for phase in (1, 2):
        if phase == 2:
            monkeypatch.setenv(name, key)
            monkeypatch.setenv(slash_name, slashed)
        async with served_once(ServeProcess(tmp_path, stderr_name=f"serve-{phase}.err")) as daemon_url:
            async with httpx2.AsyncClient(base_url=daemon_url, timeout=LIMIT,
                                          limits=httpx2.Limits(max_keepalive_connections=0),
                                          event_hooks={"response": [recorder.on_response] if phase == 2 else []}
                                          ) as client:
                d = as_daemon(tmp_path, daemon_url, client)
                if phase == 1:
                    token = await d.pair("old-client", strong=True, via="cli")
                    project = await d.project(token, "p")
                    r = await d.post("/sessions", token, {"projectId": project["id"]})
                    old_sid = r.json()["id"]
                    await d.submit(token, old_sid, "old-1", f"my key is {key}, keep it")
                    await d.wait_idle(token, old_sid)
                else:
                    await stored_before_and_after(d, token, project, old_sid, sse_bytes)

    decoded = await run_lens(tmp_path, "log", "decode", "--data", "data")
    found = leaks("lens log decode", decoded.stdout + decoded.stderr, [key, slashed])
    found += leaks("SSE stream", bytes(sse_bytes), [key, slashed])
    for where, data in recorder.seen:
        found += leaks(where, data, [key, slashed])
    assert not found, "\n".join(found)
    assert marker(name) in decoded.stdout and marker(slash_name) in decoded.stdout


async def stored_before_and_after(d: Daemon, token: str, project: dict[str, Any], old_sid: str,
                                  sse_bytes: bytearray) -> None:
    name, key = "OPENAI_API_KEY", KEYS["OPENAI_API_KEY"]
    slash_name, slashed = SLASHED
    # The input stored before: the events route and the stream from seq 0 show its marker.
    (old_input,) = [e for e in await d.events(token, old_sid) if e["kind"] == "input.submitted"]
    assert old_input["body"]["content"][0]["text"] == f"my key is {marker(name)}, keep it", old_input
    # JSON holding the key escaped (``/`` as ``\/``, ``+`` and ``=`` as ``\u002b``, ``\u003d``).
    escaped = json.dumps({"key": slashed}).replace("/", "\\/").replace("+", "\\u002b").replace("=", "\\u003d")
    workspace = Path(project["workspace"])
    (workspace / "search.json").write_text(escaped)
    padding = "x" * 20
    (workspace / "notes.txt").write_text(f"{padding}{key}\n")
    r = await d.post("/sessions", token, {"projectId": project["id"]})
    sid = r.json()["id"]
    result = await run_tool(d, token, sid, "cat-1", "run_command", {"command": "cat search.json"})
    assert marker(slash_name) in json.dumps(result), result
    # A page that ends 10 characters into the key ends before it; the next page shows its marker.
    first = (await d.get(f"/sessions/{sid}/workspace/file", token,
                         params={"path": "notes.txt", "limit": len(padding) + 10})).json()
    assert (first["text"], first["nextOffset"], first["eof"]) == (padding, len(padding), False), first
    rest = (await d.get(f"/sessions/{sid}/workspace/file", token,
                        params={"path": "notes.txt", "offset": first["nextOffset"]})).json()
    assert rest["text"] == f"{marker(name)}\n" and rest["eof"], rest
    job = await notes_printed_by_a_job(d, token, sid)
    page = (await d.get(f"/sessions/{sid}/jobs/{job['jobId']}", token, params={"limit": len(padding) + 10})).json()
    assert (page["output"], page["nextOffset"], page["eof"]) == (padding, len(padding), False), page
    await d.wait_idle(token, sid)
    async with trio.open_nursery() as inner:
        inner.start_soon(watch, d, token, sse_bytes)
        await stream_caught_up(d, sse_bytes)
        inner.cancel_scope.cancel()


async def test_an_mcp_tools_definition_quoting_a_key_reaches_neither_the_model_nor_an_answer(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch) -> None:
    # A server the config hands a key (envFrom) quotes it in its tool's description (once near
    # its start, once across the 8192nd character, where descriptions are cut) and in its input
    # schema (a description, a default, a property's name). The definitions went to the provider
    # as reported.
    from ..mcp.conftest import SERVER

    name, key = "LENS_TEST_MCP_KEY", KEYS["OPENAI_API_KEY"]
    monkeypatch.setenv(name, key)
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(oc.chat_stream(text="fine"))
    d = await daemon_factory(config=loop_config(url, name, mcpServers={
        "k": {"command": sys.executable, "args": [SERVER, "--keyed", name], "envFrom": [name]}}))
    token = await d.pair("mcp-client", strong=True)
    r = await d.get("/tools/inventory", token)
    assert r.status_code == 200, r.text
    assert not leaks("the tool inventory", r.content, [key]), r.text
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    view = await d.wait_idle(token, sid, timeout=SLOW)
    assert view["status"] == "idle", view
    sent = json.dumps(loop.bodies)
    assert not leaks("the request to the model", sent, [key]), sent
    (offered,) = [tool["function"] for tool in loop.bodies[0]["tools"] if tool["function"]["name"] == "mcp__k__keyed"]
    mark = marker(name)
    assert offered["description"].startswith(f"Calls the service with key {mark}; ppp"), offered["description"][:80]
    # (the key across the cut: its marker, which the cut would split, left out whole)
    rest = offered["description"].split("; ", 1)[1]
    assert 8192 - len(mark) < len(offered["description"]) < 8192 and rest.strip("p") == "", offered["description"][-40:]
    schema = offered["parameters"]
    assert schema["description"] == f"uses {mark}" and mark in schema["properties"], schema
    assert schema["properties"]["token"] == {"type": "string", "default": mark, "description": f"e.g. {mark}"}, schema
