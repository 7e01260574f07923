"""``runtime.views.view_texts``: the strings a session view's size is in, for the estimate that
chooses between one call on the loop and the pieces (``runtime.json_chars.strings_chars``).

An item of several text parts carries its text twice (``text`` joins the parts, ``parts`` keeps
them apart): both count, or the estimate is under the view's JSON."""

from __future__ import annotations

import msgspec

from events import types as t
from projections.session_state import Item, text_of
from runtime.json_chars import ESCAPE_MAX, PIECES_FROM_CHARS, strings_chars
from runtime.views import item_view, view_texts


def _item(seq: int, parts: list[t.ContentPart]) -> Item:
    return Item(id=f"i{seq}", role="user", seq=seq, text=text_of(parts), parts=tuple(parts))


async def test_an_item_of_several_text_parts_counts_its_text_and_its_parts() -> None:
    # Two parts of 200,000 control characters: 0.4 Mi characters in ``text``, as many again in
    # ``parts``; 4.8 Mi characters of JSON. Counted by ``text`` alone: 2.4 Mi, under the threshold.
    parts: list[t.ContentPart] = [t.TextPart("\x01" * 200_000), t.TextPart("\x02" * 200_000),
                                  t.ImagePart(artifact_id="a1", mime="image/png")]
    view = {"items": [item_view(_item(1, parts), {}, None, frozenset())]}
    assert [p["type"] for p in view["items"][0]["parts"]] == ["text", "text", "image"]
    texts = view_texts(view)
    assert sorted(map(len, texts)) == [200_000, 200_000, 400_001]
    assert ESCAPE_MAX * 400_001 <= PIECES_FROM_CHARS < len(msgspec.json.encode(view))
    assert await strings_chars(texts) > PIECES_FROM_CHARS


def test_an_item_of_one_text_part_counts_its_text_once() -> None:
    view = {"items": [item_view(_item(1, [t.TextPart("hello")]), {}, None, frozenset()),
                      item_view(_item(2, [t.TextPart("see"), t.ImagePart(artifact_id="a1", mime="image/png")]),
                                {}, None, frozenset())]}
    assert "parts" not in view["items"][0] and "parts" in view["items"][1]
    assert view_texts(view) == ["hello", "see", "see"]
