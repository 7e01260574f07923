"""``GET /sessions/{id}?agentId=``: the view with a subagent's items (its conversation) instead of
the main agent's — the same shape, its window parameters and Working Context marks; the answer
repeats ``agentId`` only when asked. An agent the session does not have is 404
``AGENT_NOT_FOUND``, there and on the context routes; a malformed id is 400. A real daemon; the faux model starts the subagent
(``/tool subagent {...}``) whose own faux model calls a tool and answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import Daemon, error_of, wait_until

DELEGATE = "/tool subagent " + json.dumps({"prompt": "/tool get_system_time {}"})


async def _delegated(d: Daemon) -> tuple[str, str, str, str]:
    """A strong and a read-only credential, a session whose main agent ran one subagent (which
    made one tool call and answered), and that subagent's id."""
    strong = await d.pair("view-agent-strong", strong=True)
    reader = await d.pair("view-agent-reader", strong=False)
    sid = (await d.session(strong, (await d.project(strong))["id"]))["id"]
    await d.submit(strong, sid, "r1", DELEGATE)

    async def done() -> dict[str, Any] | None:
        v = await d.view(strong, sid)
        return v if v["status"] == "idle" and not v["queued"] and len(v["agents"]) == 2 else None

    v = await wait_until(done, what="the subagent's round finished")
    call = next(it for it in v["items"] if it["role"] == "tool_call")
    sub = v["agents"][1]["agentId"]
    assert (call["call"]["name"], sub) == ("subagent", "sub_" + call["call"]["callId"])  # (the dashboard relies on it)
    return strong, reader, sid, sub


async def _view(d: Daemon, token: str, sid: str, **params: Any) -> dict[str, Any]:
    r = await d.get(f"/sessions/{sid}", token, params=params)
    assert r.status_code == 200, r.text[:300]
    return r.json()


async def test_a_subagents_items_in_the_view_with_their_window_and_marks(daemon: Daemon) -> None:
    strong, reader, sid, sub = await _delegated(daemon)
    main = await _view(daemon, reader, sid)
    assert "agentId" not in main  # (the default answer is as it was)
    v = await _view(daemon, reader, sid, agentId=sub)  # (read trust is enough)
    assert v["agentId"] == sub
    # Its conversation: the prompt it was given, its call with the result inside, its answer.
    assert [it["role"] for it in v["items"]] == ["user", "tool_call", "assistant"], v["items"]
    assert v["items"][0]["text"] == "/tool get_system_time {}"
    assert (v["items"][1]["call"]["name"], v["items"][1]["result"]["status"]) == ("get_system_time", "ok")
    assert (v["itemsTotal"], v["itemsStart"]) == (3, 0)
    assert {it["context"] for it in v["items"]} == {"visible"} and v["items"][1]["result"]["context"] == "visible"
    # The rest of the view is the session's, as without agentId.
    assert {k: x for k, x in v.items() if k not in ("items", "itemsTotal", "itemsStart", "agentId")} == \
           {k: x for k, x in main.items() if k not in ("items", "itemsTotal", "itemsStart")}
    assert main["items"] != v["items"]
    # agentId=main is the default view's items, named.
    assert (await _view(daemon, reader, sid, agentId="main")) == main | {"agentId": "main"}

    # The window parameters take the agent's items.
    w = await _view(daemon, reader, sid, agentId=sub, itemsLimit=1)
    assert (w["items"], w["itemsStart"], w["itemsTotal"]) == (v["items"][2:], 2, 3)
    w = await _view(daemon, reader, sid, agentId=sub, itemsLimit=1, itemsBefore=1)
    assert (w["items"], w["itemsStart"]) == (v["items"][:1], 0)
    w = await _view(daemon, reader, sid, agentId=sub, itemsBefore=3)  # (at its end)
    assert w["items"] == v["items"]
    r = await daemon.get(f"/sessions/{sid}", reader, params={"agentId": sub, "itemsBefore": 4})  # (one past it)
    assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT"), r.text
    assert "itemsBefore 4" in r.json()["error"]["message"] and sub in r.json()["error"]["message"]

    # A hide through agentId is marked in that agent's view, and nowhere in the main agent's.
    first = v["items"][0]["id"]
    r = await daemon.post(f"/sessions/{sid}/context/hide", strong, {"itemIds": [first], "agentId": sub})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    after = await _view(daemon, reader, sid, agentId=sub)
    assert [it["context"] for it in after["items"]] == ["hidden", "visible", "visible"]
    assert (await _view(daemon, reader, sid))["items"] == main["items"]
    r = await daemon.post(f"/sessions/{sid}/context/unhide", strong, {"itemIds": [first], "agentId": sub})
    assert r.status_code == 200, r.text
    assert [it["context"] for it in (await _view(daemon, reader, sid, agentId=sub))["items"]] == ["visible"] * 3


