"""The dashboard (F-API-6) used without a mouse, and what assistive technology reads of it.

One real daemon (``lens serve --port 0``, the faux provider, a real executor, a log in a temporary
directory) and one headless Chromium, set up as in ``test_dashboard_browser.py`` (its helpers).
The reader connects, makes a project and a session, sends, queues, withdraws and aborts by the
keyboard (Tab, Shift+Tab, Enter, Ctrl+Enter); the checks are the ones a person on a keyboard or
a screen reader depends on: the focus stays on the control they were on when the page redraws
what holds it, live regions announce each new answer once and the status, icons have a text
alternative, and text is readable against its background. Every wait is for a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    HOLD_ANSWERS, MANY, ONE_QUESTION, Daemon, body_data, browser, by_css, click, committed_answers, connect, console_errors, make_daemon,
    jobs_turn, one, open_new_session, open_session, reopen_read_only, shown_default, submit, texts, wait_for,
    with_turns)

TODOS = {"items": [{"id": "1", "text": "first", "status": "done"},
                   {"id": "2", "text": "second", "status": "in_progress"}]}

# What a screen reader is told: nodes added (and text changed) inside a live region whose nearest
# aria-live is not "off" (role=status and role=alert are live too).
WATCH_ANNOUNCEMENTS = """
window.announced = []; window.announcedBy = [];
const live = (n) => {
  const e = n.nodeType === 1 ? n : n.parentElement;
  const r = e && e.closest('[aria-live], [role=status], [role=alert], [role=log]');
  return r && r.getAttribute('aria-live') !== 'off' ? r : null;
};
new MutationObserver((records) => {
  for (const m of records) {
    const said = (r, text) => { window.announced.push(text); window.announcedBy.push(r.id); };
    if (m.type === 'characterData') { const r = live(m.target); if (r) said(r, m.target.textContent); continue; }
    for (const n of m.addedNodes) { const r = live(n); if (r) said(r, n.textContent); }
  }
}).observe(document.body, {childList: true, subtree: true, characterData: true});
"""
# (what WATCH_ANNOUNCEMENTS has recorded is forgotten: what is announced from here on is checked)
FORGET_ANNOUNCED = "window.announced = []; window.announcedBy = [];"


def announced_but_the_status(driver: Any) -> list[str]:
    """What the page announced (WATCH_ANNOUNCEMENTS), leaving out the session's status pill: it
    says the session's status again when it is read again, and "unknown while reconnecting" when
    the live stream is resumed (three heartbeats of silence, on a loaded machine too)."""
    return driver.execute_script("""return window.announced.filter((a, i) => window.announcedBy[i] !== 'session-status')""")


# Whether the page holds every event of the view it shows (its stream has caught up with the last
# read: the answer's deltas, which come before it, too) and no answer is streaming into it.
CAUGHT_UP = """const m = /seq (\\d+)$/.exec(document.getElementById('session-meta').textContent);
    return !!m && Number(document.body.dataset.lastEventId) >= Number(m[1])
        && !document.querySelector('#timeline .msg.streaming')"""

# WCAG's contrast ratio of each visible element's own text against the first opaque background
# behind it; the ones under 4.5:1 (disabled controls are exempt).
LOW_CONTRAST = """
const lum = (c) => { const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map(Number).map((v) => {
  v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const opaque = (c) => { const m = c.match(/[\\d.]+/g); return m.length < 4 || Number(m[3]) > 0; };
const behind = (n) => { for (; n; n = n.parentElement) { const c = getComputedStyle(n).backgroundColor;
  if (opaque(c)) return c; } return 'rgb(255, 255, 255)'; };
const low = [];
for (const n of document.querySelectorAll('body *')) {
  if (!n.getClientRects().length || n.disabled || n.closest(':disabled')) continue;
  if (![...n.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim())) continue;
  const fg = getComputedStyle(n).color, bg = behind(n), a = lum(fg), b = lum(bg);
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < 4.5) low.push(`${n.tagName.toLowerCase()}.${n.className} "${n.textContent.trim().slice(0, 20)}" ${fg} on ${bg}: ${ratio.toFixed(2)}`);
}
return low;
"""


def keys(driver: Any, *sequence: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(driver).send_keys(*sequence).perform()


def chord(driver: Any, modifier: str, key: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(driver).key_down(modifier).send_keys(key).key_up(modifier).perform()


def focused(driver: Any) -> dict[str, Any]:
    return driver.execute_script("""const a = document.activeElement, s = getComputedStyle(a);
        const row = a.closest('[data-session-id], [data-request-id], [data-job-id], [data-call-id]');
        return {tag: a.tagName.toLowerCase(), id: a.id, text: a.textContent.trim(), outline: s.outlineStyle,
                row: row ? (row.dataset.sessionId || row.dataset.requestId || row.dataset.jobId || row.dataset.callId) : null}""")


def tab_to(driver: Any, want: Callable[[dict[str, Any]], bool], shift: bool = False, limit: int = 40) -> list[dict[str, Any]]:
    """Press Tab (or Shift+Tab) until the focused element is the one wanted; what was focused on the way."""
    from selenium.webdriver.common.keys import Keys
    seen: list[dict[str, Any]] = []
    for _ in range(limit):
        chord(driver, Keys.SHIFT, Keys.TAB) if shift else keys(driver, Keys.TAB)
        seen.append(focused(driver))
        if want(seen[-1]):
            return seen
    raise AssertionError(f"not reached by {'Shift+' if shift else ''}Tab in {limit} presses: {seen}")


def test_dashboard_by_keyboard_keeps_the_focus_announces_once_and_is_readable(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns(
        {"when": "make todos", "toolCalls": [{"name": "todo", "arguments": TODOS}]},
        jobs_turn("printf 'job says hello\\n'; sleep 600")))
    strong = d.pair("dash-keyboard", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    driver.get(d.base + "/")
    driver.execute_script(WATCH_ANNOUNCEMENTS)
    assert driver.execute_script("""return [document.documentElement.lang, document.querySelectorAll('h1').length,
        document.querySelectorAll('main').length, document.querySelectorAll('nav').length]""") == ["en", 1, 1, 1]

    # Connect, make a project and a session with the keyboard alone; the focus ring shows.
    tab_to(driver, lambda f: f["id"] == "cred")
    keys(driver, strong, Keys.ENTER)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    assert [f["id"] for f in tab_to(driver, lambda f: f["id"] == "project-name")][-2:] == ["refresh", "project-name"]
    assert focused(driver)["outline"] != "none"
    keys(driver, "Keyboard project", Keys.TAB, str(workspace), Keys.ENTER)
    wait_for(lambda: by_css(driver, "#projects button.selected"), "the new project")
    tab_to(driver, lambda f: f["text"] == "New session")
    keys(driver, Keys.ENTER)
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    sid = driver.execute_script("return document.querySelector('#sessions button.selected').dataset.sessionId")

    # Every form control has an accessible name (a label, aria-label, aria-labelledby or title).
    unnamed = driver.execute_script("""return [...document.querySelectorAll('input, select, textarea, button')]
        .filter((n) => !(n.getAttribute('aria-label') || n.getAttribute('aria-labelledby') || (n.labels && n.labels.length)
                         || n.title || (n.tagName === 'BUTTON' && n.textContent.trim()))).map((n) => n.outerHTML)""")
    assert unnamed == []

    # Ctrl+Enter sends from the box; the answer is announced once.
    tab_to(driver, lambda f: f["id"] == "input")
    keys(driver, "hello")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: "(faux) You said: hello" in committed_answers(driver), "the answer")
    # Sent with the Send button by the keyboard: the focus stays on it (it was lost to <body> when
    # the button was disabled while the send was on its way).
    keys(driver, "make todos", Keys.TAB, Keys.TAB)
    assert focused(driver)["id"] == "send"
    keys(driver, Keys.ENTER)
    wait_for(lambda: texts(driver, "#todos .t") == ["first", "second"], "the todos")
    wait_for(lambda: len(committed_answers(driver)) == 2 and body_data(driver, "sessionStatus") == "idle", "the run's end")
    assert focused(driver)["id"] == "send"
    # The todos' status marks are icons with a text alternative.
    assert driver.execute_script("""return [...document.querySelectorAll('#todos li > span:first-child')]
        .map((n) => [n.textContent, n.getAttribute('role'), n.getAttribute('aria-label')])""") == [
        ["●", "img", "done"], ["◐", "img", "in_progress"]]

    # Buttons disabled while their request is on its way give the focus back: Snip (its card is
    # redrawn with Include, which gets it), Compact now, Set as default.
    call = driver.execute_script("return document.querySelector('#timeline .tool').dataset.callId")
    tab_to(driver, lambda f: f["row"] == call and f["text"] == "Snip", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-edit") == ["Include"], "the Include button")
    assert (focused(driver)["row"], focused(driver)["text"]) == (call, "Include")
    tab_to(driver, lambda f: f["id"] == "compact")
    keys(driver, Keys.ENTER)
    wait_for(lambda: texts(driver, "#context dd[data-key='compactions']") == ["1"], "the compaction")
    wait_for(lambda: focused(driver)["id"] == "compact", "the focus back on Compact now")
    tab_to(driver, lambda f: f["id"] == "model-set", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: (shown_default(driver) or [None, None])[1] == "saved", "the saved default")
    wait_for(lambda: focused(driver)["id"] == "model-set", "the focus back on Set as default")

    # A job's output opened by the keyboard: its card is redrawn with it, and the focus stays on
    # the card's button (now "Hide output").
    tab_to(driver, lambda f: f["id"] == "input")
    keys(driver, "start a job")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    job = wait_for(lambda: driver.execute_script("const li = document.querySelector('#jobs li[data-job-id]');"
                                                 "return li && li.textContent.includes('running') && li.dataset.jobId"), "the job")
    wait_for(lambda: sum(a.startswith("The tool answered:") for a in committed_answers(driver)) == 2
             and body_data(driver, "sessionStatus") == "idle", "the job's run's end")
    tab_to(driver, lambda f: f["row"] == job and f["text"] == "Output", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: "job says hello" in " ".join(texts(driver, "#jobs .job-out pre")), "the job's output")
    assert (focused(driver)["row"], focused(driver)["text"]) == (job, "Hide output")
    keys(driver, Keys.ENTER)
    wait_for(lambda: not by_css(driver, "#jobs .job-out"), "the job's output hidden")
    assert (focused(driver)["row"], focused(driver)["text"]) == (job, "Output")

    # A run that streams, and an input queued meanwhile; the queue's Withdraw reached by Shift+Tab.
    tab_to(driver, lambda f: f["id"] == "input", shift=True)
    keys(driver, "stream slowly please")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: any("(faux) Streaming the first half" in t for t in texts(driver, "#timeline .msg.streaming .text")),
             "the streaming answer")
    keys(driver, "queued one")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    first = wait_for(lambda: driver.execute_script("const li = document.querySelector('#queue li[data-request-id]');"
                                                   "return li && li.dataset.requestId"), "the queued input")
    tab_to(driver, lambda f: f["row"] == first and f["text"] == "Withdraw", shift=True)
    assert focused(driver)["outline"] != "none"
    # Another client queues an input: the queue is redrawn, and the focus stays on that Withdraw.
    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "other", "content": "queued two"},
                     token=strong)[0] == 202
    wait_for(lambda: len(by_css(driver, "#queue li[data-request-id]")) == 2, "the second queued input")
    assert (focused(driver)["row"], focused(driver)["text"]) == (first, "Withdraw")
    keys(driver, Keys.ENTER)
    wait_for(lambda: len(by_css(driver, "#queue li[data-request-id]")) == 1, "the input withdrawn")

    # The session is renamed elsewhere: the list is redrawn, and a focused row keeps the focus.
    tab_to(driver, lambda f: f["row"] == sid and f["tag"] == "button", shift=True)
    assert d.request("PATCH", f"/sessions/{sid}", {"name": "Renamed"}, token=strong)[0] == 200
    wait_for(lambda: "Renamed" in " ".join(texts(driver, "#sessions button")), "the renamed row")
    assert focused(driver)["row"] == sid

    # Text is readable against its background: the page as it is (a run going, todos, a tool call,
    # a queued input), and a pill of each status colour.
    driver.execute_script("""for (const c of ['ok', 'warn', 'bad', 'muted'])
        document.getElementById('session-head').append(Object.assign(document.createElement('span'),
            {className: 'pill contrast-probe ' + c, textContent: c}));""")
    assert driver.execute_script(LOW_CONTRAST) == []
    driver.execute_script("document.querySelectorAll('.contrast-probe').forEach((n) => n.remove())")

    # Abort by the keyboard; the status is announced (a live region), with its words.
    tab_to(driver, lambda f: f["id"] == "abort", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run aborted")
    announced: list[str] = driver.execute_script("return window.announced")
    assert sum("(faux) You said: hello" in a for a in announced) == 1, announced
    # The streaming answer was never announced as it streamed; the text the abort kept is, once,
    # as the committed message it now is, saying that it was aborted.
    assert [a for a in announced if "Streaming the first half" in a] == [
        "assistant · aborted(faux) Streaming the first half… "], announced
    assert "running" in announced and "idle" in announced, announced
    assert console_errors(driver) == []


def queued(driver: Any) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#queue li[data-request-id]')].map((li) => li.dataset.requestId)")


def test_dashboard_moves_the_focus_on_when_the_control_pressed_by_the_keyboard_goes_away(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Controls that are gone, hidden or left disabled after their request (an error dismissed, the
    saved default cleared, a question answered, an input withdrawn, the run aborted, a job stopped,
    the credential forgotten) dropped the focus to <body>, and the next Tab started from the top of
    the page. The focus now goes on to the next control of the same kind, else to a sensible place
    (the message box, the model choice, the credential field); a job's card says why it stopped, and
    the Changes panel says which edit calls changed a file (both were tooltips only)."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns(
        ONE_QUESTION,
        jobs_turn("printf 'job says hello\\n'; sleep 600"),
        {"when": "make a file", "toolCalls": [{"name": "edit_file", "arguments": {"path": "a.txt", "mode": "create", "content": "one\n"}}]},
        {"when": "make another", "toolCalls": [{"name": "edit_file", "arguments": {"path": "b.txt", "mode": "create", "content": "two\n"}}]}))
    strong = d.pair("dash-focus", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    driver.get(d.base + "/")
    tab_to(driver, lambda f: f["id"] == "cred")
    keys(driver, strong, Keys.ENTER)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")

    # Two errors (two refused projects); Dismiss on the last gives the focus to the one before it,
    # and the last Dismiss to what a Tab would reach next (the navigation's first control).
    tab_to(driver, lambda f: f["id"] == "project-name")
    keys(driver, "Focus project", Keys.TAB, "relative/one", Keys.ENTER)
    wait_for(lambda: len(by_css(driver, "#errors li")) == 1, "the first error")
    chord(driver, Keys.CONTROL, "a")
    keys(driver, str(workspace / "missing"), Keys.ENTER)
    wait_for(lambda: len(by_css(driver, "#errors li")) == 2, "the second error")
    tab_to(driver, lambda f: f["text"] == "Dismiss", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: len(by_css(driver, "#errors li")) == 1, "an error dismissed")
    assert focused(driver)["text"] == "Dismiss"
    keys(driver, Keys.ENTER)
    wait_for(lambda: not by_css(driver, "#errors li"), "both errors dismissed")
    assert focused(driver)["id"] == "refresh"

    tab_to(driver, lambda f: f["id"] == "project-workspace")
    chord(driver, Keys.CONTROL, "a")
    keys(driver, str(workspace), Keys.ENTER)
    wait_for(lambda: by_css(driver, "#projects button.selected"), "the new project")
    tab_to(driver, lambda f: f["text"] == "New session")
    keys(driver, Keys.ENTER)
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    sid = driver.execute_script("return document.querySelector('#sessions button.selected').dataset.sessionId")

    # Clear saved default stays disabled once nothing is saved: the model choice gets the focus.
    tab_to(driver, lambda f: f["id"] == "model-set")
    keys(driver, Keys.ENTER)
    wait_for(lambda: (shown_default(driver) or [None, None])[1] == "saved", "the saved default")
    wait_for(lambda: focused(driver)["id"] == "model-set", "the focus back on Set as default")
    tab_to(driver, lambda f: f["id"] == "model-clear")
    keys(driver, Keys.ENTER)
    wait_for(lambda: (shown_default(driver) or [None, None])[1] not in (None, "saved"), "the saved default cleared")
    wait_for(lambda: not one(driver, "#model-clear").is_enabled(), "Clear saved default disabled")
    assert focused(driver)["id"] == "model-choice"

    # A question answered by the keyboard: once it is gone, the focus is in the message box.
    tab_to(driver, lambda f: f["id"] == "input")
    keys(driver, "ask one question")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: by_css(driver, "#timeline .question button[data-option-id='red']"), "the question")
    tab_to(driver, lambda f: f["text"] == "Red", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the answered question")
    wait_for(lambda: focused(driver)["id"] == "input", "the focus in the message box")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the question's run's end")

    # Withdraw on a queued input: the next one's Withdraw has the focus; Steer (the row stays, its
    # Steer goes): that row's Withdraw; the last one withdrawn: the message box, its text back in it.
    keys(driver, "stream slowly please")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: by_css(driver, "#timeline .msg.streaming"), "the streaming answer")
    keys(driver, "queued one")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: len(queued(driver)) == 1, "the first queued input")
    keys(driver, "queued two")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    first, second = wait_for(lambda: len(queued(driver)) == 2 and queued(driver), "both queued inputs")
    tab_to(driver, lambda f: f["row"] == first and f["text"] == "Withdraw", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: queued(driver) == [second], "the first input withdrawn")
    assert (focused(driver)["row"], focused(driver)["text"]) == (second, "Withdraw")
    keys(driver, Keys.TAB)
    assert (focused(driver)["row"], focused(driver)["text"]) == (second, "Steer")
    keys(driver, Keys.ENTER)
    wait_for(lambda: texts(driver, "#queue li[data-request-id] .pill") == ["steer"], "the input to steer")
    assert (focused(driver)["row"], focused(driver)["text"]) == (second, "Withdraw")
    keys(driver, Keys.ENTER)
    wait_for(lambda: queued(driver) == [], "the second input withdrawn")
    wait_for(lambda: focused(driver)["id"] == "input", "the focus in the message box")
    # (the first one's text is in the box; the second's was not put back over it)
    assert one(driver, "#input").get_attribute("value") == "queued one"
    chord(driver, Keys.CONTROL, "a")
    keys(driver, Keys.DELETE)

    # Abort is hidden once the run is over: the message box has the focus.
    tab_to(driver, lambda f: f["id"] == "abort", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run aborted")
    wait_for(lambda: focused(driver)["id"] == "input", "the focus in the message box")

    # A job's Stop goes with the job: the focus stays in its card; the card says why it stopped.
    one(driver, "#when-busy").send_keys("follow")   # (put back as "steer" with the withdrawn input)
    tab_to(driver, lambda f: f["id"] == "input")
    keys(driver, "start a job")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    job = wait_for(lambda: driver.execute_script("const li = document.querySelector('#jobs li[data-job-id]');"
                                                 "return li && li.textContent.includes('running') && li.dataset.jobId"), "the job")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the job's run's end")
    tab_to(driver, lambda f: f["row"] == job and f["text"] == "Stop", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: texts(driver, f"#jobs li[data-job-id='{job}'] .reason") == ["stopped by request"], "the reason shown")
    assert "stopped" in texts(driver, f"#jobs li[data-job-id='{job}'] .pill")[0]
    assert (focused(driver)["row"], focused(driver)["text"]) == (job, "Output")

    # The edit calls that changed a file: a section of its card, opened by the keyboard, kept open
    # (and the focus on it) when the panel is redrawn for another file.
    tab_to(driver, lambda f: f["id"] == "input")
    keys(driver, "make a file")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: texts(driver, "#changes li.card > .sub") == ["a.txt"], "the changed file")
    tab_to(driver, lambda f: f["text"] == "1 edit call", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: texts(driver, "#changes details[open] .edits li") != [], "the edit calls shown")
    [line] = texts(driver, "#changes details[open] .edits li")
    assert line.startswith("edit_file ") and line.endswith(" (main)"), line
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the edit's run's end")
    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "another", "content": "make another"},
                     token=strong)[0] == 202
    wait_for(lambda: sorted(texts(driver, "#changes li.card > .sub")) == ["a.txt", "b.txt"], "the second changed file")
    assert texts(driver, "#changes details[open] .edits li") == [line]
    assert focused(driver)["text"] == "1 edit call"
    assert driver.execute_script("return document.activeElement.closest('#changes li.card').dataset.path") == "a.txt"
    assert not driver.execute_script("return [...document.querySelectorAll('#changes li, #jobs li')].filter((n) => n.title"
                                     " && n.title.includes('stopped')).length")

    # Forget credential goes with the credential: the field to paste one has the focus.
    # (back across the timeline: 18 presses, its messages one stop among them, each tool card one)
    tab_to(driver, lambda f: f["id"] == "disconnect", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    assert focused(driver)["id"] == "cred"
    assert console_errors(driver) == []


def answered_after_many_tool_calls(driver: Any, make_daemon: Callable[[dict[str, Any]], Daemon], tmp_path: Path,
                                   calls: int, client: str, timeout: float) -> None:
    """A new session in the page, its input "many tools" answered after ``calls`` tool calls
    (waited for at most ``timeout`` seconds) and the page's stream caught up with it; the page
    records what it announces in ``window.announced``.

    The view read at a frame can be ahead of the stream: it already says idle with the answer
    while the answer's events are still on their way (their deltas draw no bubble then: see
    ``test_dashboard_stream_behind_view.py``); the checks that follow count what the page shows
    once it holds them all."""
    d = make_daemon(with_turns({"when": "many tools", "toolCalls": [{"name": "get_system_time", "arguments": {}}] * calls}))
    open_session(driver, d, tmp_path, client)
    driver.execute_script(WATCH_ANNOUNCEMENTS)
    submit(driver, "many tools")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and any(
        a.startswith("The tool answered") for a in committed_answers(driver)), "the answer after the tool calls", timeout)
    wait_for(lambda: driver.execute_script(CAUGHT_UP), "the stream caught up with the answer", timeout)


def test_dashboard_shows_earlier_items_without_announcing_each(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """"Show earlier" put up to 200 items in the timeline, a live region: a screen reader would read
    them all. Only "N earlier items shown" is announced now, once; the button is gone, and a
    keyboard user's focus goes to the earliest item shown, not to <body>, and nothing scrolls."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    answered_after_many_tool_calls(driver, make_daemon, tmp_path, MANY, "dash-earlier", 30)
    shown = len(by_css(driver, "#timeline > .tool, #timeline > .msg"))
    hidden = MANY + 2 - shown
    [more] = texts(driver, "#timeline button.more")   # (one read: the timeline is drawn again as view reads come back)
    assert more.startswith(f"Show {hidden} earlier"), more
    driver.execute_script(FORGET_ANNOUNCED + "document.querySelector('#timeline button.more').focus()")
    before = driver.execute_script("const t = document.getElementById('timeline'); return t.scrollHeight - t.scrollTop")
    keys(driver, Keys.ENTER)
    wait_for(lambda: len(by_css(driver, "#timeline .tool")) == MANY, "every tool call", 30)
    # (the session's status pill may say "idle" again, or that it is unknown while the stream is
    # resumed: that is not one of the items; what is checked is that the items are not announced
    # each, and their count once)
    announced = announced_but_the_status(driver)
    assert announced == [f"{hidden} earlier items shown"], announced
    assert driver.execute_script("""const a = document.activeElement;
        return a.matches('#timeline > .msg.user') && a.textContent.includes('many tools')""")
    assert driver.execute_script("const t = document.getElementById('timeline'); return t.scrollHeight - t.scrollTop") == before
    assert console_errors(driver) == []


# Whether the focused element can hold the focus (not <body>, connected, enabled, shown), and where it is.
HOLDER = """const a = document.activeElement;
    const can = a && a !== document.body && a.isConnected && !a.disabled && a.getClientRects().length > 0;
    return can ? (a.id || a.className) : null"""


def test_dashboard_announces_its_notes_names_its_pills_and_keeps_the_focus_while_an_answer_is_on_its_way(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The notes under the message box ("Sent", "Withdrawn: …", "Not answered: …") were not a live
    region; the client pill said only its id (its meaning was a tooltip); why the connection is
    being retried or the stream ended was only the connection pill's tooltip; and from a
    question's answer until the question left the timeline the focus was on <body>. The notes are
    a polite status now, the pills' facts are text, and the question holds the focus meanwhile."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns(ONE_QUESTION))
    strong, sid = open_session(driver, d, tmp_path, "dash-notes")

    # The client pill says what it is to a screen reader; it shows the id.
    assert driver.execute_script("""return [...document.getElementById('client').childNodes]
        .filter((n) => !n.classList.contains('visually-hidden')).map((n) => n.textContent)""") == ["dash-notes"]
    assert driver.execute_script("return document.getElementById('client').textContent") == "paired client dash-notes"

    # A question answered by the keyboard while the answer is on its way: the question holds the
    # focus (its controls are disabled); another client aborts the run meanwhile, so the answer
    # is refused; the note saying so is announced, and the focus goes on to the message box.
    driver.execute_script(WATCH_ANNOUNCEMENTS)
    tab_to(driver, lambda f: f["id"] == "input")
    keys(driver, "ask one question")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: by_css(driver, "#timeline .question button[data-option-id='red']"), "the question")
    assert any(a.startswith("Sent (seq ") for a in driver.execute_script("return window.announced"))
    driver.execute_script(HOLD_ANSWERS)
    tab_to(driver, lambda f: f["text"] == "Red", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: driver.execute_script("return window.answerRequests") == 1, "the answer asked")
    assert driver.execute_script(HOLDER) == "question", driver.execute_script("return document.activeElement.outerHTML")
    assert d.request("POST", f"/sessions/{sid}/abort", {}, token=strong)[0] == 200
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the question cancelled elsewhere")
    wait_for(lambda: focused(driver)["id"] == "input", "the focus in the message box")
    driver.execute_script("window.releaseAnswers()")
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Not answered: that question was already settled"),
             "the note")
    assert any(a.startswith("Not answered: that question was already settled")
               for a in driver.execute_script("return window.announced"))
    assert focused(driver)["id"] == "input"
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the question's run's end")

    # Asked again, answered by the keyboard, and the daemon goes away before the answer reaches it:
    # the answer fails, and the focus is back on the option pressed, to answer again. Why the page
    # is retrying is text beside the connection pill, not only its tooltip; once live, it is gone.
    keys(driver, "ask one question")
    chord(driver, Keys.CONTROL, Keys.ENTER)
    wait_for(lambda: by_css(driver, "#timeline .question button[data-option-id='red']"), "the question again")
    driver.execute_script(HOLD_ANSWERS)
    tab_to(driver, lambda f: f["text"] == "Red", shift=True)
    keys(driver, Keys.ENTER)
    wait_for(lambda: driver.execute_script("return window.answerRequests") == 1, "the answer asked again")
    assert driver.execute_script(HOLDER) == "question"
    d.stop()
    driver.execute_script("window.releaseAnswers()")
    wait_for(lambda: by_css(driver, "#errors li"), "the answer failed")
    wait_for(lambda: focused(driver)["text"] == "Red" and driver.execute_script(HOLDER), "the focus back on the option")
    wait_for(lambda: (one(driver, "#conn").get_attribute("title") or "").startswith("the last attempt failed: "), "a retry")
    why = driver.execute_script("return document.getElementById('conn-why').textContent")
    assert why == one(driver, "#conn").get_attribute("title"), why
    d.start()
    wait_for(lambda: body_data(driver, "conn") == "live", "live again", 20)
    assert driver.execute_script("return document.getElementById('conn-why').textContent") == ""
    assert console_errors(driver) == []


