"""A subagent's conversation on the dashboard (F-API-6, F-ACT-5): a ``subagent`` call's card has a
disclosure that shows what the subagent was asked, the tools it called and what it answered
(``GET /sessions/{id}?agentId=``), kept current as the session's events arrive, with the same
per-message context edits as the main timeline, sent with the subagent's ``agentId``. One real
daemon (the faux provider; its subagent's own faux model calls a tool and answers), one headless
Chromium, as in ``test_dashboard_browser.py`` (its helpers); every wait is for a condition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, attrs, body_data, browser, by_css, click, committed_answers, console_errors, daemon, make_daemon, one,
    open_session, press, reopen_read_only, submit, texts, wait_for, with_turns)

CONVO = "#timeline .tool[data-call-id] > details.sub-convo"
SUB_USER = CONVO + " .sub-items > .msg.user"
BUSY = '/tool sleep_milliseconds {"milliseconds": 600000}'
MANY = 210  # tool calls in one answer: enough to take an earlier card out of the timeline's window (200)


def test_a_subagents_conversation_is_shown_kept_current_and_its_messages_hidden(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    driver = browser
    readonly = daemon.pair("dash-sub-read", strong=False)
    strong, sid = open_session(driver, daemon, tmp_path, "dash-sub")
    submit(driver, "/tool subagent " + json.dumps({"prompt": "/tool get_system_time {}"}))
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and texts(driver, "#timeline .tool .name") == ["subagent"]
             and by_css(driver, "#timeline .tool .pill.ok"), "the subagent call, finished")
    call_id = attrs(driver, "#timeline .tool", "data-call-id")[0][0]
    sub = "sub_" + call_id
    _, view = daemon.request("GET", f"/sessions/{sid}?agentId={sub}", token=strong)
    assert [it["role"] for it in view["items"]] == ["user", "tool_call", "assistant"]
    assert by_css(driver, CONVO + " .sub-items > *") == []  # (closed: nothing of it in the page)

    # Opened by the keyboard (its summary is a labelled Tab stop of the card).
    [[summary, title]] = attrs(driver, CONVO + " > summary", "textContent", "title")
    assert summary == "subagent's conversation" and sub in title
    press(driver, CONVO + " > summary", Keys.ENTER)
    wait_for(lambda: texts(driver, SUB_USER + " .text") == ["/tool get_system_time {}"], "the subagent's prompt")
    assert texts(driver, CONVO + " .sub-items > .tool .name") == ["get_system_time"]
    assert texts(driver, CONVO + " .sub-items > .msg.assistant .text") == [view["items"][2]["text"]]
    # Its messages' "context" disclosures join the timeline's one tab stop.
    stops = driver.execute_script("""return [...document.querySelectorAll(
        '#timeline .msg > .ctx-row > details.ctx-edits > summary')].map((s) => s.tabIndex)""")
    assert len(stops) == 4 and sorted(stops) == [-1, -1, -1, 0], stops  # (the main agent's two, the subagent's two)

    # Hidden from its "context" disclosure: sent with the subagent's agentId.
    click(driver, SUB_USER + " .ctx-edits summary")
    wait_for(lambda: texts(driver, SUB_USER + " .ctx-edits button") == ["Snip", "Hide"], "the subagent's message's edits")
    click(driver, SUB_USER + " .ctx-edits button.ctx-hide")
    wait_for(lambda: texts(driver, SUB_USER + " .ctx-mark") == ["hidden"], "the subagent's message marked hidden")
    wait_for(lambda: texts(driver, SUB_USER + " .ctx-edits button") == ["Unhide"], "Unhide (its disclosure kept open)")
    _, after = daemon.request("GET", f"/sessions/{sid}?agentId={sub}", token=strong)
    assert [it["context"] for it in after["items"]] == ["hidden", "visible", "visible"]
    _, main = daemon.request("GET", f"/sessions/{sid}", token=strong)
    assert "hidden" not in {it["context"] for it in main["items"]}
    assert texts(driver, "#timeline > .msg .ctx-mark") == []

    # An edit made elsewhere shows as its event arrives.
    status, _ = daemon.request("POST", f"/sessions/{sid}/context/unhide", {"itemIds": [view["items"][0]["id"]], "agentId": sub},
                               token=strong)
    assert status == 200
    wait_for(lambda: texts(driver, SUB_USER + " .ctx-mark") == [], "the unhide made elsewhere")

    # A call of the subagent's: hidden with its result from its card, then unhidden.
    sub_tool = CONVO + " .sub-items > .tool"
    click(driver, sub_tool + " .head > button.ctx-hide")
    wait_for(lambda: texts(driver, sub_tool + " .ctx-mark") == ["hidden"], "the subagent's call marked hidden")
    _, after = daemon.request("GET", f"/sessions/{sid}?agentId={sub}", token=strong)
    assert (after["items"][1]["context"], after["items"][1]["result"]["context"]) == ("hidden", "hidden")
    wait_for(lambda: texts(driver, sub_tool + " .head > button.ctx-hide") == ["Unhide"], "the call's Unhide")
    click(driver, sub_tool + " .head > button.ctx-hide")
    wait_for(lambda: texts(driver, sub_tool + " .ctx-mark") == [], "the subagent's call back")

    # Closed, its items leave the page.
    click(driver, CONVO + " > summary")
    wait_for(lambda: by_css(driver, CONVO + " .sub-items > *") == [], "the closed conversation emptied")

    # A conversation opened while its subagent runs shows its items as they change.
    submit(driver, "/tool subagent " + json.dumps({"prompt": BUSY}))
    wait_for(lambda: len(by_css(driver, "#timeline > .tool")) == 2, "the second subagent call")
    second_id = attrs(driver, "#timeline > .tool", "data-call-id")[1][0]
    second = f"#timeline > .tool[data-call-id='{second_id}'] > details.sub-convo"
    click(driver, second + " > summary")
    running = second + " .sub-items > .tool[data-status='running'] .name"
    wait_for(lambda: texts(driver, running) == ["sleep_milliseconds"], "the subagent's call, running")
    assert texts(driver, second + " .sub-items > .msg.user .text") == [BUSY]
    click(driver, "#abort")
    wait_for(lambda: texts(driver, running) == [] and body_data(driver, "sessionStatus") == "idle"
             and texts(driver, second + " .sub-items > .tool .name") == ["sleep_milliseconds"],
             "the subagent's call ended by the abort")
    first = f"#timeline > .tool[data-call-id='{call_id}'] > details.sub-convo"
    assert texts(driver, first + " .sub-items > *") == []  # (the first stays closed)
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []

    # Read-only: the conversation, no control.
    reopen_read_only(driver, readonly, sid)
    click(driver, first + " > summary")
    wait_for(lambda: texts(driver, first + " .sub-items > .msg.user .text") == ["/tool get_system_time {}"],
             "the prompt, read-only")
    assert by_css(driver, first + " .ctx-edits") == [] and by_css(driver, first + " .ctx-hide") == []


FIRST_HALF = ["(faux) Streaming the first half… "]
# Records the reads of a subagent's conversation the page makes (GET /sessions/{id}?agentId=…).
COUNT_AGENT_READS = """window.agentReads = [];
    const fetch0 = window.fetch;
    window.fetch = (url, init) => {
      const m = /[?&]agentId=([^&]+)/.exec(String(url));
      if (m && /\\/api\\/v1\\/sessions\\/[^/?]+\\?/.test(String(url))) window.agentReads.push(decodeURIComponent(m[1]));
      return fetch0(url, init);
    };"""


def test_a_subagents_streaming_answer_shows_in_its_open_conversation(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    driver = browser
    open_session(driver, daemon, tmp_path, "dash-sub-stream")
    # (the prompt escaped in the call's arguments: the main agent's own message does not match the
    # faux script's "stream slowly" turn, its subagent's prompt does)
    submit(driver, '/tool subagent {"prompt": "stre\\u0061m slowly please"}')
    # Closed: the answer streams at the end of the timeline, named by its agent.
    wait_for(lambda: texts(driver, "#timeline > .msg.streaming .text") == FIRST_HALF and by_css(driver, "#timeline > .tool"),
             "the subagent's answer streaming")
    sub = "sub_" + attrs(driver, "#timeline > .tool", "data-call-id")[0][0]
    assert texts(driver, "#timeline > .msg.streaming .who") == [sub + " · streaming…"]

    # Open: at the end of its conversation, after its prompt, and no longer in the timeline.
    click(driver, CONVO + " > summary")
    stream_in = CONVO + " .sub-items > .msg.streaming"
    wait_for(lambda: texts(driver, stream_in + " .text") == FIRST_HALF and not by_css(driver, "#timeline > .msg.streaming"),
             "the streaming answer inside the conversation")
    assert texts(driver, stream_in + " .who") == ["assistant · streaming…"]
    # (the answer still streams: each read is one read of the page, its parts drawn again as it comes)
    assert attrs(driver, stream_in, "aria-live") == [["off"]]
    assert driver.execute_script("return document.querySelector(arguments[0]).lastElementChild.classList.contains('streaming')",
                                 CONVO + " .sub-items")
    assert texts(driver, SUB_USER + " .text") == ["stream slowly please"]

    # Closed again: back at the end of the timeline.
    click(driver, CONVO + " > summary")
    wait_for(lambda: texts(driver, "#timeline > .msg.streaming .text") == FIRST_HALF and not by_css(driver, stream_in),
             "the streaming answer back in the timeline")

    # Open, then the run aborted: the bubble goes, the kept text is the subagent's message.
    click(driver, CONVO + " > summary")
    wait_for(lambda: by_css(driver, stream_in), "the streaming answer inside the conversation again")
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and not by_css(driver, ".msg.streaming")
             and texts(driver, CONVO + " .sub-items > .msg.assistant .text") == FIRST_HALF, "the aborted answer kept")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_the_agents_pane_opens_a_subagents_conversation_in_its_card_or_in_the_pane(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    driver = browser
    d = make_daemon(with_turns({"when": "many tools", "toolCalls": [{"name": "get_system_time", "arguments": {}}] * MANY}))
    strong, sid = open_session(driver, d, tmp_path, "dash-sub-pane")
    prompt = "/tool get_system_time {}"
    submit(driver, "/tool subagent " + json.dumps({"prompt": prompt}))
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and len(by_css(driver, "#agents > li.card")) == 2
             and by_css(driver, "#timeline > .tool .pill.ok"), "the subagent, finished")
    sub = "sub_" + attrs(driver, "#timeline > .tool", "data-call-id")[0][0]
    # (the main agent's entry has none: its conversation is the timeline; a row is drawn again
    # when its agent's entry changes, at late events after idle too: its buttons are read in one read)
    assert attrs(driver, "#agents button.show-convo", "data-agent-id", "textContent", "aria-label") == [
        [sub, "Show conversation", "Show conversation of " + sub]]
    button = f"#agents button.show-convo[data-agent-id='{sub}']"
    in_card = f"#timeline > .tool > details.sub-convo[data-agent-id='{sub}']"

    def active(selector: str) -> bool:
        return driver.execute_script("return document.activeElement === document.querySelector(arguments[0])", selector)

    # Its card in the page: opened there (by the keyboard: Enter on the button), its summary focused.
    press(driver, button, Keys.ENTER)
    wait_for(lambda: texts(driver, in_card + " > .sub-items > .msg.user .text") == [prompt], "the conversation in its card")
    assert active(in_card + " > summary")
    assert not by_css(driver, "#agent-convos > *")
    press(driver, in_card + " > summary", Keys.ENTER)
    wait_for(lambda: by_css(driver, in_card + " > .sub-items > *") == [], "the conversation, closed")

    # Its card out of the timeline's window: the button shows the conversation in the Agents pane.
    submit(driver, "many tools")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and not by_css(driver, in_card)
             and any(a.startswith("The tool answered") for a in committed_answers(driver)), "the card out of the window", 30)
    press(driver, button, Keys.ENTER)
    in_pane = f"#agent-convos > details.sub-convo[data-agent-id='{sub}']"
    wait_for(lambda: texts(driver, in_pane + " .sub-items > .msg.user .text") == [prompt]
             and texts(driver, in_pane + " .sub-items > .tool .name") == ["get_system_time"], "the conversation in the pane")
    assert texts(driver, in_pane + " > summary") == ["conversation of " + sub]
    assert active(in_pane + " > summary")
    # Its messages' disclosures are one stop there, Up and Down move between them; a hide from it
    # is sent with its agentId; its call's card is one stop whose arrows move within it.
    stops = driver.execute_script("""return [...document.querySelectorAll(
        '#agent-convos .msg > .ctx-row > details.ctx-edits > summary')].map((s) => s.tabIndex)""")
    assert sorted(stops) == [-1, 0], stops
    user_msg = in_pane + " .sub-items > .msg.user"
    press(driver, user_msg + " .ctx-edits > summary", Keys.ARROW_DOWN)
    assert active(in_pane + " .sub-items > .msg.assistant .ctx-edits > summary")
    click(driver, user_msg + " .ctx-edits summary")
    wait_for(lambda: texts(driver, user_msg + " .ctx-edits button") == ["Snip", "Hide"], "its edits")
    click(driver, user_msg + " .ctx-edits button.ctx-hide")
    wait_for(lambda: texts(driver, user_msg + " .ctx-mark") == ["hidden"], "the message hidden from the pane")
    _, after = d.request("GET", f"/sessions/{sid}?agentId={sub}", token=strong)
    assert after["items"][0]["context"] == "hidden"
    card_stops = driver.execute_script("""return [...document.querySelectorAll(
        '#agent-convos .tool :is(summary, button)')].map((n) => n.tabIndex)""")
    assert sorted(card_stops)[-1] == 0 and card_stops.count(0) == 1, card_stops
    press(driver, in_pane + " .sub-items > .tool .head button.ctx-edit", Keys.ARROW_RIGHT)
    assert active(in_pane + " .sub-items > .tool .head button.ctx-hide")
    # Closed there: it leaves the pane, the focus back on its entry's button.
    press(driver, in_pane + " > summary", Keys.ENTER)
    wait_for(lambda: not by_css(driver, "#agent-convos > *"), "the pane's conversation gone")
    assert active(button)
    # An event of the session (the pane drawn from the view read after it) leaves the focus on
    # the agent's button, the same node: the agent's entry did not change.
    driver.execute_script("window.oldButton = document.activeElement")
    status, _ = d.request("POST", f"/sessions/{sid}/context/unhide", {"itemIds": [after["items"][0]["id"]], "agentId": sub},
                          token=strong)
    assert status == 200
    last = d.request("GET", f"/sessions/{sid}", token=strong)[1]["lastSeq"]
    wait_for(lambda: driver.execute_script("return document.getElementById('session-meta').textContent").endswith(
        f"seq {last}"), "the view of the unhide's event")
    assert active(button) and driver.execute_script("return document.activeElement === window.oldButton")
    # Its card back in the page: its conversation there, as it is now.
    click(driver, "#timeline button.more")
    wait_for(lambda: by_css(driver, in_card + " > summary"), "the card back in the window")
    assert texts(driver, in_card + " > summary") == ["subagent's conversation"]
    click(driver, in_card + " > summary")
    wait_for(lambda: texts(driver, in_card + " .sub-items > .msg.user .text") == [prompt], "the conversation in its card again")
    assert texts(driver, in_card + " .sub-items > .msg.user .ctx-mark") == []  # (the unhide made over HTTP)
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_an_open_conversation_is_read_again_only_when_its_agent_had_events(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-sub-reads")
    for n in range(2):
        submit(driver, "/tool subagent " + json.dumps({"prompt": "/tool get_system_time {}"}))
        wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and len(by_css(driver, "#timeline > .tool .pill.ok")) == n + 1,
                 "the subagent call, finished")
    subs = ["sub_" + c for [c] in attrs(driver, "#timeline > .tool", "data-call-id")]
    driver.execute_script(COUNT_AGENT_READS)
    for sub in subs:
        click(driver, f"details.sub-convo[data-agent-id='{sub}'] > summary")
    for sub in subs:
        wait_for(lambda: texts(driver, f"details.sub-convo[data-agent-id='{sub}'] .sub-items > .msg.assistant"),
                 "the conversation, open")
    assert sorted(driver.execute_script("return window.agentReads")) == sorted(subs)  # (one read each, on opening)

    # Events of the main agent alone: the view is read again, the conversations are not.
    lines = []
    for word in ("one", "two", "three"):
        submit(driver, "only the main agent " + word)
        lines.append("(faux) You said: only the main agent " + word)
        wait_for(lambda: texts(driver, "#timeline > .msg.assistant .text")[-len(lines):] == lines
                 and body_data(driver, "sessionStatus") == "idle", "the main agent's answer")
    assert sorted(driver.execute_script("return window.agentReads")) == sorted(subs)

    # An event of one subagent (an unhide made elsewhere): that conversation alone is read again.
    _, view = daemon.request("GET", f"/sessions/{sid}?agentId={subs[0]}", token=strong)
    item = view["items"][0]["id"]
    status, _ = daemon.request("POST", f"/sessions/{sid}/context/hide", {"itemIds": [item], "agentId": subs[0]}, token=strong)
    assert status == 200
    first_user = f"details.sub-convo[data-agent-id='{subs[0]}'] .sub-items > .msg.user .ctx-mark"
    wait_for(lambda: texts(driver, first_user) == ["hidden"], "the hide made elsewhere")
    reads = driver.execute_script("return window.agentReads")[len(subs):]
    assert reads and set(reads) == {subs[0]}, reads
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")


# Holds the page's reads of a conversation (GET /sessions/{id}?agentId=…) from now on until
# window.releaseEarlier() is called: events arrive while one is on its way.
HOLD_AGENT_READS = """window.earlierReads = 0;
    let release; const held = new Promise((r) => { release = r; });
    window.releaseEarlier = () => release();
    const fetch1 = window.fetch;
    window.fetch = async (url, init) => {
      if (/[?&]agentId=/.test(String(url))) { window.earlierReads++; await held; }
      return fetch1(url, init);
    };"""


def test_a_subagents_conversation_shows_its_earlier_items(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    # Its latest 200 items, then "Show earlier" as the timeline's: by the keyboard (one of its
    # card's controls), its items read from the earlier ones on while an event of its agent comes in
    # (no item twice), the focus on the earliest item once the button is gone. Its prompt is
    # quoted in the main agent's input as JSON (\"): the turn `when` it answers the subagent alone.
    from selenium.webdriver.common.keys import Keys

    driver = browser
    calls = lambda n: {"when": f'"{n} calls"', "toolCalls": [{"name": "get_system_time", "arguments": {}}] * n}  # noqa: E731
    d = make_daemon(with_turns(calls(198), calls(199)))
    strong, sid = open_session(driver, d, tmp_path, "dash-sub-earlier")
    for n, total in enumerate((200, 201)):
        submit(driver, "/tool subagent " + json.dumps({"prompt": f'"{total - 2} calls"'}))
        wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and len(by_css(driver, "#timeline > .tool .pill.ok")) == n + 1,
                 "the subagent call, finished", 60)
    subs = ["sub_" + c for [c] in attrs(driver, "#timeline > .tool", "data-call-id")]
    convo = [f"#timeline > .tool > details.sub-convo[data-agent-id='{sub}']" for sub in subs]
    views = [d.request("GET", f"/sessions/{sid}?agentId={sub}", token=strong)[1] for sub in subs]
    assert [v["itemsTotal"] for v in views] == [200, 201]

    def shown(i: int) -> list[str]:
        return driver.execute_script("""return [...document.querySelectorAll(arguments[0] + ' > .sub-items > :is(.msg, .tool)')]
            .map((n) => n.dataset.itemId)""", convo[i])

    def active(selector: str) -> bool:
        return driver.execute_script("return document.activeElement === document.querySelector(arguments[0])", selector)

    # Exactly 200: all of them, no button.
    click(driver, convo[0] + " > summary")
    wait_for(lambda: len(shown(0)) == 200, "the 200 items")
    assert shown(0) == [it["id"] for it in views[0]["items"]]
    assert by_css(driver, convo[0] + " button.sub-more") == []

    # 201: the latest 200 and a button for the one before them, reached from its summary by Right.
    click(driver, convo[1] + " > summary")
    wait_for(lambda: len(shown(1)) == 200, "the latest 200 items")
    assert shown(1) == [it["id"] for it in views[1]["items"][1:]]
    more = convo[1] + " > .sub-items > button.sub-more"
    assert texts(driver, more) == ["Show 1 earlier (1 not shown)"]
    driver.execute_script(HOLD_AGENT_READS)
    press(driver, convo[1] + " > summary", Keys.ARROW_RIGHT)
    assert active(more)
    press(driver, more, Keys.ENTER)
    wait_for(lambda: driver.execute_script("return window.earlierReads") == 1, "the earlier items asked for")
    # An event of its agent while they are on their way: its last item hidden elsewhere.
    last = views[1]["items"][-1]["id"]
    status, _ = d.request("POST", f"/sessions/{sid}/context/hide", {"itemIds": [last], "agentId": subs[1]}, token=strong)
    assert status == 200
    driver.execute_script("window.releaseEarlier()")
    last_mark = f"{convo[1]} > .sub-items > [data-item-id='{last}'] .ctx-mark"
    wait_for(lambda: len(shown(1)) == 201 and texts(driver, last_mark) == ["hidden"], "all 201 items, the hide shown")
    assert shown(1) == [it["id"] for it in views[1]["items"]]  # (each once, in order)
    assert by_css(driver, more) == []
    assert active(convo[1] + " > .sub-items > .msg.user")  # (the earliest item: where the reader goes on)
    assert one(driver, "#timeline-status").get_attribute("textContent") == "1 earlier item shown of " + subs[1]
    assert shown(0) == [it["id"] for it in views[0]["items"]]  # (the other conversation as it was)

    # Closed and opened again: its latest 200 again.
    click(driver, convo[1] + " > summary")
    wait_for(lambda: shown(1) == [], "the conversation, closed")
    click(driver, convo[1] + " > summary")
    wait_for(lambda: len(shown(1)) == 200 and texts(driver, more) == ["Show 1 earlier (1 not shown)"], "its latest 200 again")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_a_subagents_earlier_items_come_in_two_steps_when_more_than_a_window_is_hidden(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    # 410 items: 200 shown, then 200 more with the button drawn again (the focus on it), then the
    # rest (the focus on the earliest item); only how many were shown is announced, each time.
    from selenium.webdriver.common.keys import Keys
    from tests.dashboard.test_dashboard_keyboard import WATCH_ANNOUNCEMENTS, announced_but_the_status

    driver = browser
    d = make_daemon(with_turns({"when": '"408 calls"', "toolCalls": [{"name": "get_system_time", "arguments": {}}] * 408}))
    strong, sid = open_session(driver, d, tmp_path, "dash-sub-earlier-twice")
    submit(driver, "/tool subagent " + json.dumps({"prompt": '"408 calls"'}))
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and by_css(driver, "#timeline > .tool .pill.ok"),
             "the subagent call, finished", 60)
    sub = "sub_" + attrs(driver, "#timeline > .tool", "data-call-id")[0][0]
    convo = f"#timeline > .tool > details.sub-convo[data-agent-id='{sub}']"
    more = convo + " > .sub-items > button.sub-more"
    _, view = d.request("GET", f"/sessions/{sid}?agentId={sub}", token=strong)
    ids = [it["id"] for it in view["items"]]
    assert len(ids) == 410

    def shown() -> list[str]:
        return driver.execute_script("""return [...document.querySelectorAll(arguments[0] + ' > .sub-items > :is(.msg, .tool)')]
            .map((n) => n.dataset.itemId)""", convo)

    click(driver, convo + " > summary")
    wait_for(lambda: shown() == ids[210:], "the latest 200 items")
    assert texts(driver, more) == ["Show 200 earlier (210 not shown)"]
    driver.execute_script(WATCH_ANNOUNCEMENTS)
    press(driver, more, Keys.ENTER)
    wait_for(lambda: shown() == ids[10:], "200 earlier items")
    assert texts(driver, more) == ["Show 10 earlier (10 not shown)"]
    assert driver.execute_script("return document.activeElement === document.querySelector(arguments[0])", more)
    press(driver, more, Keys.ENTER)
    wait_for(lambda: shown() == ids, "every item")
    assert by_css(driver, more) == []
    assert driver.execute_script("return document.activeElement.matches(arguments[0])", convo + " > .sub-items > .msg.user")
    assert announced_but_the_status(driver) == [f"200 earlier items shown of {sub}", f"10 earlier items shown of {sub}"]
    assert console_errors(driver) == []
