"""F-ACT-3, F-ACT-4, F-ACT-1 under concurrent clients: several HTTP clients drive one session,
and two sessions of one project, at once over seeded random schedules — `POST inputs` (followUp
and steer, fresh and repeated request ids, repeats sent by several clients at the same moment),
`withdraw` and `steer` of ids that are queued, placed, settled or unknown, `abort`, and the view —
and every answer is then checked against the log.

The checks never depend on the interleaving. Each call is bracketed by two positions of the
session's log: ``l0``, the last event seen before it was sent (a lower bound of the log then), and
``l1``, the last event read after its answer (an upper bound of the log when it was answered). An
answer is right when the log says it at some position in ``[l0, l1]``. The random pauses between
calls only vary the interleavings; nothing waits on them.

The run takes several model rounds: ``STEP-A`` reads ``b.txt`` (which says ``STEP-B``), that
reads ``c.txt`` (``STEP-C``), which is answered in streamed chunks; a real executor serves the
reads. ``HOLD`` asks the user a question, which holds the run while inputs queue behind it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from events.store import open_store

from .conftest import LIMIT, Daemon, DaemonFactory, stop_daemon, wait_until

ASK = {"questions": [{"id": "go", "text": "Go on?", "options": [{"id": "yes", "label": "Yes"}]}]}
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "STEP-C", "chunks": ["All ", "steps ", "done."], "chunkDelayMs": 5},
    {"when": "STEP-B", "toolCalls": [{"name": "read_file", "arguments": {"path": "c.txt"}}]},
    {"when": "STEP-A", "delayMs": 5, "toolCalls": [
        {"name": "read_file", "arguments": {"path": "b.txt"}},
        {"name": "todo", "arguments": {"items": [{"id": "1", "text": "read c.txt", "status": "in_progress"}]}}]},
    {"when": "HOLD", "toolCalls": [{"name": "ask_user", "arguments": ASK}]},
]}], "defaultModel": "faux/faux-1"}
REVIEW = "---\nname: review\ndescription: Review a change\n---\nRead the diff first.\n"
SETTLE = 120.0  # seconds: a whole schedule's queue drained on two loaded cores
PAUSE = 0.03  # seconds: the longest pause between two calls of a client
VIEW_KEYS = ("items", "queued", "status", "todos", "usage")


# --------------------------------------------------------------------------- the log, folded


@dataclass
class Log:
    """One session's events as the events route gives them, and what they say about its inputs."""

    events: list[dict[str, Any]]
    submitted: dict[str, dict[str, Any]] = field(default_factory=dict)
    placed: dict[str, dict[str, Any]] = field(default_factory=dict)
    withdrawn: dict[str, dict[str, Any]] = field(default_factory=dict)
    task_end: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for e in self.events:
            kind, body = e["kind"], e["body"]
            if kind == "input.submitted":
                assert e["request_id"] not in self.submitted, f"two input.submitted for {e['request_id']}"
                self.submitted[e["request_id"]] = e
            elif kind == "input.placed":
                rid = body["input_request_id"]
                assert rid not in self.placed, f"{rid} placed twice"
                assert rid not in self.withdrawn, f"{rid} placed after it was withdrawn"
                self.placed[rid] = e
            elif kind == "input.withdrawn":
                rid = body["input_request_id"]
                assert rid not in self.withdrawn, f"{rid} withdrawn twice"
                assert rid not in self.placed, f"{rid} withdrawn after it was placed"
                self.withdrawn[rid] = e
            elif kind == "task.finished" and e["agent_id"] == "main":
                self.task_end[e["task_id"]] = e["seq"]

    def seq(self, table: dict[str, dict[str, Any]], rid: str) -> int | None:
        e = table.get(rid)
        return e["seq"] if e is not None else None

    def states(self, l0: int, l1: int) -> list[tuple[list[tuple[str, str]], str | None, bool]]:
        """(queue as (requestId, whenBusy), running task, open question) at every position of the
        log from ``l0`` to ``l1``: the state after its last event up to ``l0``, then after each
        event up to ``l1``."""
        queue: list[list[str]] = []
        running: str | None = None
        questions: set[str] = set()
        out: list[tuple[list[tuple[str, str]], str | None, bool]] = []
        for e in [None, *self.events]:
            if e is not None:
                if e["seq"] > l1:
                    break
                kind, body = e["kind"], e["body"]
                if kind == "input.submitted":
                    queue.append([e["request_id"], body.get("when_busy", "followUp")])
                elif kind in ("input.placed", "input.withdrawn"):
                    queue = [q for q in queue if q[0] != body["input_request_id"]]
                elif kind == "input.requeued":
                    for q in queue:
                        if q[0] == body["input_request_id"]:
                            q[1] = body.get("when_busy", "steer")
                elif kind == "task.started" and e["agent_id"] == "main":
                    running = e["task_id"]
                elif kind == "task.finished" and e["agent_id"] == "main" and running == e["task_id"]:
                    running = None
                elif kind == "question.asked":
                    questions.add(body["question_id"])
                elif kind in ("question.answered", "question.cancelled"):
                    questions.discard(body["question_id"])
                if e["seq"] <= l0:
                    out.clear()  # (a later position up to l0 replaces it)
            out.append(([(q[0], q[1]) for q in queue], running, bool(questions)))
        return out

    def queued_at(self, l0: int, l1: int, rid: str) -> bool:
        """Whether ``rid`` was queued at some position in [l0, l1]."""
        return any(rid in dict(q) for q, _, _ in self.states(l0, l1))


