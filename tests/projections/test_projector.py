"""The projector against a real log: incremental equals rebuild, positions, versions, corruption.

``Ledger`` below is a small, real projection (it needs decoded bodies), written for these tests
so that the body-reading path of the projector is exercised next to ``KindStats``.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from pathlib import Path
from typing import Sequence

import apsw
import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import projections.projector as projector_mod
from events.errors import CorruptEvent, StoreCorrupt
from events.reader import LogReader, StoredEvent, StoredRow
from events.secrets import Secrets
from events.store import Draft, EventStore, open_store
from events.types import (
    ContextCompacted,
    ContextEdited,
    InputPlaced,
    InputSubmitted,
    InputWithdrawn,
    JobFinished,
    JobStarted,
    ModelResponded,
    ProjectCreated,
    SessionConfigured,
    SessionCreated,
    SessionDeleted,
    SessionNamed,
    SkillLoaded,
    SkillUnloaded,
    TaskFinished,
    TaskStarted,
    TextPart,
    ToolFinished,
    ToolStarted,
    body_of,
)
from projections.projector import Projection, Projector, UnknownProjection, open_projections_db
from projections.registry import all_projections
from projections.stats import KindStats
from tests.rawlog import edit_log

_json = msgspec.json.Encoder()


class Ledger(Projection):
    """Per event: its kind and a digest of its decoded body; per session: count and last seq."""

    name = "test_ledger"
    version = 1
    needs_body = True
    tables = ("ledger_events", "ledger_sessions")

    def create(self, conn: apsw.Connection) -> None:
        conn.execute(
            "CREATE TABLE ledger_events(seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
            "session TEXT NOT NULL, digest TEXT NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE ledger_sessions(session TEXT PRIMARY KEY, events INTEGER NOT NULL, "
            "last_seq INTEGER NOT NULL)"
        )

    def apply(
        self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None
    ) -> None:
        assert events is not None and len(events) == len(rows)
        for row, ev in zip(rows, events):
            assert row.seq == ev.seq
            session = ev.session_id or ""
            digest = hashlib.sha256(_json.encode(body_of(ev.event))).hexdigest()
            conn.execute(
                "INSERT INTO ledger_events(seq, kind, session, digest) VALUES (?, ?, ?, ?)",
                (ev.seq, ev.kind, session, digest),
            )
            conn.execute(
                "INSERT INTO ledger_sessions(session, events, last_seq) VALUES (?, 1, ?) "
                "ON CONFLICT(session) DO UPDATE SET events = events + 1, last_seq = excluded.last_seq",
                (session, ev.seq),
            )


class LedgerV2(Ledger):
    """The same projection after a code change: a new column and a new version."""

    version = 2

    def create(self, conn: apsw.Connection) -> None:
        super().create(conn)
        conn.execute("ALTER TABLE ledger_events ADD COLUMN note TEXT NOT NULL DEFAULT 'v2'")


class Poisoned(Ledger):
    """Writes rows, then fails on a session.deleted event (a bug in a projection)."""

    name = "test_poisoned"
    tables = ("poisoned_events", "poisoned_sessions")

    def create(self, conn: apsw.Connection) -> None:
        conn.execute("CREATE TABLE poisoned_events(seq INTEGER PRIMARY KEY, kind TEXT NOT NULL)")
        conn.execute("CREATE TABLE poisoned_sessions(session TEXT PRIMARY KEY, events INTEGER NOT NULL)")

    def apply(
        self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None
    ) -> None:
        for row in rows:
            conn.execute("INSERT INTO poisoned_events(seq, kind) VALUES (?, ?)", (row.seq, row.kind))
            if row.kind == "session.deleted":
                raise RuntimeError(f"projection bug at seq {row.seq}")


# ---------------------------------------------------------------------------- helpers


def draft(kind: int, session: str | None, text: str) -> Draft:
    """One of a spread of event kinds; kinds 0-5 never include ``session.deleted``."""
    if session is None:
        return Draft(ProjectCreated(name=text, workspace="/ws"), project_id="p1")
    env = dict(project_id="p1", session_id=session)
    main = dict(env, agent_id="main")
    makers = [
        lambda: Draft(SessionCreated(model=text or None), **env),
        # (several text parts: the projections join them alike, incrementally and in a rebuild)
        lambda: Draft(InputSubmitted(content=[TextPart(text), TextPart("and more")]), **main),
        lambda: Draft(ModelResponded(text=text * 3, stop_reason="end"), **main),
        lambda: Draft(ToolStarted(call_id=text[:4], name="read_file", arguments="{}"), task_id="t", **env),
        lambda: Draft(ToolFinished(call_id=text[:4], name="read_file", content=[TextPart(text), TextPart(text[::-1])]), **env),
        lambda: Draft(ContextEdited(op="snip", item_ids=[text]), **env),
        lambda: Draft(SessionConfigured(model=text, thinking_level="high"), **env),
        lambda: Draft(SessionNamed(name=text), **env),
        lambda: Draft(TaskStarted(input_request_id=f"r-{text}"), task_id="t", **main),
        lambda: Draft(TaskFinished(status="completed"), task_id="t", **main),
        lambda: Draft(InputPlaced(input_request_id=f"r-{text}"), **main),
        lambda: Draft(InputWithdrawn(input_request_id=f"r-{text}"), **main),
        lambda: Draft(SessionDeleted(reason=text), **env),
        # the kinds of jobs, skills and compaction (the sessions projection keeps running jobs)
        lambda: Draft(JobStarted(job_id=f"job_{text[:2]}", command=text), **main),
        lambda: Draft(JobFinished(job_id=f"job_{text[:2]}", status="exited", exit_code=0, output_tail=text), **main),
        lambda: Draft(SkillLoaded(name="review", instructions=text, base_dir="skills/review"), **main),
        lambda: Draft(SkillUnloaded(name="review"), **main),
        lambda: Draft(ContextCompacted(summary=text, replaced_item_ids=[text[:4]]), **main),
    ]
    return makers[kind % len(makers)]()


def sample_drafts(n: int) -> list[Draft]:
    sessions = [None, "s1", "s2", "s3"]
    return [draft(i % 6, sessions[i % 4], f"text {i} " * (i % 7)) for i in range(n)]


async def append_each(store: EventStore, drafts: Sequence[Draft]) -> None:
    for d in drafts:
        await store.append(d)


def write(data_dir: Path, drafts: Sequence[Draft]) -> None:
    async def main() -> None:
        async with open_store(data_dir, synchronous="OFF") as store:
            await append_each(store, drafts)

    trio.run(main)


def make_projector(data_dir: Path, projections: Sequence[Projection], *, memory: bool = False) -> Projector:
    return Projector(LogReader(data_dir), open_projections_db(data_dir, memory=memory), projections)


def close(projector: Projector) -> None:
    projector.close()
    projector.reader.close()


def dumps(projector: Projector) -> dict[str, list[tuple]]:
    return {name: projector.dump(name) for name in sorted(projector.projections)}


def corrupt(data_dir: Path, seq: int, body: bytes = b"not a zstd frame") -> None:
    edit_log(data_dir, "UPDATE events SET body = ? WHERE seq = ?", (body, seq))


# ---------------------------------------------------------------------------- property


KEY = "zxcabyzx"  # a configured key of the shortest length scrubbed (MIN_SECRET)
draft_strategy = st.builds(
    draft,
    st.integers(0, 17),
    st.sampled_from([None, "a", "b", "c"]),
    # (texts that hold the key, or only a piece of it, too)
    st.text(alphabet="abcxyz é✓", min_size=4, max_size=30) | st.sampled_from([f"my {KEY} é", KEY, KEY[:7] + " ab"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    appends=st.lists(st.lists(draft_strategy, min_size=1, max_size=4), min_size=1, max_size=25),
    cuts=st.lists(st.integers(0, 25), max_size=8),
    batch=st.sampled_from([1, 2, 3, 7, projector_mod.BATCH]),
    keyed=st.booleans(),
)
def test_incremental_catch_up_equals_one_rebuild(
    appends: list[list[Draft]], cuts: list[int], batch: int, keyed: bool
) -> None:
    """Append, catch up, append, catch up… gives exactly what one rebuild from zero gives; with a
    key configured too (the history index scrubbed of it: the events are stored as written)."""
    known = Secrets({KEY: "LENS_TEST_KEY"}) if keyed else None
    boundaries = sorted({min(c, len(appends)) for c in cuts} | {len(appends)})
    saved = projector_mod.BATCH
    projector_mod.BATCH = batch  # also exercise batches that end mid-step
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"

            async def scenario() -> None:
                async with open_store(data, synchronous="OFF") as store:
                    live = make_projector(data, [*all_projections(known), Ledger()])
                    try:
                        start = 0
                        for end in boundaries:
                            for group in appends[start:end]:
                                await store.append(*group)
                            start = end
                            live.catch_up()
                            for name in live.projections:
                                assert live.position(name) == store.last_seq
                        incremental = dumps(live)
                    finally:
                        close(live)

                    fresh = make_projector(data, [*all_projections(known), Ledger()], memory=True)
                    try:
                        read = fresh.rebuild()
                        assert read == store.last_seq == sum(len(g) for g in appends)
                        assert dumps(fresh) == incremental
                    finally:
                        close(fresh)
                    if keyed:
                        assert KEY not in repr(incremental["history"])

                    # And the content is what the drafts say, not merely self-consistent.
                    kinds: dict[str, int] = {}
                    for group in appends:
                        for d in group:
                            k = type(d.event).__struct_config__.tag
                            kinds[k] = kinds.get(k, 0) + 1
                    stats = incremental["stats"][1:]
                    assert {k: n for k, n, _, _ in stats} == kinds
                    ledger_rows = incremental["test_ledger"][1 : 1 + store.last_seq]
                    assert [r[0] for r in ledger_rows] == list(range(1, store.last_seq + 1))

            trio.run(scenario)
    finally:
        projector_mod.BATCH = saved


def test_history_keeps_the_text_parts_of_an_item_apart(tmp_path: Path) -> None:
    """Audit C, defect 2: an input or tool result of several text parts is stored (and indexed,
    and read by history_read) with its parts joined by a newline, incrementally and in a rebuild
    alike; a word of the second part is found, the glued word is not."""
    from projections.history import HistoryIndex, HistoryProjection

    assert HistoryProjection.version == 8  # (5, 7: stored columns or tables changed; 8: indexed text): older history tables are rebuilt
    data = tmp_path / "data"
    main = dict(project_id="p1", session_id="s1", agent_id="main")
    write(data, [
        Draft(SessionCreated(), project_id="p1", session_id="s1"),
        Draft(InputSubmitted(content=[TextPart("hello"), TextPart("world")]), request_id="r1", **main),
        Draft(InputPlaced(input_request_id="r1"), task_id="t", **main),
        Draft(ToolFinished(call_id="c1", name="read_file", content=[TextPart("alpha"), TextPart("beta")]),
              task_id="t", **main),
    ])
    live = make_projector(data, all_projections())
    live.catch_up()
    incremental = dumps(live)
    texts = {r[1]: r[8] for r in incremental["history"] if len(r) > 8}
    assert texts == {"c3": "hello\nworld", "c4": "alpha\nbeta"}
    index = HistoryIndex(live.conn)
    assert [h.context_item_id for h in index.search("p1", "world")[0]] == ["c3"]
    assert [h.context_item_id for h in index.search("p1", "beta")[0]] == ["c4"]
    assert index.search("p1", "helloworld")[0] == []
    assert index.read("c3")["text"] == "hello\nworld"
    close(live)
    fresh = make_projector(data, all_projections(), memory=True)
    try:
        fresh.rebuild()
        assert dumps(fresh) == incremental
    finally:
        close(fresh)


# ---------------------------------------------------------------------------- positions


async def test_position_is_the_last_seq_after_catch_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with open_store(data, synchronous="OFF") as store:
        projector = make_projector(data, [KindStats(), Ledger()])
        try:
            assert projector.position("stats") == projector.position("test_ledger") == 0
            assert projector.catch_up() == 0
            await append_each(store, sample_drafts(9))
            assert projector.catch_up() == 9
            stored = dict(projector.conn.execute("SELECT name, seq FROM positions"))
            assert stored == {"stats": 9, "test_ledger": 9}
            assert projector.catch_up() == 0  # nothing new: reads nothing
            await append_each(store, sample_drafts(3))
            assert projector.catch_up(["stats"]) == 3  # one projection only
            assert (projector.position("stats"), projector.position("test_ledger")) == (12, 9)
            assert projector.catch_up() == 3  # the other one reads from its own position
            assert projector.position("test_ledger") == 12
        finally:
            close(projector)


async def test_rows_and_position_share_one_transaction(tmp_path: Path) -> None:
    """A failing apply leaves neither rows nor a moved position behind."""
    data = tmp_path / "data"
    async with open_store(data, synchronous="OFF") as store:
        await append_each(store, sample_drafts(5))
        projector = make_projector(data, [KindStats(), Poisoned()])
        try:
            projector.catch_up()
            before = dumps(projector)
            assert projector.position("test_poisoned") == 5
            await append_each(store, sample_drafts(2))
            await store.append(Draft(SessionDeleted(reason="x"), project_id="p1", session_id="s1"))
            await append_each(store, sample_drafts(2))
            with pytest.raises(RuntimeError, match="projection bug at seq 8"):
                projector.catch_up()
            # Seqs 6 and 7 were inserted before the failure, and rolled back with it.
            assert dumps(projector) == before
            assert projector.position("test_poisoned") == projector.position("stats") == 5
        finally:
            close(projector)


def test_unknown_projection_names_the_known_ones(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, sample_drafts(2))
    projector = make_projector(data, all_projections())
    try:
        known = ", ".join(sorted(p.name for p in all_projections()))
        with pytest.raises(UnknownProjection) as info:
            projector.catch_up(["nope"])
        assert str(info.value) == f"no projection named 'nope'; known: {known}"
        assert info.value.code == "PROJECTION_UNKNOWN"
        assert projector.position("stats") == 0
    finally:
        close(projector)


# ---------------------------------------------------------------------------- versions and disposal


def test_a_projection_of_another_version_is_rebuilt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, sample_drafts(14))
    old = make_projector(data, [Ledger(), KindStats()])
    old.catch_up()
    v1 = dumps(old)
    close(old)

    # Same version: kept as is, nothing to re-read.
    same = make_projector(data, [Ledger(), KindStats()])
    assert same.position("test_ledger") == 14
    assert same.catch_up() == 0
    assert dumps(same) == v1
    close(same)

    # New version: its tables are recreated and refilled from seq 1; other projections are kept.
    new = make_projector(data, [LedgerV2(), KindStats()])
    try:
        assert new.position("test_ledger") == 0
        assert new.position("stats") == 14
        assert new.dump("test_ledger") == [("ledger_events",), ("ledger_sessions",)]
        assert new.catch_up() == 14
        assert new.position("test_ledger") == 14
        versions = dict(new.conn.execute("SELECT name, version FROM positions"))
        assert versions == {"test_ledger": 2, "stats": 1}
        v2 = new.dump("test_ledger")
        events_v1 = [r for r in v1["test_ledger"] if len(r) == 4]
        events_v2 = [r for r in v2 if len(r) == 5]
        assert [r[:4] for r in events_v2] == events_v1
        assert {r[4] for r in events_v2} == {"v2"}
        assert dumps(new)["stats"] == v1["stats"]
    finally:
        close(new)


def test_deleting_projections_db_reproduces_the_same_content(tmp_path: Path) -> None:
    data = tmp_path / "data"
    drafts = sample_drafts(40)
    write(data, drafts[:25])
    first = make_projector(data, [KindStats(), Ledger()])
    first.catch_up()
    close(first)
    write(data, drafts[25:])
    first = make_projector(data, [KindStats(), Ledger()])
    first.catch_up()
    before = dumps(first)
    close(first)

    removed = [p for p in data.iterdir() if p.name.startswith("projections.db")]
    assert removed
    for p in removed:
        p.unlink()
    again = make_projector(data, [KindStats(), Ledger()])
    try:
        assert again.position("stats") == 0
        assert again.catch_up() == 40
        assert dumps(again) == before
    finally:
        close(again)


# ---------------------------------------------------------------------------- corruption


def test_corrupt_row_stops_a_body_projection_with_its_seq(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, sample_drafts(10))
    corrupt(data, 6)
    projector = make_projector(data, [Ledger()])
    try:
        for _ in range(2):  # it stops there every time: the row is never skipped
            with pytest.raises(CorruptEvent) as info:
                projector.catch_up()
            assert info.value.seq == 6
            assert str(info.value).startswith("seq 6: ")
            assert info.value.code == "EVENT_CORRUPT"
            assert projector.position("test_ledger") < 6
            seqs = [r[0] for r in projector.conn.execute("SELECT seq FROM ledger_events")]
            assert all(s < 6 for s in seqs)
            assert seqs == list(range(1, projector.position("test_ledger") + 1))
    finally:
        close(projector)


def test_damaged_pages_the_reads_skip_stop_the_projection(tmp_path: Path) -> None:
    """Table pages in the middle of the log overwritten with garbage: SQLite's ranged reads
    return no rows past them instead of an error. Catching up stopped there and reported
    success (`lens log stats` and `rebuild` showed a fraction of the log, exit 0)."""
    data = tmp_path / "data"
    rng = random.Random(7)
    write(data, [Draft(InputSubmitted(content=[TextPart(rng.randbytes(600).hex())]), project_id="p1",
                       session_id="s1") for _ in range(2000)])
    conn = apsw.Connection(str(data / "events.db"))
    try:
        leaves = [n for (n,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY pageno")]
        page_size = conn.execute("PRAGMA page_size").fetchall()[0][0]
    finally:
        conn.close()
    middle = leaves[len(leaves) // 2]
    assert middle + 1 in leaves
    with open(data / "events.db", "r+b") as f:  # from inside one leaf page across the next
        f.seek((middle - 1) * page_size + 1152)
        f.write(b"\xaa" * (2 * page_size))
    projector = make_projector(data, [KindStats()])
    try:
        with pytest.raises(StoreCorrupt) as info:
            projector.catch_up()
        assert "no event after seq" in str(info.value) and "the log's last seq is 2000" in str(info.value)
        assert projector.position("stats") < 2000
    finally:
        close(projector)


def test_corrupt_row_does_not_stop_a_projection_of_columns_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, sample_drafts(10))
    corrupt(data, 6)
    projector = make_projector(data, [KindStats()])
    try:
        assert projector.catch_up() == 10
        assert projector.position("stats") == 10
        assert sum(n for _, n, _, _ in KindStats.read(projector.conn)) == 10
    finally:
        close(projector)


@pytest.mark.parametrize("batch", [projector_mod.BATCH, 4])
def test_corrupt_row_stops_a_body_projection_right_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(projector_mod, "BATCH", batch)
    data = tmp_path / "data"
    write(data, sample_drafts(10))
    corrupt(data, 6)
    projector = make_projector(data, [Ledger()])
    try:
        with pytest.raises(CorruptEvent):
            projector.catch_up()
        # Everything before the corrupt row is projected; the position names seq 5.
        assert projector.position("test_ledger") == 5
        assert [r[0] for r in projector.conn.execute("SELECT seq FROM ledger_events")] == [1, 2, 3, 4, 5]
    finally:
        close(projector)


# ---------------------------------------------------------------------------- two processes, memory


def test_a_second_projector_catching_up_meanwhile_folds_nothing_twice(tmp_path: Path) -> None:
    # Two processes (here: two connections) catch up one projections.db at the same time. The
    # first reads its start position, then the second catches up completely; the first's rows
    # must then not be folded again (before, `lens log stats` run 4x at once could double-count).
    data = tmp_path / "data"
    write(data, sample_drafts(300))
    first = make_projector(data, [KindStats(), Ledger()])
    second = make_projector(data, [KindStats(), Ledger()])
    reference = make_projector(data, [KindStats(), Ledger()], memory=True)
    calls = []

    def meanwhile(done: int, total: int) -> None:
        if not calls:
            second.catch_up()  # before `first` applies anything
        calls.append(done)

    try:
        first.catch_up(progress=meanwhile)
        reference.catch_up()
        assert dumps(first) == dumps(second) == dumps(reference)
        assert KindStats.read(first.conn) == KindStats.read(reference.conn)
        # and a rebuild by the other process meanwhile: the first starts over from it
        calls.clear()
        write_more = sample_drafts(320)[300:]
        write(data, write_more)

        def rebuild_meanwhile(done: int, total: int) -> None:
            if not calls:
                second.rebuild()
            calls.append(done)

        first.catch_up(progress=rebuild_meanwhile)
        reference.catch_up()
        assert dumps(first) == dumps(reference)
    finally:
        for p in (first, second, reference):
            close(p)


def test_a_rebuild_is_one_transaction_that_readers_never_see_half_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild while another process reads (a running daemon's lists and history search):
    the projections were emptied in one commit and refilled in chunks, so the daemon served an
    empty session list and "no such project" for the whole rebuild, and a rebuild stopped half
    way (Ctrl-C, kill) left them half-built. Now readers see the old content until the rebuilt
    one is committed, and an interrupted rebuild changes nothing."""
    monkeypatch.setattr(projector_mod, "BATCH", 40)  # several chunks, a progress call after each
    data = tmp_path / "data"
    write(data, sample_drafts(300))
    builder = make_projector(data, [KindStats(), Ledger()])
    watcher = make_projector(data, [KindStats(), Ledger()])  # another process's connection
    names = sorted(builder.projections)

    def state() -> tuple[dict[str, list[tuple]], dict[str, int]]:
        return dumps(watcher), {n: watcher.position(n) for n in names}

    try:
        builder.catch_up()
        before = state()
        assert before[1] == {n: 300 for n in names} and before[0]["test_ledger"]
        seen = []
        assert builder.rebuild(progress=lambda done, total: seen.append((done, state()))) == 300
        assert [done for done, _ in seen] == list(range(0, 300, 40)) + [300]
        assert all(during == before for _, during in seen)  # never emptied, never half-built
        assert state() == before  # rebuilt: the same content, committed

        def interrupt(done: int, total: int) -> None:
            if done >= 120:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            builder.rebuild(progress=interrupt)
        assert state() == before  # rolled back whole
        write(data, sample_drafts(320)[300:])
        assert builder.catch_up() == 20  # and the builder's connection goes on as usual
        assert watcher.position(names[0]) == 320
    finally:
        close(builder)
        close(watcher)


