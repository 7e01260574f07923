"""gitignore rules (gitignore(5)), for workspace browsing (F-HAR-3): which entries git ignores.

A small stdlib implementation: each pattern is translated to a regular expression once.

* Blank lines and lines starting with ``#`` are skipped; ``\\#`` and ``\\!`` start a literal ``#``
  or ``!``; trailing spaces are dropped unless escaped with a backslash.
* ``!`` negates: a later negated match re-includes a path. A path whose parent directory is
  ignored stays ignored whatever a negation says (git never looks inside an ignored directory);
  callers pass that down (:meth:`Rules.ignored` takes ``parent_ignored``).
* A trailing ``/`` matches directories only. A ``/`` at the start or in the middle anchors the
  pattern to the directory of its ``.gitignore``; without one it matches a name at any depth below.
* ``*`` and ``?`` never match ``/``; ``[...]`` is a class (``!`` or ``^`` negates it), read as
  git's wildmatch reads it: ranges (a reversed one holds its first character only), POSIX classes
  (``[[:digit:]]``), ``\\`` escapes; a class git cannot close, an unknown ``[:name:]`` or a
  trailing lone backslash make the line match nothing (git abandons such a pattern);
  ``**/`` at the start or ``/**/`` in the middle matches zero or more directories, a trailing
  ``/**`` everything inside; other ``**`` are ``*``.
* Bytes, as git's wildmatch: a pattern and a path are matched as their UTF-8 bytes (a name's bytes
  that are not UTF-8, which ``os`` holds as surrogates, are those bytes again; so are a line's
  when the file is decoded with ``surrogateescape``): ``?`` and a class match one byte, so ``?``
  is no ``é`` (two bytes), and a line that is not UTF-8 names the file of those very bytes.
* Precedence: the last matching pattern wins; files deeper in the tree come after (override)
  those above them; ``.git/info/exclude`` comes before every ``.gitignore``. Matching is
  case-sensitive (git's default on Linux).
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass

MAX_GITIGNORE_BYTES = 1024 * 1024  # a larger .gitignore is read only up to here


@dataclass(frozen=True)
class Pattern:
    # The directory of the .gitignore it came from ("" for the root), as its UTF-8 bytes one per
    # character (:func:`_octets`), as ``regex`` matches paths; IgnoreFile.base is the plain name.
    base: str
    regex: re.Pattern[str]  # matches a path given as its bytes (:func:`_octets`)
    negated: bool
    dir_only: bool
    text: str          # the line as written, for messages and tests

    def matches(self, path: str) -> bool:
        """Whether workspace-relative ``path`` matches this line (whatever its kind: the caller
        checks ``dir_only``), relative to the directory of its ``.gitignore``."""
        return self._matches(_octets(path))

    def _matches(self, path: str) -> bool:
        """:meth:`matches` of a path already given as its bytes (:func:`_octets`)."""
        if self.base:
            if not path.startswith(self.base + "/"):
                return False
            path = path[len(self.base) + 1:]
        return self.regex.fullmatch(path) is not None


# POSIX classes as git's wildmatch reads them (ASCII only, as git's own ctype table).
_POSIX = {
    "alnum": "A-Za-z0-9", "alpha": "A-Za-z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9",
    "graph": "\\x21-\\x7e", "lower": "a-z", "print": "\\x20-\\x7e",
    "punct": "".join(re.escape(c) for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "space": " \\t\\n\\r", "upper": "A-Z", "xdigit": "0-9A-Fa-f",
}
# A pattern git abandons (an unclosed class, an unknown [:name:]) matches nothing.
_NEVER = "(?!)"


def _octets(text: str) -> str:
    """``text`` as its UTF-8 bytes, one character each (Latin-1): what the expressions match, so
    that they match bytes as git does. A name's bytes that are not UTF-8 (surrogates from ``os``)
    are those bytes again; any other lone surrogate is encoded as it stands."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("latin-1")


