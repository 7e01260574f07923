"""The workspace facade: the file tools of SPEC §5 over one confined root directory.

``Workspace(root, journal_dir=None)`` is synchronous and holds no open fds between calls; every
call walks its path afresh from the root (:mod:`tools.files.confine`). Every public method raises
only :class:`~tools.files.errors.FileToolError` (OS errors are translated once, here, without
host paths). Writes to one workspace must be serialized by the caller (the Core's execution-domain
lock, F-EXE-8); reads may run concurrently with anything.

Results::

    read_file  -> dict, see tools.files.read
    view_image -> (bytes, mime)
    edit_file / patch_file / restore -> EditOutcome(structured, before, after, written)
        structured = {"path": <as given>, "changed": bool, "units_applied": int, "bytes_written": int}
        before     = the file's bytes before the call, None when it did not exist
        after      = the file's bytes after the call (None only when restore removed the file)
        written    = the file written: the canonical workspace-relative path ``path`` led to
                     (None only for a replayed call journaled before it was kept)

``bytes_written`` is ``len(after)`` when the content changed and 0 otherwise — an unchanged call
does not touch the file at all. All three editing methods share the atomic commit of
:mod:`tools.files.commit` and, with ``journal_dir`` and a ``call_id``, the call replay of
:mod:`tools.files.journal`.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from events.ids import SHA256_RE

from . import browse, commit, edit, image, read
from . import patch as _patch
from .confine import ResolveHook, Root, Target, check_path_text, resolve
from .errors import MAX_IMAGE_BYTES, MAX_TEXT_BYTES, FileToolError, from_os_error
from .ignore_cache import IgnoreCache
from .journal import DONE, PENDING, CallRecord, Journal, args_digest, sha256_hex



@dataclass
class EditOutcome:
    """What an editing call did; ``structured`` is the tool's structured_content."""

    structured: dict[str, Any]
    before: bytes | None
    after: bytes | None
    # The file the call wrote (or would have, when nothing changed): where ``path`` led, through
    # the symlinks on its way, as the walk found it under the write. None only for a replayed
    # call journaled before it was kept.
    written: str | None = None


@dataclass
class _Plan:
    """A computed change: publish ``after`` (None: remove) over ``before`` at the target."""

    before: bytes | None
    after: bytes | None
    units: int
    like: Any = None           # stat of the replaced file (mode kept)
    exclusive: bool = False    # create: never overwrite


# Walks one create makes when the directory it holds is removed under it each time.
_MAX_WALKS = 3


def _as_done(journal: Journal, rec: CallRecord) -> EditOutcome:
    """The outcome of the call journaled ``done`` as ``rec``, as a run of it again answers.
    Raises :class:`FileToolError` (``IO_ERROR``) when the journal lost its bytes."""
    return EditOutcome(dict(rec.structured), journal.blob(rec.before_sha256), journal.blob(rec.after_sha256),
                       rec.written_path)


def _unlinked(dir_fd: int) -> bool:
    """Whether the directory open as ``dir_fd`` was removed (it has no name left)."""
    try:
        return os.fstat(dir_fd).st_nlink == 0
    except OSError:
        return False


