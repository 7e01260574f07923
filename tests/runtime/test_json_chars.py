"""``runtime.json_chars``: the estimate that chooses between one call on the loop and the pieces.

``strings_chars`` counts a view's texts; between an ``ESCAPE_MAX``-th of the threshold and the
threshold it counts each character that escapes as the most JSON makes of one, so a text whose
escapes take its JSON past the threshold is counted past it, and plain text as its length."""

from __future__ import annotations

import msgspec
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.json_chars import ESCAPE_MAX, PIECES_FROM_CHARS, SCAN_CHARS, page_chars, strings_chars

T = PIECES_FROM_CHARS


def _json_chars(texts: list[str]) -> int:
    """The characters of JSON ``texts`` make, quotes aside: msgspec's own encoding."""
    return sum(len(msgspec.json.encode(t).decode()) - 2 for t in texts)


async def test_plain_text_counts_its_characters_on_either_side_of_the_threshold() -> None:
    for n in (1_000, T // ESCAPE_MAX, T // ESCAPE_MAX + 1, 3_000_000, T, T + 1, 2 * T):
        texts = [("abcdefghij" * 300)[:3000]] * (n // 3000) + ["x" * (n % 3000)]
        assert await strings_chars(texts) == n == _json_chars(texts)
    # (non-ASCII that JSON does not escape counts once, a character each)
    texts = ["é\u2028😀\x7f" * 400_000]
    assert await strings_chars(texts) == 1_600_000 == _json_chars(texts)


async def test_control_characters_just_under_and_just_over_the_threshold() -> None:
    # Six characters of JSON each (\u0001): counted exactly, so the side is JSON's own.
    filler = "a" * 1_000_000
    under = [filler, "\x01" * ((T - 1_000_000) // ESCAPE_MAX)]
    over = [filler, "\x01" * ((T - 1_000_000) // ESCAPE_MAX + 1)]
    assert _json_chars(under) <= T < _json_chars(over)
    assert await strings_chars(under) == _json_chars(under) <= T
    assert await strings_chars(over) > T
    # (under an ESCAPE_MAX-th of the threshold nothing is read: no escapes can take it past)
    small = ["\x01" * (T // ESCAPE_MAX)]
    assert await strings_chars(small) == T // ESCAPE_MAX and _json_chars(small) <= T


async def test_quotes_and_newlines_whose_json_is_past_the_threshold_count_past_it() -> None:
    # 2.2 Mi characters, 4.4 Mi of JSON: a sum of lengths (the code before) put it under.
    texts = [f'{k}"\n\\\t' + '"\n' * 550_000 for k in range(2)]
    assert sum(map(len, texts)) <= T < _json_chars(texts)
    assert await strings_chars(texts) > T


async def test_escapes_among_other_characters_are_counted_as_in_ascii() -> None:
    # Text holding characters past ASCII is counted in its ASCII alone: each escape still counts,
    # whatever stands around it (CJK, an emoji, a lone surrogate), and the side is JSON's own.
    cjk = "中文" * 500_000
    under = [cjk, "\x01中" * ((T - 1_000_000) // (ESCAPE_MAX + 1))]
    over = [cjk, "\x01中" * ((T - 1_000_000) // (ESCAPE_MAX + 1) + 1)]
    assert _json_chars(under) <= T < _json_chars(over)
    assert await strings_chars(under) == _json_chars(under)
    assert await strings_chars(over) > T
    texts = ['😀"\ud800\n' * 200_000]  # (four characters, a quote and a newline of them escaped)
    assert await strings_chars(texts) == 200_000 * (2 + 2 * ESCAPE_MAX)
    # (no escapes: its characters, once each)
    assert await strings_chars(["中" * 1_000_000]) == 1_000_000


@settings(max_examples=25, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20), st.integers(0, 6))
def test_the_estimate_is_never_under_json_on_the_near_side_of_the_threshold(sample: str, filler_sixths: int) -> None:
    # Whatever the characters, an estimate at or under the threshold is at least the JSON's
    # characters: an answer it sends to one call is no longer than it says.
    filler = "a" * (filler_sixths * T // ESCAPE_MAX // 2)
    texts = [filler, sample * (T // ESCAPE_MAX // len(sample) + 1)]
    chars = trio.run(strings_chars, texts)
    assert chars > T or chars >= _json_chars(texts)


async def test_the_loop_has_its_turns_while_texts_are_counted() -> None:
    turns = 0
    done = False

    async def other_task() -> None:
        nonlocal turns
        while not done:
            await trio.lowlevel.checkpoint()
            turns += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        await trio.lowlevel.checkpoint()
        turns = 0
        texts = ["a" * (4 * SCAN_CHARS)] * 3  # (in the band: counted, 12 slices)
        assert await strings_chars(texts) == 12 * SCAN_CHARS
        done = True
    assert turns >= 10


def test_a_page_counts_each_declared_byte_as_the_most_json_makes_of_one() -> None:
    assert page_chars(0) == 0
    assert page_chars(1000) == ESCAPE_MAX * 1000 == _json_chars(["\x01" * 1000])
    assert page_chars(T // ESCAPE_MAX) <= T < page_chars(T // ESCAPE_MAX + 1)