def test_decoded_events_are_held_a_bounded_amount_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write(data, [Draft(ModelResponded(text=f"{i} " + "x" * 3000), session_id="s1") for i in range(40)])
    monkeypatch.setattr(projector_mod, "BATCH_BYTES", 10_000)  # ~3 events of ~3 KB
    sizes: list[int] = []

    class Sizes(Ledger):
        name = "test_sizes"

        def apply(self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
            sizes.append(len(rows))
            super().apply(conn, rows, events)

    projector = make_projector(data, [Sizes()])
    try:
        assert projector.catch_up() == 40
        assert sum(sizes) == 40 and max(sizes) == 3
    finally:
        close(projector)


def test_a_raw_size_no_writer_stores_stops_the_projection_with_its_seq(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, sample_drafts(20))
    conn = apsw.Connection(str(data / "events.db"))
    with conn:
        conn.execute("UPDATE events SET raw_size = ? WHERE seq = 7", (2**62,))
    conn.close()
    projector = make_projector(data, [KindStats()])
    try:
        with pytest.raises(CorruptEvent) as info:
            projector.catch_up()
        assert str(info.value) == f"seq 7: raw_size {2**62} is outside 1..{32 * 1024 * 1024} (the maximum event size)"
        assert projector.position("stats") == 6
    finally:
        close(projector)


def test_projectors_of_several_processes_starting_together_wait_for_each_other(tmp_path: Path) -> None:
    """`lens log stats` x4 and `lens log rebuild` x2 at once on a fresh projections.db: a reset in
    a deferred transaction (read, then write) failed at once with BUSY instead of waiting."""
    import threading

    write(tmp_path, sample_drafts(40))
    for _round in range(12):
        for leftover in tmp_path.glob("projections.db*"):
            leftover.unlink()
        barrier = threading.Barrier(6)
        errors: list[BaseException] = []

        def one(rebuild: bool) -> None:
            try:
                barrier.wait(timeout=30)
                with LogReader(tmp_path) as reader:
                    projector = Projector(reader, open_projections_db(tmp_path),
                                          all_projections() if rebuild else [KindStats()])
                    try:
                        projector.rebuild() if rebuild else projector.catch_up()
                    finally:
                        projector.close()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i >= 4,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
    with LogReader(tmp_path) as reader:
        projector = Projector(reader, open_projections_db(tmp_path), [KindStats()])
        try:
            assert sum(n for _kind, n, _s, _r in KindStats.read(projector.conn)) == 40
        finally:
            projector.close()


# ---------------------------------------------------------------------------- another log


def _set_meta(data_dir: Path, key: str, value: str) -> None:
    edit_log(data_dir, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))


