"""Search-result snippets (projections.snippets): linear in the text, the shape FTS5's snippet()
gave — the first hit in a window of tokens, matches in [brackets], … where the text is cut."""

from __future__ import annotations

from projections.history import snippet_terms
from projections.snippets import LEAD_CHARS, MAX_CHARS, SCAN_CHARS, SNIPPET_TOKENS, snippet, term


def snip(text: str, query: str, **kw) -> str:
    return snippet(text, snippet_terms(query), **kw)


def test_the_first_hit_in_a_window_with_matches_bracketed() -> None:
    text = " ".join(f"w{i}" for i in range(100)) + " zanzibar w100 Zanzibar w101"
    out = snip(text, "zanzibar")
    assert out.startswith("…w96 w97 w98 w99 [zanzibar] w100 [Zanzibar] w101")
    assert not out.endswith("…")  # the window reached the end of the text
    assert snip("zanzibar first", "zanzibar") == "[zanzibar] first"


def test_the_window_holds_at_most_its_tokens_and_says_when_it_cuts() -> None:
    text = "needle " + " ".join(f"t{i}" for i in range(100))
    out = snip(text, "needle")
    assert out.endswith("…") and len(out.split()) == SNIPPET_TOKENS
    assert snip("needle and more", "needle", more=True) == "[needle] and more…"  # a longer item's prefix


def test_prefixes_phrases_case_and_diacritics_match_as_the_index_does() -> None:
    assert snip("Run configure then CONFIGURATION", "config*") == "Run [configure] then [CONFIGURATION]"
    assert snip("crème brûlée au Café", "cafe") == "crème brûlée au [Café]"
    # a phrase is found where its words follow each other, not where one word stands alone
    assert snip("hello there, then hello world", '"hello world"').startswith("hello there, then [hello] [world]")
    assert snip("snake_case_name here", "case") == "snake_[case]_name here"


