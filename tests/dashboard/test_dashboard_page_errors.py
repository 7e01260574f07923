"""The dashboard (F-API-6): the errors list names what went wrong. ``NETWORK`` ("no answer from the
daemon") is a request that got no answer; a failure of the page itself (an answer it cannot use,
a bug of its own) is ``PAGE_ERROR`` with its own words, and is logged to the browser's console.

A real ``lens serve --port 0`` and headless Chromium, set up as in ``test_dashboard_browser.py``
(its fixtures and helpers); the one answer the daemon cannot give on demand (a 200 whose JSON is
not what the page reads) is scripted in the page. Every wait is for a condition, with a timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, browser, by_css, daemon, one, open_session, wait_for)

# The page's next read of the project list is answered 200 with the JSON ``null`` (once).
ANSWER_NEXT_PROJECTS_READ_NULL = """
    const real = window.fetch; let once = true;
    window.fetch = (url, init) => {
      if (once && String(url).includes("/api/v1/projects?")) {
        once = false;
        return Promise.resolve(new Response("null", {status: 200, headers: {"Content-Type": "application/json"}}));
      }
      return real(url, init);
    };"""


def errors(driver: Any) -> list[list[str]]:
    """Each error shown: [its code, its message]."""
    return driver.execute_script("""return Array.from(document.querySelectorAll('#errors li'),
        (li) => [li.dataset.code, li.querySelector('.message').textContent])""")


def test_an_answer_the_page_cannot_use_is_a_page_error_logged_and_no_answer_is_network(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A project list answered with JSON the page does not expect (``null``) failed in the page
    (a TypeError) and was said as ``NETWORK``, "no answer from the daemon", which it had given; the
    console had nothing. Now it is ``PAGE_ERROR`` with the error's own words, logged to the
    console; a request that got no answer is still ``NETWORK``."""
    driver = browser
    open_session(driver, daemon, tmp_path, "dash-page-error")
    driver.get_log("browser")   # (what was logged before is not this test's)
    driver.execute_script(ANSWER_NEXT_PROJECTS_READ_NULL)
    one(driver, "#refresh").click()
    wait_for(lambda: errors(driver), "the failure, said")
    [[code, message]] = errors(driver)
    assert code == "PAGE_ERROR", (code, message)
    assert message.startswith("TypeError: Cannot read properties of null"), message
    logged = [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert any("Cannot read properties of null" in m for m in logged), logged
    assert not any("Uncaught" in m for m in logged), logged

    one(driver, "#errors li button").click()
    wait_for(lambda: not errors(driver), "the error dismissed")
    daemon.stop()
    one(driver, "#refresh").click()
    wait_for(lambda: by_css(driver, "#errors li[data-code='NETWORK']"), "the read that got no answer, said")
    assert [m for c, m in errors(driver) if c == "NETWORK"][0].startswith("no answer from the daemon ("), errors(driver)
    assert not by_css(driver, "#errors li[data-code='PAGE_ERROR']"), errors(driver)
