"""Tool calls whose arguments are not a JSON object, over the wire, for each protocol.

The model's answer stands: the call is recorded with its arguments exactly as streamed, the tool
runner answers it with ``TOOL_ARGUMENTS_INVALID`` (quoting what was sent), and the session goes
on. What later requests send back for such a call is a JSON object every server reads (Anthropic
``tool_use.input`` ``{}``, OpenAI ``arguments`` ``"{}"``), never the text as it came: Anthropic's
stream helper failed the whole answer on such arguments, and OpenAI-compatible servers that parse
``arguments`` refuse a request that carries them.
"""

from __future__ import annotations

import json

import pytest

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply


def sent_calls(protocol: str, body: dict) -> list[tuple[str, object]]:
    """(call id, arguments as sent) of every call in a request body."""
    if protocol == "openai-responses":
        return [(m["call_id"], m["arguments"]) for m in body["input"] if m.get("type") == "function_call"]
    if protocol == "openai-chat":
        return [(c["id"], c["function"]["arguments"]) for m in body["messages"] if m["role"] == "assistant"
                for c in m.get("tool_calls", [])]
    return [(b["id"], b["input"]) for m in body["messages"] if m["role"] == "assistant"
            for b in m["content"] if b["type"] == "tool_use"]


def sent_results(protocol: str, body: dict) -> dict[str, object]:
    """call id -> the tool result as sent (Anthropic: the whole tool_result block)."""
    if protocol == "openai-responses":
        return {m["call_id"]: m["output"] for m in body["input"] if m.get("type") == "function_call_output"}
    if protocol == "openai-chat":
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    return {b["tool_use_id"]: b for m in body["messages"] if m["role"] == "user"
            for b in m["content"] if b["type"] == "tool_result"}


def empty(protocol: str) -> object:
    return {} if protocol == "anthropic" else "{}"


HOSTILE = {
    "nested past the parser's depth": "[" * 100_000 + "]" * 100_000,
    "an integer of 5001 digits": '{"n": 1' + "0" * 5000 + "}",
    "Infinity": '{"n": Infinity}',
    "a lone surrogate escape": '{"\\ud800": 1}',
    "blank": "  ",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_recorded_arguments_no_server_reads_are_never_sent_back(protocol, server, make):
    """Arguments that Python's json module reads but other parsers do not (NaN, Infinity, a lone
    surrogate escape), or that it cannot read either (too deep, too many digits), go back as an
    empty object; Anthropic's renderer raised on the last two, which failed every later request."""
    provider = make(protocol)
    server.push(reply(protocol, text="ok"))
    big = '{"n": 123456789012345678901234567890}'  # valid JSON, whatever size a reader gives it
    calls = [(f"call_{i}", "read_file", args) for i, args in enumerate(HOSTILE.values())]
    ctx = Ctx().user("go").response("", *calls, ("call_big", "read_file", big))
    for call_id, _, _ in calls:
        ctx.result(call_id, "TOOL_ARGUMENTS_INVALID", is_error=True)
    ctx.result("call_big", "fine")
    await provider.stream(ctx.request(), Deltas())
    body = server.requests[0].body
    big_sent = json.loads(big) if protocol == "anthropic" else big
    assert sent_calls(protocol, body) == [(c[0], empty(protocol)) for c in calls] + [("call_big", big_sent)]
