"""Long stories that cross several SPEC sections, told as a client tells them: over HTTP, SSE and
the ``lens log`` command line, against ``lens serve`` processes (loopback port 0, temp
directories, a real executor child) whose model is a loopback server speaking the OpenAI Chat
Completions wire protocol, scripted by what each request's last message says (as the ``faux``
provider is), so a replay gets the same answers.

- A session with a subagent, a file read, a question answered, a skill load and a compaction;
  a fork at a seq in the middle; then the daemon killed with SIGKILL and started again, and a copy
  of the log restarted cleanly: the next model request is the live one byte for byte, the SSE
  stream resumed from ``Last-Event-ID`` has no gap and no duplicate across the restart, both
  sessions go on, ``lens log decode`` prints what the events route gives, and ``lens log
  rebuild`` answers ``history_search``/``history_read`` as the live index did (F-ACT-2, F-ACT-4,
  F-ACT-5, F-ACT-7, F-CTX-2, F-TOOL-6, F-TOOL-7, F-HAR-1, F-API-5, F-API-7).
- Work racing across sessions and routes: a steer and a withdrawal while a model call streams,
  two sessions editing files while a third runs a command, an abort inside a tool call and the
  session going on, a session deleted while its SSE stream is open, and the same ``requestId``
  retried across a restart (F-ACT-3, F-ACT-6, F-EXE-7, F-EXE-8, F-API-5, F-LOG-4).

Every wait is bounded (conftest ``wait_until``); nothing sleeps for ordering.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import apsw
import trio

from ..providers.servers.base import Received, Reply, ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, error_of, run_lens, serving, wait_until
from .history_pages import search_all
from .rebuild_check import backup_db

ASK = {"questions": [{"id": "colour", "text": "Colour?", "options": [{"id": "red", "label": "Red"},
                                                                       {"id": "blue", "label": "Blue"}]}]}
SKILL = "---\nname: review\ndescription: how to review\n---\nREVIEW-STEPS: read twice, then answer.\n"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _call(name: str, args: dict[str, Any], seed: str) -> Reply:
    # (the call id is a function of what the model answers: the same in a replayed session)
    return chat_stream(calls=[(f"call_{hashlib.sha256(seed.encode()).hexdigest()[:10]}", name, args)])


def answer(received: Received) -> Reply:
    """The scripted model: what it answers depends on the request's last message only."""
    messages = received.body["messages"]
    last = messages[-1]
    text = _text(last)
    if "Summarize the conversation so far" in text:
        return chat_stream(text="SUMMARY: the quokka talk, the wombat found, blue chosen")
    if last["role"] == "tool":
        return chat_stream(text=f"noted: {text[:48]}")
    if last["role"] != "user":
        return chat_stream(text="ok")
    if "SUBJOB" in text:
        return chat_stream(text="the wombat sleeps under the quokka tree")
    for trigger, name, args in (("delegate", "subagent", {"prompt": "SUBJOB find the wombat"}),
                                ("read the notes", "read_file", {"path": "notes.txt"}),
                                ("ask me", "ask_user", ASK),
                                ("load review", "skill", {"name": "review"}),
                                ("take a nap", "sleep_milliseconds", {"milliseconds": 600000}),
                                ("write ", "edit_file", {"path": text.split()[-1], "mode": "create",
                                                         "content": f"{text}\n"}),
                                ("run the build", "run_command", {"command": "echo built; echo done"})):
        if trigger in text:
            return _call(name, args, text)
    return chat_stream(text=f"echo: {text[:60]}")


def _config(url: str) -> dict[str, Any]:
    return {"providers": [{"id": "chat", "protocol": "openai-chat", "baseUrl": url + "/v1",
                           "models": [{"id": "chat-test", "contextWindow": 100000}]}],
            "defaultModel": "chat/chat-test",
            "context": {"compaction": {"keepRecentTokens": 0}}}


def _write_config(root: Path, url: str) -> None:
    (root / "config").mkdir(parents=True, exist_ok=True)
    (root / "config" / "lens.jsonc").write_text(json.dumps(_config(url), indent=2))


