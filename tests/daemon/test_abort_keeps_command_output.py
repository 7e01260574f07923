"""An abort while ``run_command`` runs keeps the output the command printed before it (as a
timed-out command's result keeps its output): one ``tool.finished``, still ``interrupted`` /
``ABORTED``, holds the output, the kill and the abort's note — in the events route, the view's
call result, the next model request's tool result, and the same after a restart (replay).

The daemon on loopback port 0, a real executor process, the ``faux`` provider calling the tool
(``/tool run_command …``), and an Anthropic Messages server on loopback (the official SDK) for
what the next request holds. The command prints a marker, then writes a file, then sleeps: the
test aborts once the file exists, so the marker was printed before the abort.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime.decide import ABORTED_TEXT
from tests.procfs import read_proc
from tools.executor.commands import KILL_GRACE_S
from tools.workspace_tools import ABORT_OUTPUT_WAIT_S, ABORT_STOP_ANSWER_WAIT_S

from ..executor.conftest import start_executor, stop_process
from ..executor.relay import Relay
from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import Daemon, DaemonFactory, finished, stop_daemon, wait_until

MARKER = "MARKER-before-the-abort-7f3a"
# (printed in two pieces, so the command's own text, which the call's arguments show, holds no marker)
PRINT_MARKER = "printf '%s%s\\n' MARKER- before-the-abort-7f3a"
KILLED = "[killed by the abort: signal 15 (SIGTERM)]"


async def _session(daemon_factory: DaemonFactory, name: str, **daemon: Any) -> tuple[Daemon, str, str, Path]:
    """A daemon (``daemon``: its factory's arguments), a strong credential, a project named
    ``name`` and a session of it: (daemon, token, session id, workspace)."""
    d = await daemon_factory(**daemon)
    token = await d.pair(name, strong=True)
    project = await d.project(token, name)
    sid = (await d.session(token, project["id"]))["id"]
    return d, token, sid, Path(project["workspace"])


async def _abort_once_printed(d: Daemon, token: str, sid: str, ws: Path, name: str = "printed") -> None:
    """Abort the session once its running command has made ``name`` in the workspace (after
    printing what the test looks for)."""
    await d.wait_running_call(token, sid)

    async def printed() -> bool:
        return (ws / name).exists()

    await wait_until(printed, what=f"{name} made by the running command")
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await d.wait_idle(token, sid)


async def _aborted_result(d: Daemon, token: str, sid: str) -> dict[str, Any]:
    """The ``tool.finished`` body of the session's one call, once the session is idle after the
    abort: interrupted by it."""
    await d.wait_idle(token, sid)
    [body] = finished(await d.events(token, sid))
    assert (body["status"], body["error_code"]) == ("interrupted", "ABORTED"), body
    return body


async def _executor_running(d: Daemon, token: str, sid: str, ws: Path, command: str) -> int:
    """Run ``command`` (which writes its reaper's parent, ``$PPID``, to ``reaper.pid`` and then
    touches ``printed``) as a tool call, and return the pid of the executor running it once it
    has printed."""
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await d.wait_running_call(token, sid)

    async def printed() -> bool:
        return (ws / "printed").exists()

    await wait_until(printed, what="the command's marker printed")
    reaper = read_proc(int((ws / "reaper.pid").read_text()))
    assert reaper is not None
    executor = read_proc(reaper.ppid)
    assert executor is not None and b"executor" in executor.argv, executor
    return reaper.ppid


def _call_result(view: dict[str, Any], call_id: str) -> dict[str, Any]:
    """The result shown in the view's item of call ``call_id``."""
    [item] = [it for it in view["items"] if it.get("call", {}).get("callId") == call_id]
    return item["result"]


async def test_an_aborted_command_keeps_what_it_printed_in_its_result_view_and_after_a_restart(
        daemon_factory: DaemonFactory) -> None:
    d, token, sid, ws = await _session(daemon_factory, "abort-output")
    command = f"{PRINT_MARKER}; touch printed; sleep 600"
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await _abort_once_printed(d, token, sid, ws)

    [body] = finished(await d.events(token, sid))
    assert (body["name"], body["status"], body["error_code"], body["is_error"]) == (
        "run_command", "interrupted", "ABORTED", True), body
    # Before: the abort's note alone; the marker the command had printed was lost. Then: no
    # exit status, "[killed by the abort]" alone. The executor's Stop sends the group SIGTERM
    # and the command's exit comes back with it.
    assert body["content"] == [{"type": "text", "text": f"{MARKER}\n\n{KILLED}\n{ABORTED_TEXT}"}], body
    assert body["structured_content"] == {"aborted": True, "truncated": False, "exit_code": -15,
                                          "signal": "SIGTERM", "killed_by_abort": True}, body
    shown = _call_result(await d.view(token, sid), body["call_id"])
    assert (shown["status"], shown["text"], shown["structuredContent"]) == (
        "interrupted", body["content"][0]["text"], body["structured_content"]), shown

    # Replay after a restart: the same record and the same view.
    view = await d.view(token, sid)
    await stop_daemon(d)
    d2 = await daemon_factory(root=d.root)
    assert finished(await d2.events(token, sid)) == [body]
    assert (await d2.view(token, sid))["items"] == view["items"]


@pytest.mark.parametrize("printed, kept, truncated", [
    (63, 63, False),   # under the cap: whole, no note of a cut
    (64, 64, False),   # at the cap: the command's exit says no byte more came
    (65, 64, True),    # one past: cut at the cap, as a timed-out command's output is
], ids=["under the cap", "at the cap", "one past the cap"])
async def test_an_aborted_command_s_output_is_cut_at_its_cap(
        daemon_factory: DaemonFactory, printed: int, kept: int, truncated: bool) -> None:
    d, token, sid, ws = await _session(daemon_factory, "abort-cap")
    command = f"head -c {printed} /dev/zero | tr '\\0' x; touch printed; sleep 600"
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command, "max_output_bytes": 64}))
    await _abort_once_printed(d, token, sid, ws)
    [body] = finished(await d.events(token, sid))
    note = "[killed by the abort: signal 15 (SIGTERM), output truncated]" if truncated else KILLED
    assert body["content"][0]["text"] == "x" * kept + f"\n{note}\n{ABORTED_TEXT}", body
    assert body["structured_content"] == {"aborted": True, "truncated": truncated, "exit_code": -15,
                                          "signal": "SIGTERM", "killed_by_abort": True}, body


