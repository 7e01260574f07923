"""The built-in real providers end to end: ``lens serve`` as a real process on embedded defaults
(no config file) with the SDKs' own variables in its environment. ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL`` point the built-in ``openai`` and ``anthropic`` providers at a loopback
server speaking the real Responses and Messages wire protocols, reached through the official
SDKs (streaming). Without a key only faux is the default and a built-in provider answers
``PROVIDER_KEY_REQUIRED``; with one, a session on embedded defaults is answered by the loopback
server, the key sent as the SDK sends it and found nowhere else (stdout, stderr, the files under
the data directory); a config entry replacing ``openai`` wins; both keys pick ``anthropic``."""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import httpx2
import trio

from ..providers.servers import anthropic as an
from ..providers.servers import openai_responses as orr
from ..providers.servers.base import ScriptedServer
from .conftest import LIMIT, Daemon, ServeProcess, as_daemon, error_of, served_once
from .keyleaks import SLOW, leaks, unpacked

OPENAI_KEY = "sk-proj-N4vB7cX1zL8kJ5hG2fD9sBuiltinOpenaiQ3"
ANTHROPIC_KEY = "sk-ant-api03-R6tY9uI2oP5aS8dF1gH4jBuiltinAnthW7"
MINE_KEY = "sk-mine-E3wQ6rT9yU2iO5pA8sD1fGconfiguredZ4"  # the key of a config entry replacing openai
CANARIES = [OPENAI_KEY, ANTHROPIC_KEY, MINE_KEY]


@asynccontextmanager
async def serving_with(cwd: Path, env: dict[str, str],
                       config: dict[str, Any] | None = None) -> AsyncIterator[tuple[ServeProcess, Daemon, str, ScriptedServer]]:
    """``lens serve`` in ``cwd`` with ``env`` added to this environment (which the suite's
    conftest cleared of the SDKs' variables); ``{loop}`` in a value is the loopback server's URL.
    Yields the process, the client helpers, a strong credential and the loopback server; the
    process must stop with exit 0 when the block ends."""
    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        if config is not None:
            (cwd / "config").mkdir()
            (cwd / "config" / "lens.jsonc").write_text(json.dumps(config).replace("{loop}", url))
        serve = ServeProcess(cwd, env={**os.environ, **{k: v.replace("{loop}", url) for k, v in env.items()}})
        async with served_once(serve) as daemon_url:
            async with httpx2.AsyncClient(base_url=daemon_url, timeout=LIMIT,
                                          limits=httpx2.Limits(max_keepalive_connections=0)) as client:
                d = as_daemon(cwd, daemon_url, client)
                token = await d.pair("builtin-client", strong=True, via="cli")
                yield serve, d, token, server
        nursery.cancel_scope.cancel()


def default_line(serve: ServeProcess) -> str:
    lines = [line for line in serve.lines if line.startswith("lens: default model ")]
    assert len(lines) == 1, serve.lines
    return lines[0]


async def models(d: Daemon, token: str) -> dict[str, Any]:
    r = await d.get("/models", token)
    assert r.status_code == 200, r.text
    return r.json()


async def answered(d: Daemon, token: str, sid: str, request_id: str) -> dict[str, Any]:
    """Submit a question to ``sid`` and return its ``model.responded`` body."""
    await d.submit(token, sid, request_id, "say hello")
    await d.wait_idle(token, sid, timeout=SLOW)
    events = await d.events(token, sid)
    failed = [e["body"] for e in events if e["kind"] == "model.failed"]
    assert not failed, failed
    (body,) = [e["body"] for e in events if e["kind"] == "model.responded"]
    return body


def assert_no_key_leaked(cwd: Path, serve: ServeProcess) -> None:
    found = leaks("stdout", "\n".join(serve.lines), CANARIES)
    found += leaks("stderr", (cwd / serve.stderr_name).read_bytes(), CANARIES)
    for path in sorted((cwd / "data").rglob("*")):
        if path.is_file():
            found += leaks(str(path.relative_to(cwd)), unpacked(path.read_bytes()), CANARIES)
    assert not found, "\n".join(found)


