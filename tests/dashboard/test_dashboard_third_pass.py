"""The dashboard (F-API-6) and the live stream it reads (F-API-5), a third pass as a person uses
them: what the page shows when the daemon is away at the moment a session is opened.

A real ``lens serve --port 0`` (the faux provider, a real executor, a log in a temporary
directory) and headless Chromium, set up as in ``test_dashboard_browser.py`` (its fixtures and
helpers). Every wait is for a condition, with a timeout.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, answered, body_data, browser, by_css, committed_answers, console_errors, make_daemon, one, open_session,
    submit, texts, wait_for, with_turns)


def session_row(driver: Any, sid: str) -> str:
    return f"#sessions button[data-session-id='{sid}']"


def inputs_of(d: Daemon, sid: str, token: str) -> list[str]:
    events = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=token)[1]["events"]
    return [part["text"] for e in events if e["kind"] == "input.submitted" for part in e["body"]["content"]]


def test_a_session_opened_while_the_daemon_is_away_is_read_once_it_is_back_and_never_named_as_the_last(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Session B clicked in the list while the daemon was away: its view could not be read, and
    the page went on showing session A's head, panes and message box under B's selected row, the
    pill saying *reconnecting* for ever. Nothing read B again once the daemon was back, and a
    message typed then went to B under A's name. Now nothing of A stays while B is read, the read
    is tried again (as the live stream is) until the daemon answers, and B is then shown live."""
    started = time.monotonic()
    driver = browser
    d = make_daemon(with_turns())
    strong, a = open_session(driver, d, tmp_path, "dash-away-open")
    assert d.request("PATCH", f"/sessions/{a}", {"name": "Session A"}, token=strong)[0] == 200
    answered(driver, "hello A", "A's answer")
    project = d.request("GET", f"/sessions/{a}", token=strong)[1]["projectId"]
    status, made = d.request("POST", "/sessions", {"projectId": project, "name": "Session B"}, token=strong)
    assert status == 201, made
    b = made["id"]
    wait_for(lambda: by_css(driver, session_row(driver, b)), "session B in the list")
    wait_for(lambda: one(driver, "#session-title").text == "Session A", "A's name in the head")

    d.stop()
    driver.execute_script("arguments[0].click()", one(driver, session_row(driver, b)))
    wait_for(lambda: by_css(driver, "#errors li[data-code='NETWORK']"), "the read that got no answer, said")
    # Nothing of A is offered under B's row: not its name, its panes, nor a box that sends to B.
    assert not one(driver, "#session-head").is_displayed()
    assert not one(driver, "#session-body").is_displayed()
    assert not one(driver, "#composer").is_displayed()
    assert one(driver, "#placeholder").is_displayed()

    d.start()
    wait_for(lambda: one(driver, "#session-title").text == "Session B", "B read once the daemon is back", 25)
    wait_for(lambda: body_data(driver, "conn") == "live", "B's live stream")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    answered(driver, "hello B", "B's answer")
    assert texts(driver, "#timeline .msg.user .text") == ["hello B"]
    assert inputs_of(d, b, strong) == ["hello B"]
    assert inputs_of(d, a, strong) == ["hello A"]
    assert console_errors(driver) == []
    assert time.monotonic() - started < 60, "the test must stay bounded"