def _config(url: str) -> dict[str, Any]:
    return {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url,
                           "models": [{"id": "claude-test", "contextWindow": 50000}]}],
            "defaultModel": "claude/claude-test"}


def _tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


async def test_the_next_request_holds_what_the_aborted_command_printed_also_after_a_restart(
        daemon_factory: DaemonFactory, nursery: Any) -> None:
    server = ScriptedServer()
    url = await server.start(nursery)
    command = f"{PRINT_MARKER}; touch printed; sleep 600"
    server.push(message_stream(calls=[("toolu_1", "run_command", {"command": command})], stop_reason="tool_use"),
                message_stream(text="Seen."), message_stream(text="Seen again."))
    d = await daemon_factory(config=_config(url))
    token = await d.pair("abort-next", strong=True)
    project = await d.project(token, "abort-next")
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", "run it")
    await _abort_once_printed(d, token, sid, Path(project["workspace"]))
    expected = f"{MARKER}\n\n{KILLED}\n{ABORTED_TEXT}"

    await d.submit(token, sid, "r2", "what did it print?")
    await d.wait_idle(token, sid)
    [result] = _tool_results(server.requests[1].body)
    assert json.dumps(result).find(json.dumps(expected)[1:-1]) >= 0, result

    await stop_daemon(d)
    d2 = await daemon_factory(config=_config(url), root=d.root)
    await d2.submit(token, sid, "r3", "and now?")
    await d2.wait_idle(token, sid)
    assert _tool_results(server.requests[2].body) == [result]
    assert len(server.requests) == 3


