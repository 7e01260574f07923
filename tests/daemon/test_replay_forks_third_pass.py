"""Replay, crash recovery, forks and session configuration, a third pass as a client drives them
(SPEC F-ACT-2, F-ACT-4, F-ACT-6, F-ACT-7): the daemon on a loopback port 0 with the ``faux``
provider and the real executor, stopped and started again on the same data directory, and
``lens serve`` as a process SIGKILLed once where the event stream shows it.

What earlier modules pin is not repeated (the next request byte for byte after a restart and a
passivation, kills inside calls, answers and subagents, forks at another session's seq, inside a
running call or subagent, at a call's result, of a fork at a seq it inherited, a configuration
sent while a request is in flight). Here, on one session that loaded a skill, ran a subagent,
called a tool, had its result snipped, was compacted, answered after the compaction and was
given another model and thinking level:

- every agent's ``GET …/context`` (Working Context ids, every item's mark, the estimate) is the
  same bytes after a restart, for the session and for forks made at each step of it;
- forks at the session's first event, at each event of the subagent's run, between a call and its
  result, at the snip, at the compaction, at the configuration change and at the last event hold
  the state as of that event (and nothing after it); one past the last is refused naming it;
- a fork at the last event has the source's contexts byte for byte; a fork of a fork made at its
  first event has its source's; a fork holding an interrupted subagent runs a turn of its own;
- model and thinking level along a chain of forks: a fork takes them as of its seq, a reset to the
  default (``null``) included, a fork of a deleted fork keeps them, and a restart keeps them all;
- the next model request (the Anthropic wire protocol, a loopback server) of that session live,
  after a restart and of a fork made at its last event: the same bytes;
- a fork between a subagent's call and its result: the call interrupted in the fork, nothing run
  again, not after a restart either;
- a model and thinking level sent while a subagent's command runs apply from the subagent's next
  request, and a fork at that change has them with the subagent interrupted;
- a kill while a subagent's answer streams, with a model change and a follow-up sent meanwhile:
  the subagent's request is asked again on the new model, the view and contexts are those of
  before the kill, and an abort keeps the second attempt's text once.

Every wait is a bounded poll of what the log, the view or the stream shows; nothing sleeps.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import trio

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import Daemon, error_of, serving, stop_daemon, wait_until
from .test_actors_acceptance import _copy_log

SUMMARY = "SUMMARY: the user keeps a quokka named Pim."
REVIEW = "---\nname: review\ndescription: review code\n---\nREVIEW-STEPS: read, then judge.\n"
RICH = {"providers": [{"id": "faux", "protocol": "faux",
                       "models": [{"id": "m1", "contextWindow": 50000}, {"id": "m2", "contextWindow": 50000}],
                       "script": [
    {"when": "Summarize the conversation so far", "text": SUMMARY},
    {"when": "load the review skill", "toolCalls": [{"name": "skill", "arguments": {"name": "review"}}]},
    {"when": "delegate", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBJOB tell the time"}}]},
    {"when": "SUBJOB", "text": "noon"},
    {"when": "call a tool", "toolCalls": [{"name": "get_system_time", "arguments": {}}]},
]}], "defaultModel": "faux/m1"}


def _of(events: list[dict[str, Any]], kind: str, agent: str | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind and (agent is None or e["agent_id"] == agent)]


async def _contexts(d: Daemon, token: str, sid: str) -> dict[str, bytes]:
    """Every agent's ``GET …/context`` of ``sid``, as the bytes the daemon sent."""
    out = {}
    for agent in [a["agentId"] for a in (await d.view(token, sid))["agents"]]:
        r = await d.get(f"/sessions/{sid}/context", token, params={"agentId": agent})
        assert r.status_code == 200, r.text
        out[agent] = r.content
    return out


def _marks(context: bytes) -> dict[str, str]:
    return {it["id"]: it["context"] for it in json.loads(context)["items"]}


async def _fork(d: Daemon, token: str, sid: str, seq: int, **extra: Any) -> dict[str, Any]:
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": seq, **extra})
    assert r.status_code == 201, (seq, r.text)
    return r.json()


