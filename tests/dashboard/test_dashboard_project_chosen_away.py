"""The dashboard (F-API-6), a fourth pass: what the session list shows when another project is
chosen while the daemon is away, and how the errors list names what went wrong (the daemon not
answering, or the page itself).

A real ``lens serve --port 0`` (the faux provider, a log in a temporary directory), stopped and
started again on the same port, and headless Chromium, set up as in ``test_dashboard_browser.py``
(its fixtures and helpers). Every wait is for a condition, with a timeout.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.dashboard.conftest import project_and_session
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, console_errors, daemon, one, open_session, texts, wait_for)

# Records, from now on, every session row and every note the session list shows (each drawing of
# the list, as it happens), in ``window.sessionsSeen`` and ``window.sessionNotes``.
RECORD_SESSION_LIST = """window.sessionsSeen = new Set(); window.sessionNotes = [];
    const ul = document.getElementById("sessions");
    const look = () => {
      for (const b of ul.querySelectorAll("button[data-session-id]")) window.sessionsSeen.add(b.dataset.sessionId);
      for (const li of ul.querySelectorAll("li.empty")) window.sessionNotes.push(li.textContent);
    };
    new MutationObserver(look).observe(ul, {childList: true, subtree: true, characterData: true});"""


def project_row(pid: str) -> str:
    return f"#projects button[data-project-id='{pid}']"


def session_list(driver: Any) -> tuple[list[str], list[str]]:
    """The session rows' ids and the notes the list shows now."""
    ids, notes = driver.execute_script("""const ul = document.getElementById("sessions");
        return [Array.from(ul.querySelectorAll("button[data-session-id]"), (b) => b.dataset.sessionId),
                Array.from(ul.querySelectorAll("li.empty"), (li) => li.textContent)]""")
    return ids, notes


def test_a_project_chosen_while_the_daemon_is_away_lists_none_of_the_last_ones_sessions(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """Project Q clicked while the daemon was stopped: the list went on showing project P's
    sessions under Q's selected row until a poll read Q's, and a click on one opened P's session.
    Now P's rows go at once, the list says it reads Q's sessions, then that they could not be
    read (not "No sessions yet."), and the poll reads them once the daemon is back."""
    started = time.monotonic()
    driver = browser
    strong, a = open_session(driver, daemon, tmp_path, "dash-away-project")
    p = driver.execute_script("return document.querySelector('#projects button.selected').dataset.projectId")
    q, s = project_and_session(daemon, strong, tmp_path / "workspace-q", "Project Q")
    one(driver, "#refresh").click()
    wait_for(lambda: by_css(driver, project_row(q["id"])), "project Q listed")
    assert session_list(driver) == ([a], [])

    driver.execute_script(RECORD_SESSION_LIST)
    daemon.stop()
    # The list as it is drawn by the click itself, before any answer.
    at_click = driver.execute_script("""document.querySelector(arguments[0]).click();
        const ul = document.getElementById("sessions");
        return [Array.from(ul.querySelectorAll("button[data-session-id]"), (b) => b.dataset.sessionId),
                Array.from(ul.querySelectorAll("li.empty"), (li) => li.textContent)]""", project_row(q["id"]))
    assert at_click == [[], ["Reading sessions…"]], at_click
    wait_for(lambda: session_list(driver) == ([], ["The sessions could not be read: the daemon did not answer."]),
             "the failed read, said in the list")
    assert one(driver, f"{project_row(q['id'])}.selected")

    daemon.start()
    wait_for(lambda: session_list(driver) == ([s["id"]], []), "Q's session, read by the poll once the daemon is back", 15)
    assert driver.execute_script("return [...window.sessionsSeen]") == [s["id"]]
    notes = driver.execute_script("return window.sessionNotes")
    assert "No sessions yet." not in notes, notes
    assert p != q["id"]
    assert console_errors(driver) == []
    assert time.monotonic() - started < 60, "the test must stay bounded"
