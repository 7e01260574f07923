"""A frame the SDK cannot read is a malformed stream (``PROVIDER_ERROR``), whatever its shape.

A data frame of JSON that is no object (``null``, a list), an object without a field the SDK
reads, or a field of another type made the SDKs raise ``AttributeError`` (or, after the stream,
``TypeError``), which left ``stream()`` as it was: the session's actor crashed, asked the model
again when restarted, and after three crashes the session was quarantined for good.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from runtime.providers.base import ProviderError

from .conftest import Ctx, Deltas
from .scripts import reply

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