async def _rich_session(d: Daemon) -> tuple[str, str]:
    """A strong credential and a session that loaded a skill, ran a subagent, called a tool, had
    that result snipped, was compacted, answered once more and was given model m2, thinking high."""
    token = await d.pair("third-pass", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW)
    sid = (await d.session(token, project["id"]))["id"]
    for rid, text in (("r1", "my quokka is Pim; load the review skill"), ("r2", "delegate"), ("r3", "call a tool")):
        await d.submit(token, sid, rid, text)
        await d.wait_idle(token, sid)
    call = [v for v in (await d.view(token, sid))["items"] if v["role"] == "tool_call"][-1]
    assert call["call"]["name"] == "get_system_time"
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [call["result"]["itemId"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    await d.submit(token, sid, "r4", "after compaction")
    await d.wait_idle(token, sid)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "high"})
    assert r.status_code == 200, r.text
    return token, sid


async def test_every_agents_context_and_each_forks_is_the_same_bytes_after_a_restart(daemon_factory):
    d = await daemon_factory(config=RICH)
    token, sid = await _rich_session(d)
    events = await d.events(token, sid)
    view = await d.view(token, sid)
    [sub] = [a["agentId"] for a in view["agents"] if a["role"] == "subagent"]
    source = await _contexts(d, token, sid)
    assert set(source) == {"main", sub}
    assert json.loads(source["main"])["compactions"] == 1

    first, last = events[0], events[-1]
    assert (first["kind"], last["kind"]) == ("session.created", "session.configured")
    [sub_started] = _of(events, "agent.started")
    sub_run = [e for e in events if e["agent_id"] == sub and e["kind"] != "agent.finished"]
    assert [e["kind"] for e in sub_run] == ["agent.started", "model.requested", "model.responded"]
    [clock] = [e for e in _of(events, "tool.started") if e["body"]["name"] == "get_system_time"]
    [snip] = _of(events, "context.edited")
    [compacted] = _of(events, "context.compacted")
    snipped_id = snip["body"]["item_ids"][0]

    forks: dict[str, dict[str, Any]] = {}
    # The first event: nothing but the session, on the model it was created with.
    forks["first"] = await _fork(d, token, sid, first["seq"])
    assert (forks["first"]["items"], forks["first"]["model"], forks["first"]["thinkingLevel"]) == ([], "faux/m1", None)
    assert [a["agentId"] for a in forks["first"]["agents"]] == ["main"]
    # Each event of the subagent's run: the subagent interrupted with what it had by then, the
    # parent's call interrupted, nothing of the call's result or what came after.
    for n, e in enumerate(sub_run):
        fork = forks[f"sub{n}"] = await _fork(d, token, sid, e["seq"])
        assert [(a["agentId"], a["status"], a["items"]) for a in fork["agents"]] == [
            ("main", "idle", 7), (sub, "interrupted", 1 if n < 2 else 2)], (e["kind"], fork["agents"])
        assert [it["call"]["status"] for it in fork["items"] if it["role"] == "tool_call"] == ["ok", "interrupted"]
        assert fork["forkedFrom"] == {"sessionId": sid, "seq": e["seq"]}
    # Between a call and its result: the call interrupted, the result nowhere.
    forks["call"] = await _fork(d, token, sid, clock["seq"])
    assert [it["call"]["status"] for it in forks["call"]["items"] if it["role"] == "tool_call"] == [
        "ok", "ok", "interrupted"]
    # The event before the snip, the snip, the compaction: each holds its own state.
    forks["before-snip"] = await _fork(d, token, sid, snip["seq"] - 1)
    forks["snip"] = await _fork(d, token, sid, snip["seq"])
    forks["compacted"] = await _fork(d, token, sid, compacted["seq"])
    contexts = {name: await _contexts(d, token, fork["id"]) for name, fork in forks.items()}
    assert _marks(contexts["before-snip"]["main"])[snipped_id] == "visible"
    assert _marks(contexts["snip"]["main"])[snipped_id] == "snipped"
    assert [json.loads(contexts[n]["main"])["compactions"] for n in ("snip", "compacted")] == [0, 1]
    assert json.loads(contexts["compacted"]["main"])["workingItemIds"][0] == f"c{compacted['seq']}"
    # The event before the configuration change and the change itself (the last event).
    forks["before-config"] = await _fork(d, token, sid, last["seq"] - 1)
    forks["last"] = await _fork(d, token, sid, last["seq"])
    assert [(forks[n]["model"], forks[n]["thinkingLevel"]) for n in ("before-config", "last")] == [
        ("faux/m1", None), ("faux/m2", "high")]
    contexts["last"] = await _contexts(d, token, forks["last"]["id"])
    assert contexts["last"] == source  # the whole state, every agent, byte for byte
    # One past the last event is no event of the session: refused naming it, nothing made.
    sessions = len((await d.get("/sessions", token)).json()["sessions"])
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": last["seq"] + 1})
    assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
    assert f"seq {last['seq'] + 1} " in r.json()["error"]["message"] and sid in r.json()["error"]["message"]
    assert len((await d.get("/sessions", token)).json()["sessions"]) == sessions
    # A fork of the fork inside the subagent's run, at that fork's first event: the same state.
    inner = forks["sub1"]["id"]
    [created] = await d.events(token, inner)
    forks["fork-of-sub1"] = await _fork(d, token, inner, created["seq"])
    contexts["fork-of-sub1"] = await _contexts(d, token, forks["fork-of-sub1"]["id"])
    assert contexts["fork-of-sub1"] == await _contexts(d, token, inner)
    # The fork holding the interrupted subagent runs a turn of its own; its subagent stays so.
    await d.submit(token, inner, "go", "call a tool")
    ran = await d.wait_idle(token, inner)
    assert [(a["agentId"], a["status"]) for a in ran["agents"]] == [("main", "idle"), (sub, "interrupted")]
    assert ran["items"][-1]["text"].startswith("The tool answered: ")
    contexts["sub1"] = await _contexts(d, token, inner)

    views = {name: await d.view(token, fork["id"]) for name, fork in forks.items()}
    views["source"] = view
    await stop_daemon(d)

    d = await daemon_factory(config=RICH, root=d.root)
    assert await _contexts(d, token, sid) == source
    for name, fork in forks.items():
        if name in contexts:
            assert await _contexts(d, token, fork["id"]) == contexts[name], name
        assert await d.view(token, fork["id"]) == views[name], name
    assert await d.view(token, sid) == views["source"]


