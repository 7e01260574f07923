"""Subagents (F-ACT-5) and the history tools (F-TOOL-7) driven as a user drives them: a real
daemon on loopback, the faux model's calls (``/tool NAME {json}`` as an input, or as a subagent's
prompt), ``POST /history/search`` and ``GET /history/items/{id}``."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Daemon, error_of, run_tool

CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "delegate the time", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBTIME okapi"}}]},
    {"when": "SUBTIME", "toolCalls": [{"name": "get_system_time", "arguments": {}}]},
]}], "defaultModel": "faux/faux-1"}


def tool_line(name: str, args: dict[str, Any]) -> str:
    """The input (or subagent prompt) on which the faux model calls ``name`` once."""
    return f"/tool {name} {json.dumps(args)}"


async def delegate(d: Daemon, token: str, sid: str, request_id: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """Send ``text``, on which the main agent starts one subagent; the subagent's id and its events."""
    await d.submit(token, sid, request_id, text)
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    body = [e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] == "main"][-1]
    assert (body["name"], body["status"]) == ("subagent", "ok"), body
    sub = body["structured_content"]["agent_id"]
    return sub, [e for e in events if e["agent_id"] == sub]


def started_with(prompt: str) -> str:
    """The input on which the main agent starts a subagent with ``prompt``."""
    return tool_line("subagent", {"prompt": prompt})


async def items_of(d: Daemon, token: str, sid: str, agent_id: str) -> list[dict[str, Any]]:
    resp = await d.get(f"/sessions/{sid}", token, params={"agentId": agent_id})
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]


async def found(d: Daemon, token: str, pid: str, query: str, **filters: Any) -> list[dict[str, Any]]:
    resp = await d.post("/history/search", token, {"projectId": pid, "query": query, "limit": 100, **filters})
    assert resp.status_code == 200, resp.text
    return resp.json()["results"]


async def test_a_subagents_search_leaves_out_its_own_call_and_its_items_belong_to_the_run(daemon_factory) -> None:
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    await d.submit(token, sid, "r1", "the wapiti grazes")
    await d.wait_idle(token, sid)
    searching = started_with(tool_line("history_search", {"query": "wapiti"}))
    sub, sub_events = await delegate(d, token, sid, "r2", searching)

    [searched] = [e["body"] for e in sub_events if e["kind"] == "tool.finished"]
    assert (searched["name"], searched["status"]) == ("history_search", "ok"), searched
    results = searched["structured_content"]["results"]
    sub_items = await items_of(d, token, sid, sub)
    [own_call] = [it["id"] for it in sub_items if it["role"] == "tool_call"]
    [prompt] = [it["id"] for it in sub_items if it["role"] == "user"]
    main_items = (await d.view(token, sid))["items"]
    [delegated] = [it["id"] for it in main_items if it["role"] == "tool_call"]
    first = next(it["id"] for it in main_items if it["role"] == "user" and it["text"] == "the wapiti grazes")
    # the call making the search (which holds the query) is left out, as the main agent's own is;
    # the subagent's prompt and its parent's call, made before it, are found
    ids = {r["context_item_id"] for r in results}
    assert own_call not in ids
    assert {prompt, delegated, first} <= ids

    # A subagent works inside its parent's run: its events, and so its items, carry that run's task.
    task = [e["task_id"] for e in await d.events(token, sid) if e["kind"] == "task.started"][1]  # input r2's
    assert {e["task_id"] for e in sub_events} == {task}
    assert not [e for e in sub_events if e["kind"] == "task.started"]
    by_task = await found(d, token, pid, "wapiti", taskId=task)
    assert {r["agentId"] for r in by_task} == {"main", sub}
    assert {r["contextItemId"] for r in by_task} >= {prompt, delegated, own_call}
    assert first not in {r["contextItemId"] for r in by_task}  # the earlier run's input
    assert {r["agentId"] for r in await found(d, token, pid, "wapiti", agentId=sub)} == {sub}


