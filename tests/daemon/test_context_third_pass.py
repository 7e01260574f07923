"""SPEC §3 F-CTX-2 … F-CTX-5 driven over HTTP as a client who has read only the spec, README and
docs/: the edges the first two passes (test_context_acceptance.py, test_context_second_pass.py)
leave out — a summary the provider stopped before it was done for a reason other than the output
limit, snips and forks in either order, a context emptied by snips or hides, and usage a provider
reports in part."""

from __future__ import annotations

from pathlib import Path
import shutil
from typing import Any

from ..providers.servers import openai_chat as oc
from ..providers.servers import openai_responses as orr
from ..providers.servers.base import Reply, ScriptedServer
from .conftest import error_of, sdks_ready, stop_daemon
from .keyleaks import loop_config

KEY_ENV = "LENS_TEST_CTX3_KEY"
SUMMARIZE = "Summarize the conversation so far"


def _faux(*script: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                           "script": list(script)}],
            "defaultModel": "faux/m1", **more}


async def _session(d, name: str = "p") -> tuple[str, str, str]:
    token = await d.pair("ctx3", strong=True)
    project = await d.project(token, name)
    return token, project["id"], (await d.session(token, project["id"]))["id"]


async def _turn(d, token: str, sid: str, rid: str, text: str) -> dict[str, Any]:
    await d.submit(token, sid, rid, text)
    return await d.wait_idle(token, sid)


async def _context(d, token: str, sid: str, **params: str) -> dict[str, Any]:
    r = await d.get(f"/sessions/{sid}/context", token, params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def _assert_summary_refused(d, token: str, sid: str, words: str) -> None:
    """A manual compaction whose summarizing answer ended unfinished: 502 COMPACTION_FAILED naming
    why, the Working Context as it was, the failure shown by the context route, and the request
    (which the provider answered) counted in the session's usage."""
    before = await _context(d, token, sid)
    requests = (await d.view(token, sid))["usage"]["requests"]
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 502 and error_of(r) == "COMPACTION_FAILED", r.text
    assert words in r.json()["error"]["message"], r.text
    after = await _context(d, token, sid)
    assert after["workingItemIds"] == before["workingItemIds"] and after["compactions"] == 0, after
    assert after["compactionFailed"]["code"] == "COMPACTION_FAILED", after
    assert words in after["compactionFailed"]["message"], after
    view = await d.view(token, sid)
    assert view["usage"]["requests"] == requests + 1, view["usage"]
    assert all(it["role"] != "summary" for it in view["items"]), view["items"]


async def test_a_summary_stopped_at_the_providers_message_limit_replaces_nothing(daemon_factory):
    # F-CTX-2: a summarizing answer the provider stopped before it was done is no summary. The
    # output limit, a refusal and a content filter were refused; an answer stopped at a Responses
    # limit on messages (max_messages, a cut: see docs/decisions.md) replaced the whole
    # conversation with the part written before the stop.
    d = await daemon_factory(config=_faux({"when": SUMMARIZE, "text": "SUMMARY: the user said hel",
                                           "stopReason": "max_messages"}))
    token, _pid, sid = await _session(d)
    await _turn(d, token, sid, "r1", "hello there")
    await _assert_summary_refused(d, token, sid, "max_messages")


async def test_an_automatic_summary_stopped_at_the_message_limit_lets_the_request_go_as_it_is(daemon_factory):
    config = _faux({"when": SUMMARIZE, "text": "SUMMARY: a file was rea", "stopReason": "max_messages"})
    config["providers"][0]["models"] = [{"id": "m1", "contextWindow": 5000}]  # (threshold 4000)
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    workspace = Path((await d.get("/projects", token)).json()["projects"][0]["workspace"])
    (workspace / "big.txt").write_text("word " * 4000)  # (about 5,000 estimated tokens)
    view = await _turn(d, token, sid, "r1", '/tool read_file {"path": "big.txt"}')
    assert view["items"][-1]["role"] == "assistant" and view["items"][-1]["text"].startswith("The tool answered: word")
    events = await d.events(token, sid)
    assert not [e for e in events if e["kind"] == "context.compacted"]
    [failed] = [e["body"] for e in events if e["kind"] == "context.compaction_failed"]
    assert failed["trigger"] == "auto" and failed["code"] == "COMPACTION_FAILED", failed
    assert "max_messages" in failed["message"] and failed["usage"]["input_tokens"] > 0, failed
    ctx = await _context(d, token, sid)
    assert ctx["compactions"] == 0 and ctx["compactionFailed"]["trigger"] == "auto", ctx
    assert all(it["context"] == "visible" for it in ctx["items"]), ctx["items"]
    assert view["usage"]["requests"] == 3, view["usage"]  # (the call, the summary not used, the answer)


def _incomplete_summary(reason: str | None) -> Reply:
    """A Responses summary that ends ``incomplete`` for ``reason`` (None: the response gives no
    ``incomplete_details``, as a proxy may send it)."""
    scripted = orr.response_stream(text="SUMMARY: the user said hel", status="incomplete", usage=orr.usage(300, 9))
    name, data = scripted.events[-1]
    details = {"reason": reason} if reason is not None else None
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "incomplete_details": details}})
    return scripted


