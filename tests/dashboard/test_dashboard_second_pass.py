"""The dashboard (F-API-6): a credential pasted with white space around it, refused, or answered
late; right-to-left text wherever the page shows the daemon's or the user's words; markup in file
names, a job's output and a question; a restart under thousands of events; one question answered
from two tabs; the "If busy" choice; and the requests that create a project or a session.

A real ``lens serve --port 0`` (the faux provider, a real executor, a log in a temporary
directory) and headless Chromium, set up as in ``test_dashboard_browser.py`` (its fixtures and
helpers). Every wait is for a condition, with a timeout; the windows in which nothing may happen
are observation windows, not waits for an order.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, click, console_errors, count_requests, make_daemon, network_requests, one,
    open_session, seen_then_stopped, submit, texts, wait_for, with_turns)

HEBREW = "שלום עולם! 123"


def paste_credential(driver: Any, value: str) -> None:
    """``value`` put in the credential field as a paste puts it (line breaks and all), then Connect."""
    driver.execute_script("""const f = document.getElementById('cred'); f.value = arguments[0];
        f.dispatchEvent(new Event('input', {bubbles: true}));""", value)
    click(driver, "#connect")


def connected_by_paste(driver: Any, d: Daemon, value: str, empty: bool = True) -> None:
    """The page opened afresh and ``value`` pasted into it (:func:`paste_credential`): returns once
    it is connected with strong trust, and (``empty``) once it lists no project."""
    driver.get(d.base + "/")
    paste_credential(driver, value)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    if empty:
        wait_for(lambda: by_css(driver, "#projects li.empty"), "the (empty) project list")


def test_a_credential_pasted_with_white_space_around_it_connects_and_a_wrong_one_asks_nothing_more(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any) -> None:
    """A credential copied from a terminal comes with a line break after it, often a space or a
    tab before: it connects as the credential alone. A wrong one is refused once with a message
    that says so, and nothing more is asked of the daemon (no retry, no poll) until another is
    pasted."""
    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-paste", strong=True)
    connected_by_paste(driver, d, " \t" + strong + " \r\n")
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


JSON_TURN = {"when": "read the json file", "toolCalls": [{"name": "read_file", "arguments": {"path": "he.json"}}]}


def test_a_tool_result_that_is_json_stays_left_to_right_whatever_its_first_letters(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A tool's result is laid out by its own text, line by line: a line of JSON beginning with a
    Hebrew string (`["שלום", 1]`) was laid out right to left, its brackets and numbers mirrored. A
    result that is JSON is code, as a tool's arguments are: it stays left to right; a result of
    prose keeps its own direction."""
    driver = browser
    d = make_daemon(with_turns(JSON_TURN, RTL_TURN))
    strong, sid = open_session(driver, d, tmp_path, "dash-rtl-json")
    (tmp_path / "workspace" / "he.json").write_text('["שלום", 1]\n', encoding="utf-8")
    (tmp_path / "workspace" / "he.txt").write_text(HEBREW + "\n", encoding="utf-8")
    results = "#timeline .tool[data-status='ok'] > details:nth-of-type(2) > pre"
    for said, count in (("read the json file", 1), ("read the hebrew file", 2)):
        submit(driver, said)
        wait_for(lambda: len(by_css(driver, results)) == count, "the tool's result")
        wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run's end")
    shown = driver.execute_script(DIRECTIONS, [results])[results]
    assert shown == [[False, '["שלום", 1]\n'], [True, HEBREW + "\n"]], shown
    assert console_errors(driver) == []


# Markup that would run if any of it were parsed as HTML (no "/" in it: it is also a file name).
MARKUP = '<img src=x onerror="window.injected=(window.injected||0)+1"><svg onload="window.injected=7">'
MARKUP_TURN = {"when": "markup everywhere", "toolCalls": [
    {"name": "edit_file", "arguments": {"path": MARKUP + ".txt", "mode": "create", "content": MARKUP + "\n"}},
    {"name": "read_file", "arguments": {"path": MARKUP + ".txt"}},
    {"name": "job", "arguments": {"action": "start", "command": "printf '%s\\n' '" + MARKUP + "'"}}]}
MARKUP_QUESTION = {"when": "markup question", "toolCalls": [{"name": "ask_user", "arguments": {"questions": [
    {"id": "q", "text": MARKUP, "options": [{"id": "a", "label": MARKUP}], "allow_text": False}]}}]}
