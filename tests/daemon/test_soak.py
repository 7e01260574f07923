"""Many things at once: a bounded soak of a real ``lens serve`` process, driven by a seeded schedule,
and the invariants a user relies on checked at its end.

Several projects and sessions; inputs submitted (followUp and steer), repeated, withdrawn and
aborted; forks; tool runs in the real executor (the faux model calls them: ``/tool NAME {json}``);
background jobs; three SSE clients (everything, one project, one session) that disconnect at
random points and resume with ``Last-Event-ID``; one graceful restart (SIGTERM, then a new
``lens serve`` on the same data directory) in the middle. Then:

- ``lens log verify`` passes; every accepted ``requestId`` is one ``input.submitted`` in its session;
- every SSE client saw every event of its filter once, in ``seq`` order, across its reconnects and
  the restart (against ``lens log decode`` and ``GET /sessions/{id}/events``);
- the daemon's answers (session views, the session list, ``history_search`` pages) equal those of a
  daemon on a copy of the data rebuilt by ``lens log rebuild``;
- every session ends idle (or awaiting an answer); no executor or job command outlives the daemon.

A second variant (``kill9``, same seed) kills the daemon with SIGKILL instead, and adds subagents
(answering at once, or held in a call), manual compaction, snips, ``PATCH /sessions/{id}`` changes
and config-file rewrites while sessions run; besides the above it checks that every task finished
once, that a subagent's calls and usage are its own, and that the Working Context of every agent
of a settled session reads the same before and after the kill.

A third variant (``restarts``, same seed) restarts the daemon three times in one run, a SIGTERM
and two kill -9s in an order and at steps the schedule draws, each aimed (as the schedule draws)
at a session held in a model stream, in a tool call, in a subagent's call or in a compaction's
summarizing request, or at none; before each, one settled session has an item snipped, then
enough events for a snapshot (read from ``projections.db``), and its Working Context must read the
same from the next daemon, which wakes it from that snapshot. Between two daemons ``lens log
verify`` passes, seqs are gap-free, every accepted input is in the log once and every projection
equals a rebuild from zero (``tests/daemon/rebuild_check.py``; also once while a daemon runs, in
every variant, and between the two daemons of ``sigterm`` and ``kill9``). Subagents are
asked to start subagents of their own (``subagent`` is main-only: refused, and the refusal is
the nested call's one result).

The schedule is a pure function of :data:`SEED`; the daemon's timing is not, so the invariants are
what is asserted, never an exact log.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import httpx2
import pytest
import trio

from tests.procfs import processes, running_in

from ..mcp.conftest import SERVER
from ..procfs import alive

from .conftest import (BUSY, LIMIT, Daemon, ServeProcess, as_daemon, error_of, projections_caught_up, run_lens,
                       wait_until)
from .history_pages import search_all
from .rebuild_check import projections_against_a_rebuild

SEED = int(os.environ.get("LENS_SOAK_SEED", "20261203"))  # another seed: another schedule
STEPS = int(os.environ.get("LENS_SOAK_STEPS", "24"))  # the restart comes after half of them
BATCH = 4  # at most this many operations at once
OPS = ["chat", "chat", "steer", "tool", "edit", "busy-withdraw", "busy-abort", "busy-steer", "busy-left", "fork",
       "job", "repeat", "wait", "ask", "delete"]
ASK = {"questions": [{"id": "colour", "text": "Colour?", "options": [{"id": "red", "label": "Red"},
                                                                       {"id": "blue", "label": "Blue"}]}]}
QUERIES = ["quokka", "note", "unix_ms", "job", "echo", "nothing_at_all"]
# an MCP server: a child of the daemon, like the executors
CONFIG = {"mcpServers": {"t": {"command": sys.executable, "args": [SERVER]}}}
# The widened soak: the daemon killed with SIGKILL (not SIGTERM) half-way, and besides the
# operations above subagents (one answering at once, one held in a call), manual compaction,
# snips and configuration changes (``PATCH /sessions/{id}``, and the config file rewritten through
# ``PUT /config/files/lens.jsonc``, which the restart reads) while other sessions run. A scripted
# faux provider: what it answers a subagent reports usage, so its attribution can be checked.
KILL9_OPS = OPS + ["delegate", "delegate", "delegate-left", "compact", "snip", "snip", "configure", "configure",
                   "config-file"]
SCRIPT = [
    {"when": "DELEGATE", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBTASK: name a quokka"}}],
     "inputTokens": 11, "outputTokens": 1},
    {"when": "ENTRUST", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBHOLD: wait"}}],
     "inputTokens": 13, "outputTokens": 1},
    {"when": "SUBTASK", "text": "the quokka is called Q", "inputTokens": 22, "outputTokens": 2},
    {"when": "SUBHOLD", "toolCalls": [{"name": "sleep_milliseconds", "arguments": {"milliseconds": 600000}}],
     "inputTokens": 33, "outputTokens": 3},
    # a subagent asked to start one of its own (``subagent`` is main-only: it is told so, and answers)
    {"when": "SUBNEST", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBTASK: name a quokka"}}],
     "inputTokens": 44, "outputTokens": 4},
    {"when": "NEST", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBNEST: delegate further"}}],
     "inputTokens": 15, "outputTokens": 1},
    # an answer held in the middle of its stream (a restart aimed at a model stream meets it)
    {"when": "STREAMHOLD", "chunks": ["a partial ", "answer"], "chunkDelayMs": 600000},
]
# (a small context window: the tool schemas alone are near 2,400 tokens, so automatic compaction
# comes after a few rounds at the default 80 %, and never below the schemas' share)
KILL9_CONFIG = {**CONFIG, "providers": [{"id": "faux", "protocol": "faux", "script": SCRIPT, "models": [
    {"id": "faux-1", "contextWindow": 4000}, {"id": "faux-2", "contextWindow": 4000}]}], "defaultModel": "faux/faux-1",
                # a snapshot every few events, actors passivated after a second idle: the restart and
                # every wake-up fold a snapshot and a tail, not the whole log
                "sessions": {"snapshotEvery": 2, "idleSeconds": 1}}
# Widened again: several restarts in one run (a SIGTERM and kill -9s, in an order and at steps the
# schedule draws), each aimed at a session held in a model stream, in a tool call or in a
# subagent's call (or at none: between batches); before each, a snip followed by enough events for
# a snapshot in a settled session, whose Working Context the wake-up after the restart must give
# back; and subagents asked to start subagents of their own.
RESTARTS_OPS = KILL9_OPS + ["delegate-nested", "delegate-nested"]
RESTART_KINDS = [signal.SIGTERM, signal.SIGKILL, signal.SIGKILL]
AIMS = ["between", "stream", "call", "subagent", "compaction"]
# (a model whose summarizing requests never answer: a session switched to it and compacted is held
# in the summarizing request; its window is large, so that it never compacts by itself)
HOLD_MODEL = "hold/hold-1"
RESTARTS_CONFIG = {**KILL9_CONFIG, "providers": [*KILL9_CONFIG["providers"], {
    "id": "hold", "protocol": "faux", "models": [{"id": "hold-1", "contextWindow": 1000000}],
    "script": [{"when": "Summarize the conversation so far", "text": "never", "delayMs": 600000}]}]}
VARIANTS = {"sigterm": (signal.SIGTERM, OPS, CONFIG), "kill9": (signal.SIGKILL, KILL9_OPS, KILL9_CONFIG),
            "restarts": (None, RESTARTS_OPS, RESTARTS_CONFIG)}


@dataclass
class Client:
    """One SSE client: its filter, and every event (``seq``, kind) it read, over all connections."""

    name: str
    params: dict[str, str]
    seen: list[tuple[int, str]] = field(default_factory=list)
    connects: int = 0
    dropped: int = 0
    refusals: list[str] = field(default_factory=list)

    @property
    def last(self) -> int | None:
        return self.seen[-1][0] if self.seen else None


@dataclass
class Current:
    """The daemon now serving (replaced at the restart); ``up`` is set while it serves."""

    d: Daemon | None = None
    up: trio.Event = field(default_factory=trio.Event)


async def follow(client: Client, current: Current, token: str, rng: random.Random) -> None:
    """Read ``client``'s stream until cancelled: leave after a random number of events and resume
    from the last ``id`` read; after the daemon's end (or a refused connection) wait for the next."""
    while True:
        await current.up.wait()
        d = current.d
        assert d is not None
        budget = rng.randint(2, 25)
        try:
            # (the first connection from 0: a client that saw nothing asks for everything)
            resume = client.last if client.last is not None else 0
            async with d.sse(token, params=client.params, last_event_id=resume) as stream:
                client.connects += 1
                while budget > 0:
                    msg = await stream.next_event(timeout=3600)
                    if msg is None:  # the daemon ended the stream (stream.end at its stop)
                        await trio.sleep(0.05)  # (not ordering: a daemon stopping is not yet marked down)
                        break
                    if msg.event == "stream.dropped":
                        client.dropped += 1
                    if msg.id is not None:
                        client.seen.append((msg.id, msg.event or ""))
                        budget -= 1

        except httpx2.TransportError:  # the daemon stopping or stopped: resume at the next one
            await trio.sleep(0.05)
        except AssertionError as exc:  # refused (by a stopping daemon only: checked at the end)
            client.refusals.append(str(exc)[:300])
            await trio.sleep(0.05)


