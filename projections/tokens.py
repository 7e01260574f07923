"""How history text becomes search tokens: one rule for the index, the query and the snippets.

The FTS5 index uses SQLite's ``unicode61 remove_diacritics 2`` tokenizer: a token is a run of
letters and digits, compared case-folded and without diacritics. Two kinds of text need help
before it sees them:

* **Scripts written without spaces** (Chinese, Japanese kana, Korean Hangul; Thai, Lao, Khmer
  and Burmese): ``unicode61`` makes a whole run of them one token, so ``数据库`` inside
  ``使用数据库存储`` could never be found. :func:`index_text` puts every character of these
  scripts apart, so each is a token of its own, and a word of them is searched as the phrase of
  its characters (consecutive positions): any run of characters is found wherever it occurs,
  one character long or more. (The vowel signs and tone marks of Thai, Lao, Khmer and Burmese
  are no tokens: ``unicode61`` reads them as separators, so they are left out of the phrase.)
* **Compatibility forms** (full-width ``ＳＱＬｉｔｅ``, half-width ``ｶﾀｶﾅ``, ligatures such as
  ``ﬁ``): ``unicode61`` keeps them as they are, so ``sqlite`` did not find ``ＳＱＬｉｔｅ``.
  :func:`index_text` normalises them (NFKC) first.

Items and queries both go through :func:`index_text`, so they always agree. The snippets
(:mod:`projections.snippets`) find tokens with :data:`WORD` and compare them :func:`fold`-ed,
which approximates the same rules on the original text: a character of these scripts is a token
by itself (with the voicing marks that follow it), other tokens are runs of letters and digits.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# The letters of scripts written without spaces between words, each indexed as a token of its
# own: the CJK letters among the symbols (々〆〇 and the like), Hiragana, Katakana (not the
# punctuation among them: ゠ ・), Bopomofo, Hangul (Jamo, compatibility Jamo, syllables), CJK
# ideographs (all blocks), half-width Katakana and Hangul, and the Kana supplements. Half-width
# forms stand here only for the snippets, which see the original text; the index sees them
# after NFKC. Then the letters of Thai, Lao, Myanmar (Burmese; Extended-A and -B) and Khmer,
# as ``unicode61`` reads them (a letter is a token character there). Their vowel signs, tone
# marks and viramas (:data:`UNSPACED_MARKS`) are no letters: ``unicode61`` takes them for
# separators, so the index holds the letters alone, and so do the snippets' tokens.
UNSPACED = (
    "\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b\u303c"
    "\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3105-\u312f\u3131-\u318e"
    "\u31a0-\u31bf\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9d\uffa0-\uffdc"
    "\U0001b000-\U0001b2ff\U00020000-\U0003ffff"
    "\u0e01-\u0e30\u0e32-\u0e33\u0e40-\u0e46"  # Thai
    "\u0e81-\u0e82\u0e84\u0e86-\u0e8a\u0e8c-\u0ea3\u0ea5\u0ea7-\u0eb0\u0eb2-\u0eb3\u0ebd\u0ec0-\u0ec4"
    "\u0ec6\u0edc-\u0edf"  # Lao
    "\u1000-\u102a\u103f\u1050-\u1055\u105a-\u105d\u1061\u1065-\u1066\u106e-\u1070\u1075-\u1081\u108e"
    "\ua9e0-\ua9e4\ua9e6-\ua9ef\ua9fa-\ua9fe\uaa60-\uaa76\uaa7a\uaa7e-\uaa7f"  # Myanmar
    "\u1780-\u17b3\u17d7\u17dc"  # Khmer
)
# The combining marks of Thai, Lao, Myanmar and Khmer (vowel signs, tone marks, viramas), written
# between and after the letters of a word. The index drops them; a snippet's token keeps those
# after its letter (a word is never shown cut before its last mark), and fold() drops them.
UNSPACED_MARKS = (
    "\u0e31\u0e34-\u0e3a\u0e47-\u0e4e"
    "\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ecd"
    "\u102b-\u103e\u1056-\u1059\u105e-\u1060\u1062-\u1064\u1067-\u106d\u1071-\u1074\u1082-\u108d\u108f"
    "\u109a-\u109d\ua9e5\uaa7b-\uaa7d"
    "\u17b4-\u17d3\u17dd"
)
# Kana voicing marks (combining and half-width): they belong to the kana before them (NFKC
# composes the two), and the index keeps them (が is not か); elsewhere they separate tokens.
_VOICING = "\u3099\u309a\uff9e\uff9f"
# Combining diacritics written after a letter: NFKC composes most of them into it.
_DIACRITICS = "\u0300-\u036f"

_UNSPACED_RUN = re.compile(f"[{UNSPACED}]+")
_UNSPACED_FIRST = re.compile(f"[{UNSPACED}]")
_LETTER = f"[^\\W_{UNSPACED}{_VOICING}]"  # a letter or digit of a spaced script

# Hangul syllables without a final consonant: NFKC composes one with a final Jamo after it.
_OPEN_SYLLABLES = "".join(chr(0xAC00 + 28 * i) for i in range(19 * 21))

# A token of the original text as the snippets see it: a Hangul syllable written as conjoining
# Jamo, or as an open syllable and a final Jamo (NFKC composes both), one other character of an
# unspaced script with the marks after it, or a run of other letters and digits with their
# diacritics.
WORD = re.compile(
    f"(?:[\u1100-\u1112][\u1161-\u1175]|[{_OPEN_SYLLABLES}])[\u11a8-\u11c2]?"
    f"|[{UNSPACED}][{_DIACRITICS}{_VOICING}{UNSPACED_MARKS}]*"
    f"|{_LETTER}(?:{_LETTER}|[{_DIACRITICS}])*"
)


def is_character_token(text: str, start: int) -> bool:
    """Whether the :data:`WORD` token at ``start`` of ``text`` is one character of an unspaced
    script (a Chinese, Japanese, Korean or Thai character, say): about a third of a word, for
    measuring."""
    return _UNSPACED_FIRST.match(text, start) is not None


def index_text(text: str) -> str:
    """``text`` as the FTS5 index (and a query against it) must see it: compatibility forms
    normalised, every character of an unspaced script standing apart. ASCII text is returned
    as it is."""
    if text.isascii():
        return text
    # One substitution per run (joined in C): per character, 380k characters took 0.3 s, not 0.09.
    return _UNSPACED_RUN.sub(_spaced, unicodedata.normalize("NFKC", text))


def _spaced(run: re.Match[str]) -> str:
    return " " + " ".join(run.group()) + " "


def fold(token: str) -> str:
    """A token as the index compares it: case-folded, compatibility forms and diacritics
    removed (the marks of Thai, Lao, Khmer and Burmese too), composed (kana keep their voicing:
    が is not か)."""
    if token.isascii():
        return token.lower()
    return _fold(token)


@functools.cache
def _tables() -> tuple[dict[int, str], dict[int, None], dict[int, None]]:
    """str.translate tables (built once, ~30 ms): simple case folding, as ``unicode61`` folds
    (one character to one: ``ß`` stays, ``ς`` is ``σ``); dropping every combining character
    but the kana voicing marks; dropping those, and the marks of :data:`UNSPACED_MARKS`."""
    case: dict[int, str] = {}
    for cp in range(0x30000):
        ch = chr(cp)
        folded = ch.casefold()
        if folded != ch:
            simple = folded if len(folded) == 1 else ch.lower()
            if len(simple) == 1 and simple != ch:
                case[cp] = simple
    voicing: dict[int, None] = {0x3099: None, 0x309A: None}
    marks = {cp: None for cp in range(0x30000) if unicodedata.combining(chr(cp)) and cp not in voicing}
    # (dropped after composing, as the index sees them: most combine at class 0, so a mark of
    # them between a kana and its voicing mark keeps the two from composing)
    unspaced_mark = re.compile(f"[{UNSPACED_MARKS}]")
    voicing.update((cp, None) for cp in range(0x0E00, 0xAA80) if unspaced_mark.match(chr(cp)))
    return case, marks, voicing


def _fold(text: str) -> str:
    case, marks, voicing = _tables()
    decomposed = unicodedata.normalize("NFKD", text).translate(case).translate(marks)
    # Voicing marks compose with the kana before them; one that did not (after another
    # character) separates tokens in the index, and is nothing here (nor are the marks of Thai,
    # Lao, Khmer and Burmese).
    return unicodedata.normalize("NFC", decomposed).translate(voicing)


def fold_text(text: str) -> str:
    """:func:`fold` of a whole text at C speed (its tokens fold to pieces of it)."""
    return _fold(text)