def _copy_log(root: Path, into: Path) -> None:
    """A consistent copy of a running daemon's log (SQLite's online backup) and its pair file, as
    a new root (its config is written by the test)."""
    (into / "data").mkdir(parents=True)
    (into / "config").mkdir()
    shutil.copy(root / "config" / "pair.json", into / "config" / "pair.json")
    backup_db(root / "data" / "events.db", into / "data" / "events.db")


async def _history(d: Daemon, token: str, pid: str, sessions: list[str]) -> dict[Any, Any]:
    """Every query's results (2 a page), unfiltered and by session, and the first page of each item."""
    out: dict[Any, Any] = {}
    for query in ("quokka", "wombat", "SUMMARY", "REVIEW-STEPS", "blue", "alpha"):
        for sid in [None, *sessions]:
            out[(query, sid)] = results = await search_all(d, token, pid, query, sid)
            for hit in results:
                page = await d.get(f"/history/items/{hit['contextItemId']}", token, params={"limit": 64})
                out[hit["contextItemId"]] = (page.status_code, page.json())
    return out


async def _decoded(root: Path, sid: str) -> list[dict[str, Any]]:
    out = await run_lens(root, "log", "decode", "--data", "data", "--session", sid)
    return [json.loads(line) for line in out.stdout.splitlines()]


async def _awaiting(d: Daemon, token: str, sid: str) -> dict[str, Any]:
    async def asked() -> dict[str, Any] | None:
        v = await d.view(token, sid)
        return v if v["status"] == "awaiting_answer" else None
    return await wait_until(asked, what="the question")


