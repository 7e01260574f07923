"""The event-store contract (F-LOG-1, F-LOG-3, F-LOG-4).

``TestStoreContract`` only talks to a store through the harness of ``tests/conftest.py`` (open,
reopen, read), so the same class runs against every implementation listed there. The SQLite-only
checks (schema guards) live in ``TestSqliteSchema`` at the end.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import apsw
import pytest
import trio
import trio.testing

from events.errors import AppendRejected, ConcurrencyConflict, LogError, StoreClosed, TooFewSamples
from events.reader import LogReader
from events.schema import now_ms
from events.store import Draft, StoreWriteFailed, open_store
from events.types import (
    InputSubmitted,
    InstructionAppended,
    ModelRequested,
    SessionCreated,
    SessionNamed,
    TextPart,
    ToolStarted,
)
from projections.projector import open_projections_db


def note(text: str, session: str | None = "s1", **envelope: Any) -> Draft:
    return Draft(InstructionAppended(text=text), session_id=session, **envelope)


def texts(events: list[Any]) -> list[str]:
    return [e.event.text for e in events]


def assert_log_error(err: LogError, code: str, *words: str) -> None:
    assert err.code == code
    assert isinstance(err.message, str) and err.message
    for word in words:
        assert word in str(err), (word, str(err))


class TestStoreContract:
    """Behaviour every event store must have. Uses only the ``store``/``store_harness`` fixtures."""

    # ------------------------------------------------------------------ seqs

    async def test_first_append_gets_seq_one_and_results_name_every_row(self, store: Any) -> None:
        first = await store.append(note("a"))
        assert first.seqs == (1,)
        assert first.seq == 1
        assert first.session_seqs == (1,)
        assert first.duplicate is False
        second = await store.append(note("b"), note("c"), note("d", session=None))
        assert second.seqs == (2, 3, 4)
        assert second.seq == 4
        assert second.session_seqs == (2, 3, None)
        assert store.last_seq == 4

    async def test_global_seq_is_gap_free_from_one(self, store: Any) -> None:
        acked: list[int] = []
        for i in range(30):
            session = None if i % 7 == 0 else f"s{i % 3}"
            drafts = [note(f"e{i}-{j}", session=session) for j in range(1 + i % 3)]
            acked.extend((await store.append(*drafts)).seqs)
        events = await store.read_events(limit=10_000)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert acked == [e.seq for e in events]

    async def test_session_seq_counts_per_session(self, store: Any) -> None:
        for i in range(24):
            await store.append(note(f"{i}", session=["a", "b", "c", None][i % 4]))
        events = await store.read_events(limit=100)
        for session in ("a", "b", "c"):
            mine = [e for e in events if e.session_id == session]
            assert [e.session_seq for e in mine] == list(range(1, 7))
            assert [int(t) for t in texts(mine)] == sorted(int(t) for t in texts(mine))
        assert all(e.session_seq is None for e in events if e.session_id is None)

    async def test_session_seq_guard_lets_exactly_one_writer_win(self, store: Any) -> None:
        await store.append(note("start"))
        outcomes: list[Any] = []

        async def contender(i: int) -> None:
            try:
                outcomes.append(await store.append(note(f"w{i}"), expected_session_seq=1))
            except ConcurrencyConflict as err:
                outcomes.append(err)

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(contender, i)
        wins = [o for o in outcomes if not isinstance(o, LogError)]
        assert len(wins) == 1 and wins[0].session_seqs == (2,)
        assert sum(isinstance(o, ConcurrencyConflict) for o in outcomes) == 7
        events = await store.read_events(session_id="s1")
        assert [e.session_seq for e in events] == [1, 2]

    async def test_read_events_of_some_kinds_only(self, store: Any) -> None:
        await store.append(note("a"), Draft(SessionNamed(name="n"), session_id="s1"), note("b", session="s2"))
        await store.append(Draft(SessionNamed(name="m"), session_id="s2"), note("c"))
        notes = await store.read_events(kinds=["instruction.appended"])
        assert texts(notes) == ["a", "b", "c"]
        named = await store.read_events(session_id="s2", kinds=["session.named", "no.such.kind"])
        assert [(e.seq, e.event.name) for e in named] == [(4, "m")]
        assert len(await store.read_events(kinds=None)) == 5
        assert [e.seq for e in await store.read_events(after=1, limit=1, kinds=["instruction.appended"])] == [3]

    async def test_read_events_of_one_project_only(self, store: Any) -> None:
        await store.append(Draft(InstructionAppended(text="a"), project_id="p1", session_id="s1"),
                           Draft(InstructionAppended(text="b"), project_id="p2", session_id="s2"),
                           Draft(InstructionAppended(text="c")))
        await store.append(Draft(InstructionAppended(text="d"), project_id="p1", session_id="s1"))
        assert texts(await store.read_events(project_id="p1")) == ["a", "d"]
        assert texts(await store.read_events(project_id="p1", after=1)) == ["d"]
        assert texts(await store.read_events(project_id="p1", to=3)) == ["a"]
        assert texts(await store.read_events(project_id="p2", session_id="s2")) == ["b"]
        assert await store.read_events(project_id="p1", session_id="s2") == []
        assert await store.read_events(project_id="nowhere") == []
        assert len(await store.read_events(project_id=None)) == 4

    async def test_a_sessions_last_seq(self, store: Any) -> None:
        assert await store.session_last_seq("s1") == 0
        await store.append(note("a"), note("b", session="s2"), note("c"))
        await store.append(note("d", session="s2"), note("e", session=None))
        assert await store.session_last_seq("s1") == 3
        assert await store.session_last_seq("s2") == 4
        assert await store.session_last_seq("s2", to=3) == 2 and await store.session_last_seq("s2", to=1) == 0
        assert await store.session_last_seq("s1", to=2**63 + 5) == 3  # (past SQLite's integers: clamped)
        assert await store.session_last_seq("nobody") == 0

    async def test_a_sessions_project(self, store: Any) -> None:
        """The project of a session's first event that names one (a quarantine is recorded under
        it); ``None`` for a session of no project or none at all."""
        assert await store.session_project("s1") is None
        await store.append(note("a"), note("b", project_id="p1"), note("c", session="s2"))
        await store.append(note("d", project_id="p2"), note("e", session=None, project_id="p3"))
        assert await store.session_project("s1") == "p1"
        assert await store.session_project("s2") is None
        assert await store.session_project("nobody") is None

    async def test_ts_is_wall_clock_ms_and_non_decreasing(self, store: Any) -> None:
        before = now_ms()
        results = [await store.append(note(f"{i}", session=f"s{i % 2}")) for i in range(20)]
        after = now_ms()
        events = await store.read_events()
        stamps = [e.ts for e in events]
        assert stamps == sorted(stamps)
        assert before <= stamps[0] and stamps[-1] <= after
        assert [r.ts for r in results] == stamps

    # ------------------------------------------------------------------ atomic multi-event appends

    async def test_multi_event_append_is_contiguous_and_in_order(self, store: Any) -> None:
        drafts = [
            Draft(SessionCreated(model="m"), session_id="s1", agent_id="main"),
            Draft(InputSubmitted(content=[TextPart("hi")]), session_id="s1", request_id="r1"),
            Draft(ModelRequested(provider="p", model="m"), session_id="s1", task_id="t1"),
            note("global", session=None, project_id="p1"),
            Draft(ToolStarted(call_id="c", name="n", arguments="{}"), session_id="s2"),
        ]
        result = await store.append(*drafts)
        assert result.seqs == (1, 2, 3, 4, 5)
        assert result.session_seqs == (1, 2, 3, None, 1)
        events = await store.read_events()
        assert [e.event for e in events] == [d.event for d in drafts]
        assert [(e.session_id, e.agent_id, e.task_id, e.project_id, e.request_id) for e in events] == [
            (d.session_id, d.agent_id, d.task_id, d.project_id, d.request_id) for d in drafts
        ]
        assert len({e.ts for e in events}) == 1  # one transaction, one timestamp

    async def test_rejected_multi_event_append_writes_nothing(self, store: Any) -> None:
        await store.append(note("keep"))
        with pytest.raises(AppendRejected) as info:
            await store.append(
                note("x", request_id="r1"), note("y", request_id="r2")
            )
        assert_log_error(info.value, "APPEND_REJECTED", "request_id")
        with pytest.raises(AppendRejected) as info:
            await store.append(note("no session", session=None, request_id="r3"))
        assert_log_error(info.value, "APPEND_REJECTED", "session")
        with pytest.raises(AppendRejected) as info:
            await store.append()
        assert_log_error(info.value, "APPEND_REJECTED", "at least one")
        with pytest.raises(AppendRejected) as info:
            await store.append(note("a", session="s1"), note("b", session="s2"), expected_session_seq=1)
        assert_log_error(info.value, "APPEND_REJECTED", "one session")
        assert texts(await store.read_events()) == ["keep"]
        assert store.last_seq == 1
        assert (await store.append(note("next"))).seqs == (2,)

    # ------------------------------------------------------------------ optimistic concurrency

    async def test_expected_session_seq_conflict_writes_nothing(self, store: Any) -> None:
        assert (await store.append(note("a"), expected_session_seq=0)).session_seqs == (1,)
        await store.append(note("b"))
        with pytest.raises(ConcurrencyConflict) as info:
            await store.append(note("stale-1"), note("stale-2"), expected_session_seq=1)
        assert_log_error(info.value, "SESSION_SEQ_CONFLICT", "s1", "2", "1")
        with pytest.raises(ConcurrencyConflict):
            await store.append(note("ahead"), expected_session_seq=5)
        with pytest.raises(ConcurrencyConflict) as info:
            await store.append(note("new", session="fresh"), expected_session_seq=3)
        assert_log_error(info.value, "SESSION_SEQ_CONFLICT", "fresh", "0")
        assert texts(await store.read_events()) == ["a", "b"]
        assert store.last_seq == 2
        ok = await store.append(note("c"), note("d"), expected_session_seq=2)
        assert ok.seqs == (3, 4) and ok.session_seqs == (3, 4)

    # ------------------------------------------------------------------ idempotency

    async def test_repeated_request_id_returns_original_and_writes_nothing(self, store: Any) -> None:
        first = await store.append(
            Draft(InputSubmitted(content=[TextPart("hi")]), session_id="s1", request_id="r1")
        )
        await store.append(note("later"))
        again = await store.append(
            Draft(InputSubmitted(content=[TextPart("changed")]), session_id="s1", request_id="r1"),
            expected_session_seq=0,  # a retry after a timeout: the original answer, no conflict
        )
        assert again.duplicate is True
        assert (again.seqs, again.session_seqs, again.ts) == (first.seqs, first.session_seqs, first.ts)
        events = await store.read_events()
        assert [e.seq for e in events] == [1, 2]
        assert events[0].event == InputSubmitted(content=[TextPart("hi")])
        # request ids are scoped by session: the same id in another session is a new event
        other = await store.append(note("x", session="s2", request_id="r1"))
        assert other.duplicate is False and other.seqs == (3,)

    async def test_request_id_inside_a_multi_event_append(self, store: Any) -> None:
        first = await store.append(note("a"), note("b", request_id="r9"), note("c"))
        again = await store.append(note("a"), note("b", request_id="r9"), note("c"))
        assert again.duplicate is True
        assert again.seqs == (first.seqs[1],)
        assert store.last_seq == 3

    async def test_a_repeat_whose_expected_session_seq_spans_sessions_is_still_a_duplicate(
        self, store: Any
    ) -> None:
        # The duplicate check comes before expected_session_seq's: a retry of a recorded request
        # id is answered with the original, also when the retry's events span sessions (which
        # expected_session_seq alone would refuse), as it is when its event cannot be stored now.
        first = await store.append(note("a", request_id="r1"))
        again = await store.append(note("b", session=None), note("a", request_id="r1"), expected_session_seq=0)
        assert again.duplicate is True
        assert (again.seqs, again.session_seqs, again.ts) == (first.seqs, first.session_seqs, first.ts)
        assert store.last_seq == 1
        with pytest.raises(AppendRejected) as info:  # not recorded: refused as before
            await store.append(note("b", session=None), note("c", request_id="r2"), expected_session_seq=0)
        assert_log_error(info.value, "APPEND_REJECTED", "one session")
        assert store.last_seq == 1

    # ------------------------------------------------------------------ lifecycle

    async def test_append_after_close_raises_store_closed(self, store_harness: Any) -> None:
        async with store_harness.open() as s:
            await s.append(note("a"))
        with pytest.raises(StoreClosed) as info:
            await s.append(note("b"))
        assert_log_error(info.value, "STORE_CLOSED", "not accepting")
        with pytest.raises(StoreClosed):
            await s.wait_for(s.last_seq)
        with store_harness.reader() as reader:
            assert reader.event_count() == 1

    async def test_appends_racing_close_are_either_durable_or_refused(self, store_harness: Any) -> None:
        outcomes: dict[str, Any] = {}

        async def appender(i: int) -> None:
            try:
                outcomes[f"r{i}"] = await s.append(note(f"{i}", request_id=f"r{i}"))
            except StoreClosed as err:
                outcomes[f"r{i}"] = err

        async with store_harness.open() as s:
            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(appender, i)
                await trio.lowlevel.checkpoint()
                s.close_writer()
        with store_harness.reader() as reader:
            stored = {e.request_id: e.seq for e in reader.events()}
        assert len(outcomes) == 40
        for rid, outcome in outcomes.items():
            if isinstance(outcome, StoreClosed):
                assert rid not in stored
            else:
                assert stored[rid] == outcome.seq
        assert sorted(stored.values()) == list(range(1, len(stored) + 1))

    async def test_reopen_continues_seq_and_session_seq(self, store_harness: Any) -> None:
        async with store_harness.open() as s:
            await s.append(note("a"), note("b", session="s2"), note("c", session=None))
        async with store_harness.open() as s:
            assert s.last_seq == 3
            result = await s.append(note("d"), note("e", session="s2"), note("f", session="s3"))
            assert result.seqs == (4, 5, 6)
            assert result.session_seqs == (2, 2, 1)
            with pytest.raises(ConcurrencyConflict):
                await s.append(note("stale"), expected_session_seq=1)
        with store_harness.reader() as reader:
            assert [e.seq for e in reader.events()] == [1, 2, 3, 4, 5, 6]
            assert reader.last_seq() == 6

    async def test_reopen_keeps_ts_non_decreasing(self, store_harness: Any) -> None:
        async with store_harness.open() as s:
            first = await s.append(note("a"))
        async with store_harness.open() as s:
            second = await s.append(note("b"))
        assert second.ts >= first.ts

    # ------------------------------------------------------------------ reads

    async def test_reader_filters(self, store_harness: Any) -> None:
        async with store_harness.open() as s:
            for i in range(1, 21):
                session = "s1" if i % 2 else "s2"
                event = SessionNamed(name=f"{i}") if i % 5 == 0 else InstructionAppended(text=f"{i}")
                await s.append(Draft(event, session_id=session))
            by_store = await s.read_events(after=4, to=12, session_id="s1", limit=3)
            assert [e.seq for e in by_store] == [5, 7, 9]
        with store_harness.reader() as r:
            seqs = lambda **f: [row.seq for row in r.rows(**f)]  # noqa: E731
            assert seqs() == list(range(1, 21))
            assert seqs(session_id="s2") == list(range(2, 21, 2))
            assert seqs(kinds=["session.named"]) == [5, 10, 15, 20]
            assert seqs(kinds=["session.named", "instruction.appended"]) == list(range(1, 21))
            assert seqs(kinds=["no.such.kind"]) == []
            assert seqs(after=15) == [16, 17, 18, 19, 20]
            assert seqs(to=3) == [1, 2, 3]
            assert seqs(after=3, to=6) == [4, 5, 6]
            assert seqs(limit=4) == [1, 2, 3, 4]
            assert seqs(limit=0) == []
            assert seqs(after=20) == []
            assert seqs(session_id="s1", kinds=["session.named"]) == [5, 15]
            assert seqs(session_id="s2", after=10, limit=3) == [12, 14, 16]
            # paging must not lose or repeat rows whatever the page size
            assert seqs(page=3) == list(range(1, 21))
            assert seqs(page=3, limit=7, session_id="s1") == [1, 3, 5, 7, 9, 11, 13]
            assert seqs(page=4, limit=8) == list(range(1, 9))
            events = list(r.events(session_id="s1", kinds=["session.named"]))
            assert [e.event for e in events] == [SessionNamed(name="5"), SessionNamed(name="15")]
            assert events[0].to_json()["body"] == {"name": "5"}
            assert r.event_count() == 20 and r.last_seq() == 20

    async def test_a_read_holds_at_most_its_byte_budget_but_always_one_event(self, store_harness: Any) -> None:
        async with store_harness.open() as s:
            for i in range(12):
                await s.append(note("x" * (1000 + 1000 * (i % 3)), session="s1" if i < 10 else "s2"))
            with store_harness.reader() as r:
                sizes = {row.seq: row.raw_size for row in r.rows()}
            first4 = sum(sizes[q] for q in (1, 2, 3, 4))
            seqs = lambda page: [e.seq for e in page]  # noqa: E731
            # exactly at the budget: the fourth event fits; one byte less: it starts the next page
            assert seqs(await s.read_events(max_bytes=first4)) == [1, 2, 3, 4]
            assert seqs(await s.read_events(max_bytes=first4 - 1)) == [1, 2, 3]
            # an event larger than the whole budget is still read, alone
            assert seqs(await s.read_events(max_bytes=1)) == [1]
            assert seqs(await s.read_events(after=4, max_bytes=1)) == [5]
            # limit and the filters apply as before; paging by nextAfter loses and repeats nothing
            assert seqs(await s.read_events(session_id="s1", after=8, max_bytes=10**9)) == [9, 10]
            assert seqs(await s.read_events(limit=2, max_bytes=10**9)) == [1, 2]
            seen: list[int] = []
            while page := await s.read_events(after=seen[-1] if seen else 0, max_bytes=first4 // 2):
                assert sum(sizes[q] for q in seqs(page)) <= max(first4 // 2, sizes[page[0].seq])
                seen += seqs(page)
            assert seen == list(range(1, 13))
        with store_harness.reader() as r:
            # the same bound on the reader, across its internal pages (page=2 rows here)
            assert [row.seq for row in r.rows(page=2, max_bytes=first4)] == [1, 2, 3, 4]
            assert [e.seq for e in r.events(page=2, max_bytes=first4 - 1)] == [1, 2, 3]
            # page_bytes bounds each page, not the read: every row still comes, in order
            for budget in (1, first4 - 1, first4):
                pages = [[row[0] for row in p] for p in r._pages(page_bytes=budget)]
                assert sum(pages, []) == list(range(1, 13))
                for p in pages:
                    assert len(p) == 1 or sum(sizes[q] for q in p) <= budget, (budget, pages)
                assert pages[0] == ([1, 2, 3, 4] if budget == first4 else [1, 2, 3] if budget > 1 else [1])
            assert [row.seq for row in r.rows(page_bytes=1)] == list(range(1, 13))

    async def test_stored_event_json_shape(self, store: Any) -> None:
        await store.append(
            Draft(
                InputSubmitted(content=[TextPart("hello")]),
                project_id="p1",
                session_id="s1",
                agent_id="a1",
                task_id="t1",
                request_id="r1",
            )
        )
        (event,) = await store.read_events()
        shape = event.to_json()
        assert set(shape) >= {
            "seq", "ts", "project_id", "session_id", "agent_id", "task_id", "kind", "request_id", "body"
        }
        assert shape["kind"] == "input.submitted"
        assert (shape["project_id"], shape["session_id"], shape["agent_id"], shape["task_id"]) == (
            "p1", "s1", "a1", "t1"
        )
        assert shape["body"] == {"content": [{"type": "text", "text": "hello"}], "when_busy": "followUp"}

    # ------------------------------------------------------------------ wait_for

    async def test_wait_for_wakes_after_commit(self, store: Any) -> None:
        woke: list[int] = []

        async def waiter() -> None:
            woke.append(await store.wait_for(0))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert woke == []  # nothing committed yet
            result = await store.append(note("a"), note("b"))
        assert woke == [result.seq]
        # already past: returns at once
        with trio.fail_after(5):
            assert await store.wait_for(1) == 2

    async def test_wait_for_ignores_commits_that_add_nothing_new(self, store: Any) -> None:
        await store.append(note("a", request_id="r1"))
        woke: list[int] = []

        async def waiter() -> None:
            woke.append(await store.wait_for(1))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            dup = await store.append(note("a", request_id="r1"))  # commits, writes nothing
            assert dup.duplicate
            await trio.testing.wait_all_tasks_blocked()
            assert woke == []
            await store.append(note("b"))
        assert woke == [2]

    async def test_on_commit_hands_over_exactly_what_was_stored(self, store_harness: Any) -> None:
        groups: list[list[Any]] = []
        async with store_harness.open() as store:
            stop = store.on_commit(groups.append)
            await store.append(note("a", project_id="p", agent_id="ag", task_id="t", request_id="r1"))
            await store.append(note("a", request_id="r1"))  # a repeat: writes nothing, hands nothing
            with pytest.raises(ConcurrencyConflict):
                await store.append(note("x"), expected_session_seq=7)  # fails: hands nothing

            async def one(i: int) -> None:
                await store.append(note(f"c{i}", session=f"s{i % 3}"), note(f"d{i}", session=None))

            async with trio.open_nursery() as nursery:  # concurrent appends: groups in seq order
                for i in range(20):
                    nursery.start_soon(one, i)
            stop()
            await store.append(note("after"))  # removed: not handed over
            stop()  # removing twice is harmless
        handed = [se for g in groups for se in g]
        assert [se.seq for se in handed] == list(range(1, 42))
        reader = store_harness.reader()
        try:
            stored = list(reader.events())
        finally:
            reader.close()
        assert len(stored) == 42 and stored[:41] == handed  # seq, ts, session_seq, envelope, event
        assert handed[0].request_id == "r1" and handed[0].project_id == "p" and handed[0].task_id == "t"

    async def test_wait_for_raises_store_closed_when_the_store_closes(
        self, store_harness: Any, autojump_clock: trio.testing.MockClock
    ) -> None:
        outcome: list[Any] = []

        async def waiter(s: Any) -> None:
            try:
                outcome.append(await s.wait_for(s.last_seq))
            except StoreClosed as err:
                outcome.append(err)

        async with store_harness.open() as s:
            await s.append(note("a"))
            # no thread runs from here on, so the autojump clock turns a hang into TooSlowError
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(waiter, s)
                    await trio.testing.wait_all_tasks_blocked()
                    s.close_writer()
        assert len(outcome) == 1 and isinstance(outcome[0], StoreClosed), outcome


class TestSqliteSchema:
    """Guards that live in the SQLite schema itself, below the store's own checks."""

    async def test_unique_session_seq_and_request_id_in_schema(self, data_dir: Path) -> None:
        async with open_store(data_dir) as s:
            await s.append(note("a", request_id="r1"))
        conn = apsw.Connection(str(data_dir / "events.db"))
        try:
            row = conn.execute(
                "SELECT ts, kind, dict_id, raw_size, body FROM events WHERE seq = 1"
            ).fetchall()[0]
            with pytest.raises(apsw.ConstraintError):
                conn.execute(
                    "INSERT INTO events(seq, ts, session_id, session_seq, kind, dict_id, raw_size, body) "
                    "VALUES (2, ?, 's1', 1, ?, ?, ?, ?)",
                    (row[0], row[1], row[2], row[3], row[4]),
                )
            with pytest.raises(apsw.ConstraintError):
                conn.execute(
                    "INSERT INTO events(seq, ts, session_id, session_seq, kind, request_id, dict_id, "
                    "raw_size, body) VALUES (2, ?, 's1', 2, ?, 'r1', ?, ?, ?)",
                    (row[0], row[1], row[2], row[3], row[4]),
                )
            assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            assert meta["format"] == "lens-events" and meta["format_version"] == "1"
        finally:
            conn.close()


    async def test_a_new_log_is_private_to_its_owner(self, tmp_path: Path) -> None:
        """The log holds every conversation: a new data directory is 0700 and the database
        files 0600 under the usual umask (they were 0755 and 0644: readable by every user)."""
        old = os.umask(0o022)
        try:
            data_dir = tmp_path / "new" / "data"
            async with open_store(data_dir) as s:
                await s.append(note("secret text"))
                assert (data_dir / "events.db-wal").exists() and (data_dir / "events.db-shm").exists()
                modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data_dir.iterdir()}
            projector_conn = open_projections_db(data_dir)
            projector_conn.execute("CREATE TABLE t(x)")
            modes.update({p.name: stat.S_IMODE(p.stat().st_mode) for p in data_dir.iterdir()
                          if p.name.startswith("projections.db")})
            projector_conn.close()
        finally:
            os.umask(old)
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(data_dir.parent.stat().st_mode) == 0o755  # only the data directory itself
        for name in ("events.db", "events.db-wal", "events.db-shm", "projections.db", "projections.db-wal",
                     "projections.db-shm"):
            assert modes.get(name) == 0o600, (name, oct(modes.get(name, 0)))
        reader = LogReader(data_dir)
        try:
            assert [e.event.text for e in reader.events()] == ["secret text"]
        finally:
            reader.close()