def _class(body: str, i: int) -> tuple[str, int] | None:
    """A ``[...]`` class starting at ``body[i] == "["``, read as git's wildmatch reads it: (regex,
    index after it), or None when git abandons the pattern (the class is not closed, a
    ``[:name:]`` is unknown, a backslash ends it): then the line matches nothing.

    The first member may be ``]``; ``\\`` escapes a member; ``a-z`` is a range (a reversed one
    holds its first character only, as in git); a ``-`` first, last or right after a range is
    itself; ``[:alpha:]`` and the other POSIX classes; a ``[`` not starting one is itself."""
    n = len(body)
    j = i + 1
    negate = j < n and body[j] in "!^"
    if negate:
        j += 1
    parts: list[str] = []
    prev: str | None = None  # the member before, for a range ("-" after a range or class is itself)
    first = True
    while True:
        if j >= n:
            return None
        ch = body[j]
        if ch == "]" and not first:
            break
        first = False
        if ch == "\\":
            j += 1
            if j >= n:
                return None
            prev = body[j]
            parts.append(re.escape(prev))
        elif ch == "-" and prev is not None and j + 1 < n and body[j + 1] != "]":
            j += 1
            end = body[j]
            if end == "\\":
                j += 1
                if j >= n:
                    return None
                end = body[j]
            if prev <= end:
                parts.append(f"{re.escape(prev)}-{re.escape(end)}")
            prev = None
        elif ch == "[" and body.startswith(":", j + 1):
            k = body.find("]", j + 2)
            if k < 0:
                return None
            if k - 1 >= j + 2 and body[k - 1] == ":":  # "[:name:]"
                members = _POSIX.get(body[j + 2:k - 1])
                if members is None:
                    return None
                parts.append(members)
                prev = None
                j = k
            else:  # no ":]" before the next "]": "[" is itself
                parts.append(re.escape(ch))
                prev = ch
        else:
            parts.append(re.escape(ch))
            prev = ch
        j += 1
    inner = "".join(parts)
    return (f"(?!/)[^{inner}]" if negate else f"(?!/)[{inner}]"), j + 1


