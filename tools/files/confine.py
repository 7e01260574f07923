"""Confinement (F-EXE-9): resolve a caller's path to an open directory fd inside the workspace.

Paths are resolved in user space, one component at a time, with ``openat``-style calls on
directory fds and ``O_NOFOLLOW``: a component is looked at with ``lstat(name, dir_fd=...)`` and
opened with ``O_NOFOLLOW`` from the fd of its parent, so nothing is ever resolved through a host
path after the root has been opened. Consequences:

* ``..`` pops one directory of the walk; popping past the root is PATH_OUTSIDE_WORKSPACE (so
  ``a/../b`` is fine, ``../x`` and ``a/../../x`` are not).
* Symlinks are followed *by the walker*: a relative target is spliced into the remaining
  components (so its ``..`` is checked like any other), an absolute target must lie inside the
  root (its real path, or the path the root was given as) and restarts the walk at the root.
  A symlink leading out, even a dangling one, is PATH_OUTSIDE_WORKSPACE; a dangling symlink
  inside is simply a missing entry (NOT_FOUND for readers). More than MAX_SYMLINK_HOPS links is
  TOO_MANY_LINKS.
* A directory swapped for a symlink *between* the check and the open is caught by ``O_NOFOLLOW``
  (the open fails with ELOOP/ENOTDIR and the component is looked at again); one swapped *after*
  it was opened no longer matters, because the walk continues from the fd it holds.
* The final entry is opened only when it is a regular file or a directory, with ``O_NONBLOCK``,
  and its ``fstat`` must agree with the ``lstat`` that chose to open it: FIFOs, devices and
  sockets are never opened for reading.
* The walk holds every directory it passed open, so it goes at most MAX_PATH_DEPTH (256)
  directories below the root: deeper is INVALID_ARGUMENT — before the walk when the path's text
  says so (a create makes nothing), during it when symlinks splice in more levels.

Absolute caller paths are accepted when they lie (lexically, component by component, so
``/w/ws-evil`` is not inside ``/w/ws``) inside the root; anything else absolute is
PATH_OUTSIDE_WORKSPACE. A path ending with "/" or "/." must name a directory (NOT_A_DIRECTORY for
a file, INVALID_ARGUMENT for ``create``). Error messages name the path as the caller wrote it (an
absolute one as its part below the root).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

from .errors import MAX_SYMLINK_HOPS, FileToolError, from_os_error

# Test seam: called as hook(event, workspace_relative_path) right before the walker opens an
# intermediate directory ("open_dir") or the final entry ("open_final"), reads a link ("readlink")
# or makes a missing directory ("mkdir"). Tests use it to swap a directory for a symlink, or race
# another creator, at exactly that moment; production code never sets it.
ResolveHook = Callable[[str, str], None]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Made(NamedTuple):
    """A directory a walk made: ``name`` in the directory open as ``parent``, and its identity."""

    parent: int
    name: str
    dev: int
    ino: int


NAME_MAX = 255  # bytes in one path component (Linux file systems)
# Directories one walk may go below the root: it holds each of them open (so ``..`` and a swap
# race cannot lead it out), and a path 20,000 directories deep ran the process out of file
# descriptors. A path the kernel accepts (PATH_MAX, 4096 bytes) has far fewer levels of real names.
MAX_PATH_DEPTH = 256


def check_path_text(path: object) -> str:
    """The argument checks every tool shares: a non-empty str, no NUL, valid Unicode."""
    if not isinstance(path, str):
        raise FileToolError("INVALID_ARGUMENT", "path must be a string")
    if "\x00" in path:
        raise FileToolError("INVALID_ARGUMENT", "path contains a NUL byte")
    if path == "":
        raise FileToolError("INVALID_ARGUMENT", "path is empty (use \".\" for the workspace root)")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise FileToolError("INVALID_ARGUMENT", "path is not valid Unicode") from None
    if len(encoded) > NAME_MAX and any(len(c) > NAME_MAX for c in encoded.split(b"/")):
        # Refused before the walk: a create would otherwise make the parents, then fail.
        raise FileToolError("INVALID_ARGUMENT", f"{path[:80]}…: a file name is longer than {NAME_MAX} bytes")
    return path


def _components(path: str) -> list[str]:
    return [c for c in path.split("/") if c not in ("", ".")]


def _too_deep(shown: str) -> FileToolError:
    return FileToolError("INVALID_ARGUMENT", f"{shown[:80]}{'…' if len(shown) > 80 else ''}: "
                                             f"leads more than {MAX_PATH_DEPTH} directories deep")


def _depth(components: list[str]) -> int:
    """How deep the walk of these components goes (lexically: ``..`` gives a level back)."""
    depth = deepest = 0
    for comp in components:
        depth = max(depth - 1, 0) if comp == ".." else depth + 1
        deepest = max(deepest, depth)
    return deepest


WORKSPACE_GONE = ("the workspace directory no longer exists (it was removed or moved after the project was made); "
                  "restore it, or make a project of its new place")


class Root:
    """The workspace root: a trusted host directory, opened afresh for every operation."""

    def __init__(self, root: Path) -> None:
        self.path = Path(os.path.abspath(root))
        self.real = Path(os.path.realpath(root))
        if not self.real.is_dir():
            raise FileToolError("NOT_A_DIRECTORY", "the workspace root is not a directory")
        self._prefixes = [_components(str(self.real)), _components(str(self.path))]

    def open(self) -> int:
        """The root opened, or NOT_FOUND saying the workspace itself is gone (removed or moved
        after the project was made): a path's own "no such file" would blame the path."""
        try:
            return os.open(self.real, _DIR_FLAGS & ~os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            raise FileToolError("NOT_FOUND", WORKSPACE_GONE) from None

    def inside(self, absolute: str) -> list[str] | None:
        """The components of an absolute path below the root, or None when it is not below it."""
        comps = _components(absolute)
        for prefix in self._prefixes:
            if comps[: len(prefix)] == prefix:
                return comps[len(prefix):]
        return None


@dataclass
class Target:
    """Where a path leads: the entry ``name`` in the open directory ``dir_fd``.

    ``name`` is None when the path is the root itself. ``st`` is the entry's lstat (after the
    last symlink), None when it does not exist. ``fd`` is the entry opened read-only (regular
    files and directories only, when the walk was asked to follow the final component).
    ``rel`` is the canonical workspace-relative path ("." for the root). ``made``: the
    directories the walk made (``create_parents``), outermost first; :meth:`unmake` removes them
    again for a call that failed. ``via_link``: the path's last component is a symlink the walk
    followed (with ``st`` None: a link to nothing). ``parent_missing``: the walk stopped at a
    missing directory (``missing_parents``).
    """

    shown: str
    rel: str
    dir_fd: int
    name: str | None
    st: os.stat_result | None
    fd: int | None = None
    _fds: list[int] = field(default_factory=list, repr=False)
    made: list[Made] = field(default_factory=list, repr=False)
    via_link: bool = False
    parent_missing: bool = False

    @property
    def exists(self) -> bool:
        return self.st is not None

    @property
    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return self.st is not None and stat.S_ISREG(self.st.st_mode)

    def unmake(self) -> None:
        """Remove the directories this walk made, innermost first, each only while it is still
        empty and still the directory made (see :func:`_remove_made`): a call that failed (no
        room for its file, its caller gone) leaves nothing of itself. Call before :meth:`close`
        (the parents' fds are held until then)."""
        _remove_made(self.made)

    def close(self) -> None:
        for fd in reversed(self._fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
        self.fd = None

    def __enter__(self) -> "Target":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def resolve(root: Root, path: str, *, follow_final: bool = True, create_parents: bool = False,
            hook: ResolveHook | None = None, shown: str | None = None, no_symlinks: bool = False,
            missing_parents: bool = False) -> Target:
    """Walk ``path`` from the root; the returned :class:`Target` owns its fds (use ``with``).

    ``follow_final=False`` stops at the final component even when it is a symlink (used by
    ``create``, which must see any existing entry). ``create_parents`` creates missing
    intermediate directories (mode 0o777 & ~umask). ``shown`` names the path in messages
    (default: as given). ``no_symlinks`` refuses a symlink met at any component of the walk
    (``SYMLINK_NOT_FOLLOWED``) instead of following it. ``missing_parents`` (without
    ``create_parents``) ends the walk at the first missing intermediate directory with a Target
    whose ``rel`` is the rest of the path as written below it (``st`` None): where a create would
    put the entry, nothing made. Raises :class:`FileToolError`.
    """
    check_path_text(path)
    shown = path if shown is None else shown
    if path.startswith("/"):
        below = root.inside(path)
        if below is None:
            named = "<absolute path>" if shown == path else shown  # never echo a host path
            raise FileToolError("PATH_OUTSIDE_WORKSPACE", f"{named}: an absolute path must lie inside the workspace root, "
                                                          f"spelled as the root's own path (a link to the workspace "
                                                          f"is no part of it); a path relative to the root needs neither")
        pending = below
    else:
        pending = _components(path)
    if _depth(pending) > MAX_PATH_DEPTH + 1:  # (+1: the final entry is not a directory the walk holds)
        raise _too_deep(shown)  # refused before the walk: a create would make the parents first
    said_dir = path.split("/")[-1] in ("", ".")  # "a/" and "a/.": the path says it is a directory
    ending = "/" if path.endswith("/") else "/."
    names_dir = said_dir and not follow_final  # a create of "a/b/": refused, so nothing is made
    fds: list[int] = []
    made: list[Made] = []
    try:
        fds.append(root.open())
        try:
            target = _walk(root, shown, pending, fds, follow_final, create_parents and not names_dir, hook,
                           no_symlinks, missing_parents, made)
        except FileToolError as exc:
            if names_dir and exc.code == "NOT_FOUND":
                raise FileToolError("INVALID_ARGUMENT",
                                    f"{shown}: a path ending with \"{ending}\" names a directory") from None
            raise
        unfollowed_link = target.st is not None and stat.S_ISLNK(target.st.st_mode)
        if said_dir and target.name is not None and not target.is_dir and not unfollowed_link:
            # (a final symlink left unfollowed — a create's — may well lead to a directory: the
            # entry exists, and the caller says what that means; "not a directory" was false)
            if target.exists:
                raise FileToolError("NOT_A_DIRECTORY", f"{shown}: not a directory (the path ends with \"{ending}\")")
            if not follow_final:
                raise FileToolError("INVALID_ARGUMENT", f"{shown}: a path ending with \"{ending}\" names a directory")
            raise FileToolError("NOT_FOUND", f"{shown}: no such directory")
        target.made = made
        return target
    except BaseException:
        _remove_made(made)  # (a deeper directory it could not make: the ones above it go too)
        for fd in reversed(fds):
            os.close(fd)
        raise


def _walk(root: Root, shown: str, pending: list[str], fds: list[int], follow_final: bool,
          create_parents: bool, hook: ResolveHook | None, no_symlinks: bool = False,
          missing_parents: bool = False, made: list[Made] | None = None) -> Target:
    names: list[str] = []
    hops = 0
    via_link = False  # (the last component written was a link the walk followed)

    def outside() -> FileToolError:
        return FileToolError("PATH_OUTSIDE_WORKSPACE", f"{shown}: leads outside the workspace")

    def done(name: str | None, st: os.stat_result | None, fd: int | None = None) -> Target:
        rel = "/".join(names + ([name] if name else [])) or "."
        return Target(shown, rel, fds[-1], name, st, fd, fds, via_link=via_link)

    def leave() -> None:
        """Close the directory the walk is in (``..``, or a link that restarts at the root): a
        directory made in it can no longer be removed by that fd, whose number may be reused."""
        fd = fds.pop()
        os.close(fd)
        if made:
            made[:] = [m for m in made if m.parent != fd]

    while pending:
        comp = pending.pop(0)
        if comp == "..":
            if len(fds) == 1:
                raise outside()
            leave()
            names.pop()
            continue
        last = not pending
        try:
            st = os.stat(comp, dir_fd=fds[-1], follow_symlinks=False)
        except FileNotFoundError:
            if last:
                return done(comp, None)
            if missing_parents and not create_parents and ".." not in pending:
                # (below a missing directory nothing exists, so no symlink: the rest is as written)
                return Target(shown, "/".join([*names, comp, *pending]), fds[-1], pending[-1], None, None, fds,
                              via_link=via_link, parent_missing=True)
            if not create_parents:
                raise FileToolError("NOT_FOUND", f"{shown}: a parent directory does not exist") from None
            if len(names) >= MAX_PATH_DEPTH:
                raise _too_deep(shown) from None
            if ".." in pending:  # refused before anything is made (it left directories behind)
                raise FileToolError("INVALID_ARGUMENT",
                                    f"{shown}: \"..\" after a directory that does not exist yet") from None
            if hook:
                hook("mkdir", "/".join(names + [comp]))
            try:
                os.mkdir(comp, 0o777, dir_fd=fds[-1])
            except FileExistsError:
                pass  # raced with another creator: look again (not ours to remove)
            else:
                if made is not None:  # (its identity: only this very directory is ever removed)
                    try:
                        mst = os.stat(comp, dir_fd=fds[-1], follow_symlinks=False)
                    except OSError:
                        pass  # gone already: nothing of ours to remove
                    else:
                        made.append(Made(fds[-1], comp, mst.st_dev, mst.st_ino))
            pending.insert(0, comp)
            continue
        except OSError as exc:
            raise from_os_error(exc, shown) from None
        if stat.S_ISLNK(st.st_mode):
            if last and not follow_final:
                return done(comp, st)
            if no_symlinks:
                raise FileToolError("SYMLINK_NOT_FOLLOWED", f"{shown}: a symbolic link on the path is not followed")
            hops = _hop(hops, shown)
            via_link = via_link or last
            if hook:
                hook("readlink", "/".join(names + [comp]))
            try:
                target = os.readlink(comp, dir_fd=fds[-1])
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.ENOENT):  # swapped since the lstat: look again
                    pending.insert(0, comp)                     # (each look counts as a hop)
                    continue
                raise from_os_error(exc, shown) from None
            if target.startswith("/"):
                below = root.inside(target)
                if below is None:
                    raise outside()
                while len(fds) > 1:
                    leave()
                names.clear()
                pending[:0] = below
            else:
                pending[:0] = _components(target)
            continue
        if last:
            if not follow_final:
                return done(comp, st)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                return done(comp, st)  # FIFO, device, socket: reported, never opened
            if hook:
                hook("open_final", "/".join(names + [comp]))
            flags = _DIR_FLAGS if stat.S_ISDIR(st.st_mode) else _FILE_FLAGS
            fd = _open_or_retry(comp, flags, fds[-1], shown)
            if fd is None:
                pending.insert(0, comp)
                hops = _hop(hops, shown)
                continue
            fds.append(fd)
            fst = os.fstat(fd)
            if stat.S_IFMT(fst.st_mode) != stat.S_IFMT(st.st_mode):  # swapped between lstat and open
                fds.pop()
                os.close(fd)
                pending.insert(0, comp)
                hops = _hop(hops, shown)
                continue
            return Target(shown, "/".join(names + [comp]), fds[-2], comp, fst, fd, fds, via_link=via_link)
        if not stat.S_ISDIR(st.st_mode):
            raise FileToolError("NOT_A_DIRECTORY", f"{shown}: a parent component is not a directory")
        if len(names) >= MAX_PATH_DEPTH:  # deeper than the text said: symlinks spliced levels in
            raise _too_deep(shown)
        if hook:
            hook("open_dir", "/".join(names + [comp]))
        fd = _open_or_retry(comp, _DIR_FLAGS, fds[-1], shown)
        if fd is None:  # swapped for a symlink (or vanished) since the lstat: look again
            pending.insert(0, comp)
            hops = _hop(hops, shown)
            continue
        fds.append(fd)
        names.append(comp)
    return _root_target(shown, names, fds)


def _remove_made(made: list[Made]) -> None:
    """rmdir the directories a walk made, innermost first, each only while its name still leads
    to the directory made (its device and inode, through the parent the walk holds): one renamed
    away and another put in its place is theirs. One that is no longer empty (another writer put
    something in it meanwhile) or gone already is left as it is."""
    while made:
        m = made.pop()
        try:
            st = os.stat(m.name, dir_fd=m.parent, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (m.dev, m.ino):
                os.rmdir(m.name, dir_fd=m.parent)
        except OSError:
            pass


def _hop(hops: int, shown: str) -> int:
    """Count one more symlink (or one more retry after a swap); a loop ends as TOO_MANY_LINKS."""
    if hops >= MAX_SYMLINK_HOPS:
        raise FileToolError("TOO_MANY_LINKS", f"{shown}: too many levels of symbolic links")
    return hops + 1


def _root_target(shown: str, names: list[str], fds: list[int]) -> Target:
    """The walk ended on a directory it holds open (the root, ``a/b/..``, a link to a directory)."""
    if len(fds) == 1:
        fd = os.dup(fds[0])
        fds.append(fd)
        return Target(shown, ".", fds[0], None, os.fstat(fd), fd, fds)
    return Target(shown, "/".join(names), fds[-2], names[-1], os.fstat(fds[-1]), fds[-1], fds)


def _open_or_retry(name: str, flags: int, dir_fd: int, shown: str) -> int | None:
    """Open ``name`` with O_NOFOLLOW; None when it turned into a symlink or vanished meanwhile."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ENXIO):
            return None
        raise from_os_error(exc, shown) from None
