"""F-MOD-6 end to end: provider keys are never printed, logged or stored.

``lens serve`` runs as a real process (its own stdout and stderr) with canary keys in its
environment and its providers pointed at a loopback server that speaks each wire protocol and
misbehaves as real providers do: a 401 that echoes the key (whole, or masked as OpenAI masks it),
429 and 500 bodies quoting it, an error inside the stream, a stream cut mid-answer and frames the
SDK cannot read. (A ``baseUrl`` carrying a user name and password is refused by the config: see
the last tests.) Sessions are driven over HTTP so that each failure happens; then every surface is
searched for each canary, whole and any 8-character piece of it: the daemon's output, every HTTP
answer (body and headers), the SSE stream, the raw bytes of every file under the data directory
(``events.db``, ``projections.db``, artifacts, snapshots), ``lens log decode`` (also ``--raw``),
the config-file API and the dashboard page.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx2
import trio
import zstandard

from ..providers.servers import anthropic as an
from ..providers.servers import openai_chat as oc
from ..providers.servers import openai_responses as orr
from ..providers.servers.base import Reply, ScriptedServer

from .conftest import LIMIT, Daemon, DaemonFactory, error_of, run_lens
from .test_serve_process import ServeProcess, as_daemon

# Distinctive values, no 8 characters of which occur anywhere by chance.
KEYS = {
    "OPENAI_API_KEY": "sk-proj-Q7mZ4kT1vB8nR3wY6pJ0dF5hGcanaryChatA1",
    "LENS_TEST_RESPONSES_KEY": "sk-proj-X2cV9bN4mL7kJ1hG3fD8sCanaryRespB2",
    "ANTHROPIC_API_KEY": "sk-ant-api03-W5eR8tY2uI6oP9aS3dF7gHcanaryAnthC3",
}
CANARIES = list(KEYS.values())
PIECE = 8  # a leak is the whole value or any piece of this many characters
SLOW = 30.0  # seconds: a session's first turn waits for its project's executor (a bound, not a time)


def masked(key: str) -> str:
    """The key as OpenAI's 401 quotes it: its start, stars, its last four characters."""
    return f"{key[:8]}{'*' * 28}{key[-4:]}"


def pieces(value: str) -> set[str]:
    return {value[i:i + PIECE] for i in range(len(value) - PIECE + 1)}


def leaks(where: str, data: bytes | str, canaries: list[str] = CANARIES) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    found = []
    for canary in canaries:
        hit = next((p for p in sorted(pieces(canary)) if p in text), None)
        if hit is not None:
            at = text.index(hit)
            found.append(f"{where}: {hit!r} of {canary[:4]}…: …{text[max(0, at - 80):at + 80]!r}…")
    return found