async def test_a_responses_summary_left_incomplete_for_any_reason_replaces_nothing(daemon_factory, nursery, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-ctx3-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    config = loop_config(url, KEY_ENV)
    config["providers"] = [{**config["providers"][0], "protocol": "openai-responses"}]
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    await sdks_ready()  # (the first turn's bound is not the SDKs' one-off import)
    loop.push(orr.response_stream(text="first answer", usage=orr.usage(100, 3)))
    await _turn(d, token, sid, "r1", "hello there")
    # (a reason this build does not know is recorded as it came, and is no summary either)
    for reason, words in (("max_messages", "max_messages"), (None, "incomplete"),
                          ("max_output_tokens", "max_tokens"),
                          ("a_reason_not_known_yet", "a_reason_not_known_yet: not a stop reason known to end")):
        loop.push(_incomplete_summary(reason))
        await _assert_summary_refused(d, token, sid, words)
    # A summary that ends whole still compacts: the refusals above are of the unfinished ones.
    loop.push(orr.response_stream(text="SUMMARY: the user said hello.", usage=orr.usage(300, 9)))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200 and r.json()["summary"] == "SUMMARY: the user said hello.", r.text


async def test_an_anthropic_summary_whose_turn_was_paused_replaces_nothing(daemon_factory, nursery):
    # pause_turn: the provider paused the turn, to be continued in another request; the text so
    # far is not the whole answer. A stop_sequence ends a whole one: that summary compacts.
    from ..providers.servers.anthropic import message_stream

    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config={
        "providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url, "maxRetries": 0,
                       "models": [{"id": "claude-test", "contextWindow": 50000}]}],
        "defaultModel": "claude/claude-test"})
    token, _pid, sid = await _session(d)
    await sdks_ready()
    loop.push(message_stream(text="first answer"))
    await _turn(d, token, sid, "r1", "hello there")
    loop.push(message_stream(text="SUMMARY: the user said hel", stop_reason="pause_turn"))
    await _assert_summary_refused(d, token, sid, "stop reason pause_turn: the provider paused the turn")
    loop.push(message_stream(text="SUMMARY: the user said hello.", stop_reason="stop_sequence"))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200 and r.json()["summary"] == "SUMMARY: the user said hello.", r.text


