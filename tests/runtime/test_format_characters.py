"""The characters a name may not hold and a terminal line shows escaped (runtime/terminal.py):
every invisible format character of this Python's Unicode database (category Cf) is among them,
and nothing past the controls and line separators that is a visible character."""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata

import pytest

from runtime.terminal import UNSHOWABLE, shell_word, shown, unshowable_in

CONTROLS_AND_SEPARATORS = {*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029}


def test_every_format_character_is_unshowable_and_nothing_visible_is():
    matched = {cp for cp in range(sys.maxunicode + 1) if UNSHOWABLE.match(chr(cp))}
    cf = {cp for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) == "Cf"}
    assert cf - matched == set(), [f"U+{cp:04X}" for cp in sorted(cf - matched)]
    # beyond the controls and separators: format characters, or ones unassigned in this database
    # (added to Cf by a later Unicode), never a letter, mark, digit, symbol or space
    others = {f"U+{cp:04X}": unicodedata.category(chr(cp)) for cp in matched - CONTROLS_AND_SEPARATORS - cf}
    assert set(others.values()) <= {"Cn"}, others
    assert CONTROLS_AND_SEPARATORS <= matched


def test_the_first_one_is_named_and_escaped_in_a_line():
    assert unshowable_in("a\u200bb\u200d") == "U+200B"
    assert unshowable_in("\ufeff") == "U+FEFF" and unshowable_in("x\U000e0041") == "U+E0041"
    assert unshowable_in("caf\u00e9 \u65e5\u672c \U0001f600 \u05e9\u05dc\u05d5\u05dd a\u00a0b") is None
    # (past U+FFFF with eight digits: "\ue0041" would read as U+E004 and a 1)
    assert shown("a\u200bb\U000e0041\u2066") == "a\\u200bb\\U000e0041\\u2066"


def test_a_joiner_between_two_written_characters_is_part_of_them_and_out_of_place_is_refused():
    """U+200D and U+200C join an emoji sequence or the letters of a Persian or Indic word: between
    two characters that are neither ASCII nor controls nor format characters they are written
    text (a name holding them is taken, a line shows them as they are). At an end, beside an
    ASCII character or beside another format character they are refused, named."""
    for name in ["\U0001f469\u200d\U0001f469\u200d\U0001f467",  # a family: three people joined
                 "\U0001f3f3\ufe0f\u200d\U0001f308",  # the rainbow flag (after a variation selector)
                 "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian, a non-joiner inside
                 "\u0915\u094d\u200d\u0937"]:  # Devanagari, a joiner after the virama
        assert unshowable_in(name) is None and shown(name) == name, name
    for name, named in [("\u200d\U0001f469", "U+200D"), ("\U0001f469\u200d", "U+200D"), ("a\u200db", "U+200D"),
                        ("\u00e9\u200ca", "U+200C"), ("\U0001f469\u200d\u200d\U0001f469", "U+200D"),
                        ("\U0001f469\u200d\u200b\U0001f469", "U+200D"), ("\u200c", "U+200C")]:
        assert unshowable_in(name) == named, name


SHELL_WORDS = {
    "plain": ("a.jsonc", "a.jsonc"),
    "a space and a quote": ("it's a", "'it'\"'\"'s a'"),
    "controls": ("a\nb\x1b[31m\t\x7f", "$'a\\nb\\x1b[31m\\t\\x7f'"),
    "a quote and a backslash beside a control": ("'\\\r", "$'\\'\\\\\\r'"),
    "C1, a separator, a format character": ("\x85\u2028\u202e", "$'\\u0085\\u2028\\u202e'"),
    "past U+FFFF, a joiner out of place": ("\U000e0041\u200d", "$'\\U000e0041\\u200d'"),
    "a byte that is not UTF-8": (os.fsdecode(b"d\xff"), "$'d\\xff'"),
}


@pytest.mark.parametrize("word, written", SHELL_WORDS.values(), ids=SHELL_WORDS.keys())
def test_a_shell_word_is_one_line_that_bash_reads_back_as_it_was(word: str, written: str) -> None:
    assert shell_word(word) == written
    assert UNSHOWABLE.search(written) is None
    echoed = subprocess.run(["bash", "-c", f"printf %s {written}"], capture_output=True, timeout=10,
                            env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert echoed.stdout == os.fsencode(word), echoed