async def start(cwd: Path, nursery: trio.Nursery, n: int, started: list[ServeProcess],
                data: str = "data") -> tuple[ServeProcess, Daemon]:
    serve = ServeProcess(cwd, "--data", data, stderr_name=f"serve-{n}.err")
    started.append(serve)
    url = await serve.run(nursery)
    return serve, as_daemon(cwd, url, httpx2.AsyncClient(base_url=url, timeout=LIMIT))


async def _none(pending: Any) -> bool:
    return not await pending


# the events whose (provider-reported) usage counts in their agent's usage and its session's
USAGE_KINDS = ("model.responded", "model.failed", "model.cut_off", "context.compacted", "context.compaction_failed")


def strip_config(ctx: dict[str, Any]) -> dict[str, Any]:
    """``contexts`` without what the config file resolves (the restart reads it anew)."""
    return {agent: (status, {k: v for k, v in body.items() if k not in ("settings", "compactionThreshold")})
            for agent, (status, body) in ctx.items()}


def context_diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Where two ``strip_config``-ed reads of a session's Working Contexts differ (agent, field)."""
    out = []
    for agent in sorted(set(before) | set(after)):
        b, a = before.get(agent, (None, {})), after.get(agent, (None, {}))
        if b[0] != a[0]:
            out.append(f"{agent}: status {b[0]} != {a[0]}")
        for key in sorted(set(b[1]) | set(a[1])):
            if b[1].get(key) != a[1].get(key):
                bv, av = b[1].get(key), a[1].get(key)
                if isinstance(bv, list) and isinstance(av, list):
                    out.append(f"{agent}.{key}: only before {[x for x in bv if x not in av]!r:.400}, "
                               f"only after {[x for x in av if x not in bv]!r:.400}")
                else:
                    out.append(f"{agent}.{key}: {bv!r:.300} != {av!r:.300}")
    return "; ".join(out)


def descendants(pid: int) -> set[int]:
    """The live processes under ``pid`` (its executors, MCP servers, their commands)."""
    children: dict[int, list[int]] = {}
    for p in processes():
        if p.state != "Z":
            children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


async def contexts(d: Daemon, token: str, sid: str) -> dict[str, Any]:
    """The Working Context of every agent of ``sid``, as ``GET …/context`` shows it."""
    out = {}
    for agent in (await d.view(token, sid))["agents"]:
        r = await d.get(f"/sessions/{sid}/context", token, params={"agentId": agent["agentId"]})
        out[agent["agentId"]] = (r.status_code, r.json())
    return out


async def answers(d: Daemon, token: str, project_of: dict[str, str]) -> dict[Any, Any]:
    """What a user reads: every session's view and every agent's Working Context, the session and
    project lists, every query's every page of history search per project (and per session)."""
    out: dict[Any, Any] = {}
    for sid in project_of:
        out[("view", sid)] = await d.view(token, sid)
        # (without the settings the config file resolves: each daemon read the file as it was at its start)
        out[("context", sid)] = strip_config(await contexts(d, token, sid))
    out["sessions"] = (await d.get("/sessions", token)).json()
    out["projects"] = (await d.get("/projects", token)).json()
    for pid in sorted(set(project_of.values())):
        for query in QUERIES:
            for sid in [None, *(s for s, p in project_of.items() if p == pid)]:
                out[("search", pid, query, sid)] = await search_all(d, token, pid, query, sid, limit=7)
    return out