async def test_a_long_session_survives_a_fork_a_kill_and_a_restart_as_a_client_sees_it(nursery, tmp_path):
    server = ScriptedServer(answer)
    url = await server.start(nursery)
    root = tmp_path / "live"
    _write_config(root, url)
    ws = root / "workspaces" / "p"
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(SKILL)
    (ws / "notes.txt").write_text("alpha and the quokka\n")

    async with serving(root) as (proc, d):
        token = await d.pair("story", strong=True)
        pid = (await d.project(token))["id"]
        sid = (await d.session(token, pid))["id"]

        # One input after another; each step's view is what the client reads.
        await d.submit(token, sid, "r1", "please delegate the search")
        view = await d.wait_idle(token, sid)
        assert view["items"][-1]["text"].startswith("noted: "), view["items"][-1]
        await d.submit(token, sid, "r2", "read the notes")
        view = await d.wait_idle(token, sid)
        assert "alpha and the quokka" in view["items"][-1]["text"]
        await d.submit(token, sid, "r3", "ask me a colour")
        view = await _awaiting(d, token, sid)
        qid = view["questions"][0]["questionId"]
        r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["blue"]})
        assert r.status_code == 200, r.text
        view = await d.wait_idle(token, sid)
        assert "Blue" in view["items"][-1]["text"]
        await d.submit(token, sid, "r4", "load review")
        await d.wait_idle(token, sid)
        events = await d.events(token, sid)
        assert [e["kind"] for e in events].count("skill.loaded") == 1
        fork_at = events[-1]["seq"]  # the middle: after the skill load, before the compaction
        r = await d.post(f"/sessions/{sid}/compact", token)
        assert r.status_code == 200, r.text
        view = await d.wait_idle(token, sid)
        fork = await d.post(f"/sessions/{sid}/fork", token, {"seq": fork_at})
        assert fork.status_code == 201, fork.text
        fid = fork.json()["id"]
        await d.submit(token, fid, "f1", "the fork's own quokka")
        fork_view = await d.wait_idle(token, fid)
        assert fork_view["items"][-1]["text"] == "echo: the fork's own quokka"
        # The fork saw the skill's instructions and not the compaction; the source saw both.
        fork_request = server.requests[-1].body["messages"]
        assert any("REVIEW-STEPS" in _text(m) for m in fork_request)
        assert not any("SUMMARY" in _text(m) for m in fork_request)

        # The SSE stream of the source session, read to its current end.
        seen: list[int] = []
        async with d.sse(token, params={"session": sid}, last_event_id=0) as stream:
            while not seen or seen[-1] < events[-1]["seq"]:
                msg = await stream.next_event()
                assert msg is not None
                seen.append(msg.id)
        source_events = await d.events(token, sid)
        assert seen == [e["seq"] for e in source_events if e["seq"] <= seen[-1]]
        live_history = await _history(d, token, pid, [sid, fid])
        assert live_history[("wombat", None)] and live_history[("SUMMARY", sid)] and live_history[("REVIEW-STEPS", sid)]
        assert not live_history[("SUMMARY", fid)]

        # A copy of the log as it stands (restarted cleanly below), then the live daemon goes on
        _copy_log(root, tmp_path / "copy")
        before = len(server.requests)
        await d.submit(token, sid, "r5", "what next about the quokka?")
        await d.wait_idle(token, sid)
        live_next = [r.raw for r in server.requests[before:]]
        assert len(live_next) == 1
        views_before = {s: await d.view(token, s) for s in (sid, fid)}
        proc.kill()  # SIGKILL
        with trio.fail_after(10):
            await proc.proc.wait()

    # SIGKILLed: started again on the same log, both sessions go on
    async with serving(root, stderr_name="serve-1.err") as (proc, d):
        view = await d.wait_idle(token, sid)
        assert view["items"][-1]["text"] == "echo: what next about the quokka?"
        for s, before_kill in views_before.items():  # the views as they were before the kill
            assert await d.view(token, s) == before_kill
        events = await d.events(token, sid)
        # The stream resumed from the last id seen before the restart: no gap, no duplicate.
        async with d.sse(token, params={"session": sid}, last_event_id=seen[-1]) as stream:
            resumed: list[int] = []
            while not resumed or resumed[-1] < events[-1]["seq"]:
                msg = await stream.next_event()
                assert msg is not None
                resumed.append(msg.id)
        assert seen + resumed == [e["seq"] for e in events]
        await d.submit(token, fid, "f2", "and the fork goes on")
        assert (await d.wait_idle(token, fid))["items"][-1]["text"] == "echo: and the fork goes on"
        r5 = next(e for e in events if e["kind"] == "input.submitted" and e["request_id"] == "r5")
        again = await d.submit(token, sid, "r5", "a retry of r5 with other text")  # the same request id
        assert again == {"requestId": "r5", "seq": r5["seq"], "duplicate": True}
        assert (await d.view(token, sid))["items"][-1]["text"] == "echo: what next about the quokka?"
        await d.submit(token, sid, "r6", "read the notes")
        assert "alpha and the quokka" in (await d.wait_idle(token, sid))["items"][-1]["text"]
        live_history = await _history(d, token, pid, [sid, fid])
        decoded_live = {s: await d.events(token, s) for s in (sid, fid)}
        await proc.terminate()

    # `lens log decode` prints what the events route gave; `lens log rebuild` answers the same
    for s in (sid, fid):
        assert await _decoded(root, s) == decoded_live[s]
    await run_lens(root, "log", "rebuild", "--data", "data")
    async with serving(root, stderr_name="serve-2.err") as (proc, d):
        assert await _history(d, token, pid, [sid, fid]) == live_history
        await proc.terminate()

    # The copy, restarted cleanly (a whole replay, its projections rebuilt): the next request is
    # the one the live daemon sent, byte for byte
    copy = tmp_path / "copy"
    server2 = ScriptedServer(answer)
    _write_config(copy, await server2.start(nursery))
    async with serving(copy, stderr_name="serve-3.err") as (proc, d):
        await d.submit(token, sid, "r5", "what next about the quokka?")
        await d.wait_idle(token, sid)
        assert [r.raw for r in server2.requests] == live_next
        await proc.terminate()


HOLD = "while [ ! -f go.flag ]; do sleep 0.02; done; echo released"
FAUX = {"providers": [{"id": "faux", "protocol": "faux",
                       "models": [{"id": "m1"}, {"id": "m2"}], "script": [
    {"when": "hold the lock", "toolCalls": [{"name": "run_command", "arguments": {"command": HOLD}}]},
    {"when": "write a.txt", "toolCalls": [{"name": "edit_file", "arguments": {"path": "a.txt", "mode": "create",
                                                                             "content": "from A\n"}}]},
    {"when": "write b.txt", "toolCalls": [{"name": "edit_file", "arguments": {"path": "b.txt", "mode": "create",
                                                                             "content": "from B\n"}}]},
    {"when": "write c.txt", "toolCalls": [{"name": "edit_file", "arguments": {"path": "c.txt", "mode": "create",
                                                                             "content": "from A again\n"}}]},
    {"when": "take a nap", "toolCalls": [{"name": "sleep_milliseconds", "arguments": {"milliseconds": 600000}}]},
]}], "defaultModel": "faux/m1"}


