"""SPEC section 4 as a stranger tests it: what the providers do with servers that do not answer
as the protocols say (real SDK clients against the loopback wire-protocol servers)."""

from __future__ import annotations

import pytest

from runtime.providers.base import ProviderError

from .conftest import PROTOCOLS, Ctx, Deltas
from .servers.base import Reply

# What each protocol answers to a request that does not ask for a stream: one JSON document.
WHOLE = {
    "openai-chat": {"id": "c1", "object": "chat.completion", "created": 1, "model": "m1",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "hello"}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
    "openai-responses": {"id": "r1", "object": "response", "created_at": 1, "model": "m1", "status": "completed",
                         "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                                     "content": [{"type": "output_text", "text": "hello", "annotations": []}]}],
                         "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}},
    "anthropic": {"id": "msg1", "type": "message", "role": "assistant", "model": "m1",
                  "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
                  "usage": {"input_tokens": 3, "output_tokens": 2}},
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_server_that_answers_a_whole_document_instead_of_a_stream_is_named(protocol, server, make):
    """Lens always asks for a stream (``"stream": true``). A server that ignores that and answers
    one JSON document failed as "the stream ended before …", retryable: a cut connection, which
    it is not, and asking again gets the same answer. The error names what the server sent."""
    provider = make(protocol)
    server.push(Reply(200, WHOLE[protocol]))  # (application/json)
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert server.requests[0].body["stream"] is True
    assert info.value.code == "PROVIDER_ERROR" and info.value.retryable is False
    assert "answered with application/json, not an event stream" in info.value.message, info.value.message
    assert len(server.requests) == 1  # (not asked again: the SDK retries nothing here)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_event_stream_cut_short_is_still_a_retryable_cut(protocol, server, make):
    """The stream's own media type, cut before its end: the error it always was."""
    provider = make(protocol)
    server.push(Reply(200, chunks=[b": keep-alive\n\n"], content_type="text/event-stream; charset=utf-8"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.code == "PROVIDER_ERROR" and info.value.retryable is True
    assert "the stream ended before" in info.value.message, info.value.message