async def test_an_unknown_agent_is_404_and_a_malformed_id_400(daemon: Daemon) -> None:
    strong, reader, sid, sub = await _delegated(daemon)
    for agent in ("sub_nope", "a" * 200):  # (a well-formed id at the length limit: looked for, not found)
        r = await daemon.get(f"/sessions/{sid}", reader, params={"agentId": agent})
        assert (r.status_code, error_of(r)) == (404, "AGENT_NOT_FOUND"), r.text[:300]
        assert sid in r.json()["error"]["message"] and agent[:20] in r.json()["error"]["message"]
    r = await daemon.get(f"/sessions/{sid}", reader, params={"agentId": "sub_nope", "itemsLimit": 1})
    assert error_of(r) == "AGENT_NOT_FOUND"
    r = await daemon.get("/sessions/ses_nope", reader, params={"agentId": sub})  # (the session first)
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND"), r.text[:300]


@pytest.mark.parametrize("query", ["agentId=", "agentId=" + "a" * 201, "agentId=a%20b", "agentId=a/b",
                                   "agentId=main&agentId=main"])
async def test_a_malformed_agent_id_is_400_naming_it(daemon: Daemon, query: str) -> None:
    token = await daemon.pair("view-agent-bad", strong=True)
    sid = (await daemon.session(token, (await daemon.project(token))["id"]))["id"]
    r = await daemon.get(f"/sessions/{sid}?{query}", token)
    assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT"), r.text[:300]
    assert "agentId" in r.json()["error"]["message"]


async def test_the_context_routes_answer_an_unknown_agent_as_the_view_does(daemon: Daemon) -> None:
    # The context routes answered an agent the session does not have with CONTEXT_ITEM_NOT_FOUND
    # (an edit's code for an item), the view with AGENT_NOT_FOUND: one mistake, one code now. An
    # item unknown within an agent the session has stays CONTEXT_ITEM_NOT_FOUND.
    strong, reader, sid, sub = await _delegated(daemon)
    sub_items = (await _view(daemon, reader, sid, agentId=sub))["items"]
    first, call = sub_items[0]["id"], sub_items[1]
    n = len(await daemon.events(strong, sid))
    edits = [("snip", {"itemIds": [first]}), ("snip", {"olderImages": True}),
             ("include", {"callId": call["call"]["callId"]}), ("include", {"itemId": call["result"]["itemId"]}),
             *((op, {"itemIds": [first]}) for op in ("unsnip", "hide", "unhide"))]
    for agent in ("sub_nope", "a" * 200):  # (a well-formed id at the length limit: looked for, not found)
        for op, body in edits:
            r = await daemon.post(f"/sessions/{sid}/context/{op}", strong, body | {"agentId": agent})
            assert (r.status_code, error_of(r)) == (404, "AGENT_NOT_FOUND"), (op, body, r.text[:300])
            message = r.json()["error"]["message"]
            assert sid in message and agent[:20] in message, message
        r = await daemon.get(f"/sessions/{sid}/context", reader, params={"agentId": agent})
        assert (r.status_code, error_of(r)) == (404, "AGENT_NOT_FOUND"), r.text[:300]
    for op, body in edits:  # (one past the limit: malformed, 400 naming agentId)
        r = await daemon.post(f"/sessions/{sid}/context/{op}", strong, body | {"agentId": "a" * 201})
        assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT"), (op, r.text[:300])
        assert "agentId" in r.json()["error"]["message"]
    # An agent the session has, an item or call it does not hold.
    for op, body in [("snip", {"itemIds": ["c999999"]}), ("include", {"callId": "call_nope"}),
                     ("include", {"itemId": "c999999"}),
                     *((op, {"itemIds": ["c999999"]}) for op in ("unsnip", "hide", "unhide"))]:
        for agent in (sub, "main"):
            r = await daemon.post(f"/sessions/{sid}/context/{op}", strong, body | {"agentId": agent})
            assert (r.status_code, error_of(r)) == (404, "CONTEXT_ITEM_NOT_FOUND"), (op, agent, r.text[:300])
    # The session first; nothing written by any of it.
    r = await daemon.post("/sessions/ses_nope/context/hide", strong, {"itemIds": [first], "agentId": "sub_nope"})
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND"), r.text[:300]
    assert len(await daemon.events(strong, sid)) == n


