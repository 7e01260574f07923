"""The dashboard (F-API-6) and the live stream it reads (F-API-5), a third pass as a person uses
them: what the page shows when the daemon is away (or busy, or refuses) at the moment a session is
opened.

A real ``lens serve --port 0`` (the faux provider, a real executor, a log in a temporary
directory) and headless Chromium, set up as in ``test_dashboard_browser.py`` (its fixtures and
helpers). The daemon's answers to a session's view read are scripted in the page where a real
daemon cannot give them on demand (``SCRIPT_VIEW_READS``: no answer, a 503 with or without
``Retry-After``, a refusal, a 200 that is not JSON), as the other passes script the live stream's.
Every wait is for a condition, with a timeout.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    LOSE_NEXT_SEND_ANSWER, Daemon, answered, body_data, browser, by_css, console_errors, daemon, make_daemon, one,
    open_session, submit, texts, wait_for, with_turns)


def session_row(sid: str) -> str:
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
    wait_for(lambda: by_css(driver, session_row(b)), "session B in the list")
    wait_for(lambda: one(driver, "#session-title").text == "Session A", "A's name in the head")

    d.stop()
    driver.execute_script("arguments[0].click()", one(driver, session_row(b)))
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


# Answers the page's reads of a session's view (GET /sessions/{id}?…) as ``window.viewAnswers``
# says for that session (else for "*"; none: the daemon's own answer): "away" (no answer, as
# Chromium says it), "garbage" (a 200 whose body is not JSON), or {status, code, retryAfter} (the
# daemon's error body, with that Retry-After if any). Each read is recorded in ``window.viewReads``
# as [session id, performance.now()].
SCRIPT_VIEW_READS = """
    window.viewReads = []; window.viewAnswers = {};
    const real = window.fetch;
    window.fetch = (url, init) => {
      const m = /\\/api\\/v1\\/sessions\\/([^/?]+)\\?/.exec(String(url));
      if (!m || (init && init.method !== "GET")) return real(url, init);
      const sid = decodeURIComponent(m[1]), answers = window.viewAnswers;
      window.viewReads.push([sid, performance.now()]);
      const a = sid in answers ? answers[sid] : answers["*"];
      if (!a) return real(url, init);
      if (a === "away") return Promise.reject(new TypeError("Failed to fetch"));
      if (a === "garbage") return Promise.resolve(new Response("<html>a proxy's page</html>",
          {status: 200, headers: {"Content-Type": "text/html"}}));
      const headers = {"Content-Type": "application/json"};
      if (a.retryAfter) headers["Retry-After"] = a.retryAfter;
      return Promise.resolve(new Response(JSON.stringify({error: {code: a.code, message: "scripted " + a.code}}),
                                          {status: a.status, headers}));
    };
"""
UNAVAILABLE = {"status": 503, "code": "SESSION_UNAVAILABLE"}
# Records each text the connection pill says, in ``window.pillSaid``.
RECORD_PILL = """window.pillSaid = [];
    const pill = document.getElementById("conn");
    new MutationObserver(() => window.pillSaid.push(pill.textContent))
      .observe(pill, {childList: true, characterData: true, subtree: true});"""


def two_sessions(d: Daemon, driver: Any, tmp_path: Path, client: str) -> tuple[str, str, str]:
    """Session A opened in the page (read and live), session B of its project listed, and the
    page's view reads scripted (``SCRIPT_VIEW_READS``, nothing scripted yet): (a strong
    credential, A's id, B's id)."""
    strong, a = open_session(driver, d, tmp_path, client)
    project = d.request("GET", f"/sessions/{a}", token=strong)[1]["projectId"]
    status, made = d.request("POST", "/sessions", {"projectId": project, "name": "Session B"}, token=strong)
    assert status == 201, made
    wait_for(lambda: by_css(driver, session_row(made["id"])), "session B in the list")
    wait_for(lambda: body_data(driver, "conn") == "live", "A's live stream")
    driver.execute_script(SCRIPT_VIEW_READS)
    return strong, a, made["id"]


def answer_views(driver: Any, sid: str, answer: Any) -> None:
    driver.execute_script("window.viewAnswers[arguments[0]] = arguments[1]", sid, answer)


def pick(driver: Any, *sids: str) -> float:
    """Click the sessions' rows one after the other, in one go (no read answered in between); the
    page's clock (ms) at the last click."""
    return driver.execute_script("""for (const sid of arguments)
        document.querySelector(`#sessions button[data-session-id='${sid}']`).click();
      return performance.now()""", *sids)


def reads_of(driver: Any, sid: str, since: float = 0.0) -> list[float]:
    """When (the page's clock, ms) each read of ``sid``'s view was asked, from ``since`` on."""
    return [t for s, t in driver.execute_script("return window.viewReads") if s == sid and t >= since]


def page_clock(driver: Any) -> float:
    return driver.execute_script("return performance.now()")


