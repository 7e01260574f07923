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

# The invisible format characters: Unicode's category Cf (as of Unicode 14, Python 3.11's
# database, and 13439-1343F, which Unicode 15 added to it): the soft hyphen, zero-width spaces and
# joiners (U+200B-U+200D, U+2060), the byte order mark (U+FEFF), bidirectional controls (U+200E,
# U+200F, U+202A-U+202E, U+2066-U+2069, U+061C), the tag characters (U+E0001, U+E0020-U+E007F)...
# They show nothing, or move what follows: two names that look the same would differ.
FORMAT_CHARACTERS = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
                     "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
                     "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
_LINE_BREAKING = "\x00-\x1f\x7f-\x9f\u2028\u2029"
# The zero-width joiner and non-joiner (U+200D, U+200C) join what stands on either side: an emoji
# sequence (👩‍👩‍👧, 🏳️‍🌈) or the letters of a Persian or Indic word. Between two characters that
# are neither ASCII nor controls nor format characters they are part of what is written; anywhere
# else (at an end, beside an ASCII letter, beside another format character) they only make two
# names that look the same differ.
_JOINED = f"[^\x00-\x7f{_LINE_BREAKING}{FORMAT_CHARACTERS}]"
# Controls (C0, DEL, C1: U+0085 among them), the line and paragraph separators (U+2028, U+2029:
# they end a line for str.splitlines, and a browser breaks the line there) and the format
# characters (a joiner only out of place). A name holding none of them is shown on one line as
# written.
_NOT_JOINERS = FORMAT_CHARACTERS.replace("\u200b-\u200f", "\u200b\u200e\u200f")
UNSHOWABLE = re.compile(f"[{_LINE_BREAKING}{_NOT_JOINERS}]|(?<!{_JOINED})[\u200c\u200d]|[\u200c\u200d](?!{_JOINED})")


def unshowable_in(text: str) -> str | None:
    """The first :data:`UNSHOWABLE` character of ``text`` named as ``U+XXXX`` (``None``: none),
    for an error refusing it: it cannot be quoted, being invisible or acting on the terminal."""
    m = UNSHOWABLE.search(text)
    return None if m is None else f"U+{ord(m.group()):04X}"


def shown(text: str) -> str:
    """``text`` with :data:`UNSHOWABLE` characters (line breaks of any kind among them)
    escaped as ``\\uXXXX`` (``\\UXXXXXXXX`` past U+FFFF): one line of text stays one line."""
    return UNSHOWABLE.sub(_escaped, text)


def _escaped(m: re.Match[str]) -> str:
    """``\\uXXXX`` (four hex digits) for a character of the Basic Multilingual Plane,
    ``\\UXXXXXXXX`` (eight) past it: ``\\ue0041`` would read as U+E004 and a ``1``."""
    cp = ord(m.group())
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


# What a word written in a shell's $'…' quoting (bash, zsh, ksh; POSIX.1-2024 sh) escapes: its
# quote and backslash, what `shown` escapes, and the bytes of an argument that was not UTF-8
# (Python reads them as lone surrogates U+DC80-U+DCFF).
_ANSI_C = re.compile(f"[\\\\'{_LINE_BREAKING}{_NOT_JOINERS}\u200c\u200d\udc80-\udcff]")
_ANSI_C_NAMED = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def shell_word(word: str) -> str:
    """``word`` as a shell reads it back, for a command line shown to be run: ``shlex.quote``'s
    quoting; a word :func:`shown` would escape something in (a control character, a line break,
    a format character), or one holding bytes that are not UTF-8, in ``$'…'`` quoting with those
    escaped (``$'a\\nb'``), so that it still reads back as written and stays on one line."""
    import shlex

    if not UNSHOWABLE.search(word) and not any("\udc80" <= ch <= "\udcff" for ch in word):
        return shlex.quote(word)
    return "$'" + _ANSI_C.sub(_ansi_c_escaped, word) + "'"


def _ansi_c_escaped(m: re.Match[str]) -> str:
    """One character of a ``$'…'`` word escaped: by name (``\\n``), a byte (``\\x1b``, and a
    byte that was not UTF-8 as it was), else :func:`_escaped`'s ``\\uXXXX`` (the shell writes the
    character in UTF-8)."""
    ch = m.group()
    if ch in _ANSI_C_NAMED:
        return _ANSI_C_NAMED[ch]
    if "\udc80" <= ch <= "\udcff":
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return f"\\x{ord(ch):02x}" if ch < "\x80" else _escaped(m)


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