def unpacked(data: bytes) -> bytes:
    """``data`` followed by the content of every zstd frame in it (event bodies, snapshots)."""
    out = [data]
    at = data.find(ZSTD_MAGIC)
    while at >= 0:
        try:
            out.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[at:]))
        except zstandard.ZstdError:
            pass
        at = data.find(ZSTD_MAGIC, at + 1)
    return b"\n".join(out)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def scenarios(protocol: str, key: str) -> list[tuple[str, Reply]]:
    """(the code the session's ``model.failed`` should carry, the misbehaving reply)."""
    err = (lambda status, message, kind: an.error(status, message, type=kind)) if protocol == "anthropic" else \
        (lambda status, message, kind: orr.error(status, message, type=kind))
    good = {"openai-chat": lambda: oc.chat_stream(text=["partial ", "answer ", "cut"]),
            "openai-responses": lambda: orr.response_stream(text=["partial ", "answer ", "cut"]),
            "anthropic": lambda: an.message_stream(text=["partial ", "answer ", "cut"])}[protocol]
    head = good().events[:3]  # the stream's first frames: some text has streamed
    frame_name = {"openai-chat": None, "openai-responses": "response.output_text.delta",
                  "anthropic": "content_block_delta"}[protocol]
    if protocol == "anthropic":
        stream_error = ("error", {"type": "error", "error": {"type": "api_error",
                                                               "message": f"upstream refused key {key}"}})
    elif protocol == "openai-responses":
        stream_error = ("response.failed", {"type": "response.failed", "sequence_number": 3, "response": {
            "id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "failed", "output": [],
            "error": {"code": "server_error", "message": f"key {masked(key)} failed upstream"}}})
    else:
        stream_error = (None, {"error": {"message": f"upstream refused key {key}", "type": "server_error"}})
    return [
        ("AUTH_FAILED", err(401, f"Incorrect API key provided: {key}. You can find your API key at "
                                 "https://platform.openai.com/account/api-keys.", "authentication_error")),
        ("AUTH_FAILED", err(401, f"Incorrect API key provided: {masked(key)}.", "authentication_error")),
        ("BAD_REQUEST", err(400, f"Invalid request for the key {masked(key)}", "invalid_request_error")),
        ("RATE_LIMITED", err(429, f"Rate limit reached for key {key} (also known as {masked(key)})",
                             "rate_limit_error")),
        ("PROVIDER_ERROR", Reply(500, f"<html>proxy error: upstream said no to key={key[:24]}</html>")),
        ("PROVIDER_ERROR", Reply(503, {"detail": [{"msg": "bad key", "input": key[6:30]}]})),
        ("PROVIDER_ERROR", Reply(events=head)),  # cut mid-answer: no final frame
        ("PROVIDER_ERROR", Reply(events=[*head, (frame_name, "{not json " + key)])),
        ("PROVIDER_ERROR", Reply(events=[*head, stream_error])),
    ]


