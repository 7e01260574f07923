"""Property tests of history_search and history_read (F-TOOL-7): history_read's byte pages, and
history_search's pages read while new items arrive, and the history projection against a rebuild
and against the sessions' own Full Contexts.

Texts mix 1- to 4-byte UTF-8 characters, combining marks and NULs. A "character" here is what the
spec's "never splitting a character" can mean for UTF-8 bytes: one code point. A page may end
between a letter and a combining mark that follows it (a grapheme cluster is not kept whole);
paging page after page still gives back the item's bytes exactly.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path
from typing import Any

import apsw
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import types as t
from events.reader import LogReader
from events.store import Draft, open_store
from projections.history import MAX_LIMIT, RANKED_LIMIT, HistoryError, HistoryIndex, HistoryProjection
import projections.projector as projector_mod
from projections.projector import Projector, open_projections_db
from projections.session_state import EMPTY_ANSWER, SessionState, fold
from runtime.actor import _reset_for_fork

MAX_READ = 1024 * 1024

# 1-byte, 2-byte (é, ß, Cyrillic), 3-byte (✓, CJK, a combining mark U+0301 is 2 bytes, U+20D7 is
# 3), 4-byte (emoji, a Gothic letter), a NUL, a zero-width joiner and a variation selector.
CHARS = st.sampled_from(list("aZ \n\0éßд✓数ह\u0301\u0308\u20d7\u200d\ufe0f😀𐍈\U0001f44d\U0001f3fd"))
TEXTS = st.lists(CHARS, max_size=60).map("".join) | st.text(max_size=40)


def index_of(text: str) -> HistoryIndex:
    conn = apsw.Connection(":memory:")
    HistoryProjection().create(conn)
    HistoryProjection()._flush(conn, [("c1", "prj", "s1", "main", "t1", "user", 1, text)])
    return HistoryIndex(conn)


def starts(data: bytes) -> set[int]:
    """The byte offsets at which a UTF-8 character begins (and the end)."""
    return {i for i, b in enumerate(data) if b & 0xC0 != 0x80} | {len(data)}


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, limits=st.lists(st.integers(1, 12) | st.sampled_from([MAX_READ]), min_size=1, max_size=8))
def test_pages_reassemble_the_item_exactly_and_carry_its_digest(text: str, limits: list[int]) -> None:
    index = index_of(text)
    full = text.encode()
    digest = hashlib.sha256(full).hexdigest()
    out, offset, pages = b"", 0, 0
    while True:
        limit = limits[pages % len(limits)]
        page = index.read("c1", offset=offset, limit=limit)
        chunk = page["text"].encode()
        assert page["offset"] == offset
        assert page["nextOffset"] == offset + len(chunk)
        assert (page["size"], page["digest"]) == (len(full), digest)  # the whole item's, on every page
        assert page["eof"] == (page["nextOffset"] == len(full))
        assert page["nextOffset"] in starts(full)
        if offset < len(full):
            assert chunk, "a page before the end always progresses"
        out += chunk
        offset = page["nextOffset"]
        pages += 1
        if page["eof"]:
            break
    assert out == full
    assert pages <= max(1, len(full))


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, offset=st.integers(-3, 250), limit=st.integers(-2, 12) | st.sampled_from([MAX_READ, MAX_READ + 1]))
def test_any_offset_and_limit_is_one_exact_page_or_a_clear_refusal(text: str, offset: int, limit: int) -> None:
    index = index_of(text)
    full = text.encode()
    ok = starts(full)
    try:
        page = index.read("c1", offset=offset, limit=limit)
    except HistoryError as exc:
        assert exc.code == "INVALID_ARGUMENT"
        # refused exactly when the offset is outside the item or inside a character, or the
        # limit is outside 1..1 MiB
        assert offset not in ok or not 1 <= limit <= MAX_READ, (offset, limit)
        return
    assert offset in ok and 1 <= limit <= MAX_READ
    end = page["nextOffset"]
    assert page["text"].encode() == full[offset:end]
    fitting = [b for b in ok if offset < b <= offset + limit]
    if offset == len(full):
        assert (end, page["eof"], page["text"]) == (offset, True, "")
    elif fitting:
        assert end == max(fitting)  # as many whole characters as the limit holds
    else:
        assert end == min(b for b in ok if b > offset)  # a limit below one character: that character


# --------------------------------------------------------------------------- paging while items arrive

WORDS = ["quokka", "wombat", "numbat"]
SESSIONS = [("prj_one", "s1"), ("prj_one", "s2"), ("prj_two", "s3")]  # s3: another project


def _drafts(choices: list[tuple[int, int, int, int]], base: int) -> list[Draft]:
    """Assistant answers: (session, agent, task, words) picked by index; each text distinct."""
    out = []
    for i, (s, a, tk, w) in enumerate(choices):
        project, session = SESSIONS[s]
        words = [WORDS[j] for j in range(len(WORDS)) if w >> j & 1] or ["dingo"]
        text = " ".join(words * (1 + (base + i) % 3)) + f" item{base + i}"  # relevance varies
        out.append(Draft(t.ModelResponded(text=text), project_id=project, session_id=session,
                         agent_id=("main", "sub_1")[a], task_id=("t1", "t2")[tk]))
    return out


CHOICE = st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 1), st.integers(0, 7))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(CHOICE, min_size=1, max_size=40), many=st.booleans(),
    later=st.lists(st.lists(CHOICE, max_size=6), max_size=12), limit=st.integers(1, 5),
    query=st.sampled_from(["quokka", "quokka wombat", "numbat*", "item*"]),
    flt=st.sampled_from([{}, {"session_id": "s1"}, {"agent_id": "sub_1"}, {"task_id": "t2"},
                         {"session_id": "s2", "agent_id": "main", "task_id": "t1"}]),
)
def test_paging_while_items_arrive_skips_and_repeats_none_of_what_existed(
        start: list, many: bool, later: list[list], limit: int, query: str, flt: dict) -> None:
    """Pages read while new items are appended and projected between them hold every match that
    existed when paging began, once each and in their first order; filters and the project
    hold on every page. ``many``: more than RANKED_LIMIT matches (newest-first order)."""
    if many:  # past RANKED_LIMIT matches of every query under the filter
        match = ({"s2": 1}.get(flt.get("session_id"), 0), int(flt.get("agent_id") == "sub_1"),
                 int(flt.get("task_id") == "t2"), 7)
        start = [match] * (RANKED_LIMIT + 1) + start

    async def scenario(data: Path) -> None:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(t.SessionCreated(), project_id="prj_one", session_id="s1"))
            await store.append(*_drafts(start, 0))
            projector = Projector(LogReader(data), open_projections_db(data), [HistoryProjection()])
            try:
                projector.catch_up()
                index = HistoryIndex(projector.conn)
                everything, more = index.search("prj_one", query, limit=MAX_LIMIT, **flt)
                while more:
                    page, more = index.search("prj_one", query, limit=MAX_LIMIT, after_item_id=more, **flt)
                    everything += page
                before = [h.context_item_id for h in everything]
                assert (len(before) > RANKED_LIMIT) == many
                seen: list = []
                after, n = None, len(start)
                for step in range(10_000):
                    page, after = index.search("prj_one", query, limit=limit, after_item_id=after, **flt)
                    seen += page
                    if after is None:
                        break
                    if step < len(later) and later[step]:
                        await store.append(*_drafts(later[step], n))
                        n += len(later[step])
                        projector.catch_up()
                ids_seen = [h.context_item_id for h in seen]
                assert len(set(ids_seen)) == len(ids_seen), "a result repeated"
                assert set(before) <= set(ids_seen), "a result that existed was skipped"
                assert [i for i in ids_seen if i in set(before)] == before, "the first order changed"
                for h in seen:
                    assert h.project_id == "prj_one" and h.session_id != "s3"
                    for key, value in flt.items():
                        assert getattr(h, key) == value
            finally:
                projector.close()
                projector.reader.close()

    with tempfile.TemporaryDirectory() as tmp:
        trio.run(scenario, Path(tmp) / "data")


# --------------------------------------------------------------------------- incremental equals rebuild

# Texts: any, or any then the word MARK, which a search must then find wherever it is visible.
MARK = "zqxmark"
MARKED = re.compile(rf"(?:^|\s){MARK}(?=\s|$)")
TEXT = st.text(max_size=12) | st.text(max_size=10).map(lambda s: f"{s} {MARK}")

OPS = st.lists(st.one_of(
    st.tuples(st.just("session"), st.integers(0, 1)),
    st.tuples(st.sampled_from(["input", "input_no_id", "skill_input"]), st.integers(0, 9), TEXT),
    st.tuples(st.sampled_from(["place", "withdraw", "delete"]), st.integers(0, 9)),
    st.tuples(st.sampled_from(["agent", "skill", "instruction", "compact", "result"]), st.integers(0, 9),
              st.integers(0, 9), TEXT),
    st.tuples(st.just("answer"), st.integers(0, 9), st.integers(0, 9), TEXT, st.integers(0, 2)),
    st.tuples(st.sampled_from(["hide", "unhide"]), st.integers(0, 9), st.integers(0, 9), st.integers(0, 99)),
    # a fork of any session (deleted ones and forks too) at any of its events
    st.tuples(st.just("fork"), st.integers(0, 9), st.integers(0, 99)),
    st.tuples(st.just("catch_up"), st.sampled_from([1, 2, 5, 2000])),
), max_size=45)


class Sessions:
    """Turns drawn operations into the events a session's actor would record, in its envelopes."""

    def __init__(self) -> None:
        self.live: list[tuple[str, str]] = []  # (project, session) not deleted
        self.every: list[tuple[str, str]] = []  # (project, session), deleted ones too
        self.seqs: dict[str, list[int]] = {}  # each session's events
        self.agents: dict[str, list[str]] = {}
        self.started: dict[tuple[str, str], int] = {}  # the seq each agent of a session started at
        self.queued: dict[str, list[str]] = {}
        self.calls: dict[tuple[str, str], list[str]] = {}
        self.items: dict[tuple[str, str], list[str]] = {}  # item ids of each agent, as projected
        self.n = 0

    def drafts(self, op: tuple, seq: int) -> list[Draft]:
        """The drafts of ``op``, to be appended one by one from ``seq`` + 1 on."""
        out = self._drafts(op, seq)
        assert len(out) <= 1
        for draft in out:
            self.seqs.setdefault(draft.session_id, []).append(seq + 1)
        return out

    def _drafts(self, op: tuple, seq: int) -> list[Draft]:
        kind = op[0]
        if kind == "session":
            self.n += 1
            project, session = ("prj_one", "prj_two")[op[1]], f"s{self.n}"
            self.live.append((project, session))
            self.every.append((project, session))
            self.agents[session], self.queued[session] = ["main"], []
            self.started[(session, "main")] = seq + 1
            return [Draft(t.SessionCreated(), project_id=project, session_id=session)]
        if kind == "fork":
            if not self.every:
                return []
            project, source = self.every[op[1] % len(self.every)]
            point = self.seqs[source][op[2] % len(self.seqs[source])]
            self.n += 1
            session = f"s{self.n}"
            self.live.append((project, session))
            self.every.append((project, session))
            # As of the fork point: the agents then, their items then; nothing queued or running.
            self.agents[session] = [a for a in self.agents[source] if self.started[(source, a)] <= point]
            for a in self.agents[session]:
                self.started[(session, a)] = self.started[(source, a)]
                self.items[(session, a)] = [i for i in self.items.get((source, a), [])
                                            if int(i[1:].split(".")[0]) <= point]
            self.queued[session] = []
            return [Draft(t.SessionCreated(forked_from_session=source, forked_from_seq=point),
                          project_id=project, session_id=session)]
        if not self.live:
            return []
        project, session = self.live[op[1] % len(self.live)]
        env = dict(project_id=project, session_id=session)
        if kind in ("input", "input_no_id", "skill_input"):
            self.n += 1
            rid = f"r{self.n}" if kind != "input_no_id" else f"seq:{seq + 1}"  # (a job report whose id was taken)
            text = ("/skill:review " if kind == "skill_input" else "") + op[2]
            self.queued[session].append(rid)
            return [Draft(t.InputSubmitted(content=[t.TextPart(text)]), agent_id="main", **env,
                          request_id=rid if kind != "input_no_id" else None)]
        if kind in ("place", "withdraw"):
            if not self.queued[session]:
                return []
            rid = self.queued[session].pop(0)
            if kind == "withdraw":
                return [Draft(t.InputWithdrawn(input_request_id=rid), agent_id="main", **env)]
            self.items.setdefault((session, "main"), []).append(f"c{seq + 1}")
            return [Draft(t.InputPlaced(input_request_id=rid), agent_id="main", task_id=f"t{seq + 1}", **env)]
        if kind == "delete":
            self.live.remove((project, session))
            return [Draft(t.SessionDeleted(), **env)]
        agents = self.agents[session]
        agent = agents[op[2] % len(agents)]
        env = dict(env, agent_id=agent, task_id=f"task_{agent}")
        mine = self.items.setdefault((session, agent), [])
        if kind == "agent":
            agent = f"sub_{self.n}"
            self.n += 1
            agents.append(agent)
            self.started[(session, agent)] = seq + 1
            self.items[(session, agent)] = [f"c{seq + 1}"] if op[3] else []
            return [Draft(t.AgentStarted(parent_agent_id="main", prompt=op[3]), **dict(env, agent_id=agent))]
        if kind == "answer":
            calls = [f"call{seq}_{i}" for i in range(op[4])]
            self.calls.setdefault((session, agent), []).extend(calls)
            first = [f"c{seq + 1}"] if op[3] else []
            mine.extend(first + [f"c{seq + 1}.{i + len(first)}" for i in range(len(calls))])
            return [Draft(t.ModelResponded(text=op[3], tool_calls=[t.ToolCall(c, "read_file", '{"path": "a"}')
                                                                    for c in calls]), **env)]
        if kind == "result":
            pending = self.calls.get((session, agent))
            if not pending:
                return []
            mine.append(f"c{seq + 1}")
            return [Draft(t.ToolFinished(call_id=pending.pop(0), name="read_file",
                                         content=[t.TextPart(op[3]), t.TextPart("more")]), **env)]
        if kind in ("skill", "instruction"):
            mine.append(f"c{seq + 1}")
            ev = (t.SkillLoaded(name="review", instructions=op[3]) if kind == "skill"
                  else t.InstructionAppended(text=op[3]))
            return [Draft(ev, **env)]
        if kind == "compact":
            replaced = list(mine)
            mine.append(f"c{seq + 1}")
            return [Draft(t.ContextCompacted(summary=op[3], replaced_item_ids=replaced), **env)]
        if kind in ("hide", "unhide"):
            if not mine:
                return []
            return [Draft(t.ContextEdited(op=kind, item_ids=[mine[op[3] % len(mine)]]), **env)]
        raise AssertionError(op)


