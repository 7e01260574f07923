"""A state machine over the real event store and its projections.

Hypothesis drives the store's operations in random interleavings: appends of every kind (the
strategies of test_roundtrip_hypothesis.py) to a few sessions and to no session, with request ids
repeated alone and from concurrent trio tasks, several events in one append, with and without
``expected_session_seq``, dictionaries trained by hand and by the writer itself, the projector's
catch-up (of all projections or of ``stats`` alone), rebuilds, ``lens log stats`` and ``rebuild``
beside it, the store and the projector closed and opened again, and every way of reading back
(``read_events`` by range and by session in pages, the tail reader, ``LogReader``, ``lens log
decode``). ``CrashingStoreMachine`` adds a writer killed under load (crash_child.py).

After every step the log is read back whole and compared with a model of what was acknowledged:
``seq`` is global and gap-free, ``session_seq`` gap-free per session, every acknowledged event is
stored with its exact envelope and body, a repeated request id answered with the original and
wrote nothing, the commit listeners saw each stored event once, and ``lens log verify``'s checks
find nothing. After each catch-up, the positions are the log's last seq, the ``stats`` figures
are the log's own (per kind: events, stored and raw bytes), and every projection equals one
built from zero.

The store runs in a trio loop of its own thread (``_StoreThread``) so the machine's rules, which
Hypothesis calls synchronously, can reach it between steps; the store's writer runs in that loop's
nursery as the daemon's does.
"""

from __future__ import annotations

import contextlib
import functools
import io
import tempfile
import threading
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, Awaitable, Callable

import msgspec
import trio
import zstandard
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from events.codec import Codec
from events.errors import AppendRejected, ConcurrencyConflict, TooFewSamples
from events.reader import LogReader, StoredEvent
from events.secrets import Secrets
from events.store import AppendResult, Draft, EventStore
from events.types import kind_of
from projections.projector import Projector, open_projections_db
from projections.registry import all_projections
from projections.stats import KindStats
from runtime.cli import build_parser
from runtime.json_lines import json_line
from runtime.logcli import verify_log
from tests.events.test_crash import Ack, Retry, run_and_kill, text_for
from tests.events.test_roundtrip_hypothesis import ANY_EVENT

SESSIONS = ("s0", "s1", "s2")
REQUEST_IDS = ("r0", "r1", "r2")
_json = msgspec.json.Encoder()
CODEC = Codec()


