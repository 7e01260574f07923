"""How an answer ends, over the wire, through a real session against the loopback servers: a
thinking block that came without a signature is not sent back to Anthropic; a connection
dropped after the answer said it was done keeps the answer; Anthropic's
``model_context_window_exceeded`` cuts a call as its output limit does; a Responses
``incomplete`` response that leaves its unfinished call out of ``output`` keeps that call as a
cut one."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle
from runtime.providers.base import ProviderError

from .conftest import Ctx, Deltas
from .scripts import reply
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers.base import Received, Reply, sse
from .test_actor import events_of, one_input, runtime
from .test_output_limit_calls import SLEEP, _assert_not_run, _finished, _session, cut_answer


def _unsigned(scripted: Reply) -> Reply:
    """``scripted`` (an Anthropic answer with thinking) as a server that signs nothing sends it."""
    scripted.events = [(name, data) for name, data in scripted.events
                       if not (name == "content_block_delta" and data["delta"]["type"] == "signature_delta")]
    return scripted


def _thinking_blocks(body: Any) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if m["role"] == "assistant" for b in m["content"] if b["type"] == "thinking"]


def _as_anthropic_checks(replies: list[Reply]) -> Any:
    """A server that refuses a thinking block whose signature is not valid, as Anthropic's API
    does (a 400 ``invalid_request_error``), and otherwise answers with ``replies`` in turn."""
    def answer(received: Received) -> Reply:
        if any(not b.get("signature") for b in _thinking_blocks(received.body)):
            return an.error(400, "messages.1.content.0: Invalid `signature` in `thinking` block")
        return replies.pop(0) if replies else an.error(500, "no scripted reply left", type="api_error")
    return answer


async def test_a_thinking_block_that_came_unsigned_is_not_sent_back_and_the_session_goes_on(server, make, tmp_path):
    # It went back with "signature": "", which Anthropic refuses: every later request failed.
    provider = make("anthropic")
    server.answer = _as_anthropic_checks([
        _unsigned(an.message_stream(text="Checking.", calls=[("call_a", "get_system_time", {})], thinking=["plan"])),
        reply("anthropic", text="It is now.", reasoning=["easy"]),
    ])
    state, evs = await one_input(tmp_path / "data", provider, "what time is it?", thinking_level="high")
    assert not [e.event for e in evs if e.kind == "model.failed"]
    assert state.status == "idle" and state.agents["main"].items[-1].text == "It is now."
    # The log keeps the block as it came; the request after it carried no thinking block, but
    # the rest of that turn: its text, its call and the call's result.
    first = [e.event for e in evs if e.kind == "model.responded"][0]
    assert first.reasoning_blocks == [{"protocol": "anthropic",
                                       "block": {"type": "thinking", "thinking": "plan", "signature": ""}}]
    assert len(server.bodies) == 2
    second = server.bodies[1]
    assert _thinking_blocks(second) == []
    assert [b["type"] for b in second["messages"][1]["content"]] == ["text", "tool_use"]
    assert second["messages"][2]["content"][0]["tool_use_id"] == "call_a"
    assert [e.event for e in evs if e.kind == "model.responded"][1].diagnostics["unsigned_thinking_blocks"] == 1


async def test_a_thinking_block_cut_at_the_output_limit_is_not_sent_back_and_a_signed_one_is(server, make, tmp_path):
    # (A guard: an answer cut while it thought has no signature and nothing after its thinking,
    # so no item carries the block; the next requests go on, and a signed block goes back.)
    provider = make("anthropic")
    cut = an.message_stream(thinking=["I should first"], stop_reason="max_tokens")
    cut.events = [(name, data) for name, data in cut.events
                  if not (name == "content_block_delta" and data["delta"]["type"] == "signature_delta")
                  and not (name == "content_block_stop")]
    signed = an.message_stream(text="Here.", thinking=["again"], signature="sig-2")
    server.answer = _as_anthropic_checks([cut, signed, reply("anthropic", text="Fine.")])
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1", thinking_level="high")
        for n, words in enumerate(("think hard", "go on", "and then?"), 1):
            await sup.call(sid, Submit(f"req{n}", [t.TextPart(words)]))
            with trio.fail_after(30):
                await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    assert not [e.event for e in evs if e.kind == "model.failed"]
    assert [e.event.stop_reason for e in evs if e.kind == "model.responded"] == ["max_tokens", "end_turn", "end_turn"]
    assert state.agents["main"].items[-1].text == "Fine."
    assert _thinking_blocks(server.bodies[1]) == []
    # A signed block still goes back as it came.
    assert _thinking_blocks(server.bodies[2]) == [{"type": "thinking", "thinking": "again", "signature": "sig-2"}]


def _dropped(protocol: str, *, after_done: bool = True) -> Reply:
    """An answer whose end was said (Chat's ``finish_reason`` and usage, Anthropic's
    ``message_delta`` with its ``stop_reason``) before the connection dropped, without ``[DONE]``
    or ``message_stop``; ``after_done=False``: dropped before its end was said."""
    if protocol == "openai-chat":
        scripted = oc.chat_stream(text="All done.", usage=oc.usage(100, 20))
        said = [e for e in scripted.events if isinstance(e[1], dict) and (not e[1]["choices"] or e[1]["choices"][0]["finish_reason"])]
        dropped = [e for e in scripted.events if e[1] == "[DONE]"]
    else:
        scripted = an.message_stream(text="All done.", output_tokens=20)
        said = [e for e in scripted.events if e[0] == "message_delta"]
        dropped = [e for e in scripted.events if e[0] == "message_stop"]
    left_out = dropped + ([] if after_done else said)
    return Reply(chunks=sse([e for e in scripted.events if e not in left_out]), close_early=True)


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
async def test_a_connection_dropped_after_the_answer_said_it_was_done_keeps_the_answer(
        protocol, server, make, tmp_path):
    # It failed as CONNECTION_FAILED, and the whole answer the user had seen was lost.
    provider = make(protocol, max_retries=0)
    server.push(_dropped(protocol), reply(protocol, text="Again."))
    state, evs = await one_input(tmp_path / "data", provider, "finish it")
    assert not [e.event for e in evs if e.kind == "model.failed"]
    (responded,) = [e.event for e in evs if e.kind == "model.responded"]
    assert (responded.text, responded.stop_reason, responded.usage.output_tokens) == ("All done.", "end_turn", 20)
    assert state.status == "idle" and state.agents["main"].items[-1].text == "All done."
    assert len(server.requests) == 1


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
async def test_a_connection_dropped_before_the_answer_said_it_was_done_still_fails_it(protocol, server, make):
    # (The guard: an answer whose end never came is cut, whatever it says.)
    provider = make(protocol, max_retries=0)
    server.push(_dropped(protocol, after_done=False))
    with pytest.raises(ProviderError) as caught:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert caught.value.code == "CONNECTION_FAILED"


async def test_an_anthropic_call_cut_at_the_context_window_is_not_run(server, make, tmp_path):
    # model_context_window_exceeded cuts an answer as max_tokens does: its last call ran.
    calls = [("call_a", "get_system_time", "{}"), ("call_b", "sleep_milliseconds", SLEEP)]
    scripted = cut_answer("anthropic", calls)
    name, data = [(n, d) for n, d in scripted.events if n == "message_delta"][0]
    data["delta"]["stop_reason"] = "model_context_window_exceeded"
    _state, evs = await _session("anthropic", scripted, server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == "max_tokens"
    assert _finished(evs)["call_a"].status == "ok"
    _assert_not_run("anthropic", evs, server, "call_b", "sleep_milliseconds")


async def test_a_responses_call_an_incomplete_final_output_leaves_out_is_kept_as_cut(server, make, tmp_path):
    # The final output listed only the finished call: the one being written was lost, neither
    # run nor shown to the model.
    calls = [("call_a", "get_system_time", "{}"), ("call_b", "sleep_milliseconds", SLEEP[:9])]
    scripted = cut_answer("openai-responses", calls)
    name, data = scripted.events[-1]
    output = [item for item in data["response"]["output"] if item.get("call_id") != "call_b"]
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "output": output,
                                                       "incomplete_details": {"reason": "max_output_tokens"}}})
    _state, evs = await _session("openai-responses", scripted, server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == "max_tokens"
    assert [(c.call_id, c.name, c.arguments) for c in responded.tool_calls] == calls  # as streamed
    assert _finished(evs)["call_a"].status == "ok"
    _assert_not_run("openai-responses", evs, server, "call_b", "sleep_milliseconds")
