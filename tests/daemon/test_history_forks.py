"""A fork's inherited items in history (F-ACT-7, F-TOOL-7), through the real daemon: a fork's Full
Context holds its source's items up to the fork point, so ``history_search`` filtered by the fork
finds them, and they stay visible while a session holding them is (its source deleted or not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .conftest import Daemon, error_of, run_tool


async def search(d: Daemon, token: str, project_id: str, query: str, **filters: Any) -> list[dict[str, Any]]:
    """Every result of ``query``, read page by page (2 a page) through the cursor."""
    out: list[dict[str, Any]] = []
    after = None
    while True:
        body = {"projectId": project_id, "query": query, "limit": 2, **filters}
        if after is not None:
            body["afterContextItemId"] = after
        resp = await d.post("/history/search", token, body)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        out += page["results"]
        after = page["nextAfterContextItemId"]
        if after is None:
            ids = [r["contextItemId"] for r in out]
            assert len(ids) == len(set(ids)), ids  # one result per item, on any page
            return out


@dataclass
class Forked:
    project: str
    src: str
    fork: str  # forked from src after its first answer
    fork2: str  # forked from fork after its own answer
    inherited: set[str]  # src's items up to the fork point ("the quokka lives in the garden" and its answer)
    after_fork: set[str]  # src's items after the fork point
    forks_own: set[str]  # fork's own items


async def forked(d: Daemon, strong: str, reader: str) -> Forked:
    """A session with two answered inputs, a fork made after the first answer, with an answered input
    of its own, and a fork of that fork made at its last event; the items saying ``quokka``."""
    project = (await d.project(strong))["id"]
    src = (await d.session(strong, project))["id"]
    await d.submit(strong, src, "r1", "the quokka lives in the garden")
    await d.wait_idle(strong, src)
    answer = next(e["seq"] for e in await d.events(strong, src) if e["kind"] == "model.responded")
    await d.submit(strong, src, "r2", "a quokka seen after the fork")
    await d.wait_idle(strong, src)
    resp = await d.post(f"/sessions/{src}/fork", strong, {"seq": answer})
    assert resp.status_code == 201, resp.text
    fork = resp.json()["id"]
    await d.submit(strong, fork, "r1", "the fork's own quokka")
    await d.wait_idle(strong, fork)
    last = (await d.events(strong, fork))[-1]["seq"]
    resp = await d.post(f"/sessions/{fork}/fork", strong, {"seq": last})  # a fork of the fork
    assert resp.status_code == 201, resp.text
    fork2 = resp.json()["id"]
    by_id = {r["contextItemId"]: r for r in await search(d, reader, project, "quokka")}
    assert len(by_id) == 6  # each item once: 2 inherited by both forks, 2 the source's after, 2 the fork's
    inherited = {i for i, r in by_id.items() if r["sessionId"] == src and "garden" in r["snippet"]}
    after_fork = {i for i, r in by_id.items() if r["sessionId"] == src and "after" in r["snippet"]}
    forks_own = {i for i, r in by_id.items() if r["sessionId"] == fork}
    assert len(inherited) == len(after_fork) == len(forks_own) == 2
    return Forked(project, src, fork, fork2, inherited, after_fork, forks_own)


async def test_a_search_filtered_by_a_fork_finds_what_its_full_context_holds(daemon: Daemon, strong: str,
                                                                             reader: str) -> None:
    # A fork's inherited items were filed under its source only: sessionId = the fork found the
    # fork's own items alone, although its Full Context (and its view) holds the source's too.
    f = await forked(daemon, strong, reader)
    under_fork = await search(daemon, reader, f.project, "quokka", sessionId=f.fork)
    assert {r["contextItemId"] for r in under_fork} == f.inherited | f.forks_own  # never the source's later ones
    assert {r["sessionId"] for r in under_fork} == {f.fork}  # reported under the session filtered by
    under_fork2 = await search(daemon, reader, f.project, "quokka", sessionId=f.fork2)
    assert {r["contextItemId"] for r in under_fork2} == f.inherited | f.forks_own
    assert {r["sessionId"] for r in under_fork2} == {f.fork2}
    assert {r["contextItemId"] for r in await search(daemon, reader, f.project, "quokka", sessionId=f.src)} == \
        f.inherited | f.after_fork
    assert await search(daemon, reader, f.project, "quokka", sessionId=f.fork, agentId="main") == under_fork
    task = next(r["taskId"] for r in under_fork if r["contextItemId"] in f.inherited)  # the source's first task
    assert {r["contextItemId"] for r in await search(daemon, reader, f.project, "quokka", sessionId=f.fork2,
                                                     taskId=task)} == f.inherited

    # The agent of the fork of the fork searches its own history the same way (faux calls the tool).
    body = await run_tool(daemon, strong, f.fork2, "t1", "history_search", {"query": "garden", "session_id": f.fork2})
    assert body["status"] == "ok", body
    found = body["structured_content"]["results"]
    ids = {r["context_item_id"] for r in found}  # (and this run's input and call, which hold the word too)
    assert f.inherited <= ids and not ids & (f.after_fork | f.forks_own)
    assert {r["session_id"] for r in found} == {f.fork2}


async def test_a_forks_inherited_items_stay_visible_once_its_source_is_deleted(daemon: Daemon, strong: str,
                                                                               reader: str) -> None:
    # Deleting the source hid them from search and history_read, while the forks still show them.
    f = await forked(daemon, strong, reader)
    resp = await daemon.request("DELETE", f"/sessions/{f.src}", strong)
    assert resp.status_code == 200, resp.text
    remaining = {r["contextItemId"]: r for r in await search(daemon, reader, f.project, "quokka")}
    assert set(remaining) == f.inherited | f.forks_own  # what only the source held is hidden
    assert {remaining[i]["sessionId"] for i in f.inherited} == {f.src}  # (unfiltered: the session that recorded it)
    assert await search(daemon, reader, f.project, "quokka", sessionId=f.src) == []
    assert {r["contextItemId"] for r in await search(daemon, reader, f.project, "quokka", sessionId=f.fork)} == \
        f.inherited | f.forks_own
    for item in f.inherited:
        resp = await daemon.get(f"/history/items/{item}", reader)
        assert resp.status_code == 200, resp.text
        assert "quokka" in resp.json()["text"]
    for item in f.after_fork:
        resp = await daemon.get(f"/history/items/{item}", reader)
        assert (resp.status_code, error_of(resp)) == (404, "HISTORY_ITEM_NOT_FOUND")
    item = sorted(f.inherited)[0]
    body = await run_tool(daemon, strong, f.fork2, "t1", "history_read", {"context_item_id": item})
    assert body["status"] == "ok", body
    assert body["structured_content"]["context_item_id"] == item and body["structured_content"]["session_id"] == f.src

    # Every session holding them deleted: hidden at last.
    for sid in (f.fork, f.fork2):
        resp = await daemon.request("DELETE", f"/sessions/{sid}", strong)
        assert resp.status_code == 200, resp.text
    assert await search(daemon, reader, f.project, "garden") == []
    resp = await daemon.get(f"/history/items/{item}", reader)
    assert (resp.status_code, error_of(resp)) == (404, "HISTORY_ITEM_NOT_FOUND")
