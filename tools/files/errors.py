"""The file tools' error type and limits: the stable surface of the contract (SPEC F-EXE-2..9).

Every failure of a file tool is a :class:`FileToolError` whose ``code`` is a stable UPPER_SNAKE
string; callers (the executor server, the agent loop) branch on the code, never on the message.
Messages name paths only as the caller spelled them (workspace-relative), never a host path.

Codes::

    INVALID_ARGUMENT        a bad argument or combination (NUL in a path, offset inside a character, ...)
    PATH_OUTSIDE_WORKSPACE  the path (or a symlink on the way) leads out of the workspace root
    NOT_FOUND               the path (or a parent directory) does not exist
    ALREADY_EXISTS          edit_file create: the target exists (in any form, even a dangling symlink
                            inside; a final symlink leading out is PATH_OUTSIDE_WORKSPACE)
    NOT_A_FILE              a directory, FIFO, device or socket where a regular file is needed
    NOT_A_DIRECTORY         a parent component (or a command cwd) is not a directory
    NOT_UTF8                the file (or the requested page of it) is not valid UTF-8
    TOO_LARGE               input, original or result above MAX_TEXT_BYTES; image above MAX_IMAGE_BYTES
                            or above MAX_IMAGE_SIDE pixels a side (tools.files.image)
    TOO_MANY_UNITS          more than MAX_UNITS edits or hunks
    TOO_MANY_LINKS          more than MAX_SYMLINK_HOPS symlinks while resolving one path
    SYMLINK_NOT_FOLLOWED    read_file with follow_symlinks false met a symlink on the path
    CWD_MOVED               a command's cwd leads elsewhere than the directory its caller judged
    HARD_LINKED             the regular file has more than one name (hard links): one may be
                            outside the workspace, so it is neither read nor edited
    NO_MATCH                an edit's old_string / a hunk / an anchor matches nothing
    NOT_UNIQUE              ... matches more than once (and replace_all is not set)
    OVERLAP                 two hunks cover overlapping lines of the original
    INVALID_PATCH           the patch text does not follow the grammar (see tools.files.patch)
    NOT_AN_IMAGE            view_image: not a whole PNG, JPEG, GIF or WebP (magic bytes, structure)
    CONFLICT                restore: the file no longer holds the expected bytes; replay: the file
                            holds neither the before nor the after bytes of a pending call
    FILE_CHANGED            edit_file rewrite/edit, patch_file, restore: another process changed the file
                            between the call's read and its write; nothing was written
    CALL_ID_REUSED          a call id already journaled for a different tool, path or arguments
    PERMISSION_DENIED       the operating system refused access
    IO_ERROR                any other operating-system failure (the errno name, no host path; a full
                            disk is said in words: "the disk is full: ...")
"""

from __future__ import annotations

import errno
from types import MappingProxyType
from typing import Mapping

from runtime.atomicfile import DISK_FULL, why_not_written  # (imports nothing of the daemon: no cycle)

KiB = 1024
MiB = 1024 * KiB

MAX_UNITS = 128                 # edits per edit_file call, hunks per patch_file call
MAX_TEXT_BYTES = 8 * MiB        # input text, original file and result file, each
MAX_IMAGE_BYTES = 5 * MiB       # view_image
READ_PAGE_BYTES = 256 * KiB     # read_file: at most this many bytes of content per call
READ_PAGE_LINES = 2000          # read_file: at most this many lines (or directory entries) per call
MAX_SYMLINK_HOPS = 40           # like the kernel's MAXSYMLINKS

LIMITS: Mapping[str, int] = MappingProxyType({
    "MAX_UNITS": MAX_UNITS,
    "MAX_TEXT_BYTES": MAX_TEXT_BYTES,
    "MAX_IMAGE_BYTES": MAX_IMAGE_BYTES,
    "READ_PAGE_BYTES": READ_PAGE_BYTES,
    "READ_PAGE_LINES": READ_PAGE_LINES,
    "MAX_SYMLINK_HOPS": MAX_SYMLINK_HOPS,
})


class FileToolError(Exception):
    """A file-tool failure the model should see: a stable ``code`` and a path-safe ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"FileToolError({self.code!r}, {self.message!r})"


def from_os_error(exc: OSError, shown: str) -> FileToolError:
    """Translate an OS error once, at the boundary; ``str(exc)`` is never used (it may hold host paths)."""
    num = exc.errno or 0
    if num == errno.ENOENT:
        return FileToolError("NOT_FOUND", f"{shown}: no such file or directory")
    if num in (errno.EACCES, errno.EPERM):
        return FileToolError("PERMISSION_DENIED", f"{shown}: permission denied")
    if num == errno.EISDIR:
        return FileToolError("NOT_A_FILE", f"{shown}: is a directory")
    if num == errno.ENOTDIR:
        return FileToolError("NOT_A_DIRECTORY", f"{shown}: a parent component is not a directory")
    if num == errno.ELOOP:
        return FileToolError("TOO_MANY_LINKS", f"{shown}: too many levels of symbolic links")
    if num == errno.ENAMETOOLONG:
        return FileToolError("INVALID_ARGUMENT", f"{shown}: file name too long")
    if num in DISK_FULL:  # (the model and the user are told in words, not by an errno name)
        return FileToolError("IO_ERROR", f"{shown}: cannot be written: {why_not_written(exc)}")
    name = errno.errorcode.get(num, "EUNKNOWN")
    return FileToolError("IO_ERROR", f"{shown}: operating-system error {name}")
