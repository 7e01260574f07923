"""F-CTX-2 / F-CTX-3 over HTTP: ``POST /sessions/{id}/compact``, ``…/context/snip``,
``…/context/include``, ``GET …/context``, the view's ``context`` marks, saved settings by
``PATCH /sessions/{id}``, and a daemon restart."""

from __future__ import annotations

import trio

from .conftest import BUSY, LIMIT, Daemon, error_of, stop_daemon, wait_until

SUMMARY = "SUMMARY: the user talked about a quokka named Pim."
CONFIG = {
    "providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                   "script": [{"when": "Summarize the conversation so far", "text": SUMMARY},
                              {"when": "call a tool", "toolCalls": [{"name": "get_system_time", "arguments": {}}]}]}],
    "defaultModel": "faux/m1",
    "context": {"compaction": {"triggerPercent": 90}},
}


async def _session(d: Daemon) -> tuple[str, str, str]:
    token = await d.pair("context-client", strong=True)
    project = await d.project(token)
    return token, project["id"], (await d.session(token, project["id"]))["id"]


async def test_compact_snip_include_and_the_view_survive_a_restart(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, pid, sid = await _session(d)
    reader = await d.pair("context-reader")
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 409 and error_of(r) == "NOTHING_TO_COMPACT"
    await d.submit(token, sid, "r1", "my quokka is named Pim; call a tool")
    await d.wait_idle(token, sid)
    view = await d.view(token, sid)
    call = next(v for v in view["items"] if v["role"] == "tool_call")
    assert call["context"] == "visible" and call["result"]["context"] == "visible"
    before = [v["id"] for v in view["items"]]

    # Read-only credentials may look, not edit.
    assert (await d.get(f"/sessions/{sid}/context", reader)).status_code == 200
    for path, body in [("compact", None), ("context/snip", {"itemIds": [before[0]]}),
                       ("context/include", {"callId": call["call"]["callId"]})]:
        r = await d.post(f"/sessions/{sid}/{path}", reader, body)
        assert r.status_code == 403 and error_of(r) == "FORBIDDEN", path

    # Snip the tool result, then include it again by its call id.
    result_id = call["result"]["itemId"]
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [result_id]})
    assert r.status_code == 200, r.text
    assert r.json()["changed"] is True and r.json()["items"] == [{"id": result_id, "context": "snipped"}]
    assert (await d.view(token, sid))["items"][1]["result"]["context"] == "snipped"
    r = await d.post(f"/sessions/{sid}/context/include", token, {"callId": call["call"]["callId"]})
    assert r.status_code == 200 and r.json()["items"] == [{"id": result_id, "context": "included"}], r.text

    # Bad ids and bodies: stable codes, nothing recorded.
    n = len(await d.events(token, sid))
    for path, body, status, code in [
        ("context/snip", {"itemIds": ["c999999"]}, 404, "CONTEXT_ITEM_NOT_FOUND"),
        ("context/snip", {}, 422, "VALIDATION_FAILED"),
        ("context/snip", {"itemIds": ["bad id"]}, 400, "INVALID_ARGUMENT"),
        ("context/include", {"callId": "call_nope"}, 404, "CONTEXT_ITEM_NOT_FOUND"),
        ("context/include", {"itemId": before[0]}, 400, "CONTEXT_EDIT_INVALID"),
        ("context/include", {}, 422, "VALIDATION_FAILED"),
        ("context/include", {"callId": "x", "itemId": "y"}, 422, "VALIDATION_FAILED"),
        ("context/include", {"callId": "x", "extra": 1}, 422, "VALIDATION_FAILED"),
    ]:
        r = await d.post(f"/sessions/{sid}/{path}", token, body)
        assert (r.status_code, error_of(r)) == (status, code), (path, body, r.text)
    r = await d.post("/sessions/ses_nope/context/snip", token, {"itemIds": ["c1"]})
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND")
    assert len(await d.events(token, sid)) == n

    # Compact: the summary replaces everything; the Full Context and history keep it all.
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    compacted = r.json()
    assert compacted["summary"] == SUMMARY and compacted["replacedItemIds"] == [*before[:2], result_id, *before[2:]]
    view = await d.view(token, sid)
    assert [v["id"] for v in view["items"]] == [*before, compacted["itemId"]]
    assert [v["context"] for v in view["items"]] == ["compacted"] * len(before) + ["visible"]
    assert view["items"][-1]["role"] == "summary" and view["usage"]["requests"] == 3
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["workingItemIds"] == [compacted["itemId"]] and context["contextWindow"] == 50000
    assert context["compactionThreshold"] == 45000 and context["settings"]["sources"]["compactionTriggerPercent"] == "config"
    assert 0 < context["estimatedTokens"] < 45000

    async def found():
        r = await d.post("/history/search", token, {"projectId": pid, "query": "quokka"})
        return {x["role"] for x in r.json()["results"]} >= {"user", "summary"}

    await wait_until(found, what="pre-compaction items and the summary in history search")

    # The next request sees the summary; the log says so after a restart too.
    await d.submit(token, sid, "r2", "what is my quokka called?")
    await d.wait_idle(token, sid)
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert len(context["workingItemIds"]) == 3
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context