# A redraw of the Default model panel: its choice's options are rebuilt with its note, so an option
# marked before is gone once the panel was drawn again.
MARK_MODEL_PANEL = "document.querySelectorAll('#model-choice option').forEach((o) => { o.dataset.old = '1'; })"
MODEL_PANEL_REDRAWN = "return !!document.querySelector('#model-choice option:not([data-old])')"
RETRY_REASON = """const why = document.getElementById('conn-why'), r = why.getBoundingClientRect(),
    h = document.querySelector('header').getBoundingClientRect();
    return {text: why.textContent, width: r.width, height: r.height,
            inHeader: r.left >= h.left && r.right <= h.right && r.top >= h.top && r.bottom <= h.bottom}"""


def redraw_model_panel(driver: Any) -> None:
    """Press the lists' ↻ (it reads the models again, and the panel is drawn again) and wait for the redraw."""
    driver.execute_script(MARK_MODEL_PANEL)
    one(driver, "#refresh").click()
    wait_for(lambda: driver.execute_script(MODEL_PANEL_REDRAWN), "the Default model panel redrawn")


def selected_text(driver: Any, selector: str) -> str:
    """Select the text of what matches, as a reader's click on it does (`user-select: all`), and return the selection."""
    return driver.execute_script("""const n = document.querySelector(arguments[0]), r = document.createRange();
        r.selectNodeContents(n); const s = window.getSelection(); s.removeAllRanges(); s.addRange(r);
        return s.toString()""", selector)


