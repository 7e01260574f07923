"""Subagents (F-ACT-5) and the history tools (F-TOOL-7) a third time, as a user drives them: a
real daemon on loopback, the faux model's calls (``/tool NAME {json}`` as an input or as a
subagent's prompt), the snip route and ``GET /history/items/{id}``."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Daemon, run_tool

CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": []}], "defaultModel": "faux/faux-1"}


def tool_line(name: str, args: dict[str, Any]) -> str:
    return f"/tool {name} {json.dumps(args)}"


async def sub_finished(d: Daemon, token: str, sid: str, request_id: str, name: str,
                       args: dict[str, Any]) -> dict[str, Any]:
    """Have the main agent start a subagent that calls ``name`` once; that call's ``tool.finished``."""
    await d.submit(token, sid, request_id, tool_line("subagent", {"prompt": tool_line(name, args)}))
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [parent] = [e for e in events if e["kind"] == "tool.finished" and e["agent_id"] == "main"][-1:]
    assert parent["body"]["status"] == "ok", parent["body"]
    sub = parent["body"]["structured_content"]["agent_id"]
    [body] = [e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] == sub]
    return body


async def test_a_snipped_item_stays_in_the_full_context_the_history_tools_read(daemon_factory) -> None:
    """A snip edits the Working Context only (F-CTX-1, F-CTX-3): the item is still found by search
    and read whole, by the route, by the main agent's tool and by a subagent's."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    await d.submit(token, sid, "r1", "the capybara swims at dusk")
    await d.wait_idle(token, sid)
    [item] = [it for it in (await d.view(token, sid))["items"]
              if it["role"] == "user" and it["text"] == "the capybara swims at dusk"]
    resp = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [item["id"]]})
    assert resp.status_code == 200, resp.text
    working = await d.get(f"/sessions/{sid}/context", token)
    assert working.status_code == 200, working.text
    assert {it["id"]: it["context"] for it in working.json()["items"]}[item["id"]] == "snipped"

    resp = await d.post("/history/search", token, {"projectId": pid, "query": "capybara"})
    assert resp.status_code == 200, resp.text
    assert item["id"] in {r["contextItemId"] for r in resp.json()["results"]}
    resp = await d.get(f"/history/items/{item['id']}", token)
    assert resp.status_code == 200 and resp.json()["text"] == "the capybara swims at dusk", resp.text

    body = await run_tool(d, token, sid, "r2", "history_read", {"context_item_id": item["id"]})
    assert body["status"] == "ok", body
    assert "the capybara swims at dusk" in body["content"][0]["text"], body
    body = await sub_finished(d, token, sid, "r3", "history_read", {"context_item_id": item["id"]})
    assert body["status"] == "ok", body
    assert "the capybara swims at dusk" in body["content"][0]["text"], body


async def test_a_subagents_search_of_64_words_runs_and_of_65_is_too_long(daemon_factory) -> None:
    """The word cap (``MAX_QUERY_WORDS`` = 64) holds for a subagent's call as for the route."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    words = [f"w{n}" for n in range(32)]
    at_cap = " ".join(f'"{w} {w}x"' for w in words)  # 32 distinct terms, 64 words
    past = at_cap.replace('"w0 w0x"', '"w0 w0x w0y"')  # the same 32 terms, 65 words
    resp = await d.post("/history/search", token, {"projectId": pid, "query": at_cap})
    assert resp.status_code == 200, resp.text
    body = await sub_finished(d, token, sid, "r1", "history_search", {"query": at_cap})
    assert body["status"] == "ok", body
    body = await sub_finished(d, token, sid, "r2", "history_search", {"query": past})
    assert (body["status"], body["error_code"]) == ("error", "QUERY_TOO_LONG"), body
    assert "65" in body["content"][0]["text"], body


