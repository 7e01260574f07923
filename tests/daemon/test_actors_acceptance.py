"""F-ACT-1, F-ACT-2 and F-ACT-4 as a client sees them, on the real daemon (loopback port 0, temp
directories, the model a loopback server speaking the Anthropic wire protocol, ``lens serve``
SIGKILLed as a process where a kill is the point).

- F-ACT-2: the next model request after a graceful restart (a full replay) and after a
  passivation (a wake-up from the snapshot) is, byte for byte, the one the live actor sends.
- F-ACT-4: a ``lens serve`` killed inside a tool call that is not replay-safe reports the call
  interrupted at its next start and the model reads that in its next request; an input queued
  behind the call survives and runs; a question open at the kill is cancelled and a late answer
  to it is refused with a code naming that.
- F-ACT-1: a session whose log cannot be folded is quarantined with its reason while the daemon
  and the other sessions go on.
"""

from __future__ import annotations

import gc
import json
import shutil
import signal
from pathlib import Path
from typing import Any

import apsw
import trio

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import Daemon, error_of, serving, stop_daemon, wait_until

from runtime.actor import SessionActor


def _claude(url: str, sessions: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url,
                                          "models": [{"id": "claude-test"}]}],
                           "defaultModel": "claude/claude-test"}
    if sessions is not None:
        cfg["sessions"] = sessions
    return cfg


def _first_turn(server: ScriptedServer) -> None:
    """A tool round with a signed thinking block (what a replay must give back exactly), then text."""
    server.push(
        message_stream(thinking=["I should read the notes first."], calls=[("toolu_01", "read_file",
                                                                          {"path": "notes.txt"})]),
        message_stream(text="The notes say alpha.", message_id="msg_2"),
    )


def _second_turn(server: ScriptedServer) -> None:
    server.push(message_stream(text="Second answer.", message_id="msg_3"))


def _copy_log(data_dir: Path, root: Path) -> None:
    """A consistent copy of a running daemon's log (SQLite's online backup) and its config, as a
    new root; ``projections.db`` is left behind (derived data: the copy's daemon rebuilds it)."""
    (root / "data").mkdir(parents=True)
    shutil.copytree(data_dir.parent / "config", root / "config")
    src = apsw.Connection(str(data_dir / "events.db"))
    dst = apsw.Connection(str(root / "data" / "events.db"))
    try:
        with dst.backup("main", src, "main") as backup:
            backup.step()
    finally:
        dst.close()
        src.close()
    if (data_dir / "artifacts").exists():
        shutil.copytree(data_dir / "artifacts", root / "data" / "artifacts")


async def _second_request(daemon_factory: Any, nursery: trio.Nursery, root: Path, token: str, sid: str,
                          sessions: dict[str, Any], before_input: Any = None) -> bytes:
    server = ScriptedServer()
    url = await server.start(nursery)
    (root / "config" / "lens.jsonc").unlink()
    d = await daemon_factory(config=_claude(url, sessions), root=root)
    if before_input is not None:
        await before_input(d)
    _second_turn(server)
    await d.submit(token, sid, "r2", "and now?")
    view = await d.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "Second answer."
    assert len(server.requests) == 1
    return server.requests[0].raw


async def test_the_next_request_after_a_restart_and_after_a_passivation_is_the_live_ones_byte_for_byte(
        daemon_factory, nursery, tmp_path):
    live_server = ScriptedServer()
    live_url = await live_server.start(nursery)
    d = await daemon_factory(config=_claude(live_url), root=tmp_path / "live")
    token = await d.pair("replay-client", strong=True)
    project = await d.project(token)
    (d.root / "workspaces" / "p" / "notes.txt").write_text("alpha\n")
    sid = (await d.session(token, project["id"]))["id"]
    _first_turn(live_server)
    await d.submit(token, sid, "r1", "what do the notes say?")
    view = await d.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "The notes say alpha."
    # The log as it stands now, taken twice while the live actor holds the session in memory.
    _copy_log(d.data_dir, tmp_path / "restarted")
    _copy_log(d.data_dir, tmp_path / "passivated")

    _second_turn(live_server)
    await d.submit(token, sid, "r2", "and now?")
    await d.wait_idle(token, sid)
    live = live_server.requests[-1].raw
    assert len(live_server.requests) == 3 and b"I should read the notes first." in live and b"alpha" in live
    await stop_daemon(d)

    # A restart: no snapshot anywhere (projections.db is rebuilt), the whole log replayed.
    restarted = await _second_request(daemon_factory, nursery, tmp_path / "restarted", token, sid, {})
    assert restarted == live

    # A passivation: woken once (a snapshot is taken at that wake-up), passivated, then woken by
    # the input from that snapshot.
    # (the daemons stopped above left actors of the same session id behind: not counted)
    earlier = [o for o in gc.get_objects() if isinstance(o, SessionActor)]

    async def wake_and_passivate(p: Daemon) -> None:
        await p.view(token, sid)
        await _passivated(sid, earlier)
        await _snapshotted(p, sid)

    passivated_request = await _second_request(daemon_factory, nursery, tmp_path / "passivated", token, sid,
                                                {"idleSeconds": 0.1, "snapshotEvery": 1}, wake_and_passivate)
    assert passivated_request == live