async def test_without_keys_faux_is_the_default_and_the_built_in_providers_need_theirs(tmp_path: Path):
    env = {"OPENAI_BASE_URL": "{loop}/v1", "ANTHROPIC_BASE_URL": "{loop}"}
    async with serving_with(tmp_path, env) as (serve, d, token, server):
        assert default_line(serve) == \
            "lens: default model faux/faux-1 (built in: no usable key in ANTHROPIC_API_KEY or OPENAI_API_KEY)"
        listing = await models(d, token)
        assert listing["default"] == {"effective": "faux/faux-1", "source": "default", "saved": None}
        by_ref = {m["id"]: m for m in listing["models"]}
        for ref in ("openai/gpt-5.5", "anthropic/claude-sonnet-5-5"):
            assert (by_ref[ref]["enabled"], by_ref[ref]["available"], by_ref[ref]["reason"]) == \
                (True, False, "PROVIDER_KEY_REQUIRED"), by_ref[ref]
        project = await d.project(token)
        for ref, variable in (("openai/gpt-5.5", "OPENAI_API_KEY"), ("anthropic/claude-sonnet-5-5", "ANTHROPIC_API_KEY")):
            r = await d.post("/sessions", token, {"projectId": project["id"], "model": ref})
            assert (r.status_code, error_of(r)) == (422, "PROVIDER_KEY_REQUIRED"), r.text
            assert variable in r.json()["error"]["message"]
        session = await d.session(token, project["id"])
        assert session["model"] == "faux/faux-1"
        await answered(d, token, session["id"], "r1")  # (faux answers)
    assert server.requests == []


async def test_an_openai_key_makes_openai_the_default_answered_through_the_sdk(tmp_path: Path):
    env = {"OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": "{loop}/v1", "ANTHROPIC_BASE_URL": "{loop}"}
    async with serving_with(tmp_path, env) as (serve, d, token, server):
        assert default_line(serve) == "lens: default model openai/gpt-5.5 (built in: OPENAI_API_KEY is set)"
        assert (await models(d, token))["default"] == {"effective": "openai/gpt-5.5", "source": "default", "saved": None}
        project = await d.project(token)
        session = await d.session(token, project["id"])
        assert session["model"] == "openai/gpt-5.5"
        server.push(orr.response_stream(text=["Hello ", "from the ", "loopback"], model="gpt-5.5"))
        assert (await answered(d, token, session["id"], "r1"))["text"] == "Hello from the loopback"
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert (request.body["model"], request.body["stream"]) == ("gpt-5.5", True)
    assert_no_key_leaked(tmp_path, serve)


async def test_both_keys_pick_anthropic(tmp_path: Path):
    env = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
           "OPENAI_BASE_URL": "{loop}/v1", "ANTHROPIC_BASE_URL": "{loop}"}
    async with serving_with(tmp_path, env) as (serve, d, token, server):
        assert default_line(serve) == \
            "lens: default model anthropic/claude-sonnet-5-5 (built in: ANTHROPIC_API_KEY is set)"
        project = await d.project(token)
        session = await d.session(token, project["id"])
        assert session["model"] == "anthropic/claude-sonnet-5-5"
        server.push(an.message_stream(text=["Hello ", "from Messages"], model="claude-sonnet-5-5"))
        assert (await answered(d, token, session["id"], "r1"))["text"] == "Hello from Messages"
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    # (as the pinned SDK sends an api_key: `Authorization: Bearer`, no x-api-key)
    assert request.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}" and "x-api-key" not in request.headers
    assert request.headers["anthropic-version"]
    assert (request.body["model"], request.body["stream"]) == ("claude-sonnet-5-5", True)
    assert_no_key_leaked(tmp_path, serve)


async def test_a_config_entry_replacing_openai_wins(tmp_path: Path):
    config = {"providers": [{"id": "openai", "protocol": "openai-responses", "baseUrl": "{loop}/v1",
                             "apiKeyEnv": "LENS_TEST_MINE_KEY", "maxRetries": 0, "models": [{"id": "mine"}]}],
              "defaultModel": "openai/mine"}
    # OPENAI_BASE_URL is not read for a configured entry: a port nothing listens on would fail it
    env = {"OPENAI_API_KEY": OPENAI_KEY, "LENS_TEST_MINE_KEY": MINE_KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    async with serving_with(tmp_path, env, config) as (serve, d, token, server):
        assert default_line(serve) == "lens: default model openai/mine (defaultModel of config/lens.jsonc)"
        listing = await models(d, token)
        assert [m["id"] for m in listing["models"] if m["provider"] == "openai"] == ["openai/mine"]
        project = await d.project(token)
        session = await d.session(token, project["id"])
        server.push(orr.response_stream(text="from my entry", model="mine"))
        assert (await answered(d, token, session["id"], "r1"))["text"] == "from my entry"
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {MINE_KEY}" and request.body["model"] == "mine"
    assert_no_key_leaked(tmp_path, serve)
