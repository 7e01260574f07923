"""HTTP routes of projects (F-API-3): a project names a workspace directory its sessions work in.

* ``GET /api/v1/projects?order=&limit=&after=`` — ``{projects: [...]}``, oldest first
  (``order=newest``: newest first); with ``limit`` a page of them and ``nextAfter``.
* ``POST /api/v1/projects {name, workspace}`` (strong trust) — 201 ``{id, name, workspace, seq}``;
  ``WORKSPACE_INVALID`` (422) for a workspace no agent may have (see :func:`workspace_dir`).

:func:`project_exists` is asked by the routes that take a ``projectId`` (sessions, history).
"""

from __future__ import annotations

import logging
import posixpath
from pathlib import Path
from typing import Sequence

from quart import Response
from quart_trio import QuartTrio

from events import types as t
from events.store import Draft

from .config import ConfigError, expand_path, no_home_said
from .http_parts import (ApiError, Body, check_name, json_response, list_page_args, next_after, one_arg, read_body,
                         read_list, require_strong)
from .list_pages import PROJECTS, PROJECTS_NEWEST
from .projection_service import ProjectionStalled
from .services import Services
from .views import project_view

log = logging.getLogger("lens.http")


class ProjectBody(Body):
    name: str
    workspace: str


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
    """The resolved workspace directory ``raw`` names, or 422 ``WORKSPACE_INVALID`` saying why.

    ``daemon_dirs`` (what, path): directories of the daemon's own (its data, its config) that a
    workspace may neither hold nor lie in — the agent edits files and runs commands there.
    ``on_this_host`` false (a remote executor is configured): the directory is on the executor's
    host, so it is not looked for here; the path is taken as written, tidied (``a/./b/`` is
    ``a/b``, ``..`` taken lexically, ``//etc`` is ``/etc``), and judged by its words alone."""
    shown = raw if len(raw) <= 200 else raw[:200] + "…"
    if not raw or "\0" in raw:
        raise ApiError("WORKSPACE_INVALID", "workspace must be a non-empty path without NUL characters")
    try:
        ws = expand_path(raw, "workspace", "")  # (`./~x` is no home directory: only a leading ~ is)
    except ConfigError:  # (not empty, no NUL: said above)
        raise ApiError("WORKSPACE_INVALID", f"workspace {shown!r}: {no_home_said(raw)}") from None
    try:
        if not ws.is_absolute():
            raise ApiError("WORKSPACE_INVALID", f"workspace {shown!r} must be an absolute path")
        if not on_this_host:
            # (normpath keeps two leading slashes, as POSIX allows: `//etc` is `/etc` on Linux,
            # and would pass the checks below unseen)
            ws = Path("/" + posixpath.normpath(ws).lstrip("/"))
        elif not ws.is_dir():
            raise ApiError("WORKSPACE_INVALID", f"workspace {shown!r} is not an existing directory")
        else:
            ws = ws.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # too long a name, a symlink loop, no permission…
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ApiError("WORKSPACE_INVALID", f"workspace {shown!r} cannot be used ({reason})") from None
    if str(ws) in SYSTEM_DIRS or (str(ws) + "/").startswith(SYSTEM_TREES):
        raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} is a system directory; choose a project directory")
    own_home = _home()
    homes = [Path("/root")] + ([own_home] if own_home is not None else [])
    if ws == Path("/home") or ws in homes or ws.parent == Path("/home"):
        raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} is a home directory (its keys, credentials and shell "
                                            f"start-up files would be the agent's to edit); choose a project directory")
    for home in homes + ([Path("/home", *ws.parts[2:3])] if ws.is_relative_to("/home") else []):
        if ws.is_relative_to(home) and ws.relative_to(home).parts[0].startswith("."):
            raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} lies in a hidden directory of a home "
                                                f"(~/.ssh, ~/.config…: keys, credentials and settings); choose a project "
                                                f"directory")
    for what, path in daemon_dirs:
        own = path.resolve()
        if own.is_relative_to(ws) or ws.is_relative_to(own):
            raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} and the daemon's {what} ({own}) overlap: an agent "
                                                f"could read and change it there (credentials, the event log); choose a "
                                                f"directory apart from it, or move the {what} (dataDir, --config)")
    return ws


async def project_exists(svc: Services, pid: str) -> bool:
    await svc.projections.caught_up()
    return bool(await svc.projections.query("SELECT 1 FROM projects WHERE id = ?", (pid,)))


def add_project_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/projects")
    async def list_projects() -> Response:
        # (oldest first, as the spec's answer; order=newest: the reverse, so the newest come first)
        order = one_arg("order")
        if order not in (None, "oldest", "newest"):
            raise ApiError("INVALID_ARGUMENT", "order must be oldest (the default) or newest")
        limit, after = list_page_args("project")
        await svc.projections.caught_up()
        rows, more = await read_list(svc.projections, PROJECTS_NEWEST if order == "newest" else PROJECTS, [], [],
                                     limit, after)
        return json_response({"projects": [project_view(r) for r in rows]} | next_after(rows, more, limit))

    @app.post("/api/v1/projects")
    async def create_project() -> Response:
        require_strong("create projects")
        body = await read_body(ProjectBody)
        check_name(body.name, "name")
        ws = workspace_dir(body.workspace, [("data directory", svc.data_dir),
                                            ("config directory", svc.config_files.dir),
                                            ("pair file's directory", svc.config_files.pair.parent)],
                           on_this_host=svc.config.executor.address is None)
        pid = svc.new_id("prj")
        res = await svc.store.append(Draft(t.ProjectCreated(name=body.name, workspace=str(ws)), project_id=pid))
        try:
            await svc.projections.caught_up(res.seq)  # (so that a list read next shows it)
        except ProjectionStalled:
            # The project is in the log: an error now would be retried, and make a second one.
            # It is listed once the projections catch up (a `lens log rebuild` holds them).
            log.warning("project %s created while projections are behind the log", pid)
        return json_response({"id": pid, "name": body.name, "workspace": str(ws), "seq": res.seq}, 201)