async def test_a_fork_made_while_a_subagent_ran_finds_its_items_up_to_the_fork_only(daemon_factory) -> None:
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    sub, sub_events = await delegate(d, token, sid, "r1", "delegate the time")
    [started] = [e for e in sub_events if e["kind"] == "tool.started"]
    resp = await d.post(f"/sessions/{sid}/fork", token, {"seq": started["seq"]})
    assert resp.status_code == 201, resp.text
    fork = resp.json()["id"]

    # the subagent's prompt and call are in the fork's Full Context; the result it had after the
    # fork's seq (the time it was told) is the source's only
    [prompt] = await found(d, token, pid, "okapi", sessionId=fork, agentId=sub)
    [call] = await found(d, token, pid, "get_system_time", sessionId=fork, agentId=sub)
    assert (prompt["role"], call["role"]) == ("user", "tool_call")
    assert await found(d, token, pid, "unix_ms", sessionId=fork) == []
    after = await found(d, token, pid, "unix_ms", sessionId=sid, agentId=sub)
    assert sorted(r["role"] for r in after) == ["assistant", "tool_result"]  # the time, and its answer
    resp = await d.get(f"/history/items/{prompt['contextItemId']}", token)
    assert resp.status_code == 200 and resp.json()["text"] == "SUBTIME okapi", resp.text
    # the fork's own subagent entry says how it was left
    agents = (await d.view(token, fork))["agents"]
    assert [(a["agentId"], a["status"]) for a in agents] == [("main", "idle"), (sub, "interrupted")]


async def test_the_history_search_tool_names_a_session_the_project_does_not_have_as_the_route_does(
        daemon_factory) -> None:
    """``POST /history/search`` answers a ``sessionId`` the project does not have 404
    ``SESSION_NOT_FOUND``; the ``history_search`` tool answered the same filter as a search that
    found nothing, so a model that mistook a session id learned nothing of it."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    other_pid = (await d.project(token, "other"))["id"]
    others = (await d.session(token, other_pid))["id"]
    await d.submit(token, others, "r1", "the wapiti of the other project")
    await d.wait_idle(token, others)
    gone = (await d.session(token, pid))["id"]
    assert (await d.request("DELETE", f"/sessions/{gone}", token)).status_code == 200

    for n, session in enumerate((others, "ses_none")):
        resp = await d.post("/history/search", token, {"projectId": pid, "query": "wapiti", "sessionId": session})
        assert resp.status_code == 404 and error_of(resp) == "SESSION_NOT_FOUND", resp.text
        body = await run_tool(d, token, sid, f"m{n}", "history_search", {"query": "wapiti", "session_id": session})
        text = body["content"][0]["text"]
        assert (body["status"], body["error_code"]) == ("error", "SESSION_NOT_FOUND"), body
        assert text.startswith("SESSION_NOT_FOUND: ") and repr(session) in text and repr(pid) in text, text
        # a subagent's call is checked as its parent's is
        _sub, sub_events = await delegate(d, token, sid, f"s{n}", started_with(tool_line(
            "history_search", {"query": "wapiti", "session_id": session})))
        [refused] = [e["body"] for e in sub_events if e["kind"] == "tool.finished"]
        assert (refused["status"], refused["error_code"]) == ("error", "SESSION_NOT_FOUND"), refused

    # the project's own sessions, a deleted one among them (it finds nothing), are searched as before
    for n, session in enumerate((sid, gone)):
        body = await run_tool(d, token, sid, f"k{n}", "history_search", {"query": "wapiti", "session_id": session})
        assert body["status"] == "ok", body
        ids = {r["session_id"] for r in body["structured_content"]["results"]}
        assert ids == ({sid} if session == sid else set()), body


async def test_the_history_search_tool_checks_every_id_before_the_session_as_the_route_does(daemon_factory) -> None:
    """A malformed id beside a session the project does not have: the route answers 400
    ``INVALID_ARGUMENT`` (it parses every id first); the tool answered ``SESSION_NOT_FOUND``."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    for n, (key, route_key) in enumerate((("agent_id", "agentId"), ("task_id", "taskId"),
                                          ("after_context_item_id", "afterContextItemId"))):
        resp = await d.post("/history/search", token, {"projectId": pid, "query": "wapiti", "sessionId": "ses_none",
                                                       route_key: "bad id!"})
        assert resp.status_code == 400 and error_of(resp) == "INVALID_ARGUMENT", resp.text
        body = await run_tool(d, token, sid, f"m{n}", "history_search",
                              {"query": "wapiti", "session_id": "ses_none", key: "bad id!"})
        assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
        assert key in body["content"][0]["text"], body
    # a limit that is no integer likewise
    body = await run_tool(d, token, sid, "m9", "history_search", {"query": "wapiti", "session_id": "ses_none",
                                                                  "limit": "ten"})
    assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
