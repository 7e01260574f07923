"""The providers' wire protocols at their edges, through a real session (actor, supervisor,
store, builtin tools) whose model is an SDK provider over loopback, and through the provider
alone: what servers that call themselves compatible send differently (a Chat tool call's
fragments and error events, a Responses final event without its items, llama.cpp's context
refusal) and ``Retry-After`` dates, one no clock can hold among them."""

from __future__ import annotations

import json
import time
from email.utils import formatdate
from typing import Any

import pytest
import trio

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle
from runtime.providers.base import ProviderError
from runtime.working_context import Compact

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import error, reply
from .servers import openai_chat as oc
from .test_actor import events_of, one_input, runtime


def _chunk(tool_calls: list[dict[str, Any]] | None = None, finish: str | None = None) -> tuple[None, dict[str, Any]]:
    delta: dict[str, Any] = {"tool_calls": tool_calls} if tool_calls else {}
    return (None, {"id": "chatcmpl-e", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def _fragment(*, index: int | None = None, id: str | None = None, name: str | None = None,
              arguments: str | None = None) -> dict[str, Any]:
    fragment: dict[str, Any] = {"function": {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}}
    if index is not None:
        fragment["index"] = index
    if id is not None:
        fragment["id"] = id
    if name is not None:
        fragment["type"] = "function"
    return fragment


SLEEP = '{"milliseconds": 1}'

# Two calls (get_system_time {}, sleep_milliseconds {"milliseconds": 1}), their arguments in
# pieces, as servers that differ from OpenAI's own stream them.
FRAGMENTS = {
    # Each fragment after a call's first under an id of its own (the call's index kept).
    "a new id on every fragment": [
        [_fragment(index=0, id="call_a", name="get_system_time", arguments="")],
        [_fragment(index=0, id="call_x1", arguments="{")],
        [_fragment(index=0, id="call_x2", arguments="}")],
        [_fragment(index=1, id="call_b", name="sleep_milliseconds", arguments="")],
        [_fragment(index=1, id="call_x3", arguments=SLEEP[:9])],
        [_fragment(index=1, id="call_x4", arguments=SLEEP[9:])]],
    # No index; the call's id on every fragment.
    "the id on every fragment, no index": [
        [_fragment(id="call_a", name="get_system_time", arguments="")],
        [_fragment(id="call_a", arguments="{")],
        [_fragment(id="call_a", arguments="}")],
        [_fragment(id="call_b", name="sleep_milliseconds", arguments="")],
        [_fragment(id="call_b", arguments=SLEEP[:9])],
        [_fragment(id="call_b", arguments=SLEEP[9:])]],
    # No index; the id and the name on every fragment.
    "the id and the name on every fragment, no index": [
        [_fragment(id="call_a", name="get_system_time", arguments="{")],
        [_fragment(id="call_a", name="get_system_time", arguments="}")],
        [_fragment(id="call_b", name="sleep_milliseconds", arguments=SLEEP[:9])],
        [_fragment(id="call_b", name="sleep_milliseconds", arguments=SLEEP[9:])]],
    # The two calls interleaved, no index, told apart by the id each fragment repeats.
    "two calls interleaved by id, no index": [
        [_fragment(id="call_a", name="get_system_time", arguments="")],
        [_fragment(id="call_b", name="sleep_milliseconds", arguments=SLEEP[:9])],
        [_fragment(id="call_a", arguments="{")],
        [_fragment(id="call_b", arguments=SLEEP[9:])],
        [_fragment(id="call_a", arguments="}")]],
}


@pytest.mark.parametrize("case", FRAGMENTS)
async def test_chat_tool_call_fragments_as_compatible_servers_send_them_make_the_calls_the_model_made(
        case, server, make, tmp_path):
    # A server giving each fragment its own id, or repeating the call's id without an index,
    # failed every answer with a tool call ("a tool call without a name"); one repeating the id
    # and the name made a call of each fragment, the first run with "{}" for arguments.
    provider = make("openai-chat")
    events = [_chunk(fragments) for fragments in FRAGMENTS[case]]
    server.push(oc.Reply(events=events + [_chunk(finish="tool_calls"), (None, "[DONE]")]),
                reply("openai-chat", text="Done."))
    state, evs = await one_input(tmp_path / "data", provider, "the time, then a nap")
    assert not [e.event for e in evs if e.kind == "model.failed"]
    calls = [(c.call_id, c.name, c.arguments) for e in evs if e.kind == "model.responded" for c in e.event.tool_calls]
    assert calls == [("call_a", "get_system_time", "{}"), ("call_b", "sleep_milliseconds", SLEEP)]
    finished = [(e.event.call_id, e.event.status) for e in evs if e.kind == "tool.finished"]
    assert sorted(finished) == [("call_a", "ok"), ("call_b", "ok")]
    assert state.status == "idle" and state.agents["main"].items[-1].text == "Done."
    # The next request carried both calls and their results, under the ids the calls kept.
    messages = server.bodies[-1]["messages"]
    sent = [(c["id"], c["function"]["name"], c["function"]["arguments"])
            for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert sent == calls
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["call_a", "call_b"]


APART = {
    # Every call numbered 0, each fragment repeating its call's id.
    "numbered alike": [
        _fragment(index=0, id="call_a", name="read_file", arguments='{"path": '),
        _fragment(index=0, id="call_a", arguments='"a"}'),
        _fragment(index=0, id="call_b", name="read_file", arguments='{"path": '),
        _fragment(index=0, id="call_b", arguments='"b"}')],
    # The same, the two calls interleaved.
    "numbered alike, interleaved": [
        _fragment(index=0, id="call_a", name="read_file", arguments='{"path": '),
        _fragment(index=0, id="call_b", name="read_file", arguments='{"path": '),
        _fragment(index=0, id="call_a", arguments='"a"}'),
        _fragment(index=0, id="call_b", arguments='"b"}')],
    # One id for every call, the calls told apart by their index.
    "one id for all, by index": [
        _fragment(index=0, id="call_a", name="read_file", arguments='{"path": '),
        _fragment(index=1, id="call_a", name="read_file", arguments='{"path": '),
        _fragment(index=0, id="call_a", arguments='"a"}'),
        _fragment(index=1, id="call_a", arguments='"b"}')],
}


@pytest.mark.parametrize("case", APART)
async def test_chat_calls_told_apart_by_index_or_id_stay_apart(case, server, make):
    # (Guards of the joining rule: the first and the last were right before; the interleaved
    # one failed as "a tool call without a name".)
    provider = make("openai-chat")
    server.push(oc.Reply(events=[_chunk([f]) for f in APART[case]] + [_chunk(finish="tool_calls"), (None, "[DONE]")]))
    result = await provider.stream(Ctx().user("go").request(), Deltas())
    assert [json.loads(c.arguments) for c in result.tool_calls] == [{"path": "a"}, {"path": "b"}]
    assert [c.call_id for c in result.tool_calls][0] == "call_a"


# A date past what the platform's clock holds, and one long past (a wait already over).
UNREADABLE_DATES = ("Mon, 01 Jan 99999999999999999999 00:00:00 GMT", "Wed, 21 Oct 2015 07:28:00 GMT")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("date", UNREADABLE_DATES)
async def test_a_429_whose_retry_after_date_no_clock_holds_is_retried_and_answered(protocol, date, server, make,
                                                                                  tmp_path, caplog):
    # The Anthropic SDK raised OverflowError reading the first date: the session recorded
    # PROVIDER_ERROR "the request failed: OverflowError: …", not retryable, and logged it as an
    # exception no error names; the request was not asked again.
    provider = make(protocol, max_retries=1)
    busy = error(protocol, 429, "busy", fast=False)
    busy.headers["retry-after"] = date
    server.push(busy, reply(protocol, text="after the wait"))
    state, evs = await one_input(tmp_path / "data", provider, "hi")
    assert not [(e.event.code, e.event.message) for e in evs if e.kind == "model.failed"]
    assert [e.event.text for e in evs if e.kind == "model.responded"] == ["after the wait"]
    assert len(server.requests) == 2 and state.status == "idle"
    assert not [r for r in caplog.records if r.name == "lens.providers"]


def _final_output_emptied(scripted: Any) -> Any:
    """A Responses stream whose final event says ``"output": []``, as some proxies send it."""
    name, data = scripted.events[-1]
    assert name == "response.completed"
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "output": []}})
    return scripted


