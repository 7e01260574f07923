"""HTTP routes of projects (F-API-3): a project names a workspace directory its sessions work in.

* ``GET /api/v1/projects?order=&limit=&after=`` — ``{projects: [...]}``, oldest first
  (``order=newest``: newest first); with ``limit`` a page of them and ``nextAfter``.
* ``POST /api/v1/projects {name, workspace}`` (strong trust) — 201 ``{id, name, workspace, seq}``;
  ``WORKSPACE_INVALID`` (422) for a workspace no agent may have (see :func:`runtime.workspaces.workspace_dir`).

:func:`project_exists` is asked by the routes that take a ``projectId`` (sessions, history).
"""

from __future__ import annotations

import logging

from quart import Response
from quart_trio import QuartTrio

from events import types as t
from events.store import Draft

from .http_parts import (ApiError, Body, check_name, json_response, list_page_args, next_after, one_arg, read_body,
                         read_list, require_strong)
from .list_pages import PROJECTS, PROJECTS_NEWEST
from .projection_service import ProjectionStalled
from .services import Services
from .views import project_view
from .workspaces import workspace_dir

log = logging.getLogger("lens.http")


class ProjectBody(Body):
    name: str
    workspace: str


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
