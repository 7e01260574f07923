"""Tool calls whose arguments are not a JSON object, over the wire, for each protocol.

The model's answer stands: the call is recorded with its arguments exactly as streamed, the tool
runner answers it with ``INVALID_ARGUMENT`` (quoting what was sent), and the session goes
on. What later requests send back for such a call is a JSON object every server reads (Anthropic
``tool_use.input`` ``{}``, OpenAI ``arguments`` ``"{}"``), never the text as it came: Anthropic's
stream helper failed the whole answer on such arguments, and OpenAI-compatible servers that parse
``arguments`` refuse a request that carries them.
"""

from __future__ import annotations

import json

import pytest

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply
from .test_actor import events_of, runtime

NOT_AN_OBJECT = {
    "cut short": '{"path": "a.t',
    "trailing text": '{"path": "a.txt"} and then some',
    "single quotes": "{'path': 'a.txt'}",
    "an array": "[1]",
    "a string": '"x"',
    "NaN": '{"path": NaN}',
}


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


@pytest.mark.parametrize("case", list(NOT_AN_OBJECT))
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_whose_arguments_are_no_json_object_is_kept_and_sent_back_as_an_empty_one(protocol, case, server, make):
    bad = NOT_AN_OBJECT[case]
    provider = make(protocol)
    server.push(
        reply(protocol, text=["Reading ", "both."], reasoning=["which ", "files?"],
              calls=[("call_1", "read_file", {"path": "ok.txt"}), ("call_2", "read_file", bad)]),
        reply(protocol, text="Done."),
    )
    ctx = Ctx().user("read them")
    deltas = Deltas()
    first = await provider.stream(ctx.request(), deltas)
    # The answer stands, streamed text and thinking included; the arguments are what was sent.
    assert (first.text, deltas.text()) == ("Reading both.", "Reading both.")
    assert deltas.text("reasoning") == "which files?"
    assert first.tool_calls == [t.ToolCall("call_1", "read_file", '{"path": "ok.txt"}'),
                                t.ToolCall("call_2", "read_file", bad)]
    assert first.stop_reason == "tool_use"

    ctx.response(first.text, *[(c.call_id, c.name, c.arguments) for c in first.tool_calls],
                 reasoning_blocks=first.reasoning_blocks)
    ctx.result("call_1", "the file")
    ctx.result("call_2", "read_file arguments are not valid JSON", is_error=True)
    second = await provider.stream(ctx.request(), Deltas())
    assert second.text == "Done."

    body = server.requests[1].body
    # The valid call goes back as it was; the other as an empty object, with its error result.
    ok = {"path": "ok.txt"} if protocol == "anthropic" else '{"path": "ok.txt"}'
    assert sent_calls(protocol, body) == [("call_1", ok), ("call_2", empty(protocol))]
    result = sent_results(protocol, body)["call_2"]
    if protocol == "anthropic":
        assert result["is_error"] is True
        assert result["content"] == [{"type": "text", "text": "read_file arguments are not valid JSON"}]
    else:
        assert result == "read_file arguments are not valid JSON"
    assert second.diagnostics["invalid_arguments_sent_empty"] == 1


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
        ctx.result(call_id, "INVALID_ARGUMENT", is_error=True)
    ctx.result("call_big", "fine")
    await provider.stream(ctx.request(), Deltas())
    body = server.requests[0].body
    big_sent = json.loads(big) if protocol == "anthropic" else big
    assert sent_calls(protocol, body) == [(c[0], empty(protocol)) for c in calls] + [("call_big", big_sent)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_session_answers_such_a_call_and_goes_on(protocol, server, make, tmp_path):
    bad = "{'tz': 'UTC'}"
    provider = make(protocol)
    server.push(
        reply(protocol, text="Checking the clock.", reasoning=["the time"], calls=[("call_t1", "get_system_time", bad)]),
        reply(protocol, text="Sorry, let me answer without it."),
    )
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("what time is it?")]))
        await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    assert not [e for e in evs if e.kind == "model.failed"]
    # The log holds what the model sent.
    responded = [e.event for e in evs if e.kind == "model.responded"]
    assert responded[0].tool_calls == [t.ToolCall("call_t1", "get_system_time", bad)]
    assert [e.event.arguments for e in evs if e.kind == "tool.started"] == [bad]
    finished = [e.event for e in evs if e.kind == "tool.finished"]
    assert [(f.status, f.error_code) for f in finished] == [("error", "INVALID_ARGUMENT")]
    told = finished[0].content[0].text
    # The result says what is wrong and quotes what was sent (the call itself goes back empty).
    assert "not valid JSON" in told and json.dumps(bad) in told, told
    assert state.status == "idle" and state.agents["main"].items[-1].text == "Sorry, let me answer without it."
    body = server.bodies[-1]
    assert sent_calls(protocol, body) == [("call_t1", empty(protocol))]
    result = sent_results(protocol, body)["call_t1"]
    if protocol == "anthropic":
        assert result["is_error"] is True and result["content"] == [{"type": "text", "text": told}]
    else:
        assert result == told