async def test_an_abort_stays_prompt_when_the_executor_cannot_answer(daemon_factory: DaemonFactory) -> None:
    """The executor stopped (SIGSTOP) while the command runs, for good: the abort waits for its
    answer to ``Stop`` at most ``ABORT_STOP_ANSWER_WAIT_S``, then records the call with what had
    arrived."""
    d, token, sid, ws = await _session(daemon_factory, "abort-stalled")
    command = f"{PRINT_MARKER}; echo $PPID > reaper.pid; touch printed; sleep 600"
    executor = await _executor_running(d, token, sid, ws, command)
    os.kill(executor, signal.SIGSTOP)
    try:
        began = trio.current_time()
        r = await d.post(f"/sessions/{sid}/abort", token)
        took = trio.current_time() - began
        assert r.status_code == 200 and r.json()["aborted"] is True, r.text
        assert took < ABORT_STOP_ANSWER_WAIT_S + 2, took
        [body] = finished(await d.events(token, sid))
        assert (body["status"], body["error_code"]) == ("interrupted", "ABORTED"), body
        # (the marker, when it had arrived before the executor stopped, comes first; no exit
        # came, so how the command ended is not known)
        assert body["content"][0]["text"].endswith(f"[killed by the abort]\n{ABORTED_TEXT}"), body
        assert body["structured_content"] == {"aborted": True, "truncated": False, "exit_code": None,
                                              "signal": None, "killed_by_abort": None}, body
    finally:
        os.kill(executor, signal.SIGCONT)
    await d.wait_idle(token, sid)


async def test_an_aborted_command_s_output_past_the_log_s_event_limit_is_cut_to_fit(
        daemon_factory: DaemonFactory) -> None:
    """70,000 bytes printed under ``log.maxEventBytes`` 65,536: the abort is still recorded, its
    output cut to fit one event (and said truncated), not refused by the log with everything
    else the abort records."""
    d, token, sid, ws = await _session(daemon_factory, "abort-fit", config={"log": {"maxEventBytes": 65536}})
    command = "head -c 70000 /dev/zero | tr '\\0' x; touch printed; sleep 600"
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await _abort_once_printed(d, token, sid, ws)
    events = await d.events(token, sid)
    [body] = finished(events)
    assert (body["status"], body["error_code"]) == ("interrupted", "ABORTED"), body
    text = body["content"][0]["text"]
    kept = text.split("\n", 1)[0]
    assert 0 < len(kept) < 65536 and set(kept) == {"x"}, len(kept)
    assert text == kept + f"\n[killed by the abort: signal 15 (SIGTERM), output truncated]\n{ABORTED_TEXT}"
    assert [e["kind"] for e in events][-2:] == ["run.aborted", "task.finished"], [e["kind"] for e in events]


def assert_stopped_with_its_own_exit(body: dict) -> None:
    """The aborted command's trap printed its last line and exited 3: all of it is kept, and the
    exit is the command's own, not a kill."""
    assert body["content"][0]["text"] == (
        f"{MARKER}\ncleaning up\n\n[stopped by the abort: exit 3]\n{ABORTED_TEXT}"), body
    assert body["structured_content"] == {"aborted": True, "truncated": False, "exit_code": 3, "signal": None,
                                          "killed_by_abort": True}, body


async def test_an_aborted_command_that_ends_with_its_own_code_is_recorded_with_it(
        daemon_factory: DaemonFactory) -> None:
    """The command traps the abort's SIGTERM, prints a last line and exits 3: its result says the
    abort stopped it with exit 3, and keeps the line it printed while it ended."""
    d, token, sid, ws = await _session(daemon_factory, "abort-trap")
    # (``wait``: a SIGTERM before a foreground sleep started would run the trap only after it)
    command = f"trap 'echo cleaning up; exit 3' TERM; {PRINT_MARKER}; sleep 600 & touch printed; wait"
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await _abort_once_printed(d, token, sid, ws)
    body = await _aborted_result(d, token, sid)
    assert_stopped_with_its_own_exit(body)


