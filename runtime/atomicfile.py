"""Files read and replaced safely: the config files, the pair file and the artifacts.

:func:`read_regular_file` (and :func:`open_regular_file`, for a reader of parts) never blocks (a FIFO in a config file's place held a worker thread,
or the event loop, for ever) and never reads without bound (``--config /dev/zero``);
:func:`replace_atomically` leaves the old bytes or the new, never a mix; :func:`why_not_written`
says in words why a write failed, a full disk above all.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Callable


# The errors of a write that found no room: a full disk, a used-up quota, and a file that may
# not grow past a size limit (RLIMIT_FSIZE, a filesystem's largest file), which is as full
# for that file.
DISK_FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is used up",
             errno.EFBIG: "the file may not grow that large"}


def why_not_written(exc: OSError) -> str:
    """Why a write failed, for a message: "the disk is full: no space left on the device
    (ENOSPC)" for the errors of :data:`DISK_FULL`, the system's words (``strerror``) otherwise."""
    detail = DISK_FULL.get(exc.errno or 0)
    if detail is not None:
        return f"the disk is full: {detail} ({errno.errorcode[exc.errno or 0]})"
    return exc.strerror or str(exc)


class NotARegularFile(OSError):
    """Something other than a regular file (a directory, a FIFO, a device, a link not followed)."""


class FileTooLarge(OSError):
    """A file larger than the reader's limit (``strerror`` names the limit)."""


_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")]


def kind_of(mode: int) -> str:
    """'a directory', 'a FIFO'… for a mode that is not a regular file's."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular_file(path: Path | str, max_bytes: int, *, follow_symlinks: bool = True,
                      check: Callable[[os.stat_result], None] | None = None,
                      dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """``path`` opened for reading (a descriptor the caller closes) and its ``fstat``: a regular
    file of at most ``max_bytes``. Opened without blocking (``O_NONBLOCK``: opening a FIFO waits
    for a writer otherwise) and judged on the open descriptor, which is closed when this raises.
    Raises ``OSError``: the ``open`` error itself (``FileNotFoundError``, ``ELOOP`` for a link
    when ``follow_symlinks`` is false…), :class:`NotARegularFile` or :class:`FileTooLarge`, each
    with a ``strerror`` fit for a message, or what ``check`` raises: called with the ``fstat``
    before anything is read (the pair file's ownership and mode are judged on the file read,
    never on a name another user may swap in between). ``dir_fd``: ``path`` is a name in that
    open directory."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(errno.EINVAL, f"it is {kind_of(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise FileTooLarge(errno.EFBIG, f"it is larger than {max_bytes} bytes")
        if check is not None:
            check(st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular_file(path: Path | str, max_bytes: int, *, follow_symlinks: bool = True,
                      check: Callable[[os.stat_result], None] | None = None, dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them, opened and judged
    as :func:`open_regular_file` does (which says what is raised); the descriptor is always
    closed."""
    fd, _ = open_regular_file(path, max_bytes, follow_symlinks=follow_symlinks, check=check, dir_fd=dir_fd)
    try:
        chunks, total = [], 0
        while total <= max_bytes:  # (a file growing while it is read is still held to the limit)
            chunk = os.read(fd, max_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise FileTooLarge(errno.EFBIG, f"it is larger than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def replace_atomically(path: Path, raw: bytes, mode: int = 0o600) -> None:
    """Write ``raw`` to a temporary file beside ``path``, fsync it, give it ``mode``, rename it
    over ``path`` and fsync the directory (made if need be). A failure (``OSError``) leaves
    ``path`` as it was and no temporary file behind; readers see the old bytes or the new, never
    a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        replace_in_directory(dir_fd, path.name, raw, mode)
    finally:
        os.close(dir_fd)


def replace_in_directory(dir_fd: int, name: str, raw: bytes, mode: int = 0o600,
                         before_rename: Callable[[], None] | None = None) -> None:
    """:func:`replace_atomically` for the file ``name`` in the open directory ``dir_fd``: the
    temporary file, the rename and the fsync all in that one directory, whatever its path names
    by then. ``before_rename`` runs once the new bytes are on disk, just before the rename; what
    it raises leaves ``name`` as it was (and no temporary file)."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = -1
    try:
        # (opened inside the `try`: a SIGINT raised as the open returns still removes the file, by
        # its name; an open that failed made none, and one there already is not this one's)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), mode)
        if before_rename is not None:
            before_rename()
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        if fd != -1 or not isinstance(exc, OSError):
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
        raise
    os.fsync(dir_fd)


def sync_directory(path: Path) -> None:
    """fsync the directory ``path``: the names made, renamed or removed in it last through a
    power cut. Raises ``OSError``."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def others_can_change(st: os.stat_result) -> str | None:
    """Why a file or directory with ``st`` is not its owner's alone, in words for a message
    ("writable by other users (mode 0664)", "owned by another user (uid 1001)"), or ``None``.
    Writable by the group or by others, or owned by a user other than this process's or root,
    as sshd's ``StrictModes`` judges an ``authorized_keys`` and the directories above it (a
    sticky bit makes no exception). Readable by others is not judged here."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"owned by another user (uid {st.st_uid})"
    return others_can_write(st)


def others_can_write(st: os.stat_result) -> str | None:
    """The mode part of :func:`others_can_change`: why a file or directory with ``st`` is
    writable by the group or by others ("writable by other users (mode 0664)"), or ``None``.
    The owner is not judged (a file replaced by a new one keeps its mode, not its owner)."""
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
