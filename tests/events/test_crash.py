"""kill -9 under load loses no acknowledged event (F-LOG-3, F-ACT-4's storage half).

A child process (crash_child.py, the real store with synchronous=FULL) appends from several
producers and prints each event once its append is acknowledged. The parent SIGKILLs it after a
random number of acknowledgements (seeded), restarts it on the same data directory, and repeats.
Then every acknowledged event must be there with its content, seqs gap-free, each session's
session_seq contiguous, ``PRAGMA integrity_check`` ok, retried request ids answered with their
original seq, and the store must keep appending.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest
import trio

from events.reader import LogReader
from events.store import Draft, open_store
from events.types import InstructionAppended

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 5
SEED = 20_240_611
READ_TIMEOUT_S = 30


def text_for(token: str) -> str:
    """Same rule as crash_child.text_for."""
    return token + "|" + "x" * (len(token) * 37 % 400)


@dataclass(frozen=True)
class Ack:
    seq: int
    session: str
    session_seq: int


@dataclass(frozen=True)
class Retry:
    session: str
    request_id: str
    seq: int
    duplicate: bool


def parse(lines: list[bytes], acks: dict[str, Ack], retries: list[Retry]) -> int:
    """Record complete lines; return how many acks they held."""
    count = 0
    for raw in lines:
        parts = raw.decode().split()
        if not parts or parts[-1] != ".":
            continue  # cut off by the kill: not a complete acknowledgement
        if parts[0] == "A":
            _, seq, session, sseq, token, _ = parts
            assert token not in acks
            acks[token] = Ack(int(seq), session, int(sseq))
            count += 1
        elif parts[0] == "R":
            _, session, rid, seq, dup, _ = parts
            retries.append(Retry(session, rid, int(seq), dup == "1"))
    return count


def run_and_kill(data_dir: Path, run: int, target: int, retry_ids: list[str], stderr_path: Path,
                 acks: dict[str, Ack], retries: list[Retry]) -> None:
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(data_dir), str(run), *retry_ids],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    seen = 0
    try:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while seen < target:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"run {run}: no acknowledgement within {READ_TIMEOUT_S} s"
            chunk = os.read(fd, 65536)
            assert chunk, f"run {run}: child exited early: {stderr_path.read_text()[-3000:]}"
            *complete, buf = (buf + chunk).split(b"\n")
            seen += parse(complete, acks, retries)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    # acknowledgements printed before the kill but not read yet count as well
    rest = proc.stdout.read()
    proc.stdout.close()
    *complete, _partial = (buf + rest).split(b"\n")
    parse(complete, acks, retries)
    assert proc.returncode == -signal.SIGKILL
    assert "Traceback" not in stderr_path.read_text(), stderr_path.read_text()


@pytest.mark.slow
def test_acknowledged_events_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    acks: dict[str, Ack] = {}
    retries: list[Retry] = []
    asked: list[tuple[str, str]] = []
    for run in range(KILLS):
        primary = sorted(t for t in acks if not t.endswith("+"))
        retry = rng.sample(primary, min(3, len(primary)))
        asked += [(acks[t].session, t) for t in retry]
        before = len(acks)
        run_and_kill(
            data_dir, run, rng.randint(1, 400), [f"{acks[t].session}:{t}" for t in retry],
            tmp_path / f"stderr-{run}.txt", acks, retries,
        )
        assert len(acks) > before, f"run {run} acknowledged nothing"

    # retried request ids answered with the original seq and wrote nothing
    assert [(r.session, r.request_id) for r in retries] == asked
    for r in retries:
        assert r.duplicate, r
        assert r.seq == acks[r.request_id].seq, r

    conn = apsw.Connection(str(data_dir / "events.db"))  # recovers the WAL a killed writer left
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()

    with LogReader(data_dir) as reader:
        events = list(reader.events())  # every row decodes
    last = events[-1].seq
    assert [e.seq for e in events] == list(range(1, last + 1))
    assert max(a.seq for a in acks.values()) <= last
    by_seq = {e.seq: e for e in events}
    for token, ack in acks.items():
        e = by_seq[ack.seq]
        assert (e.session_id, e.session_seq) == (ack.session, ack.session_seq), token
        assert e.event == InstructionAppended(text=text_for(token)), token
        assert e.request_id == (None if token.endswith("+") else token)
    sessions: dict[str, list[int]] = {}
    for e in events:
        sessions.setdefault(e.session_id, []).append(e.session_seq)
    for session, sseqs in sessions.items():
        assert sseqs == list(range(1, len(sseqs) + 1)), session

    async def reopen_and_append() -> None:
        async with open_store(data_dir) as store:
            assert store.last_seq == last
            fresh = await store.append(Draft(InstructionAppended(text="after"), session_id="s0"))
            assert fresh.seq == last + 1
            assert fresh.session_seqs == (len(sessions["s0"]) + 1,)
            token = asked[-1][1]
            again = await store.append(
                Draft(InstructionAppended(text="again"), session_id=acks[token].session, request_id=token)
            )
            assert again.duplicate and again.seq == acks[token].seq

    trio.run(reopen_and_append)
