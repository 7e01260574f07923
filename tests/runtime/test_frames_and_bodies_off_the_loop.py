"""The edges of the thresholds that send a large event's SSE frame and a large request body to a
worker thread (``runtime.bus.made_frame``, ``runtime.http_parts.decoded_body``), and that the
worker's frame is the loop's, byte for byte.

A profiler on this thread only (:mod:`tests.loop_profile`) tells which calls ran on the loop.
"""

from __future__ import annotations

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from events.reader import StoredEvent
from events.secrets import Secrets
from events.types import InputSubmitted, Opaque, TextPart
from runtime.bus import (COUNT_NODES, FRAME_OFF_LOOP_CHARS, _frame_on_loop, event_chars, event_frame, event_frame_in_pieces,
                         made_frame)
from runtime.http_parts import BODY_ON_LOOP_BYTES, SCAN_SLICE_BYTES, Refused, decoded_body
from runtime.pieces import PIECE_CHARS

from tests.loop_json import json_of_text_on_this_thread
from tests.loop_profile import on_this_thread

KEY = "sk-frame-0123456789abcdefSECRET"


def _event(*texts: str) -> StoredEvent:
    return StoredEvent(9, 1_700_000_000_000, "p1", "s1", 4, "a1", None, "input.submitted", "r1",
                       InputSubmitted(content=[TextPart(text=t) for t in texts]))


