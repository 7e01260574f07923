"""HTTP routes of a project's history (F-HIS-1): search, and one item read in pages.

* ``POST /api/v1/history/search {projectId, query, sessionId?, agentId?, taskId?,
  afterContextItemId?, limit?}`` — ``{results: [...], nextAfterContextItemId}``; an unknown
  project is 404 ``PROJECT_NOT_FOUND``, a ``sessionId`` the project does not have 404
  ``SESSION_NOT_FOUND`` (a deleted session's finds nothing).
* ``GET /api/v1/history/items/{itemId}?offset=&limit=`` — a page of one item's text.

Their own errors (``QUERY_TOO_LONG``, ``HISTORY_ITEM_NOT_FOUND``…) are ``HistoryError``s, answered
by the app's handler.
"""

from __future__ import annotations

from quart import Response
from quart_trio import QuartTrio

from projections.history import MAX_READ_BYTES

from .http_parts import ApiError, Body, check_id, int_arg, json_response, read_body
from .projects_api import project_exists
from .services import Services


class HistorySearchBody(Body):
    project_id: str
    query: str
    session_id: str | None = None
    agent_id: str | None = None
    task_id: str | None = None
    after_context_item_id: str | None = None
    limit: int = 20


async def check_session_searched(svc: Services, project_id: str, session_id: str) -> None:
    """A search filtered by a session names one of the project's sessions, as every other route
    names a session: one the project does not have (none, or another project's) is 404
    ``SESSION_NOT_FOUND``. A deleted session is one it has (its search finds nothing: history
    search leaves deleted sessions out). The ``history_search`` tool checks the same."""
    if not await svc.projections.project_has_session(project_id, session_id):
        raise ApiError("SESSION_NOT_FOUND", f"project {project_id!r} has no session {session_id!r}")


def add_history_routes(app: QuartTrio, svc: Services) -> None:
    @app.post("/api/v1/history/search")
    async def history_search() -> Response:
        body = await read_body(HistorySearchBody)
        if not await project_exists(svc, check_id(body.project_id, "projectId")):
            raise ApiError("PROJECT_NOT_FOUND", f"no project {body.project_id!r}")
        for value, what in ((body.session_id, "sessionId"), (body.agent_id, "agentId"), (body.task_id, "taskId"),
                            (body.after_context_item_id, "afterContextItemId")):
            if value is not None:
                check_id(value, what)
        if body.session_id is not None:
            await check_session_searched(svc, body.project_id, body.session_id)
        hits, nxt = await svc.projections.history_search(
            body.project_id, body.query, session_id=body.session_id, agent_id=body.agent_id, task_id=body.task_id,
            after_item_id=body.after_context_item_id, limit=body.limit, cursor_name="afterContextItemId")
        return json_response({"results": [h.to_json() for h in hits], "nextAfterContextItemId": nxt})

    @app.get("/api/v1/history/items/<item_id>")
    async def history_item(item_id: str) -> Response:
        check_id(item_id, "context item id")
        offset = int_arg("offset", 0, 0, None)
        limit = int_arg("limit", 16384, 1, MAX_READ_BYTES)
        return json_response(await svc.projections.history_read(item_id, offset=offset, limit=limit))
