"""The Responses stream read as the SDK's raw events (F-MOD-1..4).

The SDK's ``responses.stream()`` helper joined each text and arguments delta to its snapshot with
``+=``, copying the whole text so far for every delta: the work of an answer grew with the square
of its deltas, on the event loop (200,000 one-character deltas: 2.7 s; a million: about a
minute). The provider now reads ``responses.create(stream=True)`` and puts the response together
itself, joining pieces as they come.

The work is counted, not timed: the bytes allocated and freed again between one live delta and
the next (tracemalloc's peak over what is held, summed over the deltas), which is what copying the
text so far costs. Timed, the SDK's own parsing of each event (a few hundred microseconds here)
hides the copying until the answers are far larger than a test can send: 200,000 deltas took
about a minute to parse, of which the copying was 2.7 s."""

from __future__ import annotations

import copy
import tracemalloc

from runtime.providers.base import Delta

from .conftest import Ctx, Deltas, stream_traced
from .scripts import reply
from .servers import openai_responses as orr
from .servers.base import Reply, sse

PROTOCOL = "openai-responses"


async def _work(provider, server, n: int) -> int:
    """The bytes allocated and freed between live deltas, summed, for an answer of ``n``
    one-character deltas."""
    frames = sse(reply(PROTOCOL, text=["x"] * n).events or [])
    server.push(Reply(chunks=[b"".join(frames[i:i + 40]) for i in range(0, len(frames), 40)]))
    work = 0

    def on_delta(d: Delta) -> None:
        nonlocal work
        held, peak = tracemalloc.get_traced_memory()
        work += peak - held
        tracemalloc.reset_peak()

    result = await stream_traced(provider, on_delta)
    assert result.text == "x" * n
    return work


async def test_the_work_of_an_answer_grows_with_its_deltas_not_their_square(server, make):
    provider = make(PROTOCOL, max_retries=0)
    server.push(reply(PROTOCOL, text="warm"))
    await provider.stream(Ctx().user("hi").request(), Deltas())  # (imports, pools: before measuring)
    n = 5000
    small, large = await _work(provider, server, n), await _work(provider, server, 4 * n)
    # Each event's reading (the SDK's JSON and objects, about 4.6 kB here) is linear, and so is
    # joining the pieces: 4 times the deltas, 4.0 times the work. With the helper's copying it was
    # 8.6 times (and grows on: 200,000 deltas copied 20 GB).
    assert large < 6 * small, (small, large, large / small)


def _without_output(events, kind: str) -> list:
    events = copy.deepcopy(events)
    for name, data in events:
        if name == kind:
            del data["response"]["output"]
    return events


async def test_a_final_response_without_output_is_the_streams_items(server, make):
    # The helper put the output together from the stream when the final event left it out; so does
    # the reader: each item as its output_item.done sent it.
    provider = make(PROTOCOL, max_retries=0)
    whole = orr.response_stream(text=["Hel", "lo"], calls=[("call_1", "read_file", {"path": "a.txt"})],
                                reasoning=["think"], encrypted_content="enc", usage=orr.usage(10, 5))
    server.push(whole, Reply(events=_without_output(whole.events, "response.completed")))
    expected = await provider.stream(Ctx().user("hi").request(), Deltas())
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert result == expected
    assert (result.text, result.stop_reason, result.usage.output_tokens) == ("Hello", "tool_use", 5)
    assert [(c.call_id, c.name, c.arguments) for c in result.tool_calls] == [("call_1", "read_file", '{"path": "a.txt"}')]
    assert result.reasoning == "think" and result.reasoning_blocks[0]["block"]["encrypted_content"] == "enc"
    assert (deltas.text(), deltas.text("reasoning")) == ("Hello", "think")


async def test_a_response_cut_short_without_output_keeps_what_was_streamed(server, make):
    # response.incomplete without output, its items never done: the text and the call's arguments
    # as far as they streamed, as the helper's snapshot had them.
    provider = make(PROTOCOL, max_retries=0)
    cut = orr.response_stream(text=["Hel", "lo"], calls=[("call_1", "read_file", '{"path": "a.t')],
                              status="incomplete", usage=orr.usage(10, 5))
    events = [(n, d) for n, d in _without_output(cut.events, "response.incomplete")
              if n not in ("response.output_item.done", "response.output_text.done", "response.content_part.done")]
    server.push(Reply(events=events))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (result.text, result.stop_reason) == ("Hello", "max_tokens")
    assert [(c.call_id, c.arguments) for c in result.tool_calls] == [("call_1", '{"path": "a.t')]


async def test_deltas_for_an_item_never_added_are_the_answer_of_a_final_response_without_output(server, make):
    # The helper failed such a stream as malformed although its final event was whole; the reader
    # streams the text and keeps it for a final response whose output is empty (some proxies).
    provider = make(PROTOCOL, max_retries=0)
    r = reply(PROTOCOL, text=["Hello ", "world"])
    events = [(n, d) for n, d in r.events if n not in ("response.output_item.added", "response.content_part.added")]
    for name, data in events:
        if name == "response.completed":
            data["response"]["output"] = []
    server.push(Reply(events=events))
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert (result.text, deltas.text()) == ("Hello world", "Hello world")