def test_no_hit_in_the_scanned_prefix_shows_the_beginning() -> None:
    text = "lorem ipsum " * (SCAN_CHARS // 12 + 10) + " needle"
    out = snip(text, "needle")
    assert out.startswith("lorem ipsum lorem") and "[" not in out and out.endswith("…")
    assert snip("", "needle") == ""


def test_a_long_token_before_the_hit_is_not_shown_whole() -> None:
    out = snip("x" * 100_000 + " the needle is here", "needle")
    assert out == "…the [needle] is here"
    assert len(snip("needle " + "y" * 100_000, "needle")) <= MAX_CHARS + 2
    assert LEAD_CHARS < MAX_CHARS


def test_a_whole_text_folds_to_what_its_tokens_fold_to() -> None:
    # The non-ASCII shortcut rests on this: a term absent from fold_text(text) occurs in no token.
    import random

    from projections.tokens import WORD as _WORD
    from projections.tokens import fold, fold_text

    rng = random.Random(7)
    alphabet = "abcdeéèêßﬁÅåΣσςДжЖ東京タワーガぱｶﾞﾟ데를\u1100\u1161\u11a8İıǅ𝔘Ⅻ①ǈ　ｈｅｌｌｏ \u0301\u0308\u3099"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        folded = fold_text(text)
        for token in _WORD.findall(text):
            assert fold(token) in folded, (text, token)


def test_a_non_ascii_text_without_the_term_shows_its_beginning() -> None:
    text = ("Привет мир " * 30000)[:330000] + " ключевое слово"  # the term lies past the scanned part
    out = snippet(text, [term("ключевое", False)])
    assert out.startswith("Привет мир Привет") and out.endswith("…") and "[" not in out
    out = snippet("Привет мир, ключевое слово здесь", [term("КЛЮЧЕВОЕ", False)])
    assert "[ключевое]" in out


def test_a_non_ascii_term_across_a_fold_window_boundary_is_found() -> None:
    from projections.snippets import FOLD_WINDOW

    for at in (FOLD_WINDOW - 3, FOLD_WINDOW, 3 * FOLD_WINDOW - 1):
        text = ("ж" * (at - 1)) + " Ключевое слово " + "ж" * 5000
        assert "[Ключевое]" in snippet(text, [term("ключевое", False)]), at


def test_punctuation_after_the_last_token_is_shown_not_cut() -> None:
    from projections.snippets import TAIL_CHARS

    assert snip("the zanzibar test.", "zanzibar") == "the [zanzibar] test."
    assert snip("我们使用数据库。", "数据库") == "我们使用[数据库]。"  # touching matches: one bracket
    tail = "." * TAIL_CHARS
    assert snip("zanzibar" + tail, "zanzibar") == "[zanzibar]" + tail  # exactly at the limit
    assert snip("zanzibar" + tail + ".", "zanzibar") == "[zanzibar]…"  # one past it
    assert snip("zanzibar. more", "zanzibar") == "[zanzibar]. more"


def test_a_cjk_character_counts_a_third_of_a_word() -> None:
    # Each character is a token of its own: with the token counts of words, a Chinese snippet
    # was four characters of lead and 24 in all.
    from projections.snippets import CHARACTERS_PER_WORD

    text = "一二三四五六七八九十" * 3 + "数据库" + "甲乙丙丁戊己庚辛壬癸" * 10
    out = snip(text, "数据库")
    lead = out[1:out.index("[")]
    assert out.startswith("…") and len(lead) == 4 * CHARACTERS_PER_WORD
    assert out.endswith("…") and len(out.replace("…", "").replace("[", "").replace("]", "")) == 24 * CHARACTERS_PER_WORD
    latin = " ".join(f"w{i}" for i in range(10)) + " needle " + " ".join(f"x{i}" for i in range(40))
    assert snip(latin, "needle").startswith("…w6 w7 w8 w9 [needle]")  # words: as before
    assert len(snip(latin, "needle").split()) == 24


def test_a_highlight_takes_in_the_marks_after_its_letters() -> None:
    """The index splits Devanagari, Thai or Arabic words at their vowel signs and other marks;
    the highlights did too, leaving the marks outside on their own: `[ह]ि[न]्[द]ी`."""
    assert snip("भाषा हिन्दी में लिखा गया पाठ", "हिन्दी") == "भाषा [हिन्दी] में लिखा गया पाठ"
    assert snip("ภาษาไทยเป็นภาษาที่สวยงาม ok", "ภาษาไทยเป็นภาษาที่สวยงาม") == "[ภาษาไทยเป็นภาษาที่สวยงาม] ok"
    assert snip("اللغة العَرَبِيَّة جميلة", "العَرَبِيَّة") == "اللغة [العَرَبِيَّة] جميلة"
    assert snip("café au lait", "cafe") == "[café] au lait"  # (a composed letter, as before)


def test_a_snippet_cut_at_its_limit_closes_the_highlight_it_cuts() -> None:
    for text, query in [("longtok " + "a" * 700 + " tailword", "aaaa*"),
                        ("x " + "数据库" * 300, "数据库"),
                        ("intro " + "हिन्दी " * 120, "हिन्दी")]:
        out = snip(text, query)
        assert len(out) <= MAX_CHARS + 1 and out.endswith("…"), (query, len(out))
        assert out.count("[") == out.count("]") >= 1, out[-20:]
        assert "[]" not in out, out[-20:]
    for n in range(580, 600):  # the cut between a highlighted letter and its vowel sign
        out = snip("हिन्दी " + "y" * n + " हिन्दी और", "हिन्दी")
        assert "[]" not in out and out.count("[") == out.count("]"), (n, out[-12:])
    # a phrase of many words, each bracketed, cut in the middle: still balanced
    words = " ".join(f"word{i}" for i in range(200))
    out = snippet(words, [term(words, False)])
    assert out.count("[") == out.count("]")
    # a highlight is not cut between a letter and its marks
    out = snip("intro " + "कि" * 400, "कि*")
    assert out.endswith("]…") and out[-3] == "ि", out[-6:]
