"""JSON that stays one line for every reader of lines.

U+0085, U+2028 and U+2029 may stand unescaped in a JSON string (msgspec writes them so), but they
end a line for Python's ``str.splitlines`` and the line readers built like it (``requests``'
``iter_lines``, ``httpx``'s line decoder): one event would come out as two broken lines. Escaped,
the JSON means the same and stays one line. ``lens log decode`` prints its lines through
:func:`json_line`, and the event stream writes its ``data:`` lines through it, so the two stay
byte for byte the same.
"""

from __future__ import annotations

_LINE_BREAKS_JSON_ALLOWS = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


def json_line(data: bytes) -> bytes:
    """``data`` (UTF-8 JSON) with the line breaks JSON lets stand in a string escaped: every
    reader of lines, ``str.splitlines`` included, finds it one line. (In UTF-8 those byte
    sequences encode those characters and nothing else, and JSON has them only in strings.)"""
    for raw, escaped in _LINE_BREAKS_JSON_ALLOWS:
        if raw in data:
            data = data.replace(raw, escaped)
    return data