MARKUP_FAILURE = {"when": "markup failure", "error": {"code": "PROVIDER_ERROR", "message": MARKUP}}
NO_MARKUP_RAN = """return {injected: window.injected ?? null,
    made: document.querySelectorAll('main img, main svg, #errors img, #errors svg').length}"""


def test_markup_in_a_file_name_a_jobs_output_a_question_and_an_error_is_shown_as_it_is(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """What the other dashboard tests feed the page as markup (inputs, tool names, arguments, answers,
    todos, names) is shown as text; this goes on to a file's name in the Changes panel and in a
    result, a background job's output, a question and its option, and a model failure's message
    in the errors list: each is shown literally and nothing of it runs."""
    driver = browser
    d = make_daemon(with_turns(MARKUP_TURN, MARKUP_QUESTION, MARKUP_FAILURE))
    strong, sid = open_session(driver, d, tmp_path, "dash-markup")
    submit(driver, "markup everywhere")
    wait_for(lambda: texts(driver, "#changes li.card .sub") == [MARKUP + ".txt"], "the file in the Changes panel", 20)
    assert (tmp_path / "workspace" / (MARKUP + ".txt")).read_text() == MARKUP + "\n"
    wait_for(lambda: by_css(driver, "#jobs li.card button.job-output"), "the job's card")

    def output_read() -> bool:
        pre = by_css(driver, "#jobs li.card .job-out pre")
        if pre and MARKUP in pre[0].text:
            return True
        more = by_css(driver, "#jobs li.card button.job-more") or ([] if pre else by_css(driver, "#jobs li.card button.job-output"))
        if more:
            more[0].click()
        return False
    wait_for(output_read, "the job's output", 20)
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run's end", 20)
    assert any(t == MARKUP + "\n" for t in texts(driver, "#timeline .tool > details:nth-of-type(2) > pre")), \
        texts(driver, "#timeline .tool > details:nth-of-type(2) > pre")

    submit(driver, "markup question")
    wait_for(lambda: texts(driver, "#timeline .question > .text") == [MARKUP], "the question")
    assert texts(driver, "#timeline .question button.option") == [MARKUP]
    click(driver, "#timeline .question button.option")
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the question answered")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run's end")

    submit(driver, "markup failure")
    wait_for(lambda: MARKUP in texts(driver, "#errors li[data-code='PROVIDER_ERROR'] .message"), "the failure's message")
    wait_for(lambda: MARKUP in " ".join(texts(driver, "#timeline .notice .text, #timeline .text")), "the timeline's notice")
    assert driver.execute_script(NO_MARKUP_RAN) == {"injected": None, "made": 0}
    assert console_errors(driver) == []


ANSWERS_WHILE_AWAY = 3000
# Counts the views of the session the page reads (GET /sessions/{id}, whatever its query).
COUNT_VIEWS = count_requests("viewReads", "/\\/api\\/v1\\/sessions\\/[^/?]+(\\?|$)/.test(url)"
                                           " && (!init || !init.method || init.method === 'GET')")


