"""The dashboard (F-API-6) with long text from the daemon, at a phone's width and a desktop's.

Text the page takes from the daemon has no length a layout can count on: a retry reason that
names a damaged event's kind, a session name of 200 characters, a model id, a tool name the model
made up, an option's label, a todo, a job's command. Each either wraps inside its panel or is cut
on one line with the whole text still reachable; none widens its panel or pushes the header's
controls off screen. A background job's id shows, short, as text to select and copy (the routes
`GET /sessions/{id}/jobs/{jobId}` and `POST …/stop` take it). Boxes are measured with
`getBoundingClientRect` at 360 px and 1280 px; one real daemon and one headless Chromium, as in
``test_dashboard_browser.py`` (its helpers). Every wait is for a condition.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, browser, by_css, console_errors, make_daemon, one, open_session,
    renamed_while_stopped, seen_then_stopped, submit, wait_for, with_turns)
from tests.dashboard.test_dashboard_keyboard import chord, focused, keys, selected_text

WIDTHS = (360, 1280)
WORD = "x" * 300   # no break opportunity in it: only a rule that breaks anywhere wraps it
LONG_MODEL = "m" * 120
LONG_NAME = "name" + "n" * 196   # (a session name is at most 200 characters)
LONG_TURN = {"when": "long everything", "toolCalls": [
    {"name": "todo", "arguments": {"items": [{"id": "1", "text": "todo" + WORD, "status": "in_progress"}]}},
    {"name": "tool" + WORD, "arguments": {}},
    {"name": "job", "arguments": {"action": "start", "command": "true " + WORD}},
    {"name": "ask_user", "arguments": {"questions": [{"id": "q", "text": "question" + WORD,
                                                      "options": [{"id": "o", "label": "option" + WORD}],
                                                      "allow_text": False}]}},
]}

# Each piece of long text: the element that shows it, and the box it must stay inside.
PIECES = {
    "session name": ("#session-title", "#session-head"),
    "model id": ("#session-meta", "#session-head"),
    "tool name": ("#timeline .tool .name", ".tool"),
    "question": ("#timeline .question > .text", ".question"),
    "option": ("#timeline .question button.option", ".question"),
    "todo": ("#todos .t", "aside"),
    "job command": ("#jobs li.card .sub", "aside"),
}
# Per piece: its text, and how far its widest element reaches past the right edge of its box (px).
OVERFLOW = """
const out = {};
for (const [what, [sel, box]] of Object.entries(arguments[0])) {
  const ns = [...document.querySelectorAll(sel)];
  out[what] = {text: ns.map((n) => n.textContent).join(' | '),
               past: Math.max(...ns.map((n) => n.getBoundingClientRect().right - n.closest(box).getBoundingClientRect().right))};
}
out.pageWider = document.documentElement.scrollWidth - innerWidth;
return out;
"""
JOB_ID = """const c = document.querySelector('#jobs li.card code.id'), r = c.getBoundingClientRect();
    return {text: c.textContent, shown: r.width, whole: c.scrollWidth, right: r.right,
            card: c.closest('li.card').getBoundingClientRect().right, button: !!c.closest('button')}"""
HEADER = """const why = document.getElementById('conn-why'), r = why.getBoundingClientRect(), s = getComputedStyle(why);
    const b = document.getElementById('disconnect').getBoundingClientRect();
    return {text: why.textContent, title: why.title, height: r.height, line: parseFloat(s.lineHeight),
            cut: why.scrollWidth > why.clientWidth && s.textOverflow === 'ellipsis', right: r.right,
            header: document.querySelector('header').getBoundingClientRect().height,
            client: document.getElementById('client').getBoundingClientRect().right,
            button: [b.left, b.right, b.top, b.bottom], vw: innerWidth}"""


def test_dashboard_keeps_long_text_from_the_daemon_inside_its_panels_and_shows_a_jobs_id(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A session name, a model id, a tool name, an option's label, a todo and a job's command of a
    few hundred characters without a space each widened their panel far past the screen (the page
    was 2,100 px wide at 1280); a job's id was only in its card's tooltip. Each now wraps inside
    its panel, whole; the job's id shows short, a click or the focus (it is a Tab stop) selects
    the whole id, and focused it shows whole."""
    from selenium.webdriver.common.keys import Keys

    config = with_turns(LONG_TURN)
    config["providers"][0]["models"].append({"id": LONG_MODEL})
    d = make_daemon(config)
    driver = browser
    strong, sid = open_session(driver, d, tmp_path, "dash-long-text")
    assert d.request("PATCH", f"/sessions/{sid}", {"name": LONG_NAME, "model": "faux/" + LONG_MODEL}, token=strong)[0] == 200
    submit(driver, "long everything")
    wait_for(lambda: by_css(driver, "#timeline .question button.option"), "the question")
    job_id = wait_for(lambda: (d.request("GET", f"/sessions/{sid}", token=strong)[1]["jobs"] or [{}])[0].get("jobId"), "the job")
    wait_for(lambda: by_css(driver, "#jobs li.card"), "the job's card")
    wait_for(lambda: one(driver, "#session-title").text == LONG_NAME and LONG_MODEL in one(driver, "#session-meta").text,
             "the name and the model shown")

    for width in WIDTHS:
        driver.set_window_size(width, 900)
        wait_for(lambda: driver.execute_script("return innerWidth") == width, f"a {width} px wide page")
        shown = driver.execute_script(OVERFLOW, PIECES)
        for what, want in (("session name", LONG_NAME), ("model id", LONG_MODEL), ("tool name", "tool" + WORD),
                           ("question", "question" + WORD), ("option", "option" + WORD), ("todo", "todo" + WORD),
                           ("job command", "true " + WORD)):
            assert want in shown[what]["text"], (width, what, shown[what]["text"][:80])
            assert shown[what]["past"] <= 0.5, (width, what, shown[what]["past"])
        assert shown["pageWider"] <= 0, (width, shown["pageWider"])   # (at 360 px the page is one column)
        job = driver.execute_script(JOB_ID)
        assert job["text"] == job_id and not job["button"], job
        assert job["shown"] < job["whole"] and job["right"] <= job["card"] + 0.5, job   # short, inside its card
        assert selected_text(driver, "#jobs li.card code.id") == job_id

    # By the keyboard: the id is the Tab stop before the card's buttons; focused, it is selected
    # whole (Ctrl+C copies it) and shows whole.
    driver.execute_script("window.getSelection().removeAllRanges(); document.querySelector('#jobs .job-output').focus()")
    chord(driver, Keys.SHIFT, Keys.TAB)
    assert focused(driver)["tag"] == "code" and focused(driver)["row"] == job_id
    assert driver.execute_script("return window.getSelection().toString()") == job_id
    job = driver.execute_script(JOB_ID)
    assert job["shown"] >= job["whole"], job
    # The card drawn again (its output opened by a click that leaves the focus where it is): the
    # focus is on the id of the new card.
    driver.execute_script("window.oldCard = document.querySelector('#jobs li.card'); oldCard.querySelector('.job-output').click()")
    wait_for(lambda: by_css(driver, "#jobs li.card .job-out"), "the card drawn again with its output")
    assert driver.execute_script("return !window.oldCard.isConnected")
    assert focused(driver)["tag"] == "code" and focused(driver)["row"] == job_id
    keys(driver, Keys.TAB)
    assert focused(driver)["text"] == "Hide output"
    assert console_errors(driver) == []


