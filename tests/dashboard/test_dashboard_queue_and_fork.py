"""The queue panel at the view's window of queued inputs (F-API-6). One real daemon (the faux
provider), one headless Chromium (the helpers of ``test_dashboard_browser.py``); every wait is for
a condition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.views import VIEW_QUEUED_MAX
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, browser, by_css, click, console_errors, daemon, open_session, submit, wait_for)


def queued_ids(driver: Any) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#queue li.card')].map((li) => li.dataset.requestId)")


def test_the_queue_panel_shows_a_full_window_whole_and_reaches_the_input_past_it(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A session awaiting an answer keeps what is sent meanwhile queued. At the view's window size
    (VIEW_QUEUED_MAX) the panel shows every queued input and no "Show more queued"; one past it the
    view holds the window alone, and the button reads the one left out."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-queue")
    submit(driver, "ask two questions")
    wait_for(lambda: by_css(driver, "#timeline .question"), "the question")
    for i in range(VIEW_QUEUED_MAX):
        assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": f"q{i}", "content": f"queued {i}"},
                              token=strong)[0] == 202
    want = [f"q{i}" for i in range(VIEW_QUEUED_MAX)]
    wait_for(lambda: queued_ids(driver) == want, "the whole queue")
    assert not by_css(driver, "#queue button[data-more='queued']")

    last = f"q{VIEW_QUEUED_MAX}"
    assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": last, "content": "the last"},
                          token=strong)[0] == 202
    wait_for(lambda: by_css(driver, "#queue button[data-more='queued']"), "Show more queued")
    assert queued_ids(driver) == want
    click(driver, "#queue button[data-more='queued']")
    wait_for(lambda: queued_ids(driver) == want + [last], "the input past the window")
    assert not by_css(driver, "#queue button[data-more='queued']")
    assert console_errors(driver) == []