def _text_of(chars: int) -> str:
    """A text that makes :func:`event_chars` of ``_event(text)`` exactly ``chars``."""
    return ("ab\"\n\u2028é" * (chars // 6 + 1))[:chars - event_chars(_event(""))]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.sampled_from(['a', '"', '\\', '\n', '\u0085', '\u2028', '\u2029', 'é', '\x01', KEY]),
                        max_size=400).map("".join).map(lambda t: t * (PIECE_CHARS // 200 + 1) if len(t) > 300 else t),
                max_size=4),
       st.booleans())
def test_a_frame_made_in_pieces_is_the_frame_made_in_one_call(texts, with_key):
    # (some texts long enough to be encoded a slice at a time; line breaks json_line escapes, and
    # the daemon's key, which both scrub)
    secrets = Secrets({KEY: "OPENAI_API_KEY"} if with_key else {})
    se = _event(*texts)
    assert event_frame_in_pieces(se, secrets) == event_frame(se, secrets)


async def test_a_frame_at_the_threshold_is_made_on_the_loop_and_past_it_in_a_worker():
    secrets = Secrets({})
    at = _text_of(FRAME_OFF_LOOP_CHARS)
    past = at + "x"
    assert event_chars(_event(at)) == FRAME_OFF_LOOP_CHARS
    with json_of_text_on_this_thread(at) as on_loop:
        frame = await made_frame(_event(at), secrets)
    assert on_loop != [] and frame == event_frame(_event(at), secrets)
    with json_of_text_on_this_thread(past) as on_loop:
        frame = await made_frame(_event(past), secrets)
    assert on_loop == [] and frame == event_frame(_event(past), secrets)


def test_an_event_of_many_values_counts_as_large_and_its_size_is_its_strings():
    assert event_chars(_event("abc", "de")) == 5 + len("followUp")  # (the default when_busy included)
    many = StoredEvent(1, 1, None, None, None, None, None, "x.y", None, Opaque("x.y", {"items": ["a"] * COUNT_NODES}))
    assert event_chars(many) > FRAME_OFF_LOOP_CHARS
    few = StoredEvent(1, 1, None, None, None, None, None, "x.y", None, Opaque("x.y", {"items": ["a"] * 10, "b": b"xyz"}))
    assert event_chars(few) == len("x.y") + len("items") + 10 + len("b") + 3


def test_an_event_of_exactly_count_nodes_values_is_walked_and_one_more_counts_as_large():
    # The walk counts every value: the Opaque, its kind, its data, the key and the list (5), then
    # the items. COUNT_NODES values in all are walked to their characters (a small event, framed
    # on the loop); one more and the event counts as large (its frame made in a worker thread).
    def of_items(n: int) -> StoredEvent:
        return StoredEvent(1, 1, None, None, None, None, None, "x.y", None, Opaque("x.y", {"items": ["a"] * n}))

    at, past = of_items(COUNT_NODES - 5), of_items(COUNT_NODES - 4)
    assert event_chars(at) == len("x.y") + len("items") + COUNT_NODES - 5
    assert _frame_on_loop(at)
    assert event_chars(past) == FRAME_OFF_LOOP_CHARS + 1
    assert not _frame_on_loop(past)


async def test_a_frame_cancelled_while_its_worker_makes_it_leaves_cleanly():
    se = _event(_text_of(FRAME_OFF_LOOP_CHARS + 1))
    made, after = [], []

    async def make() -> None:
        made.append(await made_frame(se, Secrets({})))
        await trio.sleep(0)
        after.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(make)
        await trio.testing.wait_all_tasks_blocked()  # (make waits for its worker thread)
        nursery.cancel_scope.cancel()
    # The worker is not abandoned: the cancel, which came while it worked, is taken at the next
    # checkpoint, the frame whole. No other error.
    assert made == [event_frame(se, Secrets({}))] and after == []
    assert (await made_frame(se, Secrets({}))) == event_frame(se, Secrets({}))


class _Input(msgspec.Struct, forbid_unknown_fields=True):
    text: str


def _decodes_on_this_thread(frame, event, arg):
    return "decode" if event == "c_call" and arg is msgspec.json.decode else None


def _body_of(size: int, text: str = "a:b\\u0041 ") -> bytes:
    head = b'{"text": ""}'
    body = (text * (size // len(text) + 1))[:size - len(head)]
    raw = b'{"text": "' + body.encode() + b'"}'
    assert len(raw) == size
    return raw


async def test_a_body_at_the_threshold_is_decoded_on_the_loop_and_past_it_in_a_worker():
    for size, on_loop_expected in ((BODY_ON_LOOP_BYTES, True), (BODY_ON_LOOP_BYTES + 1, False)):
        raw = _body_of(size)
        with on_this_thread(_decodes_on_this_thread) as on_loop:
            decoded = await decoded_body(raw, _Input)
        assert (on_loop != []) is on_loop_expected, size
        assert decoded == msgspec.json.decode(raw, type=_Input)


@pytest.mark.parametrize("raw", [
    # a repeated key named across the worker's scan slices, an escaped colon, a cut body, a wrong type
    _body_of(3 * SCAN_SLICE_BYTES)[:-1] + b', "text": "again"}',
    b'{"te\\u0078t": "a", ' + _body_of(2 * SCAN_SLICE_BYTES)[1:-1].replace(b'"text"', b'"text\\u003a"', 1) + b"}",
    _body_of(2 * SCAN_SLICE_BYTES)[:-2],
    b'{"text": 1, "pad": "' + b"x" * (2 * SCAN_SLICE_BYTES) + b'"}',
    b"[" * (BODY_ON_LOOP_BYTES + 1),
])
async def test_a_body_refused_in_the_worker_is_refused_as_on_the_loop(raw):
    on_loop = await decoded_body(raw, _Input, on_loop_bytes=len(raw))
    in_worker = await decoded_body(raw, _Input, on_loop_bytes=0)
    assert isinstance(on_loop, Refused) and (on_loop.what, on_loop.detail) == (in_worker.what, in_worker.detail)


def test_a_needle_across_a_scan_slice_is_found():
    from runtime.http_parts import _scan

    raw = b"x" * (SCAN_SLICE_BYTES - 2) + b"\\u003a" + b":" * 5
    assert _scan(raw, b"\\u003", lambda: None) == (raw.count(b":"), True)
    assert _scan(raw.replace(b"\\u003a", b"\\u004a"), b"\\u003", lambda: None) == (raw.count(b":"), False)


def test_a_large_frame_is_flushed_and_taken_alone_in_order():
    from runtime.bus import ALONE_BYTES, Frame, Group, Subscription

    g = Group(None, None)
    sub = Subscription(g, 0, 0, 0)
    small = [Frame(i, None, None, b"id: %d\n\n" % i) for i in range(1, 6)]
    large = Frame(6, None, None, b"x" * ALONE_BYTES)
    after = [Frame(None, None, None, b"delta\n\n"), Frame(7, None, None, b"id: 7\n\n")]
    frames = [*small[:2], large, *small[2:], *after]
    g.pending = list(frames)
    g.flush()
    taken = []
    while (data := sub.take()) is not None:
        taken.append(data)
    assert b"".join(taken) == b"".join(f.data for f in frames)
    assert any(t is large.data for t in taken)  # (never copied into one bytes object with others)
    assert len(taken) == 3 and sub.last == 7
    assert (sub.taken, sub.taken_bytes) == (g.frames_total, g.bytes_total)


def test_a_lone_high_surrogate_escape_is_found_across_a_scan_slice():
    from runtime.http_parts import _high_surrogate_escape, _stay

    for at in range(SCAN_SLICE_BYTES - 13, SCAN_SLICE_BYTES + 2):
        lone = b"x" * at + b"\\uD83D" + b"y" * (SCAN_SLICE_BYTES + 100)
        paired = b"x" * at + b"\\uD83D\\uDE00" + b"y" * (SCAN_SLICE_BYTES + 100)
        assert _high_surrogate_escape(lone, lambda: None) and _high_surrogate_escape(lone, _stay), at
        assert not _high_surrogate_escape(paired, lambda: None) and not _high_surrogate_escape(paired, _stay), at
    end = b"x" * (2 * SCAN_SLICE_BYTES - 3) + b"\\uD83D"  # (at the very end)
    assert _high_surrogate_escape(end, lambda: None)