async def test_compact_is_refused_while_the_session_runs(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, _pid, sid = await _session(d)
    await d.submit(token, sid, "busy", BUSY)
    await d.wait_running_call(token, sid)
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 409 and error_of(r) == "SESSION_BUSY"
    await d.post(f"/sessions/{sid}/abort", token)
    await d.wait_idle(token, sid)
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text


async def test_saved_context_settings_are_validated_and_win_over_the_config(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, _pid, sid = await _session(d)
    for body in [{"compactionTriggerPercent": 0}, {"compactionTriggerPercent": 101},
                 {"compactionTriggerPercent": True}, {"compactionTriggerPercent": 50.5},
                 {"autoCompaction": "yes"}, {"pruneToolResults": 1}]:
        r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=body)
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), body
    for value in (1, 100):
        r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"compactionTriggerPercent": value})
        assert r.status_code == 200, r.text
        settings = (await d.get(f"/sessions/{sid}/context", token)).json()["settings"]
        assert settings["compactionTriggerPercent"] == value and settings["sources"]["compactionTriggerPercent"] == "saved"
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"pruneToolResults": True, "autoCompaction": False})
    assert r.status_code == 200, r.text
    settings = (await d.get(f"/sessions/{sid}/context", token)).json()["settings"]
    assert (settings["pruneToolResults"], settings["autoCompaction"], settings["compactionTriggerPercent"]) == (True, False, 100)
    configured = [e["body"]["settings"] for e in await d.events(token, sid) if e["kind"] == "session.configured"]
    assert configured == [{"compaction_trigger_percent": 1}, {"compaction_trigger_percent": 100},
                          {"auto_compaction": False, "prune_tool_results": True}]


async def test_a_snip_of_a_call_whose_result_was_included_takes_both_out_once(daemon_factory):
    # The call of a re-attached result stays in the Working Context for that result's sake: a
    # snip of the call alone used to record an edit (``changed: true``, every time it was sent)
    # while the next request still held the call and its result.
    d = await daemon_factory(config=CONFIG)
    token, _pid, sid = await _session(d)
    # The first call: compacted, its result included again. The second: its result snipped,
    # then included again.
    await d.submit(token, sid, "r1", "call a tool")
    await d.wait_idle(token, sid)
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    await d.submit(token, sid, "r2", "call a tool")
    await d.wait_idle(token, sid)
    first, second = [v for v in (await d.view(token, sid))["items"] if v["role"] == "tool_call"]
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [second["result"]["itemId"]]})
    assert r.json()["changed"] is True, r.text
    for call in (first, second):
        r = await d.post(f"/sessions/{sid}/context/include", token, {"callId": call["call"]["callId"]})
        assert r.json()["changed"] is True, r.text
    working = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    for call in (first, second):
        assert {call["id"], call["result"]["itemId"]} <= set(working), working

    for call in (first, second):
        pair = [call["id"], call["result"]["itemId"]]
        n = len(await d.events(token, sid))
        r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [call["id"]]})
        assert r.status_code == 200, r.text
        assert r.json()["changed"] is True and r.json()["itemIds"] == pair, r.text
        assert [x["context"] for x in r.json()["items"]] == ["snipped", "snipped"], r.text
        working = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
        assert not set(pair) & set(working), working
        edits = [e["body"] for e in (await d.events(token, sid))[n:]]
        assert edits == [{"op": "snip", "item_ids": pair, "reason": "user"}], edits
        # Twice: nothing more to take out, nothing recorded.
        n = len(await d.events(token, sid))
        r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [call["id"]]})
        assert r.status_code == 200 and r.json()["changed"] is False and r.json()["itemIds"] == [], r.text
        assert len(await d.events(token, sid)) == n
        # Including the result again brings the pair back.
        r = await d.post(f"/sessions/{sid}/context/include", token, {"callId": call["call"]["callId"]})
        assert r.json()["changed"] is True, r.text
        working = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
        assert set(pair) <= set(working), working

    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context


