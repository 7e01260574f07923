"""gitignore rules (gitignore(5)), for workspace browsing (F-HAR-3): which entries git ignores.

A small stdlib implementation: each pattern is translated to a regular expression once.

* Blank lines and lines starting with ``#`` are skipped; ``\\#`` and ``\\!`` start a literal ``#``
  or ``!``; trailing spaces are dropped unless escaped with a backslash.
* ``!`` negates: a later negated match re-includes a path. A path whose parent directory is
  ignored stays ignored whatever a negation says (git never looks inside an ignored directory);
  callers pass that down (:meth:`Rules.ignored` takes ``parent_ignored``).
* A trailing ``/`` matches directories only. A ``/`` at the start or in the middle anchors the
  pattern to the directory of its ``.gitignore``; without one it matches a name at any depth below.
* ``*`` and ``?`` never match ``/``; ``[...]`` is a class (``!`` or ``^`` negates it);
  ``**/`` at the start or ``/**/`` in the middle matches zero or more directories, a trailing
  ``/**`` everything inside; other ``**`` are ``*``.
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
    base: str          # directory of the .gitignore it came from ("" for the root)
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    text: str          # the line as written, for messages and tests

    def matches(self, path: str) -> bool:
        """Whether workspace-relative ``path`` matches this line (whatever its kind: the caller
        checks ``dir_only``), relative to the directory of its ``.gitignore``."""
        if self.base:
            if not path.startswith(self.base + "/"):
                return False
            path = path[len(self.base) + 1:]
        return self.regex.fullmatch(path) is not None


def _class(body: str, i: int) -> tuple[str, int] | None:
    """A ``[...]`` class starting at ``body[i] == "["``: (regex, index after it), or None when
    it is not closed (then ``[`` is literal)."""
    j = i + 1
    negate = j < len(body) and body[j] in "!^"
    if negate:
        j += 1
    start = j
    if j < len(body) and body[j] == "]":  # a leading "]" is a member
        j += 1
    while j < len(body) and body[j] != "]":
        j += 2 if body[j] == "\\" else 1
    if j >= len(body):
        return None
    members = body[start:j]
    out = []
    k = 0
    while k < len(members):
        ch = members[k]
        if ch == "\\" and k + 1 < len(members):
            out.append(re.escape(members[k + 1]))
            k += 2
            continue
        out.append("-" if ch == "-" and 0 < k < len(members) - 1 else re.escape(ch))
        k += 1
    inner = "".join(out)
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
            if cls is not None:
                out.append(cls[0])
                i = cls[1]
                continue
            out.append(re.escape(ch))
        elif ch == "\\" and i + 1 < n:
            out.append(re.escape(body[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def parse_line(line: str, base: str = "") -> Pattern | None:
    """One line of a .gitignore in directory ``base`` (workspace-relative, "" for the root)."""
    text = line.rstrip("\r\n")
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
    return Pattern(base, regex, negated, dir_only, text)


def parse(text: str, base: str = "") -> list[Pattern]:
    return [p for p in (parse_line(line, base) for line in text.splitlines()) if p is not None]


class IgnoreFile:
    """One ignore file (a ``.gitignore``, or ``.git/info/exclude``) of directory ``base``, compiled:
    its patterns and, made on first use, their groups (see :class:`Rules`). Never changed once made,
    so one can serve every listing that reads the same text there (:mod:`.ignore_cache`); the
    groups are made under a lock, once, whichever thread asks first."""

    def __init__(self, base: str, text: str) -> None:
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
        for combined, part in reversed(self._groups_for(is_dir)):
            if combined.fullmatch(path) is None:
                continue
            for p in reversed(part):
                if p.matches(path):
                    return not p.negated
        return False


def _full_path_regex(p: Pattern) -> str:
    """``p`` as an expression of the workspace-relative path (its directory's prefix included)."""
    return (re.escape(p.base) + "/" if p.base else "") + p.regex.pattern