async def test_model_and_thinking_level_along_a_chain_of_forks_a_reset_and_a_deletion(daemon_factory):
    d = await daemon_factory(config=RICH)
    token, sid = await _rich_session(d)
    configured = _of(await d.events(token, sid), "session.configured")[-1]
    # A reset to the default: the session has no model of its own (docs/decisions.md, "Session
    # runtime gaps left by earlier audits"); a fork after it has none either, one before keeps m2.
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": None, "thinkingLevel": None})
    assert r.status_code == 200 and (r.json()["model"], r.json()["thinkingLevel"]) == (None, None), r.text
    reset = _of(await d.events(token, sid), "session.configured")[-1]
    assert reset["body"]["reset"] == ["model", "thinking_level"]
    before = await _fork(d, token, sid, configured["seq"], name="on m2")
    after = await _fork(d, token, sid, reset["seq"])
    assert [(f["model"], f["thinkingLevel"]) for f in (before, after)] == [("faux/m2", "high"), (None, None)]

    # The fork on m2 changes only its thinking level: the source keeps its reset.
    r = await d.request("PATCH", f"/sessions/{before['id']}", token, json_body={"thinkingLevel": "low"})
    assert r.status_code == 200, r.text
    own = await d.events(token, before["id"])
    assert [e["kind"] for e in own] == ["session.created", "session.configured"]
    # A fork of that fork at each of its events, then the fork deleted and forked again at each of
    # its events (the deletion included): each takes the model and thinking level as of its seq.
    chain = [await _fork(d, token, before["id"], e["seq"]) for e in own]
    assert [(f["model"], f["thinkingLevel"], f["name"]) for f in chain] == [
        ("faux/m2", "high", None), ("faux/m2", "low", None)]
    r = await d.request("DELETE", f"/sessions/{before['id']}", token)
    assert r.status_code == 200, r.text
    own = await d.events(token, before["id"])
    assert [e["kind"] for e in own] == ["session.created", "session.configured", "session.deleted"]
    of_deleted = [await _fork(d, token, before["id"], e["seq"]) for e in own]
    assert [(f["model"], f["thinkingLevel"], f["deleted"], f["status"]) for f in of_deleted] == [
        ("faux/m2", "high", False, "idle"), ("faux/m2", "low", False, "idle"), ("faux/m2", "low", False, "idle")]
    assert all(f["items"] == before["items"] for f in of_deleted)
    # The fork of the deleted fork runs on m2 at thinking level low.
    runner = of_deleted[-1]["id"]
    await d.submit(token, runner, "go", "one more")
    await d.wait_idle(token, runner)
    [asked] = _of(await d.events(token, runner), "model.requested")
    assert (asked["body"]["model"], asked["body"]["thinking_level"]) == ("m2", "low")

    every = [sid, before["id"], after["id"], *(f["id"] for f in chain + of_deleted)]
    views = {s: await d.view(token, s) for s in every}
    await stop_daemon(d)
    d = await daemon_factory(config=RICH, root=d.root)
    for s in every:
        assert await d.view(token, s) == views[s], s
    # The reset source asks the default model chain as it stands (config defaultModel m1).
    await d.submit(token, sid, "r5", "after the reset")
    await d.wait_idle(token, sid)
    asked = _of(await d.events(token, sid), "model.requested")[-1]
    assert (asked["body"]["model"], asked["body"]["thinking_level"]) == ("m1", None)


