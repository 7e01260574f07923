"""F-CTX-3 and F-TOOL-7 over HTTP: ``POST /sessions/{id}/context/hide``, ``…/unhide`` and
``…/unsnip``. A hidden item leaves the Working Context and history (``POST /history/search``,
``GET /history/items/{id}``, the ``history_search`` and ``history_read`` tools) and comes back
when unhidden — as the daemon keeps it, after a restart and after ``lens log rebuild``."""

from __future__ import annotations

from typing import Any

from events.store import Draft, open_store
from events.types import SessionQuarantined
from runtime.working_context import MAX_EDIT_IDS

from .conftest import BUSY, Daemon, error_of, run_tool, stop_daemon
from .rebuild_check import projections_against_a_rebuild
from .test_history_forks import forked, search

CONFIG = {
    "providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                   "script": [{"when": "call a tool", "toolCalls": [{"name": "get_system_time", "arguments": {}}]}]}],
    "defaultModel": "faux/m1",
}


async def _answered(d: Daemon) -> tuple[str, str, str, dict[str, Any]]:
    """A strong credential, a project and a session with an input saying ``wombat`` and one that
    made a tool call; the view."""
    token = await d.pair("hide-client", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    await d.submit(token, sid, "r1", "my wombat pasted by mistake")
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "r2", "call a tool")
    await d.wait_idle(token, sid)
    return token, pid, sid, await d.view(token, sid)


async def _found(d: Daemon, token: str, pid: str) -> set[str]:
    return {r["contextItemId"] for r in await search(d, token, pid, "wombat")}


async def _marks(d: Daemon, token: str, sid: str) -> dict[str, str]:
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    return {x["id"]: x["context"] for x in context["items"]}


