"""F-ACT-4, §10 by property: ``lens serve`` or its executor SIGKILLed at a generated point of a generated script.

Each example starts a real ``lens serve`` process (its own working directory, a config file with
a ``faux`` provider whose script the example builds, a local executor child for the project's
workspace) and drives it through a generated list of steps over HTTP: inputs whose scripted
answers call tools (``edit_file`` creating a file, ``run_command`` and a background ``job``
appending a line of their own to a file, ``read_file``, loading a workspace skill, ``ask_user``),
plain inputs and steers queued behind them, answers to questions (or one left open), a manual
compaction and a fork from an event of the session (with an input of its own). An SSE subscriber
counts the log's events; at the generated count N the daemon gets SIGKILL (the kill point is a
count of committed events, never a time). Or the kill point is drawn the second way: the start of
the k-th ``cmd`` or ``job`` step's command (the ``tool.started`` of its ``run_command`` call or its
``job.started``), then D ms (0 to 1000), so that the kill lands while that command runs: it sleeps
ten seconds, far past the example's end (the example's other commands at least 300 ms).
In a drawn share of the examples the executor child is
SIGKILLed at that point instead: the daemon runs on, must bring the session to rest by itself
through the rest of the script (the next call spawns another executor), and is SIGKILLed when the
script ends. With the daemon down the log must verify, be intact and gap-free and hold every
acknowledged input; the daemon is then started again on the same data directory and must bring
every session to ``idle`` or ``awaiting_answer`` by itself (questions are then answered until
each is idle), with:

* every acknowledged input there once (a repeated submission is a duplicate with its seq);
* every ``tool.started`` ended by one ``tool.finished`` (ok, error, interrupted, skipped);
* no side effect of a call that is not replay-safe happening twice: every line a command or a job
  appends names its step, and appears at most once (a replay-safe ``edit_file`` create ends ok,
  after the daemon's restart or, its executor killed, on the executor spawned next);
* every ``model.requested`` answered, failed or superseded, every task finished;
* a skill's instructions appended at most once per agent;
* ``lens log rebuild`` producing exactly the projections the daemon kept.

Each command and job a step starts writes its name to ``started.txt`` first and may then sleep (a
drawn 0, 50 or 300 ms), so that kill points land inside running ones; a command or job whose name
is in ``started.txt`` but not in ``side.txt`` when the kill is sent was running then. Such a one,
killed with its executor, is never reported ok (a command ends ``error``, a job not ``exited``),
and no command starts twice. The command a kill point of the second way lands in never finishes
(its line never reaches ``side.txt``), and is reported as the kill says: its call ``interrupted``
or its job ``lost`` after the daemon's restart, ``error`` ``EXECUTOR_UNAVAILABLE`` or ``crashed``
with the executor as victim. Once the killed daemon is down, and again once the restarted one has
stopped, no process runs in the example's directory (bounded wait): nothing of a killed run goes
on unowned. An input submitted after a "wait" must come after every job started before it has
ended.

Examples are few and derandomized (nine fixed ones, one drawn: about a minute on two cores;
``LENS_KILL9_EXAMPLES`` draws more, ``LENS_KILL9_SEED`` draws others, ``LENS_KILL9_RECORD`` names a
file each example appends where its kill fell to).
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import httpx2
import pytest
import trio
from hypothesis import HealthCheck, assume, example, given, seed, settings
from hypothesis import strategies as st

from ..procfs import executor_of, running_in
from .conftest import (Daemon, ServeProcess, SseStream, projection_dump, projections_caught_up, run_lens, serving,
                       wait_until)

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("LENS_KILL9_EXAMPLES", 1))  # drawn, besides the fixed examples below
SEED = os.environ.get("LENS_KILL9_SEED")  # another seed draws other examples (unset: derandomized)
RECORD = os.environ.get("LENS_KILL9_RECORD")  # a file each example appends where its kill fell to
SETTLE = 30.0  # seconds: bound on a restarted daemon bringing its sessions to rest

SKILL = "---\nname: demo\ndescription: a demo skill\n---\nDemo instructions: be brief.\n"
ASK = {"questions": [{"id": "colour", "text": "Colour?", "options": [{"id": "red", "label": "Red"},
                                                                       {"id": "blue", "label": "Blue"}]}]}

# The kinds of step a script is made of. "edit", "cmd", "job", "read", "skill", "ask" and "plain"
# submit an input (queued behind the running one as a follow-up; "steer" a plain one as a steer;
# "hold" asks a question the script leaves open, so no later question is answered either); "wait"
# waits until the session rests (answering an open question first); "compact" and "fork" wait
# too, then act.
INPUT_STEPS = ("edit", "cmd", "job", "read", "skill", "ask", "hold", "plain", "steer")
VICTIMS = ("daemon", "executor")  # what the kill point SIGKILLs
STEPS = st.lists(st.sampled_from([*INPUT_STEPS, "wait", "compact", "fork"]), min_size=2, max_size=8)
# How long a step's command or job runs before it appends its line, in ms (drawn per step; a step
# past the list's end takes none): long enough that a kill point lands inside a running one.
DELAYS = st.lists(st.sampled_from((0, 50, 300)), max_size=8)
SLOW = ["cmd", "wait", "job", "wait", "cmd", "edit"]  # the fixed examples that kill inside a command or a job
STARTED_MS = 300  # a command's least delay when the kill point is drawn at a command's start
# The delay of the command such a point kills inside: far longer than any kill, reap or restart
# takes, so that its line in side.txt can only mean it ran on after the kill. It costs nothing:
# a command killed inside its run never sleeps it out (and one that did would fail the example).
KILLED_MS = 10_000
AFTER_MS = (0, 30, 100, 1000)  # D: early in the killed command's run, or a second into it
GONE = 10.0  # seconds: bound on what the killed run left in the workspace ending by itself


@dataclass(frozen=True)
class AtStart:
    """The second way to draw a kill point: D = ``after_ms`` ms after the start of the k-th ``cmd``
    or ``job`` step's command (k counted from 0, modulo the script's commands and jobs)."""

    k: int
    after_ms: int


# The kill point: a share of the script's estimated events (an int, see kill_point), or AtStart.
POINTS = st.one_of(st.integers(min_value=0, max_value=100),
                   st.builds(AtStart, k=st.integers(min_value=0, max_value=3), after_ms=st.sampled_from(AFTER_MS)))


# Roughly how many events each step writes (a tool round is about eight): the kill point is drawn
# as a share of the script's estimate, so it lands inside the activity, not after it.
EVENTS_OF = {"edit": 9, "cmd": 9, "job": 14, "read": 9, "skill": 10, "ask": 11, "hold": 8, "plain": 6, "steer": 6,
             "wait": 0, "compact": 1, "fork": 7}
ACTIVITY_START = 3  # project, session, first input


def kill_point(steps: list[str], share: int) -> int:
    """The count of events after which the daemon is killed: ``share`` percent of the estimate."""
    return ACTIVITY_START + share * sum(EVENTS_OF[k] for k in steps) // 100


def marker(kind: str, n: int) -> str:
    """The word in an input that makes the faux model call the step's tool (never in a result)."""
    return f"zq{kind}{n}zq"


