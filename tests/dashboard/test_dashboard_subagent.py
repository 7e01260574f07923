"""A subagent's conversation on the dashboard (F-API-6, F-ACT-5): a ``subagent`` call's card has a
disclosure that shows what the subagent was asked, the tools it called and what it answered
(``GET /sessions/{id}?agentId=``), kept current as the session's events arrive, with the same
per-message context edits as the main timeline, sent with the subagent's ``agentId``. One real
daemon (the faux provider; its subagent's own faux model calls a tool and answers), one headless
Chromium, as in ``test_dashboard_browser.py`` (its helpers); every wait is for a condition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, click, console_errors, daemon, one, open_new_session, reopen_read_only,
    submit, texts, wait_for)

CONVO = "#timeline .tool[data-call-id] > details.sub-convo"
SUB_USER = CONVO + " .sub-items > .msg.user"
BUSY = '/tool sleep_milliseconds {"milliseconds": 600000}'


def test_a_subagents_conversation_is_shown_kept_current_and_its_messages_hidden(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    driver = browser
    strong = daemon.pair("dash-sub", strong=True)
    readonly = daemon.pair("dash-sub-read", strong=False)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sid = open_new_session(driver, daemon, strong, workspace)
    submit(driver, "/tool subagent " + json.dumps({"prompt": "/tool get_system_time {}"}))
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and texts(driver, "#timeline .tool .name") == ["subagent"]
             and by_css(driver, "#timeline .tool .pill.ok"), "the subagent call, finished")
    call_id = one(driver, "#timeline .tool").get_attribute("data-call-id")
    sub = "sub_" + call_id
    _, view = daemon.request("GET", f"/sessions/{sid}?agentId={sub}", token=strong)
    assert [it["role"] for it in view["items"]] == ["user", "tool_call", "assistant"]
    assert by_css(driver, CONVO + " .sub-items > *") == []  # (closed: nothing of it in the page)

    # Opened by the keyboard (its summary is a labelled Tab stop of the card).
    summary = one(driver, CONVO + " > summary")
    assert summary.text == "subagent's conversation" and sub in summary.get_attribute("title")
    driver.execute_script("arguments[0].focus()", summary)
    driver.switch_to.active_element.send_keys(Keys.ENTER)
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
    second_id = by_css(driver, "#timeline > .tool")[1].get_attribute("data-call-id")
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
