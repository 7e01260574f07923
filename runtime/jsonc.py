"""JSONC: JSON with ``//`` and ``/* */`` comments and trailing commas.

:func:`strip` turns JSONC text into plain JSON of the same length (comments and trailing commas
become spaces, newlines are kept) so parse errors point at the original line and column.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec


_BYTE = re.compile(r"byte (\d+)")


class JsoncError(ValueError):
    """Raised with a message naming the line and column of the problem."""


def _position(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line}, column {col}"


def strip(text: str) -> str:
    out = list(text)
    i, n = 0, len(text)
    last_sig = -1  # index of the last significant (non-space, non-comment) character in `out`
    before_last = -1  # ... and of the one before it
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise JsoncError(f"unterminated string at {_position(text, i)}")
            before_last, last_sig = last_sig, j
            i = j + 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
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
            raise JsoncError(f"not UTF-8 text (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    plain = strip(text)
    if not plain.strip():  # (msgspec says "Input data was truncated", as for a file cut short)
        raise JsoncError("no JSON value: the text is empty (or only comments)")
    data = plain.encode()
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        # msgspec names a byte offset; say where that is in the text (same length as `plain`).
        # For trailing characters it names the byte after the first of them.
        back = 1 if "trailing characters" in str(exc) else 0
        at = lambda m: _position(  # noqa: E731
            text, len(data[: max(0, int(m.group(1)) - back)].decode(errors="ignore")))
        raise JsoncError("invalid JSON: " + _BYTE.sub(at, str(exc))) from None
    except RecursionError:  # msgspec's depth limit is the interpreter's recursion limit
        raise JsoncError("invalid JSON: nested too deeply") from None
