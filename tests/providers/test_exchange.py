"""Multi-turn tool calling end to end: real SDK clients, real HTTP on loopback, each protocol."""

from __future__ import annotations

import json

import pytest

from events import types as t

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply


def sent_messages(protocol: str, body: dict) -> list:
    return body["input"] if protocol == "openai-responses" else body["messages"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_multi_turn_tool_calling(protocol, server, make):
    provider = make(protocol)
    server.push(
        reply(protocol, text=["Let me ", "look."], calls=[("call_1", "read_file", {"path": "a.txt"}),
                                                         ("call_2", "get_system_time", {})],
              reasoning=["thinking about it"], rid="r1"),
        reply(protocol, text=["The file ", "says hi."], rid="r2"),
    )
    ctx = Ctx().user("what is in a.txt?")
    deltas = Deltas()
    first = await provider.stream(ctx.request(), deltas)
    assert first.text == "Let me look."
    assert deltas.text() == "Let me look."
    assert deltas.text("reasoning") == "thinking about it"
    assert first.reasoning == "thinking about it"
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("call_1", "read_file", {"path": "a.txt"}), ("call_2", "get_system_time", {})]
    assert first.stop_reason == "tool_use"
    assert first.response_id is not None
    # Usage exactly as reported; fields the provider did not send stay unknown.
    assert first.usage.output_tokens == 20 and first.usage.cache_read_tokens == 40
    if protocol == "openai-responses":
        assert first.usage == t.Usage(100, 20, 40, None, 5, 100)  # (input_tokens includes the cached)
    elif protocol == "openai-chat":
        assert first.usage == t.Usage(100, 20, 40, None, None, 100)
    else:  # (input_tokens excludes cache reads and writes: the total adds them)
        assert first.usage == t.Usage(100, 20, 40, 12, None, 152)

    # Turn two: the calls and their results go back, paired by id, in order.
    ctx.response(first.text, *[(c.call_id, c.name, c.arguments) for c in first.tool_calls])
    ctx.result("call_1", "hi")
    ctx.result("call_2", '{"unix_ms": 1}')
    second = await provider.stream(ctx.request(), Deltas())
    assert second.text == "The file says hi." and second.tool_calls == [] and second.stop_reason == "end_turn"

    body = server.requests[1].body
    assert body["stream"] is True and body["model"] == "m1"
    msgs = sent_messages(protocol, body)
    if protocol == "openai-responses":
        assert [m.get("type", m.get("role")) for m in msgs] == [
            "developer", "user", "assistant", "function_call", "function_call", "function_call_output", "function_call_output"]
        assert msgs[3] == {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": '{"path": "a.txt"}'}
        assert msgs[5] == {"type": "function_call_output", "call_id": "call_1", "output": "hi"}
        assert body["store"] is False
        assert {tool["name"] for tool in body["tools"]} == {"read_file", "get_system_time"}
        assert body["tools"][0]["parameters"]["required"] == ["path"]
    elif protocol == "openai-chat":
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool"]
        assert msgs[2]["tool_calls"][0] == {"id": "call_1", "type": "function",
                                            "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}
        assert msgs[3] == {"role": "tool", "tool_call_id": "call_1", "content": "hi"}
        assert body["stream_options"] == {"include_usage": True}
        assert body["tools"][0]["function"]["name"] == "read_file"
    else:
        assert body["system"][0]["text"] == "You are a test agent."
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
        assert [b["type"] for b in msgs[1]["content"]] == ["text", "tool_use", "tool_use"]
        assert msgs[1]["content"][1] == {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "a.txt"}}
        assert [(b["type"], b["tool_use_id"]) for b in msgs[2]["content"]] == [("tool_result", "call_1"), ("tool_result", "call_2")]
        assert body["tools"][0]["input_schema"]["required"] == ["path"]
        assert body["max_tokens"] > 0
    # The key travels only as the SDK's auth header.
    headers = server.requests[1].headers
    assert headers.get("authorization") == "Bearer test-key" or headers.get("x-api-key") == "test-key"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_thinking_level_is_requested(protocol, server, make):
    provider = make(protocol)
    server.push(reply(protocol, text="ok"))
    await provider.stream(Ctx().user("hi").request(thinking="high"), Deltas())
    body = server.requests[0].body
    if protocol == "openai-responses":
        assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    elif protocol == "openai-chat":
        assert body["reasoning_effort"] == "high"
    else:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
        assert body["max_tokens"] > 16384