def _calls(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [it["call"] for it in view["items"] if it.get("call")]


async def _running_call(d: Daemon, token: str, sid: str, name: str) -> dict[str, Any]:
    async def running() -> dict[str, Any] | None:
        v = await d.view(token, sid)
        return v if any(c.get("name") == name and c.get("status") == "running" for c in _calls(v)) else None
    return await wait_until(running, what=f"{name} running in {sid}")


async def _models(d: Daemon, token: str, sid: str) -> list[str]:
    return [e["body"]["model"] for e in await d.events(token, sid) if e["kind"] == "model.requested"]


async def test_sessions_of_one_project_meet_at_the_lock_a_deletion_an_abort_and_a_config_change(daemon_factory):
    d = await daemon_factory(config=FAUX)
    token = await d.pair("story", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    cmd, a, b, chat = [(await d.session(token, project["id"]))["id"] for _ in range(4)]

    # A command holds the workspace's write lock; two other sessions' edits wait behind it.
    await d.submit(token, cmd, "c1", "hold the lock")
    await _running_call(d, token, cmd, "run_command")
    await d.submit(token, a, "a1", "write a.txt")
    await d.submit(token, b, "b1", "write b.txt")
    await _running_call(d, token, a, "edit_file")
    await _running_call(d, token, b, "edit_file")
    # A fourth session's model requests are not held by any of them.
    await d.submit(token, chat, "h1", "hello there")
    assert (await d.wait_idle(token, chat))["items"][-1]["text"] == "(faux) You said: hello there"

    # B is deleted while its edit waits and its SSE stream is open: the stream carries the
    # deletion, the edit never runs, and B takes no more inputs.
    b_last = (await d.events(token, b))[-1]["seq"]
    async with d.sse(token, params={"session": b}, last_event_id=b_last) as stream:
        r = await d.request("DELETE", f"/sessions/{b}", token)
        assert r.status_code == 200, r.text
        kinds = []
        while "session.deleted" not in kinds:
            msg = await stream.next_event()
            assert msg is not None and msg.json()["session_id"] == b
            kinds.append(msg.event)
        assert "tool.finished" in kinds and kinds.index("tool.finished") < kinds.index("session.deleted"), kinds
    b_events = await d.events(token, b)
    [b_finished] = [e["body"] for e in b_events if e["kind"] == "tool.finished"]
    assert b_finished["name"] == "edit_file" and b_finished["status"] != "ok", b_finished
    view_b = await d.view(token, b)
    assert view_b["deleted"] is True and view_b["status"] == "deleted" and not view_b["queued"]
    r = await d.post(f"/sessions/{b}/inputs", token, {"requestId": "b2", "content": "more"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")

    # The lock released: the command's output, A's edit made; B's never.
    (ws / "go.flag").write_text("")
    view_cmd = await d.wait_idle(token, cmd)
    assert "released" in json.dumps(_calls(view_cmd)[-1])
    await d.wait_idle(token, a)
    assert (ws / "a.txt").read_text() == "from A\n"
    assert not (ws / "b.txt").exists()
    changes = {s: (await d.get(f"/sessions/{s}/changes", token)).json()["files"] for s in (a, b, cmd)}
    assert [f["path"] for f in changes[a]] == ["a.txt"] and changes[b] == [] and changes[cmd] == [], changes
    # A deleted session's items leave history search; the others' stay.
    for sid, found in ((a, True), (b, False)):
        r = await d.post("/history/search", token, {"projectId": project["id"], "query": "write", "sessionId": sid})
        assert r.status_code == 200 and bool(r.json()["results"]) is found, (sid, r.text)

    # An abort inside a tool call, then the session goes on; the model reads the cut call.
    await d.submit(token, a, "a2", "take a nap")
    await _running_call(d, token, a, "sleep_milliseconds")
    r = await d.post(f"/sessions/{a}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": []}, r.text
    await d.wait_idle(token, a)
    await d.submit(token, a, "a3", "write c.txt")
    await d.wait_idle(token, a)
    assert (ws / "c.txt").read_text() == "from A again\n"

    # The config changed on disk (through the config-file API) while a session runs: the running
    # daemon keeps the config it started with; the next start reads it. A session keeps the model
    # it was created with (the default of then, recorded); one set back to the default (model
    # null) takes the new default from its next request, as does a session created after it.
    r = await d.request("PATCH", f"/sessions/{chat}", token, json_body={"model": None})
    assert r.status_code == 200, r.text
    await d.submit(token, a, "a4", "take a nap")
    await _running_call(d, token, a, "sleep_milliseconds")
    new = json.loads(json.dumps(FAUX))
    new["defaultModel"] = "faux/m2"
    r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps(new)})
    assert r.status_code == 200, r.text
    await d.post(f"/sessions/{a}/abort", token)
    await d.wait_idle(token, a)
    await d.submit(token, a, "a5", "still the same model?")
    await d.wait_idle(token, a)
    await d.submit(token, chat, "h2", "and the default now?")
    await d.wait_idle(token, chat)
    assert (await _models(d, token, a))[-1] == (await _models(d, token, chat))[-1] == "m1"
    await d.client.aclose()
    d.stop.set()
    with trio.fail_after(10):
        await d.done.wait()

    d2 = await daemon_factory(root=d.root)
    fresh = (await d2.session(token, project["id"]))["id"]
    for sid, model in ((a, "m1"), (chat, "m2"), (fresh, "m2")):
        await d2.submit(token, sid, "after", "after the restart")
        await d2.wait_idle(token, sid)
        assert (await _models(d2, token, sid))[-1] == model, sid
    assert (await d2.view(token, b))["deleted"] is True


async def test_a_steer_and_a_withdrawal_while_a_subagents_request_is_held_then_an_abort(daemon_factory, nursery):
    """F-ACT-3 with F-ACT-5 and F-MOD-1: steers sent while the main agent's model request is
    still unanswered are read after its tool round; inputs sent while a subagent's model request
    is still unanswered queue for the main agent (the subagent never reads them); the steer is read right
    after the subagent's result, the withdrawn follow-up never; an abort while the subagent's next
    request is held ends both agents' work, and the session goes on."""
    gates: dict[str, trio.Event] = {}

    def held(received: Received) -> Reply:
        reply = answer(received)
        text = _text(received.body["messages"][-1])
        for key, gate in gates.items():
            if key in text:
                reply.gate = gate
        return reply

    server = ScriptedServer(held)
    d = await daemon_factory(config=_config(await server.start(nursery)))
    token = await d.pair("story", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]

    # The main agent's own request held: a steer, a follow-up turned steer and another steer are
    # read together after the round's tool result, in the order they were submitted.
    gates["HELD-MAIN"] = trio.Event()
    await d.submit(token, sid, "r0", "HELD-MAIN read the notes")
    await wait_until(lambda: _asked(server, "HELD-MAIN"), what="the main agent's request")
    await d.submit(token, sid, "s1", "STEER one", whenBusy="steer")
    await d.submit(token, sid, "f1", "FOLLOW one")
    await d.submit(token, sid, "s2", "STEER two", whenBusy="steer")
    r = await d.post(f"/sessions/{sid}/inputs/f1/steer", token)
    assert r.json() == {"requestId": "f1", "status": "queued", "whenBusy": "steer"}, r.text
    gates["HELD-MAIN"].set()
    view = await d.wait_idle(token, sid)
    second = server.bodies[1]["messages"]
    assert [(m["role"], _text(m)) for m in second[-3:]] == [
        ("user", "STEER one"), ("user", "FOLLOW one"), ("user", "STEER two")]
    assert second[-4]["role"] == "tool" and len(server.requests) == 2
    assert len({it["taskId"] for it in view["items"]}) == 1  # steers join the running task

    gates["SUBJOB"] = trio.Event()
    await d.submit(token, sid, "r1", "please delegate")
    await wait_until(lambda: _asked(server, "SUBJOB"), what="the subagent's request")
    await d.submit(token, sid, "steer", "STEER-NOW about the quokka", whenBusy="steer")
    await d.submit(token, sid, "later", "FOLLOW-LATER")
    r = await d.post(f"/sessions/{sid}/inputs/later/withdraw", token)
    assert r.json() == {"requestId": "later", "status": "withdrawn", "text": "FOLLOW-LATER"}, r.text
    view = await d.view(token, sid)
    assert view["status"] == "running" and [q["requestId"] for q in view["queued"]] == ["steer"], view["queued"]
    gates["SUBJOB"].set()
    view = await d.wait_idle(token, sid)
    bodies = [json.dumps(b) for b in server.bodies]
    sub = [b for b in bodies if "SUBJOB" in b and "please delegate" not in b]
    assert sub and not any("STEER-NOW" in b for b in sub)
    assert not any("FOLLOW-LATER" in b for b in bodies)
    main_after = [json.loads(b)["messages"] for b in bodies if "STEER-NOW" in b]
    first = main_after[0]
    roles = [m["role"] for m in first]
    assert roles[-2:] == ["tool", "user"] and "wombat" in _text(first[-2]) and "STEER-NOW" in _text(first[-1]), roles
    assert view["items"][-1]["text"] == "echo: STEER-NOW about the quokka"

    # An abort while the subagent's request is held: both agents stop, the main agent reads its
    # call as cut, and the next input runs.
    gates["SUBJOB"] = trio.Event()
    asked = len(server.requests)
    await d.submit(token, sid, "r2", "delegate again")
    await wait_until(lambda: _asked(server, "SUBJOB", asked), what="the second subagent request")
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": []}, r.text
    view = await d.wait_idle(token, sid)
    assert all(agent["status"] != "running" for agent in view["agents"]), view["agents"]
    events = await d.events(token, sid)
    [cut] = [e["body"] for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == "subagent"][1:]
    assert cut["status"] != "ok", cut
    await d.submit(token, sid, "r3", "are you there?")
    view = await d.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "echo: are you there?"
    last = server.bodies[-1]["messages"]
    assert any(m["role"] == "tool" for m in last)  # the cut call has its result in the next request


async def _asked(server: ScriptedServer, text: str, after: int = 0) -> bool:
    """Whether a request after the first ``after`` ends with a message saying ``text``."""
    return any(text in _text(r.body["messages"][-1]) for r in server.requests[after:])


async def test_a_provider_disabled_on_disk_meets_a_run_cut_by_the_stop_and_its_queued_input(daemon_factory):
    """Config (§9, F-MOD-5) with F-ACT-4: the config is changed on disk while a command runs and an
    input waits behind it, disabling the session's provider. The running daemon goes on with the
    config it started with; at the next start the cut command is recorded interrupted, the run
    and the queued input fail with ``PROVIDER_DISABLED`` as recorded events (not a session stuck
    ``running``), a new input is refused with that code, and the session moved to an enabled
    model goes on."""
    d = await daemon_factory(config=FAUX)
    token = await d.pair("story", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "a1", "hold the lock")
    await _running_call(d, token, sid, "run_command")
    await d.submit(token, sid, "a2", "queued one")
    new = json.loads(json.dumps(FAUX))
    new["providers"][0]["enabled"] = False
    new["providers"].append({"id": "other", "protocol": "faux", "models": [{"id": "x"}]})
    new["defaultModel"] = "other/x"
    r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps(new)})
    assert r.status_code == 200, r.text
    assert (await d.view(token, sid))["status"] == "running"  # (nothing read the file: the command runs on)
    await d.client.aclose()
    d.stop.set()
    with trio.fail_after(10):
        await d.done.wait()

    d2 = await daemon_factory(root=d.root)

    async def settled() -> dict[str, Any] | None:
        v = await d2.view(token, sid)
        return v if v["status"] == "idle" else None

    view = await wait_until(settled, what="the session at rest after the restart")
    assert view["queued"] == [] and view["model"] == "faux/m1"
    assert [c["status"] for c in _calls(view)] == ["interrupted"]
    events = await d2.events(token, sid)
    after = [(e["kind"], e["body"].get("error_code") or e["body"].get("code") or e["body"].get("status"))
             for e in events if e["seq"] > next(x["seq"] for x in events if x["request_id"] == "a2")]
    failed = [e["body"] for e in events if e["kind"] == "model.failed"]
    assert len(failed) == 2 and {f.get("code") for f in failed} == {"PROVIDER_DISABLED"}, after
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "a3", "content": "hello"})
    assert (r.status_code, error_of(r)) == (422, "PROVIDER_DISABLED") and "'faux'" in r.json()["error"]["message"]
    r = await d2.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "other/x"})
    assert r.status_code == 200, r.text
    await d2.submit(token, sid, "a3", "hello")
    view = await d2.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "(faux) You said: hello"
    assert (await _models(d2, token, sid))[-1] == "x"