def command_of(kind: str, n: int, delays: list[int]) -> str:
    """Step ``n``'s command: it writes its name to ``started.txt``, then appends its own line to
    ``side.txt``, after the step's delay if it has one."""
    ms = delays[n] if n < len(delays) else 0
    return f"echo {kind}{n} >> started.txt; {f'sleep {ms / 1000}; ' if ms else ''}echo {kind}{n} >> side.txt"


def target_of(steps: list[str], at: AtStart) -> str | None:
    """The name of the command an ``AtStart`` point kills inside (None: the script has none)."""
    names = [f"{kind}{n}" for n, kind in enumerate(steps) if kind in ("cmd", "job")]
    return names[at.k % len(names)] if names else None


def started_command(kind: str | None, body: dict[str, Any]) -> str | None:
    """The command an event starts (a ``run_command`` call's start, or a job's), else None."""
    if kind == "job.started":
        return body["command"]
    if kind == "tool.started" and body.get("name") == "run_command":
        return body["arguments"]  # (JSON text holding the command)
    return None


def appends(name: str) -> str:
    """The part of a step's command that appends its line to ``side.txt`` (see command_of)."""
    return f"echo {name} >> side.txt"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def script_for(steps: list[str], delays: list[int]) -> list[dict[str, Any]]:
    """The faux script: one turn per tool-calling input, keyed by its marker."""
    turns = []
    for n, kind in enumerate(steps):
        w = marker(kind, n)
        call: dict[str, Any] | None = None
        if kind == "edit":
            call = {"name": "edit_file", "arguments": {"path": f"e{n}.txt", "mode": "create", "content": f"edit {n}\n"}}
        elif kind == "cmd":
            call = {"name": "run_command", "arguments": {"command": command_of(kind, n, delays)}}
        elif kind == "job":
            call = {"name": "job", "arguments": {"action": "start", "command": command_of(kind, n, delays)}}
        elif kind == "read":
            call = {"name": "read_file", "arguments": {"path": "notes.txt"}}
        elif kind == "skill":
            call = {"name": "skill", "arguments": {"name": "demo"}}
        elif kind in ("ask", "hold"):
            call = {"name": "ask_user", "arguments": ASK}
        if call is not None:
            turns.append({"when": w, "toolCalls": [call]})
    return turns