async def test_a_stop_during_a_manual_compaction_answers_it_and_keeps_what_was_queued(daemon_factory, nursery):
    # The summarizing request held the daemon's stop for its whole grace period (5 s), and then
    # the client's connection was reset with no answer at all.
    slow = {**CONFIG, "providers": [{**CONFIG["providers"][0], "script": [
        {"when": "Summarize the conversation so far", "text": SUMMARY, "delayMs": 600000}]}]}
    d = await daemon_factory(config=slow)
    token, _pid, sid = await _session(d)
    await d.submit(token, sid, "r1", "my quokka is named Pim")
    await d.wait_idle(token, sid)
    answered: list = []

    async def compact() -> None:
        answered.append(await d.post(f"/sessions/{sid}/compact", token))

    # Two at once: the one that reaches the session second is refused (409 SESSION_BUSY), which
    # says the other one is under way.
    nursery.start_soon(compact)
    nursery.start_soon(compact)
    await wait_until(lambda: _answered(answered), what="one compaction refused")
    assert answered[0].status_code == 409 and error_of(answered[0]) == "SESSION_BUSY", answered[0].text
    answered.clear()
    await d.submit(token, sid, "r2", "queued behind the compaction")
    before = await d.events(token, sid)
    d.stop.set()
    await wait_until(lambda: _answered(answered), timeout=4, what="an answer to the compaction")
    r = answered[0]
    assert r.status_code == 503 and error_of(r) == "SESSION_UNAVAILABLE", r.text
    assert "stopping" in r.json()["error"]["message"] and "summary was not recorded" in r.json()["error"]["message"]
    with trio.fail_after(LIMIT):
        await d.done.wait()
    await d.client.aclose()

    d2 = await daemon_factory(config=CONFIG, root=d.root)
    await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    assert events[:len(before)] == before
    kinds = [e["kind"] for e in events[len(before):]]
    assert "context.compacted" not in kinds and "context.compaction_failed" not in kinds, kinds
    assert kinds[:2] == ["task.started", "input.placed"], kinds  # the queued input ran after the restart
    r = await d2.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200 and r.json()["summary"] == SUMMARY, r.text


async def _answered(answered: list) -> bool:
    return bool(answered)


async def test_a_steer_sent_during_an_automatic_compaction_goes_in_after_its_summary(daemon_factory):
    # The steer made the run's next step "place the steer", and the summary (of a Working Context
    # the steer had not changed) was dropped as stale: a paid summarizing request thrown away,
    # then a second one that summarized the steer itself before the model ever read it.
    small = {**CONFIG, "providers": [{"id": "faux", "protocol": "faux",
                                      "models": [{"id": "m1", "contextWindow": 4000}],
                                      "script": [{"when": "Summarize the conversation so far", "text": SUMMARY,
                                                  "delayMs": 3000}]}]}
    d = await daemon_factory(config=small)
    token, _pid, sid = await _session(d)
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["compactionThreshold"] == 3600
    long_input = "x" * 4 * (context["compactionThreshold"] - context["estimatedTokens"])
    await d.submit(token, sid, "r1", long_input)

    async def placed() -> bool:  # (the compaction starts right after, before any model request)
        return any(e["kind"] == "input.placed" for e in await d.events(token, sid))

    await wait_until(placed, what="the long input placed")
    await d.submit(token, sid, "s1", "steer: answer in French", whenBusy="steer")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    kinds = [e["kind"] for e in events]
    assert "context.compaction_failed" not in kinds, kinds
    (compacted,) = [e for e in events if e["kind"] == "context.compacted"]
    steer_placed = next(e for e in events if e["kind"] == "input.placed" and e["body"]["input_request_id"] == "s1")
    steer_submitted = next(e for e in events if e["kind"] == "input.submitted" and e["request_id"] == "s1")
    assert steer_submitted["seq"] < compacted["seq"] < steer_placed["seq"], kinds
    assert compacted["body"]["trigger"] == "auto" and f"c{steer_placed['seq']}" not in compacted["body"]["replaced_item_ids"]
    answer = next(e for e in events if e["kind"] == "model.responded")
    assert answer["body"]["text"] == "(faux) You said: steer: answer in French"
    working = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]
    assert working == [f"c{compacted['seq']}", f"c{steer_placed['seq']}", f"c{answer['seq']}"]
