"""How many characters of JSON an answer's strings make, estimated before it is encoded: the
``chars`` that :func:`runtime.json_answer.json_answer` compares with :data:`PIECES_FROM_CHARS` to
choose between one call on the loop and pieces in a worker thread. Cheap where the answer is
clearly on one side, a bound from above where escapes could take it past."""

from __future__ import annotations

import trio

# An answer whose strings hold more characters than this is encoded in pieces (below it, in one
# call: msgspec encodes about 2 MB a millisecond, where the walk of a view of a thousand small
# items in pieces took 15 ms of CPU, and its worker thread, holding the interpreter's lock up to
# 5 ms at a time, held the loop back longer than the one call did; now that it gives way after
# each chunk, the pieces of 3 MB of ASCII hold the loop about as long as the one call, for five
# times its CPU: the threshold stays).
PIECES_FROM_CHARS = 4 * 1024 * 1024

# The most characters of JSON one character of a string becomes: a control character other than
# \b \t \n \f \r is six (``\u0001``); a quote, a backslash and those five are two.
ESCAPE_MAX = 6
# The bytes msgspec escapes, all ASCII: UTF-8 never holds them inside a longer character, and a
# string's ASCII alone (``encode("ascii", "ignore")``) holds every one of its characters that
# escapes, so counting them in either counts the characters of the string that escape.
_ESCAPED = bytes(range(0x20)) + b'"\\'
# Characters scanned for escapes between two turns of the loop: about 0.05 ms of ASCII or CJK,
# 0.1 ms of ASCII prose with a few accents, 0.13 ms of a mix of ASCII, CJK, quotes and newlines.
SCAN_CHARS = 128 * 1024


async def strings_chars(texts: list[str]) -> int:
    """At least as many characters as ``texts`` make as JSON strings (quotes aside), whenever that
    number decides which side of :data:`PIECES_FROM_CHARS` an answer of them is on.

    Their characters when that decides it alone: past the threshold, or at most an
    :data:`ESCAPE_MAX`-th of it (no escapes can take them past it): a sum of lengths, all that
    a view of ordinary size costs. Between the two, each character that escapes counts
    :data:`ESCAPE_MAX` (a bound: exact for control characters, three times the two of a quote or
    a newline), counted by ``bytes.translate`` in the UTF-8 of plain ASCII (0.45–0.6 ms a
    million characters, more than twice what encoding them costs) and in the ASCII alone of text
    holding other characters (CJK: 0.4 ms a million characters, where their UTF-8 cost 2.4 ms,
    four times their encoding), :data:`SCAN_CHARS` characters at a time with the event loop's
    turn between two, until the sum is past the threshold."""
    n = sum(map(len, texts))
    if n > PIECES_FROM_CHARS or n * ESCAPE_MAX <= PIECES_FROM_CHARS:
        return n
    scanned = 0
    for text in texts:
        for at in range(0, len(text), SCAN_CHARS):
            chunk = text[at:at + SCAN_CHARS]
            # (every character JSON escapes is ASCII: a chunk holding others is counted in its
            # ASCII alone, for CJK a fifth of the cost of its UTF-8; plain ASCII in its UTF-8, a copy)
            found = chunk.encode() if chunk.isascii() else chunk.encode("ascii", "ignore")
            n += (ESCAPE_MAX - 1) * (len(found) - len(found.translate(None, _ESCAPED)))
            if n > PIECES_FROM_CHARS:
                return n
            scanned += len(chunk)
            if scanned >= SCAN_CHARS:
                scanned = 0
                await trio.lowlevel.checkpoint()
    return n


def page_chars(raw_bytes: int) -> int:
    """The ``chars`` of a page of events whose rows declare ``raw_bytes`` (their MessagePack
    before compression): each declared byte counted as :data:`ESCAPE_MAX` characters, the most
    one becomes in JSON (a control character, ``\\u0001``). The page's strings are not read: the
    bytes are all it has before it is built."""
    return ESCAPE_MAX * raw_bytes