class TestSqliteDictionary:
    """F-LOG-7: a dictionary trained from the log; every row records the dictionary it needs."""

    @staticmethod
    def call(i: int) -> Draft:
        return Draft(
            ToolStarted(call_id=f"call-{i}", name="read_file", arguments=f'{{"path": "src/m{i}.py"}}'),
            session_id=f"s{i % 4}",
        )

    async def test_train_dictionary_on_a_live_store(self, data_dir: Path) -> None:
        async with open_store(data_dir) as s:
            for i in range(0, 240, 40):
                await s.append(*[self.call(j) for j in range(i, i + 40)])
            early_reader = LogReader(data_dir)  # opened before the dictionary exists
            try:
                assert early_reader.dictionaries() == {}
                dict_id = await trio.to_thread.run_sync(s.train_dictionary)
                assert dict_id != 0
                new = await s.append(*[self.call(j) for j in range(240, 250)])
                rows = list(early_reader.rows())
                old_rows, new_rows = rows[:240], rows[240:]
                assert [r.seq for r in new_rows] == list(new.seqs)
                assert {r.dict_id for r in old_rows} == {0}
                assert {r.dict_id for r in new_rows} == {dict_id}
                # small similar events shrink with the dictionary
                assert sum(len(r.body) for r in new_rows) < sum(len(r.body) for r in old_rows[:10])
                # the early reader picks the new dictionary up by itself; old rows still decode
                decoded = [early_reader.decode(r).event for r in rows]
                assert decoded == [self.call(j).event for j in range(250)]
                assert dict_id in early_reader.codec.dictionary_ids
            finally:
                early_reader.close()
            assert [e.event for e in await s.read_events(after=240)] == [
                self.call(j).event for j in range(240, 250)
            ]
        # reopening keeps using the trained dictionary for new rows
        async with open_store(data_dir) as s:
            again = await s.append(self.call(250))
        with LogReader(data_dir) as reader:
            (row,) = reader.rows(after=again.seq - 1)
            assert row.dict_id == dict_id
            assert reader.meta()["active_dict_id"] == str(dict_id)
            assert [e.event for e in reader.events()] == [self.call(j).event for j in range(251)]

    async def test_training_needs_enough_events(self, data_dir: Path) -> None:
        async with open_store(data_dir) as s:
            await s.append(*[self.call(j) for j in range(3)])
            with pytest.raises(TooFewSamples, match="need at least 8 events to train a dictionary, have 3 ") as caught:
                await trio.to_thread.run_sync(s.train_dictionary)
            assert caught.value.code == "DICTIONARY_TOO_FEW_SAMPLES"
            assert (await s.append(self.call(3))).seqs == (4,)
        with LogReader(data_dir) as reader:
            assert reader.dictionaries() == {}
            assert {r.dict_id for r in reader.rows()} == {0}