async def test_hide_and_unhide_leave_and_rejoin_the_context_and_history(daemon_factory, tmp_path):
    d = await daemon_factory(config=CONFIG)
    token, pid, sid, view = await _answered(d)
    reader = await d.pair("hide-reader")
    user = view["items"][0]
    assert user["role"] == "user"
    call = next(v for v in view["items"] if v["role"] == "tool_call")
    result_id = call["result"]["itemId"]
    assert user["id"] in await _found(d, reader, pid)

    # Read-only credentials may not edit.
    for op in ("hide", "unhide", "unsnip"):
        r = await d.post(f"/sessions/{sid}/context/{op}", reader, {"itemIds": [user["id"]]})
        assert (r.status_code, error_of(r)) == (403, "FORBIDDEN"), op

    # Hide the user's input: out of the Working Context, of the view's marks and of history.
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [user["id"]]})
    assert r.status_code == 200, r.text
    hid = r.json()
    assert (hid["op"], hid["changed"], hid["itemIds"]) == ("hide", True, [user["id"]])
    assert hid["items"] == [{"id": user["id"], "context": "hidden"}] and isinstance(hid["seq"], int)
    edits = [e["body"] for e in await d.events(token, sid) if e["kind"] == "context.edited"]
    assert edits == [{"op": "hide", "item_ids": [user["id"]], "reason": "user"}]
    assert user["id"] not in (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    assert (await d.view(token, sid))["items"][0]["context"] == "hidden"
    assert user["id"] not in await _found(d, reader, pid)
    r = await d.get(f"/history/items/{user['id']}", reader)
    assert (r.status_code, error_of(r)) == (404, "HISTORY_ITEM_NOT_FOUND")
    # Twice: nothing more to hide, nothing recorded.
    n = len(await d.events(token, sid))
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [user["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is False and r.json()["seq"] is None, r.text
    assert r.json()["itemIds"] == [] and len(await d.events(token, sid)) == n

    # The model's own tools do not find it either (a new run: its own input says wombat too).
    body = await run_tool(d, token, sid, "t1", "history_search", {"query": "pasted"})
    assert user["id"] not in {x["context_item_id"] for x in body["structured_content"]["results"]}
    body = await run_tool(d, token, sid, "t2", "history_read", {"context_item_id": user["id"]})
    assert body["status"] == "error" and "HISTORY_ITEM_NOT_FOUND" in str(body), body

    # Hiding a tool call takes its result with it (a lone result would be malformed anyway, and
    # hidden from history it is not to be found through its result).
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [call["id"]]})
    assert r.status_code == 200, r.text
    assert r.json()["items"] == [{"id": call["id"], "context": "hidden"}, {"id": result_id, "context": "hidden"}]
    working = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    assert call["id"] not in working and result_id not in working
    # An include of the hidden result: refused, nothing recorded.
    n = len(await d.events(token, sid))
    r = await d.post(f"/sessions/{sid}/context/include", token, {"itemId": result_id})
    assert (r.status_code, error_of(r)) == (409, "CONTEXT_ITEM_HIDDEN"), r.text
    r = await d.post(f"/sessions/{sid}/context/unsnip", token, {"itemIds": [result_id]})
    assert (r.status_code, error_of(r)) == (409, "CONTEXT_ITEM_HIDDEN"), r.text
    assert len(await d.events(token, sid)) == n
    # Unhiding the result alone: it is back in history; in the Working Context it waits for its call.
    r = await d.post(f"/sessions/{sid}/context/unhide", token, {"itemIds": [result_id]})
    assert r.json()["items"] == [{"id": result_id, "context": "removed"}], r.text
    marks = await _marks(d, token, sid)
    assert (marks[call["id"]], marks[result_id]) == ("hidden", "removed")
    # Its include (by item or by call id) and its unsnip would change nothing in the Working
    # Context (the result waits for its call): refused naming the hidden call, nothing recorded.
    n = len(await d.events(token, sid))
    for op, body in [("include", {"itemId": result_id}), ("include", {"callId": call["call"]["callId"]}),
                     ("unsnip", {"itemIds": [result_id]})]:
        r = await d.post(f"/sessions/{sid}/context/{op}", token, body)
        assert (r.status_code, error_of(r)) == (409, "CONTEXT_ITEM_HIDDEN"), (op, r.text)
        assert f"the call {call['id']} of {result_id} was hidden" in r.json()["error"]["message"], r.text
    assert len(await d.events(token, sid)) == n

    # Hiding a result alone keeps its call, with a placeholder result (well formed).
    r = await d.post(f"/sessions/{sid}/context/unhide", token, {"itemIds": [call["id"]]})
    assert r.json()["itemIds"] == [call["id"]], r.text
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [result_id]})
    assert r.json()["itemIds"] == [result_id], r.text
    working = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    assert call["id"] in working and result_id in working  # (the placeholder's place)
    marks = await _marks(d, token, sid)
    assert (marks[call["id"]], marks[result_id]) == ("visible", "hidden")

    # Unsnip: a snipped pair comes back whole from either side.
    r = await d.post(f"/sessions/{sid}/context/unhide", token, {"itemIds": [result_id]})
    assert r.json()["changed"] is True, r.text
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [call["id"], result_id]})
    assert r.json()["changed"] is True, r.text
    r = await d.post(f"/sessions/{sid}/context/unsnip", token, {"itemIds": [result_id]})
    assert r.status_code == 200, r.text
    assert r.json()["op"] == "unsnip" and r.json()["items"] == [{"id": call["id"], "context": "visible"},
                                                                 {"id": result_id, "context": "visible"}]
    r = await d.post(f"/sessions/{sid}/context/unsnip", token, {"itemIds": [result_id]})
    assert r.json()["changed"] is False, r.text

    # Bad requests: stable codes, nothing recorded; the id limit is snip's.
    n = len(await d.events(token, sid))
    for op in ("hide", "unhide", "unsnip"):
        for body, status, code in [
            ({"itemIds": ["c999999"]}, 404, "CONTEXT_ITEM_NOT_FOUND"),
            ({"itemIds": [user["id"], "c999999"]}, 404, "CONTEXT_ITEM_NOT_FOUND"),
            ({"itemIds": [user["id"]], "agentId": "agent_nope"}, 404, "AGENT_NOT_FOUND"),  # (as the view answers)
            ({"itemIds": []}, 422, "VALIDATION_FAILED"),
            ({}, 422, "VALIDATION_FAILED"),
            ({"itemIds": ["bad id"]}, 400, "INVALID_ARGUMENT"),
            ({"itemIds": [user["id"]], "extra": 1}, 422, "VALIDATION_FAILED"),
            ({"itemIds": [user["id"]] * (MAX_EDIT_IDS + 1)}, 422, "VALIDATION_FAILED"),
            ({"itemIds": ["c999999"] * MAX_EDIT_IDS}, 404, "CONTEXT_ITEM_NOT_FOUND"),  # (at the limit: read)
        ]:
            r = await d.post(f"/sessions/{sid}/context/{op}", token, body)
            assert (r.status_code, error_of(r)) == (status, code), (op, str(body)[:80], r.text)
        r = await d.post(f"/sessions/ses_nope/context/{op}", token, {"itemIds": ["c1"]})
        assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND")
    assert len(await d.events(token, sid)) == n
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [user["id"]] * MAX_EDIT_IDS})
    assert r.status_code == 200 and r.json()["changed"] is False, r.text  # (at the limit; already hidden)

    # Unhide: back in the Working Context and in history, the route and the tools alike.
    r = await d.post(f"/sessions/{sid}/context/unhide", token, {"itemIds": [user["id"]]})
    assert r.json()["items"] == [{"id": user["id"], "context": "visible"}], r.text
    assert user["id"] in (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    assert user["id"] in await _found(d, reader, pid)
    assert (await d.get(f"/history/items/{user['id']}", reader)).json()["text"].startswith("my wombat")
    body = await run_tool(d, token, sid, "t3", "history_read", {"context_item_id": user["id"]})
    assert body["status"] == "ok" and body["structured_content"]["context_item_id"] == user["id"], body

    # Hidden again: so it stays after a rebuild from zero and after a restart.
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [user["id"]]})
    assert r.json()["changed"] is True, r.text
    assert user["id"] not in await _found(d, reader, pid)
    assert await projections_against_a_rebuild(tmp_path, d.data_dir.relative_to(tmp_path), "hidden") == []
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    assert user["id"] not in await _found(d2, reader, pid)
    r = await d2.get(f"/history/items/{user['id']}", reader)
    assert (r.status_code, error_of(r)) == (404, "HISTORY_ITEM_NOT_FOUND")
    r = await d2.post(f"/sessions/{sid}/context/unhide", token, {"itemIds": [user["id"]]})
    assert r.json()["changed"] is True, r.text
    assert user["id"] in await _found(d2, reader, pid)
    assert await projections_against_a_rebuild(tmp_path, d2.data_dir.relative_to(tmp_path), "unhidden") == []