def test_a_restart_after_thousands_of_events_resumes_at_the_last_seq_seen_and_the_page_keeps_up(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The page watches a session; the daemon stops, thousands of answers are added to the
    session's log meanwhile, and the daemon starts again on the same port. The stream resumes from
    the last seq the page saw: every event after it comes once (none counted twice, the last seq
    seen is the log's last), the timeline shows the latest answers with the earlier ones offered,
    and the replay is drawn a few times, not once per event."""
    import trio

    from events.store import Draft, open_store
    from events.types import ModelResponded

    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-restart-many", strong=True)
    sid, project, seen = seen_then_stopped(driver, d, strong, tmp_path)

    async def write() -> int:
        async with open_store(d.cwd / ".lens") as store:
            res = await store.append(*(Draft(ModelResponded(text=f"answer {i}", stop_reason="end_turn"), project_id=project,
                                             session_id=sid, agent_id="main") for i in range(ANSWERS_WHILE_AWAY)))
            return res.seq
    last = trio.run(write)
    driver.execute_script(COUNT_VIEWS)
    d.start()
    wait_for(lambda: body_data(driver, "conn") == "live" and int(body_data(driver, "lastEventId") or 0) == last,
             "every event after the last one seen", 30)
    wait_for(lambda: (texts(driver, "#timeline > .msg.assistant .text") or [""])[-1] == f"answer {ANSWERS_WHILE_AWAY - 1}",
             "the latest answer in the timeline", 20)
    assert body_data(driver, "duplicates") is None
    answers = texts(driver, "#timeline > .msg.assistant .text")
    assert answers == [f"answer {i}" for i in range(ANSWERS_WHILE_AWAY - len(answers), ANSWERS_WHILE_AWAY)]
    assert len(answers) <= 200
    [more] = texts(driver, "#timeline button.more")
    assert str(ANSWERS_WHILE_AWAY - len(answers)) in more, more
    assert driver.execute_script("return window.viewReads") < 20, driver.execute_script("return window.viewReads")
    # The page is usable: a message sent now is answered and shown after them.
    submit(driver, "after the restart")
    wait_for(lambda: "(faux) You said: after the restart" in texts(driver, "#timeline > .msg.assistant .text"), "the answer")
    assert body_data(driver, "duplicates") is None
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_a_question_answered_from_two_tabs_at_once_is_answered_once_and_each_tab_says_which(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Two tabs of one browser watch the same session, a question open in both. The reader picks
    "Red" in the first tab and "Blue" in the second while the first answer is still on its way:
    the daemon takes the one that arrives first (Blue), once. The second tab's question goes as
    answered; the first says its answer was not taken and which one was, with no error; both then
    show the same session, the run going on after the answer."""
    from tests.dashboard.test_dashboard_browser import HOLD_ANSWERS, ask_one_question, open_in_page
    driver = browser
    d, strong, sid = ask_one_question(make_daemon, driver, tmp_path, "dash-two-tabs")
    red, blue = "#timeline .question button[data-option-id='red']", "#timeline .question button[data-option-id='blue']"
    wait_for(lambda: by_css(driver, red), "the question in the first tab")
    first = driver.current_window_handle
    driver.switch_to.new_window("tab")
    second = driver.current_window_handle
    open_in_page(driver, d, strong, sid)
    wait_for(lambda: by_css(driver, blue) and body_data(driver, "conn") == "live", "the question in the second tab")

    driver.switch_to.window(first)
    driver.execute_script(HOLD_ANSWERS)
    click(driver, red)
    wait_for(lambda: driver.execute_script("return window.answerRequests") == 1, "the first tab's answer on its way")
    driver.switch_to.window(second)
    click(driver, blue)
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the question answered in the second tab")
    driver.switch_to.window(first)
    driver.execute_script("window.releaseAnswers()")
    wait_for(lambda: one(driver, "#composer-note").text
             == "Not answered: that question was already answered with Blue (it came first).", "the first tab's note")
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the question gone in the first tab")

    wait_for(lambda: d.request("GET", f"/sessions/{sid}?itemsLimit=1", token=strong)[1]["status"] == "idle", "the run's end")
    events = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)[1]["events"]
    assert [e["body"]["answer"] for e in events if e["kind"] == "question.answered"] == [
        {"kind": "answer", "optionIds": ["blue"]}]
    for tab in (first, second):
        driver.switch_to.window(tab)
        wait_for(lambda: body_data(driver, "sessionStatus") == "idle"
                 and int(body_data(driver, "lastEventId") or 0) == events[-1]["seq"], "the run's end in each tab")
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert body_data(driver, "duplicates") is None
        assert console_errors(driver) == []


# A tool round that lasts until the test lets it end (the file `go` made in the workspace).
HELD_TOOL_ROUND = {"when": "a held tool round", "toolCalls": [
    {"name": "run_command", "arguments": {"command": "while [ ! -e go ]; do sleep 0.02; done"}}]}


def test_inputs_sent_while_busy_run_where_their_when_busy_choice_says(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """While a tool call runs, a follow-up and then a steer are sent from the message box with
    the "If busy" choice (F-ACT-3). The queue lists the steer first (it runs first) with each
    one's choice; the steer is placed after the current tool round, before the model is asked
    again, and the follow-up runs after that answer: the timeline shows them in that order, as the
    daemon's view has them."""
    driver = browser
    d = make_daemon(with_turns(HELD_TOOL_ROUND))
    strong, sid = open_session(driver, d, tmp_path, "dash-when-busy")
    submit(driver, "a held tool round")
    wait_for(lambda: by_css(driver, "#timeline .tool[data-status='running']"), "the running tool call")
    submit(driver, "then follow up", when_busy="followUp")
    wait_for(lambda: one(driver, "#composer-note").text.startswith("Sent (seq "), "the follow-up sent")
    submit(driver, "steer this way", when_busy="steer")
    wait_for(lambda: texts(driver, "#queue li.card .text") == ["steer this way", "then follow up"], "both queued, the steer first")
    assert texts(driver, "#queue li.card .pill") == ["steer", "followUp"]
    assert by_css(driver, "#timeline .tool[data-status='running']")   # (both sent while the tool ran)
    (tmp_path / "workspace" / "go").touch()

    done = ["a held tool round", "run_command", "steer this way", "(faux) You said: steer this way",
            "then follow up", "(faux) You said: then follow up"]
    shown = """return Array.from(document.querySelectorAll('#timeline > .msg:not(.streaming), #timeline > .tool'),
        (n) => n.classList.contains('tool') ? n.querySelector('.name').textContent : n.querySelector('.text').textContent)"""
    wait_for(lambda: driver.execute_script(shown) == done and body_data(driver, "sessionStatus") == "idle",
             "the inputs run in their order", 20)
    view = d.request("GET", f"/sessions/{sid}", token=strong)[1]
    assert [it["call"]["name"] if it["role"] == "tool_call" else it["text"] for it in view["items"]] == done
    assert texts(driver, "#queue li") == ["Nothing queued."]
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_a_queued_inputs_name_is_cut_between_whole_characters_as_a_reader_sees_them(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A queued input's buttons are named by its first 40 characters, counted in code points: an
    emoji made of several (a family joined by zero-width joiners, a flag of two regional letters,
    a letter and its accent) was cut inside, the name ending in a lone woman, the letter I of a
    flag's pair, or an accent without its letter, and counted as several characters. They are now
    counted and cut as the characters the reader sees (grapheme clusters)."""
    from tests.dashboard.test_dashboard_whose_and_when import names_become
    driver = browser
    d = make_daemon(with_turns())
    strong, sid = open_session(driver, d, tmp_path, "dash-graphemes")
    submit(driver, "stream slowly please")
    wait_for(lambda: body_data(driver, "sessionStatus") == "running", "the slow answer")
    family, flag, accented = "\U0001F469\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "\U0001F1EE\U0001F1F1", "e\u0301"
    inputs = ["x" * 38 + family + " and more after it", flag * 45, accented * 40]
    for i, text in enumerate(inputs):
        status, body = d.request("POST", f"/sessions/{sid}/inputs", {"requestId": f"grapheme-{i}", "content": text},
                                 token=strong)
        assert status == 202, body
    wait_for(lambda: len(by_css(driver, "#queue li.card")) == 3, "three queued inputs")
    names_become(driver, "#queue li.card button.withdraw", [
        "Withdraw queued input “" + "x" * 38 + family + "…”",
        "Withdraw queued input “" + flag * 40 + "…”",
        "Withdraw queued input “" + accented * 40 + "”"])
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the aborted run")
    assert console_errors(driver) == []


# Resolves once a turn of the page's event loop has gone by (what was due in the last one done).
A_TURN_LATER = "const done = arguments[arguments.length - 1]; setTimeout(() => done(true), 0);"


# The page's first request to /whoami waits until `releaseFirstWhoami()`; later ones go at once.
# `firstWhoamiRead` turns true once the page has read the held request's answer (its body taken:
# what the page does with it follows in the same turn).
HOLD_FIRST_WHOAMI = """
    const realWhoami = window.fetch;
    let releaseWhoami; const whoamiGate = new Promise((r) => { releaseWhoami = r; });
    window.releaseFirstWhoami = () => releaseWhoami();
    window.whoamiHeld = 0; window.firstWhoamiRead = false;
    window.fetch = async (...args) => {
      if (!(String(args[0]).endsWith('/whoami') && window.whoamiHeld++ === 0)) return realWhoami(...args);
      await whoamiGate;
      const resp = await realWhoami(...args), read = resp.text.bind(resp);
      resp.text = async () => { try { return await read(); } finally { window.firstWhoamiRead = true; } };
      return resp;
    };"""


def paste_held(driver: Any, d: Daemon, credential: str, what: str) -> None:
    """The page opened afresh, :data:`HOLD_FIRST_WHOAMI` run in it and ``credential`` pasted:
    returns once its check (the first request to /whoami) is on its way, and held."""
    driver.get(d.base + "/")
    driver.execute_script(HOLD_FIRST_WHOAMI)
    paste_credential(driver, credential)
    wait_for(lambda: driver.execute_script("return window.whoamiHeld") == 1, what)


def test_the_answer_for_a_credential_pasted_before_the_last_one_changes_nothing(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any) -> None:
    """A credential pasted and sent, then another pasted and sent before the daemon answered the
    first (a typo put right at once, a slow daemon): the page goes by the last one. The first's
    late refusal forgot the right credential the page had just connected with; the first's late
    success, after the last one was refused, showed the page connected with no credential at all
    (the lists then asked without one). Each late answer is now dropped. And Connect pressed again
    on the emptied field while the credential was on its way left "paste a credential first"
    beside the page once connected; it now does nothing."""
    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-two-pastes", strong=True)
    wrong = "lens_" + "0" * 40

    # The wrong one first, answered last: the page stays connected with the right one.
    paste_held(driver, d, wrong, "the first credential on its way")
    paste_credential(driver, strong)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    wait_for(lambda: by_css(driver, "#projects li.empty"), "the (empty) project list")
    assert driver.execute_script("return window.whoamiHeld") == 2
    driver.execute_script("window.releaseFirstWhoami()")
    wait_for(lambda: driver.execute_script("return window.firstWhoamiRead"), "the late refusal read")
    assert driver.execute_async_script(A_TURN_LATER)
    network_requests(driver, d.base)
    click(driver, "#refresh")   # (a request made after the late answer came: it still carries the credential)
    wait_for(lambda: any(path.startswith("/api/v1/projects") for _, path, _ in network_requests(driver, d.base)),
             "the lists read again")
    assert body_data(driver, "trust") == "strong" and one(driver, "#disconnect").is_displayed()
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    # The right one first, answered last: the wrong one's refusal stands, and the page is not connected.
    paste_held(driver, d, strong, "the first credential on its way")
    paste_credential(driver, wrong)
    wait_for(lambda: by_css(driver, "#errors li[data-code='AUTH_INVALID']"), "the refusal of the last one")
    network_requests(driver, d.base)
    driver.execute_script("window.releaseFirstWhoami()")
    wait_for(lambda: driver.execute_script("return window.firstWhoamiRead"), "the late success read")
    assert driver.execute_async_script(A_TURN_LATER)
    assert body_data(driver, "trust") == "" and one(driver, "#cred").is_displayed()
    assert body_data(driver, "conn") == "not"
    asked = [path for _, path, _ in network_requests(driver, d.base)]
    assert asked == ["/api/v1/whoami"], asked
    assert texts(driver, "#errors li code") == ["AUTH_INVALID"]

    # Connect pressed again on the emptied field while the credential is on its way: nothing more
    # is asked, and no "paste a credential first" stays beside the connected page.
    paste_held(driver, d, strong, "the credential on its way")
    click(driver, "#connect")
    driver.execute_script("window.releaseFirstWhoami()")
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    wait_for(lambda: by_css(driver, "#projects li.empty"), "the (empty) project list")
    assert driver.execute_script("return window.whoamiHeld") == 1
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


# The page's requests that make a project or a session are counted in `createsAsked` and wait
# until `releaseCreates()`; `createsRead` counts the answers the page has read (their body taken,
# what the page does with it following in the same turn). Run again, the script counts afresh and
# holds the next ones.
HOLD_CREATES = """
    window.createsAsked = 0; window.createsRead = 0;
    let releaseCreates; const createGate = new Promise((r) => { releaseCreates = r; });
    window.releaseCreates = () => releaseCreates();
    window.createGate = createGate;
    if (!window.realCreate) {
      window.realCreate = window.fetch;
      window.fetch = async (...args) => {
        const url = String(args[0]), init = args[1] || {};
        if (!(init.method === 'POST' && /\\/api\\/v1\\/(projects|sessions)$/.test(url))) return window.realCreate(...args);
        window.createsAsked++; await window.createGate;
        const resp = await window.realCreate(...args), read = resp.text.bind(resp);
        resp.text = async () => { try { return await read(); } finally { window.createsRead++; } };
        return resp;
      };
    }"""


def create_project_held(driver: Any, name: str, workspace: Path) -> None:
    """:data:`HOLD_CREATES` run in the page, then a project ``name`` on ``workspace`` asked for
    by *Create project*: returns once its request is on its way, and held."""
    driver.execute_script(HOLD_CREATES)
    one(driver, "#project-name").send_keys(name)
    one(driver, "#project-workspace").send_keys(str(workspace))
    click(driver, "#new-project button")
    wait_for(lambda: driver.execute_script("return window.createsAsked") == 1, "the project asked")


def revoke(d: Daemon, client: str) -> None:
    """``lens pair revoke --client <client>`` run on the daemon's directory."""
    subprocess.run([sys.executable, "-m", "runtime.cli", "pair", "revoke", "--client", client],
                   cwd=d.cwd, capture_output=True, text=True, timeout=30, check=True)


def test_a_double_click_on_create_project_or_new_session_makes_one(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """*Create project* and *New session* stayed enabled while their request was on its way, and
    the daemon makes a new project or session for each request (neither has an idempotency key):
    a double click, or Enter pressed twice in the form, made two projects of the same name and
    workspace, or two sessions, the second one opened. Each form now sends one request at a time:
    the button is disabled while it is on its way, and a form submitted again meanwhile (by a
    script, which a disabled button does not stop) sends nothing more."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-double-create", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    connected_by_paste(driver, d, strong)

    driver.execute_script(HOLD_CREATES)
    one(driver, "#project-name").send_keys("Once")
    one(driver, "#project-workspace").send_keys(str(workspace), Keys.ENTER)
    one(driver, "#project-workspace").send_keys(Keys.ENTER)
    ActionChains(driver).double_click(one(driver, "#new-project button")).perform()
    wait_for(lambda: driver.execute_script("return window.createsAsked") >= 1, "the project asked")
    driver.execute_script("window.releaseCreates()")
    wait_for(lambda: by_css(driver, "#projects button.selected"), "the new project")
    wait_for(lambda: one(driver, "#new-session").is_displayed(), "the new session form")
    assert driver.execute_script("return window.createsAsked") == 1
    projects = d.request("GET", "/projects", token=strong)[1]["projects"]
    assert [p["name"] for p in projects] == ["Once"], projects

    driver.execute_script(HOLD_CREATES)
    ActionChains(driver).double_click(one(driver, "#new-session button")).perform()
    wait_for(lambda: driver.execute_script("return window.createsAsked") >= 1, "the session asked")
    driver.execute_script("window.releaseCreates()")
    wait_for(lambda: body_data(driver, "conn") == "live", "the new session opened")
    assert driver.execute_script("return window.createsAsked") == 1
    sessions = d.request("GET", f"/sessions?projectId={projects[0]['id']}", token=strong)[1]["sessions"]
    assert len(sessions) == 1, sessions

    # The same form submitted twice by a script (not the disabled button, which the browser
    # ignores): the page's own guard is what sends one request.
    for form in ("new-project", "new-session"):
        if form == "new-project":
            one(driver, "#project-name").send_keys("Twice")
            one(driver, "#project-workspace").send_keys(str(workspace))
        driver.execute_script(HOLD_CREATES)
        driver.execute_script("const f = document.getElementById(arguments[0]); f.requestSubmit(); f.requestSubmit();", form)
        assert driver.execute_script("return window.createsAsked") == 1, form
        driver.execute_script("window.releaseCreates()")
        wait_for(lambda: driver.execute_script("return window.createsRead") == 1
                 and one(driver, f"#{form} button").is_enabled(), f"the answer to {form}")
        assert driver.execute_script("return window.createsAsked") == 1, form
    projects = d.request("GET", "/projects", token=strong)[1]["projects"]
    assert sorted(p["name"] for p in projects) == ["Once", "Twice"], projects
    twice = next(p["id"] for p in projects if p["name"] == "Twice")
    sessions = d.request("GET", f"/sessions?projectId={twice}", token=strong)[1]["sessions"]
    assert len(sessions) == 1, sessions
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_a_create_on_its_way_when_the_credential_is_forgotten_changes_nothing_for_the_next_one(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """*Create project* pressed, then the credential forgotten and another pasted before the
    daemon answered: the button stayed disabled under the next credential (for good, had no answer
    come), and the late answer was applied to the next credential's page — the first one's project
    selected there, or its refusal (the first credential revoked meanwhile) shown in the next one's
    errors list. Forgetting the credential now lets go of the request: the button is enabled at
    once, and the answer, when it comes, changes nothing."""
    driver = browser
    d = make_daemon(with_turns())
    first, second, third = (d.pair(f"dash-create-forget-{i}", strong=True) for i in range(3))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    driver.get(d.base + "/")
    for held, then, revoked, name in ((first, second, False, "Answered late"), (second, third, True, "Refused late")):
        paste_credential(driver, held)
        wait_for(lambda: body_data(driver, "trust") == "strong" and by_css(driver, "#projects li"), "connected")
        create_project_held(driver, name, workspace)
        assert not one(driver, "#new-project button").is_enabled()
        click(driver, "#disconnect")
        if revoked:
            revoke(d, "dash-create-forget-1")
        paste_credential(driver, then)
        wait_for(lambda: body_data(driver, "trust") == "strong" and by_css(driver, "#projects li"), "the next credential connected")
        assert one(driver, "#new-project button").is_enabled()
        driver.execute_script("window.releaseCreates()")
        wait_for(lambda: driver.execute_script("return window.createsRead") == 1, "the late answer read")
        assert driver.execute_async_script(A_TURN_LATER)
        # (the page selects the newest project when none is: the one already there, never the late one)
        selected = texts(driver, "#projects button.selected")
        assert not any(t.startswith(name) for t in selected), selected
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert one(driver, "#new-project button").is_enabled()
        click(driver, "#disconnect")
    names = [p["name"] for p in d.request("GET", "/projects", token=third)[1]["projects"]]
    assert names == ["Answered late"], names   # (the revoked credential's was refused)

    # Refused for the credential still held (revoked while the create was on its way): that is
    # the page's reason to forget it, and it is said.
    paste_credential(driver, third)
    wait_for(lambda: body_data(driver, "trust") == "strong" and by_css(driver, "#projects li"), "connected")
    create_project_held(driver, "Refused now", workspace)
    revoke(d, "dash-create-forget-2")
    driver.execute_script("window.releaseCreates()")
    wait_for(lambda: driver.execute_script("return window.createsRead") == 1, "the refusal read")
    assert driver.execute_async_script(A_TURN_LATER)
    assert one(driver, "#cred").is_displayed()
    assert texts(driver, "#errors li code") == ["AUTH_INVALID"], texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_new_session_pressed_by_the_keyboard_keeps_the_focus_on_a_control(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """*New session* is disabled while its request is on its way, which takes the focus from a
    keyboard user who pressed it: it is given back once the session is open — to the button on a
    wide screen, to the list's toggle on a narrow one, where the list closes over the button."""
    from selenium.webdriver.common.keys import Keys

    from tests.dashboard.test_dashboard_keyboard import focused, keys
    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-new-session-keys", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    connected_by_paste(driver, d, strong, empty=False)
    one(driver, "#project-name").send_keys("Keys")
    one(driver, "#project-workspace").send_keys(str(workspace), Keys.ENTER)
    wait_for(lambda: by_css(driver, "#projects button.selected") and one(driver, "#new-session").is_displayed(), "the project")
    for width, holder in ((1280, "New session"), (600, "Projects and sessions")):
        driver.set_window_size(width, 900)
        wait_for(lambda: driver.execute_script("return innerWidth") == width, f"a {width} px wide page")
        if width < 900 and one(driver, "#nav-toggle").get_attribute("aria-expanded") == "false":
            click(driver, "#nav-toggle")
        sessions = len(by_css(driver, "#sessions button[data-session-id]"))
        driver.execute_script("document.querySelector('#new-session button').focus()")
        keys(driver, Keys.ENTER)
        wait_for(lambda: len(by_css(driver, "#sessions button[data-session-id]")) == sessions + 1
                 and body_data(driver, "conn") == "live", "the new session open")
        wait_for(lambda: focused(driver)["text"] == holder, f"the focus on {holder!r} at {width} px")
    assert console_errors(driver) == []
