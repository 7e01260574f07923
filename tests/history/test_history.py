"""The history projection, history_search / history_read, through the real store and projector."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import trio

from events import types as t
from events.reader import LogReader
from events.secrets import Secrets, marker
from events.store import Draft, open_store
from projections.history import RANKED_LIMIT, HistoryError, HistoryIndex, HistoryProjection, fts_query
from projections.projector import Projector, open_projections_db
from tools.base import ToolContext
from tools.history import history_tools

P1, P2 = "prj_one", "prj_two"


class Log:
    """Appends realistic session events with the envelope the actor would give them."""

    def __init__(self, store) -> None:
        self.store = store
        self.n = 0

    async def ev(self, event, *, project=P1, session="s1", agent="main", task="t1", request=None) -> int:
        res = await self.store.append(Draft(event, project_id=project, session_id=session, agent_id=agent,
                                            task_id=task, request_id=request))
        return res.seq

    async def session(self, session: str, project: str = P1) -> None:
        await self.ev(t.SessionCreated(), project=project, session=session, task=None)

    async def user(self, text: str, **kw) -> int:
        self.n += 1
        rid = f"r{self.n}"
        await self.ev(t.InputSubmitted(content=[t.TextPart(text)]), request=rid, **kw)
        return await self.ev(t.InputPlaced(input_request_id=rid), **kw)

    async def assistant(self, text: str, **kw) -> int:
        return await self.ev(t.ModelResponded(text=text), **kw)

    async def tool(self, name: str, args: dict, result: str, **kw) -> tuple[int, int]:
        self.n += 1
        cid = f"call{self.n}"
        a = await self.ev(t.ModelResponded(tool_calls=[t.ToolCall(cid, name, json.dumps(args))]), **kw)
        b = await self.ev(t.ToolFinished(call_id=cid, name=name, content=[t.TextPart(result)]), **kw)
        return a, b


@pytest.fixture
async def world(tmp_path: Path):
    data = tmp_path / "data"
    async with open_store(data) as store:
        log = Log(store)
        await log.session("s1")
        await log.user("please find the flaky zanzibar test")
        await log.assistant("I will search the zanzibar module first")
        await log.tool("read_file", {"path": "zanzibar.py"}, "def zanzibar():\n    return 42  # ünïcödé ✓")
        # a subagent of s1, in its own task
        await log.ev(t.AgentStarted(parent_agent_id="main", role="subagent", prompt="look for zanzibar in docs"),
                     agent="sub_1", task="t2")
        await log.assistant("zanzibar appears in docs/guide.md", agent="sub_1", task="t2")
        # a compaction that replaces the early items (they stay searchable)
        await log.ev(t.ContextCompacted(summary="we looked at zanzibar", replaced_item_ids=["c3", "c4"]))
        # another session, same project, and a session of another project
        await log.session("s2")
        await log.user("zanzibar again in session two", session="s2", task="t9")
        await log.session("s3", project=P2)
        await log.user("zanzibar secret of another project", session="s3", project=P2, task="t8")
        # a hidden item
        hidden_seq = await log.user("zanzibar hidden by the user", session="s2", task="t9")
        await log.ev(t.ContextEdited(op="hide", item_ids=[f"c{hidden_seq}"]), session="s2", task="t9")
        yield data, log


def project(data: Path) -> tuple[Projector, HistoryIndex]:
    reader = LogReader(data)
    projector = Projector(reader, open_projections_db(data), [HistoryProjection()])
    projector.catch_up()
    return projector, HistoryIndex(projector.conn)


def ids(hits) -> list[str]:
    return [h.context_item_id for h in hits]


async def test_search_spans_sessions_subagents_and_compacted_items(world) -> None:
    data, _ = world
    projector, index = project(data)
    hits, nxt = index.search(P1, "zanzibar", limit=50)
    roles = {(h.session_id, h.agent_id, h.role) for h in hits}
    assert ("s1", "main", "user") in roles
    assert ("s1", "sub_1", "user") in roles  # the subagent's assignment
    assert ("s1", "sub_1", "assistant") in roles
    assert ("s2", "main", "user") in roles
    assert "c3" in ids(hits) and "c4" in ids(hits)  # replaced by the compaction, still found
    assert any(h.role == "summary" for h in hits)
    assert nxt is None
    for h in hits:
        assert "[zanzibar]" in h.snippet.lower()
    projector.close()


async def test_other_projects_and_hidden_items_are_invisible(world) -> None:
    data, _ = world
    projector, index = project(data)
    hits, _ = index.search(P1, "zanzibar", limit=100)
    texts = " ".join(h.snippet for h in hits)
    assert "secret" not in texts and "hidden" not in texts
    assert all(h.project_id == P1 for h in hits)
    hits2, _ = index.search(P2, "zanzibar", limit=100)
    assert [h.session_id for h in hits2] == ["s3"]
    hidden = projector.conn.execute("SELECT item_id FROM history_items WHERE hidden != 0").fetchall()
    assert len(hidden) == 1
    with pytest.raises(HistoryError) as info:
        index.read(hidden[0][0])
    assert info.value.code == "HISTORY_ITEM_NOT_FOUND"
    secret = projector.conn.execute("SELECT item_id FROM history_items WHERE project_id = ?", (P2,)).fetchall()[0][0]
    with pytest.raises(HistoryError):
        index.read(secret, project_id=P1)  # another project's item, by id, is not there either
    projector.close()


@pytest.mark.parametrize("flt, expect", [
    ({"session_id": "s2"}, {("s2",)}),
    ({"agent_id": "sub_1"}, {("s1",)}),
    ({"task_id": "t2"}, {("s1",)}),
    ({"session_id": "s1", "agent_id": "main"}, {("s1",)}),
])
async def test_filters(world, flt, expect) -> None:
    data, _ = world
    projector, index = project(data)
    hits, _ = index.search(P1, "zanzibar", limit=100, **flt)
    assert hits
    assert {(h.session_id,) for h in hits} == expect
    for key, val in flt.items():
        assert all(getattr(h, key) == val for h in hits)
    projector.close()


async def test_paging_never_skips_or_repeats(tmp_path: Path) -> None:
    """Many agents whose per-agent ordinals collide; pages of 3 equal the full list, in order."""
    data = tmp_path / "data"
    async with open_store(data) as store:
        log = Log(store)
        await log.session("s1")
        for i in range(8):
            for agent in ("main", "sub_a", "sub_b"):
                await log.assistant(f"ordinal {i} of {agent} mentions quokka", agent=agent, task=f"t{i % 2}")
    projector, index = project(data)
    for query in ("quokka", "quokka ordinal mentions"):
        full, _ = index.search(P1, query, limit=100)
        assert len(full) == 24
        seen: list[str] = []
        after = None
        while True:
            page, after = index.search(P1, query, limit=3, after_item_id=after)
            seen += ids(page)
            if after is None:
                break
        assert seen == ids(full)
        assert len(set(seen)) == len(seen)
    projector.close()


def _all_pages(index: HistoryIndex, query: str, limit: int, **kw) -> list[str]:
    """Every result of ``query``, page by page; each page but the last is full."""
    seen: list[str] = []
    after = None
    while True:
        page, after = index.search(P1, query, limit=limit, after_item_id=after, **kw)
        seen += ids(page)
        if after is None:
            return seen
        assert len(page) == limit


@pytest.mark.parametrize("many", [False, True])
async def test_a_left_out_item_leaves_no_page_short_and_none_repeated(tmp_path: Path, many: bool) -> None:
    """``leave_out`` (the history_search call making the search) is no match: pages in either
    order (relevance with few matches, newest first with many) are the whole list without it."""
    data = tmp_path / "data"
    async with open_store(data) as store:
        log = Log(store)
        await log.session("s1")
        for i in range(RANKED_LIMIT + 5 if many else 10):
            await log.assistant(f"note {i} about quokkas" + " and more" * (i % 4))
    projector, index = project(data)
    full = _all_pages(index, "quokkas", 3)
    assert len(full) == (RANKED_LIMIT + 5 if many else 10) and len(set(full)) == len(full)
    for left in (full[1], full[3], full[-1]):  # inside the first page, the first of the second, the last
        assert _all_pages(index, "quokkas", 3, leave_out=left) == [i for i in full if i != left]
    # an item that is no match, or of no project, leaves everything in
    assert _all_pages(index, "quokkas", 3, leave_out="c999999") == full
    projector.close()


@pytest.mark.parametrize("query", [
    'zanzibar OR', 'NOT zanzibar', 'NEAR(zanzibar', 'zanzibar"', '"unterminated zanzibar', 'col:zanzibar',
    '(zanzibar', 'zanzibar)', '^zanzibar', 'zanz*', '*', 'zanzibar AND', "{text}: zanzibar",
])
async def test_hostile_queries_never_break_the_grammar(world, query) -> None:
    data, _ = world
    projector, index = project(data)
    try:
        hits, _ = index.search(P1, query, limit=10)
    except HistoryError as exc:
        assert exc.code == "INVALID_ARGUMENT"  # e.g. nothing searchable left
    else:
        assert isinstance(hits, list)
    projector.close()


async def test_query_limits(world) -> None:
    data, _ = world
    projector, index = project(data)
    with pytest.raises(HistoryError) as info:
        index.search(P1, "a\0b")
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(HistoryError) as info:
        index.search(P1, "x" * (100 * 1024))
    assert info.value.code == "QUERY_TOO_LONG"
    index.search(P1, "x" * 4096)  # exactly at the limit: fine (no match)
    with pytest.raises(HistoryError):
        index.search(P1, "x" * 4097)
    for bad in (0, 101):
        with pytest.raises(HistoryError):
            index.search(P1, "zanzibar", limit=bad)
    projector.close()


def test_fts_query_quotes_everything() -> None:
    assert fts_query('foo "bar baz" qu*') == '"foo" AND "bar baz" AND "qu"*'
    assert fts_query('a"b OR') == '"ab" AND "OR"'


def test_or_and_not_in_capitals_between_two_terms_are_operators() -> None:
    assert fts_query("a OR b c") == '("a" OR "b") AND "c"'
    assert fts_query("a AND b") == fts_query("a b") == '"a" AND "b"'
    assert fts_query('a NOT b OR "c d"') == '("a") NOT ("b" OR "c d")'
    assert fts_query("a OR b OR a") == '("a" OR "b")'  # (a repeated alternative counts once)
    # first, last, beside another operator, quoted or in lower case: words
    assert fts_query("NOT a") == '"NOT" AND "a"'
    assert fts_query("a OR") == '"a" AND "OR"'
    assert fts_query("a OR OR b") == '"a" AND ("OR" OR "b")'
    assert fts_query('a "OR" b or c') == '"a" AND "OR" AND "b" AND "or" AND "c"'
    assert fts_query("AND") == '"AND"'
    # every term counts towards the limit, excluded ones too
    fts_query(" OR ".join(f"w{i}" for i in range(32)))
    with pytest.raises(HistoryError) as info:
        fts_query(" NOT ".join(f"w{i}" for i in range(33)))
    assert info.value.code == "QUERY_TOO_LONG"


def test_a_quoted_term_without_a_word_is_ignored_like_an_unquoted_one() -> None:
    # `wombat "🎉"` matched nothing (an empty phrase ANDed in), while `wombat 🎉` found wombats.
    for query in ('wombat "🎉"', 'wombat "!!!"', 'wombat "-"', 'wombat " "'):
        assert fts_query(query) == fts_query("wombat 🎉") == '"wombat"', query
    for query in ('"!!!"', '"🎉" "-"'):
        with pytest.raises(HistoryError) as info:
            fts_query(query)
        assert info.value.code == "INVALID_ARGUMENT" and "no searchable words" in info.value.message


def test_a_query_holds_at_most_32_distinct_terms() -> None:
    # snippet() costs about the fourth power of the terms: "a* " * 400 took minutes.
    assert fts_query("a* " * 1300) == '"a"*'  # repeated terms collapse to one
    words = [f"w{i}" for i in range(33)]
    assert fts_query(" ".join(words[:32])).count(" AND ") == 31  # exactly at the limit
    with pytest.raises(HistoryError) as info:
        fts_query(" ".join(words))
    assert info.value.code == "QUERY_TOO_LONG" and "33 distinct terms; at most 32" in info.value.message


async def test_chinese_japanese_korean_and_full_width_text_is_found_by_any_run_of_it(tmp_path: Path) -> None:
    # unicode61 makes a whole run of CJK one token: "数据库" inside "我们使用数据库存储事件" was
    # never found, nor "sqlite" in full-width "ＳＱＬｉｔｅ".
    data = tmp_path / "data"
    async with open_store(data) as store:
        log = Log(store)
        await log.session("s1")
        zh = await log.user("我们使用数据库存储事件，然后重建投影。")
        ja = await log.assistant("東京タワーに行きました。ｶﾞｲﾄﾞ付き")
        ko = await log.tool("run_command", {"cmd": "ls"}, "데이터베이스를 사용합니다")
        fw = await log.assistant("ＳＱＬｉｔｅ　の　ｆｉｌｅ")
        mixed = await log.assistant("修复了SQLite数据库的bug")
    projector, index = project(data)

    def found(query: str) -> set[str]:
        return set(ids(index.search(P1, query, limit=50)[0]))

    assert found("数据库") == {f"c{zh}", f"c{mixed}"}
    assert found("数") == {f"c{zh}", f"c{mixed}"}  # one character
    assert found("重建投影") == {f"c{zh}"}
    assert found("据数") == set()  # the characters must follow each other
    assert found("数据 事件") == {f"c{zh}"}  # every word must match
    assert found("タワー") == found("東京") == {f"c{ja}"}
    assert found("ガイド") == {f"c{ja}"}  # half-width kana, by their full-width forms
    assert found("カイド") == set()  # ガ is not カ
    assert found("데이터") == {f"c{ko[1]}"}  # inside a word with its particle
    assert found("sqlite") == {f"c{fw}", f"c{mixed}"}  # full-width letters match plain ones
    assert found("ＦＩＬＥ") == {f"c{fw}"}
    assert found("sqlite数据库") == found('"SQLite 数据库"') == {f"c{mixed}"}
    assert found("SQL*") == {f"c{fw}", f"c{mixed}"}

    snippets = {h.context_item_id: h.snippet for h in index.search(P1, "数据库", limit=50)[0]}
    assert snippets[f"c{zh}"] == "我们使用[数据库]存储事件，然后重建投影。"
    assert snippets[f"c{mixed}"] == "修复了SQLite[数据库]的bug"
    hit = index.search(P1, "ガイド", limit=5)[0][0]
    assert hit.snippet == "東京タワーに行きました。[ｶﾞｲﾄﾞ]付き"  # a lead of up to 12 characters
    projector.close()


async def test_read_pages_by_utf8_bytes_with_a_digest(world) -> None:
    data, _ = world
    projector, index = project(data)
    item = projector.conn.execute("SELECT item_id, text FROM history_items WHERE text LIKE '%ünï%'").fetchall()[0]
    full = item[1].encode()
    for limit in (1, 2, 3, 5, 7, 64):
        out = b""
        offset = 0
        digests = set()
        while True:
            page = index.read(item[0], offset=offset, limit=limit)
            assert page["offset"] == offset
            chunk = page["text"].encode()
            assert len(chunk) <= max(limit, 4)  # one whole character may exceed a tiny limit
            out += chunk
            digests.add(page["digest"])
            offset = page["nextOffset"]
            if page["eof"]:
                break
        assert out == full
        assert digests == {hashlib.sha256(full).hexdigest()}
    # an offset inside a multi-byte character is refused, not silently shifted
    inside = full.index("ü".encode()) + 1
    with pytest.raises(HistoryError) as info:
        index.read(item[0], offset=inside)
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(HistoryError):
        index.read(item[0], offset=len(full) + 1)
    projector.close()


KEY = ("ANTHROPIC_API_KEY", "sk-ant-api03-Hq7Lz2Wn5Rb8Tc4Vd1Xf6Yg9")


@pytest.mark.parametrize("keyed", [False, True], ids=["no keys", "a key configured"])
async def test_incremental_equals_rebuild(world, keyed: bool) -> None:
    data, log = world
    secrets = Secrets({KEY[1]: KEY[0]}) if keyed else None
    reader = LogReader(data)
    inc = Projector(reader, open_projections_db(data), [HistoryProjection(secrets)])
    # catch up in small steps while more events arrive (some quoting the key, stored as written)
    inc.catch_up()
    await log.user("later zanzibar input", session="s2", task="t9")
    await log.tool("read_file", {"path": f"{KEY[1]}.txt"}, f"zanzibar key={KEY[1]}", session="s2", task="t9")
    inc.catch_up()
    await log.assistant(f"the key {KEY[1]} again", session="s2", task="t9")
    inc.catch_up()
    incremental = inc.dump("history")
    rebuilt = Projector(reader, open_projections_db(data, memory=True), [HistoryProjection(secrets)])
    rebuilt.rebuild()
    assert rebuilt.dump("history") == incremental
    assert (KEY[1] in repr(incremental)) is not keyed
    assert (marker(KEY[0]) in repr(incremental)) is keyed
    inc.close()
    rebuilt.close()


async def test_a_deleted_sessions_items_stay_hidden_when_projected_in_one_batch(world) -> None:
    """Items were held back and written at the end of a batch, after the deletion had flagged
    the session's rows: a rebuild (one batch) — or a deletion right after the session's last
    items — made the deleted session's items searchable again."""
    data, log = world
    inc, index = project(data)  # s1's items are projected before the deletion...
    await log.session("s4")
    seq = await log.user("walrus sings in session four", session="s4")
    await log.ev(t.SessionDeleted(), session="s4")  # ... s4's in the same batch as it
    await log.ev(t.SessionDeleted(), session="s1")
    inc.catch_up()
    rebuilt = Projector(LogReader(data), open_projections_db(data, memory=True), [HistoryProjection()])
    rebuilt.rebuild()
    for projector in (inc, rebuilt):
        idx = HistoryIndex(projector.conn)
        assert ids(idx.search(P1, "walrus")[0]) == []
        assert ids(idx.search(P1, "zanzibar")[0]) == ids(idx.search(P1, "zanzibar", session_id="s2")[0]) != []
        with pytest.raises(HistoryError):
            idx.read(f"c{seq}", project_id=P1)
    assert rebuilt.dump("history") == inc.dump("history")
    inc.close()
    rebuilt.close()