async def _passivated(sid: str, earlier: list[SessionActor]) -> None:
    """Wait until no actor of ``sid`` but those in ``earlier`` is live (gone from the supervisor)."""
    def live() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, SessionActor) and o.session_id == sid
                   and not o.passivated and all(o is not e for e in earlier))

    async def gone() -> bool:
        return live() == 0

    await wait_until(gone, what=f"session {sid} passivated")


async def _snapshotted(d: Daemon, sid: str) -> None:
    def has() -> bool:
        conn = apsw.Connection(str(d.data_dir / "projections.db"), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return bool(conn.execute("SELECT 1 FROM snapshots WHERE session_id = ?", (sid,)).fetchall())
        finally:
            conn.close()

    async def check() -> bool:
        return await trio.to_thread.run_sync(has)

    await wait_until(check, what=f"a snapshot of {sid}")


# --------------------------------------------------------------------------- F-ACT-4: kill -9

ASK = {"questions": [{"id": "colour", "text": "Colour?", "options": [{"id": "red", "label": "Red"},
                                                                       {"id": "blue", "label": "Blue"}]}]}


def _last_message(received: Any) -> str:
    return json.dumps(received.body["messages"][-1])


def _answer(received: Any) -> Any:
    """The model, by what it was last told (two sessions ask it in no fixed order)."""
    last = _last_message(received)
    if "run the slow one" in last:
        return message_stream(calls=[("toolu_cmd", "run_command", {"command": "sleep 30 && echo done > done.txt"})])
    if "ask me" in last:
        return message_stream(calls=[("toolu_ask", "ask_user", ASK)])
    if "tool_result" in last:
        return message_stream(text="Noted the interruption.")
    return message_stream(text="Queued input answered.")


async def test_kill9_inside_a_tool_call_reports_it_interrupted_keeps_the_queue_and_cancels_the_question(
        nursery, tmp_path):
    server = ScriptedServer(answer=_answer)
    url = await server.start(nursery)
    cwd = tmp_path / "serve"
    (cwd / "config").mkdir(parents=True)
    (cwd / "config" / "lens.jsonc").write_text(json.dumps(_claude(url)))

    async with serving(cwd, stderr_name="serve-0.err", timeout=10) as (serve, d):
        token = await d.pair("kill9-acceptance", strong=True)
        project = await d.project(token)
        busy = (await d.session(token, project["id"]))["id"]
        # (in a project of its own: another workspace, whose domain lock the command does not hold)
        asking = (await d.session(token, (await d.project(token, "q"))["id"]))["id"]
        await d.submit(token, busy, "r1", "run the slow one")
        await d.wait_running_call(token, busy)
        queued = await d.submit(token, busy, "r2", "and then the next thing")
        await d.submit(token, asking, "q1", "ask me something")
        question = await wait_until(lambda: _awaiting(d, token, asking), what="awaiting_answer")
        qid = question["questions"][0]["questionId"]
        view = await d.view(token, busy)
        assert [q["requestId"] for q in view["queued"]] == ["r2"]
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            assert await serve.proc.wait() == -signal.SIGKILL
    before = len(server.requests)

    async with serving(cwd, stderr_name="serve-1.err", timeout=10) as (serve, d):
        view = await d.wait_idle(token, busy)
        events = await d.events(token, busy)
        [call] = [e for e in events if e["kind"] == "tool.finished"]
        assert (call["body"]["name"], call["body"]["status"], call["body"]["error_code"]) == (
            "run_command", "interrupted", "INTERRUPTED")
        # The queued input survived with its seq, and ran after the interruption was told.
        [submitted] = [e for e in events if e["kind"] == "input.submitted" and e["request_id"] == "r2"]
        assert submitted["seq"] == queued["seq"]
        assert [it.get("text") for it in view["items"] if it["role"] == "assistant"] == [
            "Noted the interruption.", "Queued input answered."]
        # What the model read next: the call's result, an error, saying it was interrupted.
        told = [r for r in server.requests[before:] if "toolu_cmd" in _last_message(r)]
        assert len(told) == 1, [_last_message(r) for r in server.requests[before:]]
        [result] = [b for b in told[0].body["messages"][-1]["content"] if b.get("type") == "tool_result"]
        assert result["tool_use_id"] == "toolu_cmd" and result["is_error"] is True
        assert json.dumps(result["content"]).count("This tool call was interrupted: Lens stopped before it finished") == 1
        assert not (cwd / "workspaces" / "p" / "done.txt").exists()  # not re-run: it is not replay-safe

        # The question open at the kill: cancelled at the restart, its call interrupted; a late
        # answer is refused with a code and a message saying why.
        await d.wait_idle(token, asking)
        events = await d.events(token, asking)
        assert [e["body"]["reason"] for e in events if e["kind"] == "question.cancelled"] == ["session restarted"]
        r = await d.post(f"/sessions/{asking}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["red"]})
        assert r.status_code == 409 and error_of(r) == "QUESTION_SETTLED", r.text
        assert "cancelled (session restarted)" in r.text, r.text
        assert await d.events(token, asking) == events  # nothing recorded for it


async def _awaiting(d: Daemon, token: str, sid: str) -> dict[str, Any] | None:
    view = await d.view(token, sid)
    return view if view["status"] == "awaiting_answer" else None


# --------------------------------------------------------------------------- F-ACT-1: sessions apart


def _answer_slow_or_hello(received: Any) -> Any:
    last = _last_message(received)
    if "run the slow one" in last:
        return message_stream(calls=[("toolu_slow", "run_command", {"command": "sleep 60"})])
    return message_stream(text="Hello back.")


async def test_a_command_running_in_one_session_does_not_hold_another_sessions_model_requests(
        daemon_factory, nursery, monkeypatch):
    # Every model request rebuilds the system prompt (no 2 s of reuse to wait out): the rebuild
    # reads the workspace's AGENTS.md, under the execution-domain lock the command holds.
    monkeypatch.setattr("runtime.prompt.PROMPT_REFRESH_SECONDS", 0.0)
    server = ScriptedServer(answer=_answer_slow_or_hello)
    d = await daemon_factory(config=_claude(await server.start(nursery)))
    token = await d.pair("apart-client", strong=True)
    project = await d.project(token)
    agents_md = d.root / "workspaces" / "p" / "AGENTS.md"
    agents_md.write_text("Rule one: answer briefly.\n")
    busy = (await d.session(token, project["id"]))["id"]
    other = (await d.session(token, project["id"]))["id"]
    await d.submit(token, busy, "r1", "run the slow one")
    await d.wait_running_call(token, busy)

    await d.submit(token, other, "h1", "hello")
    view = await d.wait_idle(token, other)  # (bounded: the command sleeps for far longer)
    assert view["items"][-1]["text"] == "Hello back."
    assert "Rule one: answer briefly." in json.dumps(server.requests[-1].body["system"])
    assert (await d.view(token, busy))["status"] == "running"  # the command still runs

    # Once the command ends, the next request reads the workspace again.
    r = await d.post(f"/sessions/{busy}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await d.wait_idle(token, busy)
    agents_md.write_text("Rule two: answer at length.\n")
    await d.submit(token, other, "h2", "hello again")
    await d.wait_idle(token, other)
    assert "Rule two: answer at length." in json.dumps(server.requests[-1].body["system"])


async def test_a_first_system_prompt_does_not_wait_behind_a_command_holding_the_workspace(
        daemon_factory, nursery):
    """Two projects on one workspace share its execution-domain lock (as every project of a remote
    executor does). The second project has never sent a model request when the first one's command
    starts, so it has no prompt built before to serve: its first prompt waited for the command
    (60 s here). It is built now without the workspace's files, saying why, and the first request
    after the command reads them."""
    server = ScriptedServer(answer=_answer_slow_or_hello)
    d = await daemon_factory(config=_claude(await server.start(nursery)))
    token = await d.pair("first-client", strong=True)
    first = await d.project(token)
    ws = Path(first["workspace"])
    (ws / "AGENTS.md").write_text("Rule one: answer briefly.\n")
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text("---\nname: review\ndescription: Review a change\n---\nSTEPS\n")
    r = await d.post("/projects", token, {"name": "second", "workspace": str(ws)})
    assert r.status_code == 201, r.text
    second = r.json()
    busy = (await d.session(token, first["id"]))["id"]
    other = (await d.session(token, second["id"]))["id"]
    await d.submit(token, busy, "r1", "run the slow one")
    await d.wait_running_call(token, busy)

    await d.submit(token, other, "h1", "hello")
    view = await d.wait_idle(token, other, timeout=10)  # (bounded: the command sleeps for 60 s)
    assert view["items"][-1]["text"] == "Hello back."
    system = json.dumps(server.requests[-1].body["system"])
    assert "Rule one" not in system and "Review a change" not in system  # (never read under the command)
    assert "not read: a command was running in the workspace" in system
    assert (await d.view(token, busy))["status"] == "running"  # the command still runs

    # Once the command ends, the next request reads the workspace.
    r = await d.post(f"/sessions/{busy}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await d.wait_idle(token, busy)
    await d.submit(token, other, "h2", "hello again")
    await d.wait_idle(token, other)
    system = json.dumps(server.requests[-1].body["system"])
    assert "Rule one: answer briefly." in system and "Review a change" in system
    assert "not read" not in system
