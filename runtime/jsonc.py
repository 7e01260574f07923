"""JSONC: JSON with ``//`` and ``/* */`` comments and trailing commas.

:func:`strip` turns JSONC text into plain JSON of the same length (comments and trailing commas
become spaces, newlines are kept) so parse errors point at the original line and column. On the way it refuses what msgspec
would read silently or report without a place: a key repeated in one object (the last one used
to win), nesting deeper than :data:`MAX_DEPTH` (msgspec's limit is whatever is left of the
interpreter's recursion limit, so it moved with the caller's stack) and a ``\\u`` escape of half
a surrogate pair.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec


_BYTE = re.compile(r"byte (\d+)")
# Strings and numbers of plain JSON, to find the number msgspec found out of range.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?')
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")

# Arrays and objects nested in one another. A config nests a few levels (a faux script's tool
# arguments a few more); msgspec would stop at the interpreter's recursion limit less the stack
# in use, a depth that differed between `lens serve` and a config write through the API.
MAX_DEPTH = 200


class JsoncError(ValueError):
    """Raised with a message naming the line and column of the problem."""


# A line end as JSON and YAML read one: "\r\n", "\r" or "\n" (JSON's whitespace has all three; old
# Mac files end lines in CR alone). SKILL.md front matter (tools/skills.py) splits its lines with it too.
LINE_BREAK = re.compile(r"\r\n?|\n")


def _position(text: str, index: int) -> str:
    line = len(LINE_BREAK.findall(text, 0, index)) + 1
    col = index - (max(text.rfind("\n", 0, index), text.rfind("\r", 0, index)) + 1) + 1
    return f"line {line}, column {col}"


def _surrogate_escape(text: str, j: int) -> int:
    """``text[j]`` starts an escape in a string: the length of a ``\\u`` escape of a surrogate
    pair (12), else 2. :class:`JsoncError` for half a pair (text cannot hold one)."""
    hex4 = text[j + 2:j + 6]
    if text[j + 1] != "u" or not _HEX4.fullmatch(hex4) or not 0xD800 <= int(hex4, 16) <= 0xDFFF:
        return 2
    low = text[j + 8:j + 12]
    if int(hex4, 16) <= 0xDBFF and text[j + 6:j + 8] == "\\u" and _HEX4.fullmatch(low) \
            and 0xDC00 <= int(low, 16) <= 0xDFFF:
        return 12
    raise JsoncError(f"\\u{hex4} is half of a surrogate pair, not a character, at {_position(text, j)}")


def _key(token: str) -> str:
    if "\\" not in token:
        return token[1:-1]
    try:
        return json.loads(token)
    except ValueError:  # (an invalid escape: msgspec reports it, with its place)
        return token


def strip(text: str) -> str:
    out = list(text)
    i, n = 0, len(text)
    last_sig = -1  # index of the last significant (non-space, non-comment) character in `out`
    before_last = -1  # ... and of the one before it
    open_: list[set[str] | None] = []  # one per open array (None) or object (its keys so far)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += _surrogate_escape(text, j) if text[j] == "\\" and j + 1 < n else 1
            if j >= n:
                raise JsoncError(f"unterminated string at {_position(text, i)}")
            keys = open_[-1] if open_ else None
            if keys is not None and last_sig >= 0 and out[last_sig] in "{,":  # a key
                key = _key(text[i:j + 1])
                if key in keys:
                    raise JsoncError(f"duplicate key {key[:80]!r} at {_position(text, i)}")
                keys.add(key)
            before_last, last_sig = last_sig, j
            i = j + 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            # to the end of the line, which a CR alone ends too: reading on to the next LF took
            # the values on lines ended by CR for comment
            m = LINE_BREAK.search(text, i)
            j = n if m is None else m.start()
            for k in range(i, j):
                out[k] = " "
            i = j
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            if j < 0:
                raise JsoncError(f"unterminated comment at {_position(text, i)}")
            for k in range(i, j + 2):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 2
            continue
        if c in "}]" and last_sig >= 0 and out[last_sig] == "," and before_last >= 0 \
                and out[before_last] not in "[{,":
            out[last_sig] = " "  # a trailing comma (after a value: `[,]` and `{,}` stay errors)
        if c in "}]" and open_:
            open_.pop()
        elif c in "[{":
            open_.append(set() if c == "{" else None)
            if len(open_) > MAX_DEPTH:
                raise JsoncError(f"nested deeper than {MAX_DEPTH} arrays and objects at {_position(text, i)}")
        if not c.isspace():
            before_last, last_sig = last_sig, i
        i += 1
    return "".join(out)


def loads(text: str | bytes) -> Any:
    """Parse JSONC into plain Python data. Raises :class:`JsoncError` naming where it failed."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            before = text[:exc.start].decode("utf-8").removeprefix("\ufeff")
            raise JsoncError(f"not UTF-8 text at {_position(before, len(before))} (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    plain = strip(text)
    if not plain.strip():  # (msgspec says "Input data was truncated", as for a file cut short)
        raise JsoncError("no JSON value: the text is empty (or only comments)")
    data = plain.encode()
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        if "out of range" in str(exc):  # (msgspec names a path, `$[...]` inside an object)
            raise JsoncError(f"invalid JSON: {_out_of_range(text, plain)}") from None
        if "truncated" in str(exc):  # (no place given; strip has caught unterminated strings)
            end = _position(text, len(plain.rstrip()))
            raise JsoncError(f"invalid JSON: the text ends before the value is complete ({end})") from None
        # msgspec names a byte offset; say where that is in the text (same length as `plain`).
        # For trailing characters it names the byte after the first of them.
        back = 1 if "trailing characters" in str(exc) else 0
        at = lambda m: _position(  # noqa: E731
            text, len(data[: max(0, int(m.group(1)) - back)].decode(errors="ignore")))
        raise JsoncError("invalid JSON: " + _BYTE.sub(at, str(exc))) from None
    except RecursionError:  # (MAX_DEPTH is far below it: only a caller already deep in its stack)
        raise JsoncError("invalid JSON: nested too deeply") from None


def _out_of_range(text: str, plain: str) -> str:
    """Where the number msgspec cannot read is: a float past the largest double (``1e400``),
    an integer of more digits than Python reads (``sys.get_int_max_str_digits``)."""
    for m in _TOKEN.finditer(plain):
        number = m.group()
        if number[0] == '"':
            continue
        try:
            if "." in number or "e" in number or "E" in number:
                if abs(float(number)) != float("inf"):
                    continue
            else:
                int(number)
                continue
        except ValueError:
            pass
        shown = number if len(number) <= 40 else number[:20] + "…"
        return f"the number {shown} is out of range at {_position(text, m.start())}"
    return "a number is out of range"
