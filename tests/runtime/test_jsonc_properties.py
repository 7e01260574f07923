"""The JSONC reader (``runtime.jsonc``) by property testing.

Any JSON value, rendered with comments wherever JSONC allows them (between tokens, with
``*/``-like and ``//`` text in strings and comments), trailing commas, every kind of whitespace
JSON allows and an optional UTF-8 BOM, reads back as that value. Hostile text (cut short, with
bytes dropped or inserted, NULs, lone surrogate escapes, numbers past what can be read, nesting
past :data:`~runtime.jsonc.MAX_DEPTH`, duplicate keys, a megabyte-long line) gives one
:class:`~runtime.jsonc.JsoncError` naming a line and column inside the text, never another
exception.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import jsonc
from runtime.config import ConfigError, parse_config

FAST = settings(deadline=None, derandomize=True, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
RENDERED = settings(FAST, max_examples=150)  # (drawing a rendered value is most of the time)
WHERE = re.compile(r"line (\d+), column (\d+)")

# Text that looks like comment syntax, inside strings and inside comments.
TRICKY = st.sampled_from(["*/", "/*", "//", "/", "*", "\\", '"', "/**/", "// x", "*/ ]", "\n"])
TEXT = st.lists(st.one_of(TRICKY, st.text(st.characters(exclude_categories=["Cs"]), max_size=6)),
                max_size=4).map("".join)

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**200, 2**200),
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(TEXT, inner, max_size=4)), max_leaves=20)

BLANK = st.text(st.sampled_from(" \t\n\r"), max_size=3)


@st.composite
def gap(draw: st.DrawFn) -> str:
    """What may stand between two tokens: whitespace, and comments whose text may look like more."""
    parts = [draw(BLANK)]
    for _ in range(draw(st.integers(0, 2))):
        body = draw(TEXT)
        if draw(st.booleans()):
            parts.append("/*" + body.replace("*/", "* /") + "*/")
        else:
            parts.append("//" + body.replace("\n", " ").replace("\r", " ") + draw(st.sampled_from(["\n", "\r", "\r\n"])))
        parts.append(draw(BLANK))
    return "".join(parts)


def render(draw: st.DrawFn, value: Any) -> str:
    g = lambda: draw(gap())  # noqa: E731
    if isinstance(value, list):
        items = [g() + render(draw, v) + g() for v in value]
        trailing = "," + g() if value and draw(st.booleans()) else ""
        return "[" + g() + ",".join(items) + trailing + "]"
    if isinstance(value, dict):
        items = [g() + json.dumps(k, ensure_ascii=draw(st.booleans())) + g() + ":" + g() + render(draw, v) + g()
                 for k, v in value.items()]
        trailing = "," + g() if value and draw(st.booleans()) else ""
        return "{" + g() + ",".join(items) + trailing + "}"
    return json.dumps(value, ensure_ascii=draw(st.booleans()))


@st.composite
def rendered(draw: st.DrawFn) -> tuple[Any, str]:
    value = draw(VALUES)
    text = ("\ufeff" if draw(st.booleans()) else "") + draw(gap()) + render(draw, value) + draw(gap())
    return value, text


def assert_placed(text: str, exc: jsonc.JsoncError) -> None:
    """The message names a line and column inside ``text`` (BOM left out), or says it is empty."""
    message = str(exc)
    if message.startswith("no JSON value"):
        return
    m = WHERE.search(message)
    assert m, message
    lines = re.split(r"\r\n?|\n", text.removeprefix("\ufeff"))
    line, column = int(m.group(1)), int(m.group(2))
    assert 1 <= line <= len(lines), (message, len(lines))
    assert 1 <= column <= len(lines[line - 1]) + 1, (message, lines[line - 1][:80])


@RENDERED
@given(rendered())
def test_any_value_rendered_as_jsonc_reads_back_as_that_value(case: tuple[Any, str]) -> None:
    value, text = case
    assert jsonc.loads(text) == value
    assert jsonc.loads(text.encode()) == value


@RENDERED
@given(rendered(), st.data())
def test_text_cut_or_changed_anywhere_reads_or_fails_with_a_place(case: tuple[Any, str], data: st.DataObject) -> None:
    _, text = case
    at = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.sampled_from(["", "\0", "/*", "//", '"', "\\", "\\ud800", '\\udc00"', ",", "}", "[", "1e400",
                                      "-", "\x0b", "\u00a0", "\ufeff", "\\u12"]))
    cut = data.draw(st.integers(0, 3))
    for hostile in (text[:at], text[:at] + junk + text[at + cut:]):
        try:
            jsonc.loads(hostile)
        except jsonc.JsoncError as exc:
            assert_placed(hostile, exc)


@FAST
@given(st.text(st.sampled_from('{}[]",:/*\\ \n\r\t0123456789.eE+-tfnulr\0\ufeffa'), max_size=60))
def test_arbitrary_text_reads_or_fails_with_a_place(text: str) -> None:
    try:
        jsonc.loads(text)
    except jsonc.JsoncError as exc:
        assert_placed(text, exc)


@FAST
@given(st.binary(max_size=40), st.binary(max_size=4))
def test_bytes_that_are_not_utf8_fail_with_a_place(prefix: bytes, bad: bytes) -> None:
    raw = b'{"a": "' + prefix + bad + b'"}'
    try:
        jsonc.loads(raw)
    except jsonc.JsoncError as exc:
        assert_placed(raw.decode("utf-8", errors="replace"), exc)


@pytest.mark.parametrize(("text", "words"), [
    ('{\n  "a": "x",\n  "a": "y"\n}', "duplicate key 'a' at line 3, column 3"),
    ('{"b": {"c": 1, "\\u0063": 2}}', "duplicate key 'c' at line 1, column 16"),
    ('{"s": "\\ud800"}', "\\ud800 is half of a surrogate pair, not a character, at line 1, column 8"),
    ('["\\udc00\\ud800"]', "\\udc00 is half of a surrogate pair"),
    ('{"a": 1,\n "b": 1e400}', "the number 1e400 is out of range at line 2, column 7"),
    ('[' + "9" * 5000 + ']', "is out of range at line 1, column 2"),
    ('{"a": [1,', "the text ends before the value is complete (line 1, column 10)"),
    (b'{\n "a": "\xff"}', "not UTF-8 text at line 2, column 8 (byte 9)"),
])
def test_hostile_text_is_one_error_naming_its_place(text: str | bytes, words: str) -> None:
    # Duplicate keys were read silently (the last won); a lone surrogate escape and a text cut
    # after a comma were "Input data was truncated", an out-of-range number "at `$[...]`", and
    # bytes that are not UTF-8 a byte offset: none said where.
    with pytest.raises(jsonc.JsoncError) as info:
        jsonc.loads(text)
    assert words in str(info.value), str(info.value)


def test_a_line_comment_ends_at_a_carriage_return_alone() -> None:
    # The comment ran on to the next LF: on lines ended by CR alone (JSON whitespace, as LF and
    # CRLF are) `[1, // one\r2, // two\n3]` read as [1, 3], the value 2 taken for comment.
    assert jsonc.loads("[1, // one\r2, // two\n3]") == [1, 2, 3]
    assert jsonc.loads('{\r// c\r"a": 1,\r"b": 2\r}') == {"a": 1, "b": 2}
    with pytest.raises(jsonc.JsoncError, match="line 3, column 6"):
        jsonc.loads('{\r"a": 1,\r"b": x}')


def test_the_same_key_in_different_objects_is_no_duplicate() -> None:
    assert jsonc.loads('{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}], "c": ["a", "a"]}')["b"][1] == {"a": 2}


def test_nesting_is_read_to_its_limit_and_refused_one_past_with_a_place() -> None:
    # msgspec's own limit was what was left of the interpreter's recursion limit: it moved with
    # the caller's stack (997 levels from a shallow one) and its error named no place.
    limit = jsonc.MAX_DEPTH
    assert jsonc.loads("[" * limit + "]" * limit) is not None
    assert jsonc.loads('{"a":' * limit + "1" + "}" * limit) is not None
    with pytest.raises(jsonc.JsoncError, match=f"nested deeper than {limit} arrays and objects at line 1, column {limit + 1}"):
        jsonc.loads("[" * (limit + 1) + "]" * (limit + 1))
    with pytest.raises(ConfigError, match=f"server.jsonc: nested deeper than {limit}"):
        parse_config('{"server": ' + "[" * 5000 + "]" * 5000 + "}", "server.jsonc")


def test_a_megabyte_line_reads_and_fails_with_a_place() -> None:
    long = "x" * (1024 * 1024)
    assert jsonc.loads('{"a": "' + long + '", /* ' + long + ' */ "b": 1,}')["b"] == 1
    with pytest.raises(jsonc.JsoncError, match=f"line 1, column {len(long) + 11}"):
        jsonc.loads('{"a": "' + long + '", x}')
    with pytest.raises(jsonc.JsoncError, match="unterminated comment at line 1, column 2"):
        jsonc.loads("[/*" + long)
