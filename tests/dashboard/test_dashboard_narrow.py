"""The dashboard (F-API-6) on a narrow screen: a phone (390×844 CSS px) and a narrow pane (600×900).

The page had one layout, three columns side by side (a 290 px navigation, the timeline, a 300 px
side panel): below about 900 px the timeline was squeezed to 32 px and the page scrolled sideways.
Up to 900 px it is now one column: the projects and sessions above the session, behind a toggle
(closed once a session is open), the session at the full width (its head, the timeline, the
message box, then the queue, todos and jobs), and every control at least 24×24 px (WCAG 2.2's
target size minimum). A person goes through the whole flow at each width (paste a credential,
make a project and a session, watch answers stream in, tool calls, a todo list, a job with its
output, a queued input steered, abort, back to the list, forget the credential), and at each step
the page must not scroll sideways and every control the flow needs must be on screen, uncovered
and large enough. At the wide size the three columns stand side by side as before. One real
daemon and one headless Chromium, as in ``test_dashboard_browser.py`` (its helpers); every wait
is for a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, answered, body_data, browser, by_css, click, committed_answers, connect, console_errors, make_daemon, one,
    open_session, submit, texts, wait_for, with_turns)
from tests.dashboard.test_dashboard_keyboard import focused, keys

# One turn with a todo list, a job whose output has a long line, and a tool call.
LONG_LINE = "0" * 300
WORK = {"when": "work please", "toolCalls": [
    {"name": "todo", "arguments": {"items": [{"id": "1", "text": "lay the page out narrow", "status": "in_progress"},
                                             {"id": "2", "text": "test it", "status": "pending"}]}},
    {"name": "job", "arguments": {"action": "start", "command": f"echo {LONG_LINE}; sleep 30"}},
    {"name": "get_system_time", "arguments": {}}]}

# How the page stands: how far it is wider than the window, and, for each control matched by the
# selectors (those shown), its box once scrolled into view and whether something else covers its
# middle.
LAYOUT = """
const out = {wider: document.documentElement.scrollWidth - innerWidth, vw: innerWidth, vh: innerHeight, controls: []};
for (const sel of arguments[0]) for (const n of document.querySelectorAll(sel)) {
  if (!n.getClientRects().length) continue;
  n.scrollIntoView({block: 'nearest', inline: 'nearest'});
  const r = n.getBoundingClientRect(), hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  out.controls.push({sel, text: (n.textContent || n.getAttribute('aria-label') || '').trim().slice(0, 30),
                     box: [r.left, r.top, r.right, r.bottom].map(Math.round), w: r.width, h: r.height,
                     covered: !hit || !(hit === n || n.contains(hit))});
}
return out;
"""
FOLLOWED = """const tl = document.getElementById('timeline'), ms = tl.querySelectorAll('.msg.assistant');
    return {tall: tl.clientHeight, more: tl.scrollHeight - tl.clientHeight, bottom: tl.getBoundingClientRect().bottom,
            top: tl.getBoundingClientRect().top, last: ms[ms.length - 1].getBoundingClientRect().bottom}"""
BOX = "const r = document.querySelector(arguments[0]).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom, r.width];"
START = ("#cred", "#connect")
LIST = ("#nav-toggle", "#refresh", "#projects button.row", "#project-name", "#project-workspace", "#new-project button",
        "#sessions button.row", "#session-model", "#new-session button")
SESSION = ("#nav-toggle", "#disconnect", "#abort", "#timeline .tool summary", "#timeline .tool button", "#input",
           "#when-busy", "#send", "#queue li.card button", "#jobs li.card button", "#jobs li.card code.id")


def at_size(driver: Any, width: int, height: int) -> None:
    """A viewport of exactly ``width``×``height`` CSS px at device scale 1 (a window's size would
    count its frame in the height)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    wait_for(lambda: driver.execute_script("return [innerWidth, innerHeight, devicePixelRatio]") == [width, height, 1],
             f"a {width}×{height} px page")