def _translate(body: str) -> str:
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        at_start = i == 0 or body[i - 1] == "/"
        if body.startswith("**", i) and at_start and (i + 2 == n or body[i + 2] == "/"):
            if i + 2 == n:                      # "a/**" (or "**"): everything inside
                out.append(".*")
                i += 2
            else:                               # "**/x", "a/**/x": zero or more directories
                out.append("(?:.*/)?")
                i += 3
            continue
        if ch == "*":
            while i < n and body[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if ch == "?":
            out.append("[^/]")
        elif ch == "[":
            cls = _class(body, i)
            if cls is None:
                return _NEVER
            out.append(cls[0])
            i = cls[1]
            continue
        elif ch == "\\":
            if i + 1 == n:  # a backslash with nothing to escape: git matches nothing
                return _NEVER
            out.append(re.escape(body[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def parse_line(line: str, base: str = "") -> Pattern | None:
    """One line of a .gitignore in directory ``base`` (workspace-relative, "" for the root)."""
    return _parse_line(_octets(line), _octets(base))


def _parse_line(line: str, base: str) -> Pattern | None:
    """:func:`parse_line` of a line and a base already given as their bytes (:func:`_octets`)."""
    text = line[:-1] if line.endswith("\n") else line
    text = text[:-1] if text.endswith("\r") else text  # (one "\r" before the newline, as git drops)
    if not text or text.startswith("#"):
        return None
    # trailing spaces go unless escaped ("a\ " keeps one)
    stripped = text.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(text) and not stripped.endswith("\\\\"):
        stripped += " "
    body = stripped
    negated = body.startswith("!")
    if negated:
        body = body[1:]
    elif body.startswith("\\!") or body.startswith("\\#"):
        body = body[1:]
    dir_only = body.endswith("/") and not body.endswith("\\/")
    if dir_only:
        body = body.rstrip("/")
    if not body:
        return None
    anchored = "/" in body
    body = body.lstrip("/") if anchored else body
    if not body:
        return None
    rx = _translate(body)
    regex = re.compile(("" if anchored else "(?:.*/)?") + rx, re.S)
    return Pattern(base, regex, negated, dir_only, text.encode("latin-1").decode("utf-8", "surrogateescape"))


def parse(text: str, base: str = "") -> list[Pattern]:
    """The patterns of an ignore file's text, read as git reads it: a UTF-8 byte-order mark at
    the start skipped, lines split at "\\n" alone (a form feed, a lone "\\r", U+0085 or U+2028
    is a character of its line, not a line break)."""
    text = _octets(text).removeprefix("\xef\xbb\xbf")  # (the mark's UTF-8 bytes)
    at = _octets(base)
    return [p for p in (_parse_line(line, at) for line in text.split("\n")) if p is not None]


class IgnoreFile:
    """One ignore file (a ``.gitignore``, or ``.git/info/exclude``) of directory ``base``, compiled:
    its patterns and, made on first use, their groups (see :class:`Rules`). Never changed once made,
    so one can serve every listing that reads the same text there (:mod:`.ignore_cache`); the
    groups are made under a lock, once, whichever thread asks first."""

    def __init__(self, base: str, text: str) -> None:
        # The directory's workspace-relative name as given ("" for the root; a name's bytes that
        # are not UTF-8 as surrogates, as ``os`` gives them); its patterns hold it as bytes.
        self.base = base
        self.patterns = parse(text, base)
        self._groups: dict[bool, list[tuple[re.Pattern[str], list[Pattern]]]] = {}
        self._lock = threading.Lock()

    def groups(self, is_dir: bool) -> list[tuple[re.Pattern[str], list[Pattern]]]:
        """The patterns that can match an entry of this kind, in groups of about sqrt(n), each
        with one expression matching what any of its patterns matches."""
        with self._lock:
            groups = self._groups.get(is_dir)
            if groups is None:
                own = [p for p in self.patterns if is_dir or not p.dir_only]
                size = max(16, math.isqrt(len(own)))
                groups = []
                for i in range(0, len(own), size):
                    part = own[i:i + size]
                    groups.append((re.compile("|".join(f"(?:{_full_path_regex(p)})" for p in part), re.S), part))
                self._groups[is_dir] = groups
            return groups


class Rules:
    """The patterns that apply in one directory: its ancestors' and its own, in precedence order
    (the ignore files that hold them, outermost first).

    Matching a path tries the patterns last first, in groups: each group of about sqrt(n)
    consecutive patterns is also one combined expression, asked first, so a path that matches
    none of a group costs one match for the group, not one per pattern (a .gitignore of tens of
    thousands of lines against a directory of thousands of entries)."""

    def __init__(self, files: tuple[IgnoreFile, ...] = ()) -> None:
        self._files = files
        self._groups: dict[bool, list[tuple[re.Pattern[str], list[Pattern]]]] = {}

    @property
    def patterns(self) -> list[Pattern]:
        return [p for f in self._files for p in f.patterns]

    def child(self, base: str, text: str | None) -> "Rules":
        """The rules of directory ``base`` given the text of its .gitignore (None: it has none)."""
        return self.with_file(IgnoreFile(base, text) if text else None)

    def with_file(self, compiled: IgnoreFile | None) -> "Rules":
        """These rules followed by an ignore file already compiled (None: there is none)."""
        if compiled is None or not compiled.patterns:
            return self
        return Rules(self._files + (compiled,))

    def _groups_for(self, is_dir: bool) -> list[tuple[re.Pattern[str], list[Pattern]]]:
        groups = self._groups.get(is_dir)
        if groups is None:
            groups = [g for f in self._files for g in f.groups(is_dir)]
            self._groups[is_dir] = groups
        return groups

    def ignored(self, path: str, is_dir: bool, parent_ignored: bool = False) -> bool:
        """Whether workspace-relative ``path`` is ignored (``parent_ignored``: a directory above it is)."""
        if parent_ignored:
            return True
        path = _octets(path)
        for combined, part in reversed(self._groups_for(is_dir)):
            if combined.fullmatch(path) is None:
                continue
            for p in reversed(part):
                if p._matches(path):
                    return not p.negated
        return False


def _full_path_regex(p: Pattern) -> str:
    """``p`` as an expression of the workspace-relative path (its directory's prefix included)."""
    return (re.escape(p.base) + "/" if p.base else "") + p.regex.pattern
