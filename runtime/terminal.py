"""Text printed to a terminal: what a log or a pair file holds may not act on it.

Ids, kinds, names and file names come from files anyone with write access may have edited. A
carriage return, an escape sequence or a bidirectional override printed as is would let such a
value rewrite what the terminal shows (a forged ``ok: … verified`` line, a hidden ``FAILED``).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # (not typing.TYPE_CHECKING: see runtime.cli)
if TYPE_CHECKING:
    from events.secrets import Secrets

UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` with :data:`UNSHOWABLE` characters (newlines too) escaped as ``\\uXXXX``."""
    return UNSHOWABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def to_stderr(text: str, secrets: Secrets | None = None) -> None:
    """One line of ``text`` (:func:`shown`) on standard error, or nowhere when there is none;
    with ``secrets``, without them, whole or in pieces (``Secrets.scrub_message``: an error
    quoting a value cut to a limit).

    Started with standard error closed (``2>&-``), Python sets ``sys.stderr`` to ``None``, and
    ``print(…, file=None)`` writes to *standard output*: an error line would land inside
    ``lens log decode``'s JSON lines. With no standard error (or one that fails) the line is
    dropped; the exit code still says what happened.
    """
    import sys

    if sys.stderr is None:
        return
    if secrets is not None:
        text = secrets.scrub_message(text)
    try:
        print(shown(text), file=sys.stderr, flush=True)
    except (OSError, ValueError):  # standard error gone or closed
        pass