@dataclass
class Run:
    cwd: Path
    steps: list[str]
    kill_at: int  # a count of events (with ``at_start``: set to the count read when the kill is sent)
    victim: str = "daemon"  # what is SIGKILLed at the kill point (one of VICTIMS)
    at_start: AtStart | None = None  # the kill point drawn the second way
    target: str | None = None  # with at_start: the step's command it kills inside (see target_of)
    workspace: Path | None = None
    running: list[str] = field(default_factory=list)  # commands started, not ended, as the kill was sent
    token: str = ""
    sessions: list[str] = field(default_factory=list)
    acks: dict[tuple[str, str], int] = field(default_factory=dict)  # (session, request id) -> seq
    killed: bool = False  # the daemon was
    holding: bool = False  # a "hold" step was submitted: questions stay open
    counted: int = 0
    fired: bool = False  # the kill point was reached (else the daemon was killed as the script ended)
    rested: bool = False  # the last step waited until the session was idle
    after_rest: set[tuple[str, str]] = field(default_factory=set)  # (session, request id) submitted then


async def resting(d: Daemon, token: str, sid: str) -> dict[str, Any] | None:
    """The view once the session waits for nothing but a user: idle with nothing queued and no
    job running, or awaiting an answer (inputs may queue behind an open question, jobs run on).

    One view is one state of the session: its status, queue and jobs read together. A job's end
    and its report input are one append, so an idle view with its jobs ended has nothing left to
    do; and every input the script submitted before is in it (placed, run, its job started)."""
    v = await d.view(token, sid)
    idle = v["status"] == "idle" and not v["queued"] and all(j["status"] != "running" for j in v["jobs"])
    return v if idle or v["status"] == "awaiting_answer" else None


async def settle(d: Daemon, token: str, sid: str, timeout: float, answer: bool = True) -> dict[str, Any]:
    """Wait until ``sid`` rests, answering each question it asks (with ``answer``; else returning
    at the first one); returns its view."""
    while True:
        v = await wait_until(lambda: resting(d, token, sid), timeout=timeout, what=f"session {sid} resting")
        if v["status"] != "awaiting_answer" or not answer:
            return v
        qid = v["questions"][0]["questionId"]
        r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["blue"]})
        assert r.status_code == 200, r.text


