"""``patch_file`` (F-EXE-4): parse the hunk text and apply it to one file's bytes, in memory.

Grammar (the patch is split into lines at "\\n"; one "\\r" before the "\\n" is dropped, so a patch
written with CRLF reads the same)::

    patch   := hunk+                      (nothing before the first header)
    hunk    := header body+ [eof-pin]
    header  := "@@" | "@@ " anchor        anchor: the rest of the line, compared exactly ("@@ " alone = "@@")
    body    := " " text                   context: this line must be there, kept as it is
             | "-" text                   delete: this line must be there, removed
             | "+" text                   add: inserted here
             | ""                         an empty line: context for an empty line (see below)
    eof-pin := "*** End of File"          the hunk must match at the very end of the file

No envelope: a leading ``*** Begin Patch`` / ``*** Update File:`` (or ``---``/``+++`` file headers,
or numbered ``@@ -1,3 +1,4 @@`` headers) is INVALID_PATCH — the path is ``patch_file``'s own
argument and hunks are located by content. Empty lines at the end of a hunk (before the next
header, the eof pin or the end of the patch) are ignored; elsewhere in a body they are context
for an empty line. ``\\ No newline at end of file`` markers are not part of the grammar.

Matching. The original is split into lines, each with its ending ("\\n" or "\\r\\n"; the last line
may have none); a line's text excludes its ending. A UTF-8 byte-order mark that starts the file is
no text of the first line: hunks match the line without it, and it stays where it is (a patch
that matches only with the mark as the first line's text, as read_file shows it, is applied so). A hunk's *old side* (its context and delete
lines, in order) must equal a run of consecutive original lines:

* every hunk is matched against the same ORIGINAL, never against another hunk's result;
* ``@@ anchor``: the anchor must equal exactly one whole original line (NO_MATCH / NOT_UNIQUE),
  and the hunk must match *after* that line — uniquely among the positions after it;
* plain ``@@``: the hunk must match exactly once in the whole file (NO_MATCH / NOT_UNIQUE);
  overlapping candidate positions count, e.g. old side ["a", "a"] in lines a, a, a is NOT_UNIQUE;
* the eof pin: the match must end at the last line (it is then unique by construction);
* the matched runs of two hunks must not share a line (OVERLAP; touching runs are fine);
* a pure-add hunk (no context or delete lines) is allowed only when the file is empty (0 bytes)
  and it is the patch's only hunk; otherwise INVALID_PATCH.

Output. Bytes outside the matched runs are copied untouched, as are context lines (with their own
endings). An added line takes the ending of the nearest original line of its hunk — the last one
consumed before it, else the next one — and the file's dominant ending when neither has one (more
"\\r\\n" than bare "\\n" endings means CRLF; otherwise, and for an empty file, "\\n"). When a hunk's
run ends at a last line without a final newline and the hunk's last output line is an added one,
that line gets no ending either, so "no newline at end of file" survives; a context line keeps
its own ending (when the old last line after it is deleted, as when a hunk deletes all its lines,
the line before keeps its newline: untouched bytes are preserved). Limits: the patch text, the original and the result at most
MAX_TEXT_BYTES each (TOO_LARGE), at most MAX_UNITS hunks (TOO_MANY_UNITS); ``units_applied`` is
the number of hunks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from .errors import MAX_TEXT_BYTES, MAX_UNITS, FileToolError

EOF_PIN = "*** End of File"
BOM = b"\xef\xbb\xbf"
_NUMBERED = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@")
_ENVELOPE = ("*** Begin Patch", "*** Update File:", "*** Add File:", "*** Delete File:", "*** End Patch",
             "--- ", "+++ ", "diff ", "Index: ")


@dataclass(frozen=True)
class Hunk:
    index: int                       # 0-based, for messages
    anchor: bytes | None
    ops: tuple[tuple[str, bytes], ...]  # (" " | "-" | "+", line text without ending)
    pin_eof: bool

    @property
    def old(self) -> list[bytes]:
        return [text for op, text in self.ops if op != "+"]

    @property
    def pure_add(self) -> bool:
        return all(op == "+" for op, _ in self.ops)


def parse(patch: object) -> list[Hunk]:
    """Parse the patch text (see the grammar); raises INVALID_PATCH, TOO_LARGE, TOO_MANY_UNITS."""
    if not isinstance(patch, str):
        raise FileToolError("INVALID_ARGUMENT", "patch must be a string")
    try:
        raw = patch.encode("utf-8")
    except UnicodeEncodeError:
        raise FileToolError("INVALID_ARGUMENT", "patch is not valid Unicode (lone surrogate)") from None
    if len(raw) > MAX_TEXT_BYTES:
        raise FileToolError("TOO_LARGE", f"the patch is {len(raw)} bytes; at most {MAX_TEXT_BYTES}")
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
    hunks: list[Hunk] = []
    current: dict | None = None

    def close() -> None:
        if current is None:
            return
        ops = current["ops"]
        while ops and ops[-1][1] is None:  # literally empty trailing lines: ignored
            ops.pop()
        if not ops:
            raise FileToolError("INVALID_PATCH", f"hunk {len(hunks)} (line {current['line']}) has no body lines")
        if len(hunks) >= MAX_UNITS:
            raise FileToolError("TOO_MANY_UNITS", f"more than {MAX_UNITS} hunks")
        hunks.append(Hunk(len(hunks), current["anchor"],
                          tuple((op, b"" if text is None else text) for op, text in ops), current["pin"]))

    for no, line in enumerate(lines, 1):
        if line.startswith(b"@@"):
            if _NUMBERED.match(line.decode("utf-8")):
                raise FileToolError("INVALID_PATCH", f"line {no}: numbered '@@ -a,b +c,d @@' headers are not "
                                                     "supported; use '@@' or '@@ <exact anchor line>'")
            if line != b"@@" and not line.startswith(b"@@ "):
                raise FileToolError("INVALID_PATCH", f"line {no}: a header is '@@' or '@@ <anchor line>'")
            close()
            anchor = line[3:] if len(line) > 3 else None
            current = {"line": no, "anchor": anchor, "ops": [], "pin": False}
            continue
        if current is None:
            text = line.decode("utf-8")
            hint = ""
            if text.startswith(_ENVELOPE):
                adds = any(ln.startswith(b"*** Add File:") for ln in lines)
                hint = (" (no envelope: patch_file takes only the hunks of the existing file its path names"
                        f"{'; edit_file with mode create makes a new file' if adds else ''})")
            raise FileToolError("INVALID_PATCH", f"line {no}: expected a '@@' hunk header{hint}")
        if current["pin"]:
            if line == b"":
                continue
            raise FileToolError("INVALID_PATCH", f"line {no}: '{EOF_PIN}' must end its hunk")
        if line == EOF_PIN.encode():
            while current["ops"] and current["ops"][-1][1] is None:
                current["ops"].pop()
            current["pin"] = True
            continue
        if line == b"":
            current["ops"].append((" ", None))
            continue
        op = chr(line[0])
        if op not in " +-":
            hint = (" ('\\ No newline at end of file' is no part of the grammar: leave it out; a file "
                    "without a final newline keeps none)") if line.startswith(b"\\") else ""
            raise FileToolError("INVALID_PATCH", f"line {no}: a body line starts with ' ', '+' or '-'{hint}")
        current["ops"].append((op, line[1:]))
    close()
    if not hunks:
        raise FileToolError("INVALID_PATCH", "the patch has no hunks")
    return hunks


def _split(data: bytes) -> list[tuple[bytes, bytes]]:
    """(text, ending) per line; the last line may have an empty ending."""
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        nl = data.find(b"\n", pos)
        if nl < 0:
            out.append((data[pos:], b""))
            break
        if nl > pos and data[nl - 1] == 0x0D:
            out.append((data[pos:nl - 1], b"\r\n"))
        else:
            out.append((data[pos:nl], b"\n"))
        pos = nl + 1
    return out


def dominant_ending(data: bytes) -> bytes:
    """The file's dominant line ending (the rule added lines fall back to; see the module
    docstring): "\\r\\n" when more lines end in it than in a bare "\\n". Counted without
    splitting: a line ends in "\\r\\n" exactly where "\\r\\n" occurs, as :func:`_split` reads it."""
    crlf = data.count(b"\r\n")
    return b"\r\n" if crlf > data.count(b"\n") - crlf else b"\n"


def apply(original: bytes, hunks: list[Hunk], shown: str) -> bytes:
    """Apply parsed hunks to the original bytes (see the module docstring for every rule)."""
    if original.startswith(BOM):  # a byte-order mark is no text of the first line: kept, not matched
        try:
            return BOM + _apply_text(original[len(BOM):], hunks, shown, size=len(original))
        except FileToolError as exc:
            if exc.code != "NO_MATCH":
                raise
            try:  # a hunk that copied the mark from read_file's text: its first line has it
                return _apply_text(original, hunks, shown, size=len(original))
            except FileToolError:
                raise exc from None
    return _apply_text(original, hunks, shown, size=len(original))


def _apply_text(original: bytes, hunks: list[Hunk], shown: str, *, size: int) -> bytes:
    lines = _split(original)
    n = len(lines)
    if any(h.pure_add for h in hunks):
        if original != b"" or len(hunks) != 1:
            raise FileToolError("INVALID_PATCH", "a hunk without context or '-' lines is only allowed as the "
                                                 "single hunk of an empty file")
    by_text: dict[bytes, list[int]] = defaultdict(list)
    for i, (text, _) in enumerate(lines):
        by_text[text].append(i)
    regions: list[tuple[int, int, Hunk]] = []
    for h in hunks:
        start = _locate(h, lines, by_text, shown)
        regions.append((start, start + len(h.old), h))
    regions.sort(key=lambda r: (r[0], r[1]))
    for a, b in zip(regions, regions[1:]):
        if b[0] < a[1]:
            first, second = sorted((a[2].index, b[2].index))
            raise FileToolError("OVERLAP", f"{shown}: hunks {first} and {second} cover overlapping lines")
    dominant = dominant_ending(original)
    out: list[bytes] = []
    pos = 0
    for start, end, h in regions:
        out.extend(text + ending for text, ending in lines[pos:start])
        out.extend(_render(h, lines[start:end], at_eof_no_nl=(end == n and n > 0 and lines[-1][1] == b""),
                           dominant=dominant))
        pos = end
    out.extend(text + ending for text, ending in lines[pos:])
    result = b"".join(out)
    if len(result) + size - len(original) > MAX_TEXT_BYTES:
        raise FileToolError("TOO_LARGE", f"{shown}: the result would be {len(result) + size - len(original)} bytes; at most {MAX_TEXT_BYTES}")
    return result


def _locate(h: Hunk, lines: list[tuple[bytes, bytes]], by_text: dict[bytes, list[int]], shown: str) -> int:
    old = h.old
    n = len(lines)
    after = 0
    if h.anchor is not None:
        hits = by_text.get(h.anchor, [])
        if not hits:
            near = _whitespace_twin(h.anchor, lines)
            hint = f" (line {near + 1} of the file differs from it only in whitespace)" if near is not None else ""
            raise FileToolError("NO_MATCH", f"{shown}: hunk {h.index}: the anchor line is not in the file{hint}")
        if len(hits) > 1:
            raise FileToolError("NOT_UNIQUE", f"{shown}: hunk {h.index}: the anchor line occurs {len(hits)} times")
        after = hits[0] + 1
    if not old:
        return 0  # pure add into an empty file (checked by the caller)
    where = "after its anchor" if h.anchor is not None else "in the file"
    if h.pin_eof:
        candidates = [n - len(old)] if n - len(old) >= after else []
    else:
        # Start from the hunk's rarest line (not its first): in a file of near-identical lines a
        # hunk's first line may occur everywhere while another of its lines occurs once.
        j = min(range(len(old)), key=lambda k: len(by_text.get(old[k], ())))
        candidates = [p - j for p in by_text.get(old[j], []) if p - j >= after and p - j + len(old) <= n]
    if not h.pin_eof and len(candidates) * len(old) > DIRECT_COMPARE_BUDGET:
        # (a pinned hunk has at most one candidate: comparing there is linear; the search below
        # would find matches anywhere and ignore the pin)
        # Many places start like the hunk (a file of one repeated line, a hunk of it as context):
        # comparing at each would take minutes; a KMP pass over the lines takes one pass.
        found = _occurrences(lines, old, after)
    else:
        found = [i for i in candidates if all(lines[i + k][0] == old[k] for k in range(len(old)))]
    if not found:
        if h.pin_eof:
            raise FileToolError("NO_MATCH", f"{shown}: hunk {h.index}: its context and '-' lines are not the last "
                                            f"lines of the file{_why_not_last(old, lines, by_text, after, where)}")
        raise FileToolError("NO_MATCH", f"{shown}: hunk {h.index}: its context and '-' lines are not {where}"
                                        f"{_why_not(old, lines, by_text, after, where)}")
    if len(found) > 1:
        fix = ("add context (the hunk must be the only match after its anchor line, not only the first)"
               if h.anchor is not None else "add context or an anchor")
        raise FileToolError("NOT_UNIQUE", f"{shown}: hunk {h.index}: matches {len(found)} places {where}; {fix}")
    return found[0]


def _squeezed(text: bytes) -> bytes:
    return b"".join(text.split())


def _whitespace_twin(text: bytes, lines: list[tuple[bytes, bytes]], start: int = 0) -> int | None:
    """The index of the first of ``lines`` from ``start`` that differs from ``text`` only in
    whitespace, or ``None`` (also for a ``text`` of whitespace alone, which every blank line would
    match)."""
    squeezed = _squeezed(text)
    if not squeezed:
        return None
    return next((i for i in range(start, len(lines)) if _squeezed(lines[i][0]) == squeezed), None)


def _why_not(old: list[bytes], lines: list[tuple[bytes, bytes]], by_text: dict[bytes, list[int]], after: int,
             where: str) -> str:
    """What a hunk that matches nowhere got wrong, for its NO_MATCH message (by line numbers: no
    text of the patch or the file is echoed): its first old line
    (context or '-') that is not in the file at all (and a file line that differs from it only in
    whitespace), or else how far its longest run of old lines goes before one does not follow."""
    for k, text in enumerate(old):
        if not by_text.get(text) or by_text[text][-1] < after:  # (positions ascend)
            said = f" (line {k + 1} of them is not {where}"
            near = _whitespace_twin(text, lines, after)
            if near is not None:
                said += f"; line {near + 1} of the file differs from it only in whitespace"
            return said + ")"
    best, at, budget = 0, 0, DIRECT_COMPARE_BUDGET
    for p in by_text.get(old[0], ()):
        if p < after:
            continue
        m = 0
        while m < len(old) and p + m < len(lines) and lines[p + m][0] == old[m] and m < budget:
            m += 1
        budget -= m + 1
        if m > best:
            best, at = m, p
        if budget <= 0:  # (a file of one repeated line: the longest run found so far is named)
            break
    if best == 0:
        return ""
    return (f" (the first {best} of them match at line {at + 1}; line {best + 1} of them does not follow there)"
            if best < len(old) else "")


def _why_not_last(old: list[bytes], lines: list[tuple[bytes, bytes]], by_text: dict[bytes, list[int]],
                  after: int, where: str) -> str:
    """What a hunk pinned to the end of the file (``*** End of File``) that does not end it got
    wrong, for its NO_MATCH message (by line numbers, as :func:`_why_not`): where its lines are
    when they are elsewhere (after its anchor, if it has one), else what :func:`_why_not` says."""
    elsewhere = _occurrences(lines, old, after)
    if not elsewhere:
        return _why_not(old, lines, by_text, after, where)
    at = ", ".join(str(i + 1) for i in elsewhere[:3]) + (" …" if len(elsewhere) > 3 else "")
    return (f" (they match at line{'s' if len(elsewhere) > 1 else ''} {at} {where}, and the file has "
            f"{len(lines)} lines; leave out '{EOF_PIN}' to patch them there)")


# Line comparisons the direct search may make before the linear one is used instead.
DIRECT_COMPARE_BUDGET = 200_000


def _occurrences(lines: list[tuple[bytes, bytes]], old: list[bytes], after: int) -> list[int]:
    """Every start ``i >= after`` where the lines' texts equal ``old`` (Knuth-Morris-Pratt over
    lines: linear in the file and the hunk, whatever they repeat)."""
    m = len(old)
    fail = [0] * m
    k = 0
    for q in range(1, m):
        while k and old[q] != old[k]:
            k = fail[k - 1]
        if old[q] == old[k]:
            k += 1
        fail[q] = k
    found: list[int] = []
    k = 0
    for i in range(after, len(lines)):
        text = lines[i][0]
        while k and text != old[k]:
            k = fail[k - 1]
        if text == old[k]:
            k += 1
        if k == m:
            found.append(i - m + 1)
            k = fail[k - 1]
    return found


def _render(h: Hunk, orig: list[tuple[bytes, bytes]], *, at_eof_no_nl: bool, dominant: bytes) -> list[bytes]:
    out: list[list[bytes]] = []
    added: list[bool] = []
    k = 0
    for op, text in h.ops:
        if op == "+":
            ending = orig[k - 1][1] if k else b""  # the last consumed original line
            if not ending and k < len(orig):  # else the next one
                ending = orig[k][1]
            out.append([text, ending or dominant])
            added.append(True)
            continue
        line = orig[k]
        k += 1
        if op == " ":
            out.append([line[0], line[1]])
            added.append(False)
    if at_eof_no_nl and out:
        for item in out[:-1]:
            if not item[1]:  # the old last line is no longer last: it needs an ending
                prev = [o[1] for o in out if o[1]]
                item[1] = prev[-1] if prev else dominant
        # An added line that ends the file takes the missing ending (none). A context line keeps
        # its own: when the old last line after it was deleted, its "\n" is a byte the hunk
        # leaves alone (it was dropped, so " a" + "-b" on "a\nb" gave "a" and "-b" alone "a\n").
        if added[-1]:
            out[-1][1] = b""
    return [text + ending for text, ending in out]
