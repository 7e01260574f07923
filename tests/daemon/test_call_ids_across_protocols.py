"""A session that switches protocol keeps a history its new provider accepts (F-MOD-2, F-ACT-6)."""

from __future__ import annotations

import re

import trio

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import Reply, ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from ..providers.servers.openai_responses import response_stream
from .conftest import Daemon, DaemonFactory

ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]+")  # what the Messages API takes as a tool_use id
LONG_ID = "chatcmpl-tool-" + "0123456789abcdef" * 4 + "_0"  # 80 characters
# seconds: the first turn calls a tool, so it waits for the project's executor to start (a bound,
# not a time: on a loaded machine that start alone took most of the 10 s the other waits allow)
FIRST_TURN = 30.0


async def switch_after_a_call(daemon_factory: DaemonFactory, nursery: trio.Nursery, call_id: str,
                              to: tuple[str, str], answer: Reply) -> tuple[ScriptedServer, ScriptedServer, Daemon, str, str]:
    """A session on an OpenAI-compatible server that calls ``get_system_time`` under ``call_id``
    and answers, then switched to a model of protocol ``to[0]`` (server scripted with ``answer``,
    model id ``to[1]``) and asked again. Returns both servers, the daemon, a credential and the
    session, idle after the second run."""
    first, second = ScriptedServer(), ScriptedServer()
    first_url, second_url = await first.start(nursery), await second.start(nursery)
    protocol, model = to
    base = second_url if protocol == "anthropic" else f"{second_url}/v1"
    config = {"providers": [
        {"id": "compat", "protocol": "openai-chat", "baseUrl": f"{first_url}/v1", "models": [{"id": "compat-model"}]},
        {"id": "next", "protocol": protocol, "baseUrl": base, "models": [{"id": model}]}],
        "defaultModel": "compat/compat-model"}
    first.push(chat_stream(calls=[(call_id, "get_system_time", {})]), chat_stream(text="noon"))
    d = await daemon_factory(config=config)
    token = await d.pair("switch-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "what time is it?")
    await d.wait_idle(token, sid, timeout=FIRST_TURN)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": f"next/{model}"})
    assert r.status_code == 200, r.text
    second.push(answer)
    await d.submit(token, sid, "r2", "and now?")
    view = await d.wait_idle(token, sid)
    assert view["status"] == "idle"
    return first, second, d, token, sid


async def test_call_ids_of_a_compatible_server_are_sent_to_anthropic_in_the_form_it_takes(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    """Some OpenAI-compatible servers name calls ``functions.<tool>:<n>``; Anthropic refuses a
    ``tool_use`` id outside ``[A-Za-z0-9_-]`` (400), so after a switch to a Claude model every
    request of the session failed."""
    _, claude, d, token, sid = await switch_after_a_call(
        daemon_factory, nursery, "functions.get_system_time:0", ("anthropic", "claude-test"),
        message_stream(text="still noon"))
    assert len(claude.bodies) == 1
    messages = claude.bodies[0]["messages"]
    uses = [b for m in messages for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in messages for b in m["content"] if b["type"] == "tool_result"]
    assert len(uses) == len(results) == 1
    assert ANTHROPIC_ID.fullmatch(uses[0]["id"]), uses[0]["id"]
    assert results[0]["tool_use_id"] == uses[0]["id"]
    # The log keeps the id the server gave.
    calls = [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.started"]
    assert [c["call_id"] for c in calls] == ["functions.get_system_time:0"]


async def test_a_call_id_past_64_characters_is_sent_to_responses_under_an_alias(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    """The Responses API refuses a ``call_id`` longer than 64 characters (400
    ``string_above_max_length``); a session whose history held one (a compatible server's)
    failed every request after a switch to a Responses model."""
    _, responses, d, token, sid = await switch_after_a_call(
        daemon_factory, nursery, LONG_ID, ("openai-responses", "gpt-test"), response_stream(text="still noon"))
    assert len(responses.bodies) == 1
    inp = responses.bodies[0]["input"]
    calls = [m["call_id"] for m in inp if m.get("type") == "function_call"]
    outputs = [m["call_id"] for m in inp if m.get("type") == "function_call_output"]
    assert calls == outputs and len(calls) == 1
    assert 1 <= len(calls[0]) <= 64, calls[0]
    assert [e["body"]["call_id"] for e in await d.events(token, sid) if e["kind"] == "tool.started"] == [LONG_ID]


async def test_a_call_id_past_40_characters_is_sent_to_chat_completions_under_an_alias(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    """OpenAI's Chat Completions refuses a ``tool_calls[].id`` longer than 40 characters (400
    "string too long"); a session moved from a vLLM model (ids of 46 characters and more) to an
    OpenAI chat model failed every request after the switch."""
    vllm, openai_chat, d, token, sid = await switch_after_a_call(
        daemon_factory, nursery, LONG_ID, ("openai-chat", "gpt-test"), chat_stream(text="still noon"))
    # Every Chat Completions server gets the alias (there is no telling OpenAI's API from another
    # behind a base URL), the one that made the id too, and the result goes under the same.
    sent = vllm.bodies[1]["messages"]
    assert [c["id"] for m in sent for c in m.get("tool_calls") or []] == [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert len(openai_chat.bodies) == 1
    messages = openai_chat.bodies[0]["messages"]
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == results and len(calls) == 1
    assert 1 <= len(calls[0]) <= 40, calls[0]
    assert [e["body"]["call_id"] for e in await d.events(token, sid) if e["kind"] == "tool.started"] == [LONG_ID]