async def test_a_read_of_an_item_of_a_deleted_session_is_not_found_by_a_subagent(daemon_factory) -> None:
    """A deleted session's items are hidden from history: the route and a subagent's
    ``history_read`` both answer not found, naming the id."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    gone = (await d.session(token, pid))["id"]
    await d.submit(token, gone, "r1", "the tapir naps")
    await d.wait_idle(token, gone)
    [item] = [it["id"] for it in (await d.view(token, gone))["items"] if it["role"] == "user"]
    assert (await d.get(f"/history/items/{item}", token)).status_code == 200
    assert (await d.request("DELETE", f"/sessions/{gone}", token)).status_code == 200
    resp = await d.get(f"/history/items/{item}", token)
    assert resp.status_code == 404, resp.text
    code = resp.json()["error"]["code"]
    body = await sub_finished(d, token, sid, "r2", "history_read", {"context_item_id": item})
    assert (body["status"], body["error_code"]) == ("error", code), body
    assert item in body["content"][0]["text"], body


TWO = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "two at once", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBWAIT one"}},
                                          {"name": "subagent", "arguments": {"prompt": "SUBWAIT two"}}]},
    {"when": "SUBWAIT", "toolCalls": [{"name": "sleep_milliseconds", "arguments": {"milliseconds": 600000}}]},
]}], "defaultModel": "faux/faux-1"}


async def test_an_abort_while_the_first_of_two_subagent_calls_runs_starts_no_second(daemon_factory) -> None:
    """Two ``subagent`` calls in one answer run one after the other; an abort during the first ends
    it and its subagent, and the second never starts a subagent, yet its call is settled too."""
    from .conftest import wait_until

    d = await daemon_factory(config=TWO)
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "two at once")

    async def sleeping():
        return [e for e in await d.events(token, sid)
                if e["kind"] == "tool.started" and e["agent_id"].startswith("sub_")]

    await wait_until(sleeping, what="the first subagent's call")
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True
    events = await d.events(token, sid)
    assert len([e for e in events if e["kind"] == "agent.started"]) == 1
    view = await d.view(token, sid)
    assert view["status"] == "idle"
    assert [(a["role"], a["status"]) for a in view["agents"]] == [("main", "idle"), ("subagent", "aborted")]
    calls = [it["call"] for it in view["items"] if it["role"] == "tool_call"]
    assert [c["name"] for c in calls] == ["subagent", "subagent"]
    assert all(c["status"] not in ("running", "pending") for c in calls), calls
    # nothing runs on: a later input is answered
    await d.submit(token, sid, "r2", "hello")
    await d.wait_idle(token, sid)
    assert (await d.view(token, sid))["status"] == "idle"


async def test_a_subagent_calling_a_tool_outside_its_list_is_refused(daemon_factory) -> None:
    """A subagent given ``tools: ["get_system_time"]`` that calls ``history_search`` anyway (a
    model may name any tool) is refused at execution; no search runs."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    prompt = tool_line("history_search", {"query": "anything"})
    await d.submit(token, sid, "r1", tool_line("subagent", {"prompt": prompt, "tools": ["get_system_time"]}))
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [started] = [e for e in events if e["kind"] == "agent.started"]
    assert started["body"]["tools"] == ["get_system_time"]
    sub = started["agent_id"]
    [body] = [e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] == sub]
    assert (body["name"], body["status"]) == ("history_search", "error"), body
    assert body["error_code"] == "TOOL_UNKNOWN", body  # as decided for a tool outside the list
    assert "history_search" in body["content"][0]["text"], body
    assert "results" not in (body.get("structured_content") or {}), body


COMPACTING = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                             "script": []}],
              "defaultModel": "faux/m1", "context": {"compaction": {"auto": False, "keepRecentTokens": 1}}}


async def test_a_subagent_started_after_a_compaction_reads_and_finds_what_it_replaced(daemon_factory) -> None:
    """Items a compaction cut from the main agent's Working Context stay in the Full Context
    (F-CTX-1): a subagent started afterwards finds them and reads them whole, and its parent's
    replaced subagent call and the subagent's own items stay found too."""
    d = await daemon_factory(config=COMPACTING)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    await d.submit(token, sid, "r1", "the pangolin curls up")
    await d.wait_idle(token, sid)
    first_sub = await sub_finished(d, token, sid, "r2", "get_system_time", {})
    assert first_sub["status"] == "ok", first_sub
    await d.submit(token, sid, "r3", "and then")
    await d.wait_idle(token, sid)
    [item] = [it["id"] for it in (await d.view(token, sid))["items"]
              if it["role"] == "user" and it["text"] == "the pangolin curls up"]
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    replaced = r.json()["replacedItemIds"]
    assert item in replaced

    read = await sub_finished(d, token, sid, "r4", "history_read", {"context_item_id": item})
    assert read["status"] == "ok", read
    assert "the pangolin curls up" in read["content"][0]["text"], read
    searched = await sub_finished(d, token, sid, "r5", "history_search", {"query": "pangolin"})
    assert searched["status"] == "ok", searched
    assert item in {r["context_item_id"] for r in searched["structured_content"]["results"]}, searched
    # the first subagent's items (its call of the time) are found after the compaction
    resp = await d.post("/history/search", token, {"projectId": pid, "query": "get_system_time", "limit": 100})
    assert resp.status_code == 200, resp.text
    assert any(r["agentId"].startswith("sub_") and r["role"] == "tool_call" for r in resp.json()["results"]), resp.text


