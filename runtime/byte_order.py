"""Byte order marks: which one, if any, the bytes of a text begin with.

JSON between systems is UTF-8 without a mark (RFC 8259 8.1); an editor's save may still begin
with one (Windows Notepad's "Unicode" is UTF-16 with its mark). A decoder of JSON names such a
mark when it refuses the text ("invalid character (byte 0)" names nothing a writer did).
"""

from __future__ import annotations

UTF8_BOM = b"\xef\xbb\xbf"

# (the UTF-32 marks first: the little-endian one begins with UTF-16's)
_MARKS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"), (UTF8_BOM, "UTF-8"),
          (b"\xfe\xff", "UTF-16"), (b"\xff\xfe", "UTF-16"))


def byte_order_mark(raw: bytes) -> str | None:
    """The encoding whose byte order mark ``raw`` begins with ("UTF-8", "UTF-16", "UTF-32"),
    or None."""
    for mark, encoding in _MARKS:
        if raw.startswith(mark):
            return encoding
    return None