def check_layout(driver: Any, selectors: tuple[str, ...], want: set[str]) -> list[dict[str, Any]]:
    """No sideways scroll; every shown control of ``selectors`` on screen, uncovered, 24×24 px at
    least; each of ``want`` among them."""
    got = driver.execute_script(LAYOUT, list(selectors))
    assert got["wider"] <= 0, f"the page scrolls sideways by {got['wider']} px"
    for c in got["controls"]:
        left, top, right, bottom = c["box"]
        assert 0 <= left and right <= got["vw"] and 0 <= top and bottom <= got["vh"], ("off screen", c)
        assert not c["covered"], ("covered", c)
        assert c["w"] >= 24 and c["h"] >= 24, ("under 24×24 px", c)
    assert want <= {c["sel"] for c in got["controls"]}, (want, got["controls"])
    return got["controls"]


def nav(driver: Any) -> tuple[bool, str]:
    """Whether the projects and sessions are shown, and what their toggle says."""
    return one(driver, "nav").is_displayed(), one(driver, "#nav-toggle").get_attribute("aria-expanded")


OPEN, CLOSED = (True, "true"), (False, "false")


@pytest.mark.parametrize("size", [(390, 844), (600, 900)], ids=["phone", "pane"])
def test_dashboard_works_on_a_narrow_screen(size: tuple[int, int], make_daemon: Callable[[dict[str, Any]], Daemon],
                                            browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    width, height = size
    d = make_daemon(with_turns(WORK))
    strong = d.pair("dash-narrow", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    driver = browser
    at_size(driver, width, height)

    # Paste a credential; make a project; the list, above, is open while no session is.
    driver.get(d.base + "/")
    check_layout(driver, START, set(START))
    connect(driver, strong)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    one(driver, "#project-name").send_keys("Narrow project")
    one(driver, "#project-workspace").send_keys(str(workspace))
    click(driver, "#new-project button")
    wait_for(lambda: by_css(driver, "#projects button.selected"), "the new project")
    assert nav(driver) == OPEN
    check_layout(driver, LIST, {"#nav-toggle", "#projects button.row", "#new-project button", "#new-session button"})

    # A new session takes the screen: the list closes behind its toggle; the session is as wide as the page.
    click(driver, "#new-session button")
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    sid = wait_for(lambda: driver.execute_script(
        "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId"), "the session")
    wait_for(lambda: nav(driver) == CLOSED, "the list to close")
    for part in ("#session-head", "#timeline", "#composer", "#input", "aside"):
        left, _, right, _, _ = driver.execute_script(BOX, part)
        assert left <= 16 and right >= width - 36, (part, left, right)   # (a vertical scroll bar may take 15 px)
    # Under the timeline the message box, then the side panel (queue, todos, jobs).
    timeline, composer, aside = (driver.execute_script(BOX, part) for part in ("#timeline", "#composer", "aside"))
    assert timeline[3] <= composer[1] and composer[3] <= aside[1], (timeline, composer, aside)

    # Submit: the faux answer streams in.
    answered(driver, "hello from a small screen", "the faux answer")
    assert int(body_data(driver, "deltas") or 0) >= 1, "no model.delta frame was shown"

    # Tool calls with their status, a todo list, a job and its output (a 300-character line).
    submit(driver, "work please")
    wait_for(lambda: len(by_css(driver, "#timeline .tool[data-status='ok']")) == 3, "the three finished tool calls")
    wait_for(lambda: len(by_css(driver, "#todos li.todo")) == 2, "the todo list")
    wait_for(lambda: by_css(driver, "#jobs li.card .job-output"), "the job's card")
    click(driver, "#jobs li.card .job-output")
    wait_for(lambda: LONG_LINE in " ".join(texts(driver, "#jobs li.card pre")), "the job's output")

    # A run that streams and waits; an input sent meanwhile is queued.
    submit(driver, "stream slowly please")
    wait_for(lambda: any("(faux) Streaming the first half" in t for t in texts(driver, "#timeline .msg.streaming .text")),
             "the streaming answer")
    submit(driver, "a follow-up while busy")
    wait_for(lambda: "a follow-up while busy" in " ".join(texts(driver, "#queue li.card .text")), "the queued input")

    # Everything the flow needs is on screen (scrolled to), uncovered, and large enough to hit; the
    # long output stays inside its box.
    check_layout(driver, SESSION, {"#nav-toggle", "#abort", "#timeline .tool summary", "#input", "#when-busy", "#send",
                                   "#queue li.card button", "#jobs li.card button", "#jobs li.card code.id"})
    _, _, pre_right, _, _ = driver.execute_script(BOX, "#jobs li.card pre")
    _, _, card_right, _, _ = driver.execute_script(BOX, "#jobs li.card")
    assert pre_right <= card_right, (pre_right, card_right)

    # Steer the queued input; abort the run (which withdraws what is queued); submit again.
    click(driver, "#queue li.card button:not(.secondary)")
    wait_for(lambda: texts(driver, "#queue li.card .pill") == ["steer"], "the input queued as steer")
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and not by_css(driver, "#queue li.card"),
             "the aborted run to end, its queue withdrawn")
    # (the controls scrolled into view above scrolled the timeline up: the reader goes back to its end)
    driver.execute_script("const tl = document.getElementById('timeline'); tl.scrollTop = tl.scrollHeight")
    answered(driver, "after the abort", "the answer after the abort")
    # The timeline is a box of its own, no taller than the screen, that follows the answer: the
    # page does not grow with the session, and the last answer is in view inside it.
    followed = driver.execute_script(FOLLOWED)
    assert followed["tall"] <= height and followed["more"] > 0, followed
    assert followed["top"] < followed["last"] <= followed["bottom"] + 0.5, followed

    # The toggle opens the list again; picking the session (by the keyboard) closes it, and the
    # focus, on a row now hidden, goes to the toggle.
    click(driver, "#nav-toggle")
    wait_for(lambda: nav(driver) == OPEN, "the list to open")
    check_layout(driver, LIST, {"#sessions button.row"})
    driver.execute_script("arguments[0].focus()", one(driver, f"#sessions button[data-session-id='{sid}']"))
    keys(driver, Keys.ENTER)
    wait_for(lambda: nav(driver) == CLOSED, "the list to close again")
    wait_for(lambda: focused(driver)["id"] == "nav-toggle", "the focus on the toggle")
    wait_for(lambda: "(faux) You said: after the abort" in committed_answers(driver), "the session shown again")
    check_layout(driver, ("#nav-toggle", "#input", "#send"), {"#nav-toggle", "#input", "#send"})
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    # Forget the credential: no session is shown, and the list is open again.
    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed() and nav(driver) == OPEN, "the credential field and the list")
    check_layout(driver, START, set(START))
    assert console_errors(driver) == []


