"""The dashboard's Agents pane gives each agent's own usage (the view's ``agents[].usage``), as
the Usage pane gives the session's: "–" for a count no request reported, "≥ N" for a total some
answered request left out. One real daemon and one headless Chromium, as in
``test_dashboard_browser.py`` (its helpers); every wait is for a condition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, attrs, body_data, browser, console_errors, daemon, open_session, submit, texts, wait_for)

LABELS = [("requests", "requests"), ("inputTokens", "input"), ("outputTokens", "output"),
          ("cacheReadTokens", "cache read"), ("cacheWriteTokens", "cache write"), ("reasoningTokens", "reasoning")]


def shown(usage: dict[str, Any]) -> str:
    def count(k: str) -> str:
        x = usage[k]
        if x is None:
            return "–"
        return ("≥ " if usage["unreported"].get(k, 0) > 0 else "") + str(x)

    return " · ".join(f"{label} {count(k)}" for k, label in LABELS)


def test_the_agents_pane_shows_each_agents_usage(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    driver = browser
    token, session_id = open_session(driver, daemon, tmp_path, "dash-agent-usage")
    # (the faux model of the subagent calls the tool its prompt names, then answers)
    submit(driver, "/tool subagent " + json.dumps({"prompt": "/tool get_system_time {}"}))
    # (idle alone is also what the session is before the input reaches it: wait for its round's end)
    def round_done() -> bool:
        v = daemon.request("GET", f"/sessions/{session_id}", token=token)[1]
        return v["status"] == "idle" and not v["queued"] and len(v["agents"]) > 1
    wait_for(round_done, "the idle session with its subagent in the daemon's view")
    status, view = daemon.request("GET", f"/sessions/{session_id}", token=token)
    assert status == 200
    assert [a["role"] for a in view["agents"]] == ["main", "subagent"]
    assert all(a["usage"]["requests"] == 2 for a in view["agents"]), view["agents"]
    want = [shown(a["usage"]) for a in view["agents"]]
    assert "input –" not in want[1] and "cache read –" in want[1]  # (faux: counts, no cache counts)
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    wait_for(lambda: texts(driver, "#agents .usage") == want, "each agent's usage in the Agents pane")
    # The Usage pane's totals are the sum over the agents.
    total = view["usage"]
    assert total["requests"] == 4
    assert total["inputTokens"] == sum(a["usage"]["inputTokens"] for a in view["agents"])
    assert texts(driver, "#usage dd")[:2] == ["4", str(total["inputTokens"])]
    # Every input token, cached or not: a line of the Usage pane, and each agent's in its usage
    # line's title. A turn scripted as Anthropic reports one (7 input, 900 cached, 907 in all)
    # makes the main agent's total differ from its input count.
    submit(driver, "count a cached input")
    def counted() -> bool:
        v = daemon.request("GET", f"/sessions/{session_id}", token=token)[1]
        return v["status"] == "idle" and not v["queued"] and v["usage"]["requests"] == 5
    wait_for(counted, "the scripted answer counted in the daemon's view")
    view = daemon.request("GET", f"/sessions/{session_id}", token=token)[1]
    total, main = view["usage"], view["agents"][0]["usage"]
    assert total["totalInputTokens"] == total["inputTokens"] + 900
    assert main["totalInputTokens"] == main["inputTokens"] + 900
    shown_total = str(total["totalInputTokens"])
    wait_for(lambda: [x for [x] in attrs(driver, "#usage dt, #usage dd", "textContent")][4:6]
             == ["input, cached or not", shown_total], "the session's total input in the Usage pane")
    assert texts(driver, "#usage dd")[1] == str(total["inputTokens"])  # (input alone, as before)
    wait_for(lambda: attrs(driver, "#agents .usage", "title") == [
        [f"input, cached or not: {a['usage']['totalInputTokens']}"] for a in view["agents"]],
        "each agent's total input in its usage line's title")
    assert not console_errors(driver)
