"""Stop words compatible Chat servers send in ``finish_reason`` besides OpenAI's own: TGI's
``eos_token`` (the model ended its answer) is a whole answer, as OpenAI's ``stop``; Mistral's
``model_length`` (the model's window filled while it wrote) cuts the answer where it was, as
``length`` does. A summary is taken only from an answer known to have ended whole, so a server's
own word for "done" must be read as one."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.providers.base import OUTPUT_LIMIT

from .conftest import Ctx, Deltas
from .servers.base import Reply


def _chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
    return (None, {"id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})


@pytest.mark.parametrize("finish, recorded", [
    ("stop", "end_turn"), ("eos_token", "end_turn"), ("stop_sequence", "stop_sequence"),
    ("length", OUTPUT_LIMIT), ("model_length", OUTPUT_LIMIT)])
async def test_a_chat_servers_own_stop_word_is_read_as_what_it_means(finish, recorded, server, make):
    provider = make("openai-chat")
    server.push(Reply(events=[_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Done."}),
                              _chunk({}, finish), (None, "[DONE]")]))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (result.text, result.stop_reason) == ("Done.", recorded)