async def drive(d: Daemon, run: Run, sid: str) -> None:
    """Submit the steps of ``run`` to ``sid`` in order (until the kill stops the daemon)."""
    token = run.token

    async def submit(session: str, rid: str, text: str, when_busy: str = "followUp") -> None:
        r = await d.post(f"/sessions/{session}/inputs", token, {"requestId": rid, "content": text,
                                                                 "whenBusy": when_busy})
        assert r.status_code == 202, r.text
        run.acks[(session, rid)] = r.json()["seq"]
        if session == sid and run.rested:
            run.after_rest.add((session, rid))
        run.rested = False

    async def rest() -> dict[str, Any]:
        v = await settle(d, token, sid, 20, answer=not run.holding)
        run.rested = v["status"] == "idle"
        return v

    for n, kind in enumerate(run.steps):
        if kind in INPUT_STEPS:
            if kind in ("plain", "steer"):
                await submit(sid, f"r{n}", f"{kind} note {n}", "steer" if kind == "steer" else "followUp")
            else:
                await submit(sid, f"r{n}", f"step {n}: {marker(kind, n)}")
                run.holding = run.holding or kind == "hold"
        elif kind == "wait":
            await rest()
        elif kind == "compact":
            await rest()
            r = await d.post(f"/sessions/{sid}/compact", token)
            assert r.status_code in (200, 409), r.text
        elif kind == "fork":
            await rest()
            seq = (await d.get("/health")).json()["lastSeq"]
            events = await d.events(token, sid)
            r = await d.post(f"/sessions/{sid}/fork", token, {"seq": events[len(events) // 2]["seq"]})
            assert r.status_code == 201, r.text
            fork = r.json()["id"]
            run.sessions.append(fork)
            await submit(fork, f"f{n}", f"fork input {n} after {seq}")
    await rest()


async def count_and_kill(d: Daemon, run: Run, serve: ServeProcess, stream: SseStream) -> None:
    assert serve.proc is not None and run.workspace is not None
    while True:
        if run.at_start is None and run.counted >= run.kill_at:
            break
        msg = await stream.next_event(timeout=30)
        if msg is None:
            return
        if msg.id is not None:
            run.counted += 1
            if run.target is not None and appends(run.target) in (
                    started_command(msg.event, msg.json().get("body", {})) or ""):
                break
    if run.at_start is not None:
        if run.target is None:
            return  # no command to start: killed as the script ends
        await trio.sleep(run.at_start.after_ms / 1000)  # the drawn D: a time by design, not an ordering
        run.kill_at = run.counted
    run.fired = True
    if run.victim == "daemon":
        serve.proc.send_signal(signal.SIGKILL)
        run.killed = True
    elif (pid := executor_of(serve.proc.pid)) is not None:  # (none yet: no call has needed one)
        os.kill(pid, signal.SIGKILL)
    else:
        return
    ended = set(lines(run.workspace / "side.txt"))
    run.running = [name for name in lines(run.workspace / "started.txt") if name not in ended]


async def decode(cwd: Path) -> list[dict[str, Any]]:
    out = await run_lens(cwd, "log", "decode", "--data", "data")
    return [json.loads(line) for line in out.stdout.splitlines()]


def integrity(path: Path) -> list[tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()


async def check_down(run: Run) -> None:
    """With the daemon down: verify, integrity, gap-free seqs, every acknowledged input there."""
    cwd = run.cwd
    verify = await run_lens(cwd, "log", "verify", "--data", "data", check=False)
    assert verify.returncode == 0, (verify.stdout, verify.stderr)
    assert integrity(cwd / "data" / "events.db") == [("ok",)]
    events = await decode(cwd)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "the seqs have a gap"
    submitted = Counter((e["session_id"], e["request_id"]) for e in events if e["kind"] == "input.submitted")
    for key, seq in run.acks.items():
        assert submitted[key] == 1, (key, submitted[key])


def check_log(run: Run, events: list[dict[str, Any]], workspace: Path) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "the seqs have a gap"
    by_seq = {e["seq"]: e for e in events}
    submitted = Counter((e["session_id"], e["request_id"]) for e in events if e["kind"] == "input.submitted")
    for key, seq in run.acks.items():
        assert submitted[key] == 1, (key, submitted[key])
        assert by_seq[seq]["kind"] == "input.submitted" and by_seq[seq]["request_id"] == key[1]
    # an input submitted after a wait came after every job started before it had ended
    for (sid, rid), seq in ((key, run.acks[key]) for key in run.after_rest):
        before = [e for e in events[:seq] if e["session_id"] == sid]
        started = {e["body"]["job_id"] for e in before if e["kind"] == "job.started"}
        ended = {e["body"]["job_id"] for e in before if e["kind"] == "job.finished"}
        assert started <= ended, ("a wait returned while a job ran", rid, started - ended)
    for sid in {e["session_id"] for e in events if e["session_id"]}:
        mine = [e for e in events if e["session_id"] == sid]
        # every started call ends once (ok, error, interrupted, skipped)
        started = Counter((e["agent_id"], e["body"]["call_id"]) for e in mine if e["kind"] == "tool.started")
        ended = Counter((e["agent_id"], e["body"]["call_id"]) for e in mine if e["kind"] == "tool.finished")
        for call, count in started.items():
            assert count == 1 or all(e["body"]["replay_safe"] for e in mine if e["kind"] == "tool.started"
                                     and e["body"]["call_id"] == call[1]), ("started twice", call)
            assert ended[call] == 1, ("call ended", ended[call], "times", call, [e["kind"] for e in mine])
        # every model request answered, failed or asked again (a later attempt)
        for i, e in enumerate(mine):
            if e["kind"] == "model.requested":
                nxt = next((x for x in mine[i + 1:] if x["agent_id"] == e["agent_id"] and x["kind"] in (
                    "model.requested", "model.responded", "model.failed", "task.finished")), None)
                assert nxt is not None and nxt["kind"] != "task.finished" or (
                    nxt is not None and nxt["body"]["status"] != "completed"), ("request left open", e)
        # every task finished; every job ended
        kinds = Counter(e["kind"] for e in mine)
        assert kinds["task.started"] == kinds["task.finished"], kinds
        assert kinds["job.started"] == kinds["job.finished"], kinds
        # a skill's instructions appended at most once per agent
        loads = Counter((e["agent_id"], e["body"].get("name")) for e in mine if e["kind"] == "skill.loaded")
        assert all(c == 1 for c in loads.values()), loads
    # what commands and jobs appended: each call's line at most once; none started twice
    ended = Counter(lines(workspace / "side.txt"))
    assert all(c == 1 for c in ended.values()), ended
    started = Counter(lines(workspace / "started.txt"))
    assert all(c == 1 for c in started.values()), ("a command started twice", started)
    # a command or job that ran as its executor was killed is not reported ok
    if run.victim == "executor":
        for name in run.running:
            end = end_of(events, name)
            assert end["status"] != ("ok" if name.startswith("cmd") else "exited"), (
                "a command or job killed with its executor reported ok", name, end)
    # an edit_file create never failed for its own earlier write, and wrote what it was given: one
    # the executor's kill cut ran once more on the next executor (and says so), and ends ok like
    # one cut by the daemon's kill; only kills of the executor while it was being started for
    # the edit (before it took the call), of the child started once more in its place too, leave
    # EXECUTOR_UNAVAILABLE ("did not start"), the file then absent
    for e in events:
        if e["kind"] == "tool.finished" and e["body"]["name"] == "edit_file":
            unstarted = (run.victim == "executor" and e["body"].get("error_code") == "EXECUTOR_UNAVAILABLE"
                         and "did not start" in e["body"]["content"][0]["text"])
            assert e["body"]["status"] in ("ok", "interrupted", "skipped") or unstarted, e["body"]
            assert e["body"].get("rerun_after") in (None, "EXECUTOR_UNAVAILABLE"), e["body"]
            if e["body"]["status"] == "ok":
                n = int(e["body"]["structured_content"]["path"][1:-4])
                assert (workspace / f"e{n}.txt").read_text() == f"edit {n}\n"
    for path in workspace.glob("e*.txt"):
        assert path.read_text() == f"edit {path.name[1:-4]}\n", path.name
    if run.at_start is not None and run.fired:
        check_killed_inside(run, events, workspace)


def end_of(events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """How step ``name``'s command was reported ended: its call's ``tool.finished`` body (a
    ``cmd`` step), or its job's ``job.finished`` body (a ``job`` step)."""
    echo = appends(name)
    if name.startswith("cmd"):
        call = next(e["body"]["call_id"] for e in events if e["kind"] == "tool.started"
                    and e["body"]["name"] == "run_command" and echo in e["body"]["arguments"])
        return next(e["body"] for e in events if e["kind"] == "tool.finished" and e["body"]["call_id"] == call)
    job = next(e["body"]["job_id"] for e in events if e["kind"] == "job.started" and echo in e["body"]["command"])
    return next(e["body"] for e in events if e["kind"] == "job.finished" and e["body"]["job_id"] == job)


def check_killed_inside(run: Run, events: list[dict[str, Any]], workspace: Path) -> None:
    """The command an ``AtStart`` point killed inside (it runs KILLED_MS, far past the example's
    end) never finished, whatever the victim; and it is reported as the victim's kill says: a
    ``run_command`` call cut by the daemon's kill ends ``interrupted`` at the restart, by its
    executor's ``error`` ``EXECUTOR_UNAVAILABLE``; a job ``lost`` at the restart, or ``crashed``."""
    name = run.target
    assert name is not None
    assert name not in lines(workspace / "side.txt"), ("a command killed inside its run finished", name)
    end = end_of(events, name)
    if name.startswith("cmd"):
        if run.victim == "daemon":
            assert end["status"] == "interrupted", ("a command cut by the daemon's kill", name, end)
        else:
            assert (end["status"], end.get("error_code")) == ("error", "EXECUTOR_UNAVAILABLE"), (
                "a command cut by its executor's kill", name, end)
    else:
        want = "lost" if run.victim == "daemon" else "crashed"
        assert end["status"] == want, (f"a job cut by the {run.victim}'s kill", name, end)


async def nothing_runs_in(directory: Path, what: str) -> None:
    """Wait (bounded) until no process runs in ``directory``: none of the example's is left."""
    async def gone() -> bool:
        return not running_in(directory)
    try:
        await wait_until(gone, timeout=GONE, what=what)
    except AssertionError as exc:
        raise AssertionError(exc.args[0], [(p.pid, p.argv) for p in running_in(directory)]) from None


def kill_place(run: Run, events: list[dict[str, Any]]) -> str:
    """Where the kill point fell: inside a ``command`` or a ``job`` (started at or before the
    counted event, ended after it), ``elsewhere``, or ``after the script`` (never reached)."""
    if not run.fired:
        return "after the script"
    ends = {(e["kind"], e["body"].get("call_id") or e["body"].get("job_id")): e["seq"] for e in events
            if e["kind"] in ("tool.finished", "job.finished")}
    for e in events[:run.kill_at]:
        if e["kind"] == "tool.started" and e["body"]["name"] == "run_command":
            if ends.get(("tool.finished", e["body"]["call_id"]), 0) > run.kill_at:
                return "command"
        elif e["kind"] == "job.started" and ends.get(("job.finished", e["body"]["job_id"]), 0) > run.kill_at:
            return "job"
    return "elsewhere"


async def one_example(tmp: Path, steps: list[str], delays: list[int], point: int | AtStart, victim: str) -> None:
    cwd = tmp
    target = target_of(steps, point) if isinstance(point, AtStart) else None
    if isinstance(point, AtStart):  # every command runs long enough for a kill D ms after its start
        delays = [KILLED_MS if f"{kind}{n}" == target else max(delays[n] if n < len(delays) else 0, STARTED_MS)
                  for n, kind in enumerate(steps)]
    (cwd / "config").mkdir(parents=True)
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": script_for(steps, delays)}],
              "defaultModel": "faux/faux-1"}
    (cwd / "config" / "lens.jsonc").write_text(json.dumps(config))
    ws = cwd / "workspaces" / "p"
    (ws / "skills" / "demo").mkdir(parents=True)
    (ws / "skills" / "demo" / "SKILL.md").write_text(SKILL)
    (ws / "notes.txt").write_text("some notes\n")
    run = Run(cwd, steps, 0 if isinstance(point, AtStart) else kill_point(steps, point), victim,
              point if isinstance(point, AtStart) else None, target, ws)

    async with serving(cwd, stderr_name="serve-0.err", timeout=20) as (serve, d):
        run.token = await d.pair("kill9-props", strong=True)
        r = await d.post("/projects", run.token, {"name": "p", "workspace": str(ws)})
        assert r.status_code == 201, r.text
        sid = (await d.session(run.token, r.json()["id"]))["id"]
        run.sessions.append(sid)
        try:
            async with d.sse(run.token, last_event_id=0) as stream:
                async with trio.open_nursery() as inner:
                    inner.start_soon(count_and_kill, d, run, serve, stream)
                    try:
                        await drive(d, run, sid)
                    except (httpx2.TransportError, AssertionError, trio.TooSlowError):
                        if not run.killed:
                            raise
                    if not run.killed:  # the script ended before the count: kill now
                        serve.proc.send_signal(signal.SIGKILL)
                        run.killed = True
                    inner.cancel_scope.cancel()
        except httpx2.TransportError:
            assert run.killed
        with trio.fail_after(10):
            code = await serve.proc.wait()
        assert code == -signal.SIGKILL, (code, (cwd / "serve-0.err").read_text()[-2000:])

    await check_down(run)
    # the killed daemon's executor ends itself and its commands (its lifeline closed), so nothing
    # of that run goes on in the workspace, not even until a restart
    await nothing_runs_in(cwd, "the killed daemon's run ending")

    async with serving(cwd, stderr_name="serve-1.err", timeout=20) as (serve, d):
        for (session, rid), seq in run.acks.items():  # acknowledged: a duplicate, its seq
            r = await d.post(f"/sessions/{session}/inputs", run.token, {"requestId": rid, "content": "again"})
            assert r.status_code == 202, r.text
            assert r.json() == {"requestId": rid, "seq": seq, "duplicate": True}, r.text
        for session in run.sessions:  # each rests by itself; answered, each ends idle
            await wait_until(lambda: resting(d, run.token, session), timeout=SETTLE,
                             what=f"session {session} resting after the restart")
            await settle(d, run.token, session, SETTLE)
        await projections_caught_up(d)
        assert await serve.terminate() == 0, (cwd / "serve-1.err").read_text()[-2000:]
    await nothing_runs_in(cwd, "the restarted daemon's run ending")

    events = await decode(cwd)
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(json.dumps({"steps": steps, "delays": delays, "victim": victim, "point": repr(point),
                                "killAt": run.kill_at, "place": kill_place(run, events),
                                "running": run.running, "target": run.target,
                                "finished": sorted(set(run.running) & set(lines(ws / "side.txt")))}) + "\n")
    check_log(run, events, ws)
    assert integrity(cwd / "data" / "events.db") == [("ok",)]
    assert integrity(cwd / "data" / "projections.db") == [("ok",)]
    verify = await run_lens(cwd, "log", "verify", "--data", "data", check=False)
    assert verify.returncode == 0, (verify.stdout, verify.stderr)
    incremental = projection_dump(cwd / "data")
    rebuilt = await run_lens(cwd, "log", "rebuild", "--data", "data")
    assert rebuilt.stdout.endswith(f"from {len(events)} event(s)\n"), rebuilt.stdout
    assert projection_dump(cwd / "data") == incremental


async def test_sigkill_at_generated_points_of_generated_activity(tmp_path: Path) -> None:
    token = trio.lowlevel.current_trio_token()
    counter = iter(range(10_000))

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(steps=STEPS, delays=DELAYS, point=POINTS, victim=st.sampled_from(VICTIMS))
    # always: every kind of step, killed inside the activity, and killed with a question open (an
    # input queued behind it) after a compaction, a fork and a job; each victim killed inside a
    # running command (at its tool.started) and inside a running job (at its call's end), the
    # session going on with a command and an edit; and the executor as an edit runs (found: the
    # cut edit was EXECUTOR_UNAVAILABLE; it now runs again on the next one); each victim killed
    # 30 ms after a command's start and 100 ms after a job's (the kill point's second way)
    @example(steps=["cmd", "job", "wait", "cmd"], delays=[], point=AtStart(0, 30), victim="executor")
    @example(steps=["cmd", "job", "wait", "cmd"], delays=[], point=AtStart(1, 100), victim="daemon")
    @example(steps=SLOW, delays=[300, 0, 300], point=13, victim="daemon")
    @example(steps=SLOW, delays=[300, 0, 300], point=13, victim="executor")
    @example(steps=SLOW, delays=[300, 0, 300], point=42, victim="daemon")
    @example(steps=SLOW, delays=[300, 0, 300], point=42, victim="executor")
    @example(steps=["steer", "edit"], delays=[], point=47, victim="executor")
    @example(steps=["ask", "job", "edit", "cmd", "steer", "skill", "read"], delays=[], point=35, victim="daemon")
    @example(steps=["edit", "wait", "compact", "fork", "job", "hold", "plain"], delays=[], point=100, victim="daemon")
    def prop(steps: list[str], delays: list[int], point: int | AtStart, victim: str) -> None:
        assume(not isinstance(point, AtStart) or any(k in ("cmd", "job") for k in steps))  # a command to kill in
        tmp = tmp_path / f"ex{next(counter)}"
        tmp.mkdir()
        trio.from_thread.run(one_example, tmp, steps, delays, point, victim, trio_token=token)

    if SEED is not None:
        prop = seed(int(SEED))(prop)
    await trio.to_thread.run_sync(prop)