async def test_a_responses_final_event_with_empty_output_keeps_the_streamed_calls_and_reasoning(server, make, tmp_path):
    # The final response's "output": [] was read as the answer: the call streamed before it
    # was lost (stop "end_turn", no tool run, the turn over), and so was the reasoning item.
    provider = make("openai-responses")
    first = reply("openai-responses", text="Checking the clock.", reasoning=["the time"], encrypted="enc-1",
                  calls=[("call_t1", "get_system_time", {})])
    server.push(_final_output_emptied(first), _final_output_emptied(reply("openai-responses", text="It is now.")))
    state, evs = await one_input(tmp_path / "data", provider, "what time is it?")
    assert not [e.event for e in evs if e.kind == "model.failed"]
    responded = [e.event for e in evs if e.kind == "model.responded"]
    assert [(r.text, r.stop_reason) for r in responded] == [("Checking the clock.", "tool_use"), ("It is now.", "end_turn")]
    assert [(c.call_id, c.name, c.arguments) for c in responded[0].tool_calls] == [("call_t1", "get_system_time", "{}")]
    assert responded[0].reasoning == "the time"
    assert [b["block"]["encrypted_content"] for b in responded[0].reasoning_blocks] == ["enc-1"]
    assert [(e.event.call_id, e.event.status) for e in evs if e.kind == "tool.finished"] == [("call_t1", "ok")]
    assert state.status == "idle" and state.agents["main"].items[-1].text == "It is now."
    # The next request sent the reasoning item back, then the call and its output.
    kinds = [(m.get("type"), m.get("call_id")) for m in server.bodies[-1]["input"] if m.get("type")]
    assert ("reasoning", None) in kinds
    assert kinds.index(("function_call", "call_t1")) < kinds.index(("function_call_output", "call_t1"))


