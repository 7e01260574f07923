"""Provider-native reasoning goes back to the provider it came from, unchanged.

Anthropic signed ``thinking`` / ``redacted_thinking`` blocks and OpenAI Responses ``reasoning``
items (``encrypted_content``, with ``store: false``) are recorded on ``model.responded`` and sent
back on later requests: byte-exact, only to the protocol that produced them, and the same again
when the request is rebuilt from the log.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest

from events import types as t
from events.codec import Codec
from events.reader import StoredEvent
from projections.session_state import Item, SessionState, apply, snapshot_bytes, state_from_snapshot, working_context
from runtime.actor import GetState, Submit, WaitIdle
from runtime.config import ConfigError, ModelConfig, parse_config
from runtime.providers.base import ModelRequest
from runtime.providers.openai_chat import max_tokens_key

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply
from .servers import anthropic as an
from .servers import openai_responses as orr
from .test_actor import events_of, runtime

# A signature with every base64 character (``+``, ``/``, ``=`` padding) and a thinking text with
# non-ASCII and a JSON-escaped line separator: anything re-encoded on the way would show.
SIGNATURE = base64.b64encode(bytes(range(256)) * 3 + b"\x00").decode("ascii")
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP+/Q=="
THINKING = ["Read the file first. ", "Ünïcødé — \u2028 fine."]
ENCRYPTED = "gAAAAABo" + base64.urlsafe_b64encode(bytes(range(200))).decode("ascii")

ANTHROPIC_BLOCK = {"protocol": "anthropic", "block": {"type": "thinking", "thinking": "t", "signature": "sig-a"}}
RESPONSES_BLOCK = {"protocol": "openai-responses", "block": {
    "id": "rs_x", "type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}], "encrypted_content": "enc-x"}}


def call_args(result: Any) -> list[tuple[str, str, str]]:
    return [(c.call_id, c.name, c.arguments) for c in result.tool_calls]


async def test_anthropic_signed_thinking_goes_back_byte_exact(server, make):
    provider = make("anthropic")
    server.push(
        an.message_stream(text="Let me look.", calls=[("toolu_1", "read_file", {"path": "a.txt"})], thinking=THINKING,
                          signature=SIGNATURE, redacted=[REDACTED], message_id="msg_1"),
        an.message_stream(text="It says hi.", thinking=["done"], signature="sig-2", message_id="msg_2"),
    )
    ctx = Ctx().user("what is in a.txt?")
    first = await provider.stream(ctx.request(thinking="high"), Deltas())
    assert first.reasoning == "".join(THINKING)
    assert first.reasoning_blocks == [
        {"protocol": "anthropic", "block": {"type": "thinking", "thinking": "".join(THINKING), "signature": SIGNATURE}},
        {"protocol": "anthropic", "block": {"type": "redacted_thinking", "data": REDACTED}},
    ]
    recorded = json.loads(json.dumps(first.reasoning_blocks))

    ctx.response(first.text, *call_args(first), reasoning_blocks=first.reasoning_blocks)
    ctx.result("toolu_1", "hi")
    second = await provider.stream(ctx.request(thinking="high"), Deltas())
    assert second.text == "It says hi." and second.reasoning_blocks[0]["block"]["signature"] == "sig-2"

    body = server.requests[1].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    content = body["messages"][1]["content"]
    assert [b["type"] for b in content] == ["thinking", "redacted_thinking", "text", "tool_use"]
    # Exactly as received: same keys, same values, nothing added (no cache_control on them).
    assert content[0] == {"type": "thinking", "thinking": "".join(THINKING), "signature": SIGNATURE}
    assert content[1] == {"type": "redacted_thinking", "data": REDACTED}
    assert content[3]["id"] == "toolu_1"
    # The persisted blocks were not touched by rendering (cache marks go on copies).
    assert json.loads(json.dumps(ctx.items[1].reasoning_blocks)) == recorded


async def test_responses_reasoning_items_go_back_with_encrypted_content(server, make):
    provider = make("openai-responses")
    server.push(
        orr.response_stream(text="Let me look.", calls=[("call_1", "read_file", {"path": "a.txt"})],
                            reasoning=["Plan: read a.txt."], encrypted_content=ENCRYPTED, response_id="r1"),
        orr.response_stream(text="It says hi.", response_id="r2"),
    )
    ctx = Ctx().user("what is in a.txt?")
    first = await provider.stream(ctx.request(thinking="medium"), Deltas())
    item = {"id": "rs_r1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan: read a.txt."}],
            "encrypted_content": ENCRYPTED}
    assert first.reasoning_blocks == [{"protocol": "openai-responses", "block": item}]
    body = server.requests[0].body
    assert body["include"] == ["reasoning.encrypted_content"] and body["store"] is False

    ctx.response(first.text, *call_args(first), reasoning_blocks=first.reasoning_blocks)
    ctx.result("call_1", "hi")
    await provider.stream(ctx.request(thinking="medium"), Deltas())
    sent = server.requests[1].body["input"]
    assert [m.get("type", m.get("role")) for m in sent] == [
        "developer", "user", "reasoning", "assistant", "function_call", "function_call_output"]
    assert sent[2] == item  # before the output it led to, as received


async def test_responses_without_thinking_asks_for_no_encrypted_reasoning(server, make):
    provider = make("openai-responses")
    server.push(reply("openai-responses", text="ok"))
    await provider.stream(Ctx().user("hi").request(), Deltas())
    assert "include" not in server.requests[0].body and "reasoning" not in server.requests[0].body


async def test_a_reasoning_item_without_encrypted_content_is_not_sent_back(server, make):
    """``store: false``: the server cannot resolve a bare item id, so such an item stays out."""
    provider = make("openai-responses")
    server.push(reply("openai-responses", text="ok"))
    bare = {"protocol": "openai-responses", "block": {"id": "rs_1", "type": "reasoning", "summary": []}}
    ctx = Ctx().user("hi").response("", ("call_1", "get_system_time", {}), reasoning_blocks=[bare]).result("call_1", "{}")
    result = await provider.stream(ctx.request(thinking="low"), Deltas())
    sent = server.requests[0].body["input"]
    assert [m.get("type", m.get("role")) for m in sent] == ["developer", "user", "function_call", "function_call_output"]
    assert result.diagnostics["unsendable_reasoning_items"] == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_model_switch_drops_the_other_protocols_blocks(protocol, server, make):
    provider = make(protocol)
    server.push(reply(protocol, text="ok"))
    ctx = (Ctx().user("hi")
           .response("Looking.", ("call_1", "get_system_time", {}), reasoning_blocks=[ANTHROPIC_BLOCK, RESPONSES_BLOCK])
           .result("call_1", "{}"))
    result = await provider.stream(ctx.request(thinking="high"), Deltas())
    body = server.requests[0].body
    text = json.dumps(body)
    if protocol == "anthropic":
        assert body["messages"][1]["content"][0] == ANTHROPIC_BLOCK["block"]
        assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "text", "tool_use"]
        assert "enc-x" not in text and "rs_x" not in text
    elif protocol == "openai-responses":
        assert [m for m in body["input"] if m.get("type") == "reasoning"] == [RESPONSES_BLOCK["block"]]
        assert "sig-a" not in text
    else:  # Chat Completions has no field for either
        assert "sig-a" not in text and "enc-x" not in text and "rs_x" not in text
    if protocol != "openai-chat":
        assert result.diagnostics["foreign_reasoning_blocks"] == 1


# --------------------------------------------------------------------------- through the log


@pytest.mark.parametrize("protocol", ["anthropic", "openai-responses"])
async def test_replay_from_the_log_rebuilds_the_same_request(protocol, server, make, tmp_path):
    provider = make(protocol)
    server.push(
        reply(protocol, text="Checking the clock.", calls=[("call_t1", "get_system_time", {})], reasoning=THINKING,
              rid="r1", signature=SIGNATURE, encrypted=ENCRYPTED),
        reply(protocol, text="It is now.", reasoning=["easy"], rid="r2", signature="sig-2", encrypted="enc-2"),
    )
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1", thinking_level="high")
        await sup.call(sid, Submit("req1", [t.TextPart("what time is it?")]))
        await sup.call(sid, WaitIdle())
        live = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
        system = list(sup.deps.system_prompt)
        tools = [s.schema() for s in sup.deps.tools.visible(is_main_agent=True, allowed=None)]
    responded = [e.event for e in evs if e.kind == "model.responded"]
    assert len(responded) == 2 and len(server.requests) == 2
    blocks = responded[0].reasoning_blocks
    assert [b["protocol"] for b in blocks] == [protocol]
    if protocol == "anthropic":
        assert blocks[0]["block"]["signature"] == SIGNATURE
        assert server.bodies[1]["messages"][1]["content"][0] == blocks[0]["block"]
    else:
        assert blocks[0]["block"]["encrypted_content"] == ENCRYPTED
        assert [m for m in server.bodies[1]["input"] if m.get("type") == "reasoning"] == [blocks[0]["block"]]
    # The projection keeps them on the response's first item (here its text).
    first = [it for it in live.agents["main"].items if it.role == "assistant"][0]
    assert first.reasoning_blocks == blocks

    # Fold the log from scratch (and through a snapshot) and compile the second request again.
    folded = SessionState(sid)
    for se in evs:
        if se.seq <= _seq_of_second_request(evs):
            apply(folded, se)
    for state in (folded, state_from_snapshot(snapshot_bytes(folded))):
        server.push(reply(protocol, text="again", rid="r3"))
        request = ModelRequest("m1", system, working_context(state.agents["main"]), tools, state.thinking_level)
        await provider.stream(request, Deltas())
        assert server.bodies[-1] == server.bodies[1]


def _seq_of_second_request(evs: list[StoredEvent]) -> int:
    return [e.seq for e in evs if e.kind == "model.requested"][1]


# --------------------------------------------------------------------------- the projection


def _fold(*events: t._Event) -> SessionState:
    state = SessionState("s1")
    for seq, ev in enumerate(events, 1):
        apply(state, StoredEvent(seq, 0, "p1", "s1", seq, None, None, t.kind_of(ev), None, ev))
    return state


def test_blocks_ride_on_the_first_item_of_the_response():
    with_text = _fold(t.SessionCreated(), t.ModelResponded(
        text="hi", tool_calls=[t.ToolCall("c1", "read_file", "{}")], reasoning_blocks=[ANTHROPIC_BLOCK]))
    items = with_text.agents["main"].items
    assert [(it.role, it.reasoning_blocks) for it in items] == [("assistant", [ANTHROPIC_BLOCK]), ("tool_call", [])]
    calls_only = _fold(t.SessionCreated(), t.ModelResponded(
        tool_calls=[t.ToolCall("c1", "read_file", "{}"), t.ToolCall("c2", "read_file", "{}")],
        reasoning_blocks=[RESPONSES_BLOCK]))
    items = calls_only.agents["main"].items
    assert [(it.role, it.reasoning_blocks) for it in items] == [("tool_call", [RESPONSES_BLOCK]), ("tool_call", [])]
    # Snapshots keep them, and an item encoded before the field existed (a shorter array) decodes
    # with no blocks.
    back = state_from_snapshot(snapshot_bytes(calls_only))
    assert back.agents["main"].items == items
    older = msgspec.msgpack.decode(msgspec.msgpack.encode(items[1]))[:-1]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(older), type=Item) == items[1]


def test_hiding_the_text_moves_the_blocks_to_the_calls():
    state = _fold(t.SessionCreated(), t.ModelResponded(
        text="hi", tool_calls=[t.ToolCall("c1", "read_file", "{}")], reasoning_blocks=[ANTHROPIC_BLOCK]))
    agent = state.agents["main"]
    text_id = agent.items[0].id
    agent.hidden = [text_id]
    wc = working_context(agent)
    assert [(it.role, it.reasoning_blocks) for it in wc] == [("tool_call", [ANTHROPIC_BLOCK])]
    assert agent.items[1].reasoning_blocks == []  # the Full Context is not rewritten


def test_model_responded_round_trips_its_blocks_and_omits_none():
    codec = Codec()
    ev = t.ModelResponded(text="x", reasoning_blocks=[ANTHROPIC_BLOCK, RESPONSES_BLOCK])
    enc = codec.encode(ev)
    assert codec.decode(enc.kind, enc.body, enc.dict_id) == ev
    # No blocks: the row is what it was before the field existed.
    assert msgspec.msgpack.decode(codec.pack(t.ModelResponded(text="x"))) == {"kind": "model.responded", "text": "x"}


# --------------------------------------------------------------------------- maxOutputTokens


def test_max_output_tokens_is_a_model_key():
    cfg = parse_config('{"providers": [{"id": "c", "protocol": "anthropic", "models": ['
                       '{"id": "m", "maxOutputTokens": 32000}, {"id": "n"}]}]}')
    assert [m.max_output_tokens for m in cfg.providers[0].models] == [32000, None]
    with pytest.raises(ConfigError, match="maxOutputTokens"):
        parse_config('{"providers": [{"id": "c", "protocol": "anthropic", "models": [{"id": "m", "maxOutputTokens": 0}]}]}')


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("limit", [None, 3000])
async def test_max_output_tokens_is_sent(protocol, limit, server, make):
    provider = make(protocol, models={"m1": ModelConfig(id="m1", max_output_tokens=limit)})
    server.push(reply(protocol, text="ok"), reply(protocol, text="ok"))
    await provider.stream(Ctx().user("hi").request(), Deltas())
    await provider.stream(Ctx().user("hi").request(thinking="low"), Deltas())
    plain, thinking = server.requests[0].body, server.requests[1].body
    if protocol == "anthropic":
        assert plain["max_tokens"] == (limit or 8192)
        assert thinking["max_tokens"] == (limit or 8192) + 2048
    elif protocol == "openai-responses":
        assert plain.get("max_output_tokens") == limit and thinking.get("max_output_tokens") == limit
    else:  # a compatible server at a loopback URL: the widely known name
        assert plain.get("max_tokens") == limit and "max_completion_tokens" not in plain


def test_chat_names_the_limit_for_openai_itself():
    assert max_tokens_key(None) == "max_completion_tokens"
    assert max_tokens_key("https://api.openai.com/v1") == "max_completion_tokens"
    assert max_tokens_key("http://127.0.0.1:11434/v1") == "max_tokens"
