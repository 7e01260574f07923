"""Paging one session of a long log (F-LOG-1 reads; ``GET /sessions/{id}/events``, a replay,
the SSE stream's catch-up): a page costs its rows, not the session's length.

The work is counted in SQLite virtual-machine steps (a progress handler), never timed."""

from __future__ import annotations

from pathlib import Path

import trio

from events.reader import LogReader
from events.store import Draft, EventStore
from events.types import InstructionAppended


async def _write(data_dir: Path, n: int) -> None:
    """``n`` events of session ``long`` interleaved one to one with another session's."""
    store = EventStore.open(data_dir)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            for i in range(0, n, 250):
                await store.append(*(Draft(InstructionAppended(text=f"{s} {k}"), session_id=s, agent_id="main")
                                     for k in range(i, min(n, i + 250)) for s in ("long", "other")))
            nursery.cancel_scope.cancel()
    finally:
        store.close_writer()
        store.close()


def _steps_of_pages(data_dir: Path) -> tuple[int, int, list[int]]:
    """VM steps of reading the first page, and of the last page, of session ``long`` (100
    rows after a seq, as the events route reads them); and the seqs of a whole paged read."""
    with LogReader(data_dir) as reader:
        steps = [0]

        def count() -> bool:
            steps[0] += 1
            return False

        reader.conn.set_progress_handler(count, 10)
        seqs = [r.seq for r in reader.rows(session_id="long", page=100)]
        steps[0] = 0
        first = list(reader.rows(session_id="long", after=seqs[0], limit=100))
        at_start = steps[0]
        steps[0] = 0
        last = list(reader.rows(session_id="long", after=seqs[-101], limit=100))
        at_end = steps[0]
        assert [r.seq for r in first] == seqs[1:101] and [r.seq for r in last] == seqs[-100:]
        upto = list(reader.rows(session_id="long", after=seqs[9], to=seqs[19]))
        assert [r.seq for r in upto] == seqs[10:20]
        return at_start, at_end, seqs


def test_a_page_of_a_session_costs_the_same_in_a_log_four_times_as_long(tmp_path: Path):
    """A read of one session by seq walked and sorted every row of the session after the cursor
    in SQLite (ORDER BY seq over the (session_id, session_seq) index): each page of a long
    session cost its whole length, and paging through it the square. Now a page is a range of
    that index, found by bisection."""
    small, large = tmp_path / "small", tmp_path / "large"
    trio.run(_write, small, 2_000)
    trio.run(_write, large, 8_000)
    s_start, s_end, s_seqs = _steps_of_pages(small)
    l_start, l_end, l_seqs = _steps_of_pages(large)
    assert len(s_seqs) == 2_000 and len(l_seqs) == 8_000
    assert l_seqs == sorted(l_seqs) and all(q % 2 == 1 for q in l_seqs)  # (its own, in seq order)
    # Four times the session: the same work per page (bisection adds a few probes), not 4x.
    assert l_start <= 1.5 * s_start, (s_start, l_start)
    assert l_end <= 1.5 * s_end, (s_end, l_end)


async def test_a_page_says_the_decoded_bytes_its_rows_declare(store, store_harness):
    # (the events route's estimate of a page's size, known before anything is made of it)
    texts = [f"{k} " + "é\"x\n" * (k * 5_000) for k in range(12)]
    await store.append(*(Draft(InstructionAppended(text=text), session_id=s, agent_id="main")
                         for text in texts for s in ("a", "b")))
    with store_harness.reader() as reader:
        declared = {row.seq: row.raw_size for row in reader.rows(session_id="a")}
    # (the whole session; a page cut by its limit; one cut by its byte budget, after its first row)
    for after, limit, max_bytes, count in ((0, 1000, 16 << 20, 12), (0, 5, 16 << 20, 5),
                                           (min(declared), 1000, 150_000, 2)):
        page = await store.read_event_page(session_id="a", after=after, limit=limit, max_bytes=max_bytes)
        events = await store.read_events(session_id="a", after=after, limit=limit, max_bytes=max_bytes)
        assert page.events == events and len(events) == count
        assert page.raw_bytes == sum(declared[e.seq] for e in events) > sum(len(e.event.text) for e in events)
