"""F-ACT-6, F-MOD-5 and F-CTX-5 together: a session's model changed mid-session across providers
and protocols (Anthropic Messages, OpenAI Chat Completions, both on loopback servers speaking
their wire protocols through the official SDKs), a subagent on the changed model, a restart
without the new provider's key, and the usage of every agent through all of it."""

from __future__ import annotations

from typing import Any

from ..providers.servers import openai_chat as oc
from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import error_of, stop_daemon

KEY_ENV = "LENS_TEST_SWITCH_KEY"


def _config(claude: str, chat: str) -> dict[str, Any]:
    return {"providers": [
        {"id": "claude", "protocol": "anthropic", "baseUrl": claude, "models": [{"id": "claude-test"}]},
        {"id": "oa", "protocol": "openai-chat", "baseUrl": chat + "/v1", "apiKeyEnv": KEY_ENV,
         "models": [{"id": "chat-test"}]},
    ], "defaultModel": "claude/claude-test"}


def _claude(text: str, input_tokens: int, output_tokens: int) -> Any:
    return message_stream(text=text, usage={"input_tokens": input_tokens, "output_tokens": 1},
                          output_tokens=output_tokens)


async def test_a_model_changed_across_providers_mid_session(daemon_factory, nursery, monkeypatch):
    claude, chat = ScriptedServer(), ScriptedServer()
    config = _config(await claude.start(nursery), await chat.start(nursery))
    monkeypatch.setenv(KEY_ENV, "sk-switch-test-0123456789")
    claude.push(_claude("first, from claude", 100, 10))
    chat.push(
        oc.chat_stream(calls=[("call_1", "subagent", {"prompt": "look it up"})], usage=oc.usage(200, 20, cached=50)),
        oc.chat_stream(text="looked up", usage=oc.usage(30, 3)),             # the subagent
        oc.chat_stream(text="second, from chat", usage=oc.usage(250, 25, cached=200)),
    )
    d = await daemon_factory(config=config)
    token = await d.pair("switch-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)

    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "oa/chat-test"})
    assert r.status_code == 200 and r.json()["model"] == "oa/chat-test", r.text
    await d.submit(token, sid, "r2", "delegate it")
    view = await d.wait_idle(token, sid)
    assert [it.get("text") for it in view["items"] if it["role"] == "assistant"] == [
        "first, from claude", "second, from chat"]
    assert len(claude.requests) == 1 and len(chat.requests) == 3
    assert all(req.headers["authorization"] == "Bearer sk-switch-test-0123456789" for req in chat.requests)
    assert [req.body["model"] for req in chat.requests] == ["chat-test"] * 3
    requested = [(e["agent_id"] == "main", e["body"]["provider"], e["body"]["model"])
                 for e in await d.events(token, sid) if e["kind"] == "model.requested"]
    assert requested == [(True, "claude", "claude-test"), (True, "oa", "chat-test"), (False, "oa", "chat-test"),
                         (True, "oa", "chat-test")]

    # Restarted without the key: the session's model cannot serve; nothing is recorded for the
    # refused input; a change back to a provider that can serve works at once.
    await stop_daemon(d)
    monkeypatch.delenv(KEY_ENV)
    d2 = await daemon_factory(config=config, root=d.root)
    before = await d2.events(token, sid)
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r3", "content": "again"})
    assert (r.status_code, error_of(r)) == (422, "PROVIDER_KEY_REQUIRED") and KEY_ENV in r.text, r.text
    assert "sk-switch" not in r.text
    assert await d2.events(token, sid) == before
    r = await d2.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "claude/claude-test"})
    assert r.status_code == 200, r.text
    claude.push(_claude("third, from claude again", 400, 40))
    await d2.submit(token, sid, "r3", "again")
    view = await d2.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "third, from claude again"

    # Usage: Anthropic's input counts exclude cache reads, Chat's include them (providers.md);
    # each total is the sum of what the answers reported, per agent and for the session.
    main = {"requests": 4, "inputTokens": 100 + 200 + 250 + 400, "outputTokens": 10 + 20 + 25 + 40,
            "cacheReadTokens": 50 + 200}
    sub = {"requests": 1, "inputTokens": 30, "outputTokens": 3, "cacheReadTokens": None}
    agents = {a["agentId"]: {k: a["usage"][k] for k in main} for a in view["agents"]}
    assert agents == {"main": main, "sub_call_1": sub}
    assert {k: view["usage"][k] for k in main} == {"requests": 5, "inputTokens": 980, "outputTokens": 98,
                                                   "cacheReadTokens": 250}
    # Anthropic's answers (no cache fields here) and the subagent's Chat answer left cache reads out.
    assert view["usage"]["unreported"]["cacheReadTokens"] == 3