def stays(cond: Callable[[], Any], what: str, seconds: float) -> None:
    """``cond`` holds each time it is read for ``seconds`` (a thing that must not happen)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert cond(), what
        time.sleep(0.05)
    assert cond(), what


def shown(driver: Any, sid: str, name: str) -> None:
    wait_for(lambda: texts(driver, "#session-id") == [sid] and one(driver, "#session-title").text == name
             and one(driver, "#session-body").is_displayed(), f"{name} read and shown")


def errors_shown(driver: Any) -> list[list[str]]:
    return driver.execute_script("""return Array.from(document.querySelectorAll('#errors li'),
        (li) => [li.dataset.code, li.dataset.session, li.dataset.count, li.hidden || li.classList.contains('hidden') ? 'hidden' : 'shown'])""")


def test_a_session_picked_again_while_its_read_waits_is_read_by_one_series(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """B, A, B picked in one go while the daemon does not answer: each open started its own series
    of reads, the first B's going on beside the second's (each checked only that B was chosen),
    B read twice as often as the backoff says. Now an open superseded stops: one series for B
    (0.5 s, then 1 s between reads), A's read given up, and B shown once it answers."""
    driver = browser
    _, a, b = two_sessions(daemon, driver, tmp_path, "dash-pick-again")
    answer_views(driver, "*", "away")
    picked = pick(driver, b, a, b)
    wait_for(lambda: page_clock(driver) - picked > 3000, "3 s of the wait", 6)
    # (each open asks once as it is picked; the first B's and A's are then given up, and the last
    # B's series goes on: 0.5 s, then 1 s later)
    reads = [t for t in reads_of(driver, b) if t <= picked + 3000]   # (the next at 3.5 s)
    gaps = [round(y - x) for x, y in zip(reads, reads[1:])]
    assert len(reads) == 4 and all(g >= 450 for g in gaps[1:]), (reads, gaps)
    assert len(reads_of(driver, a)) == 1, reads_of(driver, a)
    assert texts(driver, "#conn")[0].startswith("reconnecting in "), texts(driver, "#conn")
    answer_views(driver, "*", None)
    shown(driver, b, "Session B")
    wait_for(lambda: body_data(driver, "conn") == "live", "B's live stream")
    assert not by_css(driver, "#errors li"), errors_shown(driver)
    assert console_errors(driver) == []


