"""Request compilation (F-MOD-2): order, instruction updates, paired and synthetic results."""

from __future__ import annotations

import copy

import msgspec
import pytest

from runtime.providers.compile import INSTRUCTION_PREFIX, SYNTHETIC_RESULT_TEXT

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import error, reply


def history() -> Ctx:
    return (Ctx().system("Always answer in English.", source="config")  # leading: part of the system prompt
            .user("read a.txt")
            .response("", ("call_1", "read_file", {"path": "a.txt"}))
            .result("call_1", "hello")
            .system("Skill 'review' loaded: check tests first.", source="skill:review")  # a later instruction
            .user("and now?"))


async def test_anthropic_turns_later_instructions_into_user_blocks_also_after_a_retry(server, make):
    provider = make("anthropic", max_retries=1)
    server.push(error("anthropic", 500, "boom"), reply("anthropic", text="done"))
    ctx = history()
    request = ctx.request()
    before = msgspec.json.encode(request.items)
    result = await provider.stream(request, Deltas())
    assert result.text == "done"
    assert len(server.requests) == 2
    first, retried = server.bodies
    assert first == retried  # the retry compiled and sent exactly the same thing
    assert [b["text"] for b in first["system"]] == ["You are a test agent.", "Always answer in English."]
    msgs = first["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    last = msgs[2]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text", "text"]
    assert last[1]["text"].startswith(INSTRUCTION_PREFIX)
    assert "Skill 'review' loaded" in last[1]["text"] and "skill:review" in last[1]["text"]
    assert last[2]["text"] == "and now?"
    # Persisted items are untouched: same roles, same text.
    assert msgspec.json.encode(request.items) == before
    assert [it.role for it in request.items] == ["system", "user", "tool_call", "tool_result", "system", "user"]

    # A later request over the same (grown) history compiles the old prefix identically.
    ctx.response("done")
    ctx.user("one more")
    server.push(reply("anthropic", text="ok"))
    await provider.stream(ctx.request(), Deltas())
    again = server.bodies[-1]["messages"]
    strip = lambda ms: [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]} for m in ms]
    assert strip(again[:3]) == strip(msgs)


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
async def test_openai_keeps_system_items_at_their_position(protocol, server, make):
    provider = make(protocol)
    server.push(reply(protocol, text="ok"))
    await provider.stream(history().request(), Deltas())
    body = server.bodies[0]
    if protocol == "openai-responses":
        seq = [(m.get("role") or m["type"]) for m in body["input"]]
        assert seq == ["developer", "developer", "user", "function_call", "function_call_output", "developer", "user"]
        later = body["input"][5]["content"][0]["text"]
    else:
        seq = [m["role"] for m in body["messages"]]
        assert seq == ["system", "system", "user", "assistant", "tool", "system", "user"]
        later = body["messages"][5]["content"]
    assert later == "Skill 'review' loaded: check tests first."  # unchanged text, no marker


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_without_result_gets_a_synthetic_one(protocol, server, make):
    provider = make(protocol)
    server.push(reply(protocol, text="ok"))
    ctx = (Ctx().user("go").response("", ("call_a", "read_file", {"path": "x"}), ("call_b", "get_system_time", {}))
           .result("call_b", "12:00").user("what happened?"))
    items_before = copy.deepcopy(ctx.items)
    result = await provider.stream(ctx.request(), Deltas())
    assert result.diagnostics["synthetic_results"] == 1
    body = server.bodies[0]
    if protocol == "openai-responses":
        outs = [m for m in body["input"] if m.get("type") == "function_call_output"]
        assert [(o["call_id"], o["output"]) for o in outs] == [("call_a", SYNTHETIC_RESULT_TEXT), ("call_b", "12:00")]
    elif protocol == "openai-chat":
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        assert [(m["tool_call_id"], m["content"]) for m in tools] == [("call_a", SYNTHETIC_RESULT_TEXT), ("call_b", "12:00")]
    else:
        blocks = body["messages"][2]["content"]
        assert [(b["tool_use_id"], b.get("is_error", False), b["content"][0]["text"]) for b in blocks[:2]] == [
            ("call_a", True, SYNTHETIC_RESULT_TEXT), ("call_b", False, "12:00")]
        assert blocks[2] == {"type": "text", "text": "what happened?", **({"cache_control": blocks[2]["cache_control"]} if "cache_control" in blocks[2] else {})}
    assert SYNTHETIC_RESULT_TEXT.startswith("no result (interrupted)")
    assert ctx.items == items_before


async def test_anthropic_conversation_starts_with_user_and_error_results_are_flagged(server, make):
    provider = make("anthropic")
    server.push(reply("anthropic", text="ok"))
    ctx = Ctx().response("I was summarised in", ("c1", "read_file", {"path": "p"})).result("c1", "no such file", is_error=True)
    await provider.stream(ctx.request(system=[]), Deltas())
    body = server.bodies[0]
    assert "system" not in body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][2]["content"][0]["is_error"] is True


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
async def test_a_result_of_several_text_parts_is_sent_joined_by_a_newline(protocol, server, make):
    """A tool result of two text parts (an MCP tool's, say) reached OpenAI glued ("firstsecond");
    it is sent as its item's text is shown and indexed: the parts joined by a newline."""
    from events import types as t
    from projections.session_state import Item

    provider = make(protocol)
    server.push(reply(protocol, text="ok"))
    ctx = Ctx().user("go").response("", ("call_a", "read_file", {"path": "x"}))
    ctx.items.append(Item("c9", "tool_result", 9, text="first\nsecond", call_id="call_a", status="ok",
                          parts=(t.TextPart("first"), t.TextPart("second"))))
    await provider.stream(ctx.request(), Deltas())
    body = server.bodies[0]
    if protocol == "openai-responses":
        (out,) = [m for m in body["input"] if m.get("type") == "function_call_output"]
        assert out["output"] == "first\nsecond"
    else:
        (tool,) = [m for m in body["messages"] if m["role"] == "tool"]
        content = tool["content"]  # (one unmarked text part travels as a plain string)
        assert (content if isinstance(content, str) else [b["text"] for b in content]) in ("first\nsecond", ["first\nsecond"])
