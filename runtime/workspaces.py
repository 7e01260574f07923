"""The directory a project's workspace names, and what no workspace may be (F-API-3).

:func:`workspace_dir` is asked by ``POST /projects`` (422 ``WORKSPACE_INVALID``) and again by the
executor pool before it starts a local executor on a stored project's workspace: a project made
while a remote executor served (its path judged by its words alone) is checked on this host then.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Sequence

from .config import ConfigError, expand_path, no_home_said
from .errors import LensError


class WorkspaceInvalid(LensError):
    """A workspace no agent may have: not absolute, missing, a system or home directory, or
    overlapping one of the daemon's own directories."""

    code = "WORKSPACE_INVALID"


# Never a workspace: the whole filesystem, the system's own top-level directories, and anything
# inside the kernel's virtual filesystems (an agent may edit and run commands in its workspace).
SYSTEM_DIRS = frozenset({"/", "/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr",
                         "/var", "/proc", "/sys", "/dev", "/run"})
# Trees no workspace may lie in: the system's programs, libraries and settings, its state, and
# the virtual file systems (``/usr/local/src/x`` too: a project belongs elsewhere).
SYSTEM_TREES = ("/bin/", "/boot/", "/etc/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/sbin/", "/usr/",
                "/proc/", "/sys/", "/dev/", "/run/", "/var/lib/", "/var/log/", "/var/cache/", "/var/spool/",
                "/var/mail/", "/var/backups/")


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):  # no HOME and no passwd entry
        return None


def workspace_dir(raw: str, daemon_dirs: Sequence[tuple[str, Path]] = (), *, on_this_host: bool = True) -> Path:
    """The resolved workspace directory ``raw`` names, or :class:`WorkspaceInvalid` saying why.

    ``daemon_dirs`` (what, path): directories of the daemon's own (its data, its config) that a
    workspace may neither hold nor lie in — the agent edits files and runs commands there.
    ``on_this_host`` false (a remote executor is configured): the directory is on the executor's
    host, so it is not looked for here, and a leading ``~`` is refused (a home of this host, not
    of that one); the path is taken as written, tidied (``a/./b/`` is
    ``a/b``, ``..`` taken lexically, ``//etc`` is ``/etc``), and judged by its words alone."""
    shown = raw if len(raw) <= 200 else raw[:200] + "…"
    if not raw or "\0" in raw:
        raise WorkspaceInvalid("workspace must be a non-empty path without NUL characters")
    if not on_this_host and raw.startswith("~"):
        raise WorkspaceInvalid(f"workspace {shown!r} must be an absolute path (a ~ would be a home of this host, not "
                               f"of the executor's)")
    try:
        ws = expand_path(raw, "workspace", "")  # (`./~x` is no home directory: only a leading ~ is)
    except ConfigError:  # (not empty, no NUL: said above)
        raise WorkspaceInvalid(f"workspace {shown!r}: {no_home_said(raw)}") from None
    try:
        if not ws.is_absolute():
            raise WorkspaceInvalid(f"workspace {shown!r} must be an absolute path")
        if not on_this_host:
            # (normpath keeps two leading slashes, as POSIX allows: `//etc` is `/etc` on Linux,
            # and would pass the checks below unseen)
            ws = Path("/" + posixpath.normpath(ws).lstrip("/"))
        elif not ws.is_dir():
            raise WorkspaceInvalid(f"workspace {shown!r} is not an existing directory")
        else:
            ws = ws.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # too long a name, a symlink loop, no permission…
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise WorkspaceInvalid(f"workspace {shown!r} cannot be used ({reason})") from None
    if str(ws) in SYSTEM_DIRS or (str(ws) + "/").startswith(SYSTEM_TREES):
        raise WorkspaceInvalid(f"workspace {str(ws)!r} is a system directory; choose a project directory")
    own_home = _home()
    homes = [Path("/root")] + ([own_home] if own_home is not None else [])
    if ws == Path("/home") or ws in homes or ws.parent == Path("/home"):
        raise WorkspaceInvalid(f"workspace {str(ws)!r} is a home directory (its keys, credentials and shell "
                               f"start-up files would be the agent's to edit); choose a project directory")
    for home in homes + ([Path("/home", *ws.parts[2:3])] if ws.is_relative_to("/home") else []):
        if ws.is_relative_to(home) and ws.relative_to(home).parts[0].startswith("."):
            raise WorkspaceInvalid(f"workspace {str(ws)!r} lies in a hidden directory of a home "
                                   f"(~/.ssh, ~/.config…: keys, credentials and settings); choose a project "
                                   f"directory")
    for what, path in daemon_dirs:
        own = path.resolve()
        if own.is_relative_to(ws) or ws.is_relative_to(own):
            raise WorkspaceInvalid(f"workspace {str(ws)!r} and the daemon's {what} ({own}) overlap: an agent "
                                   f"could read and change it there (credentials, the event log); choose a "
                                   f"directory apart from it, or move the {what} (dataDir, --config)")
    return ws