async def test_a_subagent_gets_nothing_of_another_project_by_its_ids(daemon_factory) -> None:
    """Other projects are never returned (F-TOOL-7): a subagent reading an item of another project,
    or paging after one, is refused as the main agent is, and learns nothing of its text."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    other = (await d.session(token, (await d.project(token, "other"))["id"]))["id"]
    await d.submit(token, other, "r1", "the secret axolotl")
    await d.wait_idle(token, other)
    [foreign] = [it["id"] for it in (await d.view(token, other))["items"] if it["role"] == "user"]

    main = await run_tool(d, token, sid, "m1", "history_read", {"context_item_id": foreign})
    sub = await sub_finished(d, token, sid, "s1", "history_read", {"context_item_id": foreign})
    for body in (main, sub):
        assert body["status"] == "error" and body["error_code"], body
        assert "axolotl" not in json.dumps(body), body
        assert foreign in body["content"][0]["text"], body
    assert sub["error_code"] == main["error_code"], (main, sub)

    main = await run_tool(d, token, sid, "m2", "history_search", {"query": "axolotl",
                                                                  "after_context_item_id": foreign})
    sub = await sub_finished(d, token, sid, "s2", "history_search", {"query": "axolotl",
                                                                     "after_context_item_id": foreign})
    for body in (main, sub):
        assert body["status"] == "error" and body["error_code"], body
        assert "after_context_item_id" in body["content"][0]["text"], body
    assert sub["error_code"] == main["error_code"], (main, sub)
    resp = await d.post("/history/search", token, {"projectId": pid, "query": "axolotl",
                                                   "afterContextItemId": foreign})
    assert resp.status_code in (400, 404) and resp.json()["error"]["code"] == main["error_code"], resp.text


async def test_a_subagents_search_at_the_byte_and_limit_bounds_and_one_past(daemon_factory) -> None:
    """The README's bounds of a search (a query of at most 4096 bytes of UTF-8, ``limit`` 1–100)
    hold for a subagent's ``history_search`` as for ``POST /history/search``, with the same codes."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    at_bytes = "é" * 2048  # 4096 bytes, one word
    cases = [({"query": at_bytes}, None), ({"query": at_bytes + "a"}, "QUERY_TOO_LONG"),
             ({"query": "x", "limit": 100}, None), ({"query": "x", "limit": 1}, None),
             ({"query": "x", "limit": 101}, "route"), ({"query": "x", "limit": 0}, "route")]
    for n, (args, expected) in enumerate(cases):
        resp = await d.post("/history/search", token, {"projectId": pid, **args})
        body = await sub_finished(d, token, sid, f"r{n}", "history_search", args)
        if expected is None:
            assert resp.status_code == 200, (args, resp.text)
            assert body["status"] == "ok", (args, body)
            continue
        assert resp.status_code == 400, (args, resp.text)
        code = resp.json()["error"]["code"]
        if expected != "route":
            assert code == expected, resp.text
        assert (body["status"], body["error_code"]) == ("error", code), (args, body)
        if "limit" in args:
            assert "limit" in body["content"][0]["text"], body


async def test_a_subagent_call_with_an_argument_it_does_not_take_names_it(daemon_factory) -> None:
    """``subagent`` takes ``prompt`` and ``tools`` only (a subagent runs on its session's model). A
    call adding ``model`` was refused as "subagent takes only 'prompt' and 'tools'", which did not
    say which argument was wrong; it now names it, as the other tools' refusals do."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "subagent", {"prompt": "tell the time", "model": "faux/other"})
    assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
    text = body["content"][0]["text"]
    assert "'model'" in text and "'prompt'" in text and "'tools'" in text, text
    assert not [e for e in await d.events(token, sid) if e["kind"] == "agent.started"]


async def test_a_cursor_from_a_search_pages_on_for_a_subagent_after_new_items(daemon_factory) -> None:
    """A ``next_after_context_item_id`` the main agent got stays usable once new items match: a
    subagent paging on with it never gets the first page's items again, and the pages together
    hold each item at most once."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("c", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    for n in range(3):
        await d.submit(token, sid, f"k{n}", f"kudu number {n}")
        await d.wait_idle(token, sid)
    first = await run_tool(d, token, sid, "p1", "history_search", {"query": "kudu", "limit": 2})
    assert first["status"] == "ok", first
    page1 = [r["context_item_id"] for r in first["structured_content"]["results"]]
    cursor = first["structured_content"]["next_after_context_item_id"]
    assert len(page1) == 2 and cursor, first
    await d.submit(token, sid, "k9", "kudu number nine")
    await d.wait_idle(token, sid)
    second = await sub_finished(d, token, sid, "p2", "history_search",
                                {"query": "kudu", "limit": 100, "after_context_item_id": cursor})
    assert second["status"] == "ok", second
    page2 = [r["context_item_id"] for r in second["structured_content"]["results"]]
    assert page2 and not set(page1) & set(page2), (page1, page2)
    assert len(page2) == len(set(page2))
