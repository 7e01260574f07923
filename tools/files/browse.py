"""Workspace browsing (F-HAR-3), executor side: list a directory tree, read a page of a text file.

``list_tree(root, path, depth, max_entries, include_ignored)``::

    {"path": the directory's canonical workspace-relative path ("." for the root),
     "ignored": whether that directory itself is gitignored,
     "entries": [{"name", "path", "kind": file|directory|symlink|other, "size" (files; else None),
                  "ignored", "sensitive"}, ...],
     "truncated": true when entries stopped at ``max_entries``,
     ("sensitive": the entry's path has a credential name among its components, or it is a
     regular file with more than one name, so a read refuses it: a file inside ``.env.d/`` is
     sensitive too)
     "ignored_hidden": gitignored entries left out (include_ignored false), every one in the
     directories read, also past a cut}

Entries come level by level (breadth first: the directory's own entries first, each level in
the order of its parents, names sorted by code point), down to ``depth`` levels (1: the
directory's own entries). Symlinks are listed, never followed; ``.git`` entries are never
listed; gitignored entries are left out (and their directories not entered) unless
``include_ignored``. A name that is not UTF-8 is shown with U+FFFD. Every directory is opened
from the root, one component at a time with ``O_NOFOLLOW``, so a directory swapped for a
symlink during the walk is skipped, not followed out. Ignore files are read afresh by every
listing; their compiled form comes from ``ignore_cache`` when given (the executor service keeps
one: :mod:`.ignore_cache`), keyed by their text, so an edit is seen by the next listing.

``read_text(root, path, offset, limit)``: ``{"path" (canonical), "size", "offset",
"next_offset", "eof", "text"}`` — at most ``limit`` bytes from byte ``offset``, never splitting a
UTF-8 character (at least one whole character when one starts there). Refused: a ``.git`` path
(PATH_HIDDEN), a credential file, as asked or where symlinks lead, and a regular file with more
than one name (SENSITIVE_FILE, before a byte is read: a hard link gives a credential file a name
no rule of names recognises, and its other names cannot be found without searching every
directory, outside the workspace too), anything but a regular file (NOT_A_FILE), a file with a NUL byte in its first
8000 bytes or a page that is not UTF-8 (BINARY_FILE), an offset inside a character.
"""

from __future__ import annotations

import heapq
import os
import stat
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .confine import Root, check_path_text, resolve
from .errors import FileToolError
from .gitignore import MAX_GITIGNORE_BYTES, IgnoreFile, Rules
from .ignore_cache import IgnoreCache
from .read import check_int
from .sensitive import hidden_path, sensitive_path

