"""The dashboard (F-API-6) used as a person would, for what the other dashboard tests left out:
bad input typed into the page, connecting by the keyboard, and what a screen reader names the
controls.

A real ``lens serve --port 0`` (the faux provider, a real executor, a log in a temporary
directory) and headless Chromium, set up as in ``test_dashboard_browser.py`` (its fixtures and
helpers). Every wait is for a condition, with a timeout.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, answered, becomes, body_data, browser, by_css, click, committed_answers, console_errors, hold_requests, make_daemon,
    network_requests, one,
    open_session, press, reopen_read_only, session_starting_jobs, submit, texts, wait_for, with_turns)
from tests.dashboard.test_dashboard_keyboard import chord, focused, keys, tab_to

BODY_LIMIT = 64 * 1024  # server.maxBodyBytes of the daemon below (its smallest allowed value)


def error_shown(driver: Any, code: str) -> list[str]:
    """The messages of the errors shown with ``code``."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#errors li'))"
        ".filter((li) => li.dataset.code === arguments[0]).map((li) => li.querySelector('.message').textContent)", code)


def test_dashboard_shows_the_daemons_refusal_of_an_empty_a_blank_and_a_too_large_message(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Send on an empty box, or one of spaces and line breaks, did nothing at all: no request, no
    note, no error (the daemon refuses such an input, INVALID_ARGUMENT, with a message that says
    why). The page now sends it and shows the daemon's refusal, as for any other bad input; a
    message past the body limit shows the daemon's BODY_TOO_LARGE, and the text stays in the box."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns(maxBodyBytes=BODY_LIMIT))
    strong, sid = open_session(driver, d, tmp_path, "dash-bad-input")

    # An empty box, by the Send button.
    click(driver, "#send")
    wait_for(lambda: error_shown(driver, "INVALID_ARGUMENT"), "the daemon's refusal of an empty message")
    assert error_shown(driver, "INVALID_ARGUMENT") == ["content must not be empty or only white space"]
    click(driver, "#errors li button")
    wait_for(lambda: not by_css(driver, "#errors li"), "the error dismissed")

    # Spaces and a line break, by Ctrl+Enter from the box: the same refusal, the focus still in it.
    one(driver, "#input").send_keys("   ")
    chord(driver, Keys.SHIFT, Keys.ENTER)
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: error_shown(driver, "INVALID_ARGUMENT"), "the daemon's refusal of a blank message")
    assert error_shown(driver, "INVALID_ARGUMENT") == ["content must not be empty or only white space"]
    assert focused(driver)["id"] == "input"

    # Past the body limit: the daemon's 413 with both sizes, and nothing of it lost.
    huge = "x" * (BODY_LIMIT + 1000)
    driver.execute_script("document.getElementById('input').value = arguments[0]", huge)
    click(driver, "#send")
    wait_for(lambda: error_shown(driver, "BODY_TOO_LARGE"), "the daemon's refusal of a message too large")
    (message,) = error_shown(driver, "BODY_TOO_LARGE")
    assert re.fullmatch(rf"the body is \d+ bytes; the limit is {BODY_LIMIT}", message), message
    assert one(driver, "#input").get_attribute("value") == huge

    # Nothing of the three reached the session, and a good message still goes through.
    answered(driver, "a real one", "the answer")
    assert texts(driver, "#timeline .msg.user .text") == ["a real one"]
    events = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)[1]["events"]
    assert [e["kind"] for e in events].count("input.submitted") == 1
    assert console_errors(driver) == []


def test_dashboard_connecting_by_the_keyboard_leaves_the_focus_on_forget_credential(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any) -> None:
    """Enter in the credential field connects, and the form goes with it: the focus fell to
    <body>, and the next Tab started again from the top of the page. It is now on the control
    that took the form's place, *Forget credential*; the next Tab reaches the lists."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-connect-keys", strong=True)
    driver.get(d.base + "/")
    tab_to(driver, lambda f: f["id"] == "cred")
    keys(driver, strong, Keys.ENTER)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    wait_for(lambda: by_css(driver, "#projects li.empty"), "the (empty) project list")
    assert focused(driver)["id"] == "disconnect"
    assert [f["id"] for f in tab_to(driver, lambda f: f["id"] == "project-name")] == ["refresh", "project-name"]

    # A credential refused leaves the focus in the field, to paste another.
    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    assert focused(driver)["id"] == "cred"
    keys(driver, "lens_not_a_real_credential", Keys.ENTER)
    wait_for(lambda: by_css(driver, "#errors li[data-code='AUTH_INVALID']"), "the refusal")
    assert focused(driver)["id"] == "cred"


def test_dashboard_controls_have_names_a_screen_reader_can_say(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The accessible name Chromium computes for each visible control has a word in it: the
    reload button's was its glyph, "↻" (a title is only a description when there is text)."""
    driver = browser
    session_starting_jobs(make_daemon, driver, tmp_path, "dash-names", "sleep 600")
    wait_for(lambda: by_css(driver, "#jobs li.card button.job-stop"), "the running job's Stop")

    def names() -> list[tuple[str, str | None]]:
        # (one pass over the page's controls, a WebDriver call or three each: the run goes on, and a
        # pane redrawn meanwhile leaves a control found here stale; wait_for reads them all again)
        # (a control hidden between the two reads, as Abort when the run ends, has no name then:
        # it counts only if it is still shown after its name was read)
        controls = [n for n in by_css(driver, "button, input, select, textarea, summary") if n.is_displayed()]
        read = [(n, n.get_attribute("id") or n.get_attribute("class"), n.accessible_name) for n in controls]
        return [(who, name) for n, who, name in read if n.is_displayed()]

    named = wait_for(names, "the visible controls' names, read in one pass")
    assert len(named) > 10
    wordless = [(who, name) for who, name in named if not re.search(r"[A-Za-z]{2}", name or "")]
    assert wordless == []
    assert one(driver, "#refresh").accessible_name == "Reload projects, sessions and the default model"


