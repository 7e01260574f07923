"""F-MOD-6 end to end: ``lens serve`` with variables the official SDKs read on their own in its
environment (``OPENAI_CUSTOM_HEADERS``, ``ANTHROPIC_CUSTOM_HEADERS``, ``OPENAI_ORG_ID``…), each
provider pointed at a loopback server speaking its wire protocol. Every request carries the key
the config names (or none) and nothing of those variables; a server that echoes what it was sent
in an error leaves none of it in the log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx2
import trio

from ..providers.scripts import reply
from ..providers.servers import anthropic as an
from ..providers.servers import openai_responses as orr
from ..providers.servers.base import ScriptedServer
from ..providers.test_sdk_environment import SDK_ENV, env_values
from .conftest import LIMIT, ServeProcess, as_daemon, served_once
from .keyleaks import SLOW, leaks

KEY_ENV = "LENS_TEST_SDK_ENV_KEY"
KEY = "sk-proj-cfgKey2Vn8Lq4Zt6Wy"


async def test_a_provider_sends_only_the_key_its_config_names(tmp_path: Path) -> None:
    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({"providers": [
            {"id": "chat", "protocol": "openai-chat", "baseUrl": url + "/v1", "apiKeyEnv": KEY_ENV,
             "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "resp", "protocol": "openai-responses", "baseUrl": url + "/v1", "maxRetries": 0,
             "models": [{"id": "m"}]},
            {"id": "anth", "protocol": "anthropic", "baseUrl": url, "maxRetries": 0, "models": [{"id": "m"}]},
        ], "defaultModel": "chat/m"}))
        async with served_once(ServeProcess(tmp_path, env={**os.environ, **SDK_ENV, KEY_ENV: KEY})) as daemon_url:
            async with httpx2.AsyncClient(base_url=daemon_url, timeout=LIMIT) as client:
                d = as_daemon(tmp_path, daemon_url, client)
                token = await d.pair("sdk-env", strong=True, via="cli")
                project = await d.project(token, "p")
                for pid, protocol in (("chat", "openai-chat"), ("resp", "openai-responses"), ("anth", "anthropic")):
                    r = await d.post("/sessions", token, {"projectId": project["id"], "model": f"{pid}/m"})
                    assert r.status_code == 201, r.text
                    sid = r.json()["id"]
                    server.push(reply(protocol, text="fine"))
                    await d.submit(token, sid, f"{pid}-1", "hello")
                    await d.wait_idle(token, sid, timeout=SLOW)
                    # A server quoting the headers it was sent in a 400 (proxies do).
                    sent = "; ".join(f"{k}={v}" for k, v in server.requests[-1].headers.items())
                    error = an.error(400, f"bad request, headers: {sent}") if protocol == "anthropic" else \
                        orr.error(400, f"bad request, headers: {sent}")
                    server.push(error)
                    await d.submit(token, sid, f"{pid}-2", "again")
                    await d.wait_idle(token, sid, timeout=SLOW)
                    events = await d.events(token, sid)
                    assert [e["body"]["text"] for e in events if e["kind"] == "model.responded"] == ["fine"]
                    failed = [e["body"] for e in events if e["kind"] == "model.failed"]
                    assert [f["code"] for f in failed] == ["BAD_REQUEST"], failed
                    assert "bad request, headers:" in failed[0]["message"]
                    assert leaks(f"{pid} events", json.dumps(events), env_values()) == []
        nursery.cancel_scope.cancel()
    for rq in server.requests:
        auth = rq.headers.get("authorization")
        assert auth == (f"Bearer {KEY}" if rq.path.endswith("/chat/completions") else "Bearer lens-no-key"), rq.headers
        assert leaks(rq.path, json.dumps(rq.headers), env_values()) == [], rq.headers
    assert len(server.requests) == 6