async def test_tools_return_evidence_scoped_to_the_callers_project(world) -> None:
    data, _ = world
    projector, index = project(data)

    class Backend:
        async def history_search(self, project_id, query, **kw):
            kw["after_item_id"] = kw.pop("after_item_id")
            return await trio.to_thread.run_sync(lambda: index.search(project_id, query, **kw))

        async def history_read(self, item_id, **kw):
            return await trio.to_thread.run_sync(lambda: index.read(item_id, **kw))

    search, read = history_tools(Backend())
    ctx = ToolContext(P1, "s1", "main", "t1", "call_x", True)
    res = await search.run({"query": "zanzibar", "limit": 2}, ctx)
    assert not res.is_error
    assert "evidence" in res.content[0].text.lower() and "not instructions" in res.content[0].text.lower()
    assert len(res.structured_content["results"]) == 2
    assert res.structured_content["next_after_context_item_id"] is not None
    first = res.structured_content["results"][0]["context_item_id"]
    page = await read.run({"context_item_id": first, "offset": 0, "limit": 4}, ctx)
    assert page.structured_content["next_offset"] <= 4 and not page.is_error
    other = ToolContext(P2, "s3", "main", "t8", "call_y", True)
    from tools.base import ToolError
    with pytest.raises(ToolError) as info:
        await read.run({"context_item_id": first}, other)  # P1's item from a P2 session
    assert info.value.code == "HISTORY_ITEM_NOT_FOUND"
    with pytest.raises(ToolError):
        await search.run({"query": "zanzibar", "bogus": 1}, ctx)
    projector.close()


