"""projections.tokens: the index, the queries and the snippets see the same tokens.

The reference is SQLite itself: text put through ``index_text`` into an FTS5 table with the
history index's tokenizer, read back token by token with ``fts5vocab``."""

from __future__ import annotations

import random

import apsw
import pytest

from projections.tokens import WORD, fold, index_text


@pytest.fixture
def fts() -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(text, content='', tokenize='unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    return conn


def index_tokens(conn: apsw.Connection, rowid: int, text: str) -> list[str]:
    conn.execute("INSERT INTO f(rowid, text) VALUES (?, ?)", (rowid, index_text(text)))
    return [r[0] for r in conn.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", (rowid,))]


def snippet_tokens(text: str) -> list[str]:
    return [w for w in (fold(m) for m in WORD.findall(text)) if w]


def test_unspaced_scripts_become_one_token_per_character(fts) -> None:
    assert index_tokens(fts, 1, "我们使用数据库") == ["我", "们", "使", "用", "数", "据", "库"]
    assert index_tokens(fts, 2, "東京タワーに行く") == ["東", "京", "タ", "ワ", "ー", "に", "行", "く"]
    assert index_tokens(fts, 3, "데이터베이스를 사용") == ["데", "이", "터", "베", "이", "스", "를", "사", "용"]
    # letters of spaced scripts stay words, also right beside CJK
    assert index_tokens(fts, 4, "SQLite数据库v3") == ["sqlite", "数", "据", "库", "v3"]


def test_thai_lao_khmer_and_burmese_become_one_token_per_letter(fts) -> None:
    # A run of them was one token ("ภาษาไทยเข"), cut wherever a vowel sign or tone mark stood.
    # Their letters stand apart now, as Chinese characters do; the marks are no tokens (unicode61
    # reads them as separators), and the snippets keep them with the letter before them.
    assert index_tokens(fts, 1, "ภาษาไทยพิมพ์") == ["ภ", "า", "ษ", "า", "ไ", "ท", "ย", "พ", "ม", "พ"]
    assert index_tokens(fts, 2, "ພາສາລາວ") == ["ພ", "າ", "ສ", "າ", "ລ", "າ", "ວ"]
    assert index_tokens(fts, 3, "ភាសាខ្មែរ") == ["ភ", "ស", "ខ", "ម", "រ"]
    assert index_tokens(fts, 4, "မြန်မာစာ") == ["မ", "န", "မ", "စ"]
    assert index_tokens(fts, 5, "SQLiteฐานข้อมูลv3") == ["sqlite", "ฐ", "า", "น", "ข", "อ", "ม", "ล", "v3"]
    assert index_tokens(fts, 6, "ทำ ນ້ຳ") == ["ท", "า", "ນ", "າ"]  # (NFKC: SARA AM is NIKHAHIT and SARA AA)
    assert [m.group() for m in WORD.finditer("พิมพ์ မြန်")] == ["พิ", "ม", "พ์", "မြ", "န်"]
    assert snippet_tokens("พิมพ์ ทำ") == ["พ", "ม", "พ", "ท", "า"]


def test_compatibility_forms_index_as_their_plain_letters(fts) -> None:
    assert index_tokens(fts, 1, "ＳＱＬｉｔｅ ｆｉｌｅ１２") == ["sqlite", "file12"]
    assert index_tokens(fts, 2, "ｶﾞﾀｶﾅ") == ["ガ", "タ", "カ", "ナ"]  # half-width kana, voicing composed
    assert index_tokens(fts, 3, "ﬁle ①") == ["file", "1"]
    assert index_text("plain ascii stays as it is") == "plain ascii stays as it is"


def test_voiced_kana_are_not_their_plain_kana(fts) -> None:
    # the index keeps が apart from か; so do the snippets
    assert index_tokens(fts, 1, "がか") == ["が", "か"]
    assert snippet_tokens("がか") == ["が", "か"]
    assert snippet_tokens("ｶﾞ") == ["ガ"]


# Scripts and forms whose tokens the snippets reproduce exactly (Latin with diacritics, Greek and
# Cyrillic letters, CJK, kana full- and half-width with voicing marks, Hangul written as
# syllables or as Jamo, Thai, Lao, Khmer and Burmese with their marks and digits, full-width
# letters and digits, ligatures, circled digits, ß, ς).
ALPHABET = (
    "abcXYZ09éÉèüÅßẞΣσςДжЖİıǅĳﬁﬃ①Ⅻ"
    "数据库使用東京々〇"
    "タワーガがぱｶﾞﾀﾊﾟｰ"
    "데이터를\u1100\u1161\u11a8"
    "ＳＱＬｉｔｅ１２"
    "ภาษาไทยพิมพ์ใกล้ทำ๒"
    "ລາວຂຽນນ້ຳ໒"
    "ភាសាខ្មែរ២"
    "မြန်မာဘာသာ၂"
    "\u0301\u3099\uff9e"
    "・、。 ,.-_\u3000"
)


@pytest.mark.parametrize("seed", range(3))
def test_snippet_tokens_are_the_index_tokens(fts, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(2000):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 16)))
        assert index_tokens(fts, i, text) == snippet_tokens(text), text

