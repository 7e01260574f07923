"""The timeline's "Show earlier" at its window's edge and while events arrive (F-API-6): a session
of exactly 200 items shows them all and no button, one of 201 its latest 200 and "Show 1 earlier";
pressed while the session goes on (its read held in the page until new items are committed),
every item shows once, in order, and the focus goes to the earliest. The same checks for a
subagent's conversation are in ``test_dashboard_subagent.py``. One real daemon (the faux
provider), one headless Chromium (the helpers of ``test_dashboard_browser.py``); every wait is for
a condition."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, click, committed_answers, console_errors, hold_requests, make_daemon,
    open_session, press, submit, texts, wait_for, with_turns)

# Holds the page's reads of the open session's view (GET /sessions/{id}?itemsLimit=…) from now on
# until window.releaseViews() is called.
HOLD_VIEW_READS = hold_requests("viewReads", "releaseViews",
                                "/\\/api\\/v1\\/sessions\\/[^/?]+\\?itemsLimit=/.test(url) && !/agentId=/.test(url)")


def _calls(n: int) -> dict[str, Any]:
    """A turn answering the input '"n calls"' with n tool calls: with its prompt and the answer
    after them, n + 2 items."""
    return {"when": f'"{n} calls"', "toolCalls": [{"name": "get_system_time", "arguments": {}}] * n}


def test_the_timeline_shows_earlier_items_at_the_windows_edge_while_the_session_goes_on(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    driver = browser
    d = make_daemon(with_turns(_calls(198), _calls(199)))

    def shown() -> list[str]:
        return driver.execute_script("return [...document.querySelectorAll('#timeline > :is(.msg, .tool)')].map((n) => n.dataset.itemId)")

    def answered(sid: str, answers: int) -> bool:
        return body_data(driver, "sessionStatus") == "idle" and len(
            [a for a in committed_answers(driver) if a.startswith("The tool answered") or a.startswith("(faux)")]) == answers

    # Exactly 200 items: all of them, no button.
    strong, sid = open_session(driver, d, tmp_path, "dash-earlier-edge")
    submit(driver, '"198 calls"')
    wait_for(lambda: answered(sid, 1) and len(shown()) == 200, "the 200 items", 60)
    _, view = d.request("GET", f"/sessions/{sid}", token=strong)
    assert view["itemsTotal"] == 200 and shown() == [it["id"] for it in view["items"]]
    assert by_css(driver, "#timeline button.more") == []

    # 201: the latest 200, "Show 1 earlier".
    click(driver, "#new-session button")
    sid = wait_for(lambda: driver.execute_script(
        "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId !== arguments[0] && b.dataset.sessionId",
        sid), "the second session")
    submit(driver, '"199 calls"')
    wait_for(lambda: answered(sid, 1) and len(shown()) == 200, "the latest 200 items", 60)
    _, view = d.request("GET", f"/sessions/{sid}", token=strong)
    assert view["itemsTotal"] == 201 and shown() == [it["id"] for it in view["items"][1:]]
    assert texts(driver, "#timeline button.more") == ["Show 1 earlier (1 not shown)"]

    # Pressed by the keyboard while the session goes on: its read held until an input and its
    # answer are committed (two items more).
    driver.execute_script(HOLD_VIEW_READS)
    press(driver, "#timeline button.more", Keys.ENTER)
    wait_for(lambda: driver.execute_script("return window.viewReads") >= 1, "the earlier items asked for")
    status, _ = d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "meanwhile", "content": "meanwhile"}, token=strong)
    assert status == 202

    def committed() -> dict[str, Any] | None:
        v = d.request("GET", f"/sessions/{sid}", token=strong)[1]
        return v if v["status"] == "idle" and v["itemsTotal"] == 203 else None

    whole = wait_for(committed, "the input answered")
    driver.execute_script("window.releaseViews()")
    ids = [it["id"] for it in whole["items"]]
    wait_for(lambda: shown() == ids, "every item once, in order")
    assert by_css(driver, "#timeline button.more") == []
    assert driver.execute_script("return document.activeElement.matches('#timeline > .msg.user') && document.activeElement.dataset.itemId") == ids[0]
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []
