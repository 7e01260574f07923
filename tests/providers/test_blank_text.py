"""Whitespace-only text never travels as an Anthropic text block (F-MOD-2).

The Messages API refuses a request holding a text block that is empty *or only white space*
("text content blocks must contain non-whitespace text"). Such text is ordinary in a session: a
model answers "\\n\\n" before its tool call (or as its whole answer), a command prints a blank
line. Recorded as it came, it was sent back on every later request, so every later request of
the session failed the same way. The recorded items stay as they are; only what is sent changes.
"""

from __future__ import annotations

from .conftest import Ctx, Deltas
from .servers.anthropic import message_stream


def _text_blocks(body: dict) -> list[str]:
    out = [b["text"] for b in body.get("system", []) if b.get("type") == "text"]
    for m in body["messages"]:
        for b in m["content"]:
            if b.get("type") == "text":
                out.append(b["text"])
            elif b.get("type") == "tool_result":
                out += [c["text"] for c in b["content"] if c.get("type") == "text"]
    return out


async def test_anthropic_sends_no_whitespace_only_text_block(server, make):
    provider = make("anthropic")
    server.push(message_stream(text="done"))
    ctx = (Ctx().system("   \n")  # a leading system item of white space only
           .user("list the files")
           .response("\n\n", ("call_1", "read_file", {"path": "a"}))  # text before a call
           .result("call_1", "\n")  # a command that printed a blank line
           .response(" \n ")  # an answer of white space only
           .user("and now?"))
    items_before = [(it.role, it.text) for it in ctx.items]
    result = await provider.stream(ctx.request(), Deltas())
    assert result.text == "done"
    body = server.requests[0].body
    blank = [text for text in _text_blocks(body) if not text.strip()]
    assert blank == [], body
    # What the model is told stays true to what happened, and the turns keep their shape.
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert [b["type"] for b in msgs[1]["content"]] == ["tool_use"]
    assert msgs[2]["content"][0]["type"] == "tool_result"
    assert msgs[2]["content"][0]["content"] == [{"type": "text", "text": "(no output)"}]
    assert msgs[3]["content"] == [{"type": "text", "text": "(empty)"}]
    # The persisted items are untouched.
    assert [(it.role, it.text) for it in ctx.items] == items_before


async def test_anthropic_a_thinking_turn_whose_text_was_blank_still_holds_text(server, make):
    """An answer of thinking and "\\n" only: its turn went back as the thinking block alone once
    the blank text was left out, and a turn of thinking alone is refused too."""
    provider = make("anthropic")
    server.push(message_stream(text="ok"))
    thinking = {"protocol": "anthropic", "block": {"type": "thinking", "thinking": "hmm", "signature": "c2ln"}}
    ctx = Ctx().user("hi").response("\n", reasoning_blocks=[thinking]).user("again")
    await provider.stream(ctx.request(), Deltas())
    turn = server.requests[0].body["messages"][1]
    assert turn["role"] == "assistant"
    assert turn["content"] == [thinking["block"], {"type": "text", "text": "(empty)"}]
