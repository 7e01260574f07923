"""Text printed to a terminal: what a log or a pair file holds may not act on it.

Ids, kinds, names and file names come from files anyone with write access may have edited. A
carriage return, an escape sequence or a bidirectional override printed as is would let such a
value rewrite what the terminal shows (a forged ``ok: … verified`` line, a hidden ``FAILED``).
"""

from __future__ import annotations

import re

UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` with :data:`UNSHOWABLE` characters (newlines too) escaped as ``\\uXXXX``."""
    return UNSHOWABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
