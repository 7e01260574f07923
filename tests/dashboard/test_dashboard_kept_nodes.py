"""The dashboard (F-API-6) keeps the node of what did not change and draws again what did.

Each event of the watched session has the page read its view again. An item, a row of a list,
whose content is the same keeps its node (what the reader opened, where the focus or a screen
reader is, stays); one whose content changed, however little and wherever in it, is drawn again.
One real daemon and one headless Chromium, as in ``test_dashboard_browser.py`` (its helpers);
every wait is for a condition.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from events.store import Draft, open_store
from events.types import ModelResponded, ProjectCreated, SessionCreated
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, console_errors, daemon, open_in_page, open_session, submit, texts, wait_for)

HALF = 200_000  # characters each side of the one that differs: past any bounded part of a text


def test_an_item_whose_text_changed_in_the_middle_is_drawn_again_and_one_unchanged_keeps_its_node(
        browser: Any, tmp_path: Path) -> None:
    """The daemon comes back on another data directory whose log is the watched one but for one
    character in the middle of the second answer (same ids, seqs and lengths). The page's stream
    resumes and it reads the view again: that answer shows its new text in a new node, the
    first answer keeps its node."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    answers = {cwd / ".lens": "a" * HALF + "1" + "a" * HALF, cwd / "other-data": "a" * HALF + "2" + "a" * HALF}

    async def write(data: Path, text: str) -> None:
        ids = {"project_id": "prj_kept", "session_id": "ses_kept", "agent_id": "main"}
        async with open_store(data) as log:
            await log.append(Draft(ProjectCreated(name="Kept", workspace=str(workspace)), project_id="prj_kept"))
            await log.append(Draft(SessionCreated(model="faux/faux-1"), **ids))
            await log.append(Draft(ModelResponded(text="the answer that stays"), **ids))
            await log.append(Draft(ModelResponded(text=text), **ids))

    for data, text in answers.items():
        trio.run(write, data, text)
    d = Daemon(cwd)
    try:
        token = d.pair("dash-kept", strong=False)
        driver = browser
        open_in_page(driver, d, token, "ses_kept")
        shown = """return Array.from(document.querySelectorAll('#timeline .msg.assistant .text'),
            (n) => [n.textContent.length, n.textContent.charAt(arguments[0]), n.closest('.msg').keptMark || null])"""
        wait_for(lambda: driver.execute_script(shown, HALF) == [[21, "", None], [2 * HALF + 1, "1", None]], "both answers")
        driver.execute_script("""for (const n of document.querySelectorAll('#timeline .msg.assistant'))
            n.keptMark = 'before'""")

        d.restart(data=str(cwd / "other-data"))
        wait_for(lambda: body_data(driver, "conn") == "live" and int(body_data(driver, "reconnects") or 0) >= 1,
                 "the stream resumed", 20)
        # (the changed answer drawn in a new node; the unchanged one's node is the one marked)
        wait_for(lambda: driver.execute_script(shown, HALF) == [[21, "", "before"], [2 * HALF + 1, "2", None]],
                 "the changed answer drawn again, the other kept")
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert console_errors(driver) == []
    finally:
        d.stop()


def test_a_focused_row_of_the_agents_pane_keeps_its_node_as_the_sessions_events_arrive(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """The Agents pane was emptied and drawn again at every view the page read: a subagent's "Show
    conversation" focused by a keyboard user became another node at each event (its focus put
    back on a new button, a screen reader's place lost). Now a run of the main agent (its row's
    usage changes, so that row is drawn again) leaves the subagent's row and its focused button
    as they were."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-agents-kept")
    submit(driver, "/tool subagent " + json.dumps({"prompt": "/tool get_system_time {}"}))
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and by_css(driver, "#agents button.show-convo")
             and by_css(driver, "#timeline .tool .pill.ok"), "the subagent's row")
    [sub] = driver.execute_script(
        "return Array.from(document.querySelectorAll('#agents button.show-convo'), (b) => b.dataset.agentId)")
    button = f"#agents button.show-convo[data-agent-id='{sub}']"
    main_usage = "return document.querySelector('#agents li.card .usage').textContent"
    # (focused and marked in one script: the page may draw the pane again between two calls)
    wait_for(lambda: driver.execute_script("""const b = document.querySelector(arguments[0]);
        if (!b) return false;
        b.focus(); b.keptMark = 'focused'; b.closest('li').keptMark = 'row';
        document.querySelector('#agents li.card').keptMark = 'main';
        return document.activeElement === b""", button), "the focus on the subagent's button")
    usage_before = driver.execute_script(main_usage)

    status, placed = daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": "kept-agents", "content": "hello again"},
                                    token=strong)
    assert status in (200, 201, 202), placed
    last = wait_for(lambda: (lambda v: v["status"] == "idle" and v["lastSeq"] > placed["seq"] and v["lastSeq"])(
        daemon.request("GET", f"/sessions/{sid}", token=strong)[1]), "the run to end")
    # (the page drew the view of the session's last event: its model line names that seq, and
    # the pane is drawn in the same pass; the main agent's row shows its new usage)
    wait_for(lambda: driver.execute_script("return document.getElementById('session-meta').textContent").endswith(
        f"seq {last}") and driver.execute_script(main_usage) != usage_before, "the view of the last event")
    assert driver.execute_script("""const a = document.activeElement;
        return [a.matches(arguments[0]), a.keptMark || null, a.closest('li').keptMark || null,
                document.querySelector('#agents li.card').keptMark || null]""", button) == [True, "focused", "row", None]
    assert console_errors(driver) == []