def test_dashboard_announces_its_notes_once_tells_a_lost_answer_shows_why_it_retries_and_the_ids(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The Default model panel's note and the deleted session's note were not live regions (they
    are written again at each redraw, with the same text); an answer that lost to another client's
    (200, `duplicate: true`) was not told; why the page retries was text for a screen reader only;
    a session's and a project's id were only in their rows' tooltips. The notes are announced once
    each, however often they are redrawn; the lost answer's note names the answer that won; the
    reason shows beside the connection pill while the page retries; the ids show, to be copied."""
    driver = browser
    d = make_daemon(with_turns(ONE_QUESTION))
    readonly = d.pair("dash-live-read", strong=False)
    strong = d.pair("dash-live-strong", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    # A read-only reader: the model panel's note says why nothing can be changed, once, however
    # often the panel is drawn again.
    driver.get(d.base + "/")
    driver.execute_script(WATCH_ANNOUNCEMENTS)
    connect(driver, readonly)
    wait_for(lambda: body_data(driver, "trust") == "read", "read-only trust")
    read_only_note = "Read-only credential: changing the default needs strong trust."
    wait_for(lambda: one(driver, "#model-note").text == read_only_note, "the model panel's note")
    redraw_model_panel(driver)
    redraw_model_panel(driver)
    assert one(driver, "#model-note").get_attribute("role") == "status"
    assert driver.execute_script("return window.announced").count(read_only_note) == 1, driver.execute_script(
        "return window.announced")

    # The session's and the project's ids show, outside their rows' buttons, to be selected and
    # copied; a redraw for a new event keeps the reader's selection.
    sid = open_new_session(driver, d, strong, workspace)
    driver.execute_script(WATCH_ANNOUNCEMENTS)
    pid = driver.execute_script("return document.querySelector('#projects button.selected').dataset.projectId")
    for selector, want in (("#project-id", pid), ("#session-id", sid)):
        node = one(driver, selector)
        assert node.is_displayed() and node.text == want, (selector, node.text)
        assert driver.execute_script("const n = document.querySelector(arguments[0]);"
                                     " return [!!n.closest('button'), getComputedStyle(n).userSelect]", selector) == [False, "all"]
    assert selected_text(driver, "#session-id") == sid
    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "elsewhere", "content": "sent elsewhere"},
                     token=strong)[0] == 202
    wait_for(lambda: "(faux) You said: sent elsewhere" in committed_answers(driver), "the answer to the other client")
    assert driver.execute_script("return window.getSelection().toString()") == sid

    # An answer that came after another client's: the note names the answer that won; it is announced.
    submit(driver, "ask one question")
    wait_for(lambda: by_css(driver, "#timeline .question button[data-option-id='red']"), "the question")
    qid = driver.execute_script("return document.querySelector('#timeline .question').dataset.questionId")
    driver.execute_script(HOLD_ANSWERS)
    one(driver, "#timeline .question button[data-option-id='red']").click()
    wait_for(lambda: driver.execute_script("return window.answerRequests") == 1, "the answer asked")
    assert d.request("POST", f"/sessions/{sid}/questions/{qid}/answer", {"kind": "answer", "optionIds": ["blue"]},
                     token=strong)[0] == 200
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the question answered elsewhere")
    driver.execute_script("window.releaseAnswers()")
    lost = "Not answered: that question was already answered with Blue (it came first)."
    wait_for(lambda: one(driver, "#composer-note").text == lost, "the lost answer's note")
    assert lost in driver.execute_script("return window.announced")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the question's run's end")

    # The session deleted elsewhere: its note is announced once, however often it is drawn again.
    assert d.request("DELETE", f"/sessions/{sid}", token=strong)[0] == 200
    wait_for(lambda: body_data(driver, "sessionStatus") == "deleted", "the session shown deleted")
    deleted_note = wait_for(lambda: one(driver, "#closed-note").text, "the deleted session's note")
    assert deleted_note.startswith("This session is deleted")
    redraw_model_panel(driver)
    redraw_model_panel(driver)
    assert driver.execute_script("return window.announced").count(deleted_note) == 1, driver.execute_script(
        "return window.announced")

    # The daemon away: why the page retries shows beside the connection pill, in the header,
    # readable; once live again it is gone.
    d.stop()
    wait_for(lambda: (one(driver, "#conn").get_attribute("title") or "").startswith("the last attempt failed: "), "a retry")
    why = driver.execute_script(RETRY_REASON)
    assert why["text"] == one(driver, "#conn").get_attribute("title"), why
    assert why["width"] > 40 and why["height"] >= 10 and why["inHeader"], why
    assert one(driver, "#conn-why").is_displayed()
    assert [low for low in driver.execute_script(LOW_CONTRAST) if "the last attempt" in low] == []
    d.start()
    wait_for(lambda: body_data(driver, "conn") == "live", "live again", 20)
    assert not one(driver, "#conn-why").is_displayed()
    assert console_errors(driver) == []


MORE_THAN_TWO_WINDOWS = 410   # tool calls in one answer: the page shows 200 items at once, and 200 more at each "Show earlier"


def test_dashboard_shows_earlier_items_in_two_steps_when_more_than_a_window_is_hidden(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """"Show earlier" with more than 200 items not shown: it shows 200 and is drawn again with the
    count left; a keyboard user's focus is on the new button, what shows does not move, and only how
    many were shown is announced. Pressed again, it shows the rest and the earliest item has the focus."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    answered_after_many_tool_calls(driver, make_daemon, tmp_path, MORE_THAN_TWO_WINDOWS, "dash-earlier-twice", 60)
    items = MORE_THAN_TWO_WINDOWS + 2
    shown = lambda: len(by_css(driver, "#timeline > .tool, #timeline > .msg"))  # noqa: E731
    scrolled = "const t = document.getElementById('timeline'); return t.scrollHeight - t.scrollTop"
    assert shown() == 200
    # (one read each: the timeline is drawn again as view reads come back)
    assert texts(driver, "#timeline button.more") == [f"Show 200 earlier ({items - 200} not shown)"]

    driver.execute_script(FORGET_ANNOUNCED + "document.querySelector('#timeline button.more').focus()")
    before = driver.execute_script(scrolled)
    keys(driver, Keys.ENTER)
    wait_for(lambda: shown() == 400, "200 earlier items", 60)
    assert texts(driver, "#timeline button.more") == [f"Show {items - 400} earlier ({items - 400} not shown)"]
    assert driver.execute_script("return document.activeElement.matches('#timeline button.more')")
    assert driver.execute_script(scrolled) == before
    assert announced_but_the_status(driver) == ["200 earlier items shown"]

    keys(driver, Keys.ENTER)
    wait_for(lambda: shown() == items, "every item", 60)
    assert not by_css(driver, "#timeline button.more")
    assert driver.execute_script("""const a = document.activeElement;
        return a.matches('#timeline > .msg.user') && a.textContent.includes('many tools')""")
    assert driver.execute_script(scrolled) == before
    assert announced_but_the_status(driver) == ["200 earlier items shown", f"{items - 400} earlier items shown"]
    assert console_errors(driver) == []


# Where the focus is, against the timeline: in it (and in which element matching the selector
# passed: a tool card; a message when none), or before it in the page.
WHERE = """const a = document.activeElement, tl = document.getElementById('timeline'), m = a.closest(arguments[0] || '.msg');
    return {in: tl.contains(a), before: !!(a.compareDocumentPosition(tl) & Node.DOCUMENT_POSITION_FOLLOWING),
            tag: a.tagName.toLowerCase(), text: a.textContent.trim(), item: m ? m.dataset.itemId : null}"""


def timeline_stops(driver: Any, within: str = ".msg") -> list[tuple[str, str, str | None]]:
    """Shift+Tab from the message box back across the timeline: the stops in it (tag, text, and
    the item id of the message — or of what ``within`` selects, e.g. a tool card — holding it)."""
    from selenium.webdriver.common.keys import Keys
    driver.execute_script("document.getElementById('input').focus()")
    stops: list[tuple[str, str, str | None]] = []
    for _ in range(60):
        chord(driver, Keys.SHIFT, Keys.TAB)
        f = driver.execute_script(WHERE, within)
        if f["before"]:
            return stops
        if f["in"]:
            stops.append((f["tag"], f["text"], f["item"]))
    raise AssertionError(f"not across the timeline in 60 presses: {stops}")


def test_dashboard_timeline_messages_are_one_tab_stop_and_the_arrows_move_between_them(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Each message's "context" disclosure was a tab stop of its own: crossing a long conversation
    by Tab cost a press per message. The messages are now one stop (a roving tabindex): the newest
    message's disclosure until the reader moves it; Up / Down go to the next and previous message's,
    Home / End to the first and last; its buttons, once open, follow it in the Tab order; the stop
    stays where the reader left it; a message redrawn under the focus (an edit made elsewhere)
    keeps it on its disclosure."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns())
    strong, sid = open_session(driver, d, tmp_path, "dash-rove")
    for n in range(1, 5):
        submit(driver, f"message {n}")
        wait_for(lambda: len(committed_answers(driver)) == n and body_data(driver, "sessionStatus") == "idle", f"answer {n}")
    messages = driver.execute_script("return [...document.querySelectorAll('#timeline .msg')].map((m) => m.dataset.itemId)")
    assert len(messages) == 8

    # Eight messages, one stop: the newest's disclosure (its buttons not made until it opens).
    assert timeline_stops(driver) == [("summary", "", messages[-1])]
    keys(driver, Keys.TAB)
    assert driver.execute_script(WHERE)["item"] == messages[-1]
    assert driver.execute_script("return document.activeElement.getAttribute('aria-describedby')") == "timeline-keys"
    assert "Up and Down arrows" in driver.execute_script("return document.getElementById('timeline-keys').textContent")

    def at() -> tuple[str, str | None]:
        f = driver.execute_script(WHERE)
        return f["tag"], f["item"]

    keys(driver, Keys.ARROW_UP)
    assert at() == ("summary", messages[-2])
    keys(driver, Keys.ARROW_DOWN, Keys.ARROW_DOWN)   # (the last stays the last)
    assert at() == ("summary", messages[-1])
    keys(driver, Keys.HOME)
    assert at() == ("summary", messages[0])
    keys(driver, Keys.END)
    assert at() == ("summary", messages[-1])
    keys(driver, Keys.HOME, Keys.ARROW_DOWN)
    assert at() == ("summary", messages[1])

    # Opened, its buttons come next in the Tab order; Hide by the keyboard: the focus on Unhide.
    keys(driver, Keys.ENTER)
    wait_for(lambda: texts(driver, f"#timeline .msg[data-item-id='{messages[1]}'] .ctx-edits button") == ["Snip", "Hide"],
             "the message's edits")
    keys(driver, Keys.TAB)
    assert (focused(driver)["text"], at()) == ("Snip", ("button", messages[1]))
    keys(driver, Keys.TAB, Keys.ENTER)
    wait_for(lambda: texts(driver, f"#timeline .msg[data-item-id='{messages[1]}'] .ctx-mark") == ["hidden"], "the hidden mark")
    wait_for(lambda: focused(driver)["text"] == "Unhide", "the focus on Unhide")
    assert at() == ("button", messages[1])

    # The stop stays on that message, its open disclosure's button with it; no other message's.
    assert timeline_stops(driver) == [("button", "Unhide", messages[1]), ("summary", "", messages[1])]
    keys(driver, Keys.TAB)
    assert at() == ("summary", messages[1])

    # Unhidden elsewhere: the message is redrawn, and the focus stays on its disclosure.
    assert d.request("POST", f"/sessions/{sid}/context/unhide", {"itemIds": [messages[1]]}, token=strong)[0] == 200
    wait_for(lambda: texts(driver, f"#timeline .msg[data-item-id='{messages[1]}'] .ctx-mark") == [], "the unhide made elsewhere")
    wait_for(lambda: texts(driver, f"#timeline .msg[data-item-id='{messages[1]}'] .ctx-edits button") == ["Snip", "Hide"],
             "Snip and Hide (kept open)")
    assert at() == ("summary", messages[1])
    keys(driver, Keys.ARROW_UP)
    assert at() == ("summary", messages[0])
    assert console_errors(driver) == []


def test_dashboard_tool_cards_are_one_tab_stop_each_and_the_arrows_move_within_a_card(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A tool call's card was four tab stops (Snip, Hide, its arguments, its result): crossing a
    conversation of many calls by Tab cost four presses a call. Each card is now one stop (a roving
    tabindex, as a toolbar's): its first control until the reader moves it; Left / Right go to the
    card's next and previous control, Home / End to its first and last; the stop stays where the
    reader left it; a card redrawn under the focus (it changed by an edit made elsewhere) keeps it on
    the same control; every control is reached and named. A read-only card is one stop too."""
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns({"when": "three tools", "toolCalls": [{"name": "get_system_time", "arguments": {}}] * 3}))
    readonly = d.pair("dash-cards-read", strong=False)
    strong, sid = open_session(driver, d, tmp_path, "dash-cards")
    submit(driver, "three tools")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and any(
        a.startswith("The tool answered") for a in committed_answers(driver))
        and texts(driver, "#timeline .tool .ctx-edit") == ["Snip"] * 3, "the answer after three tool calls")
    cards = driver.execute_script("return [...document.querySelectorAll('#timeline .tool')].map((c) => c.dataset.itemId)")
    assert len(cards) == 3

    # Three cards, three stops (each card's first control), and the messages' one.
    stops = timeline_stops(driver, ".tool")
    assert [s for s in stops if s[2]] == [("button", "Snip", c) for c in reversed(cards)], stops
    assert len(stops) == 4, stops
    keys(driver, Keys.TAB)   # (forward again: the first card's stop)
    assert driver.execute_script(WHERE, ".tool")["item"] == cards[0]
    assert driver.execute_script("return document.activeElement.getAttribute('aria-describedby')") == "tool-keys"
    assert "Left and Right arrows" in driver.execute_script("return document.getElementById('tool-keys').textContent")

    def at() -> tuple[str, str | None]:
        f = driver.execute_script(WHERE, ".tool")
        return f["text"], f["item"]

    # Every control of a card reached by the arrows, each named; the ends stay the ends.
    controls = ["Snip", "Hide", "arguments", "result"]
    seen = [at()[0]]
    for _ in controls[1:]:
        keys(driver, Keys.ARROW_RIGHT)
        seen.append(at()[0])
    assert seen == controls
    keys(driver, Keys.ARROW_RIGHT)
    assert at() == ("result", cards[0])
    keys(driver, Keys.HOME)
    assert at() == ("Snip", cards[0])
    keys(driver, Keys.ARROW_LEFT)
    assert at() == ("Snip", cards[0])
    keys(driver, Keys.END, Keys.ARROW_LEFT)
    assert at() == ("arguments", cards[0])
    assert driver.execute_script("""return [...document.querySelectorAll('#timeline .tool :is(summary, button)')]
        .filter((n) => !(n.textContent.trim() || n.getAttribute('aria-label'))).length""") == 0
    # (Enter still opens a disclosure; the arrows do not scroll or toggle it)
    keys(driver, Keys.ENTER)
    wait_for(lambda: driver.execute_script(f"return document.querySelector(\"#timeline .tool[data-item-id='{cards[0]}'] details\").open"),
             "the arguments open")

    # The stop stays where the reader left it; the other cards' stops are their first control.
    stops = timeline_stops(driver, ".tool")
    assert [s for s in stops if s[2]] == [("button", "Snip", cards[2]), ("button", "Snip", cards[1]),
                                          ("summary", "arguments", cards[0])], stops

    # A card redrawn under the focus (its result snipped elsewhere: Snip becomes Include) keeps it
    # on the same control, and its stop.
    result = driver.execute_script(f"return document.querySelector(\"#timeline .tool[data-item-id='{cards[1]}'] .ctx-edit\").dataset.itemId")
    driver.execute_script(f"document.querySelector(\"#timeline .tool[data-item-id='{cards[1]}'] .ctx-edit\").focus()")
    keys(driver, Keys.END)
    assert at() == ("result", cards[1])
    assert d.request("POST", f"/sessions/{sid}/context/snip", {"itemIds": [result]}, token=strong)[0] == 200
    wait_for(lambda: texts(driver, f"#timeline .tool[data-item-id='{cards[1]}'] .ctx-edit") == ["Include"], "Include")
    assert at() == ("result", cards[1])
    keys(driver, Keys.HOME)
    assert at() == ("Include", cards[1])
    assert d.request("POST", f"/sessions/{sid}/context/include", {"itemId": result}, token=strong)[0] == 200
    wait_for(lambda: texts(driver, f"#timeline .tool[data-item-id='{cards[1]}'] .ctx-edit") == ["Snip"], "Snip again")
    assert at() == ("Snip", cards[1])
    assert console_errors(driver) == []

    def walked() -> list[tuple[str, str | None]]:
        """Tab from the first card's stop until the focus leaves the timeline: the stops in cards."""
        started = driver.execute_script("""const n = [...document.querySelectorAll('#timeline .tool :is(summary, button)')]
            .find((c) => c.tabIndex === 0 && !c.disabled); if (n) n.focus(); return !!n""")
        assert started, "no card has a stop that takes the focus"
        stops = [at()]
        for _ in range(20):
            keys(driver, Keys.TAB)
            if not driver.execute_script(WHERE, ".tool")["in"]:
                return [s for s in stops if s[1]]
            stops.append(at())
        raise AssertionError(stops)

    # Read-only: a card's disclosures alone, one stop a card.
    reopen_read_only(driver, readonly, sid)
    wait_for(lambda: len(by_css(driver, "#timeline .tool")) == 3 and not by_css(driver, "#timeline .tool button"), "the cards, read-only")
    assert walked() == [("arguments", c) for c in cards]

    # Back with the strong credential, the session deleted: the cards' Snip and Hide are disabled;
    # each card's stop moves on to its first control that takes the focus.
    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    connect(driver, strong)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    click(driver, f"#sessions button[data-session-id='{sid}']")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-hide") == ["Hide"] * 3, "the cards, strong")
    assert d.request("DELETE", f"/sessions/{sid}", token=strong)[0] == 200
    wait_for(lambda: body_data(driver, "sessionStatus") == "deleted", "the session shown deleted")
    wait_for(lambda: not [n for n in by_css(driver, "#timeline .tool button") if n.is_enabled()], "the cards' buttons disabled")
    assert walked() == [("arguments", c) for c in cards]

