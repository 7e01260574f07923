"""Every page of a ``POST /history/search`` query, as a client pages it (``afterContextItemId``)."""

from __future__ import annotations

from typing import Any

from .conftest import Daemon


async def search_all(d: Daemon, token: str, project_id: str, query: str, session_id: str | None = None, *,
                     limit: int = 2, most_pages: int = 200) -> list[dict[str, Any]]:
    """The results of ``query`` in ``project_id`` (and ``session_id``), ``limit`` a page, every
    page joined; at most ``most_pages`` pages (a paging that never ends fails the caller's
    comparison rather than hanging it)."""
    results: list[dict[str, Any]] = []
    after = None
    for _ in range(most_pages):
        body: dict[str, Any] = {"projectId": project_id, "query": query, "limit": limit}
        if session_id is not None:
            body["sessionId"] = session_id
        if after is not None:
            body["afterContextItemId"] = after
        r = await d.post("/history/search", token, body)
        assert r.status_code == 200, r.text
        results += r.json()["results"]
        after = r.json()["nextAfterContextItemId"]
        if after is None:
            break
    return results
