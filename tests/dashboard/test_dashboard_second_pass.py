"""The dashboard (F-API-6) in a second pass as a user with only the spec and the docs: a
credential pasted with white space around it or refused, right-to-left text wherever the page
shows the daemon's or the user's words, and markup in file names, a job's output and a question.

A real ``lens serve --port 0`` (the faux provider, a real executor, a log in a temporary
directory) and headless Chromium, set up as in ``test_dashboard_browser.py`` (its fixtures and
helpers). Every wait is for a condition, with a timeout; the windows in which nothing may happen
are observation windows, not waits for an order.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, click, console_errors, make_daemon, network_requests, one, open_session,
    submit, texts, wait_for, with_turns)

HEBREW = "שלום עולם! 123"


def paste_credential(driver: Any, value: str) -> None:
    """``value`` put in the credential field as a paste puts it (line breaks and all), then Connect."""
    driver.execute_script("""const f = document.getElementById('cred'); f.value = arguments[0];
        f.dispatchEvent(new Event('input', {bubbles: true}));""", value)
    click(driver, "#connect")


def test_a_credential_pasted_with_white_space_around_it_connects_and_a_wrong_one_asks_nothing_more(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any) -> None:
    """A credential copied from a terminal comes with a line break after it, often a space or a
    tab before: it connects as the credential alone. A wrong one is refused once with a message
    that says so, and nothing more is asked of the daemon (no retry, no poll) until another is
    pasted."""
    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-paste", strong=True)
    driver.get(d.base + "/")
    paste_credential(driver, " \t" + strong + " \r\n")
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    wait_for(lambda: by_css(driver, "#projects li.empty"), "the (empty) project list")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    network_requests(driver, d.base)   # (what was asked before is not the question)
    paste_credential(driver, "lens_" + "0" * 40 + "\n")
    wait_for(lambda: by_css(driver, "#errors li[data-code='AUTH_INVALID']"), "the refusal")
    [message] = texts(driver, "#errors li[data-code='AUTH_INVALID'] .message")
    assert "credential" in message, message
    assert one(driver, "#cred").is_displayed() and body_data(driver, "trust") == ""
    asked = [path for _, path, _ in network_requests(driver, d.base)]
    assert asked == ["/api/v1/whoami"], asked
    deadline = time.monotonic() + 1.5   # an observation window: nothing more is asked
    while time.monotonic() < deadline:
        assert not network_requests(driver, d.base)
        time.sleep(0.1)
    assert len(by_css(driver, "#errors li")) == 1
    assert console_errors(driver) == []


RTL_TURN = {"when": "read the hebrew file", "toolCalls": [{"name": "read_file", "arguments": {"path": "he.txt"}}]}
RTL_QUESTION = {"when": "ask in hebrew", "toolCalls": [{"name": "ask_user", "arguments": {"questions": [
    {"id": "q", "text": HEBREW, "options": [{"id": "a", "label": HEBREW}], "allow_text": True}]}}]}
# For each selector, whether every match is laid out right to left (the direction of its first
# strong character, as `dir="auto"` gives), and the text read.
DIRECTIONS = """return Object.fromEntries(arguments[0].map((sel) => [sel,
    Array.from(document.querySelectorAll(sel), (n) => [n.matches(':dir(rtl)'), ('value' in n && n.tagName !== 'BUTTON' ? n.value : n.textContent).slice(0, 40)])]))"""


def test_right_to_left_text_is_laid_out_by_its_own_direction_wherever_the_page_shows_it(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The messages, todos and queued inputs were laid out by their own direction (`dir="auto"`),
    but the session's name in its head, a tool's result, a question's option and its answer box,
    and the message box itself were laid out left to right whatever their text: "שלום עולם! 123"
    read with its "!" and "123" on the wrong side. Each is now laid out by its own text."""
    driver = browser
    d = make_daemon(with_turns(RTL_TURN, RTL_QUESTION))
    strong, sid = open_session(driver, d, tmp_path, "dash-rtl")
    (tmp_path / "workspace" / "he.txt").write_text(HEBREW + "\n", encoding="utf-8")
    assert d.request("PATCH", f"/sessions/{sid}", {"name": HEBREW}, token=strong)[0] == 200
    wait_for(lambda: one(driver, "#session-title").text == HEBREW, "the session's name")
    submit(driver, "read the hebrew file")
    wait_for(lambda: by_css(driver, "#timeline .tool[data-status='ok'] details pre"), "the tool's result")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run's end")
    submit(driver, "ask in hebrew")
    wait_for(lambda: by_css(driver, "#timeline .question button.option"), "the question")
    driver.execute_script("document.getElementById('input').value = arguments[0]", HEBREW)
    driver.execute_script("document.querySelector('#timeline .question input').value = arguments[0]", HEBREW)

    shown = driver.execute_script(DIRECTIONS, [
        "#session-title", "#timeline .tool[data-status='ok'] > details:nth-of-type(2) > pre", "#timeline .question > .text",
        "#timeline .question button.option", "#timeline .question input", "#input"])
    wrong = {sel: found for sel, found in shown.items() if not found or not all(rtl for rtl, _ in found)}
    assert wrong == {}, wrong
    # (and left-to-right text stays left to right: the direction is the text's, not forced)
    driver.execute_script("document.getElementById('input').value = 'hello שלום'")
    assert driver.execute_script("return document.getElementById('input').matches(':dir(ltr)')")
    assert console_errors(driver) == []
