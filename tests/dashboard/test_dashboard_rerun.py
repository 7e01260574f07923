"""The dashboard says when a tool call ran twice (``tool.finished``'s ``rerun_after``): its
executor child was SIGKILLed under the first run, and the call ran again on the child spawned in
its place. One real daemon (its executor under the executor's test hold, which blocks the edit
once its file is written, before the reply) and one headless Chromium, as in
``test_dashboard_browser.py`` (its helpers). Every wait is for a condition.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, console_errors, daemon, open_new_session, submit, texts, wait_for)
from tools.executor.server import TEST_HOLD_ENV, TEST_HOOKS_ENV

NOTE = "Ran again after its executor stopped (EXECUTOR_UNAVAILABLE)."


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The daemon started after this (and its executors) holds the first edit before its reply;
    returns the file that names the executor holding it."""
    hold = tmp_path / "hold"
    hold.write_text("before_reply")
    monkeypatch.setenv(TEST_HOOKS_ENV, "1")
    monkeypatch.setenv(TEST_HOLD_ENV, str(hold))
    return Path(f"{hold}.held")


def test_dashboard_notes_a_call_that_ran_again_after_its_executor_stopped(
        held: Path, daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    driver = browser
    token = daemon.pair("dash-rerun", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "f.txt").write_text("a\n")
    session_id = open_new_session(driver, daemon, token, workspace)
    edit = {"path": "f.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "ab"}]}
    submit(driver, "/tool edit_file " + json.dumps(edit))
    wait_for(held.exists, "the edit held by its executor")
    os.kill(int(held.read_text()), signal.SIGKILL)
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    wait_for(lambda: texts(driver, "#timeline .tool .rerun") == [NOTE], "the note on the call's card")
    note = by_css(driver, "#timeline .tool .rerun")[0]
    assert note.get_attribute("role") == "note" and note.is_displayed()
    card = driver.execute_script("return arguments[0].closest('.tool').dataset", note)
    assert card["status"] == "ok"
    assert (workspace / "f.txt").read_text() == "ab\n"  # (applied once)
    status, view = daemon.request("GET", f"/sessions/{session_id}", token=token)
    assert status == 200
    results = [it["result"] for it in view["items"] if it["role"] == "tool_call" and "result" in it]
    assert [r.get("rerunAfter") for r in results] == ["EXECUTOR_UNAVAILABLE"]

    # a call that ran once has no note, and no rerunAfter in the view
    submit(driver, "/tool read_file " + json.dumps({"path": "f.txt"}))
    wait_for(lambda: len(by_css(driver, "#timeline .tool.ok")) == 2, "the second call's card")
    assert texts(driver, "#timeline .tool .rerun") == [NOTE]
    status, view = daemon.request("GET", f"/sessions/{session_id}", token=token)
    results = [it["result"] for it in view["items"] if it["role"] == "tool_call" and "result" in it]
    assert [r.get("rerunAfter") for r in results] == ["EXECUTOR_UNAVAILABLE", None]
    assert "rerunAfter" not in results[1]
    assert not console_errors(driver)
