"""F-CTX-5 at the wire's edges: counts a provider sent as placeholders are not its report
(see "Prompt, caching and usage at their edges" in docs/decisions.md)."""

from __future__ import annotations

from events import types as t

from .conftest import Ctx, Deltas
from .servers import anthropic as an


def _delta_usage(reply, usage):
    """``reply`` with its message_delta's usage replaced by ``usage``."""
    for kind, data in reply.events:
        if kind == "message_delta":
            data["usage"] = usage
    return reply


async def test_anthropic_output_details_of_message_start_are_placeholders_as_its_output_tokens(server, make):
    # message_start's output counts are placeholders, replaced by the message_delta's totals. The
    # output_tokens_details it carried were kept when the message_delta left them out: a
    # thinking count of 0 (or whatever the start said) was recorded for an answer whose real one
    # was never reported.
    provider = make("anthropic")
    start = {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 30,
             "cache_read_input_tokens": 60, "output_tokens_details": {"thinking_tokens": 0}}
    server.push(_delta_usage(an.message_stream(text="hi", usage=start), {"output_tokens": 42}))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.usage == t.Usage(input_tokens=100, output_tokens=42, cache_read_tokens=60, cache_write_tokens=30,
                                   reasoning_tokens=None, total_input_tokens=190)

    # Reported on the message_delta, they are the answer's.
    server.push(_delta_usage(an.message_stream(text="hi", usage=start),
                             {"output_tokens": 42, "output_tokens_details": {"thinking_tokens": 17}}))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.usage.reasoning_tokens == 17 and result.usage.output_tokens == 42

    # The message_delta's cumulative input and cache counts replace message_start's; one it
    # leaves out keeps message_start's.
    server.push(_delta_usage(an.message_stream(text="hi", usage=start),
                             {"output_tokens": 5, "input_tokens": 101, "cache_read_input_tokens": 61}))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.usage == t.Usage(input_tokens=101, output_tokens=5, cache_read_tokens=61, cache_write_tokens=30,
                                   reasoning_tokens=None, total_input_tokens=192)
