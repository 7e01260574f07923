"""The Context panel and the timeline say when a compaction failed: the context view's
``compactionFailed`` (the last ``context.compaction_failed`` since the last compaction), shown live
as the event comes in and on a page opened afterwards; the timeline's line stands after the items
before it, as a successful compaction's summary does.

A real ``lens serve --port 0`` whose faux summarizer fails, a real executor, a log in a temporary
directory, and headless Chromium, as in ``test_dashboard_browser.py`` (its fixtures and helpers).
Every wait is for a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, click, committed_answers, console_errors, make_daemon, one, open_in_page,
    open_session, texts, wait_for, with_turns)

FILLER = "word " * 50_000  # (about 62,500 estimated tokens: past half of a 100,000-token window)
FAILED = "#context dd[data-key='compaction failed']"
LINE = "#timeline .msg.compaction-failed"


def timeline(driver: Any) -> list[str]:
    """The timeline's messages, each as its class's role and its first line."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#timeline .msg')].map((n) => "
        "(n.classList.contains('compaction-failed') ? 'compaction-failed' : n.classList[1]) + ': ' "
        "+ n.querySelector('.who').textContent);")


def test_dashboard_says_an_automatic_compaction_failed(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    driver = browser
    config = with_turns({"when": "Summarize the conversation so far",
                         "error": {"code": "OVERLOADED", "message": "the summarizer is busy"}})
    config["providers"][0]["models"] = [{"id": "faux-1", "contextWindow": 100_000}]
    config["context"] = {"compaction": {"triggerPercent": 50}}
    d = make_daemon(config)
    strong, sid = open_session(driver, d, tmp_path, "dash-compaction-failed")
    for n, (rid, text) in enumerate((("r1", "hello " + FILLER), ("r2", "and again"))):
        status, _ = d.request("POST", f"/sessions/{sid}/inputs", {"requestId": rid, "content": text}, token=strong)
        assert status in (200, 202), status
        wait_for(lambda: len(committed_answers(driver)) == n + 1 and body_data(driver, "sessionStatus") == "idle",
                 f"the answer to {rid}")
        if n == 0:  # (the first request holds its input alone, which a compaction keeps: none tried)
            assert texts(driver, FAILED) == []
    note = ("automatic · COMPACTION_FAILED: the summarizing request failed: OVERLOADED: the summarizer is busy"
            " · tried again automatically a few answers later, or at the next input")
    wait_for(lambda: texts(driver, FAILED) == [note], "the failed compaction in the Context panel")
    assert texts(driver, "#context dd[data-key='compactions']") == ["0"]
    # The timeline's line, before the answer to the request it went ahead of (the second one).
    shown = ["user: you", "assistant: assistant", "user: you", "compaction-failed: compaction failed · automatic",
             "assistant: assistant"]
    wait_for(lambda: timeline(driver) == shown, f"the failed compaction in the timeline: {timeline(driver)}")
    assert texts(driver, LINE + " .text") == [
        "COMPACTION_FAILED: the summarizing request failed: OVERLOADED: the summarizer is busy"]

    open_in_page(driver, d, strong, sid)  # (a page opened afterwards reads it from the view)
    wait_for(lambda: texts(driver, FAILED) == [note], "the failed compaction, the page opened again")
    wait_for(lambda: timeline(driver) == shown, "the failed compaction in the timeline, the page opened again")
    assert console_errors(driver) == []


def test_dashboard_says_a_manual_compaction_failed_in_the_timeline_and_the_panel(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    # A compaction asked for on the page whose summarizer fails before any answer: the page's
    # error list said it, and nothing else did (nothing was recorded). Now recorded, it has its
    # line in the timeline and its row in the Context panel, also on a page opened later.
    driver = browser
    d = make_daemon(with_turns({"when": "Summarize the conversation so far",
                                "error": {"code": "OVERLOADED", "message": "the summarizer is busy"}}))
    strong, sid = open_session(driver, d, tmp_path, "dash-manual-compaction-failed")
    status, _ = d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "r1", "content": "hello"}, token=strong)
    assert status in (200, 202), status
    wait_for(lambda: len(committed_answers(driver)) == 1 and body_data(driver, "sessionStatus") == "idle",
             "the answer to r1")
    assert by_css(driver, LINE) == []
    wait_for(lambda: one(driver, "#compact").is_enabled(), "the compact button")
    click(driver, "#compact")
    note = "manual · COMPACTION_FAILED: the summarizing request failed: OVERLOADED: the summarizer is busy"
    wait_for(lambda: texts(driver, FAILED) == [note], "the failed compaction in the Context panel")
    shown = ["user: you", "assistant: assistant", "compaction-failed: compaction failed · manual"]
    wait_for(lambda: timeline(driver) == shown, "the failed compaction in the timeline")
    wait_for(lambda: any("COMPACTION_FAILED" in e for e in texts(driver, "#errors li")), "the error of the answer")

    open_in_page(driver, d, strong, sid)
    wait_for(lambda: texts(driver, FAILED) == [note], "the failed compaction, the page opened again")
    wait_for(lambda: timeline(driver) == shown, "the failed compaction in the timeline, the page opened again")
