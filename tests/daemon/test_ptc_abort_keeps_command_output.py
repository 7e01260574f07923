"""An abort while a ``programmatic_tool_run`` program is inside ``run_command``: the command is
stopped through the executor's ``Stop`` as a direct call's is, and the program's interrupted
``tool.finished`` keeps what the program had printed, what the command had printed and how it
ended, and one line per call (the cut command's with its exit fields) — in the events route, the
view's call result and the same after a restart (replay).

The daemon on loopback port 0, a real executor process, the ``faux`` provider calling the PTC
entry (``/tool programmatic_tool_run …``). The command prints a marker, then writes a file, then
sleeps: the test aborts once the file exists, so the marker was printed before the abort.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.decide import ABORTED_TEXT

from .conftest import Daemon, DaemonFactory, finished, stop_daemon, wait_until
from .test_abort_keeps_command_output import _abort_once_printed, _call_result, _session

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}
PTC = "programmatic_tool_run"
MARKER = "MARKER-before-the-abort-7f3a"
# (printed in two pieces, so the command's own text, which the call's arguments show, holds no marker)
PRINT_MARKER = "printf '%s%s\\n' MARKER- before-the-abort-7f3a"
KILLED = "[killed by the abort: signal 15 (SIGTERM)]"


async def _start(daemon_factory: DaemonFactory, name: str,
                 config: dict[str, Any] | None = None) -> tuple[Daemon, str, str, Path]:
    return await _session(daemon_factory, name, config={**FAUX, "localPtc": {}, **(config or {})})


async def _run_program(d: Daemon, token: str, sid: str, program: str) -> str:
    """Submit ``program``; the PTC call's id once it runs."""
    await d.submit(token, sid, "p1", f"/tool {PTC} {json.dumps({'code': program})}")
    await d.wait_running_call(token, sid)
    [started] = [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.started"]
    assert started["name"] == PTC, started
    return started["call_id"]


async def test_an_aborted_programs_command_is_stopped_and_what_it_printed_is_kept_also_after_a_restart(
        daemon_factory: DaemonFactory) -> None:
    d, token, sid, ws = await _start(daemon_factory, "ptc-abort")
    program = ("first = run_command(command='echo one')\n"
               "print('first exit', first['exit_code'])\n"
               f"run_command(command={PRINT_MARKER + '; touch printed; sleep 600'!r})\n"
               "print('never')")
    cid = await _run_program(d, token, sid, program)
    await _abort_once_printed(d, token, sid, ws, "printed")

    [body] = finished(await d.events(token, sid))
    assert (body["call_id"], body["name"], body["status"], body["error_code"], body["is_error"]) == (
        cid, PTC, "interrupted", "ABORTED", True), body
    # Before: the abort's note alone, the command ended by its cancelled stream (no exit).
    assert body["content"] == [{"type": "text", "text": (
        f"first exit 0\n\n[call {cid}.2 (run_command) was running at the abort; its output:]\n"
        f"{MARKER}\n\n{KILLED}\n{ABORTED_TEXT}")}], body
    assert body["structured_content"] == {"aborted": True, "output_truncated": False, "calls": [
        {"call_id": f"{cid}.1", "name": "run_command", "ok": True},
        {"call_id": f"{cid}.2", "name": "run_command", "ok": False, "error_code": "ABORTED",
         "truncated": False, "exit_code": -15, "signal": "SIGTERM", "killed_by_abort": True}]}, body
    shown = _call_result(await d.view(token, sid), cid)
    assert (shown["status"], shown["text"], shown["structuredContent"]) == (
        "interrupted", body["content"][0]["text"], body["structured_content"]), shown

    view = await d.view(token, sid)
    await stop_daemon(d)
    d2 = await daemon_factory(config={**FAUX, "localPtc": {}}, root=d.root)
    assert finished(await d2.events(token, sid)) == [body]
    assert (await d2.view(token, sid))["items"] == view["items"]


async def test_an_aborted_programs_command_that_traps_the_stop_keeps_its_last_lines_and_code(
        daemon_factory: DaemonFactory) -> None:
    """Only the executor's ``Stop`` lets the command end by itself and its last line reach Core:
    a cancelled stream kills the group and reads nothing more."""
    d, token, sid, ws = await _start(daemon_factory, "ptc-abort-trap")
    command = f"trap 'echo cleaning up; exit 3' TERM; {PRINT_MARKER}; sleep 600 & touch printed; wait"
    cid = await _run_program(d, token, sid, f"run_command(command={command!r})")
    await _abort_once_printed(d, token, sid, ws, "printed")
    [body] = finished(await d.events(token, sid))
    assert body["content"][0]["text"] == (
        f"(the program printed nothing)\n[call {cid}.1 (run_command) was running at the abort; its output:]\n"
        f"{MARKER}\ncleaning up\n\n[stopped by the abort: exit 3]\n{ABORTED_TEXT}"), body
    [line] = body["structured_content"]["calls"]
    assert line == {"call_id": f"{cid}.1", "name": "run_command", "ok": False, "error_code": "ABORTED",
                    "truncated": False, "exit_code": 3, "signal": None, "killed_by_abort": True}, line


async def test_a_program_aborted_in_another_call_keeps_what_it_printed_and_its_calls(
        daemon_factory: DaemonFactory) -> None:
    d, token, sid, ws = await _start(daemon_factory, "ptc-abort-sleep")
    program = ("print('so far')\n"
               "edit_file(path='made.txt', mode='create', content='x')\n"
               "edit_file(path='then.txt', mode='create', content='y')\n"
               "sleep_milliseconds(milliseconds=600000)\n"
               "print('never')")
    cid = await _run_program(d, token, sid, program)
    # (then.txt is made once the first edit's result came back to the program, so Core has it;
    # made.txt alone is there before its call returns, and an abort then cut that call short)
    await _abort_once_printed(d, token, sid, ws, "then.txt")
    events = await d.events(token, sid)
    [body] = finished(events)
    assert (body["status"], body["error_code"]) == ("interrupted", "ABORTED"), body
    calls = body["structured_content"]["calls"]
    assert calls[0] == {"call_id": f"{cid}.1", "name": "edit_file", "ok": True}, calls
    # (the abort may come before the second edit returned, or before the program reached its
    # sleep: each file is written within its edit's call, before it returns)
    aborted = {"ok": False, "error_code": "ABORTED"}
    assert calls[1:] in ([{"call_id": f"{cid}.2", "name": "edit_file", **aborted}],
                         [{"call_id": f"{cid}.2", "name": "edit_file", "ok": True}],
                         [{"call_id": f"{cid}.2", "name": "edit_file", "ok": True},
                          {"call_id": f"{cid}.3", "name": "sleep_milliseconds", **aborted}]), calls
    kinds = [(e["kind"], e["body"].get("path")) for e in events if e["kind"] in ("tool.finished", "file.edited")]
    edited_then = [i for i, k in enumerate(kinds) if k == ("file.edited", "then.txt")]
    cut_after_writing = calls[1] == {"call_id": f"{cid}.2", "name": "edit_file", **aborted} and bool(edited_then)
    if cut_after_writing:
        # The abort cut ``.2`` after the executor completed it: its edit is recorded after the
        # cut result, which says so first.
        assert kinds == [("file.edited", "made.txt"), ("tool.finished", None), ("file.edited", "then.txt")], kinds
        assert body["content"][0]["text"] == (
            "[the edit was applied all the same before the call was cut off: then.txt changed; "
            f"revert_call can undo it]\nso far\n\n{ABORTED_TEXT}"), body
    else:
        # Cut before its result, recorded nothing; or returned, its edit recorded as it returned.
        assert kinds == [("file.edited", "made.txt"), *([("file.edited", "then.txt")] if calls[1]["ok"] else []),
                         ("tool.finished", None)], kinds
        assert body["content"][0]["text"] == f"so far\n\n{ABORTED_TEXT}", body


async def test_an_aborted_programs_command_output_past_the_log_s_event_limit_is_cut_to_fit(
        daemon_factory: DaemonFactory) -> None:
    """70,000 bytes printed by the command and 10,000 by the program under ``log.maxEventBytes``
    65,536: the abort is recorded, the command's output cut to fit first, the program's in
    what room is left, both said cut."""
    d, token, sid, ws = await _start(daemon_factory, "ptc-abort-fit", {"log": {"maxEventBytes": 65536}})
    command = "head -c 70000 /dev/zero | tr '\\0' x; touch printed; sleep 600"
    cid = await _run_program(d, token, sid, f"print('p' * 10000)\nrun_command(command={command!r})")
    await _abort_once_printed(d, token, sid, ws, "printed")
    events = await d.events(token, sid)
    [body] = finished(events)
    assert (body["status"], body["error_code"]) == ("interrupted", "ABORTED"), body
    text = body["content"][0]["text"]
    printed, rest = text.split("\n[the program's output was cut]\n", 1)
    assert set(printed) <= {"p"} and len(printed) < 10000, len(printed)
    header = f"[call {cid}.1 (run_command) was running at the abort; its output:]\n"
    assert rest.startswith(header), rest[:200]
    kept, end = rest[len(header):].split("\n", 1)
    assert 0 < len(kept) < 65536 and set(kept) == {"x"}, len(kept)
    assert end == f"[killed by the abort: signal 15 (SIGTERM), output truncated]\n{ABORTED_TEXT}", end
    assert len(json.dumps(body).encode()) < 65536
    assert body["structured_content"]["output_truncated"] is True
    assert body["structured_content"]["calls"][0]["truncated"] is True
    assert [e["kind"] for e in events][-2:] == ["run.aborted", "task.finished"], [e["kind"] for e in events]