MAX_ENTRIES = 50_000
MAX_DEPTH = 64
# A listing asks whether its caller still waits once this much work was done since it last
# asked: each entry read counts 1, each directory opened ASK_DIRECTORY_WEIGHT (every 256 empty
# directories, every 4096 entries of one directory).
ASK_EVERY = 4096
ASK_DIRECTORY_WEIGHT = 16
MAX_READ_BYTES = 1024 * 1024
BINARY_SNIFF_BYTES = 8000  # as git: a NUL byte in the first 8000 bytes makes a file binary

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_dir(root: Root, rel: str) -> int | None:
    """``rel`` (canonical, no symlinks) opened from the root without following any symlink."""
    fd = root.open()
    if rel == ".":
        return fd
    try:
        for comp in rel.split("/"):
            nxt = os.open(comp, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except OSError:
        os.close(fd)
        return None


def _read_small(dir_fd: int, name: str) -> bytes | None:
    """A regular file's bytes, up to the cap (not through a symlink; git refuses a symlinked
    .gitignore too)."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        # (sized by the file: a read of the cap would allocate 1 MiB for every small .gitignore)
        return os.read(fd, min(st.st_size, MAX_GITIGNORE_BYTES) or 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def _ignore_file(dir_fd: int, name: str, base: str, cache: IgnoreCache | None) -> IgnoreFile | None:
    """The ignore file ``name`` in directory ``base`` (open as ``dir_fd``) compiled, from ``cache``
    when it holds that text there; None when there is none."""
    data = _read_small(dir_fd, name)
    if not data:
        return None
    if cache is None:
        return IgnoreFile(base, data.decode("utf-8", "surrogateescape"))  # (matched as its bytes)
    return cache.get(base, data)


def _rules_for(root: Root, rel: str, cache: IgnoreCache | None) -> tuple[Rules, bool]:
    """The rules in force inside directory ``rel`` and whether ``rel`` itself is ignored."""
    fd = root.open()
    try:
        info = _open_dir(root, ".git/info")
        rules = Rules()
        if info is not None:
            try:
                rules = rules.with_file(_ignore_file(info, "exclude", "", cache))
            finally:
                os.close(info)
        rules = rules.with_file(_ignore_file(fd, ".gitignore", "", cache))
        ignored = False
        done: list[str] = []
        for comp in ([] if rel == "." else rel.split("/")):
            done.append(comp)
            here = "/".join(done)
            ignored = rules.ignored(here, True, ignored)
            try:
                nxt = os.open(comp, _DIR, dir_fd=fd)
            except OSError:
                break
            os.close(fd)
            fd = nxt
            rules = rules.with_file(_ignore_file(fd, ".gitignore", here, cache))
        return rules, ignored
    finally:
        os.close(fd)


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "directory"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def _shown_name(name: str) -> str:
    return os.fsencode(name).decode("utf-8", "replace")


def _not_utf8_on_disk(root: Root, path: str) -> str | None:
    """The leading part of ``path`` up to its first component that names nothing but is how the
    listing shows an entry whose name is not UTF-8 (U+FFFD for its bytes); None when there is
    none. Asked only after ``path`` was not found and holds U+FFFD."""
    parts = [c for c in path.split("/") if c not in ("", ".")]
    for i, part in enumerate(parts):
        if "\ufffd" not in part:
            continue
        try:
            with resolve(root, "/".join(parts[:i]) or ".") as parent:
                if not parent.is_dir or parent.fd is None:
                    return None
                names = os.listdir(parent.fd)
        except (FileToolError, OSError):
            return None
        if part in names or not any(_shown_name(n) == part for n in names):
            continue  # (a name that is U+FFFD on disk too, or nothing listed: look further, or not found)
        return "/".join(parts[:i + 1])
    return None


@contextmanager
def _shown_names_explained(root: Root, path: str) -> Iterator[None]:
    """A not-found ``path`` that is a listed name not UTF-8 on disk (or below one) says so: no
    request can spell such a name, and "no such file" about a file the listing shows misleads."""
    try:
        yield
    except FileToolError as exc:
        if exc.code != "NOT_FOUND" or "\ufffd" not in path:
            raise
        shown = _not_utf8_on_disk(root, path)
        if shown is None:
            raise
        raise FileToolError("NOT_FOUND", f"{path}: the name of {shown!r} on disk is not UTF-8 (the listing shows "
                                         f"U+FFFD for its bytes), so no request can name it; rename it to browse "
                                         f"it") from None


def list_tree(root: Root, path: str, depth: object = 1, max_entries: object = MAX_ENTRIES,
              include_ignored: object = False, still_wanted: Callable[[], bool] | None = None,
              ignore_cache: IgnoreCache | None = None) -> dict[str, Any]:
    """See the module docstring; ``still_wanted`` is asked every :data:`ASK_EVERY` directories
    and entries read (a caller that went away stops the walk: ``CANCELLED``; one huge directory
    is asked about as it is read, not only after); ``ignore_cache`` keeps compiled ignore files
    between listings (None: each listing compiles those it reads)."""
    check_path_text(path)  # (before anything reads it as text: a number there is INVALID_ARGUMENT)
    # (null is the argument left out, as read_file takes it: the default)
    levels = check_int("depth", depth, 1) or 1
    cap = check_int("max_entries", max_entries, 1) or MAX_ENTRIES
    if levels > MAX_DEPTH:
        raise FileToolError("INVALID_ARGUMENT", f"depth must be from 1 to {MAX_DEPTH}")
    if cap > MAX_ENTRIES:
        raise FileToolError("INVALID_ARGUMENT", f"max_entries must be from 1 to {MAX_ENTRIES}")
    if not isinstance(include_ignored, bool):
        raise FileToolError("INVALID_ARGUMENT", "include_ignored must be true or false")
    if hidden_path(path):
        raise FileToolError("PATH_HIDDEN", f"{path}: .git is not browsed")
    with _shown_names_explained(root, path), resolve(root, path) as t:
        if not t.exists:
            raise FileToolError("NOT_FOUND", f"{path}: no such directory")
        if not t.is_dir:
            raise FileToolError("NOT_A_DIRECTORY", f"{path}: not a directory")
        start = t.rel
    if hidden_path(start):
        raise FileToolError("PATH_HIDDEN", f"{path}: leads into .git, which is not browsed")
    rules, start_ignored = _rules_for(root, start, ignore_cache)
    entries: list[dict[str, Any]] = []
    hidden = 0
    truncated = False
    work = 0  # directories opened and entries read since the caller was last asked about

    def ask(done: int) -> None:
        nonlocal work
        work += done
        if work >= ASK_EVERY and still_wanted is not None:
            work = 0
            if not still_wanted():
                raise FileToolError("CANCELLED", f"{path}: the caller went away; the listing was stopped")

    queue: deque[tuple[str, Rules, bool, int]] = deque([(start, rules, start_ignored, 1)])
    while queue and not truncated:
        rel, dir_rules, dir_ignored, level = queue.popleft()
        ask(ASK_DIRECTORY_WEIGHT)
        fd = _open_dir(root, rel)
        if fd is None:
            continue  # gone, or swapped for a symlink since it was listed
        try:
            if rel != start:
                dir_rules = dir_rules.with_file(_ignore_file(fd, ".gitignore", rel, ignore_cache))
            shown: list[tuple[str, os.DirEntry[str], str, str, bool]] = []
            with os.scandir(fd) as it:

                def candidates() -> Iterator[tuple[str, os.DirEntry[str], str, str, bool]]:
                    nonlocal hidden
                    for entry in it:
                        ask(1)
                        name = entry.name
                        if name.lower() == ".git":
                            continue
                        kind = _kind(entry)
                        child = name if rel == "." else f"{rel}/{name}"
                        ignored = dir_rules.ignored(child, kind == "directory", dir_ignored)
                        if ignored and not include_ignored:
                            hidden += 1
                            continue
                        yield name, entry, kind, child, ignored

                # The first entries by name that still fit, and one more to tell a cut: memory
                # stays within the cap however many entries the directory holds.
                room = cap - len(entries)
                shown = heapq.nsmallest(room + 1, candidates(), key=lambda c: c[0])
            if len(shown) > room:
                truncated = True
                del shown[room:]
            for name, entry, kind, child, ignored in shown:
                size, linked = None, False
                if kind == "file":
                    try:
                        st = entry.stat(follow_symlinks=False)
                        size, linked = st.st_size, st.st_nlink > 1
                    except OSError:
                        pass
                entries.append({"name": _shown_name(name), "path": _shown_name(child), "kind": kind, "size": size,
                                "ignored": ignored, "sensitive": sensitive_path(child) or linked})
                if kind == "directory" and level < levels:
                    queue.append((child, dir_rules, ignored, level + 1))
        finally:
            os.close(fd)
    return {"path": start, "ignored": start_ignored, "entries": entries, "truncated": truncated,
            "ignored_hidden": hidden}


def read_text(root: Root, path: str, offset: object = 0, limit: object = 64 * 1024) -> dict[str, Any]:
    check_path_text(path)
    off = check_int("offset", offset, 0) or 0
    lim = check_int("limit", limit, 1) or 64 * 1024
    if lim > MAX_READ_BYTES:
        raise FileToolError("INVALID_ARGUMENT", f"limit must be from 1 to {MAX_READ_BYTES}")
    if hidden_path(path):
        raise FileToolError("PATH_HIDDEN", f"{path}: .git is not browsed")
    if sensitive_path(path):
        raise FileToolError("SENSITIVE_FILE", f"{path}: a credential file; it is listed but never read")
    with _shown_names_explained(root, path), resolve(root, path) as t:
        if hidden_path(t.rel):
            raise FileToolError("PATH_HIDDEN", f"{path}: leads into .git, which is not browsed")
        if sensitive_path(t.rel):
            raise FileToolError("SENSITIVE_FILE", f"{path}: leads to a credential file; it is listed but never read")
        if not t.exists:
            raise FileToolError("NOT_FOUND", f"{path}: no such file")
        if not t.is_file or t.fd is None or t.st is None:
            raise FileToolError("NOT_A_FILE", f"{path}: not a regular file")
        if t.st.st_nlink > 1:  # (its other name may be a credential file's: see the module's docstring)
            raise FileToolError("HARD_LINKED", f"{path}: a file with more than one name (hard links); it may be a "
                                               f"credential file under another name, so it is listed but never read")
        fd, size = t.fd, t.st.st_size
        if b"\0" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
            raise FileToolError("BINARY_FILE", f"{path}: a binary file ({size} bytes); only text is shown")
        if off > size:
            raise FileToolError("INVALID_ARGUMENT", f"offset {off} is past the end ({size} bytes)")
        data = os.pread(fd, min(lim + 4, size - off), off)  # (never past the size it had when opened)
        if data[:1] and (data[0] & 0xC0) == 0x80:
            # A continuation byte: inside a character when a lead byte starts it at most 3 bytes
            # before (as read_file tells them apart); otherwise the text there is not UTF-8 at all
            # (offset 0 of a Windows-1252 file opening with a curly quote).
            before = os.pread(fd, min(off, 3), off - min(off, 3))
            i = len(before) - 1
            while i >= 0 and (before[i] & 0xC0) == 0x80:
                i -= 1
            lead = before[i] if i >= 0 else 0
            length = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            if lead >= 0xC0 and len(before) - i < length:  # the lead's character reaches the offset
                raise FileToolError("INVALID_ARGUMENT", f"offset {off} is inside a UTF-8 character")
            raise FileToolError("BINARY_FILE", f"{path}: not UTF-8 text (byte {off})")
        cut = min(lim, len(data))
        if cut < len(data):
            while cut > 0 and (data[cut] & 0xC0) == 0x80:
                cut -= 1
            if cut == 0:  # one character longer than the limit: take it whole
                cut = 1
                while cut < len(data) and (data[cut] & 0xC0) == 0x80:
                    cut += 1
        body = data[:cut]
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FileToolError("BINARY_FILE", f"{path}: not UTF-8 text (byte {off + exc.start})") from None
        nxt = off + len(body)
        return {"path": t.rel, "size": size, "offset": off, "next_offset": nxt, "eof": nxt >= size, "text": text}