def run_order(queue: list[tuple[str, str]], running: str | None) -> list[tuple[str, str]]:
    """The queue (submission order) as the view lists it, the next to run first: while a task runs
    the steers go in before the follow-ups; with none running the first input starts the next task
    and the steers follow it."""
    head = queue[:1] if running is None else []
    rest = queue[len(head):]
    return head + [q for q in rest if q[1] == "steer"] + [q for q in rest if q[1] != "steer"]


# --------------------------------------------------------------------------- clients


@dataclass
class Call:
    client: int
    op: str  # submit | withdraw | steer | abort | view | list
    sid: str
    rid: str | None
    l0: int
    l1: int = 0
    status: int | None = None  # None: no answer (the daemon stopped under it)
    body: Any = None


class Tracker:
    """The last event of each session (of ``project``) seen so far, read incrementally from the
    events route."""

    def __init__(self, project: str, sids: list[str]) -> None:
        self.project = project
        self.last = {sid: 0 for sid in sids}
        self.locks = {sid: trio.Lock() for sid in sids}

    async def refresh(self, http: httpx2.AsyncClient, token: str, sid: str) -> int:
        """Read past the last known event: an upper bound of the log as of this call's start."""
        async with self.locks[sid]:
            after = self.last[sid]
            while True:
                r = await http.get(f"/api/v1/sessions/{sid}/events", params={"after": after, "limit": 1000},
                                   headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200, r.text
                page = r.json()
                if not page["events"]:
                    break
                after = page["nextAfter"]
            self.last[sid] = max(self.last[sid], after)
            return after


async def call(http: httpx2.AsyncClient, token: str, tracker: Tracker, calls: list[Call], client: int, op: str,
               sid: str, rid: str | None = None, body: Any = None) -> Call:
    c = Call(client, op, sid, rid, tracker.last[sid])
    calls.append(c)
    path = {"submit": f"/sessions/{sid}/inputs", "withdraw": f"/sessions/{sid}/inputs/{rid}/withdraw",
            "steer": f"/sessions/{sid}/inputs/{rid}/steer", "abort": f"/sessions/{sid}/abort",
            "view": f"/sessions/{sid}", "list": f"/sessions?project={tracker.project}"}[op]
    headers = {"Authorization": f"Bearer {token}"}
    try:
        if op in ("view", "list"):
            r = await http.get("/api/v1" + path, headers=headers)
        else:
            r = await http.post("/api/v1" + path, json={} if body is None else body, headers=headers)
    except httpx2.TransportError:
        raise Stopped(c) from None  # the daemon stopped under the call: no answer
    if r.status_code == 503 and "stopping" in r.json()["error"]["message"]:
        raise Stopped(c)  # answered at the stop, with no answer of the session's: as a call cut off
    c.status, c.body = r.status_code, r.json()
    try:
        c.l1 = await tracker.refresh(http, token, sid)
    except httpx2.TransportError:
        raise Stopped(c) from None  # answered before the stop (l1 is then the log at the stop)
    return c


class Stopped(Exception):
    """The daemon stopped: the client's schedule ends here."""


@dataclass
class Schedule:
    """One seeded schedule: ``clients`` clients, ``steps`` calls each, over ``sids``."""

    seed: int
    sids: list[str]
    clients: int = 4
    steps: int = 12
    ops: tuple[str, ...] = ("submit", "submit", "submit", "burst", "withdraw", "withdraw", "steer", "steer",
                            "view", "list", "abort")
    contents: dict[str, tuple[str, str]] = field(default_factory=dict)  # rid -> (sid, text)
    whens: dict[str, str] = field(default_factory=dict)

    async def run(self, d: Daemon, token: str, tracker: Tracker, calls: list[Call]) -> None:
        rng = random.Random(self.seed)
        https = [httpx2.AsyncClient(base_url=d.url, timeout=LIMIT * 3) for _ in range(self.clients)]
        plans = [[self._plan(rng, i, n) for n in range(self.steps)] for i in range(self.clients)]
        pauses = [[rng.random() * PAUSE for _ in range(self.steps)] for _ in range(self.clients)]
        try:
            async with trio.open_nursery() as nursery:
                for i in range(self.clients):
                    nursery.start_soon(self._client, https, token, tracker, calls, i, plans[i], pauses[i])
        finally:
            for h in https:
                await h.aclose()

    def _plan(self, rng: random.Random, client: int, n: int) -> tuple[str, str, str | None]:
        op = rng.choice(self.ops)
        sid = rng.choice(self.sids)
        known = [rid for rid, (s, _) in self.contents.items() if s == sid]
        if op in ("submit", "burst"):
            if op == "submit" and known and rng.random() < 0.3:
                return "submit", sid, rng.choice(known)  # a repeat, later
            rid = f"s{self.seed}-c{client}-{n}"
            text = rng.choice(["STEP-A please", "plain note", "STEP-A again", "/skill:review STEP-A"]) + f" {rid}"
            self.contents[rid] = (sid, text)
            self.whens[rid] = rng.choice(["followUp", "followUp", "steer"])
            return op, sid, rid
        if op in ("withdraw", "steer"):
            known = [rid for rid in known if not rid.startswith("fixed-")]  # (these stay queued)
            if not known or rng.random() < 0.15:
                return op, sid, f"s{self.seed}-unknown-{client}-{n}"
            return op, sid, rng.choice(known)
        return op, sid, None

    async def _client(self, https: list[httpx2.AsyncClient], token: str, tracker: Tracker, calls: list[Call],
                      i: int, plan: list[tuple[str, str, str | None]], pauses: list[float]) -> None:
        try:
            await self._calls(https, token, tracker, calls, i, plan, pauses)
        except* Stopped:
            pass

    async def _calls(self, https: list[httpx2.AsyncClient], token: str, tracker: Tracker, calls: list[Call],
                     i: int, plan: list[tuple[str, str, str | None]], pauses: list[float]) -> None:
        for (op, sid, rid), pause in zip(plan, pauses):
            await trio.sleep(pause)  # (variety of interleavings only: no check relies on it)
            if op in ("submit", "burst"):
                assert rid is not None
                body = {"requestId": rid, "content": self.contents[rid][1], "whenBusy": self.whens[rid]}
                if op == "burst":  # the same request id from three clients at the same moment
                    async with trio.open_nursery() as burst:
                        for k in range(3):
                            burst.start_soon(call, https[(i + k) % len(https)], token, tracker, calls, i, "submit",
                                             sid, rid, body)
                else:
                    await call(https[i], token, tracker, calls, i, "submit", sid, rid, body)
            else:
                await call(https[i], token, tracker, calls, i, op, sid, rid)


# --------------------------------------------------------------------------- the checks


def check_calls(log: Log, calls: list[Call], contents: dict[str, tuple[str, str]]) -> None:
    """Every answer of ``calls`` (one session's) against ``log``."""
    firsts: dict[str, int] = {}
    unanswered = {c.rid for c in calls if c.status is None}
    for c in calls:
        if c.status is None:
            continue  # the daemon stopped under it
        where = f"{c} (log {[(e['seq'], e['kind']) for e in log.events if c.l0 <= e['seq'] <= c.l1]})"
        b = c.body
        if c.op == "submit":
            assert c.status == 202, where
            rid = c.rid
            assert rid in log.submitted, where
            assert b["requestId"] == rid and b["seq"] == log.submitted[rid]["seq"], where
            assert b["seq"] <= c.l1, where
            if not b["duplicate"]:
                assert b["seq"] > c.l0, where  # it was not in the log before this call
                firsts[rid] = firsts.get(rid, 0) + 1
        elif c.op == "withdraw":
            assert c.status == 200, where
            rid = c.rid
            assert b["requestId"] == rid, where
            status = b["status"]
            if status == "withdrawn":
                w = log.seq(log.withdrawn, rid)
                assert w is not None and w <= c.l1, where
                assert b["text"] == contents[rid][1], where
            elif status == "placed":
                p = log.placed.get(rid)
                assert p is not None and p["seq"] <= c.l1, where
                end = log.task_end.get(p["task_id"])
                assert end is None or end > c.l0, where  # its task still ran at some point of the call
            elif status == "settled":
                p = log.placed.get(rid)
                assert p is not None and log.task_end.get(p["task_id"], c.l1 + 1) <= c.l1, where
            else:
                assert status == "unknown", where
                s = log.seq(log.submitted, rid)
                assert s is None or s > c.l0, where
        elif c.op == "steer":
            rid = c.rid
            if c.status == 200:
                assert b == {"requestId": rid, "status": "queued", "whenBusy": "steer"}, where
                assert log.queued_at(c.l0, c.l1, rid), where
                assert any(dict(q).get(rid) == "steer" for q, _, _ in log.states(c.l0, c.l1)), where
            else:
                assert c.status == 409 and b["error"]["code"] == "INPUT_NOT_QUEUED", where
                said = b["error"]["message"].rsplit("(it is ", 1)[1].rstrip(")")
                if said == "unknown":
                    s = log.seq(log.submitted, rid)
                    assert s is None or s > c.l0, where
                elif said == "withdrawn":
                    assert (log.seq(log.withdrawn, rid) or c.l1 + 1) <= c.l1, where
                elif said in ("placed", "settled"):
                    p = log.placed.get(rid)
                    assert p is not None and p["seq"] <= c.l1, where
                    end = log.task_end.get(p["task_id"])
                    if said == "placed":
                        assert end is None or end > c.l0, where
                    else:
                        assert end is not None and end <= c.l1, where
                else:
                    raise AssertionError(where)
        elif c.op == "abort":
            assert c.status == 200, where
            if b["withdrawn"]:
                assert b["aborted"] is True, where
                seqs = []
                for rid in b["withdrawn"]:
                    w = log.withdrawn.get(rid)
                    assert w is not None and w["body"]["reason"] == "abort" and w["seq"] <= c.l1, where
                    seqs.append(w["seq"])
                # Everything queued before it was withdrawn with it, and nothing stayed queued.
                after = max(seqs)
                queue, _, _ = log.states(after, after)[-1]
                assert queue == [], where
                before = log.states(min(seqs) - 1, min(seqs) - 1)[-1][0]
                assert [q[0] for q in before] == b["withdrawn"], where
            elif b["aborted"]:
                assert any(e["kind"] == "run.aborted" and c.l0 < e["seq"] <= c.l1 for e in log.events), where
            else:  # nothing ran and nothing was queued at some point of the call
                assert any(not q and r is None for q, r, _ in log.states(c.l0, c.l1)), where
        elif c.op == "view":
            assert c.status == 200, where
            # The view is the log's as of its lastSeq: its queue, running task and status then
            # (running also while a /skill: input is being checked: it is recorded after).
            at = b["lastSeq"]
            assert c.l0 <= at <= c.l1, where
            queue, running, asked = log.states(at, at)[-1]
            assert [(q["requestId"], q["whenBusy"]) for q in b["queued"]] == run_order(queue, running), where
            assert b["runningTaskId"] == running, where
            checking = any(s > at for rid, (_, text) in contents.items() if text.startswith("/skill:")
                           and (s := log.seq(log.submitted, rid)) is not None)
            expected = "awaiting_answer" if asked else "running" if (running or queue) else "idle"
            assert b["status"] == expected or (expected == "idle" and b["status"] == "running" and checking), where
        elif c.op == "list":  # the sessions projection, caught up with the log when it answers
            # (running also while a /skill: input is being checked, as in the view)
            assert c.status == 200, where
            [row] = [row for row in b["sessions"] if row["id"] == c.sid]
            at = row["lastSeq"]
            assert c.l0 <= at <= c.l1, where
            queue, running, asked = log.states(at, at)[-1]
            assert row["queued"] == len(queue), where
            checking = any(s > at for rid, (_, text) in contents.items() if text.startswith("/skill:")
                           and (s := log.seq(log.submitted, rid)) is not None)
            expected = "awaiting_answer" if asked else "running" if (running or queue) else "idle"
            assert row["status"] == expected or (expected == "idle" and row["status"] == "running" and checking), where
    for rid, n in firsts.items():
        assert n == 1, f"{rid} answered duplicate false {n} times"
    for rid in {c.rid for c in calls if c.op == "submit"}:
        assert firsts.get(rid) == 1 or rid in unanswered, f"no first answer for {rid}"
        answers = {c.body["seq"] for c in calls if c.op == "submit" and c.rid == rid and c.status is not None}
        assert len(answers) == 1, f"{rid} answered with several seqs {answers}"


def check_settled(log: Log, view: dict[str, Any]) -> None:
    """Nothing accepted is lost: every input placed or withdrawn, none queued; a follow-up starts
    a task of its own (after the current answer), a steer goes into the running task if any."""
    assert view["status"] == "idle" and view["queued"] == [], view
    for rid in log.submitted:
        assert (rid in log.placed) != (rid in log.withdrawn), rid
    lane: dict[str, str] = {}
    started: dict[str, str | None] = {}
    for e in log.events:
        kind, body = e["kind"], e["body"]
        if kind == "input.submitted":
            lane[e["request_id"]] = body.get("when_busy", "followUp")
        elif kind == "input.requeued":
            lane[body["input_request_id"]] = body.get("when_busy", "steer")
        elif kind == "task.started" and e["agent_id"] == "main":
            started[e["task_id"]] = body.get("input_request_id")
        elif kind == "input.placed":
            rid = body["input_request_id"]
            if lane[rid] == "followUp":
                assert started.get(e["task_id"]) == rid, f"follow-up {rid} placed in another input's task"


async def watch(d: Daemon, token: str, sid: str, seen: list[tuple[int, str, Any]],
                task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Follow ``sid``'s stream live from its start (resuming after a drop, as a client does),
    into ``seen``."""
    started = False
    while True:
        async with d.sse(token, params={"session": sid}, last_event_id=seen[-1][0] if seen else 0) as stream:
            if not started:
                task_status.started()
                started = True
            while (msg := await stream.next(timeout=SETTLE)) is not None:
                if msg.event == "stream.dropped":
                    break
                if msg.id is not None:
                    seen.append((msg.id, msg.event, msg.json()))


async def sse_from_zero(d: Daemon, token: str, sid: str, last: int) -> list[tuple[int, str, Any]]:
    out = []
    async with d.sse(token, params={"session": sid}, last_event_id=0) as stream:
        while not out or out[-1][0] < last:
            msg = await stream.next_event()
            assert msg is not None
            if msg.id is not None:
                out.append((msg.id, msg.event, msg.json()))
    return out


async def settle_and_check(d: Daemon, token: str, sids: list[str], calls: list[Call],
                           contents: dict[str, tuple[str, str]]) -> dict[str, dict[str, Any]]:
    views = {}
    for sid in sids:
        view = await d.wait_idle(token, sid, timeout=SETTLE)
        events = await d.events(token, sid)
        log = Log(events)
        check_calls(log, [c for c in calls if c.sid == sid], contents)
        check_settled(log, view)
        streamed = await sse_from_zero(d, token, sid, events[-1]["seq"])
        assert streamed == [(e["seq"], e["kind"], e) for e in events]
        views[sid] = view
        r = await d.get("/sessions", token, params={"project": view["projectId"]})
        [row] = [row for row in r.json()["sessions"] if row["id"] == sid]
        assert (row["status"], row["queued"], row["lastSeq"]) == ("idle", 0, view["lastSeq"]), row
    return views


async def start(daemon_factory: DaemonFactory) -> tuple[Daemon, str, str, list[str]]:
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("clients", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "b.txt").write_text("STEP-B\n")
    (ws / "c.txt").write_text("STEP-C\n")
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW)
    sids = [(await d.session(token, project["id"]))["id"] for _ in range(2)]
    return d, token, project["id"], sids


async def restarted_views(daemon_factory: DaemonFactory, d: Daemon, token: str, sids: list[str]) -> dict[str, Any]:
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    return {sid: await d2.wait_idle(token, sid) for sid in sids}


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("sessions", [1, 2])
async def test_concurrent_clients_get_answers_the_log_bears_out(daemon_factory: DaemonFactory, seed: int,
                                                                 sessions: int) -> None:
    d, token, project, sids = await start(daemon_factory)
    sids = sids[:sessions]
    tracker, calls = Tracker(project, sids), []
    schedule = Schedule(seed, sids)
    live: dict[str, list[tuple[int, str, Any]]] = {sid: [] for sid in sids}
    async with trio.open_nursery() as watchers:
        for sid in sids:  # a client watching each session live all along
            await watchers.start(watch, d, token, sid, live[sid])
        await schedule.run(d, token, tracker, calls)
        views = await settle_and_check(d, token, sids, calls, schedule.contents)
        for sid in sids:
            events = await d.events(token, sid)
            await wait_until(lambda: _seen(live[sid], events[-1]["seq"]), timeout=SETTLE, what="the live stream")
            assert live[sid] == [(e["seq"], e["kind"], e) for e in events]
        watchers.cancel_scope.cancel()
    again = await restarted_views(daemon_factory, d, token, sids)
    for sid in sids:
        assert {k: again[sid][k] for k in VIEW_KEYS} == {k: views[sid][k] for k in VIEW_KEYS}


@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("when", ["between calls", "during calls", "during calls with aborts"])
async def test_inputs_queued_at_a_graceful_stop_are_answered_after_the_restart(daemon_factory: DaemonFactory,
                                                                                 seed: int, when: str) -> None:
    # Each session's run waits for an answer to a question, so everything sent meanwhile queues;
    # the daemon is stopped gracefully after the clients' calls, or while they are under way
    # (after a seeded number of answers). kill -9 is tests/daemon/test_kill9.py's. With aborts
    # among the calls, the queue may be empty at the stop, and the question cancelled.
    d, token, project, sids = await start(daemon_factory)
    tracker, calls = Tracker(project, sids), []
    aborts = when.endswith("aborts")
    schedule = Schedule(seed, sids, steps=8, ops=("submit", "submit", "burst", "withdraw", "steer", "view", "list")
                        + (("abort",) if aborts else ()))
    async with httpx2.AsyncClient(base_url=d.url, timeout=LIMIT) as http:
        for sid in sids:
            held = f"hold-{sid}"
            schedule.contents[held], schedule.whens[held] = (sid, "HOLD on"), "followUp"
            await call(http, token, tracker, calls, 0, "submit", sid, held, {"requestId": held, "content": "HOLD on"})
            await wait_until(lambda: _asking(d, token, sid), what="the question asked")
            for n, busy in enumerate(["followUp", "steer", "followUp"]):
                rid = f"fixed-{sid}-{n}"
                schedule.contents[rid], schedule.whens[rid] = (sid, f"STEP-A fixed {n}"), busy
                await call(http, token, tracker, calls, 0, "submit", sid, rid,
                           {"requestId": rid, "content": f"STEP-A fixed {n}", "whenBusy": busy})
    if when == "between calls":
        await schedule.run(d, token, tracker, calls)
        await stop_daemon(d)
    else:
        answers = len(calls) + random.Random(seed).randrange(5, 25)

        async def stop_after_answers() -> None:
            await wait_until(lambda: _answered(calls, answers), timeout=SETTLE, what="answers", interval=0.001)
            await stop_daemon(d)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_after_answers)
            await schedule.run(d, token, tracker, calls)
    async with open_store(d.data_dir) as store:
        stopped_at = {sid: await store.session_last_seq(sid) for sid in sids}
    for c in calls:  # an answer whose log could not be read after it came before the stop
        if c.status is not None and not c.l1:
            c.l1 = stopped_at[c.sid]
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    queued = {}
    for sid in sids:
        log = Log(await d2.events(token, sid))
        queue, _, asked = log.states(stopped_at[sid], stopped_at[sid])[-1]
        assert aborts or (asked and queue), (sid, queue)
        queued[sid] = [q[0] for q in queue]

    # Every input sent before the stop, sent again by two clients at once: the seq it was given
    # (the first of the two records it if the stop came before it was).
    repeats: list[Call] = []
    async with httpx2.AsyncClient(base_url=d2.url, timeout=LIMIT) as h1, \
            httpx2.AsyncClient(base_url=d2.url, timeout=LIMIT) as h2:
        async with trio.open_nursery() as nursery:
            for rid in {c.rid for c in calls if c.op == "submit"}:
                sid, text = schedule.contents[rid]
                for k, http in enumerate((h1, h2)):
                    nursery.start_soon(call, http, token, tracker, repeats, k, "submit", sid, rid,
                                       {"requestId": rid, "content": text})
    for c in calls:
        if c.op == "submit" and c.status is not None:
            assert {r.body["seq"] for r in repeats if r.rid == c.rid} == {c.body["seq"]}, c
    views = await settle_and_check(d2, token, sids, calls + repeats, schedule.contents)
    for sid in sids:
        log = Log(await d2.events(token, sid))
        for rid in queued[sid]:  # placed after the restart, and answered in its task
            placed = log.placed[rid]
            assert placed["seq"] > stopped_at[sid]
            assert any(e["kind"] == "model.responded" and e["task_id"] == placed["task_id"]
                       and e["seq"] > placed["seq"] for e in log.events), rid
            assert log.task_end[placed["task_id"]] > placed["seq"]
    again = await restarted_views(daemon_factory, d2, token, sids)
    for sid in sids:
        assert {k: again[sid][k] for k in VIEW_KEYS} == {k: views[sid][k] for k in VIEW_KEYS}


async def _seen(seen: list[tuple[int, str, Any]], last: int) -> bool:
    return bool(seen) and seen[-1][0] >= last


async def _asking(d: Daemon, token: str, sid: str) -> bool:
    return (await d.view(token, sid))["status"] == "awaiting_answer"


async def _answered(calls: list[Call], n: int) -> bool:
    return sum(c.status is not None for c in calls) >= n