async def test_hide_while_running_and_on_deleted_or_quarantined_sessions(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, pid, sid, view = await _answered(d)
    user = view["items"][0]
    # While the session runs: recorded at once, as a snip is (it applies from the next request).
    await d.submit(token, sid, "busy", BUSY)
    await d.wait_running_call(token, sid)
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [user["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    await d.post(f"/sessions/{sid}/abort", token)
    await d.wait_idle(token, sid)
    assert (await _marks(d, token, sid))[user["id"]] == "hidden"

    # A quarantined session runs nothing and records nothing.
    other = (await d.session(token, pid))["id"]
    await d.submit(token, other, "r1", "my wombat again")
    await d.wait_idle(token, other)
    other_user = (await d.view(token, other))["items"][0]["id"]
    await stop_daemon(d)
    async with open_store(d.data_dir) as store:
        await store.append(Draft(SessionQuarantined(reason="replay failed 3 times"), project_id=pid, session_id=other))
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    for op in ("hide", "unhide", "unsnip"):
        r = await d2.post(f"/sessions/{other}/context/{op}", token, {"itemIds": [other_user]})
        assert (r.status_code, error_of(r)) == (409, "SESSION_QUARANTINED"), r.text

    # A deleted session: its items are hidden already; no edit is recorded.
    r = await d2.request("DELETE", f"/sessions/{sid}", token)
    assert r.status_code == 200, r.text
    n = len(await d2.events(token, sid))
    for op in ("hide", "unhide", "unsnip"):
        r = await d2.post(f"/sessions/{sid}/context/{op}", token, {"itemIds": [user["id"]]})
        assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED"), r.text
    assert len(await d2.events(token, sid)) == n


async def test_a_forks_hide_of_an_inherited_item_is_its_own(daemon: Daemon, strong: str, reader: str) -> None:
    # "A fork's inherited items in history": a fork hides an item it holds of its source's for
    # itself; the source (and its other forks made before) still show it.
    f = await forked(daemon, strong, reader)
    item = sorted(f.inherited)[0]
    r = await daemon.post(f"/sessions/{f.fork}/context/hide", strong, {"itemIds": [item]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    under = {r["contextItemId"] for r in await search(daemon, reader, f.project, "quokka", sessionId=f.fork)}
    assert item not in under and (f.inherited - {item}) <= under
    assert item in {r["contextItemId"] for r in await search(daemon, reader, f.project, "quokka", sessionId=f.src)}
    assert item in {r["contextItemId"] for r in await search(daemon, reader, f.project, "quokka")}
    assert (await _marks(daemon, strong, f.src))[item] == "visible"
    assert (await _marks(daemon, strong, f.fork))[item] == "hidden"
    r = await daemon.post(f"/sessions/{f.fork}/context/unhide", strong, {"itemIds": [item]})
    assert r.json()["changed"] is True, r.text
    assert item in {r["contextItemId"] for r in await search(daemon, reader, f.project, "quokka", sessionId=f.fork)}


async def test_a_hidden_summary_and_a_subagents_hidden_item(daemon_factory):
    # A summary hidden leaves what it replaced compacted (a hide is no undoing of a compaction);
    # a subagent's items are hidden through its agentId, in its Working Context and in history.
    config = {**CONFIG, "providers": [{**CONFIG["providers"][0], "script": [
        {"when": "Summarize the conversation so far", "text": "SUMMARY: a wombat was mentioned."},
        {"when": "delegate", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBJOB numbat"}}]},
        {"when": "SUBJOB", "text": "the numbat is fine"}]}]}
    d = await daemon_factory(config=config)
    token, pid, sid, view = await _answered(d)
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    summary, replaced = r.json()["itemId"], r.json()["replacedItemIds"]
    working = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    assert summary in working and replaced
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [summary]})
    assert r.json()["items"] == [{"id": summary, "context": "hidden"}], r.text
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["workingItemIds"] == [i for i in working if i != summary]  # (what it kept stays)
    assert {x["context"] for x in context["items"] if x["id"] in replaced} == {"compacted"}
    assert summary not in await _found(d, token, pid)
    r = await d.post(f"/sessions/{sid}/context/unhide", token, {"itemIds": [summary]})
    assert r.json()["items"] == [{"id": summary, "context": "visible"}], r.text
    assert (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"] == working
    assert summary in await _found(d, token, pid)

    await d.submit(token, sid, "r3", "delegate")
    await d.wait_idle(token, sid)
    sub = next(a["agentId"] for a in (await d.view(token, sid))["agents"] if a["role"] == "subagent")
    sub_items = (await d.get(f"/sessions/{sid}/context", token, params={"agentId": sub})).json()["items"]
    first = sub_items[0]["id"]
    found = {r["contextItemId"] for r in await search(d, token, pid, "numbat", agentId=sub)}
    assert first in found
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [first]})  # (the main agent's: none)
    assert (r.status_code, error_of(r)) == (404, "CONTEXT_ITEM_NOT_FOUND"), r.text
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [first], "agentId": sub})
    assert r.status_code == 200 and r.json()["agentId"] == sub and r.json()["changed"] is True, r.text
    sub_context = (await d.get(f"/sessions/{sid}/context", token, params={"agentId": sub})).json()
    assert first not in sub_context["workingItemIds"]
    assert first not in {r["contextItemId"] for r in await search(d, token, pid, "numbat", agentId=sub)}


async def test_an_item_hidden_before_a_compaction_stays_compacted_when_unhidden(daemon_factory):
    # The summary is written without what the user had hidden: an item hidden among what a
    # compaction replaces is replaced with the rest, so that unhidden it stays out of the Working
    # Context (marked compacted) instead of coming back before the summary, which never saw it.
    # One hidden among the items the compaction keeps comes back in its place.
    config = {**CONFIG, "providers": [{**CONFIG["providers"][0], "script": [
        {"when": "Summarize the conversation so far", "text": "SUMMARY: a tool was called."},
        *CONFIG["providers"][0]["script"]]}]}
    d = await daemon_factory(config=config)
    token, pid, sid, _view = await _answered(d)
    await d.submit(token, sid, "r3", "and a third")
    view = await d.wait_idle(token, sid)
    first, first_answer = view["items"][0]["id"], view["items"][1]["id"]
    call = next(v for v in view["items"] if v["role"] == "tool_call")
    result_id = call["result"]["itemId"]
    third = next(v["id"] for v in view["items"] if v["role"] == "user" and v["text"] == "and a third")
    for i in (first, call["id"], third):
        r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [i]})
        assert r.json()["changed"] is True, r.text

    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    summary, replaced = r.json()["itemId"], r.json()["replacedItemIds"]
    # (the first round is summarized, its hidden input with it; the two newest rounds are kept)
    assert replaced == [first, first_answer], replaced
    [compacted] = [e["body"] for e in await d.events(token, sid) if e["kind"] == "context.compacted"]
    assert compacted["replaced_item_ids"] == replaced
    assert (await _marks(d, token, sid))[first] == "hidden"  # (a hide still wins while it lasts)

    for i in (first, call["id"], third):
        r = await d.post(f"/sessions/{sid}/context/unhide", token, {"itemIds": [i]})
        assert r.json()["changed"] is True, r.text
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    marks = {x["id"]: x["context"] for x in context["items"]}
    assert (marks[first], marks[first_answer]) == ("compacted", "compacted"), marks
    assert (marks[call["id"]], marks[result_id], marks[third]) == ("visible", "visible", "visible"), marks
    working = context["workingItemIds"]
    assert working[0] == summary and first not in working and [call["id"], result_id] == working[2:4], working
    assert {it["id"]: it["context"] for it in (await d.view(token, sid))["items"]}[first] == "compacted"
    assert first in await _found(d, token, pid)  # (back in history: a compaction is no hide)

    # The same after a restart (replay).
    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context


