"""The dashboard (F-API-6) once the person has left it: the credential is kept in the page's memory
only, so a page left and shown again is no longer connected.

A real ``lens serve --port 0`` (the faux provider, a real executor, a log in a temporary
directory) and headless Chromium, set up as in ``test_dashboard_browser.py`` (its fixtures and
helpers). Every wait is for a condition, with a timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, answered, body_data, browser, console_errors, daemon, network_requests, one, open_session, wait_for)


def test_a_page_left_and_shown_again_by_back_is_not_connected_and_shows_nothing_it_read(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """Chromium keeps a page that is left in its back/forward cache, the page's memory whole, and
    Back shows it again as it was: the dashboard came back connected with strong trust, the
    session and its answers in view and the live stream going, to whoever pressed Back, with no
    credential pasted. Leaving the page now forgets the credential, as a reload does."""
    driver = browser
    _, sid = open_session(driver, daemon, tmp_path, "dash-left")
    answered(driver, "a private note 4b7e", "the answer")
    # (a mark in the page's memory and a listener: Back shows this page, not a new load of it)
    driver.execute_script("""window.leftMark = 1;
        window.addEventListener('pageshow', (e) => { window.shownAgain = e.persisted; });""")

    driver.get(daemon.base + "/api/v1/health")
    driver.back()
    wait_for(lambda: driver.execute_script("return window.shownAgain === true && window.leftMark === 1"),
             "the page shown again from the back/forward cache")
    network_requests(driver, daemon.base)   # (what was asked until now)

    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    assert body_data(driver, "trust") in (None, "")
    assert body_data(driver, "conn") != "live"
    page = driver.execute_script("return document.documentElement.outerHTML")
    for secret in ("4b7e", sid, "dash-left"):
        assert secret not in page, secret
    assert [r for r in network_requests(driver, daemon.base) if r[2]] == []   # nothing asked with it
    assert console_errors(driver) == []