# --------------------------------------------------------------------------- F-ACT-4: kill -9 mid-subagent answer

NAP = 600_000  # ms: longer than the test; only an abort ends it
SLOW_SUB = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1"}, {"id": "m2"}], "script": [
    {"when": "delegate slowly", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBSLOW answer"}}]},
    {"when": "SUBSLOW", "chunks": ["sub-alpha ", "sub-beta"], "chunkDelayMs": NAP},
]}], "defaultModel": "faux/m1"}


async def test_a_kill_while_a_subagents_answer_streams_asks_it_again_on_the_model_sent_meanwhile(tmp_path):
    # The subagent's request is open at the kill: the restart asks it again (attempt 2) on the
    # model and thinking level sent while it streamed; what streamed before the kill is kept
    # nowhere; the view (but its lastSeq) and every agent's context are those acknowledged before
    # the kill, the follow-up still queued; an abort then keeps the second attempt's text once.
    cwd = tmp_path / "serve"
    (cwd / "config").mkdir(parents=True)
    (cwd / "config" / "lens.jsonc").write_text(json.dumps(SLOW_SUB))
    async with serving(cwd, stderr_name="serve-0.err", timeout=10) as (serve, d):
        token = await d.pair("third-kill", strong=True)
        sid = (await d.session(token, (await d.project(token))["id"]))["id"]
        async with d.sse(token, params={"session": sid}) as stream:
            await d.submit(token, sid, "r1", "delegate slowly")
            delta = await stream.until(lambda m: m.event == "model.delta")
        sub = delta.json()["agent_id"]
        assert sub != "main" and delta.json()["text"] == "sub-alpha "
        r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "high"})
        assert r.status_code == 200, r.text
        await d.submit(token, sid, "f1", "queued behind")
        view = await d.view(token, sid)
        assert [(a["agentId"], a["status"]) for a in view["agents"]] == [("main", "running"), (sub, "running")]
        contexts = await _contexts(d, token, sid)
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            assert await serve.proc.wait() == -signal.SIGKILL

    async with serving(cwd, stderr_name="serve-1.err", timeout=10) as (serve, d):
        async def asked_again() -> list[dict[str, Any]] | None:
            asked = [e for e in _of(await d.events(token, sid), "model.requested") if e["agent_id"] == sub]
            return asked if len(asked) == 2 else None

        asked = await wait_until(asked_again, what="the subagent's request asked again")
        assert [(e["body"]["attempt"], e["body"]["model"], e["body"]["thinking_level"]) for e in asked] == [
            (1, "m1", None), (2, "m2", "high")]
        again = await d.view(token, sid)
        assert {k: v for k, v in again.items() if k != "lastSeq"} == {k: v for k, v in view.items() if k != "lastSeq"}
        assert await _contexts(d, token, sid) == contexts
        events = await d.events(token, sid)
        assert [len(_of(events, k)) for k in ("agent.started", "tool.started", "tool.finished")] == [1, 1, 0]
        async with d.sse(token, params={"session": sid}) as stream:
            await stream.until(lambda m: m.event in ("model.delta", "model.partial") and "sub-alpha" in m.json()["text"])
        r = await d.post(f"/sessions/{sid}/abort", token)
        assert r.json() == {"aborted": True, "withdrawn": ["f1"]}
        view = await d.wait_idle(token, sid)
        assert [(a["agentId"], a["status"]) for a in view["agents"]] == [("main", "idle"), (sub, "aborted")]
        [call] = [it for it in view["items"] if it["role"] == "tool_call"]
        assert (call["call"]["status"], call["result"]["status"]) == ("interrupted", "interrupted")
        r = await d.get(f"/sessions/{sid}", token, params={"agentId": sub})
        assert r.status_code == 200, r.text
        assert [(it["role"], it["text"], it.get("status")) for it in r.json()["items"]] == [
            ("user", "SUBSLOW answer", None), ("assistant", "sub-alpha ", "aborted")]


