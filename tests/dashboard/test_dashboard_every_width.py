"""The dashboard (F-API-6) at every width, and on a touch screen.

The one-column layout up to 900 px (``test_dashboard_narrow.py``) left three things: above it the
small buttons were 21 px high and a tool call's toggles and a job's id 17 px, under WCAG 2.2's
24×24 px target size minimum; from 901 to 1120 px the timeline was squeezed to 311–530 px
between the list and the side panel; and a touch screen (``pointer: coarse``) wider than 900 px
got the small targets. Each control a session shows (buttons, toggles, a job's id, inputs, selects,
the message box) is now at least 24×24 px at every width (1400, 1000, 600 and 390 px), a touch
screen's at least 44×44 px (a finger the primary pointer or one of them), and from 900 to 1120 px
the side panel is under the timeline, which keeps 520 px or more at every width, its sections
side by side. A quarantined session opened on a narrow screen closes the list as any other session
does, and a read-only reader's note is shown whole at every size. On a touch screen, rows of a few
hundred characters without a space wrap or are cut with their whole text in a tooltip, and above
900 px the page does not scroll down and the timeline keeps its height. One real daemon and one headless
Chromium, as in ``test_dashboard_browser.py`` (its helpers); every wait is for a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, answered, body_data, browser, by_css, click, committed_answers, connect, console_errors, make_daemon, one, open_session,
    reopen_read_only, restart_with_its_first_input_damaged, start_chromium, submit, texts, wait_for, with_turns)
from tests.dashboard.test_dashboard_keyboard import focused, keys
from tests.dashboard.test_dashboard_narrow import BOX, CLOSED, OPEN, WORK, at_size, check_layout, nav

# Every control the page shows: each button, a tool call's "arguments" / "result" toggle, a job's id,
# each input (the new project's and session's fields), select (the default model, "if busy") and
# the message box (each kind must be shown).
CONTROLS = ("button", "details summary", "code.id.short", "input", "select", "textarea")
WANT = set(CONTROLS)
# The small buttons, each of which the session below must show: ↻, the default model's two, Abort,
# Compact, a queued input's Withdraw and Steer, a job's Output and Stop.
SMALL = ("#refresh", "#model-set", "#model-clear", "#abort", "#compact", "#queue li.card button", "#jobs li.card button")
SIZES = ((1400, 900), (1000, 900), (600, 900), (390, 844))
# The pointers a device has, as media queries see them: a phone or tablet (a finger is the primary
# pointer: CDP's touch emulation, which makes ``pointer`` and ``any-pointer`` coarse together) and
# a laptop with a touch screen (a mouse first, a finger too: Blink's settings, as CDP's
# ``Emulation.setEmulatedMedia`` leaves both features as they are). Bits: 2 coarse, 4 fine.
POINTERS = {"touch screen": ("", True),
            "mouse and touch screen": ("primaryPointerType=4,availablePointerTypes=6", False)}
# The side panel's sections side by side in the middle layout; each one's box and the panel's.
SECTIONS = ("queue", "todos", "jobs")
SECTION_BOXES = """const box = (n) => { const r = n.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const aside = document.querySelector('aside');
    return {aside: box(aside), wider: aside.scrollWidth - aside.clientWidth,
            sections: arguments[0].map((id) => box(document.getElementById(id).closest('aside > section')))};"""


def busy_session_with_work(driver: Any, d: Daemon, tmp_path: Path, client: str) -> None:
    """A session (opened with a strong credential for ``client``) with a todo list, a running job,
    three tool calls, a run that streams and waits, and an input queued meanwhile: every kind of
    control the session shows."""
    open_session(driver, d, tmp_path, client)
    submit(driver, "work please")
    wait_for(lambda: len(by_css(driver, "#timeline .tool[data-status='ok']")) == 3, "the three finished tool calls")
    wait_for(lambda: by_css(driver, "#jobs li.card .job-output"), "the job's card")
    submit(driver, "stream slowly please")
    wait_for(lambda: any("(faux) Streaming the first half" in t for t in texts(driver, "#timeline .msg.streaming .text")),
             "the streaming answer")
    submit(driver, "a follow-up while busy")
    wait_for(lambda: "a follow-up while busy" in " ".join(texts(driver, "#queue li.card .text")), "the queued input")
    wait_for(lambda: one(driver, "#model-clear").is_displayed(), "the default model's buttons")


def sizes_of(driver: Any, selectors: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each shown control of ``selectors``: its selector, text, width and height."""
    return driver.execute_script("""const out = [];
        for (const sel of arguments[0]) for (const n of document.querySelectorAll(sel)) {
          if (!n.getClientRects().length) continue;
          const r = n.getBoundingClientRect();
          out.push({sel, text: (n.textContent || '').trim().slice(0, 30), w: r.width, h: r.height});
        }
        return out;""", list(selectors))


def list_shown(driver: Any, width: int) -> None:
    """At a narrow width the list is behind its toggle once a session is open: open it, so its
    controls are measured too."""
    if width <= 900 and nav(driver) == CLOSED:
        click(driver, "#nav-toggle")
        wait_for(lambda: nav(driver) == OPEN, "the list open")


def test_dashboard_controls_are_24_px_at_every_width(make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any,
                                                      tmp_path: Path) -> None:
    """Above 900 px the small buttons were 21 px high, a tool call's toggles and a job's id 17 px.
    At each of four widths every control shown (the list's, the session's, the side panel's) is on
    screen once scrolled to, uncovered and at least 24×24 px, and the page does not scroll sideways."""
    d = make_daemon(with_turns(WORK))
    driver = browser
    at_size(driver, *SIZES[0])
    busy_session_with_work(driver, d, tmp_path, "dash-every-width")
    for width, height in SIZES:
        at_size(driver, width, height)
        list_shown(driver, width)
        got = check_layout(driver, CONTROLS, WANT)
        assert {c["sel"] for c in sizes_of(driver, SMALL)} == set(SMALL), (width, sizes_of(driver, SMALL))
        assert len([c for c in got if c["sel"] == "details summary"]) >= 6, (width, got)   # (two per tool call)
    assert console_errors(driver) == []


def test_dashboard_gives_the_timeline_room_between_the_narrow_and_the_wide_layout(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """From 900 to about 1100 px the three columns left the timeline 310–510 px. Up to 1120 px the
    side panel is now under the timeline at the session's width (the list stays beside), so the
    timeline has at least 520 px at every width above 900; the page scrolls neither way. The
    panel's sections were one long column there, of which its 38 % of the screen showed the
    queue and a little more: the queue, todos and jobs now stand side by side, inside it."""
    d = make_daemon(with_turns(WORK))
    driver = browser
    at_size(driver, 1400, 900)
    busy_session_with_work(driver, d, tmp_path, "dash-middle")
    for width in (901, 1000, 1120, 1121, 1400):
        at_size(driver, width, 900)
        box = {part: driver.execute_script(BOX, part) for part in ("nav", "#session", "#timeline", "aside", "#composer")}
        assert box["#timeline"][4] >= 520, (width, box)
        assert box["nav"][4] == 290 and box["nav"][2] <= box["#session"][0], (width, box)   # the list beside
        if width <= 1120:   # the side panel under the timeline, as wide, the message box under both
            assert box["#timeline"][3] <= box["aside"][1] <= box["#composer"][1], (width, box)
            assert box["aside"][0] == box["#timeline"][0] and box["aside"][2] == box["#timeline"][2], (width, box)
            assert box["aside"][3] - box["aside"][1] <= 0.38 * 900 + 0.5, (width, box)
            # its first sections side by side, one row, inside the panel, which does not scroll sideways
            got = driver.execute_script(SECTION_BOXES, list(SECTIONS))
            tops = {round(s[1]) for s in got["sections"]}
            assert len(tops) == 1 and got["wider"] <= 0, (width, got)
            assert all(a[2] <= b[0] for a, b in zip(got["sections"], got["sections"][1:])), (width, got)
            assert got["aside"][0] <= got["sections"][0][0] and got["sections"][-1][2] <= got["aside"][2], (width, got)
        else:   # the three columns
            assert box["#timeline"][2] <= box["aside"][0] and box["aside"][4] == 300, (width, box)
        assert driver.execute_script("return document.documentElement.scrollHeight <= innerHeight"
                                     " && document.documentElement.scrollWidth <= innerWidth"), width
    check_layout(driver, CONTROLS, WANT)
    assert console_errors(driver) == []


@pytest.mark.parametrize("pointer", list(POINTERS))
def test_dashboard_gives_a_touch_screen_44_px_targets_at_every_width(
        pointer: str, make_daemon: Callable[[dict[str, Any]], Daemon], tmp_path: Path) -> None:
    """The layout was chosen by width only: a touch screen wider than 900 px had the wide layout
    and its 21 px buttons. With a finger as the pointer (``pointer: coarse``, through Chromium's
    touch emulation), every control is at least 44×44 px at each width, on screen and uncovered.
    So on a laptop with a touch screen too (``any-pointer: coarse``, the mouse the primary
    pointer), which had the 24 px targets; and inputs, selects and the message box (30 px high)
    are held to it as the buttons are."""
    blink, primary_coarse = POINTERS[pointer]
    d = make_daemon(with_turns(WORK))
    driver = start_chromium(tmp_path, blink_settings=blink)
    try:
        at_size(driver, *SIZES[0])
        if not blink:
            driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
        driver.get(d.base + "/")
        assert driver.execute_script("return [matchMedia('(pointer: coarse)').matches, matchMedia('(any-pointer: coarse)').matches]"
                                     ) == [primary_coarse, True]
        busy_session_with_work(driver, d, tmp_path, "dash-touch")
        for width, height in SIZES:
            at_size(driver, width, height)
            list_shown(driver, width)
            got = check_layout(driver, CONTROLS + ("#nav-toggle",), WANT)
            small = [c for c in got if c["w"] < 44 or c["h"] < 44]
            assert not small, (width, small)
        assert console_errors(driver) == []
    finally:
        driver.quit()


def test_dashboard_closes_the_list_when_a_quarantined_session_is_opened_on_a_narrow_screen(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A quarantined session whose view cannot be read (``SESSION_QUARANTINED``), opened from the
    list at 390 px, left the list open above its head: the session, named and marked quarantined,
    was below the fold. It closes the list as any session does, and the focus goes to the toggle.
    The refusal's message names the session's id, a word the error bar did not break: the page
    scrolled sideways by 138 px and Dismiss was off screen; the message now wraps."""
    from selenium.webdriver.common.keys import Keys

    d = make_daemon(with_turns())
    driver = browser
    at_size(driver, 390, 844)
    strong, damaged = open_session(driver, d, tmp_path, "dash-narrow-quarantined")
    answered(driver, "something to replay", "the answer")
    restart_with_its_first_input_damaged(d, damaged)
    wait_for(lambda: d.request("GET", f"/sessions/{damaged}", token=strong)[1]["error"]["code"] == "SESSION_QUARANTINED",
             "the session quarantined", 20)
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_QUARANTINED']"), "the refusal to read it", 20)
    # Back to the list, and the quarantined session picked again from it by the keyboard.
    click(driver, "#nav-toggle")
    wait_for(lambda: nav(driver) == OPEN, "the list open")
    driver.execute_script("arguments[0].focus()", one(driver, f"#sessions button[data-session-id='{damaged}']"))
    keys(driver, Keys.ENTER)
    wait_for(lambda: nav(driver) == CLOSED, "the list to close")
    wait_for(lambda: focused(driver)["id"] == "nav-toggle", "the focus on the toggle")
    assert one(driver, "#session-title").text == damaged and one(driver, "#session-status").text == "quarantined"
    note = one(driver, "#closed-note")
    assert note.is_displayed() and "quarantined" in note.text, note.text
    check_layout(driver, ("#nav-toggle", "#errors button"), {"#nav-toggle", "#errors button"})
    head = driver.execute_script(BOX, "#session-head")
    assert 0 <= head[1] and head[3] <= 844, head   # the session's head in view, not below the list
    assert console_errors(driver) == []


def test_dashboard_shows_a_read_only_readers_note_whole_at_every_width(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A read-only credential's note (why nothing can be sent) stands where the message box would;
    at the narrow sizes no test measured it. At each of the four sizes it is shown whole: inside
    the window once scrolled to, not cut inside its box, not covered (by the list's toggle or
    anything), the page not scrolling sideways; and on a narrow screen it is under the timeline,
    as the message box is, with the list closed."""
    d = make_daemon(with_turns())
    readonly = d.pair("dash-read-note", strong=False)
    driver = browser
    at_size(driver, *SIZES[-1])
    _, sid = open_session(driver, d, tmp_path, "dash-read-note-strong")
    answered(driver, "something to read", "the answer")
    reopen_read_only(driver, readonly, sid)
    wait_for(lambda: "(faux) You said: something to read" in committed_answers(driver), "the session, read-only")
    wait_for(lambda: one(driver, "#read-only-note").is_displayed(), "the read-only note")
    for width, height in SIZES:
        at_size(driver, width, height)
        got = check_layout(driver, ("#read-only-note", "#nav-toggle"), {"#read-only-note"})
        note = driver.execute_script("""const n = document.getElementById('read-only-note');
            return {text: n.textContent.replace(/\\s+/g, ' ').trim(), cut: n.scrollWidth > n.clientWidth || n.scrollHeight > n.clientHeight,
                    below: n.getBoundingClientRect().top - document.getElementById('timeline').getBoundingClientRect().bottom}""")
        assert note["text"].startswith("Read-only credential") and note["text"].endswith("need a strong-trust credential."), note
        assert not note["cut"] and note["below"] >= 0, (width, note)
        if width <= 900:
            assert nav(driver) == CLOSED and {c["sel"] for c in got} == {"#read-only-note", "#nav-toggle"}, (width, got)
    assert console_errors(driver) == []


# Long rows from the daemon, none with a space: a project's name and workspace, a session's name,
# a model id, a tool name, an edited file's path, a todo, a job's command.
LONG = "x" * 300
LONG_MODEL = "m" * 120
LONG_PATH = "p" * 200 + ".txt"
LONG_TURN = {"when": "long rows", "toolCalls": [
    {"name": "todo", "arguments": {"items": [{"id": "1", "text": "todo" + LONG, "status": "in_progress"}]}},
    {"name": "tool" + LONG, "arguments": {}},
    {"name": "edit_file", "arguments": {"path": LONG_PATH, "mode": "create", "content": "x\n"}},
    {"name": "job", "arguments": {"action": "start", "command": "sleep 30; true " + LONG}},
]}
# Each long row: where it is shown, and the text it must hold whole (shown, or in its tooltip).
ROWS = {
    "project name": ("#projects button.row > span:last-child > div:first-child", "n" * 200),
    "workspace": ("#projects .sub", "w" * 150),
    "session name": ("#sessions button.row > span:last-child > div:first-child", "name" + "n" * 196),
    "session title": ("#session-title", "name" + "n" * 196),
    "model id": ("#session-meta", LONG_MODEL),
    "tool name": ("#timeline .tool .name", "tool" + LONG),
    "changed path": ("#changes .sub", LONG_PATH),
    "todo": ("#todos .t", "todo" + LONG),
    "job command": ("#jobs li.card .sub", "true " + LONG),
    "event line": ("#activity li", "tool" + LONG),
}
# Per row: its widest element's right edge, and whether it is cut (its text wider or taller than
# its box) without its whole text in its tooltip (its own or a box's around it).
ROW_BOXES = """
const out = {};
for (const [what, [sel, want]] of Object.entries(arguments[0])) {
  const ns = [...document.querySelectorAll(sel)].filter((n) => n.getClientRects().length && n.textContent.includes(want));
  const titled = (n) => { for (let t = n; t; t = t.parentElement) if ((t.title || '').includes(want)) return true; return false; };
  out[what] = {shown: ns.length, right: Math.max(...ns.map((n) => n.getBoundingClientRect().right)),
               cutUntitled: ns.filter((n) => (n.scrollWidth > n.clientWidth + 1 || n.scrollHeight > n.clientHeight + 1) && !titled(n)).length};
}
const box = (s) => document.querySelector(s).getBoundingClientRect();
out.page = {wider: document.documentElement.scrollWidth - innerWidth, taller: document.documentElement.scrollHeight - innerHeight,
            timeline: box('#timeline').height, aside: box('aside').height, vw: innerWidth, vh: innerHeight};
return out;
"""
HEAD_LINES = """return ['session-title', 'session-meta'].map((id) => { const n = document.getElementById(id);
    return {id, text: n.textContent, title: n.title, tab: n.tabIndex, focused: document.activeElement === n,
            lines: n.getBoundingClientRect().height / parseFloat(getComputedStyle(n).lineHeight),
            cut: n.scrollWidth > n.clientWidth + 1}; });"""


def test_dashboard_keeps_long_rows_and_the_timeline_in_view_on_a_touch_screen(
        make_daemon: Callable[[dict[str, Any]], Daemon], tmp_path: Path) -> None:
    """On a touch screen (44 px targets) with rows of a few hundred characters without a space:
    at each size every row either wraps inside the screen or is cut with its whole text in its
    tooltip, and the page never scrolls sideways; above 900 px the page does not scroll down
    either, and the timeline keeps at least the height the side panel may take (38 % of the
    screen). The navigation's rows were cut with only the id in their tooltip (the name and the
    workspace nowhere whole); a long name and model id in the session's head wrapped to six lines
    (they are a line each now, cut, whole in the tooltip and when focused), and with the touch
    screen's taller header and message box the middle layout left the timeline 32 px at 1024×600
    (130 px with short names)."""
    config = with_turns(LONG_TURN)
    config["providers"][0]["models"].append({"id": LONG_MODEL})
    d = make_daemon(config)
    strong = d.pair("dash-touch-long-rows", strong=True)
    workspace = tmp_path / ("w" * 150)
    workspace.mkdir()
    driver = start_chromium(tmp_path)
    try:
        at_size(driver, 1400, 900)
        driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
        driver.get(d.base + "/")
        assert driver.execute_script("return matchMedia('(pointer: coarse)').matches")
        connect(driver, strong)
        wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
        one(driver, "#project-name").send_keys("n" * 200)
        one(driver, "#project-workspace").send_keys(str(workspace))
        click(driver, "#new-project button")
        wait_for(lambda: by_css(driver, "#projects button.selected"), "the new project")
        one(driver, "#session-model").send_keys("faux/" + LONG_MODEL)
        click(driver, "#new-session button")
        sid = wait_for(lambda: driver.execute_script(
            "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId"), "the session")
        assert d.request("PATCH", f"/sessions/{sid}", {"name": ROWS["session name"][1]}, token=strong)[0] == 200
        # (the message box is offered once the new session's view is read)
        wait_for(lambda: one(driver, "#input").is_displayed(), "the message box")
        submit(driver, "long rows")
        wait_for(lambda: by_css(driver, "#changes li.card") and by_css(driver, "#jobs li.card") and by_css(driver, "#todos .t"),
                 "the changed file, the job and the todo")
        wait_for(lambda: ROWS["session name"][1] in " ".join(texts(driver, "#sessions button.row")), "the session's name in the list")
        for width, height in SIZES[:2] + ((1024, 600),) + SIZES[2:]:
            at_size(driver, width, height)
            list_shown(driver, width)
            got = driver.execute_script(ROW_BOXES, ROWS)
            page = got.pop("page")
            assert page["wider"] <= 0, (width, page)
            for what, row in got.items():
                assert row["shown"] >= 1 and row["right"] <= width + 0.5, (width, what, row)
                assert row["cutUntitled"] == 0, (width, what, row)
            if width > 900:
                assert page["taller"] <= 0 and page["timeline"] >= 0.38 * height - 0.5, (width, height, page)
            # the session's name and model line: a line each, cut, a Tab stop with the whole text in its tooltip
            for n in driver.execute_script(HEAD_LINES):
                assert n["lines"] < 1.5 and n["cut"] and n["tab"] == 0 and n["title"] == n["text"], (width, n)
        # focused (a tap or the keyboard), the name shows whole
        click(driver, "#session-title")
        name = driver.execute_script(HEAD_LINES)[0]
        assert name["focused"] and name["lines"] > 1.5 and not name["cut"], name
        assert console_errors(driver) == []
    finally:
        driver.quit()
