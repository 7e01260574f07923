"""The soak's aim at an automatic compaction: a real ``lens serve`` whose model is a loopback
Anthropic Messages server (the official SDK speaking the real wire protocol), one session per aim
given a context budget that its Working Context crosses at a known input, and the summarizing
request that input starts held at the server while the schedule does one thing:

- ``restart``: a steer is queued, then the daemon is stopped (SIGTERM in the ``sigterm``
  variant, kill -9 in ``kill9``) with the summarizing request in flight, and a new one started
  on the same data directory;
- ``steer``: an input is steered in, then the summary is let through;
- ``abort``: inputs are queued behind (a follow-up, a steer), then the run is aborted;
- ``snip``: the input being summarized is snipped, then the summary is let through (it is of
  another context: not used).

After each, and at the end: the compaction happened once or not at all (a held one that the
restart or the abort met: not at all; the next input's compaction: once), the Working Context
agrees with the log (no item a compaction replaced is visible, the summary is), every accepted
input is in the log once and placed or withdrawn once, and the inputs not answered yet are kept
as written: the summarizing requests never carry them, and the first request after the summary
reads them verbatim after it. ``lens log verify`` passes between the daemons and at the end, and
every projection equals a rebuild from zero after the restart and at the end.

A summarizing request is held before its first event, or after its first events (the usage
among them: a cut-off one is recorded with what it used) — the restart's and the abort's one of
each, the other in the other variant. What every request used counts once in the session's
usage. The order of the aims and the words of the inputs are drawn from :data:`SEED`;
everything waited for is read from the server or the log (no sleep orders anything).
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from runtime.working_context import COMPACTION_SYSTEM

from ..providers.servers.base import Received, Reply, ScriptedServer
from ..providers.servers.anthropic import message_stream
from .conftest import LIMIT, Daemon, ServeProcess, as_daemon, projections_caught_up, run_lens
from .rebuild_check import projections_against_a_rebuild

SEED = int(os.environ.get("LENS_SOAK_SEED", "20261203"))
WINDOW = 20000  # the model's window; a session's budget is a trigger percent of it (granularity: 200 tokens)
AIMS = ["restart", "steer", "abort", "snip"]
# how many compactions each aim's session ends with: the one the restart or the abort met not at
# all, the next input's once; the steered one once; the one whose context was snipped while it
# was summarized not at all (its summary is of another context), and the snip brings the
# context below the budget
COMPACTIONS = {"restart": 1, "steer": 1, "abort": 1, "snip": 0}
WORDS = ["quokka", "wombat", "numbat", "bilby", "dingo", "echidna", "possum", "quoll", "kiwi", "kea"]
# the events whose (provider-reported) usage counts in the session's usage
USAGE_KINDS = ("model.responded", "model.failed", "model.cut_off", "context.compacted", "context.compaction_failed")
VARIANTS = {"sigterm": signal.SIGTERM, "kill9": signal.SIGKILL}


def message_texts(body: dict[str, Any]) -> list[str]:
    """The text of each text block of a Messages request's messages, in order."""
    out = []
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        else:
            out.extend(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return out


def summarizing(body: Any) -> bool:
    return isinstance(body, dict) and COMPACTION_SYSTEM in json.dumps(body.get("system"))


class LoopbackModel:
    """What the loopback server answers: a summarizing request a summary (held until ``hold`` is
    set, or its client goes away, while ``hold`` is an event; held after its first events, the
    usage among them, until its client goes away while ``stall``), any other request a short
    text. ``summarizing`` is set when a summarizing request arrives."""

    def __init__(self) -> None:
        self.summarizing = trio.Event()
        self.hold: trio.Event | None = None
        self.stall = False
        self.summaries = 0
        self.answers = 0

    def __call__(self, r: Received) -> Reply:
        if summarizing(r.body):
            self.summaries += 1
            self.summarizing.set()
            reply = message_stream(text=f"SUMMARY {self.summaries}: notes on marsupials.",
                                   usage={"input_tokens": 300, "output_tokens": 1}, stall_after=2 if self.stall else None)
            reply.gate = self.hold
            return reply
        self.answers += 1
        return message_stream(text=f"noted {self.answers}", usage={"input_tokens": 60, "output_tokens": 1})


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_an_automatic_compaction_met_by_a_restart_a_steer_an_abort_and_a_snip(
        tmp_path: Path, variant: str, nursery: trio.Nursery) -> None:
    stop_signal = VARIANTS[variant]
    rng = random.Random(SEED)
    aims = rng.sample(AIMS, len(AIMS))
    model = LoopbackModel()
    server = ScriptedServer(model)
    url = await server.start(nursery)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({
        "providers": [{"id": "gate", "protocol": "anthropic", "baseUrl": url, "maxRetries": 0,
                       "models": [{"id": "small", "contextWindow": WINDOW}]}],
        "defaultModel": "gate/small",
        # (a snapshot every few events, idle actors passivated: wake-ups fold a snapshot and a tail)
        "sessions": {"snapshotEvery": 2, "idleSeconds": 1}}))
    violations: list[str] = []
    started: list[ServeProcess] = []
    accepted: dict[str, list[str]] = {}  # session -> requestIds answered 202
    texts: dict[str, str] = {}  # requestId -> the input's text
    unanswered: dict[str, list[str]] = {}  # session -> the inputs the summary must not have replaced
    withdrawn: dict[str, list[str]] = {}  # session -> the inputs the abort withdrew
    holds: dict[str, str] = {}  # aim -> where its summarizing request was held

    async def start(n: int) -> tuple[ServeProcess, Daemon]:
        serve = ServeProcess(tmp_path, "--data", "data", stderr_name=f"serve-{n}.err")
        started.append(serve)
        base = await serve.run(nursery)
        return serve, as_daemon(tmp_path, base, httpx2.AsyncClient(base_url=base, timeout=LIMIT))

    try:
        with trio.fail_after(100):
            serve, d = await start(0)
            token = await d.pair("soak", strong=True)
            project = (await d.project(token, "p"))["id"]
            sessions = {aim: (await d.session(token, project))["id"] for aim in aims}

            async def submit(sid: str, rid: str, text: str, **kw: Any) -> None:
                r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": rid, "content": text, **kw})
                if r.status_code != 202 or r.json()["duplicate"]:
                    violations.append(f"submit {rid}: {r.status_code} {r.text}")
                    return
                accepted.setdefault(sid, []).append(rid)
                texts[rid] = text

            async def context(sid: str) -> dict[str, Any]:
                r = await d.get(f"/sessions/{sid}/context", token)
                assert r.status_code == 200, r.text
                return r.json()

            async def budget_crossed_by_the_next_input(aim: str, sid: str) -> None:
                """An answered input of some 1,500 tokens, then a budget (a trigger percent of the
                window) that the Working Context is at already: the next input's request compacts
                first. What a compaction keeps (system prompt, schemas) stays below it."""
                filler = " ".join(rng.choice(WORDS) for _ in range(1200))
                await submit(sid, f"{aim}.a", f"[{aim}] a long note: {filler}")
                await settle(sid)
                ctx = await context(sid)
                percent = ctx["estimatedTokens"] * 100 // WINDOW
                r = await d.request("PATCH", f"/sessions/{sid}", token,
                                    json_body={"autoCompaction": True, "compactionTriggerPercent": percent})
                assert r.status_code == 200, r.text
                threshold = (await context(sid))["compactionThreshold"]
                assert ctx["estimatedTokens"] - 1000 < threshold <= ctx["estimatedTokens"], (ctx, threshold)

            async def in_flight(aim: str, sid: str) -> None:
                """The input that crosses the budget sent; returns once its summarizing request is
                at the server, held there."""
                # (the steer's is let through later; the others' are held before their first event
                # or after it, the usage in it, until the restart or the abort ends the request)
                model.summarizing = trio.Event()
                mid_stream = aim in ("restart", "abort") and (aim == "restart") == (variant == "sigterm")
                model.hold, model.stall = (None, True) if mid_stream else (trio.Event(), False)
                holds[aim] = "mid-stream" if mid_stream else "before its first event"
                await submit(sid, f"{aim}.b", f"[{aim}] note b: which marsupial was named first?")
                unanswered[sid] = [f"{aim}.b"]
                with trio.fail_after(LIMIT):
                    await model.summarizing.wait()

            async def settle(sid: str) -> None:
                # (a model's first answer in a new daemon waits for its SDK's import: seconds
                # on a loaded machine, hence more than one wait's usual bound)
                try:
                    await d.wait_idle(token, sid, timeout=3 * LIMIT)
                except AssertionError as exc:
                    events = await d.events(token, sid)
                    violations.append(f"{exc}: last events {[(e['seq'], e['kind']) for e in events[-5:]]}")
                except httpx2.TransportError as exc:
                    assert serve.proc is not None
                    err = (tmp_path / f"serve-{len(started) - 1}.err").read_text(errors="replace")
                    raise AssertionError(f"{exc!r} from the daemon (exit {serve.proc.returncode}): "
                                         f"{err[-2000:]}") from exc

            async def compacts_once_more(aim: str, sid: str) -> None:
                """Another input, whose request compacts first (the summary answered at once)."""
                model.hold, model.stall = None, False
                await submit(sid, f"{aim}.c", f"[{aim}] note c: and which one last?")
                unanswered[sid].append(f"{aim}.c")
                await settle(sid)

            for aim in aims:
                sid = sessions[aim]
                await budget_crossed_by_the_next_input(aim, sid)
                await in_flight(aim, sid)
                if aim == "restart":  # (with a steer queued behind the compaction)
                    await submit(sid, f"{aim}.s", f"[{aim}] note s: steer towards the kiwi", whenBusy="steer")
                    unanswered[sid].append(f"{aim}.s")
                    assert serve.proc is not None
                    serve.proc.send_signal(stop_signal)
                    with trio.fail_after(LIMIT):
                        code = await serve.proc.wait()
                        await serve.stdout_closed.wait()
                    serve.stderr.close()
                    await d.client.aclose()
                    if code != (0 if stop_signal == signal.SIGTERM else -signal.SIGKILL):
                        violations.append(f"{stop_signal.name}: lens serve exited {code}")
                    verify = await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)
                    if verify.returncode != 0:
                        violations.append(f"lens log verify after the stop: {verify.stdout[-300:]}")
                    violations.extend(await projections_against_a_rebuild(tmp_path, "data", "stop"))
                    model.hold, model.stall = None, False  # (the next daemon's summaries are answered at once)
                    serve, d = await start(1)
                    await settle(sid)
                    await compacts_once_more(aim, sid)
                elif aim == "snip":  # the summarized input snipped while it is summarized
                    r = await d.get(f"/sessions/{sid}/context", token)
                    first = r.json()["workingItemIds"][0]
                    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [first]})
                    if r.status_code != 200:
                        violations.append(f"snip during a compaction: {r.status_code} {r.text}")
                    assert model.hold is not None
                    model.hold.set()
                    await settle(sid)
                elif aim == "steer":
                    await submit(sid, f"{aim}.s", f"[{aim}] note s: steer towards the bilby", whenBusy="steer")
                    unanswered[sid].append(f"{aim}.s")
                    assert model.hold is not None
                    model.hold.set()
                    await settle(sid)
                else:  # (a follow-up and a steer queued behind it: the abort withdraws both)
                    await submit(sid, f"{aim}.f", f"[{aim}] note f: queued behind the compaction")
                    await submit(sid, f"{aim}.s", f"[{aim}] note s: steer towards the quoll", whenBusy="steer")
                    withdrawn[sid] = [f"{aim}.f", f"{aim}.s"]
                    r = await d.post(f"/sessions/{sid}/abort", token)
                    if r.status_code != 200 or sorted(r.json().get("withdrawn", [])) != withdrawn[sid]:
                        violations.append(f"abort during a compaction: {r.status_code} {r.text}")
                    await settle(sid)
                    await compacts_once_more(aim, sid)

            await projections_caught_up(d)
            for aim in aims:
                violations.extend(await consistent(d, token, aim, sessions[aim], accepted, texts, unanswered,
                                                   withdrawn, server))
            code = await serve.terminate()
            await d.client.aclose()
            if code != 0:
                violations.append(f"the last stop: lens serve exited {code}")
            verify = await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)
            if verify.returncode != 0:
                violations.append(f"lens log verify: {verify.stdout[-300:]} {verify.stderr[-300:]}")
            violations.extend(await projections_against_a_rebuild(tmp_path, "data", "end"))
    finally:
        for serve in started:
            serve.kill()
            if not serve.stderr.closed:
                serve.stderr.close()
    print(f"aims {aims}; held {holds}; summarizing requests {model.summaries}; answers {model.answers}")
    assert not violations, "\n".join(violations)