@pytest.mark.parametrize("setting, level", [(None, 2), ("OFF", 0), ("NORMAL", 1), ("FULL", 2), ("EXTRA", 3)])
async def test_the_writer_commits_with_the_configured_synchronous_level(data_dir: Path, setting: str | None,
                                                                      level: int) -> None:
    # F-LOG-3 "synchronous=FULL by default, configurable": the level is a property of the writing
    # connection (SQLite keeps it nowhere in the file), so it is read there; the config's default
    # and the daemon's passing of `log.synchronous` to the store are the same word.
    from runtime.config import parse_config

    assert parse_config(b"{}", "lens.jsonc").log.synchronous == "FULL"
    options = {} if setting is None else {"synchronous": setting}
    async with open_store(data_dir, **options) as s:
        await s.append(Draft(InstructionAppended(text="x"), session_id="s1"))
        with s._conn_lock:
            assert s._conn.execute("PRAGMA synchronous").fetchall()[0][0] == level


@pytest.mark.parametrize("how", ["deleted", "replaced", "wal deleted"])
async def test_a_log_file_taken_away_while_open_fails_every_later_append(data_dir: Path, how: str) -> None:
    # SQLite commits into the files it opened; once they are no longer the ones at the path
    # (deleted, or a copy put back in its place), what it commits is lost at the close (the
    # -wal's at a crash). Every later append fails (a storage fault, naming the file), also after
    # a file is back.
    log = data_dir / "events.db"
    async with open_store(data_dir) as s:
        assert (await s.append(note("kept"))).seqs == (1,)
        assert s.unwritable() is None
        copy = log.read_bytes()
        names = ["events.db-wal"] if how == "wal deleted" else ["events.db", "events.db-wal", "events.db-shm"]
        for name in names:
            (data_dir / name).unlink()
        if how == "replaced":
            log.write_bytes(copy)
        gone = data_dir / names[0]
        # said at once, before any append tried, naming the file but not its directory
        why = s.unwritable()
        assert why is not None and why.startswith(f"{names[0]} was ") and str(data_dir) not in why, why
        for text in ("lost", "lost again"):
            with pytest.raises(StoreWriteFailed) as caught:
                await s.append(note(text))
            assert caught.value.storage
            assert_log_error(caught.value, "STORE_WRITE_FAILED", f"{gone} was", "while the daemon runs")
        assert s.last_seq == 1
    if how == "wal deleted":  # (the close folded the -wal it held into events.db)
        with LogReader(data_dir) as reader:
            assert texts(list(reader.events())) == ["kept"]
