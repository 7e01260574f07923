"""Atomic commit of one file's bytes, under a directory fd the confinement walk holds open.

Protocol (both editing tools, ``restore`` and the call journal's records use it)::

    temp = ".<name>.lens-<random>.tmp" in the SAME directory, O_CREAT|O_EXCL|O_NOFOLLOW
    write all bytes; fchmod to the kept mode (fchown best effort); fsync(temp)
    publish:  replace   -> rename(temp, name)            (atomic replace)
              exclusive -> link(temp, name); unlink(temp) (link fails with EEXIST: never overwrites,
                           even when another writer races us to the name)
    fsync(directory)

An update (``expect``: the fd its original was read through and the bytes read) checks, after the
temp file is written and right before the publish, that the file is still what was read: the name
still leads to the inode read, and that inode still holds the bytes read (re-read and compared:
size, mtime and inode alone miss a same-size write within one timestamp tick). Otherwise
FILE_CHANGED and nothing is written. What another process writes between that check and the
rename (microseconds) is still replaced: without a lock every writer honours, no check closes it.

On any failure before the publish the temp file is unlinked and the target is untouched; no
temp file is ever left behind by a failed call. Such a failure is raised as a
:class:`FileToolError` (the OS error translated) and as nothing else: its caller may take the
call as never tried (the call journal drops its record). What fails once the file is published
(the temp file's second name removed, the directory's fsync) is raised as the ``OSError`` it is:
the file holds the new bytes, maybe not durably. A process killed mid-write leaves its temp file;
the replay of that call removes it (:func:`remove_temps`). On filesystems without hard links the exclusive
publish falls back to "lstat says absent, then rename" (a narrow race, documented here).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from typing import Callable

from .errors import FileToolError, from_os_error

# Test seam: called with the stage name ("before_publish") while the temp file exists (a removal:
# right before the unlink), so a test can force a failure, or another writer, at the worst moment.
# Production code never sets it.
CommitHook = Callable[[str], None]

_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


TEMP_STEM_BYTES = 200  # of the target's name kept in its temp file's: 1 + 200 + 22 <= NAME_MAX (255)


def temp_name(name: str) -> str:
    """A fresh temp file name beside ``name``, within NAME_MAX bytes (cut by bytes, not by
    characters: 80 characters of 文 or 😀 made a name the file system refused)."""
    raw = name.encode("utf-8", "surrogateescape")[:TEMP_STEM_BYTES]
    return f".{raw.decode('utf-8', 'surrogateescape')}.lens-{secrets.token_hex(6)}.tmp"


def remove_temps(dir_fd: int, name: str) -> int:
    """Remove the temp files of ``name`` in ``dir_fd`` (as :func:`temp_name` makes them) that a
    process killed mid-write left behind; returns how many. Only for a call known to have been
    interrupted there: a temp file of a write in progress would go too."""
    stem = re.escape(temp_name(name).rsplit(".lens-", 1)[0])
    pattern = re.compile(stem + r"\.lens-[0-9a-f]{12}\.tmp")
    removed = 0
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                try:
                    os.unlink(entry.name, dir_fd=dir_fd)
                    removed += 1
                except FileNotFoundError:
                    pass
    return removed


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and ".lens-" in name and name.endswith(".tmp")


def write_atomic(dir_fd: int, name: str, data: bytes, *, shown: str, exclusive: bool = False,
                 like: os.stat_result | None = None, hook: CommitHook | None = None,
                 expect: tuple[int, bytes] | None = None) -> None:
    """Publish ``data`` as ``name`` in ``dir_fd`` atomically; see the module docstring.

    ``like``: the stat of the file being replaced, whose permission bits (and owner, best effort)
    the new file keeps. ``exclusive``: refuse (ALREADY_EXISTS) when ``name`` exists in any form.
    ``expect``: (fd, bytes) of the original an update read; FILE_CHANGED when the file is no
    longer that (see :func:`check_unchanged`). Raises :class:`FileToolError` when nothing was
    published (the temp file gone, the target untouched), an ``OSError`` when the file was.
    """
    tmp = temp_name(name)
    mode = stat.S_IMODE(like.st_mode) if like is not None else 0o666
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=dir_fd)
    except OSError as exc:
        raise from_os_error(exc, shown) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if like is not None:
                os.fchmod(fd, mode)  # the umask applied at open; the kept mode must be exact
                if (like.st_uid, like.st_gid) != (os.getuid(), os.getgid()):
                    try:
                        os.fchown(fd, like.st_uid, like.st_gid)
                    except OSError:
                        pass
            os.fsync(fd)
        finally:
            os.close(fd)
        if hook:
            hook("before_publish")
        if expect is not None:
            check_unchanged(dir_fd, name, *expect, shown=shown)
        linked = False
        if exclusive:
            linked = _publish_exclusive(dir_fd, tmp, name, shown)
        else:
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise from_os_error(exc, shown) from None
        raise
    # Published: what fails from here on is raised as an OSError (see the module docstring).
    if linked:
        os.unlink(tmp, dir_fd=dir_fd)
    fsync_dir(dir_fd)


def _publish_exclusive(dir_fd: int, tmp: str, name: str, shown: str) -> bool:
    """Publish ``tmp`` as ``name`` unless ``name`` exists; True when ``tmp`` was linked (its own
    name is still to be removed), False when it was renamed."""
    try:
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        raise FileToolError("ALREADY_EXISTS", f"{shown}: already exists; create never overwrites") from None
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return False
        raise FileToolError("ALREADY_EXISTS", f"{shown}: already exists; create never overwrites") from None
    return True


def check_unchanged(dir_fd: int, name: str, fd: int, read: bytes, *, shown: str) -> None:
    """FILE_CHANGED unless ``name`` in ``dir_fd`` is still the file ``fd`` was opened on and it
    still holds ``read``: another process wrote, replaced or removed it since the call read it."""
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        held = os.fstat(fd)
        same = (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) and held.st_size == len(read)
        same = same and read_all(fd, len(read), shown=shown) == read
    except FileNotFoundError:
        same = False
    except FileToolError as exc:  # TOO_LARGE: it grew past what was read
        if exc.code != "TOO_LARGE":
            raise
        same = False
    if not same:
        raise FileToolError("FILE_CHANGED", f"{shown}: the file changed while this call ran (another process "
                                            "wrote, replaced or removed it); nothing was written: read the "
                                            "file again and redo the change")


def remove(dir_fd: int, name: str, *, shown: str, expect: tuple[int, bytes] | None = None,
           hook: CommitHook | None = None) -> None:
    """Unlink ``name`` (a regular file) and make the removal durable; ``expect`` and ``hook``
    (its "before_publish" is right before the unlink) and what is raised as for :func:`write_atomic`."""
    try:
        if hook:
            hook("before_publish")
        if expect is not None:
            check_unchanged(dir_fd, name, *expect, shown=shown)
        os.unlink(name, dir_fd=dir_fd)
    except OSError as exc:
        raise from_os_error(exc, shown) from None
    fsync_dir(dir_fd)


def fsync_dir(dir_fd: int) -> None:
    try:
        os.fsync(dir_fd)
    except OSError as exc:  # some filesystems refuse fsync on directories; the rename is done
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise


def read_all(fd: int, limit: int, *, shown: str, what: str = "the file") -> bytes:
    """Read a regular file through its fd; TOO_LARGE past ``limit`` bytes (checked on the bytes)."""
    chunks: list[bytes] = []
    total = 0
    pos = 0
    while True:
        chunk = os.pread(fd, min(1 << 20, limit + 1 - total), pos)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        pos += len(chunk)
        if total > limit:
            raise FileToolError("TOO_LARGE", f"{shown}: {what} is larger than {limit} bytes")
    return b"".join(chunks)
