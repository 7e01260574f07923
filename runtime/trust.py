"""Who else can change what Lens reads: the directories above the config's and the data
directory (walked up to ``/``, as sshd's ``StrictModes`` walks up from an ``authorized_keys``),
the data directory itself, and the files inside it. The config file and its own directory are
judged in :func:`runtime.config.check_private_config`, with these rules. docs/decisions.md
("Trust checks wherever a config or data directory is opened" and "Trust checks, third round")
says why each rule is what it is."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .atomicfile import others_can_change
from .errors import LensError


class DataDirNotPrivate(LensError):
    """A data directory another local user can change (:func:`check_private_data_dir`)."""

    code = "DATA_DIR_NOT_PRIVATE"


def the_fix(why: str, path: Path | str, owner: str = "this user") -> str:
    """What the message of a refusal for ``why`` (:func:`~runtime.atomicfile.others_can_change`'s
    words) tells the user to do to ``path``."""
    return f"give it to {owner} (chown)" if why.startswith("owned") else f"chmod go-w {path}"


def others_can_swap(st: os.stat_result) -> str | None:
    """Why a directory *above* the one Lens reads (with ``st``) lets another user swap what is
    below it, or ``None``: :func:`~runtime.atomicfile.others_can_change`, except that a sticky
    directory owned by this user or root (the temporary directory, mode ``1777``) passes, since
    in it no user can rename or remove a name another owns (and the next directory down, which
    is this user's or root's, is judged itself)."""
    why = others_can_change(st)
    if why is not None and not why.startswith("owned") and st.st_mode & stat.S_ISVTX:
        return None
    return why


def directories_above(directory: Path) -> list[Path]:
    """The directories above ``directory``, up to ``/``: those of its absolute path as named
    (nearest first), then those of the path its symbolic links lead to (a link on the way is
    judged by the directory holding it, and what it leads to by the directories above that)."""
    named = Path(os.path.abspath(directory))
    real = Path(os.path.realpath(directory))
    return list(dict.fromkeys([*named.parents, *real.parents]))


def loose_directory_above(directory: Path) -> tuple[Path, str] | None:
    """The nearest directory above ``directory`` that another user could use to swap it
    (:func:`others_can_swap`), with why, or ``None``. Directories that do not exist (yet) are
    skipped. ``OSError`` from a ``stat`` other than "no such file"."""
    for above in directories_above(directory):
        try:
            st = os.stat(above)
        except (FileNotFoundError, NotADirectoryError):
            continue  # (a path through a file names no directory: the store says so)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # (nor does one through a loop of links)
                continue
            raise
        why = others_can_swap(st)
        if why is not None:
            return above, why
    return None


def swap_fix(why: str, path: Path) -> str:
    """The fix a refusal for a directory above names (a sticky bit is one too)."""
    if why.startswith("owned"):
        return the_fix(why, path, "root or this user")
    return f"chmod go-w {path} (or chmod +t {path}: a sticky bit)"


def check_private_data_dir(data_dir: Path) -> list[str]:
    """:class:`DataDirNotPrivate` for a data directory that a user other than this process's
    (or root) can change, or swap: the directory (the one a symbolic link leads to) writable by
    the group or by others, or another user's (:func:`~runtime.atomicfile.others_can_change`,
    the rule the config and the pair file are held to), or a directory above it that is
    (:func:`loose_directory_above`; a sticky one of root's or this user's passes). Such a user
    could put a log of theirs in place of ``events.db`` (whose events a replay turns into what the agent
    does next), or artifacts and projections Lens serves as its own. A directory that does not
    exist yet is not judged itself (``lens serve`` makes it ``0700``), the ones above it are.

    Then the files and directories inside it (:func:`repair_data_files`): returns a note for
    each whose mode was made private again; :class:`DataDirNotPrivate` for one of another user."""
    try:
        above = loose_directory_above(data_dir)
    except OSError as exc:
        raise DataDirNotPrivate(f"cannot check the directories above the data directory {data_dir}: "
                                f"{exc.strerror}") from None
    if above is not None:
        folder, why = above
        raise DataDirNotPrivate(f"the directory {folder} above the data directory {data_dir} is {why}, who could "
                                f"put a directory of theirs in place of {data_dir} (an event log, projections "
                                f"and artifacts of theirs); check what it holds, then {swap_fix(why, folder)}, "
                                f"or keep the data directory under directories of this user alone")
    try:
        st = os.stat(data_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []  # (nothing there to judge; a path through a file is the store's to name)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a loop of links: no directory at all, which the store names
            return []
        raise DataDirNotPrivate(f"cannot check the data directory {data_dir}: {exc.strerror}") from None
    why = others_can_change(st)
    if why is not None:
        raise DataDirNotPrivate(f"data directory {data_dir} is {why}, who could replace the event log, the "
                                f"projections or the artifacts in it; check what it holds, then "
                                f"{the_fix(why, data_dir)} (Lens makes it 0700)")
    return repair_data_files(data_dir)


def repair_data_files(data_dir: Path) -> list[str]:
    """Make every file and directory inside the (private) ``data_dir`` that its group or others
    may write theirs no longer (``chmod go-w``, the other bits kept), and return a note for
    each: Lens made them (``0600`` files, ``0700`` directories) and owns them, so a looser mode
    is a leftover (a file made by hand, copied or restored under another umask), not a choice
    to keep. A symbolic link is judged by what it leads to (a dangling one is skipped, as is
    what this user cannot list or ``stat``: Lens cannot read it either).
    :class:`DataDirNotPrivate` for one owned by another user (root's pass): its owner can
    write it whatever its mode, and only ``chown`` (as root) can fix that."""
    notes: list[str] = []
    # (a directory this user cannot list, or a name it cannot stat, is passed over: Lens cannot
    # read it either, and the store names what it cannot read with its own code)
    for folder, dirs, files in os.walk(data_dir):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            path = Path(folder) / name
            try:
                st = os.stat(path)
            except OSError:
                continue  # (a dangling link or a loop, removed since it was listed, out of this user's reach)
            why = others_can_change(st)
            if why is None:
                continue
            if why.startswith("owned"):
                raise DataDirNotPrivate(f"{path} in the data directory is {why}, who can change it whatever its "
                                        f"mode; check it, then {the_fix(why, path)}")
            mode = stat.S_IMODE(st.st_mode)
            try:
                os.chmod(path, mode & ~0o022)
            except OSError as exc:
                raise DataDirNotPrivate(f"{path} in the data directory is {why} and could not be made private "
                                        f"({exc.strerror}); chmod go-w {path}") from None
            notes.append(f"{path} was {why}; made {mode & ~0o022:04o} (chmod go-w), as Lens makes it")
    return notes