async def test_an_item_snipped_before_a_compaction_stays_compacted_when_unsnipped(daemon_factory):
    # As for a hide: the summary is written without what the user had snipped, so a snipped item
    # among what a compaction replaces is replaced with the rest and, unsnipped, stays out of the
    # Working Context (compacted) instead of coming back before the summary. Include Result still
    # re-attaches a tool result among them; one snipped among the kept rounds comes back in place.
    config = {**CONFIG, "providers": [{**CONFIG["providers"][0], "script": [
        {"when": "Summarize the conversation so far", "text": "SUMMARY: a tool was called."},
        *CONFIG["providers"][0]["script"]]}]}
    d = await daemon_factory(config=config)
    token = await d.pair("snip-client", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    for n, text in enumerate(("call a tool, wombat", "a second", "and a third")):
        await d.submit(token, sid, f"r{n}", text)
        await d.wait_idle(token, sid)
    view = await d.view(token, sid)
    first = view["items"][0]["id"]
    call = next(v for v in view["items"] if v["role"] == "tool_call")
    result_id = call["result"]["itemId"]
    first_answer = next(v["id"] for v in view["items"] if v["role"] == "assistant")
    second, third = (next(v["id"] for v in view["items"] if v["role"] == "user" and v["text"] == text)
                     for text in ("a second", "and a third"))
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [first, call["id"], third]})
    assert r.json()["changed"] is True, r.text

    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    summary, replaced = r.json()["itemId"], r.json()["replacedItemIds"]
    # (the first round is summarized, its snipped input and call, and the result that left with
    # the call, with it; the newest rounds are kept)
    assert replaced == [first, call["id"], result_id, first_answer], replaced
    [compacted] = [e["body"] for e in await d.events(token, sid) if e["kind"] == "context.compacted"]
    assert compacted["replaced_item_ids"] == replaced
    assert (await _marks(d, token, sid))[first] == "snipped"  # (the snip still says why while it lasts)

    r = await d.post(f"/sessions/{sid}/context/unsnip", token, {"itemIds": [first, call["id"], third]})
    assert r.status_code == 200, r.text
    assert r.json()["changed"] is True and r.json()["items"] == [
        {"id": first, "context": "compacted"}, {"id": call["id"], "context": "compacted"},
        {"id": third, "context": "visible"}], r.text
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    marks = {x["id"]: x["context"] for x in context["items"]}
    assert [marks[i] for i in (first, call["id"], result_id, first_answer)] == ["compacted"] * 4, marks
    assert marks[third] == "visible", marks
    working = context["workingItemIds"]
    assert working[:2] == [summary, second] and third in working, working
    assert not {first, call["id"], result_id, first_answer} & set(working), working
    assert {it["id"]: it["context"] for it in (await d.view(token, sid))["items"]}[first] == "compacted"
    assert first in await _found(d, token, pid)  # (replaced items stay in history)

    # The same after a restart (replay); then Include Result re-attaches the result, with its call.
    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    r = await d2.post(f"/sessions/{sid}/context/include", token, {"callId": call["call"]["callId"]})
    assert r.json()["changed"] is True, r.text
    working = (await d2.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    assert working[:4] == [summary, call["id"], result_id, second], working