class _StoreThread:
    """An open :class:`EventStore` whose writer runs in a trio loop on a thread of its own."""

    def __init__(self, data_dir: Path, **options: Any) -> None:
        self.store = EventStore.open(data_dir, **options)
        self.committed: list[StoredEvent] = []  # what the store's commit listeners were given
        self.store.on_commit(self.committed.extend)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread = threading.Thread(target=self._main, name="lens-test-store", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        async def serve() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                await nursery.start(self.store.run)
                self._ready.set()
                await self._stop.wait()
                self.store.close_writer()

        try:
            trio.run(serve)
        except BaseException as exc:  # reported by the next call (or by close)
            self._error = exc
            self._ready.set()

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``await fn(*args)`` in the store's trio loop; return what it returns."""
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def close(self) -> None:
        """Stop the writer (it drains what it accepted), end the loop, close the store."""
        if self._token is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()
        self.store.close()
        if self._error is not None:
            raise self._error


# One append: (event, session index or None, request id or None); the envelope's other ids follow
# from the session so that every column is exercised.
APPEND = st.tuples(ANY_EVENT, st.sampled_from((None, *range(len(SESSIONS)))),
                   st.sampled_from((None, *REQUEST_IDS)))


# A position in the log (or in a session), drawn as a fraction of its length (0/8 … 9/8, one past
# the end) so that what is drawn does not depend on the length: after a crash the model holds
# as many events as the killed writer committed, which varies from run to run.
POINT = st.integers(0, 9)


def _point(eighths: int | None, n: int) -> int | None:
    return None if eighths is None else eighths * n // 8


def _draft(event: Any, session: int | None, request_id: str | None, n: int = 0) -> Draft:
    sid = SESSIONS[session] if session is not None else None
    return Draft(event, project_id=None if session == 2 else "p", session_id=sid,
                 agent_id="a" if n % 2 else None, task_id=f"t{n % 3}" if session is not None else None,
                 request_id=request_id)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory()
        self.data_dir = Path(self._tmp.name) / "data"
        self.running = _StoreThread(self.data_dir, auto_dictionary_after=None)
        # The model: every acknowledged event by seq (its draft and ts), the session numbers
        # given, and the original answer of each recorded (session, request id).
        self.events: list[tuple[Draft, int, int | None]] = []  # index seq - 1: (draft, ts, session_seq)
        self.session_last: dict[str, int] = defaultdict(int)
        self.requests: dict[tuple[str, str], tuple[int, int, int]] = {}
        self.appended: dict[tuple[str, str], tuple[Draft, ...]] = {}  # the append that recorded each
        self.projector: Projector | None = None
        self.opened_at = 0  # the log's last seq when the running store was opened
        self.crashes = 0

    # ------------------------------------------------------------------ helpers

    @property
    def store(self) -> EventStore:
        return self.running.store

    def _call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return self.running.call(fn, *args)

    def _record(self, drafts: tuple[Draft, ...], result: AppendResult, *, retried: bool = True) -> None:
        """Check a fresh (not duplicate) result against the model and add its events; their
        request ids join those :meth:`repeat_a_request` retries unless ``retried`` is False."""
        assert not result.duplicate
        assert len(result.seqs) == len(drafts)
        assert result.seqs == tuple(range(len(self.events) + 1, len(self.events) + 1 + len(drafts))), (
            result.seqs, len(self.events))
        assert result.ts >= max((ts for _, ts, _ in self.events[-1:]), default=0)
        for d, seq, sseq in zip(drafts, result.seqs, result.session_seqs):
            if d.session_id is None:
                assert sseq is None
            else:
                self.session_last[d.session_id] += 1
                assert sseq == self.session_last[d.session_id], (d.session_id, sseq)
            if d.request_id is not None and retried:
                self.requests[(d.session_id, d.request_id)] = (seq, sseq, result.ts)
                self.appended[(d.session_id, d.request_id)] = drafts
            self.events.append((d, result.ts, sseq))

    def _original(self, drafts: tuple[Draft, ...]) -> tuple[int, int, int] | None:
        for d in drafts:
            if d.request_id is not None and d.session_id is not None:
                return self.requests.get((d.session_id, d.request_id))
        return None

    def _check_duplicate(self, result: AppendResult, original: tuple[int, int, int]) -> None:
        assert result.duplicate, result
        assert (result.seqs, result.session_seqs, result.ts) == ((original[0],), (original[1],), original[2])

    def _expectation(self, drafts: tuple[Draft, ...], expected: int | None) -> str:
        """What an append of ``drafts`` must give: "rejected" (the envelope rules), "duplicate"
        (a recorded request id), "conflict" (``expected`` is not the session's last number) or
        "stored"."""
        rids = [d for d in drafts if d.request_id is not None]
        if len(rids) == 1 and self._original(drafts) is not None:
            return "duplicate"  # (checked before expected_session_seq: a retry is answered)
        if len(rids) > 1 or any(d.session_id is None for d in rids):
            return "rejected"
        if expected is not None:
            sids = {d.session_id for d in drafts}
            if len(sids) != 1 or None in sids:
                return "rejected"
            if self.session_last[drafts[0].session_id] != expected:  # type: ignore[index]
                return "conflict"
        return "stored"

    def _append(self, drafts: tuple[Draft, ...], expected: int | None = None) -> None:
        want = self._expectation(drafts, expected)
        original = self._original(drafts)
        append = functools.partial(self.store.append, *drafts, expected_session_seq=expected)
        if want in ("rejected", "conflict"):
            error = AppendRejected if want == "rejected" else ConcurrencyConflict
            try:
                result = self._call(append)
            except error:
                return
            raise AssertionError(f"an append that should be {want} gave {result}")
        result = self._call(append)
        if want == "duplicate":
            assert original is not None
            self._check_duplicate(result, original)
        else:
            self._record(drafts, result)

    def _expected_json(self, seq: int) -> bytes:
        d, ts, sseq = self.events[seq - 1]
        # (as `lens log decode` prints it: U+0085, U+2028 and U+2029 escaped, so one event is one line)
        return json_line(_json.encode(StoredEvent(seq, ts, d.project_id, d.session_id, sseq, d.agent_id, d.task_id,
                                                  kind_of(d.event), d.request_id, d.event).to_json()))

    def _check_events(self, got: list[StoredEvent], seqs: list[int]) -> None:
        assert [e.seq for e in got] == seqs
        for e in got:
            d, ts, sseq = self.events[e.seq - 1]
            assert (e.ts, e.project_id, e.session_id, e.session_seq, e.agent_id, e.task_id, e.kind,
                    e.request_id) == (ts, d.project_id, d.session_id, sseq, d.agent_id, d.task_id,
                                      kind_of(d.event), d.request_id), e.seq
            assert e.event == d.event, e.seq

    def _read_pages(self, limit: int, **filters: Any) -> list[StoredEvent]:
        """Every page of ``read_events`` until an empty one, going on after the last seq read
        (or session_seq, for a session)."""
        out: list[StoredEvent] = []
        after = filters.pop("after", 0)
        after_ss = filters.pop("after_session_seq", None)
        while True:
            page = self._call(
                lambda: self.store.read_events(after=after, limit=limit, after_session_seq=after_ss, **filters))
            assert len(page) <= limit
            if not page:
                return out
            out.extend(page)
            after = page[-1].seq
            if after_ss is not None:
                after_ss = page[-1].session_seq

    # ------------------------------------------------------------------ appends

    @rule(append=APPEND)
    def append_one(self, append: tuple[Any, int | None, str | None]) -> None:
        event, session, rid = append
        self._append((_draft(event, session, rid, len(self.events)),))

    @rule(appends=st.lists(APPEND, min_size=1, max_size=3), data=st.data())
    def append_expecting(self, appends: list[tuple[Any, int | None, str | None]], data: st.DataObject) -> None:
        """An append with ``expected_session_seq``: the session's last number, or a stale one
        (a conflict, unless its request id is recorded: then the original answers)."""
        drafts = tuple(_draft(e, s, r, len(self.events) + i) for i, (e, s, r) in enumerate(appends))
        sid = drafts[0].session_id
        last = self.session_last[sid] if sid is not None else 0
        expected = max(last + data.draw(st.sampled_from((0, -1, 1)), label="expected, from the last"), 0)
        self._append(drafts, expected)

    @rule(appends=st.lists(APPEND, min_size=2, max_size=4))
    def append_together(self, appends: list[tuple[Any, int | None, str | None]]) -> None:
        """Several events in one append (at most one may carry a request id)."""
        self._append(tuple(_draft(e, s, r, len(self.events) + i) for i, (e, s, r) in enumerate(appends)))

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), same_body=st.booleans(), alone=st.booleans(),
          expected=st.sampled_from((None, 0, 1)))
    def repeat_a_request(self, data: st.DataObject, same_body: bool, alone: bool, expected: int | None) -> None:
        """A retry of a recorded request id: the whole append that recorded it or its event
        alone, with its original event or another one, with a (most likely stale)
        ``expected_session_seq`` or without."""
        key = data.draw(st.sampled_from(sorted(self.requests)), label="request")
        drafts = self.appended[key]
        if alone:
            drafts = tuple(d for d in drafts if d.request_id is not None)
        if not same_body:
            other = data.draw(ANY_EVENT, label="other event")
            drafts = tuple(replace(d, event=other) if d.request_id is not None else d for d in drafts)
        before = len(self.events)
        self._append(drafts, expected)
        assert len(self.events) == before

    @rule(appends=st.lists(st.tuples(ANY_EVENT, st.sampled_from(range(len(SESSIONS))),
                                     st.sampled_from((None, *REQUEST_IDS[:2])), st.integers(0, 2)),
                           min_size=2, max_size=6))
    def append_concurrently(self, appends: list[tuple[Any, int, str | None, int]]) -> None:
        """Appends from concurrent trio tasks, request ids repeated among them and against the
        log. A task passes 0-2 checkpoints before appending, so the appends are split over one
        or more trio batches (one writer group, or several)."""
        drafts = [(_draft(e, s, r, len(self.events) + i),) for i, (e, s, r, _) in enumerate(appends)]
        results: list[AppendResult | None] = [None] * len(drafts)

        async def all_at_once() -> None:
            async def one(i: int) -> None:
                for _ in range(appends[i][3]):
                    await trio.lowlevel.checkpoint()
                results[i] = await self.store.append(*drafts[i])

            async with trio.open_nursery() as nursery:
                for i in range(len(drafts)):
                    nursery.start_soon(one, i)

        originals = [self._original(d) for d in drafts]
        self._call(all_at_once)
        fresh: list[tuple[int, tuple[Draft, ...], AppendResult]] = []
        for d, original, result in zip(drafts, originals, results):
            assert result is not None
            if original is not None:  # recorded before: every repeat answers with it
                self._check_duplicate(result, original)
            elif not result.duplicate:
                fresh.append((result.seq, d, result))
        for _, d, result in sorted(fresh, key=lambda f: f[0]):  # in the order the log holds them
            self._record(d, result)
        for d, original, result in zip(drafts, originals, results):  # twins within the group
            assert result is not None
            if original is None and result.duplicate:
                twin = self._original(d)
                assert twin is not None, "a duplicate of a request id nothing recorded"
                self._check_duplicate(result, twin)

    # ------------------------------------------------------------------ dictionaries, reopening

    @rule(samples=st.sampled_from((8, 50, 5000)))
    def train_a_dictionary(self, samples: int) -> None:
        before = self.store.codec.active_dict_id
        try:
            dict_id = self._call(trio.to_thread.run_sync,
                                 lambda: self.store.train_dictionary(max_samples=samples, size=2048))
        except (TooFewSamples, zstandard.ZstdError):  # too few (or too alike) events to train on
            assert self.store.codec.active_dict_id == before
            return
        assert self.store.codec.active_dict_id == dict_id

    @rule(cached_sessions=st.sampled_from((1, 2, 4096)), auto_dictionary=st.booleans())
    def reopen_the_store(self, cached_sessions: int, auto_dictionary: bool) -> None:
        """Close the store (its writer drains) and open it again; a tiny session cache makes the
        writer read sessions' numbers back from the log, and a low ``auto_dictionary_after``
        lets it train a dictionary by itself."""
        self.running.close()
        self.opened_at = len(self.events)
        self.running = _StoreThread(self.data_dir, cached_sessions=cached_sessions,
                                    auto_dictionary_after=len(self.events) + 10 if auto_dictionary else None)
        assert self.store.last_seq == len(self.events)

    # ------------------------------------------------------------------ projections

    def _open_projector(self) -> Projector:
        if self.projector is None:
            self.projector = Projector(LogReader(self.data_dir), open_projections_db(self.data_dir),
                                       all_projections())
        return self.projector

    def _check_projections(self, names: list[str]) -> None:
        projector = self._open_projector()
        last = len(self.events)
        for name in names:
            assert projector.position(name) == last, (name, projector.position(name), last)
        if "stats" in names:
            assert KindStats.read(projector.conn) == self._stats()
        with LogReader(self.data_dir) as reader:
            fresh = Projector(reader, open_projections_db(self.data_dir, memory=True), all_projections())
            try:
                fresh.catch_up(names)
                for name in names:
                    assert projector.dump(name) == fresh.dump(name), name
            finally:
                fresh.close()

    def _stats(self) -> list[tuple[str, int, int, int]]:
        """Per kind: events, stored bytes, raw bytes, counted from the log's rows."""
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        with LogReader(self.data_dir) as reader:
            for r in reader.rows():
                a = acc[r.kind]
                a[0] += 1
                a[1] += len(r.body)
                a[2] += r.raw_size
        return [(k, *v) for k, v in sorted(acc.items())]  # type: ignore[misc]

    @rule(only_stats=st.booleans())
    def catch_up(self, only_stats: bool) -> None:
        """The projector's catch-up: of every projection, or of ``stats`` alone (the others
        stay behind and catch up later)."""
        names = ["stats"] if only_stats else sorted(self._open_projector().projections)
        self._open_projector().catch_up(names)
        self._check_projections(names)

    @rule()
    def rebuild(self) -> None:
        names = sorted(self._open_projector().projections)
        self._open_projector().rebuild()
        self._check_projections(names)

    @precondition(lambda self: self.projector is not None)
    @rule()
    def reopen_the_projector(self) -> None:
        self.projector.reader.close()
        self.projector.close()
        self.projector = None
        self._open_projector()

    # ------------------------------------------------------------------ reads

    @rule(data=st.data(), limit=st.sampled_from((1, 2, 3, 1000)), project=st.sampled_from((None, "p")))
    def read_a_range(self, data: st.DataObject, limit: int, project: str | None) -> None:
        n = len(self.events)
        after = _point(data.draw(POINT, label="after"), n)
        to = _point(data.draw(st.none() | POINT, label="to"), n)
        got = self._read_pages(limit, after=after, to=to, project_id=project)
        self._check_events(got, [seq for seq in range(after + 1, (n if to is None else min(to, n)) + 1)
                                 if project is None or self.events[seq - 1][0].project_id == project])

    @rule(after=st.integers(0, 3), limit=st.sampled_from((1, 1000)))
    def read_the_tail(self, after: int, limit: int) -> None:
        """The tail reader the SSE bus uses, on a connection of its own."""
        after = max(len(self.events) - after, 0)

        async def tail() -> list[StoredEvent]:
            reader = self.store.open_tail_reader()
            try:
                out: list[StoredEvent] = []
                while page := await reader.read_events(after=out[-1].seq if out else after, limit=limit):
                    out.extend(page)
                return out
            finally:
                await reader.aclose()

        self._check_events(self._call(tail), list(range(after + 1, len(self.events) + 1)))

    @rule(data=st.data(), session=st.sampled_from(SESSIONS), limit=st.sampled_from((1, 2, 1000)))
    def read_a_session(self, data: st.DataObject, session: str, limit: int) -> None:
        after_ss = _point(data.draw(st.none() | POINT, label="after_session_seq"), self.session_last[session])
        got = self._read_pages(limit, session_id=session, after_session_seq=after_ss)
        mine = [seq for seq, (d, _, _) in enumerate(self.events, 1) if d.session_id == session]
        self._check_events(got, [seq for seq in mine if self.events[seq - 1][2] > (after_ss or 0)])
        to = _point(data.draw(st.none() | POINT, label="to"), len(self.events))
        last = self._call(lambda: self.store.session_last_seq(session, to=to))
        assert last == max((seq for seq in mine if to is None or seq <= to), default=0)
        project = self._call(lambda: self.store.session_project(session))
        assert project == next((self.events[seq - 1][0].project_id for seq in mine
                                if self.events[seq - 1][0].project_id is not None), None)

    @precondition(lambda self: self.events)
    @rule(data=st.data())
    def read_some_kinds(self, data: st.DataObject) -> None:
        kinds = data.draw(st.lists(st.sampled_from(sorted({kind_of(d.event) for d, _, _ in self.events})),
                                   min_size=1, max_size=3), label="kinds")
        got = self._read_pages(1000, kinds=kinds)
        self._check_events(got, [seq for seq, (d, _, _) in enumerate(self.events, 1) if kind_of(d.event) in kinds])

    @rule(data=st.data())
    def decode_with_the_cli(self, data: st.DataObject) -> None:
        """``lens log decode`` (its command function, in this process) with filters."""
        n = len(self.events)
        argv = ["decode"]
        session = data.draw(st.none() | st.sampled_from(SESSIONS), label="--session")
        first = _point(data.draw(st.none() | POINT, label="--from"), n)
        last = _point(data.draw(st.none() | POINT, label="--to"), n)
        if session is not None:
            argv += ["--session", session]
        if first is not None:
            argv += ["--from", str(first)]
        if last is not None:
            argv += ["--to", str(last)]
        code, out = self._cli(*argv)
        assert code == 0
        lines = out.splitlines()
        want = [seq for seq, (d, _, _) in enumerate(self.events, 1)
                if (session is None or d.session_id == session) and (first is None or seq >= first)
                and (last is None or seq <= last)]
        assert lines == [self._expected_json(seq) for seq in want]

    def _cli(self, *argv: str) -> tuple[int, bytes]:
        """Run ``lens log ARGV --data DIR``'s command function in this process: exit code, stdout."""
        full = ["log", *argv, "--data", str(self.data_dir)]
        args = build_parser(full).parse_args(full)
        args.secrets, args.secrets_note = Secrets(), None
        out = io.TextIOWrapper(io.BytesIO(), write_through=True)
        with contextlib.redirect_stdout(out):
            code = args.func(args)
        return code, out.buffer.getvalue()  # type: ignore[attr-defined]

    @rule()
    def stats_with_the_cli(self) -> None:
        """``lens log stats --json``: catches ``stats`` up in projections.db (beside this
        machine's projector, on a connection of its own) and prints the log's figures."""
        code, out = self._cli("stats", "--json")
        assert code == 0
        kinds = msgspec.json.decode(out)["kinds"]
        assert [(k["kind"], k["events"], k["stored_bytes"], k["raw_bytes"]) for k in kinds] == self._stats()
        if self.projector is not None:
            assert self.projector.position("stats") == len(self.events)

    @rule(names=st.lists(st.sampled_from(sorted(p.name for p in all_projections())), max_size=2, unique=True))
    def rebuild_with_the_cli(self, names: list[str]) -> None:
        """``lens log rebuild [--projection NAME]…`` beside this machine's projector."""
        code, out = self._cli("rebuild", *[a for n in names for a in ("--projection", n)])
        assert code == 0
        shown = names or sorted(p.name for p in all_projections())
        assert out == f"rebuilt {', '.join(shown)} from {len(self.events)} event(s)\n".encode()
        self._check_projections(shown)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def the_commit_listeners_saw_every_stored_event_once(self) -> None:
        committed = self.running.committed
        self._check_events(committed, list(range(self.opened_at + 1, len(self.events) + 1)))

    @invariant()
    def the_log_is_what_was_acknowledged(self) -> None:
        with LogReader(self.data_dir) as reader:
            rows = list(reader.rows())
            assert [r.seq for r in rows] == list(range(1, len(self.events) + 1))
            numbers: dict[str, int] = Counter()
            for r in rows:
                d, ts, sseq = self.events[r.seq - 1]
                if r.session_id is not None:
                    numbers[r.session_id] += 1
                    assert r.session_seq == numbers[r.session_id], r
                assert (r.ts, r.project_id, r.session_id, r.session_seq, r.agent_id, r.task_id, r.kind,
                        r.request_id) == (ts, d.project_id, d.session_id, sseq, d.agent_id, d.task_id,
                                          kind_of(d.event), d.request_id), r.seq
                assert r.raw_size == len(CODEC.pack(d.event)), r.seq
                assert reader.decode(r).event == d.event, r.seq
            assert dict(numbers) == {s: n for s, n in self.session_last.items() if n}
            assert list(verify_log(reader)) == []

    def teardown(self) -> None:
        try:
            self.running.close()
            if self.projector is not None:
                self.projector.reader.close()
                self.projector.close()
        finally:
            self._tmp.cleanup()


