"""Many trio producers through one store: group commit keeps order, gap-free seqs and idempotency.

These run against every store harness of tests/conftest.py, like the contract suite.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import trio

from events.errors import ConcurrencyConflict
from events.store import AppendResult, Draft
from events.types import InputSubmitted, InstructionAppended, TextPart

SESSIONS = 64
APPENDS_PER_SESSION = 12


def note(text: str, session: str | None, request_id: str | None = None) -> Draft:
    return Draft(InstructionAppended(text=text), session_id=session, request_id=request_id)


async def test_many_producers_keep_every_sessions_order(store: Any) -> None:
    """64 sessions append concurrently, some appends several events long."""
    acks: dict[str, list[AppendResult]] = defaultdict(list)
    rng = random.Random(7)
    sizes = {f"s{p}": [rng.randint(1, 3) for _ in range(APPENDS_PER_SESSION)] for p in range(SESSIONS)}

    async def producer(session: str) -> None:
        n = 0
        for size in sizes[session]:
            drafts = [note(f"{session}:{n + k}", session) for k in range(size)]
            n += size
            acks[session].append(await store.append(*drafts))

    async with trio.open_nursery() as nursery:
        for p in range(SESSIONS):
            nursery.start_soon(producer, f"s{p}")

    total = sum(sum(s) for s in sizes.values())
    events = await store.read_events(limit=total + 10)
    assert len(events) == total
    assert [e.seq for e in events] == list(range(1, total + 1))
    by_seq = {e.seq: e for e in events}
    for session, results in acks.items():
        assert len(results) == APPENDS_PER_SESSION  # every append acknowledged
        acked_seqs = [seq for r in results for seq in r.seqs]
        # a multi-event append occupies consecutive global seqs: nothing interleaves inside it
        for r in results:
            assert list(r.seqs) == list(range(r.seqs[0], r.seqs[0] + len(r.seqs)))
            assert not r.duplicate
        # the producer's order is the session's order, session_seq 1..n without gaps
        mine = [by_seq[s] for s in acked_seqs]
        assert [e.session_seq for e in mine] == list(range(1, len(mine) + 1))
        assert [e.event.text for e in mine] == [f"{session}:{i}" for i in range(len(mine))]
        assert acked_seqs == sorted(acked_seqs)
        assert [ss for r in results for ss in r.session_seqs] == [e.session_seq for e in mine]
    assert [e.ts for e in events] == sorted(e.ts for e in events)


async def test_optimistic_writers_on_one_session_never_skip_or_reuse_a_session_seq(store: Any) -> None:
    """Writers that read-then-append with expected_session_seq retry on conflict."""
    wins: dict[int, list[int]] = defaultdict(list)
    conflicts = 0

    async def writer(w: int) -> None:
        nonlocal conflicts
        done = 0
        seen = 0  # every writer first believes the session is empty: all but one must lose
        while done < 5:
            try:
                r = await store.append(note(f"w{w}-{done}", "shared"), expected_session_seq=seen)
            except ConcurrencyConflict:
                conflicts += 1
                mine = await store.read_events(session_id="shared", limit=10_000)
                seen = mine[-1].session_seq
                continue
            assert r.session_seqs == (seen + 1,)
            seen += 1
            wins[w].append(seen)
            done += 1

    async with trio.open_nursery() as nursery:
        for w in range(6):
            nursery.start_soon(writer, w)

    events = await store.read_events(session_id="shared", limit=1000)
    assert [e.session_seq for e in events] == list(range(1, 31))
    assert sorted(s for ws in wins.values() for s in ws) == list(range(1, 31))
    for w, seqs in wins.items():
        assert [e.event.text for e in events if e.event.text.startswith(f"w{w}-")] == [
            f"w{w}-{i}" for i in range(5)
        ]
    assert conflicts >= 5  # the first round alone has five losers


async def test_concurrent_duplicates_write_exactly_one_row(store: Any) -> None:
    """Several tasks send the same (session, request_id) at once, in one or more batches."""
    await store.append(note("before", "s1"))
    callers = 12
    request_ids = [f"req-{i}" for i in range(5)]
    results: dict[str, list[AppendResult]] = defaultdict(list)

    async def submit(rid: str, attempt: int) -> None:
        draft = Draft(
            InputSubmitted(content=[TextPart(f"{rid} attempt {attempt}")]),
            session_id="s1",
            request_id=rid,
        )
        results[rid].append(await store.append(draft))

    async with trio.open_nursery() as nursery:
        for attempt in range(callers):
            for rid in request_ids:
                nursery.start_soon(submit, rid, attempt)

    events = await store.read_events(limit=1000)
    assert [e.seq for e in events] == list(range(1, 1 + 1 + len(request_ids)))
    for rid in request_ids:
        rows = [e for e in events if e.request_id == rid]
        assert len(rows) == 1, rid
        answers = results[rid]
        assert len(answers) == callers
        assert {r.seqs for r in answers} == {(rows[0].seq,)}
        assert {r.session_seqs for r in answers} == {(rows[0].session_seq,)}
        assert {r.ts for r in answers} == {rows[0].ts}
        assert sorted(r.duplicate for r in answers) == [False] + [True] * (callers - 1)
        # the stored body is the one of the caller that got duplicate=False
        assert rows[0].event.content[0].text.startswith(f"{rid} attempt ")
    assert [e.session_seq for e in events] == list(range(1, len(events) + 1))


async def test_duplicate_in_the_same_batch_as_its_original(store: Any) -> None:
    """Queued before the writer wakes, both land in one group: the twin must be found in-batch."""
    outcomes: list[AppendResult] = []

    async def submit() -> None:
        outcomes.append(await store.append(note("x", "s9", request_id="same")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit)
        nursery.start_soon(submit)
        nursery.start_soon(submit)
    assert sorted(o.duplicate for o in outcomes) == [False, True, True]
    assert len({o.seqs for o in outcomes}) == 1
    assert store.last_seq == 1


async def test_repeated_request_id_after_reopen_returns_original(store_harness: Any) -> None:
    async with store_harness.open() as s:
        first = await s.append(
            Draft(InputSubmitted(content=[TextPart("hi")]), session_id="s1", request_id="r1")
        )
        await s.append(note("other", "s2"))
    async with store_harness.open() as s:
        answers: list[AppendResult] = []

        async def retry() -> None:
            answers.append(
                await s.append(
                    Draft(InputSubmitted(content=[TextPart("retry")]), session_id="s1", request_id="r1")
                )
            )

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(retry)
        assert all(a.duplicate for a in answers) and len(answers) == 4
        assert {(a.seqs, a.session_seqs, a.ts) for a in answers} == {
            (first.seqs, first.session_seqs, first.ts)
        }
        assert s.last_seq == 2
        fresh = await s.append(note("new", "s1", request_id="r2"))
        assert fresh.seqs == (3,) and fresh.session_seqs == (2,) and not fresh.duplicate
    with store_harness.reader() as reader:
        events = list(reader.events())
    assert [e.request_id for e in events] == ["r1", None, "r2"]
    assert events[0].event == InputSubmitted(content=[TextPart("hi")])


async def test_concurrent_appends_share_transactions_and_are_acknowledged_once_committed(store_harness: Any) -> None:
    """F-LOG-3: "A single writer batches concurrent appends into one transaction (group
    commit)" and "acknowledged only after their transaction commits". 64 appends queued at once
    go in far fewer groups than appends, each group one transaction (one timestamp); every
    append, when acknowledged, is already readable by another connection."""
    groups: list[list[Any]] = []
    seen_on_ack: dict[int, bool] = {}
    async with store_harness.open() as store:
        stop = store.on_commit(groups.append)
        go = trio.Event()
        reader = store_harness.reader()
        try:
            async def one(i: int) -> None:
                await go.wait()
                ack = await store.append(note(f"g{i}", f"s{i % 8}"))
                # (a reader of its own: what it sees is what SQLite committed)
                seen_on_ack[ack.seqs[0]] = any(True for _ in reader.rows(after=ack.seqs[0] - 1, limit=1))

            async with trio.open_nursery() as nursery:
                for i in range(64):
                    nursery.start_soon(one, i)
                await trio.testing.wait_all_tasks_blocked()
                go.set()
        finally:
            reader.close()
        stop()
    sizes = [len(g) for g in groups]
    assert sum(sizes) == 64 and sorted(seen_on_ack) == list(range(1, 65))
    assert all(seen_on_ack.values())
    assert len(groups) < 64 and max(sizes) > 1, sizes  # batched: not one transaction per append
    for g in groups:
        assert len({se.ts for se in g}) == 1  # one transaction, one timestamp
