"""A frame the SDK cannot read is a malformed stream (``PROVIDER_ERROR``), whatever its shape;
a field the log records as text that is none is one too; frames without data are skipped, and
what follows the stream's end is no part of the answer.

A data frame of JSON that is no object (``null``, a list), an object without a field the SDK
reads, or a field of another type made the SDKs raise ``AttributeError`` (or, after the stream,
``TypeError``), which left ``stream()`` as it was: the session's actor crashed, asked the model
again when restarted, and after three crashes the session was quarantined for good.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from events import types as t
from runtime.providers.base import ProviderError

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers.base import Reply, sse

Frames = list[tuple[str | None, Any]]


def _insert_after_first(frame: tuple[str | None, Any]) -> Callable[[Frames], Frames]:
    return lambda frames: [frames[0], frame, *frames[1:]]


def _edit(kind: str, change: Callable[[dict], dict]) -> Callable[[Frames], Frames]:
    return lambda frames: [(n, change(d) if isinstance(d, dict) and d.get("type", n) == kind else d) for n, d in frames]


CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "chat-test"}

CASES: dict[str, Callable[[Frames], Frames]] = {
    "anthropic/null frame": _insert_after_first(("content_block_delta", "null")),
    "anthropic/a delta for a block that never started": _insert_after_first(
        ("content_block_delta", {"type": "content_block_delta", "index": 9, "delta": {"type": "text_delta", "text": "x"}})),
    "openai-chat/null frame": _insert_after_first((None, "null")),
    "openai-chat/a list frame": _insert_after_first((None, "[1]")),
    "openai-chat/delta that is a string": _insert_after_first((None, {**CHUNK, "choices": [{"index": 0, "delta": "x"}]})),
    "openai-chat/content that is a number": _insert_after_first((None, {**CHUNK, "choices": [{"index": 0, "delta": {"content": 5}}]})),
    "openai-responses/null frame": _insert_after_first(("response.output_text.delta", "null")),
    "openai-responses/final output item that is a string": _edit(
        "response.completed", lambda d: {**d, "response": {**d["response"], "output": ["x"]}}),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_frame_the_sdk_cannot_read_is_a_malformed_stream(case, server, make):
    protocol = case.split("/")[0]
    provider = make(protocol, max_retries=0)
    scripted = reply(protocol, text=["hi ", "there"], calls=[("call_1", "read_file", {"path": "a"})])
    scripted.events = CASES[case](copy.deepcopy(scripted.events))
    server.push(scripted, reply(protocol, text="fine"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.code == "PROVIDER_ERROR" and info.value.retryable
    assert "malformed stream" in info.value.message
    # The provider (and its client) serves the next request.
    assert (await provider.stream(Ctx().user("again").request(), Deltas())).text == "fine"


async def test_a_malformed_stream_quoting_the_key_never_shows_part_of_it(make):
    """What the SDK says about a stream it cannot read can quote the stream (the Anthropic SDK
    quoted tool arguments that were not JSON); the message is cut to a length, and the key is
    redacted. Cut first, a key lying across the cut kept its first part."""
    secret = "sk-live-" + "K3y" * 12  # 44 characters
    provider = make("anthropic", api_key=secret, max_retries=0)
    for pad in range(420, 480, 3):  # the key lies across the cut (at 500 characters), or just before it
        error = provider.malformed(ValueError("Unable to parse: " + "p" * pad + secret + "z" * 100))
        assert error.code == "PROVIDER_ERROR" and error.retryable
        leaked = [secret[:n] for n in range(8, len(secret) + 1) if secret[:n] in error.message]
        assert not leaked, (pad, error.message[-120:])


def _set_in(frames: Frames, kind: str, change: Callable[[dict], None]) -> Frames:
    frames = copy.deepcopy(frames)
    for name, data in frames:
        if isinstance(data, dict) and data.get("type", name) == kind:
            change(data)
    return frames


def _chat_call_id(frames: Frames) -> Frames:
    frames = copy.deepcopy(frames)
    for _, data in frames:
        for choice in data.get("choices", []) if isinstance(data, dict) else []:
            for call in choice["delta"].get("tool_calls", []):
                if "id" in call:
                    call["id"] = 5
    return frames


def _responses_call_name(data: dict) -> None:
    for item in data["response"]["output"]:
        if item["type"] == "function_call":
            item["name"] = 7


MISTYPED: dict[str, Callable[[Frames], Frames]] = {
    "anthropic/a call id that is a number": lambda f: _set_in(
        f, "content_block_start", lambda d: d["content_block"].update(id=5) if d["content_block"]["type"] == "tool_use" else None),
    "anthropic/a call name that is null": lambda f: _set_in(
        f, "content_block_start", lambda d: d["content_block"].update(name=None) if d["content_block"]["type"] == "tool_use" else None),
    "anthropic/a stop reason that is a number": lambda f: _set_in(f, "message_delta", lambda d: d["delta"].update(stop_reason=5)),
    "openai-chat/a call id that is a number": _chat_call_id,
    "openai-responses/a call name that is a number": lambda f: _set_in(f, "response.completed", _responses_call_name),
}


@pytest.mark.parametrize("case", list(MISTYPED))
async def test_a_field_recorded_as_text_that_is_no_text_fails_the_request_not_the_session(case, server, make, tmp_path):
    # The SDKs pass such a field through as sent. A call id that was a number crashed the actor
    # (which asked the model again on restart, and quarantined the session after three); a name
    # or a stop reason of another type was refused by the log, as RESPONSE_NOT_RECORDED, which
    # named no provider and no cause.
    from runtime.actor import GetState, Submit, WaitIdle

    from .test_actor import events_of, runtime

    protocol = case.split("/")[0]
    provider = make(protocol, max_retries=0)
    scripted = reply(protocol, text="x", calls=[("call_1", "read_file", {"path": "a"})])
    scripted.events = MISTYPED[case](scripted.events)
    server.push(scripted, reply(protocol, text="fine"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        for n in (1, 2):
            await sup.call(sid, Submit(f"req{n}", [t.TextPart("hello")]))
            await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    answers = [e.event for e in evs if e.kind in ("model.failed", "model.responded")]
    assert [type(a).__name__ for a in answers] == ["ModelFailed", "ModelResponded"]
    failed = answers[0]
    assert failed.code == "PROVIDER_ERROR" and failed.retryable
    assert failed.message.startswith(f"provider 'p-{protocol}': malformed stream: TypeError: the ") \
        and "not text" in failed.message, failed.message
    assert answers[1].text == "fine" and state.status == "idle"
    assert len(server.requests) == 2  # asked once each, never again by a restarted actor


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
async def test_sse_frames_without_data_are_skipped(protocol, server, make):
    # The OpenAI SDK hands every frame to its JSON reader: a frame of `retry:` alone, an empty
    # `data:`, or — once the stream has given an `id:` — every keep-alive comment failed the
    # answer as a malformed stream. (The Anthropic SDK skips them all.)
    provider = make(protocol, max_retries=0)
    frames = reply(protocol, text=["Hello ", "world"]).events
    body = b"retry: 3000\n\ndata:\n\n"
    for i, (name, data) in enumerate(frames):
        head = f"event: {name}\n" if name else ""
        text = data if isinstance(data, str) else json.dumps(data)
        body += f"id: {i}\n{head}data: {text}\n\n: keep-alive\n\n".encode()
    server.push(Reply(chunks=[body]))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "Hello world" and result.stop_reason == "end_turn"


@pytest.mark.parametrize("split", (False, True), ids=("whole", "split"))
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_byte_order_mark_at_the_start_of_a_stream_is_ignored(protocol, split, server, make):
    # The SSE standard ignores one leading U+FEFF; the SDKs read it as part of the first line's
    # field name and dropped that line: Anthropic lost message_start (the answer then failed as
    # cut short), Chat its first chunk (here the answer's first words, sent with the role).
    provider = make(protocol, max_retries=0)
    frames = reply(protocol, text=["Hello ", "world"]).events or []
    if protocol == "openai-chat":
        frames = frames[1:]  # (no chunk of the role alone: the first one holds "Hello ")
    body = b"\xef\xbb\xbf" + b"".join(sse(frames))
    # (split: the mark cut in two, and the first line cut after it)
    server.push(Reply(chunks=[body[:1], body[1:5], body[5:]] if split else [body]), reply(protocol, text="again"))
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert result.text == deltas.text() == "Hello world" and result.stop_reason == "end_turn"
    assert (await provider.stream(Ctx().user("hi").request(), Deltas())).text == "again"  # (one stream's start only)


async def test_what_a_server_sends_after_message_stop_is_no_part_of_the_answer(server, make):
    # Text and thinking deltas sent after message_stop were added to the committed answer.
    provider = make("anthropic", max_retries=0)
    scripted = reply("anthropic", text=["Hello ", "world"], reasoning=["hm"])
    again = [copy.deepcopy(f) for f in scripted.events if f[0] == "content_block_delta"]
    scripted.events = scripted.events + again + [("message_start", {"type": "message_start", "message": {
        "id": "msg_2", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}})]
    server.push(scripted)
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert (result.text, result.reasoning, result.response_id) == ("Hello world", "hm", "r1")
    assert (deltas.text(), deltas.text("reasoning")) == ("Hello world", "hm")
    assert result.usage.input_tokens == 100


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
async def test_a_usage_count_of_another_type_is_unknown_and_read_without_a_warning(protocol, server, make):
    # Reading the SDK's usage object made pydantic warn on stderr, quoting the server's values
    # (and, where warnings raise, as under this suite, the answer failed with an exception no
    # error mapping knew).
    provider = make(protocol, max_retries=0)
    scripted = reply(protocol, text="hi")
    if protocol == "openai-chat":
        scripted.events = [(n, {**d, "usage": {**d["usage"], "prompt_tokens": "many"}}) if isinstance(d, dict) and d.get("usage")
                           else (n, d) for n, d in scripted.events]
    else:
        scripted.events = _set_in(scripted.events, "message_start", lambda d: d["message"]["usage"].update(input_tokens="many"))
    server.push(scripted)
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "hi" and result.usage.input_tokens is None and result.usage.output_tokens == 20


@pytest.mark.parametrize("protocol", ["openai-responses", "anthropic"])
async def test_reasoning_that_is_no_text_is_a_malformed_stream(protocol, server, make):
    # A Responses reasoning delta that was a number went to live viewers as such (the SDK joins
    # text deltas, which checks them, not these); an Anthropic signature that was no text was
    # recorded, to be sent back with every later request.
    provider = make(protocol, max_retries=0)
    scripted = reply(protocol, text="hi", reasoning=["hm"])
    if protocol == "openai-responses":
        scripted.events = _set_in(scripted.events, "response.reasoning_summary_text.delta", lambda d: d.update(delta=5))
    else:
        scripted.events = _set_in(scripted.events, "content_block_delta",
                                  lambda d: d["delta"].update(signature=5) if d["delta"]["type"] == "signature_delta" else None)
    server.push(scripted)
    deltas = Deltas()
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), deltas)
    assert info.value.code == "PROVIDER_ERROR" and "not text" in info.value.message
    assert all(isinstance(d.text, str) for d in deltas)


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
async def test_a_tool_use_stop_without_a_call_keeps_the_answer(protocol, server, make):
    # Chat kept such an answer (stop tool_use, no calls) while Anthropic failed it as a malformed
    # stream: one lapse of a server, two ends. The answer is whole, and kept on both.
    provider = make(protocol, max_retries=0)
    server.push(oc.chat_stream(text="no call", finish="tool_calls") if protocol == "openai-chat"
                else an.message_stream(text="no call", stop_reason="tool_use"))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (result.text, result.tool_calls, result.stop_reason) == ("no call", [], "tool_use")
    assert len(server.requests) == 1


async def test_what_a_server_sends_after_the_final_response_is_not_streamed_as_the_answer(server, make):
    # Responses took its answer from the final event already, but text deltas sent after it
    # still went to live viewers as part of the answer being written.
    provider = make("openai-responses", max_retries=0)
    scripted = reply("openai-responses", text=["Hello ", "world"])
    scripted.events = scripted.events + [copy.deepcopy(f) for f in scripted.events if f[0] == "response.output_text.delta"]
    server.push(scripted)
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert result.text == deltas.text() == "Hello world"