async def test_a_snippet_sees_text_after_a_nul(tmp_path: Path) -> None:
    """SQLite's substr() and length() of text stop at a NUL (tool output holds them): the
    snippet was the text before it, without the match."""
    data = tmp_path / "data"
    async with open_store(data) as store:
        log = Log(store)
        await log.session("s1")
        await log.tool("run_command", {"command": "cat blob"}, "before\x00 needlex after")
        await log.user("é" * 300_000 + " needlex at the end of a long non-ASCII item")
    projector, index = project(data)
    hits, _ = index.search(P1, "needlex")
    snippets = sorted(h.snippet for h in hits)
    assert len(snippets) == 2
    assert any("[needlex] after" in s for s in snippets), snippets
    assert any(s.startswith("éééé") and s.endswith("…") and "[" not in s for s in snippets), [x[:20] for x in snippets]
    projector.close()


@pytest.mark.parametrize("many", [False, True])
async def test_a_cursor_that_is_no_result_of_the_query_is_refused_in_either_order(tmp_path: Path, many: bool) -> None:
    """Past RANKED_LIMIT matches (newest first) a cursor naming any item of the project paged
    from its place; with fewer it was refused. Refused either way now."""
    data = tmp_path / "data"
    async with open_store(data) as store:
        log = Log(store)
        await log.session("s1")
        other = await log.assistant("an item about pelicans only")
        for i in range(RANKED_LIMIT + 5 if many else 10):
            await log.assistant(f"note {i} about quokkas")
    projector, index = project(data)
    page, after = index.search(P1, "quokkas", limit=3)
    assert after is not None and len(page) == 3
    assert ids(index.search(P1, "quokkas", limit=3, after_item_id=after)[0]) != ids(page)  # a real cursor pages
    with pytest.raises(HistoryError) as info:
        index.search(P1, "quokkas", limit=3, after_item_id=f"c{other}")
    assert info.value.code == "INVALID_ARGUMENT" and "not a result of this query" in info.value.message
    projector.close()


