"""A command's card says how the command ended, from its result's structured fields: a chip in
the card's head, its short words shown and the result note's own words as its title and as what
a screen reader reads. The same for a command that finished (its exit code, the signal that
killed it, its timeout), one an abort cut off (stopped by the abort, ended by itself during it,
or with no exit in time), and a program the abort cut off (the call it was in and, for a
command, how that ended). The result's text is shown as before.

One real daemon (``lens serve`` on loopback port 0, a real executor process, the ``faux``
provider calling the tools) and one headless Chromium, as in ``test_dashboard_browser.py``;
aborts as in ``tests/daemon/test_abort_keeps_command_output.py``. Every wait is for a condition.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, console_errors, daemon, open_session, submit, wait_for)
from tests.dashboard.test_dashboard_rerun import ptc_daemon  # noqa: F401 (a fixture)
from tests.procfs import read_proc

PTC = "programmatic_tool_run"
# (null until the call's card shows its result)
CHIPS = """
const card = document.querySelector(`#timeline .tool[data-call-id="${arguments[0]}"]`);
const result = card && [...card.querySelectorAll(":scope > details")].find(
  (d) => ["result", "error result"].includes(d.querySelector("summary").textContent));
if (!result) return null;
return {text: result.querySelector("pre").textContent, chips: Array.from(card.querySelectorAll(".head .pill.end"), (n) => [
  n.querySelector("[aria-hidden=true]").textContent, n.title, n.querySelector(".visually-hidden").textContent,
  n.getBoundingClientRect().width > 0])};
"""


class Page:
    """The open session in the page and in the daemon."""

    def __init__(self, driver: Any, daemon: Daemon, token: str, sid: str, ws: Path) -> None:
        self.driver, self.daemon, self.token, self.sid, self.ws = driver, daemon, token, sid, ws

    def view(self) -> dict[str, Any]:
        status, view = self.daemon.request("GET", f"/sessions/{self.sid}", token=self.token)
        assert status == 200, view
        return view

    def calls(self) -> list[dict[str, Any]]:
        return [it for it in self.view()["items"] if it["role"] == "tool_call"]

    def run(self, tool: str, args: dict[str, Any], abort_once: str | None = None,
            before_abort: Any = None) -> dict[str, Any]:
        """Submit ``/tool tool args``; with ``abort_once``, abort the run once that file is in the
        workspace (``before_abort`` called first; what it returns, if anything, is called after
        the abort). The call's item once the session is idle."""
        had = len(self.calls())
        (self.ws / (abort_once or "-")).unlink(missing_ok=True)
        submit(self.driver, f"/tool {tool} " + json.dumps(args))
        if abort_once is not None:
            wait_for(lambda: (self.ws / abort_once).exists(), f"{abort_once} made by the running call")
            undo = before_abort() if before_abort else None
            try:
                status, body = self.daemon.request("POST", f"/sessions/{self.sid}/abort", token=self.token)
                assert status == 200 and body["aborted"] is True, body
            finally:
                if undo:
                    undo()

        def done() -> dict[str, Any] | None:
            view = self.view()
            calls = [it for it in view["items"] if it["role"] == "tool_call"]
            return calls[-1] if view["status"] == "idle" and len(calls) > had and "result" in calls[-1] else None

        item = wait_for(done, f"{tool} finished")
        wait_for(lambda: body_data(self.driver, "sessionStatus") == "idle", "the idle session in the page")
        return item

    def chips(self, item: dict[str, Any], shown: list[str], in_text: bool = True) -> list[str]:
        """Wait until the call's card shows its result and the chips ``shown``; each chip's title
        is what a screen reader reads of it and (``in_text``) stands in the result's text, the
        result's own note. Their titles."""
        cid = item["call"]["callId"]

        def drawn() -> Any:
            got = self.driver.execute_script(CHIPS, cid)
            return got if got is not None and [c[0] for c in got["chips"]] == shown else None

        got = wait_for(drawn, f"the chips {shown} on {cid}'s card")
        expected = item["result"]["text"] or "(empty)"
        assert got["text"] == expected, (got["text"], item["result"])  # (the text as it was)
        for short, title, read, displayed in got["chips"]:
            assert title == read and displayed, (short, title, read)
            assert not in_text or title in got["text"], (title, got["text"])
        return [c[1] for c in got["chips"]]


def start(driver: Any, daemon: Daemon, tmp_path: Path, client: str) -> Page:
    token, sid = open_session(driver, daemon, tmp_path, client)
    return Page(driver, daemon, token, sid, tmp_path / "workspace")


