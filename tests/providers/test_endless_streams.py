"""A model stream that never ends (F-MOD-1): a server that keeps sending deltas and never its
final event. ``timeoutSeconds`` bounds a silence, not an answer, so such a stream held the
session, and the answer in memory, until the server stopped or the user aborted. An answer past
``log.maxEventBytes`` can never be recorded: the read now stops once the answer streamed so far
is past it, with the error such an answer gets when it is recorded (``RESPONSE_NOT_RECORDED``),
and the session answers the next input. The servers send each frame once the client has read
the one before (``Reply.endless``), so the bytes they sent are what the client read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle
from runtime.providers.base import ProviderError

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply
from .servers.base import Reply
from .test_actor import events_of, runtime

LIMIT = 64 * 1024  # (the least log.maxEventBytes the config takes)
KINDS = ("text", "reasoning", "arguments")


def _is_delta(protocol: str, kind: str, name: str | None, data: Any) -> bool:
    if protocol == "openai-responses":
        return name == {"text": "response.output_text.delta", "reasoning": "response.reasoning_summary_text.delta",
                        "arguments": "response.function_call_arguments.delta"}[kind]
    if protocol == "openai-chat":
        delta = data["choices"][0]["delta"] if isinstance(data, dict) and data.get("choices") else {}
        if kind == "arguments":
            return any("id" not in c and c["function"].get("arguments") for c in delta.get("tool_calls", []))
        return bool(delta.get({"text": "content", "reasoning": "reasoning_content"}[kind]))
    return name == "content_block_delta" and data["delta"]["type"] == {
        "text": "text_delta", "reasoning": "thinking_delta", "arguments": "input_json_delta"}[kind]


def _with_piece(protocol: str, kind: str, data: dict[str, Any], piece: str) -> dict[str, Any]:
    data = copy.deepcopy(data)
    if protocol == "openai-responses":
        data["delta"] = piece
    elif protocol == "openai-chat":
        delta = data["choices"][0]["delta"]
        if kind == "arguments":
            delta["tool_calls"][0]["function"]["arguments"] = piece
        else:
            delta["content" if kind == "text" else "reasoning_content"] = piece
    else:
        data["delta"][{"text": "text", "reasoning": "thinking", "arguments": "partial_json"}[kind]] = piece
    return data


def endless(protocol: str, kind: str = "text", piece: str = "x" * 1000) -> Reply:
    """A stream of ``protocol`` that begins an answer and then sends a delta of ``kind`` holding
    ``piece`` for ever."""
    begun = reply(protocol, **{"text": {"text": ["a"]}, "reasoning": {"reasoning": ["a"], "text": "b"},
                               "arguments": {"calls": [("call_1", "read_file", {"path": "p"})]}}[kind])
    assert begun.events is not None
    at = next(i for i, (name, data) in enumerate(begun.events) if _is_delta(protocol, kind, name, data))
    name, data = begun.events[at]
    return Reply(events=begun.events[:at + 1], endless=(name, _with_piece(protocol, kind, data, piece)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_endless_stream_ends_once_the_answer_is_past_the_event_size_limit(protocol, kind, server, make):
    provider = make(protocol, max_retries=0, max_answer_bytes=LIMIT)
    server.push(endless(protocol, kind), reply(protocol, text="small"))
    deltas = Deltas()
    with pytest.raises(ProviderError) as err:
        await provider.stream(Ctx().user("hello").request(), deltas)
    assert (err.value.code, err.value.retryable) == ("RESPONSE_NOT_RECORDED", False)
    assert err.value.message == (f"provider {provider.id!r}: the model's answer could not be recorded (the answer "
                                 f"streamed was past the maximum event size of {LIMIT} bytes)"), err.value.message
    assert err.value.usage is not None  # (it had begun answering: what was reported by then, here nothing)
    assert LIMIT < server.sent < 2 * LIMIT
    await server.disconnected.wait()  # the stream was closed
    result = await provider.stream(Ctx().user("hello").request(), Deltas())
    assert result.text == "small"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_endless_stream_fails_its_request_and_the_session_answers_the_next(protocol, server, make, tmp_path):
    provider = make(protocol, max_retries=0, max_answer_bytes=LIMIT)
    server.push(endless(protocol, "text", "é" * 500), reply(protocol, text="small"))
    async with runtime(tmp_path / "data", provider, max_event_bytes=LIMIT) as sup:
        sid = await sup.create_session("p1")
        for n in (1, 2):
            await sup.call(sid, Submit(f"req{n}", [t.TextPart(f"answer {n}")]))
            await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    answers = [(e.kind, getattr(e.event, "code", None)) for e in evs if e.kind in ("model.responded", "model.failed")]
    assert answers == [("model.failed", "RESPONSE_NOT_RECORDED"), ("model.responded", None)]
    assert server.sent < 2 * 3 * LIMIT  # (each é is sent as a \u escape of 6 bytes, and is 2 bytes of the answer)
    assert state.status == "idle" and state.agents["main"].items[-1].text == "small"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_answer_just_under_the_limit_is_streamed_whole(protocol, server, make):
    # The count is of the answer's own bytes (text, reasoning, arguments, as UTF-8), each of
    # which the recorded event holds at least once: an answer of up to the limit is read whole,
    # and whether its event fits is decided when it is recorded, as before.
    provider = make(protocol, max_retries=0, max_answer_bytes=LIMIT)
    text = ["é" * 500] * (LIMIT // 1000) + ["x" * (LIMIT % 1000)]
    assert len("".join(text).encode()) == LIMIT
    server.push(reply(protocol, text=text))
    result = await provider.stream(Ctx().user("hello").request(), Deltas())
    assert result.text == "".join(text)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_that_goes_on_after_its_end_is_read_to_its_end_only(protocol, server, make):
    # Deltas after the final event (Responses), message_stop (Anthropic) or [DONE] (Chat) are no
    # part of the answer; the read stops there rather than waiting for the server to stop.
    provider = make(protocol, max_retries=0, max_answer_bytes=LIMIT)
    whole = reply(protocol, text=["It is ", "noon."])
    assert whole.events is not None
    after = endless(protocol).endless
    server.push(Reply(events=whole.events, endless=after))
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hello").request(), deltas)
    assert result.text == deltas.text() == "It is noon."
    await server.disconnected.wait()
    if protocol != "openai-chat":  # (the OpenAI SDK drains what follows [DONE] for 0.1 s, unread, to reuse the connection)
        assert server.sent < LIMIT
