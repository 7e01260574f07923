"""The dashboard says when a tool call ran twice (``tool.finished``'s ``rerun_after``): its
executor child was SIGKILLed under the first run, and the call ran again on the child spawned in
its place. Said wherever the page shows a call: the main agent's card, a subagent's calls (on the
``subagent`` call's card and the subagent's entry under Agents), a program's calls (on the
``programmatic_tool_run`` card), the call's line in Recent events and, for an edit, the edited
file's card in Changes. One real daemon (its executor under the executor's test hold, which blocks the edit
once its file is written, before the reply) and one headless Chromium, as in
``test_dashboard_browser.py`` (its helpers). Every wait is for a condition.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    CONFIG, Daemon, attrs, becomes, body_data, browser, by_css, console_errors, daemon, open_session, submit, texts, wait_for)
from tests.executor_hold import held_at

NOTE = "Ran again after its executor stopped (EXECUTOR_UNAVAILABLE)."
AGAIN = "ran again after its executor stopped (EXECUTOR_UNAVAILABLE)"


def activity_reruns(driver: Any) -> list[str]:
    """The Recent events lines that say a call ran again, without their seq."""
    return [line.split(" ", 1)[1] for line in texts(driver, "#activity li") if "ran again" in line]


def changes_notes(driver: Any, path: str = "f.txt") -> list[str]:
    """The notes on the Changes panel's card of ``path``."""
    return texts(driver, f"#changes li.card[data-path='{path}'] .rerun")


def check_notes_are_notes(driver: Any) -> None:
    # (the panels are drawn again as the run's last events and reads come: a stale note is found again)
    becomes(lambda: [(n.get_attribute("role"), n.is_displayed()) for n in by_css(driver, ".rerun")],
            lambda seen: all(x == ("note", True) for x in seen), "each rerun note a note, shown")


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The daemon started after this (and its executors) holds the first edit before its reply;
    returns the file that names the executor holding it."""
    return held_at(monkeypatch, tmp_path, "before_reply")


def a_session_with_a_file(driver: Any, daemon: Daemon, tmp_path: Path, client: str) -> tuple[str, Path, str]:
    """A strong credential for ``client`` and a new session of its project opened in the page, then
    ``f.txt`` ("a") written in the project's workspace: (token, workspace, session id)."""
    token, session_id = open_session(driver, daemon, tmp_path, client)
    workspace = tmp_path / "workspace"
    (workspace / "f.txt").write_text("a\n")
    return token, workspace, session_id