async def decode(cwd: Path, data: str = "data") -> list[dict[str, Any]]:
    out = await run_lens(cwd, "log", "decode", "--data", data)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_a_seeded_schedule_of_many_things_at_once_keeps_the_invariants(tmp_path: Path, variant: str):
    stop_signal, ops_drawn, config = VARIANTS[variant]
    rng = random.Random(SEED)
    violations: list[str] = []
    current = Current()
    accepted: list[tuple[str, str]] = []  # (session, requestId) answered 202, not duplicate
    project_of: dict[str, str] = {}  # session -> project
    ops_seen: dict[str, int] = {}
    left_busy: set[str] = set()
    deleted: set[str] = set()  # sessions deleted (no more operations on them)
    asking: set[str] = set()  # sessions left with a question open
    retried: list[str] = []  # requestIds asked again of the restarted daemon
    compared: list[str] = []  # sessions whose Working Contexts were compared across a restart
    snips: list[str] = []  # sessions snipped, then snapshotted, before a restart (compared across it)
    aims: list[tuple[int, str, str]] = []  # (restart, signal, what it was aimed at)
    holding: set[str] = set()  # sessions switched to HOLD_MODEL, compacting as the restart lands
    rebuilds_compared: list[str] = []  # where the projections were compared with a rebuild mid-run
    started: list[ServeProcess] = []
    t0 = trio.current_time()
    log: list[dict[str, Any]] = []
    try:
        with trio.fail_after(110 if variant == "restarts" else 85):
            async with trio.open_nursery() as nursery:
                (tmp_path / "config").mkdir()
                (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(config))
                serve, d = await start(tmp_path, nursery, 0, started)
                children: set[int] = set()
                token = await d.pair("soak", strong=True)
                projects = [(await d.project(token, f"p{i}"))["id"] for i in range(2)]
                for pid in projects:
                    for _ in range(2):
                        project_of[(await d.session(token, pid))["id"]] = pid
                sessions = list(project_of)
                current.d = d
                current.up.set()
                clients = [Client("all", {}), Client("project", {"project": projects[0]}),
                           Client("session", {"session": sessions[0]})]
                async with trio.open_nursery() as readers:
                    for c in clients:
                        readers.start_soon(follow, c, current, token, random.Random(rng.random()))

                    async def submit_as(rid: str, sid: str, content: str, **kw: Any) -> str:
                        """Submit as a client does: an answer lost to a stopping daemon (no answer,
                        a 503) is asked again, with the same ``requestId``, of the next one."""
                        for attempt in range(3):
                            d = current.d
                            assert d is not None
                            try:
                                r = await d.post(f"/sessions/{sid}/inputs", token,
                                                 {"requestId": rid, "content": content, **kw})
                            except httpx2.TransportError:
                                r = None
                            if r is not None and r.status_code == 202:
                                if r.json()["duplicate"] and attempt == 0:
                                    violations.append(f"a new requestId {rid} answered duplicate: {r.text}")
                                accepted.append((sid, rid))
                                return rid
                            if r is not None and r.status_code != 503:
                                violations.append(f"submit {rid}: {r.status_code} {r.text}")
                                return rid
                            retried.append(rid)
                            await current.up.wait()  # (the restart replaced it before its SIGTERM)
                        violations.append(f"submit {rid}: refused three times")
                        return rid

                    async def answer_open(dd: Daemon, sid: str) -> None:
                        """Answer the questions ``sid`` waits on (the first valid answer wins)."""
                        for q in (await dd.view(token, sid))["questions"]:
                            r = await dd.post(f"/sessions/{sid}/questions/{q['questionId']}/answer", token,
                                              {"kind": "answer", "optionIds": ["blue"]})
                            if r.status_code != 200:
                                violations.append(f"answer of an open question: {r.status_code} {r.text}")

                    async def settled(dd: Daemon, sid: str) -> bool:
                        """Nothing under way in ``sid``, and nothing a restart changes: idle, nothing
                        queued, every job ended (a job's end queues its report). (Not a session
                        awaiting an answer: a restart cancels its question, and the model is told.)"""
                        events = await dd.events(token, sid)
                        jobs = {e["body"]["job_id"] for e in events if e["kind"] == "job.started"}
                        jobs -= {e["body"]["job_id"] for e in events if e["kind"] == "job.finished"}
                        v = await dd.view(token, sid)
                        return not jobs and not v["queued"] and v["status"] == "idle"

                    async def run_op(dd: Daemon, op: str, sid: str, step: int, orng: random.Random,
                                     repeatable: list[tuple[str, str]], forks: dict[int, str], index: int) -> None:
                        counter = itertools.count()

                        async def submit(sid: str, content: str, **kw: Any) -> str:
                            # (request ids named by the schedule, not by the order trio runs the ops in)
                            return await submit_as(f"r{step}.{index}.{next(counter)}", sid, content, **kw)

                        if sid in asking and op.startswith(("busy-", "wait", "ask", "compact")):
                            asking.discard(sid)  # (a question left open is answered by the user first)
                            await answer_open(dd, sid)
                        if sid in left_busy and op.startswith(("busy-", "wait", "ask", "compact")):
                            left_busy.discard(sid)  # (a run left busy is stopped by the user first)
                            r = await dd.post(f"/sessions/{sid}/abort", token)
                            if r.status_code != 200:
                                violations.append(f"abort of a run left busy: {r.status_code} {r.text}")
                        if op == "chat":
                            await submit(sid, f"note {step}: the quokka number {orng.randint(0, 99)}")
                        elif op == "steer":
                            await submit(sid, f"note {step}: steer", whenBusy="steer")
                        elif op == "tool":
                            await submit(sid, orng.choice(['/tool get_system_time {}', '/tool read_file {"path": "."}',
                                                           '/tool mcp__t__echo {"text": "quokka"}']))
                        elif op == "edit":
                            await submit(sid, "/tool edit_file " + json.dumps(
                                {"path": f"f{step}-{index}.txt", "mode": "create", "content": f"quokka {step}\n"}))
                        elif op == "delete":  # soft: its run aborted, its queue withdrawn, its view kept
                            if sid == sessions[0]:  # (the session an SSE client follows stays)
                                return
                            r = await dd.request("DELETE", f"/sessions/{sid}", token)
                            if r.status_code != 200 or not r.json().get("deleted"):
                                violations.append(f"delete of {sid}: {r.status_code} {r.text}")
                            deleted.add(sid)
                            left_busy.discard(sid)
                            asking.discard(sid)
                            mine = [rid for s_, rid in repeatable if s_ == sid]
                            if mine:  # a client retrying an input it sent before the delete
                                rid = orng.choice(mine)
                                r = await dd.post(f"/sessions/{sid}/inputs", token, {"requestId": rid, "content": "again"})
                                if r.status_code != 202 or not r.json()["duplicate"]:
                                    violations.append(f"a repeated requestId {rid} of a deleted session: "
                                                      f"{r.status_code} {r.text}")
                        elif op == "ask":  # a question, answered now or left open (the restart may meet it)
                            await dd.wait_idle(token, sid)
                            await submit(sid, "/tool ask_user " + json.dumps(ASK))

                            async def awaiting() -> bool:
                                v = await dd.view(token, sid)
                                return v["status"] == "awaiting_answer" and bool(v["questions"])
                            await wait_until(awaiting, what=f"{sid} awaiting an answer")
                            if orng.random() < 0.5:
                                await answer_open(dd, sid)
                            else:
                                asking.add(sid)
                        elif op == "busy-left":  # a run inside a tool call, left so (the restart may meet it)
                            left_busy.add(sid)
                            await submit(sid, BUSY)
                            await submit(sid, f"note {step}: queued behind a run left busy")
                        elif op in ("busy-withdraw", "busy-abort", "busy-steer"):
                            await dd.wait_idle(token, sid)
                            busy = await submit(sid, BUSY)
                            if not await held(dd, sid, busy, "call"):
                                return  # (compacted into a summary before it ran: nothing held)
                            queued = await submit(sid, f"note {step}: queued behind a busy run")
                            if op == "busy-withdraw":
                                r = await dd.post(f"/sessions/{sid}/inputs/{queued}/withdraw", token)
                                if r.status_code != 200 or r.json().get("status") != "withdrawn":
                                    violations.append(f"withdraw of a queued input: {r.status_code} {r.text}")
                            if op == "busy-steer":
                                r = await dd.post(f"/sessions/{sid}/inputs/{queued}/steer", token)
                                if r.status_code != 200:
                                    violations.append(f"steer of a queued input: {r.status_code} {r.text}")
                            r = await dd.post(f"/sessions/{sid}/abort", token)
                            if r.status_code != 200:
                                violations.append(f"abort: {r.status_code} {r.text}")
                            elif op == "busy-abort" and queued not in r.json().get("withdrawn", []):
                                violations.append(f"abort did not withdraw the queued input: {r.text}")
                        elif op == "fork":
                            events = await dd.events(token, sid)
                            at = orng.choice(events)["seq"]
                            r = await dd.post(f"/sessions/{sid}/fork", token, {"seq": at})
                            if r.status_code != 201:
                                violations.append(f"fork at {at}: {r.status_code} {r.text}")
                            else:
                                project_of[r.json()["id"]] = project_of[sid]
                                forks[index] = r.json()["id"]
                        elif op == "job":
                            await submit(sid, "/tool job " + json.dumps(
                                {"action": "start", "command": f"echo job {step}; sleep {orng.choice(['0', '0.3', '2'])}"}))
                        elif op == "repeat" and repeatable:
                            old_sid, old_rid = orng.choice(repeatable)
                            r = await dd.post(f"/sessions/{old_sid}/inputs", token,
                                              {"requestId": old_rid, "content": "again"})
                            if r.status_code != 202 or not r.json()["duplicate"]:
                                violations.append(f"a repeated requestId {old_rid}: {r.status_code} {r.text}")
                        elif op == "delegate":  # a subagent that answers at once (its usage reported)
                            await submit(sid, f"note {step}: DELEGATE")
                        elif op == "delegate-left":  # a subagent held in a call, left so (the kill may meet it)
                            left_busy.add(sid)
                            await submit(sid, f"note {step}: ENTRUST")
                            await submit(sid, f"note {step}: queued behind a subagent left busy")
                        elif op == "delegate-nested":  # a subagent asked to start one of its own
                            await submit(sid, f"note {step}: NEST")
                        elif op == "compact":
                            await dd.wait_idle(token, sid)
                            r = await dd.post(f"/sessions/{sid}/compact", token)
                            # (busy: a job's report started a round meanwhile)
                            if r.status_code != 200 and error_of(r) not in ("NOTHING_TO_COMPACT", "SESSION_BUSY"):
                                violations.append(f"compact of {sid}: {r.status_code} {r.text}")
                        elif op == "snip":  # one item of the main agent's Working Context, running or not
                            r = await dd.get(f"/sessions/{sid}/context", token)
                            working = r.json().get("workingItemIds", []) if r.status_code == 200 else []
                            if r.status_code != 200:
                                violations.append(f"context of {sid}: {r.status_code} {r.text}")
                            elif working:
                                r = await dd.post(f"/sessions/{sid}/context/snip", token,
                                                  {"itemIds": [orng.choice(working)]})
                                # (a tool call with no result yet, running or awaiting an answer, is
                                # refused: docs/decisions.md, "Context items left open, mended: …", its
                                # "A snip or hide of a tool call that has no result yet is refused")
                                pending = r.status_code == 409 and error_of(r) == "CONTEXT_CALL_PENDING"
                                if r.status_code != 200 and not pending:
                                    violations.append(f"snip in {sid}: {r.status_code} {r.text}")
                        elif op == "configure":  # while it runs or not: applies from its next request
                            body = orng.choice([
                                {"thinkingLevel": orng.choice(["low", "high", None])},
                                {"autoCompaction": orng.random() < 0.5, "compactionTriggerPercent": orng.randint(1, 100)},
                                {"pruneToolResults": orng.random() < 0.5},
                                {"model": orng.choice(["faux/faux-1", "faux/faux-2", None])},
                                {"toolPolicy": {"mcp__t__echo": orng.choice([{"enabled": False}, None])}},
                            ])
                            r = await dd.request("PATCH", f"/sessions/{sid}", token, json_body=body)
                            if r.status_code != 200:
                                violations.append(f"PATCH {body} of {sid}: {r.status_code} {r.text}")
                        elif op == "config-file":  # read by the next daemon (the restart), not this one
                            new = {**config, "context": {
                                "compaction": {"auto": orng.random() < 0.5, "triggerPercent": orng.randint(1, 100)},
                                "pruneToolResults": {"enabled": orng.random() < 0.5, "keepRecentRounds": 1,
                                                     "minTokens": 1}}}
                            for _ in range(BATCH):  # (another writer in the batch: read again, as told)
                                r = await dd.get("/config/files/lens.jsonc", token)
                                r = await dd.put("/config/files/lens.jsonc", token, {
                                    "text": json.dumps(new, indent=1), "expectDigest": r.json().get("digest")})
                                if r.status_code != 409 or error_of(r) != "CONFIG_FILE_CHANGED":
                                    break
                            if r.status_code != 200:
                                violations.append(f"PUT lens.jsonc: {r.status_code} {r.text}")
                        elif op == "wait":
                            await dd.wait_idle(token, sid)
                            mine = [rid for s_, rid in repeatable if s_ == sid]
                            if mine:  # an accepted input is never unknown to a withdraw
                                rid = orng.choice(mine)
                                r = await dd.post(f"/sessions/{sid}/inputs/{rid}/withdraw", token)
                                if r.status_code != 200 or r.json().get("status") not in ("withdrawn", "settled"):
                                    violations.append(f"withdraw of {rid} in an idle session: {r.status_code} {r.text}")

                    async def snapshot_seq(sid: str) -> int:
                        """The ``seq`` the session's stored snapshot ends at (0: none), read from
                        ``projections.db`` beside the daemon (a reader of its own)."""
                        def read() -> int:
                            conn = apsw.Connection(str(tmp_path / "data" / "projections.db"),
                                                   flags=apsw.SQLITE_OPEN_READONLY)
                            try:
                                conn.setbusytimeout(5000)
                                rows = conn.execute("SELECT seq FROM snapshots WHERE session_id = ?", (sid,)).fetchall()
                                return rows[0][0] if rows else 0
                            finally:
                                conn.close()
                        return await trio.to_thread.run_sync(read)

                    async def snip_across_a_snapshot(dd: Daemon, sid: str, step: int) -> bool:
                        """Snip one item of ``sid``'s main Working Context, then add enough events for
                        a snapshot, and wait until the stored snapshot holds the snip: the wake-up after
                        the restart folds that snapshot (and its tail), not the snip's event."""
                        r = await dd.get(f"/sessions/{sid}/context", token)
                        working = r.json().get("workingItemIds", []) if r.status_code == 200 else []
                        if len(working) < 2:
                            return False
                        r = await dd.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [working[0]]})
                        if r.status_code != 200:
                            violations.append(f"snip in {sid}: {r.status_code} {r.text}")
                            return False
                        await submit_as(f"r{step}.snipped", sid, f"note {step}: after a snip")
                        await dd.wait_idle(token, sid)
                        events = await dd.events(token, sid)
                        edit = max(e["seq"] for e in events if e["kind"] == "context.edited")

                        async def held() -> bool:
                            return await snapshot_seq(sid) >= edit
                        try:
                            await wait_until(held, what=f"a snapshot of {sid} past its snip at {edit}")
                        except AssertionError as exc:
                            violations.append(str(exc))
                            return False
                        snips.append(sid)
                        return True

                    async def held(dd: Daemon, sid: str, rid: str, how: str) -> bool:
                        """Wait until the run of input ``rid`` is held in a model stream (``stream``),
                        in its ``sleep_milliseconds`` call (``call``) or its subagent's (``subagent``):
                        True; or until it ended first: False. (An automatic compaction before its first
                        request puts the input into the summary, and the faux model, which reads the
                        summary, holds nothing: see docs/decisions.md on the newest input summarized.)"""
                        outcome: list[bool] = []

                        async def inside() -> bool:
                            events = await dd.events(token, sid)
                            task = next((e["task_id"] for e in events if e["kind"] == "input.placed"
                                         and e["body"]["input_request_id"] == rid), None)
                            if task is not None and any(e["kind"] == "task.finished" and e["task_id"] == task
                                                        for e in events):
                                outcome.append(False)
                                return True
                            ended = {e["body"]["call_id"] for e in events if e["kind"] == "tool.finished"}
                            if how == "stream":  # (the first chunk streamed, the second held)
                                now = task is not None and events[-1]["kind"] == "model.requested"
                            else:
                                now = any(e["kind"] == "tool.started" and e["task_id"] == task
                                          and e["agent_id"].startswith("sub_" if how == "subagent" else "main")
                                          and e["body"]["name"] == "sleep_milliseconds"
                                          and e["body"]["call_id"] not in ended for e in events)
                            if now:
                                outcome.append(True)
                            return now
                        await wait_until(inside, what=f"{sid} inside a {how} (input {rid})")
                        return outcome[-1]

                    async def compacting(dd: Daemon, sid: str) -> bool:
                        """Hold ``sid`` in a manual compaction's summarizing request (the hold model
                        never answers it): two compactions asked at once, until one is answered
                        ``SESSION_BUSY`` — the other is then under way. Their requests end with the
                        daemon (a SIGTERM cuts the summary off; a kill -9 leaves no answer)."""
                        r = await dd.request("PATCH", f"/sessions/{sid}", token, json_body={"model": HOLD_MODEL})
                        if r.status_code != 200:
                            violations.append(f"PATCH model of {sid}: {r.status_code} {r.text}")
                            return False
                        holding.add(sid)
                        busy = trio.Event()

                        async def compact() -> None:
                            try:
                                r = await dd.post(f"/sessions/{sid}/compact", token)
                            except httpx2.TransportError:  # (the kill -9 met it)
                                return
                            if error_of(r) == "SESSION_BUSY":
                                busy.set()
                            elif r.status_code != 503 or error_of(r) != "SESSION_UNAVAILABLE":  # (a SIGTERM: cut off)
                                violations.append(f"a compaction the restart met: {r.status_code} {r.text}")
                        for _ in range(2):
                            readers.start_soon(compact)
                        with trio.move_on_after(LIMIT) as waited:
                            await busy.wait()
                        if waited.cancelled_caught:
                            violations.append(f"{sid}: neither of two compactions at once was answered SESSION_BUSY")
                            return False
                        return True

                    async def aim(dd: Daemon, how: str, sid: str, step: int) -> bool:
                        """Hold ``sid`` inside a model stream, a tool call or a subagent's call, so
                        that the restart lands in the middle of it (left busy: aborted later). False
                        when its run ended first (see :func:`held`)."""
                        if how == "compaction":
                            return await compacting(dd, sid)
                        left_busy.add(sid)
                        rid = await submit_as(f"r{step}.aim", sid, BUSY if how == "call" else f"note {step}: " + (
                            "STREAMHOLD" if how == "stream" else "ENTRUST"))
                        if not await held(dd, sid, rid, how):
                            left_busy.discard(sid)
                            return False
                        return True

                    async def restart(dd: Daemon, step: int, stop_signal: signal.Signals, n: int) -> Daemon:
                        """The restart (graceful, or a kill -9), with whatever runs then still running
                        and an input sent to every session (kill -9, or several restarts: to half of
                        them) as the signal is; then the checks the log allows while no daemon runs."""
                        nonlocal serve, children
                        current.up = trio.Event()
                        assert serve.proc is not None
                        sent_to = sessions
                        kept: dict[str, Any] = {}  # the Working Contexts of the settled others
                        if stop_signal == signal.SIGKILL or variant == "restarts":
                            sent_to = rng.sample(sessions, len(sessions) // 2)
                            how = rng.choice(AIMS) if variant == "restarts" else "between"
                            calm = [sid for sid in sessions if sid not in sent_to and sid not in left_busy
                                    and await settled(dd, sid)]
                            if variant == "restarts" and calm:  # (compared across the restart below)
                                await snip_across_a_snapshot(dd, calm.pop(0), step)
                            if how != "between" and calm:
                                held = await aim(dd, how, calm.pop(0), step)
                                aims.append((n, stop_signal.name, how if held else f"{how} (ended first)"))
                            for sid in sessions:
                                if (sid not in sent_to and sid not in left_busy and sid not in holding
                                        and await settled(dd, sid)):
                                    kept[sid] = await contexts(dd, token, sid)
                        async with trio.open_nursery() as inflight:
                            for i, sid in enumerate(sent_to):
                                inflight.start_soon(submit_as, f"r{step}.stop.{i}", sid,
                                                    f"note {step}.{i}: sent as the daemon stops")
                            await trio.sleep(0)
                            serve.proc.send_signal(stop_signal)
                            with trio.fail_after(LIMIT):
                                code = await serve.proc.wait()
                                await serve.stdout_closed.wait()
                            serve.stderr.close()
                            if code != (0 if stop_signal == signal.SIGTERM else -signal.SIGKILL):
                                violations.append(f"{stop_signal.name} (restart {n}): lens serve exited {code}")
                            if stop_signal == signal.SIGTERM:
                                left = {p for p in children if alive(p)}
                                if left:
                                    violations.append(f"left running after the stop {n}: {sorted(left)}")
                            if variant == "restarts":  # what the log says between two daemons
                                verify = await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)
                                if verify.returncode != 0:
                                    violations.append(f"lens log verify after stop {n}: {verify.stdout[-300:]}")
                                now = await decode(tmp_path)
                                if [e["seq"] for e in now] != list(range(1, len(now) + 1)):
                                    violations.append(f"seqs not gap-free after stop {n}")
                                for sid, rid in list(accepted):
                                    count = sum(1 for e in now if e["kind"] == "input.submitted"
                                                and e["session_id"] == sid and e["request_id"] == rid)
                                    if count != 1:
                                        violations.append(f"after stop {n}: requestId {rid} of {sid}: {count} submissions")
                            # every projection against a rebuild from zero, here and not only at the end
                            violations.extend(await projections_against_a_rebuild(tmp_path, "data", f"stop-{n}"))
                            rebuilds_compared.append(f"stop {n}")
                            serve, new = await start(tmp_path, nursery, n + 1, started)
                            current.d = new
                            current.up.set()
                            for sid in sorted(holding):  # (its later compactions answer again)
                                r = await new.request("PATCH", f"/sessions/{sid}", token, json_body={"model": None})
                                if r.status_code != 200:
                                    violations.append(f"PATCH model of {sid}: {r.status_code} {r.text}")
                            holding.clear()
                            compared.extend(kept)
                            for sid, before in kept.items():  # a restart replays context edits the same
                                after = await contexts(new, token, sid)
                                if strip_config(after) != strip_config(before):
                                    violations.append(f"{sid}: the Working Context differs after restart {n} "
                                                      f"({'snipped before it' if sid in snips else 'settled'}): "
                                                      f"{context_diff(strip_config(before), strip_config(after))}")
                        await dd.client.aclose()
                        return new

                    if variant == "restarts":  # which steps, and which signal at each (both kinds)
                        stops = dict(zip(sorted(rng.sample(range(2, STEPS), len(RESTART_KINDS))),
                                         rng.sample(RESTART_KINDS, len(RESTART_KINDS))))
                    else:
                        stops = {STEPS // 2: stop_signal}
                    # once with the daemon running, at a step no restart is at (the copies are read
                    # transactions of their own, the projections' copy caught up to the log's)
                    live_check = next(s for s in range(STEPS // 4, STEPS) if s not in stops)
                    for step in range(STEPS):
                        dd = current.d
                        assert dd is not None
                        if step in stops:
                            dd = await restart(dd, step, stops[step], sorted(stops).index(step))
                        if step == live_check:
                            violations.extend(await projections_against_a_rebuild(tmp_path, "data", f"step-{step}"))
                            rebuilds_compared.append(f"step {step} (running)")
                        # a batch of operations at once, on distinct sessions; all drawn before any runs
                        batch = [(rng.choice(ops_drawn), sid, random.Random(rng.random()))
                                 for sid in rng.sample(sessions, min(len(sessions), rng.randint(1, BATCH)))]
                        repeatable = sorted(accepted, key=lambda a: a[1])
                        forks: dict[int, str] = {}
                        if serve.proc is not None:
                            children |= descendants(serve.proc.pid)
                        async with trio.open_nursery() as ops:
                            for index, (op, sid, orng) in enumerate(batch):
                                ops_seen[op] = ops_seen.get(op, 0) + 1
                                ops.start_soon(run_op, dd, op, sid, step, orng, repeatable, forks, index)
                        sessions[:] = [s for s in sessions if s not in deleted]
                        sessions.extend(forks[i] for i in sorted(forks))  # (in the batch's order, not the answers')

                    d = current.d
                    assert d is not None
                    for sid in sorted(asking):
                        await answer_open(d, sid)
                    for sid in sorted(left_busy):
                        r = await d.post(f"/sessions/{sid}/abort", token)
                        if r.status_code != 200:
                            violations.append(f"abort of a run left busy: {r.status_code} {r.text}")
                    # every session ends idle (or awaiting an answer), nothing queued
                    async def unsettled() -> dict[str, str]:
                        """The sessions not yet idle (or awaiting an answer) with nothing queued and
                        every job ended, and why (events first: a job's end queues its report)."""
                        out = {}
                        for sid in project_of:
                            events = await d.events(token, sid)
                            jobs = {e["body"]["job_id"] for e in events if e["kind"] == "job.started"}
                            jobs -= {e["body"]["job_id"] for e in events if e["kind"] == "job.finished"}
                            v = await d.view(token, sid)
                            ends = ("idle", "awaiting_answer") if sid not in deleted else ("deleted",)
                            if jobs or v["status"] not in ends or v["queued"]:
                                out[sid] = (f"status {v['status']}, queued {v['queued']}, jobs running {sorted(jobs)}, "
                                            f"deleted {sid in deleted}, last events "
                                            f"{[(e['seq'], e['kind']) for e in events[-4:]]}")
                        return out

                    try:
                        await wait_until(lambda: _none(unsettled()), timeout=20, what="every session settled")
                    except AssertionError:
                        violations.extend(f"{sid} did not settle: {why}" for sid, why in (await unsettled()).items())

                    # every client caught up with the log's end for its filter, then stopped
                    log = await decode(tmp_path)
                    expected = {
                        "all": [(e["seq"], e["kind"]) for e in log],
                            "project": [(e["seq"], e["kind"]) for e in log if e["project_id"] == projects[0]],
                        "session": [(e["seq"], e["kind"]) for e in log if e["session_id"] == sessions[0]],
                    }
                    for c in clients:
                        want = expected[c.name]

                        async def caught_up(c: Client = c, want: list[int] = want) -> bool:
                            return not want or (c.last is not None and c.last >= want[-1][0])
                        try:
                            await wait_until(caught_up, what=f"SSE client {c.name} at the log's end")
                        except AssertionError as exc:
                            violations.append(str(exc))
                    readers.cancel_scope.cancel()

                for c in clients:
                    got = [s for s, _ in c.seen]
                    want = [s for s, _ in expected[c.name]]
                    if got == want and c.seen != expected[c.name]:
                        violations.append(f"SSE client {c.name}: the kinds differ from the log's")
                    if got != want:
                        dup = sorted({s for s in got if got.count(s) > 1})
                        missing = sorted(set(want) - set(got))
                        extra = sorted(set(got) - set(want))
                        disorder = [b for a, b in zip(got, got[1:]) if b <= a]
                        violations.append(f"SSE client {c.name} ({c.connects} connections): duplicates {dup[:10]}, "
                                          f"missing {missing[:10]}, not in its filter {extra[:10]}, "
                                          f"out of order {disorder[:10]}")
                    if any("UNAVAILABLE" not in r for r in c.refusals):
                        violations.append(f"SSE client {c.name} refused: {c.refusals}")
                    if c.connects < 3:
                        violations.append(f"SSE client {c.name} connected only {c.connects} times")
                for sid in project_of:
                    got = [e["seq"] for e in await d.events(token, sid)]
                    if got != [e["seq"] for e in log if e["session_id"] == sid]:
                        violations.append(f"GET /sessions/{sid}/events differs from lens log decode")

                # every accepted requestId is one submission in its session
                for sid, rid in accepted:
                    count = sum(1 for e in log if e["kind"] == "input.submitted"
                                and e["session_id"] == sid and e["request_id"] == rid)
                    if count != 1:
                        violations.append(f"requestId {rid} of {sid}: {count} submissions")

                # every call, job and input that began ended once: a call finished, a job finished, an input
                # placed or withdrawn (whatever the restart met)
                for sid in project_of:
                    own = [e for e in log if e["session_id"] == sid]
                    for begin, end, key in [("tool.started", "tool.finished", "call_id"),
                                            ("job.started", "job.finished", "job_id")]:
                        ends = [e["body"][key] for e in own if e["kind"] == end]
                        for e in own:
                            if e["kind"] == begin and ends.count(e["body"][key]) != 1:
                                violations.append(f"{sid}: {begin} {e['body'][key]} (seq {e['seq']}) has "
                                                  f"{ends.count(e['body'][key])} {end}")
                    tasks = [e["task_id"] for e in own if e["kind"] == "task.finished"]
                    for e in own:  # (a run the kill met: recorded as interrupted by the restart)
                        if e["kind"] == "task.started" and tasks.count(e["task_id"]) != 1:
                            violations.append(f"{sid}: task {e['task_id']} (seq {e['seq']}) finished "
                                              f"{tasks.count(e['task_id'])} times")
                    # a subagent's events and usage are its own: each call runs under the agent whose
                    # answer asked for it; each agent's usage is its answers', the session's their sum
                    caller = {c["call_id"]: e["agent_id"] for e in own if e["kind"] == "model.responded"
                              for c in e["body"]["tool_calls"]}
                    for e in own:
                        if e["kind"] == "tool.started" and caller.get(e["body"]["call_id"], e["agent_id"]) != e["agent_id"]:
                            violations.append(f"{sid}: call {e['body']['call_id']} asked by "
                                              f"{caller[e['body']['call_id']]} ran as {e['agent_id']}")
                    for e in own:
                        if e["kind"] == "agent.started" and e["body"]["role"] == "subagent" and (
                                e["agent_id"] != f"sub_{e['body']['parent_call_id']}"
                                or caller.get(e["body"]["parent_call_id"]) != e["body"]["parent_agent_id"]):
                            violations.append(f"{sid}: subagent {e['agent_id']} of call {e['body']['parent_call_id']}")
                    # a subagent ends once, and its parent's call (ended once, above) carries its
                    # answer; a subagent's own ``subagent`` call is refused (main-only), never nested
                    for e in own:
                        if e["kind"] != "agent.started" or e["body"]["role"] != "subagent":
                            continue
                        sub = e["agent_id"]
                        ends = [f for f in own if f["kind"] == "agent.finished" and f["agent_id"] == sub]
                        if len(ends) != 1:
                            violations.append(f"{sid}: subagent {sub} finished {len(ends)} times")
                        results = [f["body"] for f in own if f["kind"] == "tool.finished"
                                   and f["body"]["call_id"] == e["body"]["parent_call_id"]]
                        if (len(ends) == 1 and len(results) == 1 and ends[0]["body"]["status"] == "completed"
                                and (results[0].get("structured_content") or {}).get("result") != ends[0]["body"]["result"]):
                            violations.append(f"{sid}: subagent {sub}'s answer is not its parent's call's result")
                        if e["body"]["parent_agent_id"] != "main":
                            violations.append(f"{sid}: subagent {sub} started by {e['body']['parent_agent_id']}")
                    for e in own:
                        if (e["kind"] == "tool.finished" and e["body"]["name"] == "subagent"
                                and e["agent_id"] != "main" and e["body"].get("error_code") != "TOOL_MAIN_ONLY"):
                            violations.append(f"{sid}: a subagent's subagent call ended {e['body']}"[:400])
                    view = await d.view(token, sid)
                    for agent in view["agents"]:
                        answered = [e["body"]["usage"] for e in own if e["agent_id"] == agent["agentId"]
                                    and e["kind"] in USAGE_KINDS and e["body"].get("usage") is not None]
                        want = (len(answered), sum(u.get("input_tokens") or 0 for u in answered))
                        got = (agent["usage"]["requests"], agent["usage"]["inputTokens"] or 0)
                        if got != want:
                            violations.append(f"{sid}: usage of {agent['agentId']} is {got}, its answers' {want}")
                    total = (sum(a["usage"]["requests"] for a in view["agents"]),
                             sum(a["usage"]["inputTokens"] or 0 for a in view["agents"]))
                    if (view["usage"]["requests"], view["usage"]["inputTokens"] or 0) != total:
                        violations.append(f"{sid}: session usage {view['usage']} is not its agents' sum {total}")
                    settled_inputs = [e["body"]["input_request_id"] for e in own
                                      if e["kind"] in ("input.placed", "input.withdrawn")]
                    for e in own:
                        if e["kind"] == "input.submitted" and settled_inputs.count(e["request_id"]) != 1:
                            violations.append(f"{sid}: input {e['request_id']} (seq {e['seq']}) was placed or "
                                              f"withdrawn {settled_inputs.count(e['request_id'])} times")

                await projections_caught_up(d)
                live = await answers(d, token, project_of)
                assert serve.proc is not None
                children |= descendants(serve.proc.pid)
                mcp = [p for p in processes() if p.pid in children and SERVER.encode() in p.argv]
                executors = [p for p in processes() if p.pid in children and b"executor" in p.argv]
                if not mcp or not executors:  # (a project's executor starts with its first tool call)
                    violations.append(f"the daemon's children were not all seen: mcp {mcp}, executors {executors}")
                code = await serve.terminate()
                await d.client.aclose()
                if code != 0:
                    violations.append(f"the last stop: lens serve exited {code}")
                # no executor or command left running (bounded: a child's own exit follows its parent's)
                async def all_gone() -> bool:
                    return not running_in(tmp_path) and not [p for p in children if alive(p)]
                try:
                    await wait_until(all_gone, timeout=5, what="no process left")
                except AssertionError:
                    violations.append(f"left running after the stop: {[p for p in children if alive(p)]} "
                                      f"{[(p.pid, p.argv) for p in running_in(tmp_path)]}")
                verify = await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)
                if verify.returncode != 0:
                    violations.append(f"lens log verify: {verify.stdout[-500:]} {verify.stderr[-500:]}")

                # the projections equal a rebuild from the log, as a user reads them
                shutil.copytree(tmp_path / "data", tmp_path / "rebuilt")
                await run_lens(tmp_path, "log", "rebuild", "--data", "rebuilt")
                serve2, d2 = await start(tmp_path, nursery, 2, started, data="rebuilt")
                d2.data_dir = tmp_path / "rebuilt"
                await projections_caught_up(d2)
                rebuilt = await answers(d2, token, project_of)
                for key in live:
                    if live[key] != rebuilt.get(key):
                        violations.append(f"after a rebuild {key} differs: {live[key]!r:.300} != {rebuilt.get(key)!r:.300}")
                await serve2.terminate()
                await d2.client.aclose()
                nursery.cancel_scope.cancel()
    finally:  # (a failed run leaves no daemon behind)
        for serve in started:
            serve.kill()
            if not serve.stderr.closed:
                serve.stderr.close()
    print(f"{trio.current_time() - t0:.1f} s; ops: {sorted(ops_seen.items())}; events {len(log)}; sessions {len(project_of)}, deleted {len(deleted)}; "
          f"connections {[c.connects for c in clients]}; dropped {[c.dropped for c in clients]}; "
          f"retried {len(retried)}; contexts compared across a restart {len(compared)}; "
          f"snipped then snapshotted {len(snips)}; restarts aimed {aims}; rebuilt mid-run {rebuilds_compared}; "
          f"compactions {sorted(e['body']['trigger'] for e in log if e['kind'] == 'context.compacted')}; "
          f"edits {sorted(e['body']['op'] for e in log if e['kind'] == 'context.edited')}; "
          f"subagents {[e['body']['status'] for e in log if e['kind'] == 'agent.finished']}; "
          f"nested refused {sum(1 for e in log if e['kind'] == 'tool.finished' and e['body'].get('error_code') == 'TOOL_MAIN_ONLY')}; "
          f"calls interrupted {sum(1 for e in log if e['kind'] == 'tool.finished' and e['body']['status'] == 'interrupted')}")
    assert not violations, "\n".join(violations)