# How long the command's cleanup on SIGTERM takes in the test below (the trap's own ``sleep``, the
# command's length, not an ordering of the test): longer than the abort's old wait for the exit
# after the executor's answer, well within the executor's grace before SIGKILL.
SLOW_CLEANUP_S = 0.75


async def test_an_aborted_command_whose_cleanup_outlasts_the_output_wait_is_recorded_with_its_own_code(
        daemon_factory: DaemonFactory) -> None:
    """The command traps the abort's SIGTERM and takes longer than ``ABORT_OUTPUT_WAIT_S`` to
    print its last line and exit 3: the executor answers ``Stop`` once the command has ended, so
    the result still says the abort stopped it with exit 3 and keeps that line (before: the
    answer came at once, and 0.25 s later the call was recorded ``[killed by the abort]``)."""
    assert ABORT_OUTPUT_WAIT_S < SLOW_CLEANUP_S < KILL_GRACE_S
    d, token, sid, ws = await _session(daemon_factory, "abort-slow-trap")
    command = (f"trap 'sleep {SLOW_CLEANUP_S}; echo cleaning up; exit 3' TERM; {PRINT_MARKER}; "
               "sleep 600 & touch printed; wait")
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await _abort_once_printed(d, token, sid, ws)
    body = await _aborted_result(d, token, sid)
    assert_stopped_with_its_own_exit(body)


async def test_an_aborted_command_that_ignores_sigterm_is_killed_after_the_grace_and_recorded_so(
        daemon_factory: DaemonFactory) -> None:
    """The command ignores SIGTERM: the executor kills it ``KILL_GRACE_S`` after the stop, the
    abort answers within its bound, and the result names the SIGKILL."""
    d, token, sid, ws = await _session(daemon_factory, "abort-ignores-term")
    command = f"trap '' TERM; {PRINT_MARKER}; sleep 600 & touch printed; wait"
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await d.wait_running_call(token, sid)

    async def printed() -> bool:
        return (ws / "printed").exists()

    await wait_until(printed, what="printed made by the running command")
    began = trio.current_time()
    r = await d.post(f"/sessions/{sid}/abort", token)
    took = trio.current_time() - began
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    assert KILL_GRACE_S <= took < ABORT_STOP_ANSWER_WAIT_S + 2, took
    body = await _aborted_result(d, token, sid)
    assert body["content"][0]["text"] == (
        f"{MARKER}\n\n[killed by the abort: signal 9 (SIGKILL)]\n{ABORTED_TEXT}"), body
    assert body["structured_content"] == {"aborted": True, "truncated": False, "exit_code": -9,
                                          "signal": "SIGKILL", "killed_by_abort": True}, body


async def test_a_command_that_had_ended_by_itself_when_the_abort_came_is_not_said_killed(
        daemon_factory: DaemonFactory) -> None:
    """The command's shell exits 3 by itself, leaving a background job that holds its output
    (the executor reads on for a moment, and the call is still running): an abort then records
    the command's own exit, not a kill."""
    d, token, sid, ws = await _session(daemon_factory, "abort-ended")
    command = f"{PRINT_MARKER}; echo $$ > shell.pid; (sleep 600 &); exit 3"
    await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await d.wait_running_call(token, sid)

    async def shell_exited() -> bool:
        if not (ws / "shell.pid").exists() or not (ws / "shell.pid").read_text().strip():
            return False
        proc = read_proc(int((ws / "shell.pid").read_text()))
        return proc is None or proc.state == "Z"

    await wait_until(shell_exited, what="the command's shell exited", interval=0.005)
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    body = await _aborted_result(d, token, sid)
    assert body["content"][0]["text"] == (
        f"{MARKER}\n\n[exit 3: the command ended by itself during the abort]\n{ABORTED_TEXT}"), body
    assert body["structured_content"] == {"aborted": True, "truncated": False, "exit_code": 3, "signal": None,
                                          "killed_by_abort": False}, body