def _fresh_dump(data_dir: Path, tmp: Path) -> dict[str, list[tuple]]:
    """What a projector folding this log from nothing holds (in a copy, own projections.db)."""
    copy = Path(tempfile.mkdtemp(dir=tmp))
    for name in ("events.db", "events.db-wal"):
        if (data_dir / name).exists():
            (copy / name).write_bytes((data_dir / name).read_bytes())
    projector = make_projector(copy, [KindStats(), Ledger()])
    try:
        projector.catch_up()
        return dumps(projector)
    finally:
        close(projector)


def _dump_after_catch_up(data_dir: Path) -> dict[str, list[tuple]]:
    projector = make_projector(data_dir, [KindStats(), Ledger()])
    try:
        projector.catch_up()
        return dumps(projector)
    finally:
        close(projector)


def test_projections_of_a_log_cut_short_start_over(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, sample_drafts(40))
    before = _dump_after_catch_up(data)
    edit_log(data, "DELETE FROM events WHERE seq > 25")  # a backup put back, say
    after = _dump_after_catch_up(data)
    assert after != before
    assert after == _fresh_dump(data, tmp_path)


def test_projections_of_another_log_start_over(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write(one, sample_drafts(30))
    write(two, [draft(i % 6, "other", f"other {i}") for i in range(45)])
    _set_meta(one, "created_ts", "1")  # (two logs made in one millisecond carry one stamp)
    _set_meta(two, "created_ts", "2")
    assert _dump_after_catch_up(one) != _fresh_dump(two, tmp_path)
    # the other log copied over this one's events.db (longer: no position is past its end)
    for name in ("events.db-wal", "events.db-shm"):
        (one / name).unlink(missing_ok=True)
    (one / "events.db").write_bytes((two / "events.db").read_bytes())
    assert _dump_after_catch_up(one) == _fresh_dump(two, tmp_path)


def test_a_position_below_zero_starts_over(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, sample_drafts(20))
    expected = _dump_after_catch_up(data)
    conn = open_projections_db(data)
    try:
        conn.execute("UPDATE positions SET seq = -100")
    finally:
        conn.close()
    assert _dump_after_catch_up(data) == expected  # not every row folded twice