# What Chat servers have sent under ``event: error`` in a 200 stream (llama.cpp's server sent
# the error object itself there), and the error each is: code, retryable, words of the message.
CHAT_ERROR_EVENTS = {
    "an error object": ({"code": 500, "message": "the model crashed: out of memory", "type": "server_error"},
                        ("PROVIDER_ERROR", True, "the model crashed: out of memory")),
    "an invalid request": ({"code": 400, "message": "the grammar could not be parsed", "type": "invalid_request_error"},
                           ("BAD_REQUEST", False, "the grammar could not be parsed")),
    "text": ("the slot was released", ("PROVIDER_ERROR", True, "the slot was released")),
    "the usual envelope": ({"error": {"message": "upstream went away", "type": "server_error"}},
                           ("PROVIDER_ERROR", True, "upstream went away")),
}


@pytest.mark.parametrize("case", CHAT_ERROR_EVENTS)
async def test_a_chat_error_event_fails_the_answer_saying_what_the_server_said(case, server, make):
    # Read as a chunk without choices, it failed the answer as "the stream ended before its
    # finish_reason" (retryable), and the server's words were lost.
    data, (code, retryable, words) = CHAT_ERROR_EVENTS[case]
    provider = make("openai-chat", max_retries=0)
    events = reply("openai-chat", text=["Hello ", "world"]).events[:3]
    server.push(oc.Reply(events=events + [("error", data)]))
    deltas = Deltas()
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), deltas)
    assert (info.value.code, info.value.retryable, info.value.status) == (code, retryable, None)
    assert "stream error" in info.value.message and words in info.value.message, info.value.message
    assert deltas.text() == "Hello world"