def test_dashboard_an_empty_send_in_another_session_is_refused_not_dropped(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A press of Send on the box a send just emptied is no new message (Ctrl+Enter twice). That
    held past a switch of session: after a send in one session, Send on the empty box of another
    did nothing and said nothing; and so it did when the send's answer came only after the other
    session was opened. The mark is the emptied session's: in the other, the empty message is
    sent and the daemon's refusal shown."""
    driver = browser
    d = make_daemon(with_turns())
    _, first = open_session(driver, d, tmp_path, "dash-empty-elsewhere")

    def open_another(than: str) -> str:
        click(driver, "#new-session button")
        return wait_for(lambda: driver.execute_script(
            "const b = document.querySelector('#sessions button.selected');"
            " return b && b.dataset.sessionId !== arguments[0] && b.dataset.sessionId", than), "another session")

    submit(driver, "first")
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Sent (seq "), "the sent note")
    second = open_another(first)
    assert one(driver, "#input").get_attribute("value") == ""
    click(driver, "#send")
    wait_for(lambda: one(driver, "#composer-note").text == "Not sent (INVALID_ARGUMENT).", "the refusal of the empty send")
    assert error_shown(driver, "INVALID_ARGUMENT")

    # The send's answer comes after another session is opened.
    driver.execute_script(hold_requests("inputsHeld", "releaseInputs", "url.endsWith('/inputs')"))
    submit(driver, "second")
    wait_for(lambda: driver.execute_script("return window.inputsHeld") == 1, "the send held")
    open_another(second)
    driver.execute_script("window.releaseInputs()")
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Sent (seq "), "the held send's answer")
    click(driver, "#send")
    wait_for(lambda: one(driver, "#composer-note").text == "Not sent (INVALID_ARGUMENT).",
             "the refusal of the empty send after the late answer")


def test_dashboard_a_refused_send_does_not_leave_the_previous_sends_note(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The note under the message box said "Sent (seq N)." of the last send that went through,
    and kept saying it beside the refusal of the next one (a blank message, the daemon away):
    the reader saw both "Sent" and an error. A send clears it as it starts; one the daemon
    refused says so, with the code; one that reached no daemon leaves it empty (the error says
    why; whether the daemon had it is not known)."""
    driver = browser
    d = make_daemon(with_turns())
    open_session(driver, d, tmp_path, "dash-send-note")
    submit(driver, "first")
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Sent (seq "), "the sent note")
    wait_for(lambda: "(faux) You said: first" in committed_answers(driver), "the answer")

    one(driver, "#input").send_keys("  ")
    click(driver, "#send")
    wait_for(lambda: error_shown(driver, "INVALID_ARGUMENT"), "the refusal")
    assert one(driver, "#composer-note").text == "Not sent (INVALID_ARGUMENT)."

    # The daemon away: the send fails without an answer; no "Sent" stays beside the error.
    submit(driver, "second")
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Sent (seq "), "the sent note again")
    d.stop()
    wait_for(lambda: body_data(driver, "conn") != "live", "the stream given up", 20)
    one(driver, "#input").send_keys("while away")
    click(driver, "#send")
    wait_for(lambda: error_shown(driver, "NETWORK"), "the failed send")
    # (the browser's own words alone, "Failed to fetch", did not say whose failure it was)
    assert error_shown(driver, "NETWORK") == ["no answer from the daemon (Failed to fetch)"]
    assert one(driver, "#composer-note").text == ""
    assert one(driver, "#input").get_attribute("value") == "while away"


HOLD_STOPS = hold_requests("stopRequests", "releaseStops", "url.endsWith('/stop')")


def test_dashboard_stops_a_job_once_and_says_one_ended_meanwhile_had_ended(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A job's Stop stayed enabled while its request was on its way (a stop answers once the end
    is recorded): a second press sent a second stop; and a stop that reached the daemon after the
    job had ended (stopped elsewhere, or by itself) showed the daemon's JOB_FINISHED as an error,
    though what the reader asked for had happened. Stop is now disabled from the press (the focus
    going to the card's Output), one request is sent, and such a stop is a note naming how the
    job ended."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d, strong, sid, (job_id,) = session_starting_jobs(make_daemon, driver, tmp_path, "dash-stop-once", "sleep 600")
    stop = "#jobs li.card button.job-stop"
    wait_for(lambda: by_css(driver, stop), "the running job's Stop")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run's end")

    driver.execute_script(HOLD_STOPS)
    press(driver, stop, Keys.ENTER)
    wait_for(lambda: driver.execute_script("return window.stopRequests") == 1, "the stop asked")
    assert driver.execute_script("return document.querySelector(arguments[0]).disabled", stop)
    assert (focused(driver)["row"], focused(driver)["text"]) == (job_id, "Output")
    # (a second press: disabled, nothing sent; the card found and pressed in one step)
    driver.execute_script("document.querySelector(arguments[0]).click()", stop)
    assert driver.execute_script("return window.stopRequests") == 1

    # Stopped elsewhere meanwhile: the page's stop then finds it ended.
    status, body = d.request("POST", f"/sessions/{sid}/jobs/{job_id}/stop", {}, token=strong)
    assert status == 200 and body["status"] == "stopped", body
    wait_for(lambda: "stopped" in one(driver, "#jobs li.card .pill").text, "the card saying stopped")
    driver.execute_script("window.releaseStops()")
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Not stopped: that job had ended already"),
             "the note")
    assert "stopped by request" in one(driver, "#composer-note").text
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert (focused(driver)["row"], focused(driver)["text"]) == (job_id, "Output")
    assert driver.execute_script("return window.stopRequests") == 1
    assert console_errors(driver) == []


def test_dashboard_tells_a_read_only_reader_why_each_control_it_lacks_is_not_there(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A read-only reader is offered no control the daemon would refuse it: of each, the note says
    that it needs strong trust. It named sending, steering, withdrawing, answering, aborting and
    stopping jobs, not Compact now and the context edits (Snip, Include, Hide), absent as well."""
    driver = browser
    d = make_daemon(with_turns())
    readonly = d.pair("dash-read-why-ro", strong=False)
    strong, sid = open_session(driver, d, tmp_path, "dash-read-why")
    submit(driver, "/tool get_system_time {}")
    wait_for(lambda: any(a.startswith("The tool answered:") for a in committed_answers(driver)), "the tool's answer")
    assert one(driver, "#compact").is_displayed() and by_css(driver, "#timeline .tool button.ctx-edit")
    reopen_read_only(driver, readonly, sid)
    wait_for(lambda: any(a.startswith("The tool answered:") for a in committed_answers(driver)), "the session, read-only")
    wait_for(lambda: one(driver, "#read-only-note").is_displayed(), "the read-only note")
    absent = ("#compact", "#composer", "#abort", "#timeline details.ctx-edits", "#timeline button.ctx-edit",
              "#timeline button.ctx-hide")
    # (the stream, connected after the view's read, can still draw the timeline again: a stale node is found again)
    becomes(lambda: [sel for sel in absent if any(n.is_displayed() for n in by_css(driver, sel))], [], "no control shown")
    note = " ".join(one(driver, "#read-only-note").text.split())
    for action in ("Sending", "steering", "withdrawing", "answering questions", "aborting", "stopping jobs",
                   "compacting", "snipping", "hiding"):
        assert action in note, (action, note)
    assert note.endswith("need a strong-trust credential.")


def test_dashboard_a_repeated_press_on_the_box_a_send_emptied_sends_nothing(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Ctrl+Enter pressed twice: once the first send is answered the box is empty, and the second
    press sent that empty box, whose refusal then stood beside "Sent". A press on the box the last
    send emptied, nothing typed since, sends nothing (the note says it was sent); once anything is
    typed (even only spaces) a send goes to the daemon again."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns())
    strong, sid = open_session(driver, d, tmp_path, "dash-press-twice")
    one(driver, "#input").send_keys("only once")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Sent (seq "), "the sent note")
    sent_note = one(driver, "#composer-note").text
    network_requests(driver, d.base)
    chord(driver, Keys.CONTROL, Keys.ENTER)
    click(driver, "#send")
    wait_for(lambda: "(faux) You said: only once" in committed_answers(driver), "the answer")
    assert [r for r in network_requests(driver, d.base) if r[1].endswith("/inputs")] == []
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert one(driver, "#composer-note").text == sent_note
    assert focused(driver)["id"] == "send"

    one(driver, "#input").send_keys("  ")
    click(driver, "#send")
    wait_for(lambda: error_shown(driver, "INVALID_ARGUMENT"), "the refusal of a blank message")
    events = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)[1]["events"]
    assert [e["kind"] for e in events].count("input.submitted") == 1
