"""History search on the real daemon answers the same after its index is rebuilt from the log:
by deleting ``projections.db`` and by ``lens log rebuild`` (F-API-7, F-TOOL-7): the same results,
order, snippets and pages, for sessions with a subagent, a compaction, a snip and a fork."""

from __future__ import annotations

from typing import Any, Sequence

from events import types as t
from events.reader import LogReader, StoredEvent, StoredRow
from projections.history import HistoryProjection
from projections.projector import Projector, open_projections_db

from .conftest import Daemon, run_lens, stop_daemon
from .history_pages import search_all
from .test_abort_keeps_partial import _abort_after_seeing

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
            out[(query, sid)] = results = await search_all(d, token, pid, query, sid)
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


class _BeforeKeptText(HistoryProjection):
    """The history index as a build before ``partial_text`` filled it: the same rows, but no item
    for a ``model.failed`` (msgspec skipped the field it did not know)."""

    def __init__(self, version: int) -> None:
        super().__init__()
        self.version = version

    def apply(self, conn: Any, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
        assert events is not None
        super().apply(conn, rows, [se for se in events if not isinstance(se.event, t.ModelFailed)])


async def test_an_index_of_another_version_is_rebuilt_at_start_and_finds_the_kept_texts(daemon_factory) -> None:
    """History's version (7) is not raised for the kept texts: no log written before them holds
    one, so an index built then is what a rebuild gives, and the daemon indexes new ones as they
    come. An index of another version is rebuilt at start (and then finds them); one of the same
    version that a build before them filled from a log holding them (a downgrade, then back)
    lacks them until ``lens log rebuild --projection history``."""
    config = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1"}], "script": [
        {"when": "fail midway", "chunks": ["quokkas failing "], "error": {"code": "OVERLOADED", "message": "later"}},
        {"when": "slowly", "chunks": ["quokkas aborted ", "never seen"], "chunkDelayMs": 600000},
    ]}], "defaultModel": "faux/m1"}
    d = await daemon_factory(config=config)
    strong = await d.pair("rebuilder", strong=True)
    pid = (await d.project(strong, "p"))["id"]
    sid = (await d.session(strong, pid))["id"]
    await d.submit(strong, sid, "r0", "fail midway please")
    await d.wait_idle(strong, sid)
    async with d.sse(strong, params={"session": sid}) as stream:
        await d.submit(strong, sid, "r1", "go on slowly")
        await stream.until(lambda m: m.event == "model.delta" and m.json()["text"] == "quokkas aborted ")
        assert (await d.post(f"/sessions/{sid}/abort", strong)).json()["aborted"] is True
    await d.wait_idle(strong, sid)

    async def kept(daemon: Daemon) -> list[tuple[str, str]]:
        resp = await daemon.post("/history/search", strong, {"projectId": pid, "query": "quokkas"})
        assert resp.status_code == 200, resp.text
        return sorted((r["role"], r["contextItemId"]) for r in resp.json()["results"])

    failed = [f"c{e['seq']}" for e in await d.events(strong, sid) if e["kind"] == "model.failed"]
    assert len(failed) == 2 and await kept(d) == sorted(("assistant", i) for i in failed)
    await stop_daemon(d)

    def index_as_before(version: int) -> None:
        """projections.db's history as a build before the kept texts left it, at ``version``."""
        for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
            (d.data_dir / name).unlink(missing_ok=True)
        projector = Projector(LogReader(d.data_dir), open_projections_db(d.data_dir), [_BeforeKeptText(version)])
        try:
            projector.catch_up()
        finally:
            projector.close()
            projector.reader.close()

    # Of an older version: rebuilt at the next start, the kept texts found.
    index_as_before(HistoryProjection.version - 1)
    d2 = await daemon_factory(config=config, root=d.root)
    assert await kept(d2) == sorted(("assistant", i) for i in failed)
    await stop_daemon(d2)

    # Of the same version, filled without them: kept as it is (nothing says it differs) ...
    index_as_before(HistoryProjection.version)
    d3 = await daemon_factory(config=config, root=d.root)
    assert await kept(d3) == []
    await stop_daemon(d3)
    # ... until the history projection is rebuilt.
    out = await run_lens(d.root, "log", "rebuild", "--data", str(d.data_dir), "--projection", "history")
    assert out.returncode == 0, out.stderr
    d4 = await daemon_factory(config=config, root=d.root)
    assert await kept(d4) == sorted(("assistant", i) for i in failed)
