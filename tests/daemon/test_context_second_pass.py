"""SPEC §3 F-CTX-1 … F-CTX-5 (with §4 F-MOD-2) driven over HTTP as a client who has read only the
spec, README and docs/: the edges the earlier context tests leave out — an edit repeated, an id of
another session, a compaction asked twice, one of a fork, history search over what a compaction
replaced, and the Anthropic wire of an instruction added later."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from ..providers.servers import anthropic as an
from ..providers.servers import openai_chat as oc
from ..providers.servers.base import ScriptedServer
from ..providers.wire import check_anthropic_turns
from .conftest import error_of, wait_until
from .keyleaks import loop_config
from .review_skill import write_review_skill

KEY_ENV = "LENS_TEST_CTX2_KEY"


async def _loop_daemon(daemon_factory, nursery, monkeypatch, *, anthropic: bool = False, **more: Any):
    """A daemon whose default model is at a loopback server speaking Chat Completions (or, with
    ``anthropic``, the Anthropic Messages protocol), ``more`` of the config, and a strong token."""
    monkeypatch.setenv(KEY_ENV, "sk-test-ctx2-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    config = loop_config(url, KEY_ENV, **more)
    if anthropic:
        config["providers"] = [{**config["providers"][0], "protocol": "anthropic", "baseUrl": url}]
    d = await daemon_factory(config=config)
    token = await d.pair("c", strong=True)
    return loop, d, token


async def _turn(d, token: str, sid: str, loop: ScriptedServer, rid: str, text: str, *replies: Any) -> dict[str, Any]:
    loop.push(*replies)
    await d.submit(token, sid, rid, text)
    view = await d.wait_idle(token, sid)
    assert view["status"] == "idle", view
    return loop.bodies[-1]


async def test_repeated_and_foreign_snips_then_include_then_compact_twice_and_search_what_it_replaced(
        daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch,
                                        context={"compaction": {"keepRecentTokens": 0}})
    project = await d.project(token)
    (Path(project["workspace"]) / "a.txt").write_text("OKAPI-CONTENT " * 40)
    sid = (await d.session(token, project["id"]))["id"]
    other = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "read a.txt", oc.chat_stream(calls=[("call_a", "read_file", {"path": "a.txt"})]),
                oc.chat_stream(text="read it"))
    await _turn(d, token, other, loop, "o1", "hello other", oc.chat_stream(text="other answer"))
    [call] = [it for it in (await d.view(token, sid))["items"] if it["role"] == "tool_call"]
    result_id = call["result"]["itemId"]
    other_ids = [it["id"] for it in (await d.view(token, other))["items"]]

    # The same snip twice: the second changes nothing, records nothing.
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [result_id]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    n = len(await d.events(token, sid))
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [result_id]})
    assert r.status_code == 200 and r.json()["changed"] is False, r.text
    assert (r.json()["seq"], r.json()["itemIds"], r.json()["items"]) == (None, [], []), r.text
    assert len(await d.events(token, sid)) == n

    # An item of another session of the same project is not this session's: 404 naming it, nothing
    # written, and the other session's item is untouched.
    for path, body in (("context/snip", {"itemIds": [other_ids[0]]}), ("context/include", {"itemId": other_ids[0]}),
                       ("context/hide", {"itemIds": [other_ids[0]]})):
        r = await d.post(f"/sessions/{sid}/{path}", token, body)
        assert r.status_code == 404 and error_of(r) == "CONTEXT_ITEM_NOT_FOUND", (path, r.text)
        assert other_ids[0] in r.json()["error"]["message"], r.text
    assert len(await d.events(token, sid)) == n
    assert all(it["context"] == "visible" for it in (await d.view(token, other))["items"])

    # Include Result of the snipped result, by its item id: back whole in the next request.
    r = await d.post(f"/sessions/{sid}/context/include", token, {"itemId": result_id})
    assert r.status_code == 200 and r.json()["items"] == [{"id": result_id, "context": "included"}], r.text
    body = await _turn(d, token, sid, loop, "r2", "again", oc.chat_stream(text="second"))
    [sent] = [m["content"] for m in body["messages"] if m.get("tool_call_id") == "call_a"]
    assert sent.count("OKAPI-CONTENT") == 40, sent[:200]

    # Compact, then compact again at once: the second has nothing to replace.
    loop.push(oc.chat_stream(text="SUMMARY: a.txt was read."))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    n = len(await d.events(token, sid))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 409 and error_of(r) == "NOTHING_TO_COMPACT", r.text
    assert len(await d.events(token, sid)) == n and len(loop.bodies) == 5  # (no second summary asked for)

    # The Working Context lost the result; the Full Context did not: history search finds it.
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert result_id not in context["workingItemIds"], context["workingItemIds"]
    r = await d.post("/history/search", token, {"projectId": project["id"], "query": "OKAPI-CONTENT", "sessionId": sid})
    assert r.status_code == 200, r.text
    assert result_id in [x["contextItemId"] for x in r.json()["results"]], r.json()
    body = await _turn(d, token, sid, loop, "r3", "third", oc.chat_stream(text="third answer"))
    assert "OKAPI-CONTENT" not in json.dumps(body["messages"])


async def test_a_fork_compacts_its_own_context_and_the_source_keeps_its_items(daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch,
                                        context={"compaction": {"keepRecentTokens": 0}})
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "my wombat is Bo", oc.chat_stream(text="noted WOMBAT"))
    await _turn(d, token, sid, loop, "r2", "and my emu is Jo", oc.chat_stream(text="noted EMU"))
    last = (await d.events(token, sid))[-1]["seq"]
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": last})
    assert r.status_code == 201, r.text
    fork = r.json()["id"]
    source_before = (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"]

    loop.push(oc.chat_stream(text="SUMMARY: wombat Bo, emu Jo."))
    r = await d.post(f"/sessions/{fork}/compact", token)
    assert r.status_code == 200, r.text
    assert "noted WOMBAT" in json.dumps(loop.bodies[-1])  # (the fork's inherited items were summarized)
    fork_ctx = (await d.get(f"/sessions/{fork}/context", token)).json()
    assert len(fork_ctx["workingItemIds"]) == 1, fork_ctx
    assert (await d.get(f"/sessions/{sid}/context", token)).json()["workingItemIds"] == source_before
    marks = {it["id"]: it["context"] for it in (await d.view(token, sid))["items"]}
    assert set(marks.values()) == {"visible"}, marks

    body = await _turn(d, token, sid, loop, "r3", "names?", oc.chat_stream(text="Bo and Jo"))
    texts = [m.get("content") for m in body["messages"][1:]]
    assert texts == ["my wombat is Bo", "noted WOMBAT", "and my emu is Jo", "noted EMU", "names?"], texts
    body = await _turn(d, token, fork, loop, "f1", "names?", oc.chat_stream(text="Bo and Jo"))
    assert "noted WOMBAT" not in json.dumps(body["messages"]) and "SUMMARY: wombat Bo" in json.dumps(body["messages"])


async def test_anthropic_gets_a_later_skill_as_a_marked_user_block_and_the_log_keeps_it_unmarked(
        daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch, anthropic=True)
    project = await d.project(token)
    write_review_skill(project["workspace"])
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "first", an.message_stream(text="one"))
    body = await _turn(d, token, sid, loop, "r2", "/skill:review second", an.message_stream(text="two"))
    blocks = [(m["role"], b) for m in body["messages"]
              for b in ([{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"])]
    [(role, block)] = [(r, b) for r, b in blocks if "REVIEW-STEPS" in b.get("text", "")]
    assert role == "user" and block["text"].startswith("Lens instruction update:"), block
    assert "REVIEW-STEPS" not in json.dumps(body["system"])
    logged = json.dumps([e for e in await d.events(token, sid)])
    assert "REVIEW-STEPS" in logged and "Lens instruction update" not in logged
    view = json.dumps((await d.view(token, sid))["items"])
    assert "Lens instruction update" not in view


async def test_a_snip_while_the_task_runs_applies_to_its_next_request(daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "SNIP-WHILE-RUNNING first", oc.chat_stream(text="first answer"))
    first = (await d.view(token, sid))["items"][0]
    gate = trio.Event()
    held = oc.chat_stream(calls=[("call_t", "get_system_time", {})])
    held.gate = gate
    loop.push(held, oc.chat_stream(text="done"))
    await d.submit(token, sid, "r2", "what time is it?")
    await wait_until(lambda: _n_requests(loop, 2), what="the held request")
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [first["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    gate.set()
    await d.wait_idle(token, sid)
    asked, after = loop.bodies[-2], loop.bodies[-1]
    assert "SNIP-WHILE-RUNNING" in json.dumps(asked["messages"])  # (sent before the snip)
    assert "SNIP-WHILE-RUNNING" not in json.dumps(after["messages"]), after["messages"]
    assert [m.get("tool_call_id") for m in after["messages"] if m["role"] == "tool"] == ["call_t"]


async def _n_requests(loop: ScriptedServer, n: int) -> bool:
    return len(loop.requests) >= n


async def test_a_fork_from_before_a_compaction_sends_what_the_compaction_replaced(daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch,
                                        context={"compaction": {"keepRecentTokens": 0}})
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "my gecko is Zed", oc.chat_stream(text="noted GECKO"))
    before = (await d.events(token, sid))[-1]["seq"]
    loop.push(oc.chat_stream(text="SUMMARY: gecko Zed."))
    assert (await d.post(f"/sessions/{sid}/compact", token)).status_code == 200
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": before})
    assert r.status_code == 201, r.text
    fork = r.json()["id"]
    marks = {it["id"]: it["context"] for it in (await d.view(token, fork))["items"]}
    assert set(marks.values()) == {"visible"}, marks
    body = await _turn(d, token, fork, loop, "f1", "gecko?", oc.chat_stream(text="Zed"))
    assert [m.get("content") for m in body["messages"][1:]] == ["my gecko is Zed", "noted GECKO", "gecko?"]
    body = await _turn(d, token, sid, loop, "r2", "gecko?", oc.chat_stream(text="Zed"))
    assert "noted GECKO" not in json.dumps(body["messages"]) and "SUMMARY: gecko Zed." in json.dumps(body["messages"])


async def test_anthropic_after_a_compaction_starts_with_a_user_turn_and_keeps_the_later_skill_marked(
        daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch, anthropic=True,
                                        context={"compaction": {"keepRecentTokens": 0}})
    project = await d.project(token)
    write_review_skill(project["workspace"])
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "first", an.message_stream(text="one"))
    await _turn(d, token, sid, loop, "r2", "/skill:review second", an.message_stream(text="two"))
    loop.push(an.message_stream(text="SUMMARY-TEXT: asked twice."))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    body = await _turn(d, token, sid, loop, "r3", "third", an.message_stream(text="three"))
    msgs = body["messages"]
    assert msgs[0]["role"] == "user", msgs
    roles = [m["role"] for m in msgs]
    assert all(a != b for a, b in zip(roles, roles[1:])), roles  # (turns alternate)
    text = json.dumps(msgs)
    assert "SUMMARY-TEXT" in text and "REVIEW-STEPS" in text and '"one"' not in text, msgs
    assert text.index("SUMMARY-TEXT") < text.index("REVIEW-STEPS") < text.index("third"), msgs
    assert "REVIEW-STEPS" not in json.dumps(body["system"])


async def test_a_pruned_result_is_kept_in_the_view_and_history_and_once_included_is_not_pruned_again(
        daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch, context={
        "pruneToolResults": {"enabled": True, "minTokens": 1, "keepRecentRounds": 1}})
    project = await d.project(token)
    (Path(project["workspace"]) / "big.txt").write_text("PANGOLIN-LINE\n" * 300)
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r0", "read big.txt", oc.chat_stream(calls=[("call_big", "read_file", {"path": "big.txt"})]),
                oc.chat_stream(text="read"))
    body = await _turn(d, token, sid, loop, "r1", "next", oc.chat_stream(text="one"))

    def sent(body: dict[str, Any]) -> str:
        [m] = [m for m in body["messages"] if m.get("tool_call_id") == "call_big"]
        return m["content"]

    assert "PANGOLIN-LINE" not in sent(body)  # pruned on the wire
    [call] = [it for it in (await d.view(token, sid))["items"] if it["role"] == "tool_call"]
    result_id = call["result"]["itemId"]
    assert call["result"]["context"] == "pruned", call
    r = await d.get(f"/history/items/{result_id}", token)
    assert r.status_code == 200 and r.json()["text"].count("PANGOLIN-LINE") == 300, r.text[:200]
    r = await d.post("/history/search", token, {"projectId": project["id"], "query": "PANGOLIN-LINE"})
    assert result_id in [x["contextItemId"] for x in r.json()["results"]], r.text
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert result_id in context["workingItemIds"]  # (as its placeholder)

    r = await d.post(f"/sessions/{sid}/context/include", token, {"callId": "call_big"})
    assert r.status_code == 200 and r.json()["items"] == [{"id": result_id, "context": "included"}], r.text
    for i in range(2, 5):  # rounds past keepRecentRounds: the included result is never pruned again
        body = await _turn(d, token, sid, loop, f"r{i}", f"question {i}", oc.chat_stream(text=f"answer {i}"))
        assert sent(body).count("PANGOLIN-LINE") == 300, i
    prunes = [e for e in await d.events(token, sid) if e["kind"] == "context.edited" and e["body"].get("op") == "prune"]
    assert len(prunes) == 1, prunes


async def test_include_of_an_item_that_is_no_tool_result_says_what_brings_it_back_by_its_mark(daemon_factory):
    d = await daemon_factory()
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    user = (await d.view(token, sid))["items"][0]["id"]
    assert (await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [user]})).status_code == 200
    r = await d.post(f"/sessions/{sid}/context/include", token, {"itemId": user})
    assert r.status_code == 400 and error_of(r) == "CONTEXT_EDIT_INVALID", r.text
    message = r.json()["error"]["message"]
    assert f"{user} (user) is snipped: unsnip brings it back" in message, message
    r = await d.post(f"/sessions/{sid}/context/unsnip", token, {"itemIds": [user]})
    assert r.status_code == 200 and r.json()["items"] == [{"id": user, "context": "visible"}], r.text
    # An item that is not snipped is not pointed to unsnip: the message says what it is.
    r = await d.post(f"/sessions/{sid}/context/include", token, {"itemId": user})
    assert r.status_code == 400 and error_of(r) == "CONTEXT_EDIT_INVALID", r.text
    message = r.json()["error"]["message"]
    assert f"{user} (user) is in the Working Context already: nothing to bring back" in message, message
    assert "unsnip" not in message, message


async def test_a_snip_made_while_a_manual_compaction_summarizes_drops_the_summary(daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch,
                                        context={"compaction": {"keepRecentTokens": 0}})
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "KEEP-OUT first", oc.chat_stream(text="one"))
    await _turn(d, token, sid, loop, "r2", "second", oc.chat_stream(text="two"))
    first = (await d.view(token, sid))["items"][0]["id"]
    gate = trio.Event()
    held = oc.chat_stream(text="SUMMARY that saw KEEP-OUT", usage=oc.usage(30, 5))
    held.gate = gate
    loop.push(held)
    answers: list[Any] = []

    async def compact() -> None:
        answers.append(await d.post(f"/sessions/{sid}/compact", token))

    async with trio.open_nursery() as n:
        n.start_soon(compact)
        await wait_until(lambda: _n_requests(loop, 3), what="the summarizing request")
        r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [first]})
        assert r.status_code == 200 and r.json()["changed"] is True, r.text
        gate.set()
    [r] = answers
    assert r.status_code == 502 and error_of(r) == "COMPACTION_FAILED", r.text
    assert "changed while it was summarized" in r.json()["error"]["message"], r.text
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["compactions"] == 0 and context["compactionFailed"]["trigger"] == "manual", context
    marks = {c["id"]: c["context"] for c in context["items"]}
    assert marks[first] == "snipped" and set(marks.values()) == {"snipped", "visible"}, marks
    assert (await d.view(token, sid))["usage"]["requests"] == 3  # (the dropped summary's request counts)
    body = await _turn(d, token, sid, loop, "r3", "third", oc.chat_stream(text="three"))
    assert "KEEP-OUT" not in json.dumps(body["messages"]) and "SUMMARY" not in json.dumps(body["messages"])


async def test_anthropic_requests_stay_well_formed_when_a_call_and_then_the_first_input_are_snipped(
        daemon_factory, nursery, monkeypatch):
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch, anthropic=True)
    project = await d.project(token)
    (Path(project["workspace"]) / "a.txt").write_text("AARDVARK")
    sid = (await d.session(token, project["id"]))["id"]
    await _turn(d, token, sid, loop, "r1", "FIRST-INPUT read a.txt",
                an.message_stream(text="let me", calls=[("toolu_a", "read_file", {"path": "a.txt"})]),
                an.message_stream(text="done"))
    items = (await d.view(token, sid))["items"]
    [call] = [it for it in items if it["role"] == "tool_call"]
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [call["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    body = await _turn(d, token, sid, loop, "r2", "next", an.message_stream(text="ok"))
    check_anthropic_turns(body)  # (the call went with its result: no tool_result without its tool_use)
    assert "AARDVARK" not in json.dumps(body["messages"]) and "tool_use" not in json.dumps(body["messages"])
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [items[0]["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    body = await _turn(d, token, sid, loop, "r3", "next2", an.message_stream(text="ok2"))
    check_anthropic_turns(body)  # (the first turn is still a user turn, with the input gone)
    assert body["messages"][0]["role"] == "user" and "FIRST-INPUT" not in json.dumps(body["messages"])
    r = await d.post(f"/sessions/{sid}/context/unsnip", token, {"itemIds": [call["id"], items[0]["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    body = await _turn(d, token, sid, loop, "r4", "next3", an.message_stream(text="ok3"))
    check_anthropic_turns(body)
    text = json.dumps(body["messages"])
    assert "FIRST-INPUT" in text and "AARDVARK" in text and "toolu_a" in text


async def test_an_agents_md_edited_mid_session_reaches_the_next_request_of_the_same_session(
        daemon_factory, nursery, monkeypatch, tmp_path):
    # docs/providers.md: the prompt is rebuilt at most every 2 s (runtime.prompt's PromptCache,
    # whose period its own tests prove on a virtual clock); with the period at 0 each request reads
    # the files, so an edit between two turns of one session is in the second request's prompt.
    monkeypatch.setattr("runtime.prompt.PROMPT_REFRESH_SECONDS", 0.0)
    home = tmp_path / "home"
    (home / ".agents").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    loop, d, token = await _loop_daemon(daemon_factory, nursery, monkeypatch)
    project = await d.project(token)
    ws_md = Path(project["workspace"]) / "AGENTS.md"
    home_md = home / ".agents" / "AGENTS.md"
    ws_md.write_text("WS-RULE-ONE\n")
    home_md.write_text("HOME-RULE-ONE\n")
    sid = (await d.session(token, project["id"]))["id"]
    body = await _turn(d, token, sid, loop, "r1", "first", oc.chat_stream(text="one"))
    assert "WS-RULE-ONE" in body["messages"][0]["content"] and "HOME-RULE-ONE" in body["messages"][0]["content"]
    ws_md.write_text("WS-RULE-TWO\n")
    home_md.write_text("HOME-RULE-TWO\n")
    body = await _turn(d, token, sid, loop, "r2", "second", oc.chat_stream(text="two"))
    system = body["messages"][0]["content"]
    assert "WS-RULE-TWO" in system and "HOME-RULE-TWO" in system and "RULE-ONE" not in system, system[-400:]
    assert [m["role"] for m in body["messages"]].count("system") == 1  # (no instruction item added)
    ws_md.unlink()
    body = await _turn(d, token, sid, loop, "r3", "third", oc.chat_stream(text="three"))
    system = body["messages"][0]["content"]
    assert "WS-RULE" not in system and "<workspace>/AGENTS.md" not in system and "HOME-RULE-TWO" in system