def test_dashboard_says_how_a_finished_or_aborted_command_ended(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    page = start(browser, daemon, tmp_path, "dash-command-end")
    run = lambda args, **kw: page.run("run_command", args, **kw)  # noqa: E731

    # finished: its exit code, the signal that killed it, its timeout
    assert page.chips(run({"command": "true"}), ["exit 0"]) == ["exit 0"]
    assert page.chips(run({"command": "exit 3"}), ["exit 3"]) == ["exit 3"]
    assert page.chips(run({"command": "kill -9 $$"}), ["killed by SIGKILL"]) == ["killed by signal 9 (SIGKILL)"]
    timed = run({"command": "sleep 600", "timeout_ms": 200})
    sig = timed["result"]["structuredContent"]["signal"]
    assert timed["result"]["structuredContent"]["timed_out"] is True and sig, timed
    code = -timed["result"]["structuredContent"]["exit_code"]
    assert page.chips(timed, [f"timed out · {sig}"]) == [f"killed by signal {code} ({sig}), timed out"]
    cut = run({"command": "head -c 65 /dev/zero | tr '\\0' x", "max_output_bytes": 64})
    assert page.chips(cut, ["exit 0"]) == ["exit 0, output truncated"]

    # aborted: the abort's stop killed it, it trapped the stop and exited 3, it had ended by itself
    stopped = run({"command": "touch printed; sleep 600"}, abort_once="printed")
    assert page.chips(stopped, ["stopped by the abort · SIGTERM"]) == ["killed by the abort: signal 15 (SIGTERM)"]
    trapped = run({"command": "trap 'echo cleaning up; exit 3' TERM; sleep 600 & touch printed; wait"},
                  abort_once="printed")
    assert page.chips(trapped, ["stopped by the abort · exit 3"]) == ["stopped by the abort: exit 3"]

    # (its shell exits 3 by itself, a background job holding its output: the call still runs)
    def shell_exited() -> bool:
        pid = (page.ws / "shell.pid").read_text().strip() if (page.ws / "shell.pid").exists() else ""
        proc = read_proc(int(pid)) if pid else None
        return bool(pid) and (proc is None or proc.state == "Z")

    (page.ws / "shell.pid").unlink(missing_ok=True)
    submit_ended = {"command": "echo $$ > shell.pid; (sleep 600 &); touch ended; exit 3"}
    ended = run(submit_ended, abort_once="ended", before_abort=lambda: wait_for(shell_exited, "the shell exited") and None)
    assert ended["result"]["structuredContent"]["killed_by_abort"] is False, ended
    assert page.chips(ended, ["exit 3 (ended by itself)"]) == ["exit 3: the command ended by itself during the abort"]

    # no exit within the abort's wait: the executor stopped (SIGSTOP) under the command
    def stop_the_executor() -> Any:
        reaper = read_proc(int((page.ws / "reaper.pid").read_text()))
        assert reaper is not None
        os.kill(reaper.ppid, signal.SIGSTOP)
        return lambda: os.kill(reaper.ppid, signal.SIGCONT)

    lost = run({"command": "echo $PPID > reaper.pid; touch printed; sleep 600"}, abort_once="printed",
               before_abort=stop_the_executor)
    assert lost["result"]["structuredContent"]["exit_code"] is None, lost
    assert page.chips(lost, ["killed by the abort"]) == ["killed by the abort"]

    # a call that is no command has no chip
    none = page.run("read_file", {"path": "shell.pid"})
    assert page.chips(none, []) == []
    assert not console_errors(browser)


def test_dashboard_says_which_call_an_aborted_program_was_in_and_how_its_command_ended(
        ptc_daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    page = start(browser, ptc_daemon, tmp_path, "dash-program-cut")
    program = ("run_command(command='echo one')\n"
               "run_command(command='touch printed; sleep 600')\n"
               "print('never')")
    item = page.run(PTC, {"code": program}, abort_once="printed")
    cid = item["call"]["callId"]
    assert page.chips(item, [f"cut in run_command ({cid}.2)", "stopped by the abort · SIGTERM"]) == [
        f"call {cid}.2 (run_command) was running at the abort", "killed by the abort: signal 15 (SIGTERM)"]

    # in another call: the call it was in, no command's end. The abort comes once the edit's file
    # is there, which is before the edit's answer reached the program: the abort may cut the
    # program in the edit, between the edit and the sleep (no call cut off) or in the sleep. The
    # chip names the call the result records as cut off, and none when it records none.
    program = ("edit_file(path='made.txt', mode='create', content='x')\n"
               "sleep_milliseconds(milliseconds=600000)\n")
    item = page.run(PTC, {"code": program}, abort_once="made.txt")
    cid = item["call"]["callId"]
    calls = item["result"]["structuredContent"]["calls"]
    assert [(c["call_id"], c["name"]) for c in calls] in (
        [(f"{cid}.1", "edit_file")], [(f"{cid}.1", "edit_file"), (f"{cid}.2", "sleep_milliseconds")]), calls
    assert all(c.get("error_code") == "ABORTED" or c["ok"] for c in calls), calls
    was_cut = [c for c in calls if c.get("error_code") == "ABORTED"]
    assert was_cut in ([], calls[-1:]), calls
    # (the result's text names no call here: the program's own prints and the abort's note)
    assert page.chips(item, [f"cut in {c['name']} ({c['call_id']})" for c in was_cut], in_text=False) == [
        f"call {c['call_id']} ({c['name']}) was running at the abort" for c in was_cut]

    # a program that finished has no chip, nor its commands
    done = page.run(PTC, {"code": "run_command(command='exit 3')\nprint('done')"})
    assert page.chips(done, []) == []
    assert not console_errors(browser)
