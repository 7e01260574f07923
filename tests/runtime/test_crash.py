"""F-ACT-4: kill -9 the actor runtime at chosen points, restart it, and check what survived.

Each test starts the real runtime (store, supervisor, actors, faux provider, real tools) in a
child process (tests/runtime/crash_child.py), waits for the marker line that says the kill point
is reached (printed by the child only after the relevant event was committed), sends SIGKILL,
then restarts the runtime in this process on the same data directory and checks:

* no acknowledged event is lost: every event the child saw committed, and every acknowledged
  submission, is in the log unchanged; the log read right after the kill is a prefix of the log
  after the restart;
* ``seq`` and each session's ``session_seq`` are gap-free; ``PRAGMA integrity_check`` is ok;
* the scenario's recovery: an interrupted non-replay-safe tool call is recorded as interrupted
  and the model is told; a replay-safe one is re-run; an interrupted model stream is requested
  again (attempt 2) and the task completes; queued inputs survive and are served in order.

Kill points are markers, never timers, so what is asserted does not depend on timing.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Callable

import apsw
import msgspec
import pytest
import trio

from events.reader import LogReader, StoredEvent
from events.schema import EVENTS_DB, PROJECTIONS_DB
from events.store import Draft, open_store
from events.types import TextPart
from projections.session_state import SessionState
from runtime.actor import INTERRUPTED_TEXT, GetState, WaitIdle
from runtime.providers.faux import FauxProvider
from runtime.supervisor import Supervisor

CHILD_PATH = Path(__file__).with_name("crash_child.py")
_spec = importlib.util.spec_from_file_location("lens_crash_child", CHILD_PATH)
assert _spec is not None and _spec.loader is not None
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)

CHILD_TIMEOUT_S = 20  # generous upper bounds; a healthy run needs a small fraction of them
RESTART_TIMEOUT_S = 20

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- the crash


@dataclass
class Crash:
    data: Path
    session_id: str = ""
    lines: list[str] = field(default_factory=list)
    committed: dict[int, str] = field(default_factory=dict)  # seq -> kind, seen by the child
    acks: dict[str, int] = field(default_factory=dict)  # request_id -> seq
    deltas: list[str] = field(default_factory=list)
    killed_at_ms: int = 0
    before: list[StoredEvent] = field(default_factory=list)  # the log right after the kill

    def parse(self, line: str) -> None:
        self.lines.append(line)
        word, _, rest = line.partition(" ")
        if word == "SESSION":
            self.session_id = rest
        elif word == "EVENT":
            seq, kind = rest.split(" ")
            self.committed[int(seq)] = kind
        elif word == "ACK":
            rid, seq = rest.split(" ")
            self.acks[rid] = int(seq)
        elif word == "DELTA":
            self.deltas.append(json.loads(rest))

    def saw(self, kind: str) -> bool:
        return kind in self.committed.values()

    @property
    def ready(self) -> bool:
        return "READY" in self.lines


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[str]:
    buf = b""
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:  # an unterminated tail is a line the kill tore: not a report
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()


async def crash(tmp_path: Path, scenario: str, kill_when: Callable[[Crash], bool]) -> Crash:
    """Run ``scenario`` in a child, SIGKILL it once ``kill_when`` holds, read the log left."""
    c = Crash(tmp_path / "data")
    err_path = tmp_path / "child-stderr.txt"
    with open(err_path, "wb") as err:
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(CHILD_PATH), str(c.data), scenario],
            stdout=subprocess.PIPE, stderr=err,
        )
    assert proc.stdout is not None
    lines = _lines(proc.stdout)
    try:
        with trio.move_on_after(CHILD_TIMEOUT_S) as timeout:
            async for line in lines:
                c.parse(line)
                if kill_when(c):
                    break
            else:
                await proc.wait()
                pytest.fail(f"the child exited ({proc.returncode}) before the kill point: "
                            f"{c.lines}\n{err_path.read_text()}")
        if timeout.cancelled_caught:
            pytest.fail(f"kill point not reached within {CHILD_TIMEOUT_S} s: {c.lines}\n{err_path.read_text()}")
        proc.kill()  # SIGKILL
        c.killed_at_ms = time.time_ns() // 1_000_000
        await proc.wait()
        async for line in lines:  # what it printed between the marker and the kill also counts
            c.parse(line)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.stdout.aclose()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, err_path.read_text())
    assert c.session_id
    with LogReader(c.data) as reader:
        c.before = list(reader.events())
    return c


# --------------------------------------------------------------------------- the restart


@dataclass
class Restart:
    provider: FauxProvider
    woken: list[str]
    state: SessionState
    events: list[StoredEvent]  # the whole log after recovery

    def session(self, session_id: str) -> list[StoredEvent]:
        return [e for e in self.events if e.session_id == session_id]


async def restart(c: Crash) -> Restart:
    """Start the runtime again on the crashed data dir; wait until the session is idle."""
    provider = FauxProvider("faux", child.make_script("resume"))
    async with open_store(c.data) as store:
        deps = child.make_deps(store, provider)
        try:
            async with trio.open_nursery() as nursery:
                sup = Supervisor(deps)
                await nursery.start(sup.run)
                woken = sup.live_sessions  # woken at start: the log shows unfinished work
                with trio.fail_after(RESTART_TIMEOUT_S):
                    await sup.call(c.session_id, WaitIdle())
                state = await sup.call(c.session_id, GetState())
                nursery.cancel_scope.cancel()
        finally:
            assert deps.snapshots is not None
            deps.snapshots.close()
    with LogReader(c.data) as reader:
        events = list(reader.events())
    return Restart(provider, woken, state, events)


def integrity(path: Path) -> str:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("PRAGMA integrity_check").fetchall()[0][0]
    finally:
        conn.close()


def check_nothing_lost(c: Crash, r: Restart) -> None:
    """The invariants every crash must keep."""
    by_seq = {e.seq: e for e in r.events}
    # every event the child saw committed is there, with its kind
    assert c.committed, "the child reported no committed event"
    for seq, kind in c.committed.items():
        assert seq in by_seq, f"committed event {seq} ({kind}) lost"
        assert by_seq[seq].kind == kind
    # every acknowledged submission is there, once
    for rid, seq in c.acks.items():
        e = by_seq[seq]
        assert (e.kind, e.request_id, e.session_id) == ("input.submitted", rid, c.session_id)
        assert sum(1 for x in r.events if x.kind == "input.submitted" and x.request_id == rid) == 1
    # the log left by the kill is a prefix of the recovered log, unchanged
    assert [e.to_json() for e in r.events[: len(c.before)]] == [e.to_json() for e in c.before]
    assert max(c.committed) <= len(c.before)
    # gap-free seqs, and gap-free session_seqs per session
    assert [e.seq for e in r.events] == list(range(1, len(r.events) + 1))
    sessions = {e.session_id for e in r.events if e.session_id is not None}
    for sid in sessions:
        sseqs = [e.session_seq for e in r.events if e.session_id == sid]
        assert sseqs == list(range(1, len(sseqs) + 1)), sid
    assert integrity(c.data / EVENTS_DB) == "ok"
    assert integrity(c.data / PROJECTIONS_DB) == "ok"
    # the restart woke the session by itself, and it ends idle with every task finished
    assert c.session_id in r.woken
    assert r.state.status == "idle" and not r.state.queue
    kinds = [e.kind for e in r.session(c.session_id)]
    assert kinds.count("task.started") == kinds.count("task.finished")


def kinds_of(events: list[StoredEvent]) -> list[str]:
    return [e.kind for e in events]


def only(events: list[StoredEvent], kind: str) -> StoredEvent:
    found = [e for e in events if e.kind == kind]
    assert len(found) == 1, (kind, kinds_of(events))
    return found[0]


# --------------------------------------------------------------------------- the scenarios


async def test_kill_during_a_tool_call_that_is_not_replay_safe(tmp_path: Path) -> None:
    c = await crash(tmp_path, "tool_not_replay_safe", lambda c: c.ready and c.saw("tool.started"))
    # precondition: the kill landed while the call ran
    assert "tool.started" in kinds_of(c.before) and "tool.finished" not in kinds_of(c.before)

    r = await restart(c)
    check_nothing_lost(c, r)
    events = r.session(c.session_id)
    started = only(events, "tool.started")
    assert started.event.name == child.BLOCK_TOOL and started.event.replay_safe is False
    finished = only(events, "tool.finished")
    assert finished.seq > len(c.before)  # recorded by the restart
    assert finished.event.call_id == started.event.call_id
    assert (finished.event.status, finished.event.is_error, finished.event.error_code) == (
        "interrupted", True, "INTERRUPTED")
    assert finished.event.content == [TextPart(INTERRUPTED_TEXT)]
    # the model is told: the next request's working context holds the interrupted result
    assert len(r.provider.requests) == 1
    last = r.provider.requests[0].items[-1]
    assert (last.role, last.call_id, last.status) == ("tool_result", started.event.call_id, "interrupted")
    assert last.text == INTERRUPTED_TEXT
    after = kinds_of([e for e in events if e.seq > finished.seq])
    assert after == ["model.requested", "model.responded", "task.finished"]
    assert events[-1].event.status == "completed"
    assert [it.role for it in r.state.agents["main"].items] == ["user", "tool_call", "tool_result", "assistant"]


async def test_kill_during_a_replay_safe_tool_call_reruns_it(tmp_path: Path) -> None:
    c = await crash(tmp_path, "tool_replay_safe", lambda c: c.ready and c.saw("tool.started"))
    assert "tool.started" in kinds_of(c.before) and "tool.finished" not in kinds_of(c.before)

    r = await restart(c)
    check_nothing_lost(c, r)
    events = r.session(c.session_id)
    started = only(events, "tool.started")  # the re-run continues the recorded call
    assert started.event.name == "sleep_milliseconds" and started.event.replay_safe is True
    finished = only(events, "tool.finished")
    assert finished.event.call_id == started.event.call_id
    assert (finished.event.status, finished.event.is_error) == ("ok", False)
    assert finished.event.content == [TextPart(f"slept {child.REPLAY_SAFE_SLEEP_MS} ms")]
    # it really ran again, after the kill (not a made-up result)
    assert finished.event.structured_content["start_unix_ms"] >= c.killed_at_ms
    assert finished.event.structured_content["end_unix_ms"] - finished.event.structured_content[
        "start_unix_ms"] >= child.REPLAY_SAFE_SLEEP_MS
    last = r.provider.requests[0].items[-1]
    assert (last.role, last.call_id, last.status) == ("tool_result", started.event.call_id, "ok")
    assert only(events, "task.finished").event.status == "completed"


async def test_kill_during_a_model_stream_requests_it_again(tmp_path: Path) -> None:
    c = await crash(tmp_path, "model_stream",
                    lambda c: c.ready and c.saw("model.requested") and bool(c.deltas))
    # precondition: killed mid-stream (a first delta was out, no response recorded)
    assert c.deltas == [child.STREAM_CHUNKS[0]]
    assert "model.requested" in kinds_of(c.before) and "model.responded" not in kinds_of(c.before)

    r = await restart(c)
    check_nothing_lost(c, r)
    events = r.session(c.session_id)
    requests = [e for e in events if e.kind == "model.requested"]
    assert [e.event.attempt for e in requests] == [1, 2]
    assert requests[1].seq > len(c.before)
    responded = only(events, "model.responded")
    assert responded.seq > requests[1].seq
    assert responded.event.text == "".join(child.STREAM_CHUNKS)
    assert len(r.provider.requests) == 1  # asked again exactly once
    assert r.provider.requests[0].items[-1].text == child.STREAM_PROMPT
    assert only(events, "task.finished").event.status == "completed"
    assert [it.role for it in r.state.agents["main"].items] == ["user", "assistant"]


async def test_a_second_crash_while_asking_again_counts_the_attempts_on(tmp_path: Path) -> None:
    c = await crash(tmp_path, "model_stream",
                    lambda c: c.ready and c.saw("model.requested") and bool(c.deltas))
    # As if a first restart had asked again (attempt 2) and died before any answer.
    first = only(c.before, "model.requested")
    async with open_store(c.data) as store:
        await store.append(Draft(
            msgspec.structs.replace(first.event, attempt=2), first.project_id, first.session_id,
            first.agent_id, first.task_id))
    r = await restart(c)
    events = r.session(c.session_id)
    assert [e.event.attempt for e in events if e.kind == "model.requested"] == [1, 2, 3]
    assert only(events, "model.responded").event.text == "".join(child.STREAM_CHUNKS)
    assert len(r.provider.requests) == 1
    assert r.state.agents["main"].request_attempt == 3


async def test_kill_with_queued_inputs_serves_them_in_order(tmp_path: Path) -> None:
    c = await crash(tmp_path, "queued_inputs", lambda c: c.ready)
    rids = [f"r{i}" for i in range(1, len(child.FOLLOW_UPS) + 2)]
    texts = [child.FIRST_PROMPT, *child.FOLLOW_UPS]
    assert sorted(c.acks) == sorted(rids)
    placed_before = [e.event.input_request_id for e in c.before if e.kind == "input.placed"]
    assert placed_before == ["r1"]  # the follow-ups were queued, not placed, at the kill

    r = await restart(c)
    check_nothing_lost(c, r)
    events = r.session(c.session_id)
    assert [e.request_id for e in events if e.kind == "input.submitted"] == rids
    assert [e.event.input_request_id for e in events if e.kind == "input.placed"] == rids
    assert [e.event.input_request_id for e in events if e.kind == "task.started"] == rids
    # one task at a time, each completed before the next starts
    lifecycle = [(e.kind, e.task_id) for e in events if e.kind in ("task.started", "task.finished")]
    assert [k for k, _ in lifecycle] == ["task.started", "task.finished"] * len(rids)
    assert all(lifecycle[i][1] == lifecycle[i + 1][1] for i in range(0, len(lifecycle), 2))
    assert all(e.event.status == "completed" for e in events if e.kind == "task.finished")
    # the model saw them in submission order (the first one's request asked again)
    assert [req.items[-1].text for req in r.provider.requests] == texts
    assert [e.event.attempt for e in events if e.kind == "model.requested"] == [1, 2] + [1] * len(child.FOLLOW_UPS)
    assert {rid: rec.status for rid, rec in r.state.inputs.items()} == {rid: "settled" for rid in rids}