async def test_a_model_with_no_provider_part_is_refused_for_its_form_as_one_with_no_model_part(daemon_factory):
    # "faux/" was refused as "not of the form '<provider>/<model>'" while "/m1" was "no provider ''
    # is configured": an empty provider id named as if a provider of that id were missing.
    d = await daemon_factory(config=RICH)
    token = await d.pair("forms", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    before = await d.events(token, sid)
    for model in ("/m1", "/", "faux/"):
        for r in (await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": model}),
                  await d.post("/sessions", token, {"projectId": pid, "model": model})):
            assert (r.status_code, error_of(r)) == (422, "MODEL_UNKNOWN"), (model, r.text)
            assert r.json()["error"]["message"] == f"model {model!r} is not of the form '<provider>/<model>'", r.text
    assert await d.events(token, sid) == before


# --------------------------------------------------------------------------- F-ACT-2 on the wire


def _claude_answer(received: Any) -> Any:
    """The model (the Anthropic wire protocol), by what it was last told."""
    last = json.dumps(received.body["messages"][-1])
    if "Summarize the conversation so far" in last:
        return message_stream(text=SUMMARY)
    if "SUBJOB" in last:
        return message_stream(text="noon")
    for words, call in (("load the review skill", ("toolu_skill", "skill", {"name": "review"})),
                        ("delegate", ("toolu_sub", "subagent", {"prompt": "SUBJOB tell the time"})),
                        ("call a tool", ("toolu_clock", "get_system_time", {}))):
        if words in last:
            return message_stream(calls=[call])
    return message_stream(text="answered")


async def test_the_next_request_of_a_rich_session_live_restarted_and_forked_at_its_end_is_one(
        daemon_factory, nursery, tmp_path):
    # A skill loaded, a subagent run, a result snipped, a compaction: the live actor's next
    # request, the one after a restart (the whole log replayed) and that of a fork made at the
    # last event are the same bytes.
    server = ScriptedServer(_claude_answer)
    url = await server.start(nursery)
    cfg = {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url,
                          "models": [{"id": "claude-test", "contextWindow": 50000}]}],
           "defaultModel": "claude/claude-test"}
    d = await daemon_factory(config=cfg, root=tmp_path / "live")
    token = await d.pair("wire", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW)
    sid = (await d.session(token, project["id"]))["id"]
    for rid, text in (("r1", "my quokka is Pim; load the review skill"), ("r2", "delegate"), ("r3", "call a tool")):
        await d.submit(token, sid, rid, text)
        await d.wait_idle(token, sid)
    view = await d.view(token, sid)
    assert [a["role"] for a in view["agents"]] == ["main", "subagent"]
    assert any(it["role"] == "system" and "REVIEW-STEPS" in it["text"] for it in view["items"])
    call = [v for v in view["items"] if v["role"] == "tool_call"][-1]
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [call["result"]["itemId"]]})
    assert r.status_code == 200, r.text
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200 and r.json()["summary"] == SUMMARY, r.text
    await d.submit(token, sid, "r4", "after compaction")
    await d.wait_idle(token, sid)
    _copy_log(d.data_dir, tmp_path / "restarted")

    asked = len(server.requests)
    await d.submit(token, sid, "r5", "and now?")
    await d.wait_idle(token, sid)
    [live] = [q.raw for q in server.requests[asked:]]
    assert b"REVIEW-STEPS" in live and SUMMARY.encode() in live and b"and now?" in live
    await stop_daemon(d)

    d = await daemon_factory(config=cfg, root=tmp_path / "restarted")
    events = await d.events(token, sid)
    fork = await _fork(d, token, sid, events[-1]["seq"])
    asked = len(server.requests)
    for target in (sid, fork["id"]):
        await d.submit(token, target, "r5", "and now?")
        await d.wait_idle(token, target)
    restarted, forked = [q.raw for q in server.requests[asked:]]
    assert restarted == live
    assert forked == live



