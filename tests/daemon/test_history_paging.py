"""F-TOOL-7 over HTTP while sessions run: ``POST /history/search`` paged by
``afterContextItemId`` as faux sessions of the same and of another project append new items
between (and during) the pages."""

from __future__ import annotations

from typing import Any

import trio

from .conftest import Daemon, wait_until

SUMMARY = "SUMMARY: the user counted quokka sightings."
CONFIG = {
    "providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                   "script": [{"when": "Summarize the conversation so far", "text": SUMMARY}]}],
    "defaultModel": "faux/m1",
}


async def search_all(d: Daemon, token: str, body: dict[str, Any], limit: int,
                     between: Any = None) -> list[dict[str, Any]]:
    """Every page of ``body``'s search, ``limit`` results a page; ``between()`` after each page."""
    results: list[dict[str, Any]] = []
    after = None
    while True:
        r = await d.post("/history/search", token, {**body, "limit": limit,
                                                    **({"afterContextItemId": after} if after else {})})
        assert r.status_code == 200, r.text
        results += r.json()["results"]
        after = r.json()["nextAfterContextItemId"]
        if after is None:
            return results
        if between is not None:
            await between()


async def test_pages_read_while_sessions_run_hold_what_existed_once_each(daemon_factory) -> None:
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("history-pager", strong=True)
    p1, p2 = (await d.project(token, "one"))["id"], (await d.project(token, "two"))["id"]
    s1, s2 = [(await d.session(token, p1))["id"] for _ in range(2)]
    s3 = (await d.session(token, p2))["id"]
    for i in range(3):
        for sid in (s1, s2, s3):
            await d.submit(token, sid, f"seed{i}", f"quokka seed {i}")
    for sid in (s1, s2, s3):
        await d.wait_idle(token, sid)
    r = await d.post(f"/sessions/{s1}/compact", token)
    assert r.status_code == 200, r.text
    compacted = r.json()

    task = next(x for x in await search_all(d, token, {"projectId": p1, "query": "quokka", "sessionId": s1}, 100)
                if x["role"] == "user")["taskId"]
    searches = [{"projectId": p1, "query": "quokka"},
                {"projectId": p1, "query": "quokka seed", "sessionId": s1, "agentId": "main", "taskId": task},
                {"projectId": p1, "query": "quokka", "sessionId": s2}]
    before = [[x["contextItemId"] for x in await search_all(d, token, body, 100)] for body in searches]
    # items the compaction cut from s1's Working Context are still found, and its summary
    assert set(compacted["replacedItemIds"]) <= set(before[0]) and compacted["itemId"] in before[0]
    assert len(before[1]) == 2  # the seed's input and its answer, in that task only

    # New matching items arrive in both projects while the pages are read: some between two
    # pages (the pager waits for one more input to be recorded), others whenever they land.
    submitted = 0
    done, written = trio.Event(), trio.Event()

    async def writer() -> None:
        nonlocal submitted
        for j in range(40):
            if done.is_set():
                break
            for sid in (s1, s2, s3):
                await d.submit(token, sid, f"later{j}", f"quokka later {j}")
            submitted += 1
        written.set()
        for sid in (s1, s2, s3):
            await d.wait_idle(token, sid)

    async def page_after_an_input() -> None:
        seen = submitted

        async def more() -> bool:
            return submitted > seen or written.is_set()

        await wait_until(more, what="one more input recorded")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        pages = [await search_all(d, token, body, 2, page_after_an_input) for body in searches]
        done.set()

    for body, first, got in zip(searches, before, pages):
        ids = [x["contextItemId"] for x in got]
        assert len(set(ids)) == len(ids), f"a result repeated in {body}"
        assert [i for i in ids if i in set(first)] == first, f"a result skipped or moved in {body}"
        for x in got:
            assert x["sessionId"] in (s1, s2)  # never another project's
            for key in ("sessionId", "agentId", "taskId"):
                assert body.get(key, x[key]) == x[key]
    # (matching items did arrive while the pages were read: a page waited for one at least)
    assert len(await search_all(d, token, searches[0], 100)) > len(before[0])
