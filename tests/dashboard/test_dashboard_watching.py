"""The dashboard (F-API-6) open on a session that another client drives over HTTP: it submits,
steers (a steer sent and a follow-up turned steer), aborts a streaming run and compacts the
context. After each step the page's timeline is the view's items (same ids, roles, texts and call
states, in order), its queue the view's queue, its status the view's, and no error is shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    CONFIG, Daemon, body_data, browser, console_errors, make_daemon, open_session, texts, wait_for)

TIMELINE = """return Array.from(document.querySelectorAll('#timeline > [data-item-id]'), (n) =>
  n.classList.contains('tool') ? [n.dataset.itemId, 'tool_call', n.dataset.status]
                               : [n.dataset.itemId, n.dataset.role, n.querySelector(':scope > .text').textContent]);"""


def shown(driver: Any) -> list[list[str]]:
    return driver.execute_script(TIMELINE)


def expected(view: dict[str, Any]) -> list[list[str]]:
    return [[it["id"], "tool_call", it["call"]["status"]] if it["role"] == "tool_call" and it.get("call")
            else [it["id"], it["role"], it.get("text") or ""] for it in view["items"]]


def page_is_view(driver: Any, d: Daemon, token: str, sid: str, settled: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Wait until the view satisfies ``settled`` and the page shows exactly that view."""
    def same() -> dict[str, Any] | None:
        status, view = d.request("GET", f"/sessions/{sid}", token=token)
        assert status == 200, view
        if not settled(view):
            return None
        queue = texts(driver, "#queue li.card .text")
        ok = (shown(driver) == expected(view) and body_data(driver, "sessionStatus") == view["status"]
              and queue == [q["text"] for q in view["queued"]])
        return view if ok else None

    view = wait_for(same, "the page showing the view")
    assert texts(driver, "#errors li") == [], texts(driver, "#errors li")
    assert texts(driver, "#timeline .msg.failed") == [], (texts(driver, "#timeline .msg.failed"), view["agents"])
    assert console_errors(driver) == []
    return view


def test_the_page_watching_a_session_shows_the_view_while_another_client_drives_it(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    config = json.loads(json.dumps(CONFIG))
    config["context"] = {"compaction": {"keepRecentTokens": 0}}
    d = make_daemon(config)
    driver = browser
    watcher, sid = open_session(driver, d, tmp_path, "dash-watch")
    other = d.pair("other-client", strong=True)

    def post(path: str, body: Any = None) -> Any:
        status, answer = d.request("POST", f"/sessions/{sid}{path}", {} if body is None else body, token=other)
        assert status in (200, 202), (path, status, answer)
        return answer

    idle = lambda v: v["status"] == "idle" and not v["queued"]  # noqa: E731

    # Submitted by the other client: the page shows the input and the answer.
    post("/inputs", {"requestId": "o1", "content": "hello from another client"})
    view = page_is_view(driver, d, other, sid, lambda v: idle(v) and len(v["items"]) == 2)
    assert view["items"][-1]["text"] == "(faux) You said: hello from another client"

    # A tool call, then a run that streams and waits: a steer and a follow-up turned steer queue.
    post("/inputs", {"requestId": "o2", "content": "/tool get_system_time {}"})
    page_is_view(driver, d, other, sid, lambda v: idle(v) and len(v["items"]) == 5)
    post("/inputs", {"requestId": "o3", "content": "stream slowly please"})
    wait_for(lambda: any("Streaming the first half" in t for t in texts(driver, "#timeline .msg.streaming .text")),
             "the streaming answer")
    post("/inputs", {"requestId": "o4", "content": "steer this way", "whenBusy": "steer"})
    post("/inputs", {"requestId": "o5", "content": "then this"})
    assert post("/inputs/o5/steer") == {"requestId": "o5", "status": "queued", "whenBusy": "steer"}
    view = page_is_view(driver, d, other, sid, lambda v: v["status"] == "running" and len(v["queued"]) == 2)
    assert [q["whenBusy"] for q in view["queued"]] == ["steer", "steer"]

    # Aborted by the other client: the cut answer stays, the queued inputs are withdrawn.
    answer = post("/abort")
    assert answer["aborted"] is True and sorted(answer["withdrawn"]) == ["o4", "o5"], answer
    view = page_is_view(driver, d, other, sid, idle)
    assert view["items"][-1]["role"] == "assistant" and view["items"][-1]["status"] == "aborted", view["items"][-1]
    assert not texts(driver, "#timeline .msg.streaming .text")

    # Compacted by the other client: the page shows the view after the compaction.
    compacted = post("/compact")
    assert compacted["summary"], compacted
    page_is_view(driver, d, other, sid, idle)
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "idle")

    # And the session goes on, seen the same way.
    post("/inputs", {"requestId": "o6", "content": "after the compaction"})
    view = page_is_view(driver, d, other, sid, lambda v: idle(v) and v["items"][-1]["text"].endswith("after the compaction"))
    assert int(body_data(driver, "duplicates") or 0) == 0
