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
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from ..providers.servers import anthropic as an
from ..providers.servers import openai_chat as oc
from ..providers.servers import openai_responses as orr
from ..providers.servers.base import Reply, ScriptedServer

from .conftest import Daemon, DaemonFactory, error_of, run_lens
from .keyleaks import KEYS, SLOW, leaks_everywhere, watched


def masked(key: str) -> str:
    """The key as OpenAI's 401 quotes it: its start, stars, its last four characters."""
    return f"{key[:8]}{'*' * 28}{key[-4:]}"


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


async def test_provider_keys_never_leave_the_daemon(tmp_path: Path):
    async with watched(tmp_path, "canary-client") as w:
        d, token = w.d, w.token
        await drive(d, token, w.project, w.server)
        # Read every surface a client can.
        for path in ("/sessions", "/projects", "/models", "/config/files", "/tools/inventory",
                     "/config/files/lens.jsonc", "/whoami", "/health"):
            await d.get(path, token)
        for s in (await d.get("/sessions", token)).json()["sessions"]:
            await d.get(f"/sessions/{s['id']}", token)
            await d.get(f"/sessions/{s['id']}/context", token)
            await d.events(token, s["id"])
        for query in ("key", "answer", "proxy", "redacted"):
            await d.post("/history/search", token, {"projectId": w.project["id"], "query": query})
        assert (await d.client.get("/")).status_code == 200  # the dashboard
    found, _ = await leaks_everywhere(w, raw=True)
    with closing(sqlite3.connect(tmp_path / "data" / "projections.db")) as con:
        assert con.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 3  # (searched above)
    assert not found, "\n".join(found)


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