# A subagent whose conversation is its prompt, ``calls`` tool calls (each result inside its call's
# entry) and its answer: ``calls`` + 2 items. Its prompt is quoted in the main agent's input as
# JSON (``\"``), so the turn ``when`` it (with its quotes) answers the subagent alone.
def _long_subagent_script(calls: int) -> dict[str, Any]:
    return {"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": f'"{calls} calls"', "toolCalls": [{"name": "get_system_time", "arguments": {}}] * calls},
    ]}], "defaultModel": "faux/faux-1"}


@pytest.mark.parametrize("total", [200, 201])
async def test_a_subagents_items_are_paged_back_to_the_first_at_the_dashboards_window(daemon_factory: Any, total: int) -> None:
    # The dashboard reads a conversation's latest 200 items, then the pages before its first by
    # index (itemsBefore): at exactly 200 there is no earlier item, at 201 one, and the pages
    # joined are the whole conversation once each, as one read of it.
    d = await daemon_factory(config=_long_subagent_script(total - 2))
    token = await d.pair("view-agent-pages", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "/tool subagent " + json.dumps({"prompt": f'"{total - 2} calls"'}))
    v = await d.wait_idle(token, sid)
    (sub,) = [a["agentId"] for a in v["agents"] if a["agentId"] != "main"]
    whole = await _view(d, token, sid, agentId=sub)
    assert (whole["itemsTotal"], whole["itemsStart"], len(whole["items"])) == (total, 0, total)
    roles = [it["role"] for it in whole["items"]]
    assert roles == ["user"] + ["tool_call"] * (total - 2) + ["assistant"]

    latest = await _view(d, token, sid, agentId=sub, itemsLimit=200)
    assert (latest["itemsStart"], latest["items"]) == (total - 200, whole["items"][total - 200:])
    if total == 200:
        return
    before = await _view(d, token, sid, agentId=sub, itemsLimit=200, itemsBefore=latest["itemsStart"])
    assert (before["itemsStart"], before["items"]) == (0, whole["items"][:1])
    assert [it["id"] for it in before["items"] + latest["items"]] == [it["id"] for it in whole["items"]]
    # itemsBefore at the agent's total and one past it.
    assert (await _view(d, token, sid, agentId=sub, itemsLimit=200, itemsBefore=total))["items"] == latest["items"]
    r = await d.get(f"/sessions/{sid}", token, params={"agentId": sub, "itemsLimit": 200, "itemsBefore": total + 1})
    assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT"), r.text[:300]
    assert f"itemsBefore {total + 1}" in r.json()["error"]["message"]