def _fts_instances(conn: apsw.Connection) -> list[tuple]:
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.history_vocab USING fts5vocab(main, history_fts, instance)")
    return list(conn.execute("SELECT * FROM temp.history_vocab ORDER BY 1, 2, 3, 4"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_incremental_history_equals_a_rebuild_and_the_full_contexts(ops: list[tuple]) -> None:
    # (every scenario starts with a session of each project, so most drawn operations apply)
    check_history([("session", 0), ("session", 1), *ops])


def check_history(ops: list[tuple]) -> None:
    """Sessions of two projects, inputs (placed, withdrawn, without an id of their own, /skill:
    commands), subagents, answers with tool calls, results, skill loads, instructions,
    compactions, hides, unhides and deletes, projected in steps of every batch size: the same
    rows and the same index as one rebuild, and every agent's Full Context item (same id, agent,
    task, role and text), hidden exactly when the user hid it or deleted its session."""

    async def scenario(data: Path) -> None:
        model = Sessions()
        saved = projector_mod.BATCH
        async with open_store(data, synchronous="OFF") as store:
            live = Projector(LogReader(data), open_projections_db(data), [HistoryProjection()])
            try:
                for op in ops:
                    if op[0] == "catch_up":
                        projector_mod.BATCH = op[1]
                        try:
                            live.catch_up()
                        finally:
                            projector_mod.BATCH = saved
                        continue
                    for draft in model.drafts(op, store.last_seq):
                        await store.append(draft)
                live.catch_up()
                rebuilt = Projector(LogReader(data), open_projections_db(data, memory=True), [HistoryProjection()])
                try:
                    rebuilt.rebuild()
                    assert live.dump("history") == rebuilt.dump("history")
                    assert _fts_instances(live.conn) == _fts_instances(rebuilt.conn)
                    check_same_results(HistoryIndex(live.conn), HistoryIndex(rebuilt.conn), model.every)
                finally:
                    rebuilt.close()
                    rebuilt.reader.close()
                # Every agent's Full Context, as the session's actor folds it, is in the index.
                rows = {r[0]: r[1:] for r in live.conn.execute(
                    "SELECT item_id, session_id, agent_id, task_id, role, text, hidden FROM history_items")}
                expected = {}
                holds: dict[str, tuple[str, dict[str, Any]]] = {}  # session -> (project, its visible items)
                reader = LogReader(data)
                try:
                    sessions = {r[0] for r in live.conn.execute("SELECT session_id FROM history_sessions")}
                    for session in sessions:
                        state = state_at(reader, session)
                        created = next(reader.events(session_id=session, limit=1)).seq
                        visible = holds.setdefault(session, (state.project_id, {}))[1]
                        for agent_id, agent in state.agents.items():
                            for item in agent.items:
                                if item.status == EMPTY_ANSWER:  # (an answer that said nothing: no history)
                                    continue
                                text = f"{item.call.name} {item.call.arguments}" if item.call else item.text
                                hidden = item.id in agent.hidden or state.deleted
                                if not hidden:
                                    visible[item.id] = (agent_id, item.task_id, item.role, text)
                                if item.seq > created:  # its own (a fork's inherited ones are older)
                                    expected[item.id] = (session, agent_id, item.task_id, item.role, text, hidden)
                finally:
                    reader.close()
                assert {k: (*v[:5], bool(v[5])) for k, v in rows.items()} == expected
                check_visibility(HistoryIndex(live.conn), holds, {k: v[0] for k, v in expected.items()})
            finally:
                live.close()
                live.reader.close()

    with tempfile.TemporaryDirectory() as tmp:
        trio.run(scenario, Path(tmp) / "data")


# Queries over the drawn texts: the mark, the second part of every tool result ("more"), both
# with each operator, a prefix, and a query that finds nothing.
SAME_QUERIES = (MARK, "more", f"{MARK} OR more", f"more NOT {MARK}", f"{MARK} AND more", MARK[:4] + "*",
                "nothing_drawn")


def check_same_results(live: HistoryIndex, rebuilt: HistoryIndex, sessions: list[tuple[str, str]]) -> None:
    """The incremental index and a rebuild answer every query alike: the same results (ids,
    sessions, agents, tasks, roles, seqs, snippets) in the same order, paged 3 at a time, for each
    project and filtered by each session; and ``history_read`` reads the same page of each."""
    for project in ("prj_one", "prj_two"):
        for query in SAME_QUERIES:
            for flt in [{}, *({"session_id": s} for p, s in sessions if p == project)]:
                found = everything(live, project, query, **flt)
                assert found == everything(rebuilt, project, query, **flt), (project, query, flt)
                for hit in found[:3]:
                    assert live.read(hit.context_item_id, limit=7) == rebuilt.read(hit.context_item_id, limit=7)


def state_at(reader: LogReader, session: str, upto: int | None = None) -> SessionState:
    """``session``'s state as of its event ``upto`` as its actor builds it: a fork's from its
    source's as of the fork point (:meth:`runtime.actor.SessionActor._state_at`, with no snapshot)."""
    first = next(reader.events(session_id=session, limit=1))
    state = SessionState(session)
    if isinstance(first.event, t.SessionCreated) and first.event.forked_from_session:
        state = state_at(reader, first.event.forked_from_session, first.event.forked_from_seq)
        _reset_for_fork(state, session)
    return fold(state, reader.events(session_id=session, to=upto))


def everything(index: HistoryIndex, project: str, query: str, **flt: Any) -> list:
    """Every result of ``query``, 3 a page; each item once."""
    out, after = [], None
    while True:
        page, after = index.search(project, query, limit=3, after_item_id=after, **flt)
        out += page
        if after is None:
            ids = [h.context_item_id for h in out]
            assert len(ids) == len(set(ids)), ids
            return out


def check_visibility(index: HistoryIndex, holds: dict[str, tuple[str, dict[str, Any]]], owner: dict[str, str]) -> None:
    """What search and read show equals what the sessions' Full Contexts show: filtered by a
    session, the items it holds and has not hidden (a fork's inherited ones too), under its id;
    unfiltered, the items some live session shows, under the session that recorded them; read,
    exactly those. ``holds``: session -> (project, {visible item: (agent, task, role, text)})."""
    shown: dict[str, tuple] = {}
    for session, (project, visible) in holds.items():
        shown.update({i: (project, *v) for i, v in visible.items()})
        found: dict[str, Any] = {}
        for query in (MARK, "read_file"):  # (every tool call's text holds read_file)
            found.update({h.context_item_id: h for h in everything(index, project, query, session_id=session)})
        for i, h in found.items():
            assert i in visible, (session, i)  # held by the session and not hidden there
            assert (h.session_id, h.agent_id, h.task_id, h.role) == (session, *visible[i][:3])
        assert {i for i, v in visible.items() if MARKED.search(v[3]) or v[2] == "tool_call"} <= set(found), session
    for project in ("prj_one", "prj_two"):
        found = {h.context_item_id: h for h in everything(index, project, MARK)}
        for i, h in found.items():
            assert i in shown and shown[i][0] == project, i
            assert (h.session_id, h.agent_id, h.task_id, h.role) == (owner[i], *shown[i][1:4])
        assert {i for i, v in shown.items() if v[0] == project and MARKED.search(v[4])} <= set(found)
    for i in owner:
        try:
            page = index.read(i)
        except HistoryError as exc:
            assert exc.code == "HISTORY_ITEM_NOT_FOUND" and i not in shown, i
        else:
            assert i in shown and page["sessionId"] == owner[i] and page["text"] == shown[i][4], i


def test_an_input_recorded_without_a_request_id_is_in_history() -> None:
    # A job's report whose id ("job:<id>") a client's input had taken is recorded with none; the
    # session's Full Context files it under "seq:<n>", and history left it out.
    check_history([("session", 0), ("input_no_id", 0, "the job ended"), ("place", 0)])


def test_a_skill_commands_item_is_its_full_context_text() -> None:
    check_history([("session", 0), ("skill_input", 0, "review this diff"), ("place", 0)])


def test_a_fork_holds_its_sources_items_up_to_the_fork_point_through_a_chain_and_deletes() -> None:
    # s3 forks s1 at its answer (c4); s4 forks s3 at s3's own answer (c7). c6 (s1's, after the
    # fork point) is never s3's; s4 hides c3, s3 hides c4 after s4 was made (s4 still shows it);
    # s1's deletion leaves c3 and c4 visible through the forks, s3's leaves c4 through s4 alone,
    # and s4's unhide brings c3 back. Checked after every step.
    ops = [("session", 0), ("input", 0, f"early {MARK}"), ("place", 0), ("answer", 0, 0, f"answer {MARK}", 1),
           ("fork", 0, 3), ("result", 0, 0, f"late {MARK}"), ("answer", 1, 0, f"own {MARK}", 0), ("catch_up", 1),
           ("fork", 1, 1), ("hide", 2, 0, 0), ("delete", 0), ("hide", 0, 0, 1), ("catch_up", 2),
           ("delete", 0), ("unhide", 0, 0, 0)]
    for end in range(4, len(ops) + 1):
        check_history(ops[:end])


def test_a_hide_before_the_fork_point_is_the_forks_and_one_after_it_is_not() -> None:
    # s1 hides c3 before the fork (s3) and unhides it after: the fork still has it hidden, until
    # it unhides it itself; s1 hides c4 after the fork: the fork still shows it, also once s1 is
    # deleted. Checked after every step.
    ops = [("session", 0), ("input", 0, f"early {MARK}"), ("place", 0), ("answer", 0, 0, f"answer {MARK}", 0),
           ("hide", 0, 0, 0), ("fork", 0, 4), ("unhide", 0, 0, 0), ("hide", 0, 0, 1), ("catch_up", 5),
           ("delete", 0), ("catch_up", 2000), ("unhide", 0, 0, 0)]
    for end in range(5, len(ops) + 1):
        check_history(ops[:end])
