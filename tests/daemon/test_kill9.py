"""§10, F-ACT-4 at the daemon level: ``lens serve`` SIGKILLed under load loses no acknowledged input.

``lens serve`` runs as a real process (no config file: built-in defaults, the ``faux`` provider,
port 0, ``--data data``). Many concurrent HTTP clients submit inputs with distinct request ids to
a few sessions and record every 202 with its seq. After a seeded random number of
acknowledgements the daemon is sent SIGKILL (not SIGTERM); the test then checks the log with the
daemon down (``lens log verify``, ``PRAGMA integrity_check``, ``lens log decode``: every
acknowledged input is there with its seq, seqs are 1..N) and restarts it on the same data
directory: every acknowledged request id, submitted again, is a duplicate with its original seq.
Three kill/restart rounds; then every session becomes idle having answered each input (the faux
echo), and ``lens log rebuild`` reproduces exactly the projections the daemon kept up to date.

Nothing sleeps for ordering: the kill follows a count of acknowledgements, every wait is a poll
with a deadline, and nothing is timed.
"""

from __future__ import annotations

import json
import random
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import httpx2
import trio

from .conftest import Daemon, ServeProcess, projection_dump, projections_caught_up, run_lens, serving

SEED = 20_261_201
ROUNDS = 3  # kill/restart rounds
SESSIONS = 4
CLIENTS = 12  # concurrent HTTP clients (trio tasks)
KILL_AFTER = (25, 120)  # acknowledged inputs in a round before the SIGKILL (seeded)
SETTLE = 60.0  # seconds: bound on the daemon working through what is queued after a restart


@dataclass(frozen=True)
class Ack:
    session: str
    seq: int
    text: str


def text_of(request_id: str) -> str:
    return f"note {request_id}"


def echo_of(text: str) -> str:
    """What the built-in faux provider answers to a plain input."""
    return f"(faux) You said: {text[:500]}"


async def submit_until_killed(d: Daemon, token: str, sids: list[str], serve: ServeProcess, round_no: int,
                              kill_after: int, acks: dict[str, Ack]) -> int:
    """CLIENTS tasks submit inputs until the daemon, SIGKILLed at the ``kill_after``-th
    acknowledgement of this round, stops answering. Records every 202; returns this round's count."""
    assert serve.proc is not None
    state = {"acked": 0, "killed": False}

    async def client(worker: int) -> None:
        i = 0
        while True:
            rid = f"r{round_no}-c{worker}-{i}"
            sid = sids[(worker + i) % len(sids)]
            i += 1
            try:
                r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": rid, "content": text_of(rid)})
            except httpx2.TransportError:
                assert state["killed"], f"the daemon stopped answering before the kill ({rid})"
                return
            # A response read after the kill was still sent by the daemon: it is an acknowledgement.
            assert r.status_code == 202, (rid, r.status_code, r.text)
            body = r.json()
            assert body["requestId"] == rid and body["duplicate"] is False, body
            acks[rid] = Ack(sid, body["seq"], text_of(rid))
            state["acked"] += 1
            if state["acked"] == kill_after and not state["killed"]:
                serve.proc.send_signal(signal.SIGKILL)  # no await between the count and the kill
                state["killed"] = True
            if state["killed"]:
                return

    async with trio.open_nursery() as nursery:
        for worker in range(CLIENTS):
            nursery.start_soon(client, worker)
    with trio.fail_after(10):
        code = await serve.proc.wait()
    assert code == -signal.SIGKILL, code
    return state["acked"]


async def decode(cwd: Path) -> list[dict[str, Any]]:
    out = await run_lens(cwd, "log", "decode", "--data", "data")
    return [json.loads(line) for line in out.stdout.splitlines()]


