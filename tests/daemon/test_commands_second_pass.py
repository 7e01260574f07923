"""Commands (F-EXE-7), the execution-domain lock (F-EXE-8), confinement of a command's ``cwd``
(F-EXE-9) and the executor process (F-EXE-1), driven as a user drives them: the daemon on
loopback port 0, the ``faux`` model calling the tools, the project's real executor process over
gRPC and a real shell. What ``tests/executor`` pins against the executor or the Core tools alone
is not repeated; these check what reaches the session's log."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import trio

from tests.procfs import read_proc

from .conftest import Daemon, DaemonFactory, finished, run_tool, wait_until
from .test_jobs import finished_of, start_job

MIXED = "run the mixed batch"
CALLS = [
    {"name": "edit_file", "arguments": {"path": "notes.txt", "mode": "create", "content": "one\n"}},
    {"name": "read_file", "arguments": {"path": "notes.txt"}},
    {"name": "run_command", "arguments": {"command": "echo two >> notes.txt; cat notes.txt"}},
    {"name": "read_file", "arguments": {"path": "notes.txt"}},
    {"name": "edit_file", "arguments": {"path": "notes.txt", "mode": "edit",
                                        "edits": [{"old_string": "two", "new_string": "three"}]}},
    {"name": "run_command", "arguments": {"command": "cat notes.txt"}},
]
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": MIXED, "toolCalls": CALLS}]}], "defaultModel": "faux/faux-1"}


async def _session(d: Daemon, name: str = "p") -> tuple[str, str, Path]:
    token = await d.pair(name, strong=True)
    project = await d.project(token, name)
    sid = (await d.session(token, project["id"]))["id"]
    return token, sid, Path(project["workspace"])


def _text(body: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in body["content"])


async def _command(d: Daemon, token: str, sid: str, rid: str, **args: Any) -> dict[str, Any]:
    return await run_tool(d, token, sid, rid, "run_command", args)


async def _ended(pid: int, what: str) -> None:
    """Wait until process ``pid`` is gone (or a zombie); killed if the wait fails."""
    async def gone() -> bool:
        p = read_proc(pid)
        return p is None or p.state == "Z"

    try:
        await wait_until(gone, what=f"{what} (pid {pid}) ended")
    finally:
        if read_proc(pid) is not None:
            os.kill(pid, signal.SIGKILL)


async def test_the_output_cap_counts_stdout_and_stderr_together(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, _ = await _session(d)
    # 5 bytes on each stream: exactly the cap of 10, whole and not said truncated
    exact = await _command(d, token, sid, "r1", command="printf abcde; printf 12345 >&2", max_output_bytes=10)
    assert exact["status"] == "ok" and not exact["is_error"], exact
    assert exact["structured_content"]["truncated"] is False
    text = _text(exact)
    assert "abcde" in text and "12345" in text and "truncated" not in text, text
    # one byte more on stderr: 10 of the 11 bytes, said truncated
    past = await _command(d, token, sid, "r2", command="printf abcde; sleep 0.2; printf 123456 >&2",
                          max_output_bytes=10)
    assert past["structured_content"]["truncated"] is True, past
    text = _text(past)
    body, _, note = text.rpartition("\n[")
    assert body == "abcde12345" and note == "exit 0, output truncated]", text


async def test_output_cut_inside_a_character_at_the_cap_is_said_truncated(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, _ = await _session(d)
    # "abcd" + "é" (2 bytes) + "f": the cap of 5 falls inside the "é"
    body = await _command(d, token, sid, "r1", command="printf 'abcd\\303\\251f'", max_output_bytes=5)
    assert body["structured_content"]["truncated"] is True, body
    text = _text(body)
    assert text.startswith("abcd") and "f" not in text.split("\n[")[0], text
    assert text.endswith("[exit 0, output truncated]"), text


async def test_calls_of_one_answer_run_one_after_another_in_the_models_order(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config=CONFIG)
    token, sid, ws = await _session(d)
    await d.submit(token, sid, "r1", MIXED)
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    seen = [(e["kind"], e["body"]["name"]) for e in events if e["kind"] in ("tool.started", "tool.finished")]
    expected = [(kind, c["name"]) for c in CALLS for kind in ("tool.started", "tool.finished")]
    assert seen == expected, seen
    bodies = finished(events)
    assert [b["status"] for b in bodies] == ["ok"] * len(CALLS), bodies
    assert "one" in _text(bodies[1]) and "two" not in _text(bodies[1])
    assert _text(bodies[2]).startswith("one\ntwo\n")
    assert "two" in _text(bodies[3])
    assert _text(bodies[5]).startswith("one\nthree\n")
    assert (ws / "notes.txt").read_text() == "one\nthree\n"


async def test_a_commands_cwd_cannot_leave_the_workspace(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    d = await daemon_factory()
    token, sid, ws = await _session(d)
    outside = tmp_path / "outside-the-workspace"
    outside.mkdir()
    (ws / "out").symlink_to(outside)
    (ws / "plain.txt").write_text("x")
    (ws / "sub").mkdir()
    for rid, cwd in (("r1", ".."), ("r2", "sub/../.."), ("r3", "out"), ("r4", str(outside)), ("r5", "plain.txt"),
                     ("r6", "missing")):
        body = await _command(d, token, sid, rid, command="pwd > where.txt", cwd=cwd)
        assert body["is_error"] and body["error_code"] in ("PATH_OUTSIDE_WORKSPACE", "NOT_A_DIRECTORY", "NOT_FOUND",
                                                           "INVALID_ARGUMENT", "PATH_INVALID"), (cwd, body)
        named = "<absolute path>" if cwd.startswith("/") else cwd  # (a host path is not told to the model)
        assert named in _text(body), (cwd, body)
    assert not list(outside.iterdir()) and not (ws / "where.txt").exists()
    ok = await _command(d, token, sid, "r7", command="pwd", cwd="sub/")
    assert ok["status"] == "ok" and _text(ok).startswith(str((ws / "sub").resolve())), ok


def _executor_of(shell_pid: int) -> int:
    """The executor a command runs under: the shell's parent is the command's reaper, whose
    parent is the executor."""
    shell = read_proc(shell_pid)
    assert shell is not None
    reaper = read_proc(shell.ppid)
    assert reaper is not None
    return reaper.ppid


async def _held_command_shell(d: Daemon, token: str, sid: str, ws: Path) -> int:
    """A command that holds its call (and the domain's write lock) until killed, submitted to
    session ``sid`` (request ``r1``): the pid of its shell, once the shell has written it."""
    await d.submit(token, sid, "r1", "/tool run_command " + json.dumps(
        {"command": "echo $$ > shell.pid; exec sleep 300"}))

    async def shell_pid() -> int:
        text = (ws / "shell.pid").read_text() if (ws / "shell.pid").exists() else ""
        return int(text) if text.strip() else 0

    return await wait_until(shell_pid, what="the command's shell pid")


async def test_an_executor_killed_during_a_command_ends_the_call_and_the_command_and_the_next_runs(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, ws = await _session(d)
    pid = await _held_command_shell(d, token, sid, ws)
    executor = _executor_of(pid)
    assert read_proc(executor) is not None and b"executor" in b" ".join(read_proc(executor).argv)  # type: ignore[union-attr]
    os.kill(executor, signal.SIGKILL)
    await d.wait_idle(token, sid)
    (body,) = finished(await d.events(token, sid))
    assert body["is_error"] and body["error_code"] == "EXECUTOR_UNAVAILABLE", body
    await _ended(pid, "the command of the killed executor")
    again = await _command(d, token, sid, "r2", command="echo again")
    assert again["status"] == "ok" and _text(again).startswith("again\n"), again


async def test_a_daemonized_grandchild_holding_the_output_neither_holds_the_call_nor_outlives_it(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, ws = await _session(d)
    # a double fork into a session of its own, keeping the command's stdout and stderr open
    command = ("(setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' &); "
               "while [ ! -s daemon.pid ]; do sleep 0.01; done; echo started")
    with trio.fail_after(60):
        body = await _command(d, token, sid, "r1", command=command, timeout_ms=120_000)
    assert body["status"] == "ok" and _text(body).startswith("started\n"), body
    assert body["structured_content"]["timed_out"] is False
    pid = int((ws / "daemon.pid").read_text())
    await _ended(pid, "the daemonized grandchild")


async def test_a_command_reading_stdin_gets_its_end_at_once(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, _ = await _session(d)
    body = await _command(d, token, sid, "r1", command="wc -c; read line; echo read=$?", timeout_ms=60_000)
    assert body["status"] == "ok" and body["structured_content"]["timed_out"] is False, body
    assert _text(body).startswith("0\nread=1\n"), body


async def test_provider_keys_of_the_daemon_are_not_in_a_commands_environment(daemon_factory: DaemonFactory,
                                                                             monkeypatch) -> None:
    keys = {"OPENAI_API_KEY": "sk-openai-withheld-0123456789abcdef", "ANTHROPIC_API_KEY": "sk-ant-withheld-0123456789",
            "GEMINI_API_KEY": "gemini-withheld-0123456789", "MY_PROVIDER_KEY": "myprov-withheld-0123456789abc"}
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    d = await daemon_factory(config={"providers": [
        {"id": "faux", "protocol": "faux"},
        {"id": "mine", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": "MY_PROVIDER_KEY"}],
        "defaultModel": "faux/faux-1"})
    token, sid, _ = await _session(d)
    body = await _command(d, token, sid, "r1", command="env")
    text = json.dumps(body)
    assert "PATH=" in text, body
    for name, value in keys.items():
        assert f"{name}=" not in text and value not in text, name


async def _every_slot_taken(d: Daemon) -> tuple[str, dict[str, Any], str, str, list[tuple[str, str]]]:
    """A project with two sessions, each running 8 background jobs: the executor's 16 command
    streams all held. (The credential, the project, the two sessions' ids, each job's session
    and id.)"""
    token = await d.pair("p", strong=True)
    project = await d.project(token, "p")
    sid, other = [(await d.session(token, project["id"]))["id"] for _ in range(2)]
    jobs = []
    for n, session in enumerate([sid] * 8 + [other] * 8):
        jobs.append((session, await start_job(d, token, session, f"j{n}", "exec sleep 300")))
        await d.wait_idle(token, session)
    return token, project, sid, other, jobs


async def test_a_command_that_finds_every_command_slot_taken_waits_no_longer_than_its_timeout(
        daemon_factory: DaemonFactory) -> None:
    """Background jobs hold the executor's command streams (16) for as long as they run; a
    ``run_command`` past them waited for a slot with no bound, holding the domain's write lock,
    whatever its ``timeout_ms``."""
    d = await daemon_factory()
    token, project, sid, other, jobs = await _every_slot_taken(d)
    with trio.fail_after(30):
        body = await _command(d, token, sid, "c1", command="echo ran > ran.txt", timeout_ms=1000)
    assert body["is_error"] and body["error_code"] == "TOO_MANY_COMMANDS", body
    text = _text(body)
    assert "16" in text and "1000 ms" in text and "stop a job" in text, text
    assert not (Path(project["workspace"]) / "ran.txt").exists()  # (refused: nothing ran)
    # the write lock was given back: the other session edits, and a slot freed lets a command run
    edit = await run_tool(d, token, other, "e1", "edit_file", {"path": "x.txt", "mode": "create", "content": "x"})
    assert edit["status"] == "ok", edit
    session, job_id = jobs[0]
    r = await d.post(f"/sessions/{session}/jobs/{job_id}/stop", token)
    assert r.status_code == 200, r.text
    await finished_of(d, token, session, job_id)
    # (the slot wait ends as soon as a slot frees; the bound only covers a loaded machine)
    ran = await _command(d, token, sid, "c2", command="echo ran", timeout_ms=30_000)
    assert ran["status"] == "ok" and _text(ran).startswith("ran\n"), (_text(ran), ran)


async def test_a_command_waiting_for_a_slot_is_aborted_at_once(daemon_factory: DaemonFactory) -> None:
    """Guards the abort of a command waiting on Core's count of the executor's streams (all held
    by jobs): the wait stays cancellable and gives the write lock back. The abort between the
    resends of a command the executor itself refuses is checked against the Core tools, where
    another client of the executor can hold its slots while Core's count is free
    (``tests/executor/test_commands_second_pass.py``)."""
    d = await daemon_factory()
    token, _, sid, other, _ = await _every_slot_taken(d)
    await d.submit(token, sid, "c1", "/tool run_command " + json.dumps({"command": "echo ran > ran.txt",
                                                                        "timeout_ms": 600_000}))
    await d.wait_running_call(token, sid)
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await d.wait_idle(token, sid)
    body = [b for b in finished(await d.events(token, sid)) if b["name"] == "run_command"][-1]
    assert body["status"] == "interrupted" and body["error_code"] == "ABORTED", body
    # the write lock was given back
    edit = await run_tool(d, token, other, "e1", "edit_file", {"path": "x.txt", "mode": "create", "content": "x"})
    assert edit["status"] == "ok", edit


async def test_an_edit_waiting_behind_a_command_whose_executor_is_killed_runs_on_the_next_executor(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token = await d.pair("p", strong=True)
    project = await d.project(token, "p")
    ws = Path(project["workspace"])
    sid, other = [(await d.session(token, project["id"]))["id"] for _ in range(2)]
    pid = await _held_command_shell(d, token, sid, ws)
    # the other session's edit waits for the domain's write lock the command holds
    await d.submit(token, other, "e1", "/tool edit_file " + json.dumps(
        {"path": "after.txt", "mode": "create", "content": "after\n"}))
    await d.wait_running_call(token, other)
    assert not (ws / "after.txt").exists()
    os.kill(_executor_of(pid), signal.SIGKILL)
    await d.wait_idle(token, sid)
    await d.wait_idle(token, other)
    (cmd,) = finished(await d.events(token, sid))
    assert cmd["error_code"] == "EXECUTOR_UNAVAILABLE", cmd
    (edit,) = finished(await d.events(token, other))
    assert edit["status"] == "ok", edit
    assert (ws / "after.txt").read_text() == "after\n"