def test_a_read_answered_503_is_asked_again_at_the_backoffs_pace_and_then_shown(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A 503 without Retry-After: the read is asked again 0.5 s later, then 1 s later (not in a
    tight loop), the pill saying when; once the daemon answers, B is shown live and the wait's
    errors go."""
    driver = browser
    _, a, b = two_sessions(daemon, driver, tmp_path, "dash-open-503")
    answer_views(driver, b, UNAVAILABLE)
    driver.execute_script(RECORD_PILL)
    picked = pick(driver, b)
    wait_for(lambda: page_clock(driver) - picked > 3000, "3 s of the wait", 6)
    said = driver.execute_script("return window.pillSaid")
    assert said[:3] == ["reconnecting in 0.5s", "reconnecting in 1s", "reconnecting in 2s"], said
    reads = [t for t in reads_of(driver, b) if t <= picked + 3000]
    assert len(reads) == 3, reads   # (at 0, 0.5 and 1.5 s; the next at 3.5 s)
    assert reads[1] - reads[0] >= 450 and reads[2] - reads[1] >= 950, reads
    assert by_css(driver, "#errors li[data-code='SESSION_UNAVAILABLE']")
    answer_views(driver, b, None)
    shown(driver, b, "Session B")
    wait_for(lambda: body_data(driver, "conn") == "live", "B's live stream")
    wait_for(lambda: not by_css(driver, "#errors li"), "the wait's errors gone")
    assert console_errors(driver) == []


def test_a_read_answered_503_with_retry_after_waits_that_long(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """``Retry-After: 2`` is waited out whole (the page's own backoff says 0.5 s), the pill saying so."""
    driver = browser
    _, a, b = two_sessions(daemon, driver, tmp_path, "dash-open-retry-after")
    answer_views(driver, b, dict(UNAVAILABLE, retryAfter="2"))
    pick(driver, b)
    wait_for(lambda: texts(driver, "#conn") == ["reconnecting in 2s"], "the wait the daemon asked for, said")
    wait_for(lambda: len(reads_of(driver, b)) >= 2, "the read asked again", 6)
    reads = reads_of(driver, b)
    assert reads[1] - reads[0] >= 1950, reads
    answer_views(driver, b, None)
    shown(driver, b, "Session B")
    assert console_errors(driver) == []


def test_a_refusal_after_a_wait_is_said_once_and_puts_the_pill_and_the_waits_errors_right(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """B's read got no answer, then a refusal (the daemon back, B gone): it was shown, but the pill
    went on saying *reconnecting in …* and the wait's NETWORK errors stayed. Now the refusal is
    said once, not asked again, the pill says the daemon answers and the NETWORK errors go."""
    driver = browser
    _, a, b = two_sessions(daemon, driver, tmp_path, "dash-open-refused")
    answer_views(driver, b, "away")
    pick(driver, b)
    wait_for(lambda: by_css(driver, "#errors li[data-code='NETWORK']"), "the read that got no answer, said")
    wait_for(lambda: texts(driver, "#conn")[0].startswith("reconnecting in "), "the wait, said")
    answer_views(driver, b, {"status": 404, "code": "SESSION_NOT_FOUND"})
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_NOT_FOUND']"), "the refusal, said")
    asked = len(reads_of(driver, b))
    stays(lambda: len(reads_of(driver, b)) == asked, "a refusal is not asked again", 2.0)
    assert [e[:3] for e in errors_shown(driver)] == [["SESSION_NOT_FOUND", b, "1"]], errors_shown(driver)
    assert texts(driver, "#conn") == ["connected"], texts(driver, "#conn")
    assert not one(driver, "#composer").is_displayed()
    assert console_errors(driver) == []


def test_an_answer_that_is_not_json_is_said_once_not_asked_for_ever(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A 200 whose body is not JSON (a proxy's page) failed to read as a view (a TypeError) and
    was asked again for ever as "no answer from the daemon". Now only no answer and a 5xx, 408 or
    429 are asked again: this is said once."""
    driver = browser
    _, a, b = two_sessions(daemon, driver, tmp_path, "dash-open-garbage")
    answer_views(driver, b, "garbage")
    pick(driver, b)
    wait_for(lambda: by_css(driver, "#errors li"), "the answer that could not be read, said")
    stays(lambda: len(reads_of(driver, b)) == 1, "an unreadable answer is not asked again", 2.0)
    assert len(errors_shown(driver)) == 1 and errors_shown(driver)[0][2] == "1", errors_shown(driver)
    assert not texts(driver, "#conn")[0].startswith("reconnecting"), texts(driver, "#conn")
    assert console_errors(driver) == []


def test_a_wait_ends_at_once_when_another_session_is_chosen_or_the_credential_forgotten(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A new session whose read waits out a 503's ``Retry-After: 30`` kept *New session* disabled
    (its request awaits the open) for the 30 s, after A was chosen. Now choosing A ends the wait:
    the button is offered at once, the new session is not read again, nor is it after the
    credential is forgotten while B waits."""
    driver = browser
    _, a, b = two_sessions(daemon, driver, tmp_path, "dash-open-superseded")
    answer_views(driver, "*", dict(UNAVAILABLE, retryAfter="30"))
    answer_views(driver, a, None)
    button = "#new-session button[type=submit]"
    one(driver, button).click()
    wait_for(lambda: texts(driver, "#conn") == ["reconnecting in 30s"], "the new session's read waiting")
    new = driver.execute_script("return document.querySelector('#sessions button.selected').dataset.sessionId")
    assert new not in (a, b) and not one(driver, button).is_enabled()
    pick(driver, a)
    wait_for(lambda: one(driver, button).is_enabled(), "New session offered again", 2)
    shown(driver, a, a)
    wait_for(lambda: body_data(driver, "conn") == "live", "A's live stream")
    assert len(reads_of(driver, new)) == 1
    assert not by_css(driver, "#errors li"), errors_shown(driver)

    answer_views(driver, b, "away")
    pick(driver, b)
    wait_for(lambda: len(reads_of(driver, b)) >= 2, "B's read asked again", 5)
    one(driver, "#disconnect").click()
    wait_for(lambda: texts(driver, "#conn") == ["not connected"], "the credential forgotten")
    asked = len(reads_of(driver, b))
    stays(lambda: len(reads_of(driver, b)) == asked, "no read for a forgotten credential", 2.0)
    assert not by_css(driver, "#errors li"), errors_shown(driver)
    assert console_errors(driver) == []


def test_the_errors_of_a_wait_go_by_dismiss_and_another_sessions_stay(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """Once B's read is answered, the wait's NETWORK errors went with ``li.remove()``: a keyboard
    user on one's Dismiss lost the focus to the page, and A's own NETWORK error (a send whose answer
    was lost, out of sight while B is shown) went too. Now they go as a Dismiss takes them (the
    focus moves on) and A's stays, shown again when A is."""
    driver = browser
    _, a, b = two_sessions(daemon, driver, tmp_path, "dash-open-dismiss")
    driver.execute_script(LOSE_NEXT_SEND_ANSWER)
    submit(driver, "lost on its way back")
    wait_for(lambda: by_css(driver, f"#errors li[data-code='NETWORK'][data-session='{a}']"), "A's failed send")
    answer_views(driver, b, "away")
    pick(driver, b)
    wait_for(lambda: by_css(driver, f"#errors li[data-code='NETWORK'][data-session='{b}']"), "B's read, no answer")
    assert driver.execute_script(f"""const b = document.querySelector("#errors li[data-session='{b}'] button");
        b.focus(); return document.activeElement === b""")
    answer_views(driver, b, None)
    shown(driver, b, "Session B")
    assert not by_css(driver, f"#errors li[data-session='{b}']"), errors_shown(driver)
    assert driver.execute_script("return document.activeElement !== document.body"), "the focus lost"
    assert [e[:2] for e in errors_shown(driver)] == [["NETWORK", a]], errors_shown(driver)
    pick(driver, a)
    shown(driver, a, a)
    wait_for(lambda: [e[3] for e in errors_shown(driver)] == ["shown"], "A's error shown with A")
    assert console_errors(driver) == []