def test_a_query_holds_at_most_64_indexed_words() -> None:
    # A run of CJK characters is one term but a phrase of one word per character, and so is a
    # quoted phrase: 1,300 of them in one 4 KiB query took 7 s over 30k items (holding the one
    # read connection every list waits for). The cap counts the words the index is asked for.
    at_limit = {
        "cjk run": "的" * 64,
        "quoted phrase": '"' + " ".join(f"w{i}" for i in range(64)) + '"',
        "plain words": " ".join(f"x{i}-y{i}" for i in range(32)),  # 32 terms of two words each
    }
    past_limit = {
        "cjk run": "的" * 65,
        "quoted phrase": '"' + " ".join(f"w{i}" for i in range(65)) + '"',
        "plain words": " ".join(f"x{i}-y{i}" for i in range(31)) + " z1-z2-z3",  # 32 terms, 65 words
    }
    for query in at_limit.values():
        fts_query(query)  # accepted
    for name, query in past_limit.items():
        with pytest.raises(HistoryError) as info:
            fts_query(query)
        assert info.value.code == "QUERY_TOO_LONG", name
        assert "65 words; at most 64" in info.value.message, (name, info.value.message)
    assert fts_query("的" * 64 + " " + "的" * 64) == fts_query("的" * 64)  # a repeated term counts once


