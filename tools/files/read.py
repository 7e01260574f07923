"""``read_file`` (F-EXE-2): a page of a UTF-8 file, or of a directory listing.

Result (a JSON-ready dict, the same keys for both kinds)::

    {"path":         the path as the caller gave it,
     "kind":         "file" | "directory",
     "content":      the page as text (exact file text: line endings kept as they are),
     "entries":      directories only: the page's entries as a list (names, directories with "/"),
     "start_line":   1-based number of the page's first line (or entry),
     "lines_returned": lines (entries) in the page; a line cut by the byte cap counts as one,
     "offset":       UTF-8 byte position where the page starts,
     "next_offset":  byte position right after the page (pass it as ``offset`` to continue),
     "eof":          true when the page reaches the end,
     "size":         total bytes of the file when it was opened — the page never goes past
                     them (of the listing text, for a directory)}

A directory is paged as its *listing text*: every entry (hidden ones included, sorted by name in
code-point order, directories suffixed "/", symlinks shown as plain names) followed by "\\n"; a
newline inside a name is shown as the two characters "\\n", bytes that are not UTF-8 as U+FFFD.
So ``offset``/``next_offset`` are byte positions in that text and ``start_line`` picks an entry,
exactly as for files; a directory that changes between pages should be read again.

Selection: ``start_line`` (>= 1) or ``offset`` (>= 0, <= size, never inside a UTF-8 character),
not both (INVALID_ARGUMENT); neither means the start. ``max_lines`` (>= 1) caps the page's lines.
Page caps: at most READ_PAGE_LINES (2000) lines and READ_PAGE_BYTES (256 KiB) per page; a larger
``max_lines`` is clamped. When the byte cap falls inside a line the page ends after the last
whole line; a single line longer than the cap is cut at the last character boundary before it
(``next_offset`` then points into that line, at a character boundary). A ``start_line`` past the
last line gives an empty page with ``eof`` true. UTF-8 is checked on the bytes of the page: a page
that is not valid UTF-8 is NOT_UTF8; so is an ``offset`` at a continuation byte that is not
inside the character of a lead byte before it (the text there is not UTF-8: no character to split). A page
that is not at the end always holds at least one byte, so paging by ``next_offset`` ends.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from .errors import READ_PAGE_BYTES, READ_PAGE_LINES, FileToolError

ReadAt = Callable[[int, int], bytes]  # (position, count) -> bytes, fewer only at the end

_SCAN = 1 << 20


def check_int(name: str, value: object, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise FileToolError("INVALID_ARGUMENT", f"{name} must be an integer")
    if value < minimum:
        raise FileToolError("INVALID_ARGUMENT", f"{name} must be >= {minimum}")
    return value


def listing_text(dir_fd: int) -> tuple[bytes, list[str]]:
    """The listing text of an open directory and its entries (sorted, dirs suffixed "/")."""
    found = []
    with os.scandir(dir_fd) as it:
        for entry in it:
            name = os.fsencode(entry.name).decode("utf-8", "replace").replace("\n", "\\n")
            found.append((name, entry.is_dir(follow_symlinks=False)))
    found.sort()  # by name, before the "/" ("a/" came after "a-b" and "a.b")
    entries = [name + "/" if is_dir else name for name, is_dir in found]
    return "".join(e + "\n" for e in entries).encode("utf-8"), entries


def fd_reader(fd: int) -> ReadAt:
    return lambda pos, n: os.pread(fd, n, pos)


def bytes_reader(data: bytes) -> ReadAt:
    return lambda pos, n: data[pos:pos + n]


def _position_of_line(read_at: ReadAt, size: int, line: int) -> int:
    """Byte position where 1-based ``line`` starts; ``size`` when the text has fewer lines."""
    need = line - 1
    pos = 0
    while need and pos < size:
        chunk = read_at(pos, _SCAN)
        if not chunk:
            break
        count = chunk.count(b"\n")
        if count < need:
            need -= count
            pos += len(chunk)
            continue
        idx = -1
        for _ in range(need):
            idx = chunk.index(b"\n", idx + 1)
        return pos + idx + 1
    return pos if not need else size


def _line_of_position(read_at: ReadAt, offset: int) -> int:
    lines = 1
    pos = 0
    while pos < offset:
        chunk = read_at(pos, min(_SCAN, offset - pos))
        if not chunk:
            break
        lines += chunk.count(b"\n")
        pos += len(chunk)
    return lines


def page(read_at: ReadAt, size: int, *, shown: str, start_line: object = None, max_lines: object = None,
         offset: object = None) -> dict[str, Any]:
    """Select and cut one page; returns the paging keys plus ``content`` (see the module docstring)."""
    start = check_int("start_line", start_line, 1)
    cap_lines = check_int("max_lines", max_lines, 1)
    off = check_int("offset", offset, 0)
    if start is not None and off is not None:
        raise FileToolError("INVALID_ARGUMENT", "give start_line or offset, not both")
    cap_lines = min(cap_lines or READ_PAGE_LINES, READ_PAGE_LINES)
    if off is not None:
        if off > size:
            raise FileToolError("INVALID_ARGUMENT", f"offset {off} is past the end ({size} bytes)")
        back = min(off, 3)
        around = read_at(off - back, back + 1)
        if len(around) > back and (around[back] & 0xC0) == 0x80:
            # A continuation byte: inside a character when a lead byte starts it at most 3 bytes
            # before; otherwise the text there is not UTF-8 at all (offset 0 of a Latin-1 file).
            i = back - 1
            while i >= 0 and (around[i] & 0xC0) == 0x80:
                i -= 1
            lead = around[i] if i >= 0 else 0
            length = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            if lead >= 0xC0 and back - i < length:  # the lead's character reaches the offset
                raise FileToolError("INVALID_ARGUMENT", f"offset {off} is inside a UTF-8 character")
            raise FileToolError("NOT_UTF8", f"{shown}: not valid UTF-8 (byte {off})")
        pos = off
        start = _line_of_position(read_at, off)
    else:
        start = start or 1
        pos = _position_of_line(read_at, size, start)
    # At most ``size - pos`` bytes: the page is of the file as it was opened (a file that grew
    # since gave bytes past ``size`` with ``eof`` true); the next call sees what was appended.
    chunk = read_at(pos, max(0, min(READ_PAGE_BYTES + 1, size - pos)))
    more = len(chunk) > READ_PAGE_BYTES
    window = chunk[:READ_PAGE_BYTES]
    end = -1
    idx = -1
    for _ in range(cap_lines):
        idx = window.find(b"\n", idx + 1)
        if idx < 0:
            break
        end = idx + 1
    if idx >= 0:  # cap_lines whole lines fit in the window
        body = window[:end]
    elif not more:  # the rest of the text fits: take it all
        body = window
    elif end > 0:  # the byte cap cuts a line: stop after the last whole line
        body = window[:end]
    else:  # one line longer than the cap: cut at a character boundary
        # A character is at most 4 bytes: back over at most 3 continuation bytes. A longer run is
        # not UTF-8; the whole window is then decoded, so the page fails as NOT_UTF8 (backing
        # further gave an empty page with ``eof`` false and ``next_offset`` == ``offset``).
        cut = READ_PAGE_BYTES
        while cut > READ_PAGE_BYTES - 3 and (chunk[cut] & 0xC0) == 0x80:
            cut -= 1
        if (chunk[cut] & 0xC0) == 0x80:
            cut = READ_PAGE_BYTES
        body = window[:cut]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileToolError("NOT_UTF8", f"{shown}: not valid UTF-8 (byte {pos + exc.start})") from None
    lines = body.count(b"\n") + (1 if body and not body.endswith(b"\n") else 0)
    nxt = pos + len(body)
    return {"content": text, "start_line": start, "lines_returned": lines, "offset": pos,
            "next_offset": nxt, "eof": nxt >= size, "size": size}
