"""History search on the real daemon answers the same after its index is rebuilt from the log:
by deleting ``projections.db`` and by ``lens log rebuild`` (F-API-7, F-TOOL-7): the same results,
order, snippets and pages, for sessions with a subagent, a compaction, a snip and a fork."""

from __future__ import annotations

from typing import Any

from .conftest import Daemon, run_lens, stop_daemon

CONFIG = {"providers": [{"id": "faux", "protocol": "faux",
                         "models": [{"id": "m1", "contextWindow": 50000}], "script": [
    {"when": "Summarize the conversation so far", "text": "SUMMARY of the quokka talk"},
    {"when": "delegate", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBJOB find the wombat"}}]},
    {"when": "SUBJOB", "text": "the subagent saw a wombat near the quokka"},
    {"when": "the time", "toolCalls": [{"name": "get_system_time", "arguments": {}}]},
]}], "defaultModel": "faux/m1",
    # (everything the compaction meets is replaced, the snipped result too: no round kept as written)
    "context": {"compaction": {"keepRecentTokens": 0}}}

QUERIES = ["quokka", "wombat", "quokka OR wombat", "quokka NOT wombat", "quo*", '"the quokka"', "数据库",
           "SUMMARY", "unix_ms", "nothing_at_all"]


async def _answers(d: Daemon, token: str, pid: str, sessions: list[str]) -> dict[Any, Any]:
    """Every query's every result (2 a page), unfiltered and by each session, and a page of each item."""
    out: dict[Any, Any] = {}
    for query in QUERIES:
        for sid in [None, *sessions]:
            results, after = [], None
            while True:
                body = {"projectId": pid, "query": query, "limit": 2}
                if sid is not None:
                    body["sessionId"] = sid
                if after is not None:
                    body["afterContextItemId"] = after
                resp = await d.post("/history/search", token, body)
                assert resp.status_code == 200, resp.text
                results += resp.json()["results"]
                after = resp.json()["nextAfterContextItemId"]
                if after is None:
                    break
            out[(query, sid)] = results
            for r in results:
                page = await d.get(f"/history/items/{r['contextItemId']}?limit=9", token)
                out[r["contextItemId"]] = (page.status_code, page.json())
    return out


async def test_search_answers_the_same_after_a_rebuild_from_the_log(daemon_factory) -> None:
    d = await daemon_factory(config=CONFIG)
    strong = await d.pair("rebuilder", strong=True)
    pid = (await d.project(strong, "p"))["id"]
    a = (await d.session(strong, pid))["id"]
    b = (await d.session(strong, pid))["id"]
    for n, text in enumerate(["the quokka lives in the garden", "please delegate", "tell me the time",
                              "我们使用数据库存储事件 quokka"]):
        await d.submit(strong, a, f"a{n}", text)
        await d.wait_idle(strong, a)
    await d.submit(strong, b, "b0", "a wombat digs a hole")
    await d.wait_idle(strong, b)
    view = await d.view(strong, a)
    result = next(v["result"]["itemId"] for v in view["items"] if v.get("result"))
    assert (await d.post(f"/sessions/{a}/context/snip", strong, {"itemIds": [result]})).status_code == 200
    fork_at = (await d.events(strong, a))[-1]["seq"]
    fork = (await d.post(f"/sessions/{a}/fork", strong, {"seq": fork_at})).json()["id"]
    assert (await d.post(f"/sessions/{a}/compact", strong)).status_code == 200
    await d.submit(strong, fork, "f0", "the fork's own quokka")
    await d.wait_idle(strong, fork)
    sessions = [a, b, fork]
    # What left the Working Context (the snipped result, everything the compaction replaced) and a
    # subagent's items are still the Full Context's: found and read whole.
    events = await d.events(strong, a)
    sub = next(e for e in events if e["kind"] == "agent.started")
    compacted = next(e for e in events if e["kind"] == "context.compacted")["body"]["replaced_item_ids"]
    assert result in compacted
    for item, agent in [(result, "main"), (compacted[0], "main"), (f"c{sub['seq']}", sub["agent_id"])]:
        page = (await d.get(f"/history/items/{item}", strong)).json()
        assert page["agentId"] == agent and page["eof"] and page["text"], page
    found = await d.post("/history/search", strong, {"projectId": pid, "query": "wombat", "agentId": sub["agent_id"]})
    assert {r["role"] for r in found.json()["results"]} == {"user", "assistant"}, found.text
    before = await _answers(d, strong, pid, sessions)
    assert len(before[("quokka OR wombat", None)]) >= 8 and before[("SUMMARY", a)], before
    await stop_daemon(d)

    # projections.db deleted: the next start rebuilds it from the log
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (d.data_dir / name).unlink(missing_ok=True)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert await _answers(d2, strong, pid, sessions) == before
    await stop_daemon(d2)

    # `lens log rebuild` with the daemon stopped
    out = await run_lens(d.root, "log", "rebuild", "--data", str(d.data_dir))
    assert out.returncode == 0, out.stderr
    d3 = await daemon_factory(config=CONFIG, root=d.root)
    assert await _answers(d3, strong, pid, sessions) == before