async def test_a_session_whose_chat_stream_sends_an_error_event_records_it_and_answers_the_next_input(
        server, make, tmp_path):
    provider = make("openai-chat", max_retries=0)
    events = reply("openai-chat", text=["Hello ", "world"]).events[:3]
    server.push(oc.Reply(events=events + [("error", {"code": 500, "message": "out of memory", "type": "server_error"})]),
                reply("openai-chat", text="Second try."))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("hi")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        await sup.call(sid, Submit("req2", [t.TextPart("again")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    failed = [e.event for e in evs if e.kind == "model.failed"]
    assert [(f.code, f.retryable, f.status, f.partial_text) for f in failed] == [
        ("PROVIDER_ERROR", True, None, "Hello world")]
    assert "stream error" in failed[0].message and "out of memory" in failed[0].message, failed[0].message
    assert [e.event.text for e in evs if e.kind == "model.responded"] == ["Second try."]
    assert state.status == "idle" and state.agents["main"].items[-1].text == "Second try."


# llama.cpp's server refusing a prompt longer than its context (HTTP 400), as it words it, and
# the same under another message (its error type alone says so).
LLAMA_CPP_TOO_LONG = {"code": 400, "message": "request (41234 tokens) exceeds the available context size (32768 "
                      "tokens), try increasing it", "type": "exceed_context_size_error"}


@pytest.mark.parametrize("how", ["its words", "its type", "in the stream"])
async def test_llama_cpps_context_refusal_is_context_too_long(how, server, make):
    # It was BAD_REQUEST: the session's compaction took it for a request it could not fix.
    provider = make("openai-chat", max_retries=0)
    body = dict(LLAMA_CPP_TOO_LONG)
    if how == "its type":
        body["message"] = "prompt does not fit (41234 > 32768)"
    if how == "in the stream":
        server.push(oc.Reply(events=reply("openai-chat", text="x").events[:1] + [(None, {"error": body})]))
    else:
        server.push(oc.Reply(400, {"error": body}))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("a long prompt").request(), Deltas())
    assert (info.value.code, info.value.retryable) == ("CONTEXT_TOO_LONG", False), info.value.message
    assert info.value.status == (None if how == "in the stream" else 400)
    assert body["message"] in info.value.message


async def test_a_summarizing_request_llama_cpp_refuses_as_too_long_is_sent_again_cut(server, make, tmp_path):
    # (As test_actor's test of each protocol's own words: the compaction asks once more at half
    # the size; with llama.cpp's words it failed instead.)
    provider = make("openai-chat", max_retries=0)
    big = "BIG-INPUT " + "z" * (4 * 40_000)
    server.push(reply("openai-chat", text="Hello."), oc.Reply(400, {"error": LLAMA_CPP_TOO_LONG}),
                reply("openai-chat", text="SUMMARY-OF-IT"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart(big)]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
            result = await sup.call(sid, Compact())
        state = await sup.call(sid, GetState())
    assert len(server.bodies) == 3
    refused, sent = (json.dumps(b) for b in server.bodies[1:])
    assert big in refused and big not in sent and len(sent) < len(refused) // 2
    assert result["summary"].startswith("SUMMARY-OF-IT")
    assert [it.role for it in state.agents["main"].items] == ["user", "assistant", "summary"]


async def test_a_responses_call_whose_done_item_blanks_its_name_keeps_the_name_it_was_added_with(server, make, tmp_path):
    # A proxy sending "name": "" in response.output_item.done (and "output": [] at the end):
    # the call was recorded as a call of the tool '' and answered TOOL_UNKNOWN.
    provider = make("openai-responses")
    first = reply("openai-responses", text="Checking.", calls=[("call_t1", "get_system_time", {})])
    first.events = [(name, {**data, "item": {**data["item"], "name": ""}})
                    if name == "response.output_item.done" and data["item"]["type"] == "function_call" else (name, data)
                    for name, data in first.events]
    server.push(_final_output_emptied(first), reply("openai-responses", text="It is now."))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("what time is it?")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        evs = await events_of(sup, sid)
    calls = [(c.call_id, c.name, c.arguments) for e in evs if e.kind == "model.responded" for c in e.event.tool_calls]
    assert calls == [("call_t1", "get_system_time", "{}")]
    assert [(e.event.call_id, e.event.status) for e in evs if e.kind == "tool.finished"] == [("call_t1", "ok")]
    assert [e.event.text for e in evs if e.kind == "model.responded"] == ["Checking.", "It is now."]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_retry_after_given_as_an_http_date_is_honoured_up_to_two_minutes(protocol, server, make):
    # (A guard: passed before. The seconds form is pinned in test_failures.py.)
    provider = make(protocol, max_retries=1)
    far = error(protocol, 429, "tomorrow", fast=False)
    far.headers["retry-after"] = formatdate(time.time() + 3600, usegmt=True)
    server.push(far, reply(protocol, text="not reached"))
    with trio.fail_after(10):
        with pytest.raises(ProviderError) as info:
            await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (info.value.code, info.value.retryable, len(server.requests)) == ("RATE_LIMITED", True, 1)
    server.replies.clear()
    near = error(protocol, 503, "in a moment", fast=False)
    near.headers["retry-after"] = formatdate(time.time() + 2, usegmt=True)
    server.push(near, reply(protocol, text="after the date"))
    began = time.monotonic()
    with trio.fail_after(10):
        result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "after the date" and len(server.requests) == 3
    assert time.monotonic() - began >= 0.9  # (the date, whole seconds: at least one of them waited)