class CrashingStoreMachine(StoreMachine):
    """The machine with one more rule: the store's process killed (``kill -9``) while it appends.

    Each crash starts a child process, so this machine runs fewer, shorter examples."""

    @precondition(lambda self: self.crashes < 2)
    @rule(acknowledged=st.integers(1, 30), retry=st.booleans())
    def kill_a_writer_under_load(self, acknowledged: int, retry: bool) -> None:
        """Close the store; a child (tests/events/crash_child.py) opens it, answers a retry of a
        recorded request id, appends from 8 tasks and is SIGKILLed after ``acknowledged`` acks.
        Every acknowledged event must be in the log as acknowledged; events it committed without
        acknowledging them may be there too (they join the model as read back)."""
        self.running.close()
        asked = sorted(self.requests)[:1] if retry else []
        acks: dict[str, Ack] = {}
        retries: list[Retry] = []
        run_and_kill(self.data_dir, self.crashes, acknowledged, [f"{sid}:{rid}" for sid, rid in asked],
                     Path(self._tmp.name) / f"stderr-{self.crashes}.txt", acks, retries)
        self.crashes += 1
        for (sid, rid), r in zip(asked, retries):
            assert (r.session, r.request_id, r.seq, r.duplicate) == (sid, rid, self.requests[(sid, rid)][0], True)
        assert len(retries) == len(asked)
        with LogReader(self.data_dir) as reader:
            rows = list(reader.events(after=len(self.events)))
        by_token = {e.request_id or e.event.text.split("|")[0]: e for e in rows}  # type: ignore[union-attr]
        for token, ack in acks.items():
            e = by_token[token]
            assert (e.seq, e.session_id, e.session_seq, e.event.text) == (  # type: ignore[union-attr]
                ack.seq, ack.session, ack.session_seq, text_for(token))
        for e in rows:  # the child's, acknowledged or not: into the model as stored
            self._record((Draft(e.event, project_id=e.project_id, session_id=e.session_id, agent_id=e.agent_id,
                                task_id=e.task_id, request_id=e.request_id),),
                         AppendResult((e.seq,), (e.session_seq,), e.ts), retried=False)
        self.opened_at = len(self.events)
        self.running = _StoreThread(self.data_dir, auto_dictionary_after=None)


StoreMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40)
test_the_store_and_its_projections = StoreMachine.TestCase
CrashingStoreMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=25)
test_the_store_and_its_projections_across_crashes = CrashingStoreMachine.TestCase
