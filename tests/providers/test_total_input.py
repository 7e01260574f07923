"""``Usage.total_input_tokens``: every input token of a request, cached or not, in one meaning
for every protocol, as recorded from answers the official SDK clients read off the loopback
servers. OpenAI's input count already includes the cached tokens; Anthropic's excludes cache
reads and writes, so its total adds them (unknown when one of the three was not sent)."""

from __future__ import annotations

import msgspec
import pytest

from events import types as t
from runtime.providers.faux import FauxProvider, FauxTurn

from .conftest import Ctx, Deltas
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers import openai_responses as orr


async def _usage(provider) -> t.Usage:
    return (await provider.stream(Ctx().user("hi").request(), Deltas())).usage


async def test_responses_total_is_its_input_count_which_includes_the_cached(server, make):
    server.push(orr.response_stream(text="ok", usage=orr.usage(1000, 9, cached=600, cache_write=150)))
    usage = await _usage(make("openai-responses"))
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (1000, 600, 150)
    assert usage.total_input_tokens == 1000


async def test_chat_total_is_its_prompt_count_which_includes_the_cached(server, make):
    server.push(oc.chat_stream(text="ok", usage=oc.usage(800, 9, cached=500)))
    usage = await _usage(make("openai-chat"))
    assert (usage.input_tokens, usage.cache_read_tokens) == (800, 500)
    assert usage.total_input_tokens == 800
    # A Chat answer without usage reports no total either.
    server.push(oc.chat_stream(text="ok"))
    assert (await _usage(make("openai-chat"))).total_input_tokens is None


async def test_anthropic_total_adds_the_cache_reads_and_writes_to_its_input_count(server, make):
    provider = make("anthropic")
    server.push(an.message_stream(text="ok", usage={"input_tokens": 40, "output_tokens": 1,
                                                    "cache_read_input_tokens": 600, "cache_creation_input_tokens": 150}))
    usage = await _usage(provider)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (40, 600, 150)
    assert usage.total_input_tokens == 790
    # Counts of 0 are counts: the total is the input count.
    server.push(an.message_stream(text="ok", usage={"input_tokens": 40, "output_tokens": 1,
                                                    "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}))
    assert (await _usage(provider)).total_input_tokens == 40


async def test_anthropic_total_is_unknown_when_a_count_of_it_was_not_sent(server, make):
    provider = make("anthropic")
    # No cache counts at all (the SDK gives None: not 0), a null one, no input count.
    for start in ({"input_tokens": 40, "output_tokens": 1},
                  {"input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 600,
                   "cache_creation_input_tokens": None},
                  {"output_tokens": 1, "cache_read_input_tokens": 600, "cache_creation_input_tokens": 150}):
        server.push(an.message_stream(text="ok", usage=start))
        usage = await _usage(provider)
        assert usage.total_input_tokens is None, (start, usage)
    # A cache count the message_delta reports completes the total (its counts are running totals).
    reply = an.message_stream(text="ok", usage={"input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 600})
    for kind, data in reply.events:
        if kind == "message_delta":
            data["usage"] = {"output_tokens": 7, "cache_creation_input_tokens": 150}
    server.push(reply)
    assert (await _usage(provider)).total_input_tokens == 790


async def test_faux_total_is_its_input_count_unless_scripted():
    request = Ctx().user("three little words").request()
    # Left out: the input count (words of the whole request), the cache counts a part of it.
    turn = FauxTurn(text="ok", cache_read_tokens=2, cache_write_tokens=1)
    usage = (await FauxProvider("faux", [turn]).stream(request, Deltas())).usage
    assert (usage.input_tokens, usage.total_input_tokens) == (3, 3)
    usage = (await FauxProvider("faux", [FauxTurn(text="ok", input_tokens=40)]).stream(request, Deltas())).usage
    assert usage.total_input_tokens == 40
    # Scripted: as scripted, null included (not reported); an unknown input count leaves it unknown.
    for scripted, want in (({"total_input_tokens": 790, "input_tokens": 40}, 790),
                           ({"total_input_tokens": None}, None), ({"input_tokens": None}, None)):
        usage = (await FauxProvider("faux", [FauxTurn(text="ok", **scripted)]).stream(request, Deltas())).usage
        assert usage.total_input_tokens == want, scripted


def test_a_faux_script_names_a_bad_total():
    # As any scripted count: JSON's camelCase name, a negative count refused with where it is.
    turn = msgspec.json.decode(b'{"text": "ok", "totalInputTokens": 790}', type=FauxTurn)
    assert turn.total_input_tokens == 790
    with pytest.raises(msgspec.ValidationError, match=r"totalInputTokens"):
        msgspec.json.decode(b'{"text": "ok", "totalInputTokens": -1}', type=FauxTurn)


async def test_anthropic_total_is_a_count_up_to_the_largest_one_recorded(server, make):
    # (a count is at most 2**63 - 1, the largest the log holds as one: a sum past it is none)
    provider = make("anthropic")
    top = 2**63 - 1
    server.push(an.message_stream(text="ok", usage={"input_tokens": top, "output_tokens": 1,
                                                    "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}))
    assert (await _usage(provider)).total_input_tokens == top
    server.push(an.message_stream(text="ok", usage={"input_tokens": top, "output_tokens": 1,
                                                    "cache_read_input_tokens": 1, "cache_creation_input_tokens": 0}))
    usage = await _usage(provider)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.total_input_tokens) == (top, 1, None)