async def consistent(d: Daemon, token: str, aim: str, sid: str, accepted: dict[str, list[str]],
                     texts: dict[str, str], unanswered: dict[str, list[str]], withdrawn: dict[str, list[str]],
                     server: ScriptedServer) -> list[str]:
    """What must hold of the session ``aim`` was met in (see the module's docstring)."""
    out: list[str] = []
    events = await d.events(token, sid)
    for rid in accepted.get(sid, []):
        submitted = [e for e in events if e["kind"] == "input.submitted" and e["request_id"] == rid]
        settled = [e["kind"] for e in events if e["kind"] in ("input.placed", "input.withdrawn")
                   and e["body"]["input_request_id"] == rid]
        if len(submitted) != 1 or len(settled) != 1:
            out.append(f"{aim}: input {rid} submitted {len(submitted)} times, placed or withdrawn {settled}")
        elif (rid in withdrawn.get(sid, [])) != (settled == ["input.withdrawn"]):
            out.append(f"{aim}: input {rid} {settled[0]}")
    tasks = [e["task_id"] for e in events if e["kind"] == "task.finished"]
    for e in events:
        if e["kind"] == "task.started" and tasks.count(e["task_id"]) != 1:
            out.append(f"{aim}: task {e['task_id']} finished {tasks.count(e['task_id'])} times")
    compacted = [e for e in events if e["kind"] == "context.compacted"]
    # what every request used counts once, a summarizing request cut off included
    answered = [e["body"]["usage"] for e in events if e["kind"] in USAGE_KINDS and e["body"].get("usage")]
    view = await d.view(token, sid)
    want = (len(answered), sum(u.get("input_tokens") or 0 for u in answered))
    if (view["usage"]["requests"], view["usage"]["inputTokens"] or 0) != want:
        out.append(f"{aim}: usage {view['usage']}, its events' {want}")
    r = await d.get(f"/sessions/{sid}/context", token)
    ctx = r.json()
    if len(compacted) != COMPACTIONS[aim] or ctx["compactions"] != COMPACTIONS[aim]:
        out.append(f"{aim}: {len(compacted)} compactions in the log, {ctx['compactions']} in the Working Context, "
                   f"not {COMPACTIONS[aim]}")
    replaced = {i for e in compacted for i in e["body"]["replaced_item_ids"]}
    if replaced & set(ctx["workingItemIds"]):
        out.append(f"{aim}: replaced items still in the Working Context: {sorted(replaced & set(ctx['workingItemIds']))}")
    for e in compacted:
        if f"c{e['seq']}" not in ctx["workingItemIds"]:
            out.append(f"{aim}: the summary c{e['seq']} is not in the Working Context {ctx['workingItemIds']}")
    # the inputs not answered when the summary was written: never summarized, read verbatim after it
    # (with those placed after it, a steer, before the next request: whichever of them were placed)
    placed = {e["body"]["input_request_id"]: e["seq"] for e in events if e["kind"] == "input.placed"}
    next_request = min((e["seq"] for e in events if e["kind"] == "model.requested" and compacted
                        and e["seq"] > compacted[0]["seq"]), default=None)
    kept = [texts[rid] for rid in unanswered.get(sid, []) if next_request is not None
            and placed.get(rid, next_request) < next_request]
    if compacted and not kept:
        out.append(f"{aim}: no input of the compacted task was read after its summary")
    asked = [r.body for r in server.requests if isinstance(r.body, dict) and any(
        f"[{aim}]" in t for t in message_texts(r.body))]
    for body in asked:
        if summarizing(body) and any(k in t for t in message_texts(body) for k in kept):
            out.append(f"{aim}: a summarizing request carried an input not answered yet: {message_texts(body)[-3:]!r:.300}")
    after = [b for b in asked if not summarizing(b) and any("SUMMARY" in t for t in message_texts(b))]
    if not after:
        if COMPACTIONS[aim]:
            out.append(f"{aim}: no request read a summary")
    else:
        msgs = message_texts(after[0])
        at = next(i for i, t in enumerate(msgs) if "SUMMARY" in t)
        if [t for t in msgs[at + 1:] if t.startswith(f"[{aim}]")] != kept:
            out.append(f"{aim}: after the summary the model read {msgs[at + 1:]!r:.400}, not the inputs {kept!r}")
        if any(t.startswith(f"[{aim}] a long note") for t in msgs):
            out.append(f"{aim}: the summarized input was still read after the summary")
    return out
