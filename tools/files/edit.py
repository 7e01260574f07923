"""``edit_file`` (F-EXE-3): the pure part — argument rules and the in-memory edit.

Modes and their arguments (any other combination is INVALID_ARGUMENT)::

    create   content: str            edits absent   target must not exist (in any form)
    rewrite  content: str            edits absent   target: an existing UTF-8 regular file
    edit     edits: [ {old_string: str, new_string: str, replace_all?: bool}, ... ]  (1..128)
                                     content absent target: an existing UTF-8 regular file

Edits are applied in order to the in-memory text, each to the result of the previous ones; the
file is committed once, after all of them succeeded. An edit's ``old_string`` must be non-empty
and match exactly (bytes of its UTF-8 form): no match is NO_MATCH, more than one match without
``replace_all`` is NOT_UNIQUE (overlapping occurrences count: "aa" in "aaa" is not unique); the
message names the edit's 0-based index. The match stays exact, but a NO_MATCH whose
``old_string`` differs from the text only in line endings (it is there when every "\\r\\n" of
both is read as "\\n": an ``old_string`` written with "\\n" in a CRLF file, with "\\r\\n" in an
LF file, or with either over lines of mixed endings) says so: the line where it would match, the
endings of the file's lines there (naming the lines of each when they are mixed) and
``old_string``'s, by line numbers only (no text of the file is echoed).
``replace_all`` replaces every non-overlapping occurrence, left to right.

``rewrite`` keeps what a model's content does not spell from the file it replaces, as
``patch_file`` does for the lines it adds: a UTF-8 byte-order mark that starts the file starts the
result too (content that starts with one is not given a second), and in a file whose dominant
ending is "\\r\\n" (patch_file's rule) content without any "\\r\\n" has its "\\n" written as
"\\r\\n". Content with a "\\r\\n" of its own spells its endings and is written as given, as is
content over a file whose endings are "\\n". ``create`` writes its content as given (no file to
follow).

Limits (each at most, each checked separately, TOO_LARGE past it): the input text (``content``,
or the sum of all ``old_string`` and ``new_string``, in UTF-8 bytes), the original file and the
result are MAX_TEXT_BYTES (8 MiB) each; the text is also checked after every single edit, so a
chain of growing ``replace_all`` edits stops early. More than MAX_UNITS (128) edits is TOO_MANY_UNITS.
``units_applied`` is 1 for create and rewrite, the number of edits for edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import MAX_TEXT_BYTES, MAX_UNITS, FileToolError
from .patch import BOM, dominant_ending

MODES = ("create", "rewrite", "edit")
_EDIT_KEYS = {"old_string", "new_string", "replace_all"}


@dataclass(frozen=True)
class Replacement:
    old: bytes
    new: bytes
    replace_all: bool


@dataclass(frozen=True)
class EditRequest:
    """A validated edit_file call: ``content`` for create/rewrite, ``edits`` for edit."""

    mode: str
    content: bytes | None
    edits: tuple[Replacement, ...]

    @property
    def units(self) -> int:
        return len(self.edits) if self.mode == "edit" else 1


def _utf8(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise FileToolError("INVALID_ARGUMENT", f"{what} is not valid Unicode (lone surrogate)") from None


def check_request(mode: object, content: object, edits: object) -> EditRequest:
    """Validate the arguments (types, combinations, counts, input size) before any I/O."""
    if mode not in MODES:
        raise FileToolError("INVALID_ARGUMENT", f"mode must be one of {', '.join(MODES)}")
    assert isinstance(mode, str)
    if mode in ("create", "rewrite"):
        if edits is not None:
            raise FileToolError("INVALID_ARGUMENT", f"mode {mode} takes content, not edits")
        if not isinstance(content, str):
            raise FileToolError("INVALID_ARGUMENT", f"mode {mode} needs content (a string)")
        data = _utf8(content, "content")
        if len(data) > MAX_TEXT_BYTES:
            raise FileToolError("TOO_LARGE", f"content is {len(data)} bytes; at most {MAX_TEXT_BYTES}")
        return EditRequest(mode, data, ())
    if content is not None:
        raise FileToolError("INVALID_ARGUMENT", "mode edit takes edits, not content")
    if not isinstance(edits, list) or not edits:
        raise FileToolError("INVALID_ARGUMENT", "mode edit needs a non-empty list of edits")
    if len(edits) > MAX_UNITS:
        raise FileToolError("TOO_MANY_UNITS", f"{len(edits)} edits; at most {MAX_UNITS}")
    out: list[Replacement] = []
    total = 0
    for i, item in enumerate(edits):
        out.append(_check_one(i, item))
        total += len(out[-1].old) + len(out[-1].new)
        if total > MAX_TEXT_BYTES:
            raise FileToolError("TOO_LARGE", f"the edits' text is more than {MAX_TEXT_BYTES} bytes")
    return EditRequest(mode, None, tuple(out))


def _check_one(i: int, item: Any) -> Replacement:
    if not isinstance(item, dict):
        raise FileToolError("INVALID_ARGUMENT", f"edit {i} must be an object")
    extra = set(item) - _EDIT_KEYS
    if extra:
        raise FileToolError("INVALID_ARGUMENT", f"edit {i} has unknown keys: {', '.join(sorted(map(str, extra)))}")
    old, new, every = item.get("old_string"), item.get("new_string"), item.get("replace_all", False)
    if not isinstance(old, str) or not isinstance(new, str):
        raise FileToolError("INVALID_ARGUMENT", f"edit {i} needs old_string and new_string (strings)")
    if not isinstance(every, bool):
        raise FileToolError("INVALID_ARGUMENT", f"edit {i}: replace_all must be a boolean")
    if old == "":
        raise FileToolError("INVALID_ARGUMENT", f"edit {i}: old_string is empty")
    return Replacement(_utf8(old, f"edit {i} old_string"), _utf8(new, f"edit {i} new_string"), every)


def check_text(data: bytes, shown: str) -> None:
    """An original file for rewrite/edit/patch: at most MAX_TEXT_BYTES of UTF-8."""
    if len(data) > MAX_TEXT_BYTES:
        raise FileToolError("TOO_LARGE", f"{shown}: the file is {len(data)} bytes; at most {MAX_TEXT_BYTES}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileToolError("NOT_UTF8", f"{shown}: not valid UTF-8 (byte {exc.start})") from None


def check_result(data: bytes, shown: str) -> bytes:
    if len(data) > MAX_TEXT_BYTES:
        raise FileToolError("TOO_LARGE", f"{shown}: the result would be {len(data)} bytes; at most {MAX_TEXT_BYTES}")
    return data


def rewritten(original: bytes, content: bytes) -> bytes:
    """``rewrite``'s result: ``content`` with the file's BOM and CRLF endings kept (see above)."""
    body = content[len(BOM):] if content.startswith(BOM) else content
    text = original[len(BOM):] if original.startswith(BOM) else original
    if b"\r\n" not in body and dominant_ending(text) == b"\r\n":
        body = body.replace(b"\n", b"\r\n")
    mark = BOM if original.startswith(BOM) or content.startswith(BOM) else b""
    return mark + body


def apply_edits(original: bytes, edits: tuple[Replacement, ...], shown: str) -> bytes:
    """Apply the replacements in order, in memory. UTF-8 is self-synchronising, so a byte match
    of a valid UTF-8 needle in valid UTF-8 text is always a match of whole characters."""
    text = original
    for i, rep in enumerate(edits):
        first = text.find(rep.old)
        if first < 0:
            raise FileToolError("NO_MATCH", f"{shown}: edit {i}: old_string not found{_endings_hint(text, rep.old, i)}")
        if not rep.replace_all and text.find(rep.old, first + 1) >= 0:
            raise FileToolError("NOT_UNIQUE", f"{shown}: edit {i}: old_string matches more than once; "
                                              "add context or set replace_all")
        count = text.count(rep.old) if rep.replace_all else 1
        grown = len(text) + count * (len(rep.new) - len(rep.old))
        if grown > MAX_TEXT_BYTES:  # checked before building it: replace_all can grow fast
            raise FileToolError("TOO_LARGE", f"{shown}: edit {i}: the text would be {grown} bytes; "
                                             f"at most {MAX_TEXT_BYTES}")
        text = text.replace(rep.old, rep.new) if rep.replace_all else text.replace(rep.old, rep.new, 1)
    return text


CRLF, LF = "CRLF (\\r\\n)", "LF (\\n)"
_NAMED_LINES = 5  # line numbers named of each ending, at most


def _endings_hint(text: bytes, old: bytes, index: int) -> str:
    """Matching is exact: an ``old_string`` whose line endings are not the file's finds nothing
    (in a file with CRLF endings a model nearly always writes bare newlines). Say so when that is
    why, and where; the match itself stays exact. Made only on a failure."""
    if b"\n" not in old:
        return ""  # (differing in line endings alone needs one)
    flat_text, flat_old = text.replace(b"\r\n", b"\n"), old.replace(b"\r\n", b"\n")
    at = flat_text.find(flat_old)
    if at < 0:
        return ""
    start, end = _unflattened(text, at), _unflattened(text, at + len(flat_old))
    first = text.count(b"\n", 0, start) + 1
    crlf_count = text.count(b"\r\n", start, end)
    lf_count = text.count(b"\n", start, end) - crlf_count
    if not lf_count or not crlf_count:
        one = crlf_count + lf_count == 1
        file_endings = f"{'line there ends' if one else 'lines there end'} in {LF if crlf_count == 0 else CRLF}"
    else:  # (mixed: the lines of each named, the first few)
        crlf: list[int] = []
        lf: list[int] = []
        line, nl = first, text.find(b"\n", start, end)
        while nl >= 0 and (len(crlf) < _NAMED_LINES or len(lf) < _NAMED_LINES):
            (crlf if text[nl - 1:nl] == b"\r" else lf).append(line)
            line, nl = line + 1, text.find(b"\n", nl + 1, end)
        verb = "end" if crlf_count > 1 else "ends"
        file_endings = f"{_lines(crlf, crlf_count)} there {verb} in {CRLF} and {_lines(lf, lf_count)} in {LF}"
    where = f"line {first}"
    if index:
        where += f" of the text as edit{'s' if index > 1 else ''} {_span(index)} left it"
    if flat_text.find(flat_old, at + 1) >= 0:
        where += " (the first of more than one place)"
    crlf_old = old.count(b"\r\n")
    old_endings = CRLF if crlf_old == old.count(b"\n") else LF if not crlf_old else f"a mix of {CRLF} and {LF}"
    return (f"; it would match at {where} if line endings were ignored: the file's {file_endings}, "
            f"old_string's in {old_endings}; the match is exact, so give old_string the file's line endings")


def _unflattened(text: bytes, flat: int) -> int:
    """The position in ``text`` of position ``flat`` of ``text`` with each "\\r\\n" read as "\\n"
    (a flattened "\\n" that was "\\r\\n" maps to its "\\r"). By bisection over the positions,
    each counting the "\\r\\n" before it: the flattened position never decreases with it."""
    lo, hi = flat, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        if mid - text.count(b"\r\n", 0, mid + 1) >= flat:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _span(index: int) -> str:
    return "0" if index == 1 else f"0-{index - 1}"


def _lines(numbers: list[int], count: int) -> str:
    named = ", ".join(str(n) for n in numbers[:_NAMED_LINES])
    more = f" and {count - _NAMED_LINES} more" if count > _NAMED_LINES else ""
    return f"line{'s' if count > 1 else ''} {named}{more}"
