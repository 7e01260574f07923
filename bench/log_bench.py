"""Event-log benchmark: durable append, replay and stored size, each against its floor.

Usage::

    python bench/log_bench.py --data DIR [--events N] [--json] [--quick] [--no-dictionary]
                              [--no-auto-dictionary]

What one run measures, side by side on the same machine (see docs/performance.md):

* **durable append** (the store's default configuration, so it trains a zstd dictionary by
  itself after ``AUTO_DICTIONARY_AFTER`` = 10,000 events; ``--no-auto-dictionary`` turns that
  off): ``N`` realistic events (~1 KiB of text-heavy MessagePack each, mixed
  kinds) appended through the real :class:`events.store.EventStore` at ``synchronous=FULL`` by
  64 concurrent trio producers, one per session (one per event when N < 64); each producer awaits every append's ack before
  sending the next, and every ack latency is recorded.
* **the durable-append floor**: raw apsw inserting the very rows the store wrote (same stored
  bytes) into a table of the same shape, 64 rows per transaction, WAL, ``synchronous=FULL``.
* **replay**: every row of the log read through the public
  :meth:`events.reader.LogReader.events` (the path of ``EventStore.read_events`` and session
  wake-up: paged ``SELECT``, zstd frame checks, decompression, typed msgspec decode, one
  ``StoredEvent`` per row) and folded into a per-session count/kind state; **its floor**:
  ``SELECT`` of the same rows with no decoding. A bare ``SELECT`` + ``Codec.decode`` + fold is
  shown for information.
* **stored bytes per event** (growth of ``events.db``, envelope and indexes included) against
  the same events as JSON lines of their decoded shape, and the raw MessagePack size.
* the same again (append, floors, replay, bytes) for ``N`` further events after training a
  16 KiB zstd dictionary on the first ones (skip with ``--no-dictionary``; skipped, with a note
  on stderr, when N is too few events to train on).

It prints a Markdown table and, as its last stdout line, one JSON object of the figures.
The log is left in ``DIR``; a non-empty ``DIR`` is refused (``--overwrite`` clears an old
Lens log there, and nothing else — never one a Lens process, such as a running daemon, has open).
Refusals are ``log_bench: CODE: message`` on stderr, exit 1; Ctrl-C is ``log_bench: INTERRUPTED``,
exit 130, with what was appended left committed in ``DIR``.
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import json
import os
import platform
import random
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, NoReturn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402
import msgspec  # noqa: E402
import trio  # noqa: E402

from events.errors import LogError, TooFewSamples  # noqa: E402
from events.reader import ROW_COLUMNS, LogReader  # noqa: E402
from events.schema import EVENTS_DB, KNOWN_ENTRIES, LOCK_FILE, SCHEMA, data_dir_problem  # noqa: E402
from events.store import AUTO_DICTIONARY_AFTER, READ_BYTES, Draft, open_store  # noqa: E402
from events.types import (  # noqa: E402
    InputSubmitted,
    ModelRequested,
    ModelResponded,
    TextPart,
    ToolCall,
    ToolFinished,
    ToolStarted,
    Usage,
)
from runtime.cliargs import Once  # noqa: E402

SESSIONS = 64
FLOOR_BATCH = 64
DEFAULT_EVENTS = 200_000
QUICK_EVENTS = 4_000
SEED = 20240611
# What one event of a phase costs in memory (the phase generates all its events before it
# appends, then reads its rows back for the floor): peak RSS grew by 1.4-2.3 KB per event
# between 2,000, 20,000 and 60,000 events. An --events whose phase would need more than the
# machine's memory is refused at once, instead of generating until the machine runs out.
MEMORY_PER_EVENT = 1_500

TARGET_APPEND_RATIO = 0.75
TARGET_ACK_P99_MS = 20.0
TARGET_REPLAY_RATIO = 0.3
TARGET_BYTES_RATIO = 0.5

# --------------------------------------------------------------------------- realistic events
#
# Text is composed line by line from vocabularies of real-looking code, shell logs, diffs and
# prose, with identifiers, paths and numbers drawn at random: varied like real tool output, but
# deterministic for a seed.

IDENTS = (
    "session_id request_id seq payload config handler reader writer buffer offset limit "
    "timeout retries result status items batch cursor entry record store codec frame "
    "path content manifest context summary tokens usage events queue worker task agent "
    "parent child snapshot index schema digest artifact"
).split()
MODULES = (
    "events.store events.codec events.reader runtime.actor runtime.daemon runtime.http "
    "projections.history tools.bash tools.edit tools.read_file providers.openai "
    "providers.anthropic executor.client"
).split()
DIRS = "src lib tests runtime events projections tools docs scripts internal pkg cmd".split()
EXTS = ".py .py .py .ts .go .rs .md .toml .json .sh".split()
WORDS = (
    "the a this that we it file function test error value config update fix change read write "
    "call return add remove check run build output line module class method import missing "
    "failing passes expected actual because so then now also instead first next still should "
    "could need want look see found issue handle case edge path empty none default async "
    "await lock thread timeout retry queue batch commit durable event log session replay"
).split()
TOOLS = ("bash", "read_file", "edit_file", "grep", "list_dir", "write_file")
MODELS = (("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-5"), ("openai", "gpt-5-mini"))

CODE_LINES = (
    "def {i}_{j}(self, {k}: int = {n}) -> None:",
    "    {i} = self._{j}.get({k!r})",
    "    if {i} is None:",
    "        raise ValueError(f\"missing {i}: {{{k}}}\")",
    "    for {i} in {j}:",
    "        {j}.append({i} + {n})",
    "    return {i}",
    "class {I}{J}(msgspec.Struct, frozen=True):",
    "    {i}: str",
    "    {j}: int = {n}",
    "from {m} import {I}{J}, {i}",
    "import {i}",
    "    async with trio.open_nursery() as nursery:",
    "        nursery.start_soon(self._{i}, {j})",
    "    await trio.sleep({f})",
    "    with self._conn:",
    "        self._conn.execute(\"INSERT INTO {i}({j}, {k}) VALUES (?, ?)\", ({j}, {k}))",
    "    # {w1} {w2} {w3} {w4} {w5}",
    "    \"\"\"{W1} {w2} {w3} {w4} {w5} {w6}.\"\"\"",
    "    assert {i} == {n}, {i}",
    "    logger.debug(\"%s {w1} {w2} %d\", {i}, {n})",
    "",
    "    try:",
    "    except {I}Error as exc:",
    "        return self._{i}({j}=exc)",
    "    {i}: dict[str, {I}] = {{}}",
    "    {i}.update({j}={k}, timeout={f})",
)
LOG_LINES = (
    "{p}::test_{i}_{j} PASSED{pad}[{pct:3d}%]",
    "{p}::test_{i}_{j} FAILED{pad}[{pct:3d}%]",
    "E       AssertionError: assert {n} == {n2}",
    "E       {I}Error: {w1} {w2} {w3} {i}",
    "{p}:{n}: in {i}_{j}",
    "    {i} = {j}({k})",
    "Collecting {i}-{j}=={n}.{n2}.0",
    "  Downloading {i}_{j}-{n}.{n2}.0-py3-none-any.whl ({f} kB)",
    "Successfully installed {i}-{n}.{n2}.0 {j}-{n2}.{n}.1",
    "{date} {lvl} [{m}] {w1} {w2} {i}={n} {j}={k!r} elapsed={f}ms",
    "{date} {lvl} [{m}] {w1} {w2} {w3} {w4} ({n} items)",
    "[{n}/{n2}] Compiling {p}",
    "warning: unused variable `{i}` --> {p}:{n}:{n2}",
    "error[E0{n}]: mismatched types in `{i}_{j}`",
    "drwxr-xr-x  {n2} user staff  {n} Jun {n2} 10:{n2:02d} {d}",
    "-rw-r--r--  1 user staff  {n}{n2} Jun {n2} 11:{n2:02d} {i}{e}",
    "{p}:{n}:    {i} = {j}.{k}({n2})",
    "{p}:{n}:def {i}_{j}({k}):",
    "=== {n} passed, {n2} failed, {n3} warnings in {f}s ===",
    "Traceback (most recent call last):",
    "  File \"{p}\", line {n}, in {i}",
    "$ {cmd}",
    "commit {hex}",
    "Author: dev <dev@example.com>",
    "    {W1} {w2} {w3} in {m}",
)
DIFF_LINES = (
    "diff --git a/{p} b/{p}",
    "--- a/{p}",
    "+++ b/{p}",
    "@@ -{n},{n2} +{n},{n3} @@ def {i}_{j}(self):",
    "-    {i} = self._{j}.get({k!r})",
    "+    {i} = self._{j}.get({k!r}, {n})",
    "     if {i} is None:",
    "-        return {n}",
    "+        return self._{k}({i})",
    "+    # {w1} {w2} {w3} {w4}",
    "     for {i} in {j}:",
    "-        {j}.append({i})",
    "+        {j}.extend({i} for _ in range({n}))",
)
PROSE = (
    "{W1} {w2} {w3} {w4} {w5} {w6} {w7}.",
    "I'll {w1} the {i} in `{p}` {w2} {w3} {w4}.",
    "The test `test_{i}_{j}` {w1} {w2} because `{k}` is {w3} {w4}.",
    "Let me {w1} `{m}` to {w2} how {i} {w3} {w4}.",
    "{W1} {w2}: the `{i}` {w3} {w4} {w5} `{j}` {w6} {w7}.",
    "Next I will {w1} `{p}` and run the tests again.",
)
CMDS = (
    "python -m pytest -q {p}",
    "git diff --stat",
    "git log --oneline -n {n2}",
    "rg -n '{i}' {d}",
    "ls -la {d}",
    "cargo build --release",
    "pip install -e '.[test]'",
    "make -j{n2} test",
)


class Gen:
    """Deterministic generator of realistic agent-session events."""

    POOL = 4000  # filled lines per vocabulary, drawn from the seed

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.pools = {
            vocab: [self._fill(self.r.choice(vocab)) for _ in range(self.POOL)]
            for vocab in (CODE_LINES, LOG_LINES, DIFF_LINES, PROSE)
        }

    def _fill(self, template: str) -> str:
        r = self.r
        i, j, k = r.choice(IDENTS), r.choice(IDENTS), r.choice(IDENTS)
        w = [r.choice(WORDS) for _ in range(7)]
        return template.format(
            i=i, j=j, k=k, I=i.capitalize(), J=j.capitalize(),
            n=r.randint(1, 999), n2=r.randint(1, 60), n3=r.randint(1, 40),
            f=round(r.uniform(0.01, 30.0), 2), pct=r.randint(0, 100), pad=" " * r.randint(1, 20),
            m=r.choice(MODULES), p=self.path(), d=r.choice(DIRS), e=r.choice(EXTS),
            w1=w[0], w2=w[1], w3=w[2], w4=w[3], w5=w[4], w6=w[5], w7=w[6],
            W1=w[0].capitalize(), hex="%040x" % r.getrandbits(160),
            date=f"2025-06-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:"
            f"{r.randint(0, 59):02d}.{r.randint(0, 999):03d}Z",
            lvl=r.choice(("INFO", "INFO", "DEBUG", "WARN", "ERROR")),
            cmd=r.choice(CMDS).format(p=self.path(), n2=r.randint(1, 20), i=i, d=r.choice(DIRS)),
        )

    def path(self) -> str:
        r = self.r
        return f"{r.choice(DIRS)}/{r.choice(IDENTS)}/{r.choice(IDENTS)}_{r.choice(IDENTS)}{r.choice(EXTS)}"

    def lines(self, vocab: tuple[str, ...], target: int) -> str:
        """Lines of ``vocab`` (runs of consecutive pool lines, like a real file) up to ``target``."""
        pool = self.pools[vocab]
        r = self.r
        out: list[str] = []
        size = 0
        while size < target:
            start = r.randrange(self.POOL)
            for line in pool[start : start + r.randint(1, 8)]:
                out.append(line)
                size += len(line) + 1
        return "\n".join(out)

    def prose(self, sentences: int) -> str:
        return " ".join(self.r.choices(self.pools[PROSE], k=sentences))

    def ident(self, prefix: str) -> str:
        # ULID-like: 48-bit time-ish prefix + 80 random bits, Crockford base32.
        alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
        n = (0x0197_0000_0000 + self.r.getrandbits(32)) << 80 | self.r.getrandbits(80)
        chars = []
        for _ in range(26):
            chars.append(alphabet[n & 31])
            n >>= 5
        return prefix + "".join(reversed(chars))

    def tool_output(self, tool: str) -> str:
        r = self.r
        # Skewed sizes: mostly a few hundred bytes to 2 KiB, sometimes 4-6 KiB.
        target = int(r.choice((300, 700, 1000, 1400, 1900, 2400, 3200, 5000)) * r.uniform(0.7, 1.3))
        if tool == "read_file" or tool == "write_file":
            return self.lines(CODE_LINES, target)
        if tool == "edit_file":
            return self.lines(DIFF_LINES, target)
        return self.lines(LOG_LINES, target)

    def tool_args(self, tool: str) -> str:
        r = self.r
        if tool == "bash":
            args: dict[str, Any] = {"command": self._fill(r.choice(CMDS)), "timeout": r.choice((30, 120, 600))}
        elif tool == "read_file":
            args = {"path": self.path(), "offset": r.randint(0, 400), "limit": r.choice((200, 400, 2000))}
        elif tool == "edit_file":
            args = {"path": self.path(), "old": self.lines(CODE_LINES, 120), "new": self.lines(CODE_LINES, 160)}
        elif tool == "write_file":
            args = {"path": self.path(), "content": self.lines(CODE_LINES, 300)}
        elif tool == "grep":
            args = {"pattern": r.choice(IDENTS), "path": r.choice(DIRS), "context": 2}
        else:
            args = {"path": r.choice(DIRS)}
        return json.dumps(args)

    def session(self, n: int, project_id: str) -> list[Draft]:
        """``n`` events of one session: inputs, model calls with tool calls, tool results."""
        r = self.r
        sid = self.ident("ses_")
        agent = self.ident("agt_")
        provider, model = r.choice(MODELS)
        drafts: list[Draft] = []
        task = self.ident("tsk_")
        items: list[str] = []

        def add(event: Any, request_id: str | None = None) -> None:
            drafts.append(Draft(event, project_id, sid, agent, task, request_id))

        while len(drafts) < n:
            if not drafts or r.random() < 0.12:
                task = self.ident("tsk_")
                add(
                    InputSubmitted(content=[TextPart(self.prose(r.randint(1, 5)))]),
                    request_id=self.ident("req_"),
                )
            add(
                ModelRequested(
                    provider=provider,
                    model=model,
                    thinking_level=r.choice((None, "low", "medium")),
                    context_item_ids=items[-r.randint(1, 6):],
                )
            )
            calls = [
                ToolCall(self.ident("call_"), tool, self.tool_args(tool))
                for tool in (r.choice(TOOLS) for _ in range(r.choice((1, 1, 1, 2, 3))))
            ]
            add(
                ModelResponded(
                    text=self.prose(r.randint(1, 4)),
                    reasoning=self.prose(r.randint(0, 3)),
                    tool_calls=calls,
                    stop_reason="tool_use",
                    usage=Usage(r.randint(2_000, 120_000), r.randint(20, 2_000), r.randint(0, 100_000)),
                    provider_response_id=self.ident("resp_"),
                )
            )
            for call in calls:
                add(ToolStarted(call_id=call.call_id, name=call.name, arguments=call.arguments))
                failed = r.random() < 0.08
                add(
                    ToolFinished(
                        call_id=call.call_id,
                        name=call.name,
                        status="error" if failed else "ok",
                        is_error=failed,
                        content=[TextPart(self.tool_output(call.name))],
                    )
                )
                items.append(call.call_id)
        return drafts[:n]


def sessions_for(n: int) -> int:
    """:data:`SESSIONS` concurrent sessions, or one per event when there are fewer events."""
    return min(SESSIONS, n)


def generate(n: int, seed: int) -> list[list[Draft]]:
    """``n`` events over :func:`sessions_for` sessions (one list per session)."""
    gen = Gen(seed)
    project = gen.ident("prj_")
    k = sessions_for(n)
    per = [n // k + (1 if s < n % k else 0) for s in range(k)]
    return [gen.session(k, project) for k in per]


# --------------------------------------------------------------------------- measurements


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


class TooFewToTrain(Exception):
    """The first phase left too few events to train a zstd dictionary on."""


@dataclass
class AppendFigures:
    events: int
    seconds: float
    latencies_ms: list[float]

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds


async def append_all(store: Any, sessions: list[list[Draft]]) -> AppendFigures:
    latencies: list[list[float]] = [[] for _ in sessions]
    clock = time.perf_counter

    async def producer(drafts: list[Draft], lat: list[float]) -> None:
        append = store.append
        for d in drafts:
            t0 = clock()
            await append(d)
            lat.append(clock() - t0)

    gc.collect()
    t0 = clock()
    async with trio.open_nursery() as nursery:
        for drafts, lat in zip(sessions, latencies):
            nursery.start_soon(producer, drafts, lat)
    seconds = clock() - t0
    all_ms = sorted(x * 1000.0 for lat in latencies for x in lat)
    return AppendFigures(sum(len(s) for s in sessions), seconds, all_ms)


async def store_append(
    data: Path, sessions: list[list[Draft]], train: bool, auto_dictionary: bool
) -> tuple[AppendFigures, int | None]:
    """Append through the real store (synchronous=FULL, otherwise its defaults, so a dictionary
    is trained automatically after AUTO_DICTIONARY_AFTER events unless ``auto_dictionary`` is
    off); with ``train``, train a 16 KiB dictionary explicitly first."""
    options: dict[str, Any] = {} if auto_dictionary else {"auto_dictionary_after": None}
    untrained: str | None = None
    async with open_store(data, synchronous="FULL", **options) as store:
        if train:
            try:
                await trio.to_thread.run_sync(lambda: store.train_dictionary(size=16 * 1024))
            except TooFewSamples as exc:  # "need at least 8 events to train a dictionary, …"
                untrained = str(exc)  # raised here, past the store's nursery, it would be a group
        if untrained is None:
            figures = await append_all(store, sessions)
            dict_id = store.codec.active_dict_id or None
    if untrained is not None:
        raise TooFewToTrain(untrained)
    return figures, dict_id


def run_appends(*args: Any) -> tuple[AppendFigures, int | None]:
    """:func:`store_append` under ``trio.run``, with Ctrl-C taken as a cancellation.

    Left to trio, SIGINT raises ``KeyboardInterrupt`` wherever the main thread happens to be,
    inside the store's bookkeeping too: a run interrupted during its appends hung, the store's
    shutdown waiting for an append the interruption had left half-recorded. Here the appends
    are cancelled at a checkpoint, the store drains and closes, and ``KeyboardInterrupt`` is
    raised once it has (the daemon takes its signals the same way).
    """

    async def appends() -> tuple[AppendFigures, int | None]:
        interrupted = False
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def cancel_on_signal() -> None:
                    nonlocal interrupted
                    async for _ in signals:
                        interrupted = True
                        nursery.cancel_scope.cancel()

                nursery.start_soon(cancel_on_signal)
                failure: Exception | None = None
                try:
                    result = await store_append(*args)
                except Exception as exc:  # (raised out of the nursery, it would come in a group)
                    failure = exc
                nursery.cancel_scope.cancel()
        if interrupted:
            raise KeyboardInterrupt
        if failure is not None:
            raise failure
        return result

    return trio.run(appends)


def read_rows(data: Path, after: int, to: int) -> list[tuple]:
    conn = apsw.Connection(str(data / EVENTS_DB), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(
            f"SELECT {ROW_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq", (after, to)
        ).fetchall()
    finally:
        conn.close()


def floor_append(floor_dir: Path, rows: list[tuple]) -> float:
    """Raw apsw: the same rows into a same-shaped table, 64 per transaction, WAL, FULL."""
    floor_dir.mkdir()
    conn = apsw.Connection(str(floor_dir / "floor.db"))
    conn.setbusytimeout(10_000)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0] == "wal"
    with conn:
        conn.execute(SCHEMA)
    conn.execute("PRAGMA synchronous=FULL")
    sql = (
        "INSERT INTO events(seq, ts, project_id, session_id, session_seq, agent_id, task_id, "
        "kind, request_id, dict_id, raw_size, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    batches = [rows[i : i + FLOOR_BATCH] for i in range(0, len(rows), FLOOR_BATCH)]
    try:
        gc.collect()
        t0 = time.perf_counter()
        for batch in batches:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(sql, batch)
            conn.execute("COMMIT")
        seconds = time.perf_counter() - t0
    finally:  # (also when interrupted: DIR keeps only the log)
        conn.close()
        shutil.rmtree(floor_dir)
    return len(rows) / seconds


def floor_select(data: Path, after: int, to: int) -> float:
    """The replay floor: SELECT the rows (every column), no decoding."""
    conn = apsw.Connection(str(data / EVENTS_DB), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        gc.collect()
        t0 = time.perf_counter()
        n = 0
        for _row in conn.execute(
            f"SELECT {ROW_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq", (after, to)
        ):
            n += 1
        seconds = time.perf_counter() - t0
    finally:
        conn.close()
    return n / seconds


def _fold(state: dict[str | None, dict[str, Any]], session_id: str | None, session_seq: Any, kind: str) -> None:
    s = state.get(session_id)
    if s is None:
        s = state[session_id] = {"events": 0, "last_seq": 0, "kinds": {}}
    s["events"] += 1
    s["last_seq"] = session_seq
    kinds = s["kinds"]
    kinds[kind] = kinds.get(kind, 0) + 1


def codec_replay(data: Path, after: int, to: int) -> tuple[float, dict[str | None, dict[str, Any]]]:
    """SELECT the rows, decode each body with Codec.decode, fold into per-session state (info)."""
    with LogReader(data) as reader:
        decode = reader.codec.decode
        gc.collect()
        t0 = time.perf_counter()
        state: dict[str | None, dict[str, Any]] = {}
        for _seq, session_id, session_seq, kind, dict_id, body in reader.conn.execute(
            "SELECT seq, session_id, session_seq, kind, dict_id, body FROM events "
            "WHERE seq > ? AND seq <= ? ORDER BY seq",
            (after, to),
        ):
            event = decode(kind, body, dict_id)
            _fold(state, session_id, session_seq, type(event).__name__)
        seconds = time.perf_counter() - t0
    n = sum(s["events"] for s in state.values())
    return n / seconds, state


def reader_replay(data: Path, after: int, to: int) -> float:
    """Replay of the whole range through the public LogReader.events(), in one read: paged
    SELECT, frame checks, zstd, typed decode, a StoredEvent per row; fold. (The daemon's reads go
    through the same decoder in reads of at most READ_BYTES each: see paged_replay.)"""
    with LogReader(data) as reader:
        gc.collect()
        t0 = time.perf_counter()
        state: dict[str | None, dict[str, Any]] = {}
        for ev in reader.events(after=after, to=to):
            _fold(state, ev.session_id, ev.session_seq, ev.kind)
        seconds = time.perf_counter() - t0
    return sum(s["events"] for s in state.values()) / seconds


def paged_replay(data: Path, after: int, to: int) -> float:
    """The same replay as the daemon reads the log (EventStore.read_events, session wake-up):
    reads of at most READ_BYTES of bodies each (the rows past the budget are never fetched),
    read on until a read comes back empty; fold. For information: the target is on the whole-log
    replay above."""
    with LogReader(data) as reader:
        gc.collect()
        t0 = time.perf_counter()
        state: dict[str | None, dict[str, Any]] = {}
        cursor = after
        while True:
            page = list(reader.events(after=cursor, to=to, max_bytes=READ_BYTES))
            if not page:
                break
            for ev in page:
                _fold(state, ev.session_id, ev.session_seq, ev.kind)
            cursor = page[-1].seq
        seconds = time.perf_counter() - t0
    return sum(s["events"] for s in state.values()) / seconds


def size_figures(data: Path, after: int, to: int) -> dict[str, float]:
    """Raw MessagePack, stored frame and JSON-lines bytes per event for ``after < seq <= to``."""
    enc = msgspec.json.Encoder()
    n = raw = body = json_all = json_body = 0
    with LogReader(data) as reader:
        for row in reader.rows(after=after, to=to):
            ev = reader.decode(row)
            shape = ev.to_json()
            n += 1
            raw += row.raw_size
            body += len(row.body)
            json_all += len(enc.encode(shape)) + 1  # one JSON line per event
            json_body += len(enc.encode(shape["body"]))
    return {
        "raw": raw / n,
        "body": body / n,
        "json": json_all / n,
        "json_body": json_body / n,
    }


def db_bytes(data: Path) -> int:
    """Logical size of events.db (WAL frames included): page_count x page_size."""
    conn = apsw.Connection(str(data / EVENTS_DB), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        pages = conn.execute("PRAGMA page_count").fetchall()[0][0]
        free = conn.execute("PRAGMA freelist_count").fetchall()[0][0]
        size = conn.execute("PRAGMA page_size").fetchall()[0][0]
    finally:
        conn.close()
    return (pages - free) * size


def phase(data: Path, n: int, seed: int, after: int, train: bool, auto_dictionary: bool = True) -> dict[str, Any]:
    """One append + floors + replay + size measurement of ``n`` events after ``after``."""
    sessions = generate(n, seed)
    base_bytes = db_bytes(data) if (data / EVENTS_DB).exists() else None
    appended, dict_id = run_appends(data, sessions, train, auto_dictionary)
    del sessions
    if base_bytes is None:
        # The fresh log's own pages (schema, meta) are not events: an empty log has 4-5 pages.
        base_bytes = 0
    to = after + n
    rows = read_rows(data, after, to)
    assert len(rows) == n, (len(rows), n)
    floor_rate = floor_append(data / "bench-floor", rows)
    del rows
    select_rate = floor_select(data, after, to)
    codec_rate, state = codec_replay(data, after, to)
    reader_rate = reader_replay(data, after, to)
    paged_rate = paged_replay(data, after, to)
    assert sum(s["events"] for s in state.values()) == n
    assert len(state) == sessions_for(n)
    sizes = size_figures(data, after, to)
    stored = (db_bytes(data) - base_bytes) / n
    lat = appended.latencies_ms
    return {
        "dict_id": dict_id,
        "append_events_per_s": appended.events_per_s,
        "ack_p50_ms": percentile(lat, 0.50),
        "ack_p99_ms": percentile(lat, 0.99),
        "ack_max_ms": lat[-1],
        "floor_append_events_per_s": floor_rate,
        "append_ratio": appended.events_per_s / floor_rate,
        "replay_events_per_s": reader_rate,
        "floor_replay_events_per_s": select_rate,
        "replay_ratio": reader_rate / select_rate,
        "codec_replay_events_per_s": codec_rate,
        "codec_replay_ratio": codec_rate / select_rate,
        "paged_replay_events_per_s": paged_rate,
        "paged_replay_ratio": paged_rate / select_rate,
        "bytes_per_event": stored,
        "body_bytes_per_event": sizes["body"],
        "raw_bytes_per_event": sizes["raw"],
        "json_bytes_per_event": sizes["json"],
        "json_body_bytes_per_event": sizes["json_body"],
        "bytes_ratio": stored / sizes["json"],
        "body_bytes_ratio": sizes["body"] / sizes["json_body"],
    }


# --------------------------------------------------------------------------- report


def fmt(x: float, unit: str = "") -> str:
    if unit == "ev/s":
        return f"{x / 1000:,.1f}k ev/s"
    if unit == "ms":
        return f"{x:.2f} ms"
    if unit == "B":
        return f"{x:,.0f} B"
    return f"{x:.3g}"


def table(label: str, f: dict[str, Any], sessions: int) -> list[str]:
    ok = lambda b: "pass" if b else "FAIL"  # noqa: E731

    def replay(name: str, key: str, *, target: bool = False) -> tuple[str, ...]:
        """A replay row against the SELECT-only floor; only the headline one carries the target."""
        ratio = f[f"{key}_ratio"]
        return (
            f"{name}{label}",
            fmt(f[f"{key}_events_per_s"], "ev/s"),
            fmt(f["floor_replay_events_per_s"], "ev/s") + " (SELECT only)",
            f"{ratio:.2f}",
            f">= {TARGET_REPLAY_RATIO}" if target else "(info)",
            ok(ratio >= TARGET_REPLAY_RATIO) if target else "",
        )

    rows = [
        (
            f"durable append, {sessions} sessions, FULL{label}",
            fmt(f["append_events_per_s"], "ev/s"),
            fmt(f["floor_append_events_per_s"], "ev/s") + " (raw apsw, 64/txn)",
            f"{f['append_ratio']:.2f}",
            f">= {TARGET_APPEND_RATIO}",
            ok(f["append_ratio"] >= TARGET_APPEND_RATIO),
        ),
        (
            f"ack latency p50 / p99{label}",
            f"{f['ack_p50_ms']:.2f} / {f['ack_p99_ms']:.2f} ms",
            "",
            "",
            f"p99 < {TARGET_ACK_P99_MS:g} ms",
            ok(f["ack_p99_ms"] < TARGET_ACK_P99_MS),
        ),
        replay("replay via LogReader.events(): decode + fold", "replay", target=True),
        replay("replay in the daemon's reads (<= 16 MiB each) + fold", "paged_replay"),
        replay("replay: SELECT + Codec.decode + fold", "codec_replay"),
        (
            f"stored bytes/event (events.db growth){label}",
            fmt(f["bytes_per_event"], "B"),
            fmt(f["json_bytes_per_event"], "B") + " (JSON lines)",
            f"{f['bytes_ratio']:.2f}",
            f"<= {TARGET_BYTES_RATIO}",
            ok(f["bytes_ratio"] <= TARGET_BYTES_RATIO),
        ),
        (
            f"body bytes/event (zstd frame){label}",
            fmt(f["body_bytes_per_event"], "B"),
            fmt(f["json_body_bytes_per_event"], "B") + " (JSON body)",
            f"{f['body_bytes_ratio']:.2f}",
            "",
            "",
        ),
        (
            f"raw MessagePack bytes/event{label}",
            fmt(f["raw_bytes_per_event"], "B"),
            "",
            "",
            "",
            "",
        ),
    ]
    return ["| " + " | ".join(r) + " |" for r in rows]


@contextmanager
def _lock_held(path: Path) -> Iterator[bool]:
    """Hold ``path``'s exclusive ``flock`` (as the store takes it) for the block, if it is free."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        sys.exit(f"log_bench: DATA_DIR_NOT_WRITABLE: cannot open {path}: {exc.strerror or exc}")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def prepare_dir(data: Path, overwrite: bool) -> None:
    if data.exists() and not data.is_dir():
        sys.exit(f"log_bench: DATA_DIR_NOT_A_DIRECTORY: {data} is not a directory; pass a new or empty directory")
    if data.exists() and any(data.iterdir()):
        entries = sorted(p.name for p in data.iterdir())
        if not overwrite:
            sys.exit(
                f"log_bench: DATA_DIR_NOT_EMPTY: {data} is not empty ({', '.join(entries[:5])}); the benchmark writes "
                f"a fresh log there. Pass an empty or new directory, or --overwrite to clear an "
                f"old Lens log."
            )
        foreign = [e for e in entries if e not in KNOWN_ENTRIES and e != "bench-floor"]
        if foreign or EVENTS_DB not in entries:
            sys.exit(
                f"log_bench: STORE_FOREIGN: refusing to clear {data}: it is not only a Lens log "
                f"(found {', '.join(entries[:5])})"
            )
        # A daemon (or any Lens process) writing this log holds its lock file: clearing the log
        # under it would lose its data. The lock is held while clearing, then let go.
        with _lock_held(data / LOCK_FILE) as held:
            if not held:
                sys.exit(f"log_bench: STORE_LOCKED: refusing to clear {data}: it is in use by another Lens process "
                         f"(a running `lens serve`?); stop it or pass another directory")
            for e in entries:
                p = data / e
                if e != LOCK_FILE:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
    try:
        data.mkdir(mode=0o700, parents=True, exist_ok=True)  # (a data directory Lens makes is 0700)
    except OSError as exc:
        sys.exit(f"log_bench: DATA_DIR_NOT_WRITABLE: cannot create {data}: {exc.strerror or exc}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # the usage, then the message with a stable code
        self.print_usage(sys.stderr)
        self.exit(2, f"log_bench: USAGE_ERROR: {message}\n")


def _event_count(value: str) -> int:
    digits = value[1:] if value[:1] in "+-" else value
    if not (digits.isascii() and digits.isdigit()):  # (int() also takes "1_0", " 5", other scripts' digits)
        raise argparse.ArgumentTypeError(f"must be a positive whole number of events, not {value!r}")
    if int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of events, not {int(value)}")
    return int(value)


def max_events() -> int:
    """The most events per phase this machine's memory can hold (see :data:`MEMORY_PER_EVENT`)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // MEMORY_PER_EVENT


def _refuse_too_many(n: int) -> None:
    limit = max_events()
    if n > limit:
        gib = 1024**3
        sys.exit(
            f"log_bench: EVENTS_TOO_MANY: --events {n:,} would need about {n * MEMORY_PER_EVENT / gib:,.0f} GiB "
            f"of memory (a phase holds all its events), more than this machine's "
            f"{limit * MEMORY_PER_EVENT / gib:,.1f} GiB; pass at most --events {limit}"
        )


def _data_dir(value: str) -> Path:
    problem = data_dir_problem(value)  # empty (the working directory), or not UTF-8 (SQLite's names)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return Path(value)


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=_data_dir, action=Once, help="an empty or new directory for the log")
    ap.add_argument("--events", type=_event_count, default=None, action=Once, help=f"events per phase (default {DEFAULT_EVENTS:,})")
    ap.add_argument("--quick", action="store_true", help=f"smoke size ({QUICK_EVENTS:,} events)")
    ap.add_argument("--json", action="store_true", help="(kept for scripts) the last line is always JSON")
    ap.add_argument("--no-dictionary", action="store_true", help="skip the trained-dictionary phase")
    ap.add_argument(
        "--no-auto-dictionary", action="store_true",
        help="phase 1 without the store's automatic dictionary (auto_dictionary_after=None)",
    )
    ap.add_argument("--overwrite", action="store_true", help="clear an old Lens log in --data first")
    ap.add_argument("--seed", type=int, default=None, action=Once)
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = SEED
    n = args.events if args.events is not None else (QUICK_EVENTS if args.quick else DEFAULT_EVENTS)
    data: Path = args.data
    _refuse_too_many(n)  # before DIR is made or cleared
    prepare_dir(data, args.overwrite)

    t_start = time.perf_counter()
    try:
        plain, with_dict = measure(data, n, args)
    except KeyboardInterrupt:
        print(f"log_bench: INTERRUPTED: stopped by Ctrl-C (SIGINT); {data} holds the events appended so far "
              f"(every one committed; --overwrite clears it)", file=sys.stderr)
        return 130
    total = time.perf_counter() - t_start

    try:
        report(n, args, plain, with_dict, total)
        sys.stdout.flush()  # (a pipe's buffer: its failure is met here, not at exit)
    except BrokenPipeError:
        # The reader went away (`log_bench.py … | head`): not an error of ours, as for `lens log`.
        _silence_stdout()
        return 0
    except OSError as exc:  # e.g. a full disk under stdout
        _silence_stdout()
        print(f"log_bench: IO_ERROR: cannot write the report to standard output: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0


def report(n: int, args: argparse.Namespace, plain: dict[str, Any], with_dict: dict[str, Any] | None,
           total: float) -> None:
    """The Markdown table of both phases' figures, then the JSON line, on stdout."""
    print(f"## Lens event log — {n:,} events per phase, {sessions_for(n)} sessions, synchronous=FULL\n")
    print(
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"SQLite {apsw.sqlite_lib_version()}, apsw {apsw.apsw_version()}; {total:.1f} s\n"
    )
    auto = "off" if args.no_auto_dictionary else f"after {AUTO_DICTIONARY_AFTER:,} events"
    print(
        f"Phase 1: store defaults (automatic zstd dictionary {auto}). Phase 2 (rows marked "
        f"[16 KiB dict]): N new events after an explicit `train_dictionary()`.\n"
    )
    print("| figure | value | floor / baseline | ratio | target | result |")
    print("| --- | --- | --- | --- | --- | --- |")
    for line in table("", plain, sessions_for(n)):
        print(line)
    if with_dict is not None:
        for line in table(" [16 KiB dict]", with_dict, sessions_for(n)):
            print(line)
    print()

    out: dict[str, Any] = {
        "events": n,
        "sessions": sessions_for(n),
        "auto_dictionary_after": None if args.no_auto_dictionary else AUTO_DICTIONARY_AFTER,
        **plain,
    }
    if with_dict is not None:
        out.update({f"dict_{k}": v for k, v in with_dict.items()})
    out.update(
        {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": apsw.sqlite_lib_version(),
            "seconds": total,
        }
    )
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}))


def _silence_stdout() -> None:
    """Send what is still to be written to stdout nowhere (its reader is gone or it cannot be
    written), so that flushing it again at exit fails no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def measure(data: Path, n: int, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Both phases' figures (the second ``None`` when skipped)."""
    try:
        plain = phase(data, n, args.seed, after=0, train=False, auto_dictionary=not args.no_auto_dictionary)
    except LogError as exc:  # e.g. DIR cannot be written: the store's own words, not a traceback
        sys.exit(f"log_bench: {exc.code}: {exc}")
    if args.no_dictionary:
        return plain, None
    try:
        return plain, phase(data, n, args.seed + 1, after=n, train=True)
    except TooFewToTrain as exc:
        print(f"log_bench: the trained-dictionary phase is skipped: {exc}", file=sys.stderr)
        return plain, None


if __name__ == "__main__":
    raise SystemExit(main())