def config(url: str) -> dict[str, Any]:
    return {
        "providers": [
            {"id": "chat", "protocol": "openai-chat", "baseUrl": url + "/v1", "apiKeyEnv": "OPENAI_API_KEY",
             "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "resp", "protocol": "openai-responses", "baseUrl": url + "/v1",
             "apiKeyEnv": "LENS_TEST_RESPONSES_KEY", "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "anth", "protocol": "anthropic", "baseUrl": url, "apiKeyEnv": "ANTHROPIC_API_KEY",
             "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]},
        ],
        "defaultModel": "chat/m",
        "sessions": {"snapshotEvery": 4},  # (snapshots are written: their files are searched too)
    }


class Recorder:
    """Every answer the daemon gave a client: status line, headers and body."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def on_response(self, resp: httpx2.Response) -> None:
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            return  # (the stream's bytes are kept by the reader)
        await resp.aread()
        head = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
        self.seen.append((f"{resp.request.method} {resp.request.url.path}", head.encode() + b"\n\n" + resp.content))


async def test_provider_keys_never_leave_the_daemon(tmp_path: Path):
    server = ScriptedServer()
    recorder = Recorder()
    sse_bytes = bytearray()
    env = {**os.environ, **KEYS}
    (tmp_path / "config").mkdir()
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(config(url), indent=2))
        serve = ServeProcess(tmp_path, env=env)
        try:
            daemon_url = await serve.run(nursery)
            # (No connection is kept alive: a request sent on an idle one just as the daemon's
            # keep-alive timer closes it fails without an answer — the race every HTTP/1.1 client
            # meets, which a client expiring its connections first only narrows. On a loaded
            # machine this test met it. Keys are what it is about, not connection reuse.)
            async with httpx2.AsyncClient(base_url=daemon_url, timeout=LIMIT,
                                          limits=httpx2.Limits(max_keepalive_connections=0),
                                          event_hooks={"response": [recorder.on_response]}) as client:
                d = as_daemon(tmp_path, daemon_url, client)
                token = await d.pair("canary-client", strong=True, via="cli")
                project = await d.project(token, "p")
                async with trio.open_nursery() as inner:
                    inner.start_soon(watch, d, token, sse_bytes)
                    await drive(d, token, project, server)
                    # Read every surface a client can.
                    for path in ("/sessions", "/projects", "/models", "/config/files", "/tools/inventory",
                                 "/config/files/lens.jsonc", "/whoami", "/health"):
                        await d.get(path, token)
                    for s in (await d.get("/sessions", token)).json()["sessions"]:
                        await d.get(f"/sessions/{s['id']}", token)
                        await d.get(f"/sessions/{s['id']}/context", token)
                        await d.events(token, s["id"])
                    for query in ("key", "answer", "proxy", "redacted"):
                        await d.post("/history/search", token, {"projectId": project["id"], "query": query})
                    assert (await client.get("/")).status_code == 200  # the dashboard
                    last = (await d.get("/health")).json()["lastSeq"]
                    with trio.fail_after(LIMIT):
                        while f"id: {last}\n".encode() not in sse_bytes:
                            await trio.sleep(0.02)
                    inner.cancel_scope.cancel()
            assert await serve.terminate() == 0
        finally:
            serve.kill()
            nursery.cancel_scope.cancel()

    found: list[str] = []
    found += leaks("stdout", "\n".join(serve.lines))
    found += leaks("stderr", (tmp_path / serve.stderr_name).read_bytes())
    for where, data in recorder.seen:
        found += leaks(where, data)
    found += leaks("SSE stream", bytes(sse_bytes))
    files = [p for p in sorted((tmp_path / "data").rglob("*")) if p.is_file()]
    with closing(sqlite3.connect(tmp_path / "data" / "projections.db")) as con:
        assert con.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 3  # (searched below)
    for path in files:
        found += leaks(str(path.relative_to(tmp_path)), unpacked(path.read_bytes()))
    for args in (["log", "decode", "--data", "data"], ["log", "decode", "--data", "data", "--raw"]):
        out = await run_lens(tmp_path, *args)
        found += leaks(" ".join(args), out.stdout + out.stderr)
    assert not found, "\n".join(found)


async def watch(d: Daemon, token: str, into: bytearray) -> None:
    """The live stream, answers' deltas included, from the start of the log."""
    async with d.sse(token, last_event_id=0) as stream:
        async for chunk in stream._chunks:
            into.extend(chunk)


async def drive(d: Daemon, token: str, project: dict[str, Any], server: ScriptedServer) -> None:
    """One session per keyed provider, each misbehaviour in turn."""
    for pid, protocol, env_name in [("chat", "openai-chat", "OPENAI_API_KEY"),
                                    ("resp", "openai-responses", "LENS_TEST_RESPONSES_KEY"),
                                    ("anth", "anthropic", "ANTHROPIC_API_KEY")]:
        r = await d.post("/sessions", token, {"projectId": project["id"], "model": f"{pid}/m"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for i, (code, misbehaviour) in enumerate(scenarios(protocol, KEYS[env_name])):
            server.push(misbehaviour)
            await d.submit(token, sid, f"{pid}-{i}", f"question {i}")
            await d.wait_idle(token, sid, timeout=SLOW)
            failed = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
            assert len(failed) == i + 1, (pid, i, failed)
            assert failed[-1]["code"] == code, (pid, i, failed[-1])
        # (each request sent the key: every misbehaviour answered a request that carried it)
        assert all(KEYS[env_name] in rq.headers.values() or f"Bearer {KEYS[env_name]}" in rq.headers.values()
                   for rq in server.requests[-len(scenarios(protocol, "")):])
    # A command the agent runs prints its environment (and its parent's, the executor's): the
    # result is searched with everything else.
    r = await d.post("/sessions", token, {"projectId": project["id"], "model": "faux/faux-1"})
    sid = r.json()["id"]
    command = {"command": "env; tr '\\0' '\\n' < /proc/$PPID/environ"}
    await d.submit(token, sid, "env-1", f"/tool run_command {json.dumps(command)}")
    await d.wait_idle(token, sid)
    result = [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"][-1]
    assert not result["is_error"] and "PATH=" in json.dumps(result), result


async def test_a_refused_provider_base_url_is_named_without_its_credentials(daemon_factory: DaemonFactory,
                                                                           tmp_path: Path) -> None:
    # The CONFIG_INVALID message quoted the URL as written, the proxy's user name and password
    # with it, in the answer to a config write and in `lens serve`'s error at start.
    d = await daemon_factory()
    token = await d.pair("config-client", strong=True)
    for base_url in ("http://alice:hunter2@proxy.example:99999/v1", "http://alice:hunter2@proxy .example/v1",
                     "ftp://alice:hunter2@proxy.example/v1"):
        text = json.dumps({"providers": [{"id": "via-proxy", "protocol": "openai-chat", "baseUrl": base_url}]})
        r = await d.put("/config/files/lens.jsonc", token, {"text": text})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        message = r.json()["error"]["message"]
        assert "provider 'via-proxy': baseUrl" in message and "proxy" in message, message
        assert "alice" not in message and "hunter2" not in message, message
        (tmp_path / "c.jsonc").write_text(text)
        out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
        assert out.returncode == 2 and "CONFIG_INVALID" in out.stderr, out.stderr
        assert "alice" not in out.stderr + out.stdout and "hunter2" not in out.stderr + out.stdout, out.stderr


async def test_credentials_in_a_configured_url_are_refused_without_quoting_them(daemon_factory: DaemonFactory,
                                                                               tmp_path: Path) -> None:
    # A provider `baseUrl` with `user:password@` was accepted: the password sat in the config file
    # (which the config-file API serves), and the SDKs' HTTP client sent it as Basic auth in place
    # of the key's header, so the key of `apiKeyEnv` was never sent. It is now refused when the
    # config is written and when `lens serve` reads it, as `webSearch.baseUrl`'s was; an
    # `executor.address` with credentials was refused quoting the password.
    d = await daemon_factory()
    token = await d.pair("config-client", strong=True)
    before = (await d.get("/config/files/lens.jsonc", token)).json()["text"]
    chat = {"protocol": "openai-chat", "apiKeyEnv": "OPENAI_API_KEY", "models": [{"id": "m"}]}
    for body, words in [
        ({"providers": [{"id": "via-proxy", **chat, "baseUrl": "http://alice:hunter2@proxy.example/v1"}]},
         "provider 'via-proxy': baseUrl must not carry a user name or password"),
        ({"providers": [{"id": "via-proxy", **chat, "protocol": "anthropic",
                         "baseUrl": "https://:hunter2@127.0.0.1:8443"}]},
         "provider 'via-proxy': baseUrl must not carry a user name or password"),
        ({"executor": {"address": "alice:hunter2@127.0.0.1:7421", "tokenEnv": "EXECUTOR_TOKEN"}},
         "executor.address must be 'host:port'"),
        ({"webSearch": {"baseUrl": "https://alice:hunter2@search.example"}}, "webSearch.baseUrl must be"),
    ]:
        text = json.dumps(body)
        r = await d.put("/config/files/lens.jsonc", token, {"text": text})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        message = r.json()["error"]["message"]
        assert words in message and "hunter2" not in message and "alice" not in message, message
        if "baseUrl must not" in words:
            assert "apiKeyEnv" in message, message
        assert (await d.get("/config/files/lens.jsonc", token)).json()["text"] == before  # (not written)
        (tmp_path / "c.jsonc").write_text(text)
        out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
        assert out.returncode == 2 and f"CONFIG_INVALID: c.jsonc: {words}" in out.stderr, out.stderr
        assert "hunter2" not in out.stderr + out.stdout and "alice" not in out.stderr + out.stdout, out.stderr
        assert not (tmp_path / "d").exists()