def test_dashboard_notes_a_call_that_ran_again_after_its_executor_stopped(
        held: Path, daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    driver = browser
    token, workspace, session_id = a_session_with_a_file(driver, daemon, tmp_path, "dash-rerun")
    edit = {"path": "f.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "ab"}]}
    submit(driver, "/tool edit_file " + json.dumps(edit))
    wait_for(held.exists, "the edit held by its executor")
    os.kill(int(held.read_text()), signal.SIGKILL)
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    wait_for(lambda: texts(driver, "#timeline .tool .rerun") == [NOTE], "the note on the call's card")
    # (the card can still be drawn again by the view read the run's end asked for: found anew at each read)
    becomes(lambda: [(n.get_attribute("role"), n.is_displayed()) for n in by_css(driver, "#timeline .tool .rerun")],
            [("note", True)], "the note shown as a note")
    assert driver.execute_script("""return Array.from(document.querySelectorAll('#timeline .tool .rerun'),
        n => n.closest('.tool').dataset.status)""") == ["ok"]
    assert (workspace / "f.txt").read_text() == "ab\n"  # (applied once)
    status, view = daemon.request("GET", f"/sessions/{session_id}", token=token)
    assert status == 200
    results = [it["result"] for it in view["items"] if it["role"] == "tool_call" and "result" in it]
    assert [r.get("rerunAfter") for r in results] == ["EXECUTOR_UNAVAILABLE"]
    [call_id] = [it["call"]["callId"] for it in view["items"] if it["role"] == "tool_call"]
    # its line in Recent events, and the edited file's card in Changes, say so too
    wait_for(lambda: activity_reruns(driver) == ["tool.finished · edit_file · " + AGAIN], "the mark in Recent events")
    wait_for(lambda: changes_notes(driver) == [f"The edit call edit_file ({call_id}) {AGAIN}."], "the note in Changes")
    check_notes_are_notes(driver)

    # a call that ran once has no note, and no rerunAfter in the view; nor a second edit of the
    # same file in Changes, or its line in Recent events
    submit(driver, "/tool read_file " + json.dumps({"path": "f.txt"}))
    wait_for(lambda: len(by_css(driver, "#timeline .tool.ok")) == 2, "the second call's card")
    assert texts(driver, "#timeline .tool .rerun") == [NOTE]
    status, view = daemon.request("GET", f"/sessions/{session_id}", token=token)
    results = [it["result"] for it in view["items"] if it["role"] == "tool_call" and "result" in it]
    assert [r.get("rerunAfter") for r in results] == ["EXECUTOR_UNAVAILABLE", None]
    assert "rerunAfter" not in results[1]
    again = {"path": "f.txt", "mode": "edit", "edits": [{"old_string": "ab", "new_string": "abc"}]}
    submit(driver, "/tool edit_file " + json.dumps(again))
    wait_for(lambda: len(by_css(driver, "#timeline .tool.ok")) == 3, "the third call's card")
    wait_for(lambda: "2 edit calls" in " ".join(texts(driver, "#changes li.card[data-path='f.txt'] summary")),
             "the second edit in Changes")
    assert (workspace / "f.txt").read_text() == "abc\n"
    assert texts(driver, "#timeline .tool .rerun") == [NOTE]
    assert changes_notes(driver) == [f"The edit call edit_file ({call_id}) {AGAIN}."]
    assert activity_reruns(driver) == ["tool.finished · edit_file · " + AGAIN]
    assert len([x for x in texts(driver, "#activity li") if "tool.finished · edit_file" in x]) == 2
    assert not console_errors(driver)


def rerun_in_the_page(driver: Any, daemon: Daemon, held: Path, workspace: Path, token: str, line: str,
                      session_id: str) -> None:
    """Submit ``line`` in the open session; SIGKILL the executor holding its edit; wait until the
    daemon's view and the page both say idle (the page alone may still show the idle it had
    before the submit: its "running" comes by the stream)."""
    submit(driver, line)
    wait_for(held.exists, "the edit held by its executor")
    os.kill(int(held.read_text()), signal.SIGKILL)
    wait_for(lambda: daemon.request("GET", f"/sessions/{session_id}", token=token)[1]["status"] == "idle",
             "the idle session in the daemon's view")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    assert (workspace / "f.txt").read_text() == "ab\n"  # (applied once)


EDIT = {"path": "f.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "ab"}]}


def test_dashboard_notes_a_subagents_call_that_ran_again(held: Path, daemon: Daemon, browser: Any,
                                                          tmp_path: Path) -> None:
    driver = browser
    token, workspace, session_id = a_session_with_a_file(driver, daemon, tmp_path, "dash-rerun-sub")
    # (the faux model of the subagent calls the tool its prompt names)
    prompt = "/tool edit_file " + json.dumps(EDIT)
    rerun_in_the_page(driver, daemon, held, workspace, token, "/tool subagent " + json.dumps({"prompt": prompt}),
                      session_id)
    status, view = daemon.request("GET", f"/sessions/{session_id}", token=token)
    assert status == 200
    [sub] = [a for a in view["agents"] if a["agentId"] != "main"]
    [call] = sub["rerunCalls"]
    assert call["name"] == "edit_file" and call["rerunAfter"] == "EXECUTOR_UNAVAILABLE", sub
    assert "rerunCalls" not in [a for a in view["agents"] if a["agentId"] == "main"][0]
    note = f"The subagent's call edit_file ({call['callId']}) ran again after its executor stopped (EXECUTOR_UNAVAILABLE)."
    wait_for(lambda: texts(driver, "#timeline .tool .rerun") == [note], "the note on the subagent's card")
    card = driver.execute_script("return arguments[0].closest('.tool').dataset", by_css(driver, "#timeline .tool .rerun")[0])
    assert sub["agentId"] == "sub_" + card["callId"] and card["status"] == "ok"
    assert texts(driver, "#agents .rerun") == [
        f"Its call edit_file ({call['callId']}) ran again after its executor stopped (EXECUTOR_UNAVAILABLE)."]
    # the subagent's call's line in Recent events, and the file's card in Changes
    wait_for(lambda: activity_reruns(driver) == ["tool.finished · edit_file · " + AGAIN], "the mark in Recent events")
    wait_for(lambda: changes_notes(driver) == [f"The edit call edit_file ({call['callId']}) {AGAIN}."], "the note in Changes")
    check_notes_are_notes(driver)
    # (the subagent call itself ran once: its result has no rerunAfter)
    results = [it["result"] for it in view["items"] if it["role"] == "tool_call" and "result" in it]
    assert len(results) == 1 and "rerunAfter" not in results[0]
    assert not console_errors(driver)


@pytest.fixture
def ptc_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon as ``daemon``'s, with programs (``localPtc``) on."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    d = Daemon(cwd, {**CONFIG, "localPtc": {}})
    try:
        yield d
    finally:
        d.stop()


def test_dashboard_notes_a_programs_call_that_ran_again(held: Path, ptc_daemon: Daemon, browser: Any,
                                                        tmp_path: Path) -> None:
    driver, daemon = browser, ptc_daemon
    token, workspace, session_id = a_session_with_a_file(driver, daemon, tmp_path, "dash-rerun-ptc")
    program = ("edit_file(path='f.txt', mode='edit', edits=[{'old_string': 'a', 'new_string': 'ab'}])\n"
               "print(read_file(path='f.txt')['content'].strip())")
    rerun_in_the_page(driver, daemon, held, workspace, token, "/tool programmatic_tool_run " + json.dumps({"code": program}),
                      session_id)
    wait_for(lambda: by_css(driver, "#timeline .tool.ok"), "the program's card")
    [[call_id]] = attrs(driver, "#timeline .tool", "data-call-id")   # (one read: the card can still be drawn again)
    # one note: the edit ran twice; the read after it, and the program itself, once
    assert texts(driver, "#timeline .tool .rerun") == [
        f"Its call edit_file ({call_id}.1) ran again after its executor stopped (EXECUTOR_UNAVAILABLE)."]
    # the program's line in Recent events names its call; so does the file's card in Changes (a
    # program's edit is listed under the program's call)
    wait_for(lambda: activity_reruns(driver) == [f"tool.finished · programmatic_tool_run · its call edit_file ({call_id}.1) {AGAIN}"],
             "the mark in Recent events")
    wait_for(lambda: changes_notes(driver) == [f"The call edit_file ({call_id}.1) of programmatic_tool_run ({call_id}) {AGAIN}."],
             "the note in Changes")
    check_notes_are_notes(driver)
    assert not console_errors(driver)