def test_dashboard_keeps_its_columns_on_a_wide_screen(make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any,
                                                       tmp_path: Path) -> None:
    """At the suite's wide size (1400×900) nothing of the narrow layout applies: the list and the
    session side by side, the timeline and the side panel too, at their widths; the list stays
    once a session is open, and has no toggle; the page does not scroll."""
    d = make_daemon(with_turns())
    driver = browser
    at_size(driver, 1400, 900)
    open_session(driver, d, tmp_path, "dash-wide")
    answered(driver, "hello wide", "the faux answer")
    box = {part: driver.execute_script(BOX, part) for part in ("nav", "#session", "#timeline", "aside", "#composer")}
    assert box["nav"][4] == 290 and box["aside"][4] == 300, box
    assert box["nav"][2] <= box["#session"][0] and box["nav"][1] == box["#session"][1], box   # side by side
    assert box["#timeline"][2] <= box["aside"][0] and box["#timeline"][1] == box["aside"][1], box
    assert box["#composer"][1] >= box["aside"][3], box   # the message box under both
    assert one(driver, "nav").is_displayed() and not any(n.is_displayed() for n in by_css(driver, "#nav-toggle"))
    assert driver.execute_script("return document.documentElement.scrollHeight <= innerHeight"
                                 " && document.documentElement.scrollWidth <= innerWidth")
    assert console_errors(driver) == []