# --------------------------------------------------------------------------- F-ACT-6 inside a subagent's run

GATED = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1"}, {"id": "m2"}], "script": [
    {"when": "delegate the wait", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBGATE wait"}}]},
    {"when": "SUBGATE", "toolCalls": [{"name": "run_command", "arguments": {
        "command": "while [ ! -f go ]; do sleep 0.05; done; echo GATE-OPEN"}}]},
    {"when": "GATE-OPEN", "text": "the gate opened"},
]}], "defaultModel": "faux/m1"}


async def test_a_configuration_sent_while_a_subagents_call_runs_applies_from_its_next_request(daemon_factory):
    d = await daemon_factory(config=GATED)
    token = await d.pair("gated", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", "delegate the wait")

    async def sub_calling() -> list[dict[str, Any]] | None:
        started = [e for e in _of(await d.events(token, sid), "tool.started") if e["agent_id"] != "main"]
        return started or None

    await wait_until(sub_calling, what="the subagent's command")
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "low"})
    assert r.status_code == 200, r.text
    # A fork at that change, made while the subagent's command runs: on the new model, idle, the
    # subagent and the parent's call interrupted.
    configured = _of(await d.events(token, sid), "session.configured")[-1]
    fork = await _fork(d, token, sid, configured["seq"])
    assert (fork["model"], fork["thinkingLevel"], fork["status"]) == ("faux/m2", "low", "idle")
    assert [a["status"] for a in fork["agents"]] == ["idle", "interrupted"]
    (Path(project["workspace"]) / "go").write_text("")
    view = await d.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "The tool answered: the gate opened", view["items"][-1]
    asked = [(e["agent_id"] == "main", e["body"]["model"], e["body"]["thinking_level"])
             for e in _of(await d.events(token, sid), "model.requested")]
    assert asked == [(True, "m1", None), (False, "m1", None), (False, "m2", "low"), (True, "m2", "low")]
    assert _of(await d.events(token, fork["id"]), "model.requested") == []  # the fork ran nothing



async def test_a_fork_between_a_subagents_call_and_its_result_stays_interrupted_across_a_restart(daemon_factory):
    # The source ran to its end; the fork is made at the subagent's tool.started: in the fork the
    # subagent's call has no result (interrupted), nothing is run again, not after a restart either.
    d = await daemon_factory(config=GATED)
    token = await d.pair("gated", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    (Path(project["workspace"]) / "go").write_text("")
    await d.submit(token, sid, "r1", "delegate the wait")
    await d.wait_idle(token, sid)
    [started] = [e for e in _of(await d.events(token, sid), "tool.started") if e["agent_id"] != "main"]
    sub = started["agent_id"]
    fork = await _fork(d, token, sid, started["seq"])
    assert [(a["agentId"], a["status"]) for a in fork["agents"]] == [("main", "idle"), (sub, "interrupted")]
    r = await d.get(f"/sessions/{fork['id']}", token, params={"agentId": sub})
    assert r.status_code == 200, r.text
    sub_view = r.json()
    assert [(it["role"], it.get("call", {}).get("status"), it.get("result")) for it in sub_view["items"]] == [
        ("user", None, None), ("tool_call", "interrupted", None)]
    contexts = await _contexts(d, token, fork["id"])
    assert json.loads(contexts[sub])["workingItemIds"] == [it["id"] for it in sub_view["items"]]
    await stop_daemon(d)

    d = await daemon_factory(config=GATED, root=d.root)
    assert (await d.get(f"/sessions/{fork['id']}", token, params={"agentId": sub})).json() == sub_view
    assert await _contexts(d, token, fork["id"]) == contexts
    assert [e["kind"] for e in await d.events(token, fork["id"])] == ["session.created"]