def test_dashboard_keeps_a_long_retry_reason_to_one_line_with_the_whole_text_reachable(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A stream that ends at an event the log cannot read says why beside the connection pill;
    a row whose kind is 300 characters makes that reason some 220 characters long (the kind is quoted
    cut to 80). It wrapped up
    to 420 px wide, so at 360 px the header was wider than the screen and the Forget credential
    button was pushed off it (so was the end of a 64-character client id). The reason is now one
    line cut with an ellipsis, its tooltip holds it whole, and it is a Tab stop that shows it whole
    when focused; the header wraps."""
    from selenium.webdriver.common.keys import Keys

    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("c" * 64, strong=True)   # (the longest client id: it shows in the header too)
    # While the daemon is away, an event is written after what the page saw, and its row's kind
    # made 300 characters long: the stream's replay cannot read it, and says so naming the kind.
    sid, project, _ = seen_then_stopped(driver, d, strong, tmp_path)
    damaged = renamed_while_stopped(d, project, sid)
    con = sqlite3.connect(d.cwd / ".lens" / "events.db", timeout=5)
    try:
        con.execute("UPDATE events SET kind = ? WHERE seq = ?", ("k" * 300, damaged))
        con.commit()
    finally:
        con.close()
    d.start()
    wait_for(lambda: f"event {damaged} cannot be read" in one(driver, "#conn-why").get_attribute("textContent"),
             "the reason beside the pill", 20)

    for width in WIDTHS:
        driver.set_window_size(width, 900)
        wait_for(lambda: driver.execute_script("return innerWidth") == width, f"a {width} px wide page")
        h = driver.execute_script(HEADER)
        assert len(h["text"]) > 200 and "k" * 80 in h["text"] and h["title"] == h["text"], h
        assert h["height"] < 1.5 * h["line"] and h["cut"] and h["right"] <= width, h   # one line, cut visibly
        left, right, top, bottom = h["button"]
        assert 0 <= left and right <= width and bottom <= h["header"], h   # the header's control is on screen
        assert h["header"] < 150 and h["client"] <= width, h

    # By the keyboard: the reason is the Tab stop before the header's button; focused, it shows whole.
    driver.execute_script("document.getElementById('disconnect').focus()")
    chord(driver, Keys.SHIFT, Keys.TAB)
    assert focused(driver)["id"] == "conn-why"
    h = driver.execute_script(HEADER)
    assert h["height"] > 2 * h["line"] and not h["cut"], h
    assert console_errors(driver) == []