async def test_an_items_size_and_digest_are_stored_when_it_is_indexed(world) -> None:
    # read() encoded and hashed an item's whole text for every page (0.15 s a page of a 30 MB
    # item, holding the one read connection); both are now computed once, when it is indexed.
    data, _ = world
    projector, index = project(data)
    rows = projector.conn.execute("SELECT item_id, text, size, digest FROM history_items").fetchall()
    assert rows
    for item_id, text, size, digest in rows:
        full = text.encode()
        assert (size, digest) == (len(full), hashlib.sha256(full).hexdigest()), item_id
    projector.close()


def test_pages_of_four_byte_characters_and_nuls_read_from_the_stored_bytes() -> None:
    # read() takes only the page's bytes (and up to four more) from the stored text now.
    import apsw
    conn = apsw.Connection(":memory:")
    HistoryProjection().create(conn)
    text = "a😀é\0b😀"
    HistoryProjection()._flush(conn, [("c1", P1, "s1", "main", "t1", "user", 1, text)])
    index = HistoryIndex(conn)
    full = text.encode()
    for limit in (1, 2, 3, 4, 5, 100):
        out, offset = b"", 0
        while True:
            page = index.read("c1", offset=offset, limit=limit)
            assert (page["size"], page["digest"]) == (len(full), hashlib.sha256(full).hexdigest())
            out += page["text"].encode()
            offset = page["nextOffset"]
            if page["eof"]:
                break
        assert out == full, limit