def integrity(cwd: Path) -> list[tuple]:
    conn = apsw.Connection(str(cwd / "data" / "events.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()


async def check_log_after_kill(cwd: Path, acks: dict[str, Ack]) -> int:
    """With the daemon down: the log verifies, is intact, gap-free and holds every acknowledged
    input with its seq. Returns the last seq."""
    verify = await run_lens(cwd, "log", "verify", "--data", "data", check=False)
    assert verify.returncode == 0, (verify.stdout, verify.stderr)
    assert integrity(cwd) == [("ok",)]
    events = await decode(cwd)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "the seqs have a gap"
    submitted = {(e["session_id"], e["request_id"]): e for e in events if e["kind"] == "input.submitted"}
    missing = [rid for rid, a in acks.items() if (a.session, rid) not in submitted]
    assert not missing, f"{len(missing)} acknowledged input(s) lost, e.g. {missing[:5]}"
    for rid, a in acks.items():
        e = submitted[(a.session, rid)]
        assert e["seq"] == a.seq, (rid, e["seq"], a.seq)
        assert [p["text"] for p in e["body"]["content"]] == [a.text], e
    return seqs[-1]


async def check_duplicates(d: Daemon, token: str, acks: dict[str, Ack]) -> None:
    """Every acknowledged request id, submitted again, is a duplicate answered with its seq."""
    todo = list(acks.items())

    async def client() -> None:
        while todo:
            rid, a = todo.pop()
            r = await d.post(f"/sessions/{a.session}/inputs", token, {"requestId": rid, "content": a.text})
            assert r.status_code == 202, (rid, r.text)
            assert r.json() == {"requestId": rid, "seq": a.seq, "duplicate": True}, (rid, a, r.json())

    async with trio.open_nursery() as nursery:
        for _ in range(CLIENTS):
            nursery.start_soon(client)


async def test_sigkill_under_concurrent_inputs_loses_no_acknowledged_input(tmp_path: Path):
    rng = random.Random(SEED)
    cwd = tmp_path
    acks: dict[str, Ack] = {}
    token, sids = "", []
    for round_no in range(ROUNDS):
        async with serving(cwd, stderr_name=f"serve-{round_no}.err", timeout=10) as (serve, d):
            if round_no == 0:
                token = await d.pair("kill9-client", strong=True)
                project = await d.project(token, "p")
                sids = [(await d.session(token, project["id"]))["id"] for _ in range(SESSIONS)]
            else:
                await check_duplicates(d, token, acks)
            acked = await submit_until_killed(d, token, sids, serve, round_no, rng.randint(*KILL_AFTER), acks)
            assert acked >= KILL_AFTER[0]
        await check_log_after_kill(cwd, acks)

    # The last restart: still every acknowledged input, and the daemon works through the queue.
    async with serving(cwd, stderr_name="serve-last.err", timeout=10) as (serve, d):
        await check_duplicates(d, token, acks)
        for sid in sids:
            await d.wait_idle(token, sid, timeout=SETTLE)
        await projections_caught_up(d)
        assert await serve.terminate() == 0, (cwd / "serve-last.err").read_text()[-2000:]

    # Every input that reached the log (acknowledged or not) was answered, once, by its own task.
    events = await decode(cwd)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    inputs = {(e["session_id"], e["request_id"]): e for e in events if e["kind"] == "input.submitted"}
    assert {(a.session, rid) for rid, a in acks.items()} <= set(inputs)
    tasks: dict[tuple[str, str], list[dict[str, Any]]] = {}
    task_of: dict[tuple[str, str], tuple[str, str]] = {}
    for e in events:
        if e["task_id"] is not None:
            tasks.setdefault((e["session_id"], e["task_id"]), []).append(e)
        if e["kind"] == "task.started":
            key = (e["session_id"], e["body"]["input_request_id"])
            assert key not in task_of, f"input {key} started twice"
            task_of[key] = (e["session_id"], e["task_id"])
    for key, submitted in inputs.items():
        assert key in task_of, f"input {key} never started"
        run = tasks[task_of[key]]
        text = submitted["body"]["content"][0]["text"]
        answers = [e["body"]["text"] for e in run if e["kind"] == "model.responded"]
        assert answers == [echo_of(text)], (key, [e["kind"] for e in run])
        assert run[-1]["kind"] == "task.finished" and run[-1]["body"]["status"] == "completed", run[-1]

    # What the daemon kept up to date incrementally is exactly what a rebuild from the log makes.
    incremental = projection_dump(cwd / "data")
    rebuilt = await run_lens(cwd, "log", "rebuild", "--data", "data")
    assert rebuilt.stdout.endswith(f"from {len(events)} event(s)\n"), rebuilt.stdout
    assert projection_dump(cwd / "data") == incremental