async def test_a_manual_compaction_under_way_reads_running_and_a_kill_leaves_nothing_of_it(nursery, tmp_path):
    """F-CTX-2 with the view's status (§9), F-ACT-3 and F-ACT-4: while a manual compaction waits
    for its summary the session is at work (a second one is ``SESSION_BUSY``, an input queues
    behind it, a client waiting for idle waits), so its view and its row in the list say
    ``running``, not ``idle``. ``lens serve`` SIGKILLed then: nothing of the compaction was
    recorded, the queued input survives and runs at the next start, and a compaction then works."""
    gate = trio.Event()

    def held(received: Received) -> Reply:
        reply = answer(received)
        if "Summarize the conversation so far" in _text(received.body["messages"][-1]):
            reply.gate = gate
        return reply

    server = ScriptedServer(held)
    root = tmp_path / "r"
    _write_config(root, await server.start(nursery))
    async with serving(root) as (proc, d):
        token = await d.pair("story", strong=True)
        pid = (await d.project(token))["id"]
        sid = (await d.session(token, pid))["id"]
        await d.submit(token, sid, "r1", "hello quokka")
        await d.wait_idle(token, sid)

        async def compact() -> None:
            try:
                await d.post(f"/sessions/{sid}/compact", token)
            except Exception:  # (the daemon is killed under it: no answer)
                pass

        async with trio.open_nursery() as n:
            n.start_soon(compact)
            await wait_until(lambda: _asked(server, "Summarize the conversation so far"), what="the summary request")
            assert (await d.view(token, sid))["status"] == "running"
            [row] = (await d.get("/sessions", token, params={"project": pid})).json()["sessions"]
            assert row["status"] == "running", row
            r = await d.post(f"/sessions/{sid}/compact", token)
            assert (r.status_code, error_of(r)) == (409, "SESSION_BUSY")
            await d.submit(token, sid, "r2", "during the compaction")
            view = await d.view(token, sid)
            assert view["status"] == "running" and [q["requestId"] for q in view["queued"]] == ["r2"]
            proc.kill()
            with trio.fail_after(10):
                await proc.proc.wait()
            n.cancel_scope.cancel()

    async with serving(root, stderr_name="serve-1.err") as (proc, d):
        view = await d.wait_idle(token, sid)
        assert [(it["role"], it["text"]) for it in view["items"]] == [
            ("user", "hello quokka"), ("assistant", "echo: hello quokka"),
            ("user", "during the compaction"), ("assistant", "echo: during the compaction")]
        assert not [e for e in await d.events(token, sid) if e["kind"] == "context.compacted"]
        # An abort while the summary is awaited ends the compaction, and the session reads idle.
        held_before = len(server.requests)
        answers: list[Any] = []

        async def compact_again() -> None:
            answers.append(await d.post(f"/sessions/{sid}/compact", token))

        async with trio.open_nursery() as n:
            n.start_soon(compact_again)
            await wait_until(lambda: _asked(server, "Summarize the conversation so far", held_before),
                             what="the second summary request")
            assert (await d.view(token, sid))["status"] == "running"
            r = await d.post(f"/sessions/{sid}/abort", token)
            assert r.status_code == 200 and r.json() == {"aborted": True, "withdrawn": []}, r.text
        assert (answers[0].status_code, error_of(answers[0])) == (409, "ABORTED")
        assert "aborted" in answers[0].json()["error"]["message"]
        assert (await d.view(token, sid))["status"] == "idle"
        gate.set()
        r = await d.post(f"/sessions/{sid}/compact", token)
        assert r.status_code == 200 and r.json()["summary"].startswith("SUMMARY"), r.text
        assert (await d.view(token, sid))["status"] == "idle"
        await proc.terminate()