class Workspace:
    """The file tools over ``root``; ``journal_dir`` enables call replay (see tools.files.journal)."""

    def __init__(self, root: Path, journal_dir: Path | None = None) -> None:
        self._root = Root(Path(root))
        self.root = self._root.path
        self.journal = Journal(Path(journal_dir), str(self._root.real)) if journal_dir is not None else None
        # Whether the caller still wants the call's result, asked after an edit is computed and
        # before anything is written (the executor asks grpc: a call whose caller gave up — a
        # deadline, a cancel — must not write later over what was written since).
        self.still_wanted: Callable[[], bool] | None = None
        # Compiled ignore files kept between listings (set by whoever owns one: the executor
        # service); None: each listing compiles the ignore files it reads.
        self.ignore_cache: IgnoreCache | None = None
        # Test seams (never set in production): see confine.ResolveHook and commit.CommitHook.
        self.resolve_hook: ResolveHook | None = None
        self.commit_hook: commit.CommitHook | None = None

    # ---------------------------------------------------------------- reading

    def read_file(self, path: str, start_line: int | None = None, max_lines: int | None = None,
                  offset: int | None = None, follow_symlinks: bool = True) -> dict[str, Any]:
        """F-EXE-2: one page of a UTF-8 file or a directory listing (shape in tools.files.read).

        ``follow_symlinks=False`` (skill discovery) refuses any symlink on the path with
        ``SYMLINK_NOT_FOLLOWED``; by default symlinks are followed inside the workspace."""
        if not isinstance(follow_symlinks, bool):
            raise FileToolError("INVALID_ARGUMENT", "follow_symlinks must be true or false")
        with self._boundary(path), self._resolve(path, no_symlinks=not follow_symlinks) as t:
            shown = t.shown
            if not t.exists:
                raise FileToolError("NOT_FOUND", f"{shown}: no such file or directory")
            assert t.st is not None
            if t.is_dir:
                assert t.fd is not None
                text, _ = read.listing_text(t.fd)
                res = read.page(read.bytes_reader(text), len(text), shown=shown, start_line=start_line,
                                max_lines=max_lines, offset=offset)
                content = res.pop("content")
                entries = content.split("\n")[:-1] if content else []
                return {"path": path, "kind": "directory", "content": content, "entries": entries, **res}
            if not t.is_file:
                raise FileToolError("NOT_A_FILE", f"{shown}: not a regular file or directory")
            self._one_name(t)
            assert t.fd is not None
            res = read.page(self._abandonable(read.fd_reader(t.fd), shown), t.st.st_size, shown=shown,
                            start_line=start_line, max_lines=max_lines, offset=offset)
            content = res.pop("content")
            return {"path": path, "kind": "file", "content": content, **res}

    def read_head(self, path: str, limit: object) -> tuple[bytes, bool]:
        """A regular file's first ``limit`` bytes (1 to MAX_TEXT_BYTES) as they are, judged on
        nothing (neither UTF-8 nor binary: the caller judges), and whether the file goes on past
        them (by its size: no byte past ``limit`` is read). The Core reads ``AGENTS.md`` so, where
        the file tools' pages end at whole lines and may reach past the bytes it takes."""
        n = read.check_int("limit", limit, 1)
        if n is None or n > MAX_TEXT_BYTES:
            raise FileToolError("INVALID_ARGUMENT", f"limit must be from 1 to {MAX_TEXT_BYTES}")
        with self._boundary(path), self._resolve(path) as t:
            fd = self._regular(t)
            chunks: list[bytes] = []
            got = 0
            while got < n:
                chunk = os.pread(fd, n - got, got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks), got == n and os.fstat(fd).st_size > n

    def browse_list(self, path: str = ".", depth: int = 1, max_entries: int = browse.MAX_ENTRIES,
                    include_ignored: bool = False) -> dict[str, Any]:
        """F-HAR-3: a directory tree for workspace browsing (shape in tools.files.browse)."""
        with self._boundary(path):
            return browse.list_tree(self._root, path, depth, max_entries, include_ignored, self.still_wanted,
                                    self.ignore_cache)

    def browse_read(self, path: str, offset: int = 0, limit: int = 64 * 1024) -> dict[str, Any]:
        """F-HAR-3: a page of a text file for workspace browsing; credential files are refused."""
        with self._boundary(path):
            return browse.read_text(self._root, path, offset, limit)

    def view_image(self, path: str) -> tuple[bytes, str]:
        """F-EXE-6: the image's bytes and MIME type (by magic bytes), at most MAX_IMAGE_BYTES."""
        with self._boundary(path), self._resolve(path) as t:
            shown = t.shown
            fd = self._regular(t)
            assert t.st is not None
            if t.st.st_size > MAX_IMAGE_BYTES:
                raise FileToolError("TOO_LARGE", f"{shown}: {t.st.st_size} bytes; images are at most {MAX_IMAGE_BYTES}")
            data = commit.read_all(fd, MAX_IMAGE_BYTES, shown=shown, what="the image")
            return data, image.image_mime(data, shown)

    def read_bytes(self, path: str, limit: int = MAX_TEXT_BYTES) -> tuple[bytes, str]:
        """A regular file's raw bytes and their sha256 hex (the sharedFilesystem probe)."""
        with self._boundary(path), self._resolve(path) as t:
            data = commit.read_all(self._regular(t), limit, shown=t.shown)
            return data, sha256_hex(data) or ""

    def open_directory(self, path: str = ".", leads_to: str | None = None) -> int:
        """An open fd of a workspace directory (a command's cwd), which the caller closes;
        NOT_FOUND or NOT_A_DIRECTORY otherwise.

        The command is to start in this very directory (``/proc/self/fd/<fd>``), the one the
        confined walk reached: its host path, used a moment later, could by then lead through a
        symlink swapped in (commands themselves are not confined by this library).
        ``leads_to``: the canonical workspace-relative path (:meth:`resolve_path`'s) the caller
        judged ``path`` by; a walk that reaches another directory is ``CWD_MOVED``. Judged in
        the walk that opens the directory, it closes the gap between a caller's ``resolve`` and
        the command's start."""
        with self._boundary(path), self._resolve(path) as t:
            shown = t.shown
            if not t.exists:
                raise FileToolError("NOT_FOUND", f"{shown}: no such directory")
            if not t.is_dir:
                raise FileToolError("NOT_A_DIRECTORY", f"{shown}: not a directory")
            if leads_to is not None and t.rel != leads_to:
                raise FileToolError("CWD_MOVED", f"{shown}: leads to {t.rel!r} now, not to {leads_to!r} as it did when "
                                                 "it was judged (a symlink on it changed); the command was not started")
            assert t.fd is not None
            return os.dup(t.fd)  # (O_CLOEXEC, as every fd os.dup makes)

    def resolve_path(self, path: str) -> dict[str, Any]:
        """Where ``path`` leads: ``{"path": its canonical workspace-relative path}`` after every
        symlink the tools would follow, for the Core's workspace allowlist (F-TOOL-2), which must
        judge the entry a call reaches, not the text that names it. Missing directories (which a
        create makes) are taken as written below the deepest one that exists."""
        with self._boundary(path), self._resolve(path, missing_parents=True) as t:
            return {"path": t.rel}

    # ---------------------------------------------------------------- editing

    def edit_file(self, path: str, mode: str, content: str | None = None, edits: list[dict] | None = None,
                  call_id: str | None = None) -> EditOutcome:
        """F-EXE-3: create, rewrite or edit (rules in tools.files.edit)."""
        with self._boundary(path):
            shown = self._shown(path)
            req = edit.check_request(mode, content, edits)
            args = {"path": path, "mode": mode, "content": content, "edits": edits}

            def plan(t: Target) -> _Plan:
                if req.mode == "create":
                    if t.st is not None and stat.S_ISLNK(t.st.st_mode):
                        raise FileToolError("ALREADY_EXISTS", f"{shown}: already exists as a symbolic link"
                                                              f"{self._confined_link(path)}; create never overwrites, "
                                                              "nor writes through a link")
                    if t.exists or t.name is None:
                        raise FileToolError("ALREADY_EXISTS", f"{shown}: already exists; create never overwrites")
                    assert req.content is not None
                    return _Plan(None, req.content, 1, exclusive=True)
                original = self._original(t)
                if req.mode == "rewrite":
                    assert req.content is not None
                    return _Plan(original, edit.check_result(edit.rewritten(original, req.content), shown), 1,
                                 like=t.st)
                after = edit.check_result(edit.apply_edits(original, req.edits, shown), shown)
                return _Plan(original, after, req.units, like=t.st)

            create = req.mode == "create"
            return self._editing("edit_file", path, shown, args, call_id, plan, follow_final=not create,
                                 create_parents=create, missing_parents=not create)

    def patch_file(self, path: str, patch: str, call_id: str | None = None) -> EditOutcome:
        """F-EXE-4: apply update hunks to one existing UTF-8 file (grammar in tools.files.patch)."""
        with self._boundary(path):
            shown = self._shown(path)
            hunks = _patch.parse(patch)

            def plan(t: Target) -> _Plan:
                original = self._original(t)
                return _Plan(original, _patch.apply(original, hunks, shown), len(hunks), like=t.st)

            return self._editing("patch_file", path, shown, {"path": path, "patch": patch}, call_id, plan,
                                 missing_parents=True)

    def restore(self, path: str, content: bytes | None, expect_sha256: str | None,
                call_id: str | None = None) -> EditOutcome:
        """revert_call: put ``content`` back (None: remove the file) if the file still holds the
        bytes hashing to ``expect_sha256`` (None: it must not exist); otherwise CONFLICT.

        Already holding ``content`` (or already absent) is success with ``changed`` false.
        Recreating a missing file (``expect_sha256`` None) creates its parent directories;
        removing a file leaves them. A missing directory on the way means the file is absent:
        nothing is made for a restore that expects the file (CONFLICT), and one that removes it
        has nothing to do.
        """
        with self._boundary(path):
            shown = self._shown(path)
            if content is not None and not isinstance(content, (bytes, bytearray)):
                raise FileToolError("INVALID_ARGUMENT", "content must be bytes or None")
            if expect_sha256 is not None and (not isinstance(expect_sha256, str) or not SHA256_RE.fullmatch(expect_sha256)):
                raise FileToolError("INVALID_ARGUMENT", "expect_sha256 must be 64 lowercase hex digits or None")
            wanted = bytes(content) if content is not None else None

            def plan(t: Target) -> _Plan:
                current = self._current(t)
                if current == wanted:
                    return _Plan(current, wanted, 1, like=t.st)
                if sha256_hex(current) != expect_sha256:
                    raise FileToolError("CONFLICT", f"{shown}: the file changed since that call; not restored")
                return _Plan(current, wanted, 1, like=t.st if current is not None else None,
                             exclusive=current is None)

            args = {"path": path, "content": wanted, "expect_sha256": expect_sha256}
            recreate = wanted is not None and expect_sha256 is None
            return self._editing("restore", path, shown, args, call_id, plan, create_parents=recreate,
                                 missing_parents=not recreate)

    def recorded(self, call_id: str) -> tuple[str, EditOutcome] | None:
        """The tool and the outcome of the editing call journaled ``done`` under ``call_id``, as a
        run of it again would answer (without applying anything); None when none is (no journal,
        no record, one still pending). Raises :class:`FileToolError` (``IO_ERROR``: an unreadable
        record or lost bytes, ``CALL_ID_REUSED``: another workspace's)."""
        rec = self.journal.get(call_id) if self.journal is not None and call_id else None
        if rec is None or rec.state != DONE:
            return None
        assert self.journal is not None
        return rec.tool, _as_done(self.journal, rec)

    # ---------------------------------------------------------------- internals

    def _editing(self, tool: str, path: str, shown: str, args: dict[str, Any], call_id: str | None,
                 plan: Callable[[Target], _Plan], *, follow_final: bool = True,
                 create_parents: bool = False, missing_parents: bool = False) -> EditOutcome:
        if call_id is not None and not isinstance(call_id, str):
            raise FileToolError("INVALID_ARGUMENT", "call_id must be a string")
        journal = self.journal if call_id else None
        digest = args_digest(tool, args) if journal else ""
        if journal is not None and call_id:
            rec = journal.get(call_id)
            if rec is not None:
                if rec.tool != tool or rec.args_sha256 != digest:
                    raise FileToolError("CALL_ID_REUSED", f"call id already used for another {rec.tool} call")
                if rec.state == PENDING:
                    # (the caller's look comes before the cleanup: a Stop by the call's id answered
                    # at once lets the next write begin, whose temp file the cleanup would remove)
                    self._check_still_wanted(shown)
                    self._remove_interrupted_temps(path)
                    current = self._current_for_replay(path)
                    if current == rec.after_sha256:
                        rec.state = DONE
                        journal.put(rec)
                    elif current != rec.before_sha256:
                        raise FileToolError("CONFLICT", f"{shown}: an interrupted call left the file in an "
                                                        "unknown state; not applied again")
                if rec.state == DONE:
                    return _as_done(journal, rec)
        walks = 0
        while True:
            walks += 1
            with self._resolve(path, follow_final=follow_final, create_parents=create_parents,
                               missing_parents=missing_parents) as t:
                try:
                    return self._edit_at(t, tool, path, shown, call_id, digest, plan)
                except BaseException as exc:
                    t.unmake()  # (the directories made for a file not written: nothing is left of the call)
                    if not (create_parents and isinstance(exc, FileToolError) and exc.code != "CANCELLED"
                            and walks < _MAX_WALKS and _unlinked(t.dir_fd)):
                        raise
            # The directory the file was to go in was removed under the call (by a create that
            # had made it and failed, once it was empty): walk again, making it anew.

    def _edit_at(self, t: Target, tool: str, path: str, shown: str, call_id: str | None, digest: str,
                 plan: Callable[[Target], _Plan]) -> EditOutcome:
        """The second half of :meth:`_editing`: plan, journal and commit at the walked target."""
        journal = self.journal if call_id else None
        p = plan(t)
        self._check_still_wanted(shown)
        changed = p.before != p.after
        structured = {"path": path, "changed": changed, "units_applied": p.units,
                      "bytes_written": len(p.after) if changed and p.after is not None else 0}
        rec = None
        if journal is not None and call_id:
            rec = CallRecord(call_id, tool, path, digest, PENDING if changed else DONE,
                             journal.put_blob(p.before), journal.put_blob(p.after), structured,
                             written_path=t.rel)
            journal.put(rec)
        if changed:
            assert t.name is not None
            expect = (t.fd, p.before) if p.before is not None and t.fd is not None else None
            try:
                if p.after is None:
                    commit.remove(t.dir_fd, t.name, shown=shown, expect=expect, hook=self.commit_hook)
                else:
                    commit.write_atomic(t.dir_fd, t.name, p.after, shown=shown, exclusive=p.exclusive,
                                        like=p.like, hook=self.commit_hook, expect=expect)
            except FileToolError:
                # Nothing was written (the commit raises FileToolError only before its publish:
                # a full disk, a read-only file system, a permission taken away, the file changed
                # under the call): a failed call is not journaled. Its record left pending
                # answered a later run of the call id for a write never made ("changed", once
                # the file held those bytes by another call; CONFLICT, once it held others).
                if journal is not None and call_id:
                    # (the commit's error is the one to tell: a record that cannot be dropped
                    # stays pending, and a run of the call id takes it as a crash's)
                    with contextlib.suppress(OSError):
                        journal.drop(call_id)
                raise
            # (an OSError once the file is published, its directory's fsync failing, leaves the
            # record pending: the file holds the call's bytes, and a run of the call id finds them)
            if journal is not None and rec is not None:
                rec.state = DONE
                try:
                    journal.put(rec)
                except OSError:
                    # The file is written: the call succeeded, and says so (the caller records the
                    # change and can revert it). Its record stays pending, over a file holding the
                    # call's bytes: a run of the call id finds them and answers as done.
                    pass
        return EditOutcome(structured, p.before, p.after, t.rel)

    def _check_still_wanted(self, shown: str) -> None:
        """``CANCELLED`` when the caller no longer waits: asked before anything of an edit is
        written or removed (for the executor, also the look a ``Stop`` by the call's id finds)."""
        if self.still_wanted is not None and not self.still_wanted():
            raise FileToolError("CANCELLED", f"{shown}: the caller went away before the edit was "
                                             "written; nothing was changed")

    def _confined_link(self, path: str) -> str:
        """``PATH_OUTSIDE_WORKSPACE`` when the final symlink a create met (and left unfollowed:
        it never writes through one) leads out of the workspace, dangling or not. Every other
        tool answers that for such a path; "already exists" was true too, but hid the escape.
        A link that stays inside (dangling, a loop) is left to the caller: the entry exists, and
        this says what it leads to, for the create's ``ALREADY_EXISTS`` (read_file says "no such
        file" of a link to nothing, so the create says why it exists). One walk gives both."""
        try:
            with self._resolve(path, missing_parents=True) as t:
                if not t.exists:
                    return " whose target does not exist"
                return " to a directory" if t.is_dir else ""
        except FileToolError as exc:
            if exc.code == "PATH_OUTSIDE_WORKSPACE":
                raise
            return ""  # (a loop of links, say)

    def _remove_interrupted_temps(self, path: str) -> None:
        """A pending record means the process died while writing ``path``: its temp file (up to
        the file's whole size) would otherwise stay in the workspace for good."""
        try:
            with self._resolve(path, follow_final=False) as t:
                if t.name is not None:
                    commit.remove_temps(t.dir_fd, t.name)
        except (FileToolError, OSError):
            pass  # the directory is gone or unreadable: nothing of ours to find there

    def _abandonable(self, read_at: read.ReadAt, shown: str) -> read.ReadAt:
        """``read_at`` that stops (``CANCELLED``) once the caller no longer waits, asked every
        64 MiB: finding line 10**18 of a 50 GiB sparse file reads all of it, and kept a server
        thread busy for a minute after the caller's deadline."""
        if self.still_wanted is None:
            return read_at
        still_wanted, reads = self.still_wanted, [0]

        def checked(pos: int, n: int) -> bytes:
            reads[0] += 1
            if reads[0] % 64 == 0 and not still_wanted():
                raise FileToolError("CANCELLED", f"{shown}: the caller went away; the read was stopped")
            return read_at(pos, n)

        return checked

    def _resolve(self, path: str, *, follow_final: bool = True, create_parents: bool = False,
                 no_symlinks: bool = False, missing_parents: bool = False) -> Target:
        return resolve(self._root, path, follow_final=follow_final, create_parents=create_parents,
                       hook=self.resolve_hook, shown=self._shown(path), no_symlinks=no_symlinks,
                       missing_parents=missing_parents)

    def _shown(self, path: object) -> str:
        """How messages name the path: as given, but an absolute path as its part below the root
        (an absolute path outside the root is never echoed)."""
        text = check_path_text(path)
        if not text.startswith("/"):
            return text
        below = self._root.inside(text)
        return "<absolute path>" if below is None else ("/".join(below) or ".")

    @staticmethod
    def _regular(t: Target) -> int:
        if not t.exists:
            raise FileToolError("NOT_FOUND", f"{t.shown}: no such file")
        if not t.is_file or t.fd is None:
            raise FileToolError("NOT_A_FILE", f"{t.shown}: not a regular file")
        Workspace._one_name(t)
        return t.fd

    @staticmethod
    def _one_name(t: Target) -> None:
        """``HARD_LINKED`` for a regular file with more than one name (judged on the ``fstat`` of
        the fd that would be read). Its other names cannot be found without searching every
        directory of the file system, and one may be outside the workspace (``ln ~/.ssh/id_rsa
        notes.txt``): the file tools neither read nor edit such a file through a workspace name.
        Every read of a file's bytes (a read, an image, an edit's or a restore's original)
        passes here."""
        if t.st is not None and t.st.st_nlink > 1:
            raise FileToolError("HARD_LINKED", f"{t.shown}: a file with more than one name (hard links); another "
                                               "name may be outside the workspace, so the file tools neither read "
                                               "nor edit it (a copy of it, made by a command, has one name)")

    def _original(self, t: Target) -> bytes:
        """The existing UTF-8 regular file an update starts from (TOO_LARGE / NOT_UTF8 checked)."""
        if not t.exists:  # (an update, sent where a new file was meant: say which call makes one)
            if t.via_link:  # (a create there is ALREADY_EXISTS: the link is the entry)
                raise FileToolError("NOT_FOUND", f"{t.shown}: no such file: a symbolic link whose target does "
                                                 "not exist")
            if t.parent_missing:  # (the walk was asked to stop there: an update makes nothing)
                raise FileToolError("NOT_FOUND", f"{t.shown}: a parent directory does not exist (edit_file with "
                                                 "mode create makes a new file, and its directories)")
            raise FileToolError("NOT_FOUND", f"{t.shown}: no such file (edit_file with mode create makes a new file)")
        fd = self._regular(t)
        assert t.st is not None
        if t.st.st_size > MAX_TEXT_BYTES:
            raise FileToolError("TOO_LARGE", f"{t.shown}: the file is {t.st.st_size} bytes; at most {MAX_TEXT_BYTES}")
        data = commit.read_all(fd, MAX_TEXT_BYTES, shown=t.shown)
        edit.check_text(data, t.shown)
        return data

    def _current(self, t: Target) -> bytes | None:
        """The file's bytes for restore: None when absent; CONFLICT when not a regular file or too large."""
        if not t.exists:
            return None
        if not t.is_file or t.fd is None or (t.st is not None and t.st.st_size > MAX_TEXT_BYTES):
            raise FileToolError("CONFLICT", f"{t.shown}: no longer a regular file of at most {MAX_TEXT_BYTES} bytes")
        self._one_name(t)
        return commit.read_all(t.fd, MAX_TEXT_BYTES, shown=t.shown)

    def _current_for_replay(self, path: str) -> str | None:
        # (a missing directory on the way means the file is absent, as for a restore: a create
        # whose directories went since it was interrupted is made again, with them)
        with self._resolve(path, missing_parents=True) as t:
            return sha256_hex(self._current(t))

    @contextlib.contextmanager
    def _boundary(self, path: object) -> Iterator[None]:
        """Translate OS-level failures once; messages carry only the caller's path."""
        try:
            shown = self._shown(path)
        except FileToolError:
            shown = "<path>"
        try:
            yield
        except FileToolError:
            raise
        except OSError as exc:
            raise from_os_error(exc, shown) from None
        except UnicodeError:
            raise FileToolError("INVALID_ARGUMENT", f"{shown}: not valid Unicode") from None