# How long the executor is frozen in the test below: longer than the abort's wait for the exit
# (so the wait counted from the Stop sent ran out before the executor could act on it), well
# within the bound on its answer.
FROZEN_S = 0.6


async def test_an_abort_on_a_slow_host_waits_for_the_executor_s_answer_and_records_the_real_end(
        daemon_factory: DaemonFactory, nursery: Any) -> None:
    """The executor is not run (SIGSTOP) from just before the abort until ``FROZEN_S`` later, as
    on a loaded host: the wait for the command's end counts from the executor's answer to
    ``Stop``, so the command that traps SIGTERM is recorded stopped with its own exit 3 and its
    last line, not "killed by the abort" with no exit (the wait counted from the Stop sent ran out
    while the executor was frozen)."""
    assert ABORT_OUTPUT_WAIT_S < FROZEN_S < ABORT_STOP_ANSWER_WAIT_S - 1
    d, token, sid, ws = await _session(daemon_factory, "abort-slow-host")
    command = (f"trap 'echo cleaning up; exit 3' TERM; {PRINT_MARKER}; echo $PPID > reaper.pid; "
               "sleep 600 & touch printed; wait")
    executor = await _executor_running(d, token, sid, ws, command)
    thawed = trio.Event()

    async def thaw() -> None:
        await trio.sleep(FROZEN_S)  # (a slow host: the executor gets no time for this long)
        os.kill(executor, signal.SIGCONT)
        thawed.set()

    os.kill(executor, signal.SIGSTOP)
    try:
        nursery.start_soon(thaw)
        began = trio.current_time()
        r = await d.post(f"/sessions/{sid}/abort", token)
        took = trio.current_time() - began
        assert r.status_code == 200 and r.json()["aborted"] is True, r.text
        assert thawed.is_set(), took  # (the abort waited for the executor)
        assert took < ABORT_STOP_ANSWER_WAIT_S + 2, took
    finally:
        os.kill(executor, signal.SIGCONT)
    body = await _aborted_result(d, token, sid)
    assert_stopped_with_its_own_exit(body)


async def test_an_exit_only_the_stop_answer_gave_leaves_the_output_marked_cut(
        daemon_factory: DaemonFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote executor whose stream's exit never reaches the daemon (a relay withholds it),
    while its answer to ``Stop`` carries the exit: the result says how the command ended, and
    that its output is cut, since what the stream sent last may not have been read."""
    remote = start_executor(tmp_path / "remote")
    try:
        with Relay(remote.address, withhold_exit=True) as relay:
            monkeypatch.setenv("LENS_TEST_REMOTE_TOKEN", remote.token)
            d, token, sid, _ = await _session(daemon_factory, "abort-exit-withheld", config={
                "executor": {"address": relay.address, "tokenEnv": "LENS_TEST_REMOTE_TOKEN"}})
            command = f"{PRINT_MARKER}; sleep 600 & touch printed; wait"
            await d.submit(token, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
            await _abort_once_printed(d, token, sid, remote.workspace)
            body = await _aborted_result(d, token, sid)
            assert body["content"][0]["text"] == (
                f"{MARKER}\n\n[killed by the abort: signal 15 (SIGTERM), output truncated]\n{ABORTED_TEXT}"), body
            assert body["structured_content"] == {"aborted": True, "truncated": True, "exit_code": -15,
                                                  "signal": "SIGTERM", "killed_by_abort": True}, body
            await stop_daemon(d)
    finally:
        stop_process(remote.proc)