async def test_a_fork_sees_the_snips_made_before_its_seq_and_no_later_one_of_either_session(daemon_factory):
    # F-CTX-3 with F-ACT-7: a fork's Working Context is its source's as of the seq it was made
    # from, snips included; from then on each session's snips are its own.
    d = await daemon_factory(config=_faux())
    token, _pid, sid = await _session(d)
    await _turn(d, token, sid, "r1", "first words")
    await _turn(d, token, sid, "r2", "second words")
    ids = (await _context(d, token, sid))["workingItemIds"]
    assert len(ids) == 4, ids  # (two inputs, two answers)
    before = (await d.events(token, sid))[-1]["seq"]
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [ids[0]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    snip_seq = r.json()["seq"]

    forks = {}
    for seq in (before, snip_seq):
        r = await d.post(f"/sessions/{sid}/fork", token, {"seq": seq})
        assert r.status_code == 201, r.text
        forks[seq] = r.json()["id"]
    assert (await _context(d, token, forks[before]))["workingItemIds"] == ids
    after_snip = await _context(d, token, forks[snip_seq])
    assert after_snip["workingItemIds"] == ids[1:]
    assert {it["id"]: it["context"] for it in after_snip["items"]}[ids[0]] == "snipped"

    # A snip of the source after the fork does not reach the fork, nor a snip of the fork the source.
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [ids[3]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    r = await d.post(f"/sessions/{forks[snip_seq]}/context/snip", token, {"itemIds": [ids[1]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    assert (await _context(d, token, sid))["workingItemIds"] == [ids[1], ids[2]]
    assert (await _context(d, token, forks[snip_seq]))["workingItemIds"] == [ids[2], ids[3]]
    assert (await _context(d, token, forks[before]))["workingItemIds"] == ids

    # The fork's next request sends its own Working Context: the source's later snip is not in it.
    await _turn(d, token, forks[snip_seq], "f1", "third words")
    fork_ctx = await _context(d, token, forks[snip_seq])
    assert fork_ctx["workingItemIds"][:2] == [ids[2], ids[3]] and len(fork_ctx["workingItemIds"]) == 4, fork_ctx


async def test_a_context_emptied_by_snips_or_hides_has_nothing_to_compact_and_asks_no_summary(daemon_factory):
    # F-CTX-2 / F-CTX-3: with every item out of the Working Context there is nothing to summarize;
    # no summarizing request is asked (usage unchanged), nothing is recorded, and the next
    # request sends the new input alone.
    d = await daemon_factory(config=_faux({"when": SUMMARIZE, "text": "SUMMARY: nothing"}))
    token, _pid, sid = await _session(d)
    for op, undo in (("snip", "unsnip"), ("hide", "unhide")):
        await _turn(d, token, sid, f"{op}-1", f"words before the {op}")
        ids = (await _context(d, token, sid))["workingItemIds"]
        r = await d.post(f"/sessions/{sid}/context/{op}", token, {"itemIds": ids})
        assert r.status_code == 200 and r.json()["changed"] is True, r.text
        assert (await _context(d, token, sid))["workingItemIds"] == []
        n, usage = len(await d.events(token, sid)), (await d.view(token, sid))["usage"]
        compactions = (await _context(d, token, sid))["compactions"]
        r = await d.post(f"/sessions/{sid}/compact", token)
        assert r.status_code == 409 and error_of(r) == "NOTHING_TO_COMPACT", r.text
        assert len(await d.events(token, sid)) == n and (await d.view(token, sid))["usage"] == usage
        ctx = await _context(d, token, sid)
        assert ctx["compactions"] == compactions and ctx["compactionFailed"] is None, ctx
        view = await _turn(d, token, sid, f"{op}-2", f"words after the {op}")
        assert view["items"][-1]["text"] == f"(faux) You said: words after the {op}", view["items"][-1]
        requested = [e for e in await d.events(token, sid) if e["kind"] == "model.requested"][-1]
        assert requested["body"]["diagnostics"]["items"] == 1, requested["body"]
        r = await d.post(f"/sessions/{sid}/context/{undo}", token, {"itemIds": ids})
        assert r.status_code == 200 and r.json()["changed"] is True, r.text
        r = await d.post(f"/sessions/{sid}/compact", token)
        assert r.status_code == 200 and r.json()["replacedItemIds"], r.text
        assert set(r.json()["replacedItemIds"]) <= set(ids), (r.text, ids)


async def test_a_subagents_automatic_compaction_is_its_own_and_counted_once_after_a_restart(daemon_factory):
    # F-CTX-2 / F-CTX-5 with F-ACT-5: a subagent whose context reaches the threshold compacts its
    # own context (the main agent's is untouched); its summarizing request counts in its own usage,
    # the session's is the sum of its agents', and a restart folds the same numbers from the log.
    config = _faux({"when": SUMMARIZE, "text": "SUB-SUMMARY"},
                   {"when": "start sub", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "sub task: read big.txt"}}]},
                   {"when": "sub task", "toolCalls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]})
    config["providers"][0]["models"] = [{"id": "m1", "contextWindow": 5000}]  # (threshold 4000)
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    workspace = Path((await d.get("/projects", token)).json()["projects"][0]["workspace"])
    (workspace / "big.txt").write_text("word " * 4000)  # (about 5,000 estimated tokens)
    view = await _turn(d, token, sid, "r1", "start sub")
    [main, sub] = view["agents"]
    assert (main["agentId"], sub["parentAgentId"]) == ("main", "main"), view["agents"]

    sub_ctx = await _context(d, token, sid, agentId=sub["agentId"])
    assert sub_ctx["compactions"] == 1 and sub_ctx["compactionFailed"] is None, sub_ctx
    marks = {it["id"]: (it["role"], it["context"]) for it in sub_ctx["items"]}
    assert marks[sub_ctx["workingItemIds"][0]] == ("summary", "visible"), sub_ctx
    assert [m for m in marks.values() if m[1] == "compacted"] == [
        ("user", "compacted"), ("tool_call", "compacted"), ("tool_result", "compacted")], marks
    main_ctx = await _context(d, token, sid)
    assert main_ctx["compactions"] == 0 and all(it["context"] == "visible" for it in main_ctx["items"]), main_ctx
    [compacted] = [e for e in await d.events(token, sid) if e["kind"] == "context.compacted"]
    assert compacted["agent_id"] == sub["agentId"] and compacted["body"]["trigger"] == "auto", compacted

    # Usage: the subagent's two model requests and its summarizing one; the main agent's two.
    assert (sub["usage"]["requests"], main["usage"]["requests"], view["usage"]["requests"]) == (3, 2, 5), view["agents"]
    for count in ("inputTokens", "outputTokens", "totalInputTokens"):
        assert view["usage"][count] == main["usage"][count] + sub["usage"][count], (count, view["usage"])
    assert compacted["body"]["usage"]["input_tokens"] > 0, compacted["body"]

    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    again = await d2.view(token, sid)
    assert (again["usage"], again["agents"]) == (view["usage"], view["agents"]), again
    assert await _context(d2, token, sid, agentId=sub["agentId"]) == sub_ctx
    assert await _context(d2, token, sid) == main_ctx


async def test_the_skills_section_follows_the_workspace_between_two_turns_of_one_session(
        daemon_factory, nursery, monkeypatch, tmp_path):
    # F-CTX-4: the skills metadata is part of the system prompt, so a skill added, changed or
    # removed between two turns of one session is what the next request lists (its description on
    # one line), and the other sections stay as they were. (The prompt is rebuilt at most every
    # 2 s, a period runtime.prompt's own tests prove on a virtual clock; at 0 each request reads.)
    monkeypatch.setattr("runtime.prompt.PROMPT_REFRESH_SECONDS", 0.0)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(KEY_ENV, "sk-test-ctx3-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, KEY_ENV))
    token, _pid, sid = await _session(d)
    workspace = Path((await d.get("/projects", token)).json()["projects"][0]["workspace"])
    await sdks_ready()

    async def system_prompt(rid: str) -> str:
        loop.push(oc.chat_stream(text="ok"))
        await _turn(d, token, sid, rid, f"input {rid}")
        [first, *_] = loop.bodies[-1]["messages"]
        assert first["role"] == "system", first
        return first["content"]

    without = await system_prompt("r1")
    assert "# Skills" not in without and "# Rules" in without and "# Environment" in without, without
    skill_md = workspace / "skills" / "wombat" / "SKILL.md"
    skill_md.parent.mkdir(parents=True)
    skill_md.write_text("---\nname: wombat\ndescription: digs\n  deep holes\n---\nDig.\n")
    listed = await system_prompt("r2")
    assert "# Skills\n" in listed and "- wombat: digs deep holes (skills/wombat/SKILL.md)" in listed, listed[-500:]
    assert listed.replace(listed[listed.index("# Skills"):listed.index("# Environment")], "") == without
    skill_md.write_text("---\nname: wombat\ndescription: climbs trees\n---\nClimb.\n")
    changed = await system_prompt("r3")
    assert "- wombat: climbs trees (skills/wombat/SKILL.md)" in changed and "digs" not in changed, changed[-500:]
    shutil.rmtree(workspace / "skills")
    assert await system_prompt("r4") == without


async def test_usage_folded_from_snapshots_after_a_restart_counts_each_request_once(daemon_factory):
    # F-CTX-5 with F-ACT-2: a daemon started again folds the usage from a snapshot plus its tail
    # (snapshots every 3 events here, so most of it comes from one); a summarizing request whose
    # answer was not used (no text) counts once, as every other request, and the numbers are the
    # same again when the snapshots are not read (a period past the log's length).
    def config(every: int) -> dict[str, Any]:
        return _faux({"when": SUMMARIZE, "text": "", "inputTokens": 70, "outputTokens": 0},
                     {"when": "start sub", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "sub task"}}]},
                     sessions={"snapshotEvery": every})

    d = await daemon_factory(config=config(3))
    token, _pid, sid = await _session(d)
    for rid, text in (("r1", "hello"), ("r2", "start sub"), ("r3", "again")):
        await _turn(d, token, sid, rid, text)
    before = (await d.view(token, sid))["usage"]
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 502 and "no text" in r.json()["error"]["message"], r.text
    view = await d.view(token, sid)
    assert view["usage"]["requests"] == before["requests"] + 1 == 6, view["usage"]
    assert view["usage"]["inputTokens"] == before["inputTokens"] + 70, view["usage"]
    assert [a["usage"]["requests"] for a in view["agents"]] == [5, 1], view["agents"]
    context = await _context(d, token, sid)
    for every in (3, 10_000_000):
        await stop_daemon(d)
        d = await daemon_factory(config=config(every), root=d.root)
        again = await d.view(token, sid)
        assert (again["usage"], again["agents"]) == (view["usage"], view["agents"]), (every, again["usage"])
        assert await _context(d, token, sid) == context


async def test_an_edit_naming_many_unknown_items_says_how_many_it_did_not_name(daemon_factory):
    # F-CTX-3: an edit takes up to 1000 ids; the refusal names the first ten it does not know,
    # each once, and says how many more there are, nothing recorded.
    d = await daemon_factory(config=_faux())
    token, _pid, sid = await _session(d)
    await _turn(d, token, sid, "r1", "hello")
    ids = (await _context(d, token, sid))["workingItemIds"]
    unknown = [f"c{900000 + i}" for i in range(1000 - len(ids))]
    n = len(await d.events(token, sid))
    for route in ("snip", "unsnip", "hide", "unhide"):
        r = await d.post(f"/sessions/{sid}/context/{route}", token, {"itemIds": [*ids, *unknown]})
        assert r.status_code == 404 and error_of(r) == "CONTEXT_ITEM_NOT_FOUND", r.text
        assert r.json()["error"]["message"] == (
            f"no context item {', '.join(unknown[:10])} and {len(unknown) - 10} more in agent 'main'"), r.text
        r = await d.post(f"/sessions/{sid}/context/{route}", token, {"itemIds": ["c999999", ids[0], "c999999"]})
        assert r.status_code == 404 and r.json()["error"]["message"] == "no context item c999999 in agent 'main'", r.text
    assert len(await d.events(token, sid)) == n


async def test_an_edit_naming_exactly_ten_unknown_items_names_them_all_and_eleven_says_one_more(daemon_factory):
    # The edge of the list: ten unknown ids (one of them sent twice) are all named, with no "and
    # N more"; an eleventh is the first one left out.
    d = await daemon_factory(config=_faux())
    token, _pid, sid = await _session(d)
    await _turn(d, token, sid, "r1", "hello")
    ids = (await _context(d, token, sid))["workingItemIds"]
    unknown = [f"c{900000 + i}" for i in range(11)]
    n = len(await d.events(token, sid))
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [ids[0], *unknown[:10], unknown[3]]})
    assert r.status_code == 404 and error_of(r) == "CONTEXT_ITEM_NOT_FOUND", r.text
    assert r.json()["error"]["message"] == f"no context item {', '.join(unknown[:10])} in agent 'main'", r.text
    r = await d.post(f"/sessions/{sid}/context/hide", token, {"itemIds": [*unknown, ids[0]]})
    assert r.status_code == 404 and error_of(r) == "CONTEXT_ITEM_NOT_FOUND", r.text
    assert r.json()["error"]["message"] == f"no context item {', '.join(unknown[:10])} and 1 more in agent 'main'", \
        r.text
    assert len(await d.events(token, sid)) == n
