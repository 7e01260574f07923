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
message names the edit's 0-based index, and a NO_MATCH whose ``old_string`` has bare "\\n" where
the file has "\\r\\n" (it would match with CRLF endings) says so — the match stays exact.
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
            raise FileToolError("NO_MATCH", f"{shown}: edit {i}: old_string not found{_crlf_hint(text, rep.old)}")
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


def _crlf_hint(text: bytes, old: bytes) -> str:
    """Matching is exact: in a file with CRLF endings an old_string written with bare newlines
    finds nothing. Say so when that is why (the match itself stays exact)."""
    if b"\n" in old and b"\r\n" not in old and old.replace(b"\n", b"\r\n") in text:
        return " (the file's line endings are \\r\\n; old_string has bare \\n: match is exact)"
    return ""
