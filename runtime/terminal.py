"""Text printed to a terminal: what a log or a pair file holds may not act on it.

Ids, kinds, names and file names come from files anyone with write access may have edited. A
carriage return, an escape sequence or a bidirectional override printed as is would let such a
value rewrite what the terminal shows (a forged ``ok: … verified`` line, a hidden ``FAILED``).
"""

from __future__ import annotations

import logging
import re

TYPE_CHECKING = False  # (not typing.TYPE_CHECKING: see runtime.cli)
if TYPE_CHECKING:
    from events.secrets import Secrets

# Controls (C0, DEL, C1: U+0085 among them), the line and paragraph separators (U+2028, U+2029:
# they end a line for str.splitlines, and a browser breaks the line there) and bidirectional
# overrides. A name holding none of them is shown on one line as written.
UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` with :data:`UNSHOWABLE` characters (line breaks of any kind among them)
    escaped as ``\\uXXXX``: one line of text stays one line."""
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


def traceback_to_stderr(exc: BaseException, secrets: Secrets | None = None) -> None:
    """A defect's traceback (an exception no layer turned into ``lens: CODE: message``) on
    standard error as Python prints one, but without ``secrets``, whole or in pieces: the
    exception's message may quote a value (a path, a config's text) that holds a key. Then
    ``lens: INTERNAL: …``, the line every failure of the CLI ends with."""
    import sys
    import traceback

    if sys.stderr is None:
        return
    text = "".join(traceback.format_exception(exc))
    if secrets is not None:
        text = secrets.scrub_message(text)
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):  # standard error gone or closed
        return
    to_stderr(f"lens: INTERNAL: {type(exc).__name__} (a defect of Lens; the traceback is above)", secrets)


def scrub_uncaught(secrets: Secrets) -> None:
    """Tracebacks Python prints itself (an uncaught exception in the main thread or another
    one) go through :func:`traceback_to_stderr` with ``secrets``."""
    import sys
    import threading

    def main_hook(kind: type[BaseException], exc: BaseException, tb: object) -> None:
        traceback_to_stderr(exc, secrets)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit or args.exc_value is None:
            return
        traceback_to_stderr(args.exc_value, secrets)

    sys.excepthook = main_hook
    threading.excepthook = thread_hook


class ScrubbedLines(logging.Formatter):
    """Log lines (tracebacks included) without ``secrets``, whole or in pieces: a line may quote a
    client's or a config's value (a refused pairing request, a path), which may be a key pasted in
    the wrong place. The daemon's and ``lens executor serve``'s."""

    def __init__(self, fmt: str, secrets: Secrets) -> None:
        super().__init__(fmt)
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return self.secrets.scrub_message(super().format(record))
