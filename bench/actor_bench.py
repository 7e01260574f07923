"""Session-actor benchmark: wake-up of a long session, and the memory idle and live sessions cost.

Usage::

    python3 bench/actor_bench.py [--data DIR] [--events N] [--sessions N] [--items N] [--json] [--quick]

What one run measures, side by side on the same machine (see docs/performance.md):

* **wake-up of an ``N``-event session** (default 100,000 realistic events in one session: inputs
  placed, model responses with tool calls, tool results of ~1 KiB text), through the real
  :class:`runtime.supervisor.Supervisor`: the time of a ``WaitIdle`` call on a passivated session,
  i.e. starting its actor, loading its state (``SessionActor._load``: snapshot + tail, or the
  whole log) and answering. Three ways:

  - **with a snapshot** saved ``--tail`` events before the end (default 499: the worst case of
    the default ``snapshot_every=500``);
  - **full replay** (the same actor code with no snapshot store);
  - **the peer**: reading the same events from a JSONL file (one ``to_json()`` object a line, as a
    Codex-style rollout stores them) and decoding every line with ``json.loads``; also with
    ``msgspec.json`` (a faster decoder), and the SQLite floor (``SELECT`` of the session's rows,
    no decoding).

* **10,000 passivated sessions** (``--sessions``): created through the supervisor, each served
  one input by the faux provider, then left to passivate; the growth of the process's RSS (and of
  the Python heap, by ``tracemalloc``) over the daemon's baseline once every actor passivated.
* **one live session with 1,000 context items** (``--items``): the Python heap a woken actor
  holds (``tracemalloc`` delta of waking it: snapshot + tail), and the size of its folded
  :class:`~projections.session_state.SessionState` alone.

The two memory figures are measured in fresh child processes (this script with ``--phase``), so
the wake-up phase's freed memory cannot hide their growth.

It prints a Markdown table and, as its last stdout line, one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402
import msgspec  # noqa: E402
import trio  # noqa: E402

from events import types as t  # noqa: E402
from events.reader import LogReader  # noqa: E402
from events.schema import EVENTS_DB  # noqa: E402
from events.store import Draft, EventStore, open_store  # noqa: E402
from projections.session_state import SessionState, apply, snapshot_bytes  # noqa: E402
from projections.snapshots import SnapshotStore  # noqa: E402
from runtime.actor import ActorDeps, GetState, Submit, WaitIdle  # noqa: E402
from runtime.providers.catalog import ProviderCatalog  # noqa: E402
from runtime.providers.faux import FauxProvider  # noqa: E402
from runtime.supervisor import Supervisor  # noqa: E402
from tools.registry import builtin_tools  # noqa: E402

DEFAULT_EVENTS = 100_000
DEFAULT_SESSIONS = 10_000
DEFAULT_ITEMS = 1_000
QUICK_EVENTS = 3_000
QUICK_SESSIONS = 200
DEFAULT_TAIL = 499  # events after the snapshot: the worst case of snapshot_every=500
REPEAT = 5
QUICK_REPEAT = 3
CONCURRENCY = 64  # sessions created at once (group commit batches their appends)
APPEND_CHUNK = 512  # drafts per store.append while building the long session
SEED = 20240612
MIB = 1024 * 1024

TARGET_WAKE_RATIO = 0.1
TARGET_PASSIVATED_MIB = 50.0
TARGET_LIVE_MIB = 5.0

# --------------------------------------------------------------------------- realistic sessions
#
# Tool output is composed line by line from small vocabularies of code, logs and diffs with
# random identifiers and numbers: varied like real output, deterministic for a seed.

IDENTS = (
    "session_id request_id seq payload config handler reader writer buffer offset limit timeout "
    "retries result status items batch cursor entry record store codec frame path content context "
    "summary tokens usage events queue worker task agent snapshot index schema digest artifact"
).split()
WORDS = (
    "the a this that we it file function test error value config update fix change read write call "
    "return add remove check run build output line module class method import missing failing "
    "passes expected actual because so then now also instead first next still should could need"
).split()
DIRS = "src lib tests runtime events projections tools docs scripts".split()
TOOLS = ("bash", "read_file", "edit_file", "grep", "list_dir")
LINES = (
    "def {i}_{j}(self, {k}: int = {n}) -> None:",
    "    {i} = self._{j}.get({k!r})",
    "    if {i} is None:\n        raise ValueError(f\"missing {i}\")",
    "    for {i} in {j}:\n        {j}.append({i} + {n})",
    "class {I}{J}(msgspec.Struct, frozen=True):\n    {i}: str\n    {j}: int = {n}",
    "{p}::test_{i}_{j} PASSED{pad}[{pct:3d}%]",
    "{p}::test_{i}_{j} FAILED{pad}[{pct:3d}%]",
    "E       AssertionError: assert {n} == {n2}",
    "{p}:{n}: in {i}_{j}",
    "2025-06-{n2:02d}T10:{n2:02d}:00Z INFO [{i}] {w1} {w2} {j}={n} elapsed={n2}ms",
    "-rw-r--r--  1 user staff  {n}{n2} Jun {n2} 11:{n2:02d} {i}.py",
    "@@ -{n},{n2} +{n},{n2} @@ def {i}_{j}(self):",
    "-    {i} = self._{j}.get({k!r})\n+    {i} = self._{j}.get({k!r}, {n})",
    "    # {w1} {w2} {w3} {w4} {w5}",
)


class Gen:
    POOL = 3000

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.pool = [self._fill(self.r.choice(LINES)) for _ in range(self.POOL)]

    def path(self) -> str:
        r = self.r
        return f"{r.choice(DIRS)}/{r.choice(IDENTS)}/{r.choice(IDENTS)}.py"

    def _fill(self, template: str) -> str:
        r = self.r
        i, j, k = r.choice(IDENTS), r.choice(IDENTS), r.choice(IDENTS)
        w = [r.choice(WORDS) for _ in range(5)]
        return template.format(
            i=i, j=j, k=k, I=i.capitalize(), J=j.capitalize(), n=r.randint(1, 999), n2=r.randint(1, 28),
            pct=r.randint(0, 100), pad=" " * r.randint(1, 12), p=self.path(),
            w1=w[0], w2=w[1], w3=w[2], w4=w[3], w5=w[4],
        )

    def text(self, target: int) -> str:
        out: list[str] = []
        size = 0
        while size < target:
            start = self.r.randrange(self.POOL)
            for line in self.pool[start : start + self.r.randint(1, 8)]:
                out.append(line)
                size += len(line) + 1
        return "\n".join(out)

    def prose(self, words: int) -> str:
        return " ".join(self.r.choices(WORDS, k=words)).capitalize() + "."

    def tool_output(self) -> str:
        return self.text(int(1024 * self.r.uniform(0.6, 1.4)))  # ~1 KiB

    def args(self, tool: str) -> str:
        r = self.r
        if tool == "bash":
            return json.dumps({"command": f"python -m pytest -q {self.path()}", "timeout": 120})
        if tool == "edit_file":
            return json.dumps({"path": self.path(), "old": self.text(100), "new": self.text(120)})
        if tool == "grep":
            return json.dumps({"pattern": r.choice(IDENTS), "path": r.choice(DIRS)})
        return json.dumps({"path": self.path()})


Scoped = tuple[t._Event, "str | None", "str | None"]  # event, task_id, request_id


def session_events(gen: Gen, *, events: int | None = None, items: int | None = None) -> list[Scoped]:
    """A valid idle session: tasks of inputs placed, tool rounds, final answers, all finished.

    Stops after the first task that reaches ``events`` events or ``items`` context items.
    """
    r = gen.r
    out: list[Scoped] = [(t.SessionCreated(model="faux/faux-1", name="bench"), None, None)]
    n_items = 0
    while (events is None or len(out) < events) and (items is None or n_items < items):
        rid = uuid.UUID(int=r.getrandbits(128)).hex
        task = "task_" + uuid.UUID(int=r.getrandbits(128)).hex
        out.append((t.InputSubmitted(content=[t.TextPart(gen.prose(r.randint(5, 40)))]), None, rid))
        out.append((t.TaskStarted(input_request_id=rid), task, None))
        out.append((t.InputPlaced(input_request_id=rid), task, None))
        n_items += 1
        for _round in range(r.randint(1, 8)):
            out.append((t.ModelRequested(provider="faux", model="faux-1"), task, None))
            calls = [
                t.ToolCall("call_" + uuid.UUID(int=r.getrandbits(128)).hex, tool, gen.args(tool))
                for tool in (r.choice(TOOLS) for _ in range(r.choice((1, 1, 1, 2, 3))))
            ]
            out.append((t.ModelResponded(
                text=gen.prose(r.randint(5, 30)), tool_calls=calls, stop_reason="tool_use",
                usage=t.Usage(r.randint(2_000, 120_000), r.randint(20, 2_000))), task, None))
            n_items += 1 + len(calls)
            for call in calls:
                out.append((t.ToolStarted(call_id=call.call_id, name=call.name, arguments=call.arguments), task, None))
                failed = r.random() < 0.08
                out.append((t.ToolFinished(
                    call_id=call.call_id, name=call.name, status="error" if failed else "ok", is_error=failed,
                    content=[t.TextPart(gen.tool_output())]), task, None))
                n_items += 1
        out.append((t.ModelRequested(provider="faux", model="faux-1"), task, None))
        out.append((t.ModelResponded(text=gen.prose(r.randint(10, 60)), stop_reason="end_turn",
                                     usage=t.Usage(r.randint(2_000, 120_000), r.randint(20, 2_000))), task, None))
        out.append((t.TaskFinished(status="completed"), task, None))
        n_items += 1
    return out


async def append_session(store: EventStore, session_id: str, events: list[Scoped]) -> None:
    drafts = [Draft(ev, "prj_bench", session_id, None, task, rid) for ev, task, rid in events]
    for i in range(0, len(drafts), APPEND_CHUNK):
        chunk = drafts[i : i + APPEND_CHUNK]
        # an append carries at most one request_id: split the chunk before each input
        start = 0
        for j in range(1, len(chunk) + 1):
            if j == len(chunk) or chunk[j].request_id is not None:
                await store.append(*chunk[start:j])
                start = j


def fold_session(data: Path, session_id: str, to: int | None = None) -> SessionState:
    state = SessionState(session_id)
    with LogReader(data) as reader:
        for ev in reader.events(session_id=session_id, to=to):
            apply(state, ev)
    return state


def save_snapshot(data: Path, session_id: str, tail: int) -> tuple[int, int]:
    """Save the session's state ``tail`` events before its end; (snapshot seq, compressed bytes)."""
    with LogReader(data) as reader:
        seqs = [r[0] for r in reader.conn.execute(
            "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
    at = seqs[max(0, len(seqs) - 1 - tail)]
    state = fold_session(data, session_id, to=at)
    snaps = SnapshotStore.open(data)
    try:
        snaps.save(state)
        size = snaps.conn.execute("SELECT length(state) FROM snapshots WHERE session_id = ?",
                                  (session_id,)).fetchall()[0][0]
    finally:
        snaps.close()
    return at, size


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def deps_for(store: EventStore, snapshots: SnapshotStore | None, idle_seconds: float) -> ActorDeps:
    return ActorDeps(store, snapshots, ProviderCatalog({"faux": FauxProvider("faux")}), builtin_tools(),
                     new_id, idle_seconds=idle_seconds)


async def wait_passivated(sup: Supervisor, session_id: str | None = None) -> None:
    while (session_id in sup.live_sessions) if session_id else sup.live_sessions:
        await trio.sleep(0.005)


# --------------------------------------------------------------------------- 1: wake-up


async def timed_wakes(store: EventStore, snapshots: SnapshotStore | None, session_id: str,
                      repeat: int, expect_events: int) -> list[float]:
    """Wake the passivated session ``repeat`` times (after one untimed warm-up); ms each."""
    deps = deps_for(store, snapshots, idle_seconds=0.02)
    out: list[float] = []
    async with trio.open_nursery() as nursery:
        sup = Supervisor(deps)
        await nursery.start(sup.run)
        for i in range(repeat + 1):
            gc.collect()
            t0 = time.perf_counter()
            await sup.call(session_id, WaitIdle())
            ms = (time.perf_counter() - t0) * 1000
            if i == 0:  # warm-up: also check the woken state is the whole session
                state = await sup.call(session_id, GetState())
                assert state.events == expect_events and state.status == "idle", (state.events, expect_events)
                del state
            else:
                out.append(ms)
            await wait_passivated(sup, session_id)
        nursery.cancel_scope.cancel()
    return out


def jsonl_read(path: Path, decoder: Any) -> tuple[float, int]:
    gc.collect()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        events = [decoder(line) for line in f]
    ms = (time.perf_counter() - t0) * 1000
    return ms, len(events)


def select_floor(data: Path, session_id: str) -> float:
    conn = apsw.Connection(str(data / EVENTS_DB), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        gc.collect()
        t0 = time.perf_counter()
        rows = conn.execute("SELECT * FROM events WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
        ms = (time.perf_counter() - t0) * 1000
        assert rows
    finally:
        conn.close()
    return ms


def wake_parts(data: Path, session_id: str, repeat: int) -> tuple[float, float]:
    """Where a snapshot wake goes: ``SnapshotStore.load`` (zstd + msgpack) and the tail fold (ms)."""
    snaps = SnapshotStore.open(data)
    reader = LogReader(data)
    loads: list[float] = []
    tails: list[float] = []
    try:
        for _ in range(repeat):
            gc.collect()
            t0 = time.perf_counter()
            state = snaps.load(session_id)
            t1 = time.perf_counter()
            assert state is not None
            for ev in reader.events(session_id=session_id, after=state.last_seq,
                                    after_session_seq=state.last_session_seq):
                apply(state, ev)
            t2 = time.perf_counter()
            loads.append((t1 - t0) * 1000)
            tails.append((t2 - t1) * 1000)
            del state
    finally:
        reader.close()
        snaps.close()
    return statistics.median(loads), statistics.median(tails)


def wake_phase(data: Path, n: int, tail: int, repeat: int, seed: int) -> dict[str, Any]:
    gen = Gen(seed)
    events = session_events(gen, events=n)
    session_id = "ses_bench_long"

    async def build() -> None:
        async with open_store(data) as store:
            await append_session(store, session_id, events)

    t0 = time.perf_counter()
    trio.run(build)
    build_s = time.perf_counter() - t0
    count = len(events)
    del events, gen
    gc.collect()

    # the peer's file: the same events, one JSON object a line
    jsonl = data / "session.jsonl"
    enc = msgspec.json.Encoder()
    with LogReader(data) as reader, open(jsonl, "wb") as f:
        for ev in reader.events(session_id=session_id):
            f.write(enc.encode(ev.to_json()))
            f.write(b"\n")
    jsonl_bytes = jsonl.stat().st_size

    snap_seq, snap_bytes = save_snapshot(data, session_id, tail)
    snaps = SnapshotStore.open(data)
    try:
        loaded = snaps.load(session_id)
        assert loaded is not None
        snap_raw = len(snapshot_bytes(loaded))
        del loaded
    finally:
        snaps.close()

    async def wakes() -> tuple[list[float], list[float]]:
        async with open_store(data) as store:
            snaps = SnapshotStore.open(data)
            try:
                with_snap = await timed_wakes(store, snaps, session_id, repeat, count)
            finally:
                snaps.close()
            full = await timed_wakes(store, None, session_id, max(1, repeat // 2), count)
        return with_snap, full

    with_snap, full = trio.run(wakes)
    load_ms, tail_ms = wake_parts(data, session_id, repeat)
    jsonl_ms = [jsonl_read(jsonl, json.loads) for _ in range(repeat)]
    assert all(k == count for _, k in jsonl_ms)
    dec = msgspec.json.Decoder()
    jsonl_msgspec_ms = [jsonl_read(jsonl, dec.decode)[0] for _ in range(repeat)]
    floor_ms = [select_floor(data, session_id) for _ in range(repeat)]
    with LogReader(data) as reader:
        last = reader.last_seq()
    f = {
        "session_events": count,
        "snapshot_tail_events": last - snap_seq,
        "snapshot_bytes": snap_bytes,
        "jsonl_bytes": jsonl_bytes,
        "build_s": build_s,
        "wake_snapshot_ms": statistics.median(with_snap),
        "wake_full_replay_ms": statistics.median(full),
        "wake_jsonl_ms": statistics.median(ms for ms, _ in jsonl_ms),
        "wake_jsonl_msgspec_ms": statistics.median(jsonl_msgspec_ms),
        "select_floor_ms": statistics.median(floor_ms),
        "snapshot_load_ms": load_ms,
        "snapshot_tail_ms": tail_ms,
        "snapshot_raw_bytes": snap_raw,
    }
    f["wake_ratio"] = f["wake_snapshot_ms"] / f["wake_jsonl_ms"]
    f["full_replay_ratio"] = f["wake_full_replay_ms"] / f["wake_jsonl_ms"]
    return f


# --------------------------------------------------------------------------- 2: passivated sessions


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


async def passivated_phase(data: Path, sessions: int, trace: bool) -> dict[str, Any]:
    async with open_store(data) as store:
        snaps = SnapshotStore.open(data)
        deps = deps_for(store, snaps, idle_seconds=0.05)
        limiter = trio.CapacityLimiter(CONCURRENCY)

        async def one(i: int) -> None:
            async with limiter:
                sid = await sup.create_session("prj_bench", name=f"s{i}")
                await sup.call(sid, Submit(f"r{i}", [t.TextPart(f"hello from session {i}, please answer")]))
                await sup.call(sid, WaitIdle())

        async def many(k: int, base: int) -> None:
            async with trio.open_nursery() as n:
                for i in range(k):
                    n.start_soon(one, base + i)
            await wait_passivated(sup)

        try:
            async with trio.open_nursery() as nursery:
                sup = Supervisor(deps)
                await nursery.start(sup.run)
                await many(CONCURRENCY * 2, 0)  # warm-up: code paths, caches, worker threads
                deps.catalog.providers["faux"].requests.clear()  # type: ignore[attr-defined]
                await trio.sleep(deps.idle_seconds * 4)
                gc.collect()
                base_rss = rss_bytes()
                if trace:
                    tracemalloc.start()
                base_traced = tracemalloc.get_traced_memory()[0]
                t0 = time.perf_counter()
                await many(sessions, CONCURRENCY * 2)
                seconds = time.perf_counter() - t0
                # The faux provider (a test double) records every request it served; a real
                # provider keeps nothing, so its record is not daemon memory.
                deps.catalog.providers["faux"].requests.clear()  # type: ignore[attr-defined]
                # trio drops an exited cancel scope from its deadline heap only once the deadline
                # passed: wait out the actors' last idle timers.
                await trio.sleep(deps.idle_seconds * 4)
                gc.collect()
                traced = tracemalloc.get_traced_memory()[0] - base_traced
                end_rss = rss_bytes()
                tracemalloc.stop()
                live = len(sup.live_sessions)
                nursery.cancel_scope.cancel()
        finally:
            snaps.close()
    if trace:  # tracemalloc's own tables inflate the RSS: only the heap figure counts here
        return {"sessions": sessions, "live_after": live, "passivated_heap_mib": traced / MIB}
    return {
        "sessions": sessions,
        "live_after": live,
        "create_s": seconds,
        "passivated_rss_mib": None if base_rss is None or end_rss is None else (end_rss - base_rss) / MIB,
        "baseline_rss_mib": None if base_rss is None else base_rss / MIB,
    }


# --------------------------------------------------------------------------- 3: one live session


async def live_phase(data: Path, items: int, seed: int) -> dict[str, Any]:
    gen = Gen(seed)
    events = session_events(gen, items=items)
    session_id = "ses_bench_live"
    async with open_store(data) as store:
        await append_session(store, session_id, events)
        await append_session(store, "ses_bench_warm", session_events(gen, items=20))
    del events
    count_items = len(fold_session(data, session_id).agents["main"].items)
    snap_seq, snap_bytes = save_snapshot(data, session_id, min(DEFAULT_TAIL, 200))

    async with open_store(data) as store:
        snaps = SnapshotStore.open(data)
        try:
            deps = deps_for(store, snaps, idle_seconds=3600)
            async with trio.open_nursery() as nursery:
                sup = Supervisor(deps)
                await nursery.start(sup.run)
                await sup.call("ses_bench_warm", WaitIdle())  # warm-up: code paths, reader, threads
                # the state alone: fold the whole session
                reader = LogReader(data)
                gc.collect()
                tracemalloc.start()
                base = tracemalloc.get_traced_memory()[0]
                state = SessionState(session_id)
                for ev in reader.events(session_id=session_id):
                    apply(state, ev)
                gc.collect()
                state_bytes = tracemalloc.get_traced_memory()[0] - base
                encoded = len(snapshot_bytes(state))
                del state
                reader.close()
                gc.collect()
                # a live actor, woken the way the daemon wakes it (snapshot + tail)
                base = tracemalloc.get_traced_memory()[0]
                await sup.call(session_id, WaitIdle())
                gc.collect()
                actor_bytes = tracemalloc.get_traced_memory()[0] - base
                tracemalloc.stop()
                assert session_id in sup.live_sessions
                nursery.cancel_scope.cancel()
        finally:
            snaps.close()
    return {
        "items": count_items,
        "live_state_msgpack_bytes": encoded,
        "live_snapshot_bytes": snap_bytes,
        "live_1k_items_state_mib": state_bytes / MIB,
        "live_1k_items_mib": actor_bytes / MIB,
    }


def run_child(phase: str, data: Path, extra: list[str]) -> dict[str, Any]:
    """Run one memory phase in a fresh interpreter; return its JSON line."""
    data.mkdir(parents=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--data", str(data), *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- report


def ok(b: bool) -> str:
    return "pass" if b else "FAIL"


def report(f: dict[str, Any], total: float) -> None:
    n = f["session_events"]
    print(f"## Lens session actors — wake-up of a {n:,}-event session, {f['sessions']:,} passivated "
          f"sessions, a live session of {f['items']:,} items\n")
    print(f"{os.cpu_count()} cores, Python {platform.python_version()}, SQLite {apsw.sqlite_lib_version()}, "
          f"apsw {apsw.apsw_version()}; {total:.1f} s\n")
    print("| figure | value | peer / floor | ratio | target | result |")
    print("| --- | --- | --- | --- | --- | --- |")
    jsonl = f"{f['wake_jsonl_ms']:.1f} ms (JSONL + json.loads)"
    rows = [
        (f"wake, snapshot + {f['snapshot_tail_events']}-event tail", f"{f['wake_snapshot_ms']:.1f} ms", jsonl,
         f"{f['wake_ratio']:.3f}", f"<= {TARGET_WAKE_RATIO}", ok(f["wake_ratio"] <= TARGET_WAKE_RATIO)),
        ("  of which: snapshot load (zstd + msgpack decode)", f"{f['snapshot_load_ms']:.1f} ms", jsonl,
         f"{f['snapshot_load_ms'] / f['wake_jsonl_ms']:.3f}", "", ""),
        (f"  of which: read + fold the {f['snapshot_tail_events']}-event tail", f"{f['snapshot_tail_ms']:.1f} ms",
         jsonl, f"{f['snapshot_tail_ms'] / f['wake_jsonl_ms']:.3f}", "", ""),
        ("wake, full replay (no snapshot)", f"{f['wake_full_replay_ms']:.1f} ms", jsonl,
         f"{f['full_replay_ratio']:.2f}", "", ""),
        ("peer: JSONL read + msgspec.json", f"{f['wake_jsonl_msgspec_ms']:.1f} ms", jsonl,
         f"{f['wake_jsonl_msgspec_ms'] / f['wake_jsonl_ms']:.2f}", "", ""),
        ("floor: SELECT the session's rows", f"{f['select_floor_ms']:.1f} ms", jsonl,
         f"{f['select_floor_ms'] / f['wake_jsonl_ms']:.2f}", "", ""),
        ("snapshot size, zstd (msgpack) / JSONL size",
         f"{f['snapshot_bytes'] / MIB:.1f} MiB ({f['snapshot_raw_bytes'] / MIB:.1f} MiB)",
         f"{f['jsonl_bytes'] / MIB:.1f} MiB", f"{f['snapshot_bytes'] / f['jsonl_bytes']:.2f}", "", ""),
        (f"{f['sessions']:,} passivated sessions: RSS growth",
         "n/a" if f["passivated_10k_mib"] is None else f"{f['passivated_10k_mib']:.1f} MiB",
         "n/a" if f["baseline_rss_mib"] is None else f"baseline RSS {f['baseline_rss_mib']:.0f} MiB", "",
         f"< {TARGET_PASSIVATED_MIB:g} MiB",
         "n/a" if f["passivated_10k_mib"] is None else ok(f["passivated_10k_mib"] < TARGET_PASSIVATED_MIB)),
        (f"{f['sessions']:,} passivated sessions: Python heap held", f"{f['passivated_10k_heap_mib']:.2f} MiB",
         "tracemalloc (separate run)", "", f"< {TARGET_PASSIVATED_MIB:g} MiB",
         ok(f["passivated_10k_heap_mib"] < TARGET_PASSIVATED_MIB)),
        (f"live session, {f['items']:,} items: woken actor", f"{f['live_1k_items_mib']:.2f} MiB",
         "tracemalloc", "", f"< {TARGET_LIVE_MIB:g} MiB", ok(f["live_1k_items_mib"] < TARGET_LIVE_MIB)),
        (f"live session, {f['items']:,} items: SessionState fold", f"{f['live_1k_items_state_mib']:.2f} MiB",
         f"msgpack {f['live_state_msgpack_bytes'] / MIB:.2f} MiB", "", "", ""),
    ]
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=None,
                    help="an empty or new directory for the logs (default: a temporary one, removed)")
    ap.add_argument("--events", type=int, default=None, help=f"events of the long session (default {DEFAULT_EVENTS:,})")
    ap.add_argument("--sessions", type=int, default=None, help=f"passivated sessions (default {DEFAULT_SESSIONS:,})")
    ap.add_argument("--items", type=int, default=DEFAULT_ITEMS, help="context items of the live session")
    ap.add_argument("--tail", type=int, default=DEFAULT_TAIL, help="events after the snapshot")
    ap.add_argument("--repeat", type=int, default=None, help=f"timed wakes and reads (default {REPEAT})")
    ap.add_argument("--quick", action="store_true", help=f"smoke size ({QUICK_EVENTS:,} events, {QUICK_SESSIONS} sessions)")
    ap.add_argument("--json", action="store_true", help="(kept for scripts) the last line is always JSON")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--phase", choices=("passivated", "passivated-heap", "live"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n = args.events or (QUICK_EVENTS if args.quick else DEFAULT_EVENTS)
    sessions = args.sessions or (QUICK_SESSIONS if args.quick else DEFAULT_SESSIONS)
    repeat = args.repeat or (QUICK_REPEAT if args.quick else REPEAT)

    if args.phase is not None:  # a child run: one memory phase, its JSON on the last line
        assert args.data is not None
        if args.phase in ("passivated", "passivated-heap"):
            out = trio.run(passivated_phase, args.data, sessions, args.phase == "passivated-heap")
        else:
            out = trio.run(live_phase, args.data, args.items, args.seed)
        print(json.dumps(out))
        return 0

    with tempfile.TemporaryDirectory(prefix="lens-actor-bench-") as tmp:
        root = args.data or Path(tmp)
        if root.exists() and any(root.iterdir()):
            sys.exit(f"actor_bench: {root} is not empty; pass an empty or new directory")
        t_start = time.perf_counter()
        wake = wake_phase(root / "wake", n, args.tail, repeat, args.seed)
        passivated = run_child("passivated", root / "passivated", ["--sessions", str(sessions)])
        heap = run_child("passivated-heap", root / "passivated-heap", ["--sessions", str(sessions)])
        live = run_child("live", root / "live", ["--items", str(args.items), "--seed", str(args.seed)])
        total = time.perf_counter() - t_start

    f: dict[str, Any] = {
        **wake,
        "sessions": passivated["sessions"],
        "passivated_10k_mib": passivated["passivated_rss_mib"],
        "passivated_10k_heap_mib": heap["passivated_heap_mib"],
        "baseline_rss_mib": passivated["baseline_rss_mib"],
        "passivated_create_s": passivated["create_s"],
        "passivated_live_after": passivated["live_after"] + heap["live_after"],
        **live,
    }
    report(f, total)
    f.update({
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "seconds": total,
    })
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in f.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
