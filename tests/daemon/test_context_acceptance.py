"""SPEC §3 F-CTX-1 … F-CTX-4 as a client author tests them over HTTP: the edges earlier tests
left out (see "Context as a stranger tests it over HTTP (F-CTX-1 to F-CTX-4)" in docs/decisions.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from projections.session_state import pruned_placeholder
from runtime.prompt import MAX_PROJECT_FILE_CHARS

from ..providers.servers import anthropic as an
from ..providers.servers import openai_chat as oc
from ..providers.servers import openai_responses as orr
from ..providers.servers.base import ScriptedServer
from .conftest import error_of, stop_daemon
from .keyleaks import loop_config
from .review_skill import write_review_skill


# Each prompt of agents_md_prompts is a new project's first request, which spawns its executor:
# on a loaded machine that took longer than the suite's 10 s bound (the wait ends once idle).
FIRST_REQUEST_LIMIT = 60.0


async def agents_md_prompts(daemon_factory, nursery, tmp_path: Path, monkeypatch) -> tuple[
        Path, Callable[[str, bytes | None], Awaitable[str]]]:
    """A daemon whose model is a loopback Chat Completions server, with ``HOME`` in ``tmp_path``:
    the user's ``~/.agents/AGENTS.md`` path (not written), and ``prompt(name, workspace_md)``,
    the system prompt of the first request of a new project ``name`` whose workspace's AGENTS.md
    holds ``workspace_md`` (None: no such file)."""
    home = tmp_path / "home"
    (home / ".agents").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, "LENS_TEST_CTX_KEY"))
    token = await d.pair("c", strong=True)

    async def prompt(name: str, workspace_md: bytes | None) -> str:
        project = await d.project(token, name)  # (a new project each: its prompt is built afresh)
        if workspace_md is not None:
            (Path(project["workspace"]) / "AGENTS.md").write_bytes(workspace_md)
        sid = (await d.session(token, project["id"]))["id"]
        loop.push(oc.chat_stream(text="ok"))
        await d.submit(token, sid, "r1", "hello")
        view = await d.wait_idle(token, sid, timeout=FIRST_REQUEST_LIMIT)
        assert view["status"] == "idle" and view["items"][-1]["text"] == "ok", view
        return _system_text(loop.bodies[-1])

    return home / ".agents" / "AGENTS.md", prompt


def _system_text(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    assert first["role"] in ("system", "developer"), first
    content = first["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


async def test_an_agents_md_not_utf8_or_not_openable_is_named_in_the_prompt_and_a_long_one_cut_at_its_limit(
        daemon_factory, nursery, tmp_path, monkeypatch):
    # F-CTX-4 project context: a file that is there but cannot be used left the section out
    # silently, so neither the model nor the user learnt why its instructions were not followed.
    # Each case is a new project (the assembled prompt is kept per project for a moment).
    home_md, prompt = await agents_md_prompts(daemon_factory, nursery, tmp_path, monkeypatch)
    home_md.write_bytes(b"HOME \xff\xfe rules\n")
    text = await prompt("home-not-utf8", b"WS-RULE: run make.\n")
    assert ("## ~/.agents/AGENTS.md\n[left out: it is not UTF-8 text (byte 5); fix the file for its "
            "instructions to apply]\n\n## <workspace>/AGENTS.md\nWS-RULE: run make.") in text, text
    home_md.unlink()
    os.symlink(home_md.name, home_md)  # a link to itself: it cannot be opened
    text = await prompt("home-loop", None)
    assert "## ~/.agents/AGENTS.md\n[left out: it cannot be opened (Too many levels of symbolic links)" in text, text
    home_md.unlink()
    text = await prompt("workspace-not-utf8", b"WS-RULE ok\n\x80 then bad\n")
    assert ("## <workspace>/AGENTS.md\n[left out: it is not UTF-8 text (byte 11); fix the file for its "
            "instructions to apply]") in text and "~/.agents" not in text and "WS-RULE" not in text, text
    text = await prompt("missing", None)
    assert "# Project context" not in text and "left out" not in text  # (no file: no section, no note)

    # The limit of a file in the prompt is 65,536 characters: at it, all of it; one past, cut there
    # with a note that gives the file's length.
    body = "é" * (MAX_PROJECT_FILE_CHARS - 1) + "Z"
    text = await prompt("at-limit", body.encode())
    assert body in text and "truncated" not in text
    text = await prompt("past-limit", (body + "Y").encode())
    assert (body + "\n[… truncated: the file has 65537 characters; read it for the rest]") in text
    assert body + "Y" not in text
    # The user's own file is cut so too, but lies outside the workspace: no tool reads the rest.
    home_md.write_text("h" * (MAX_PROJECT_FILE_CHARS + 1))
    text = await prompt("home-past-limit", None)
    assert ("h" * MAX_PROJECT_FILE_CHARS + "\n[… truncated: the file has 65537 characters; the rest is not shown]"
            ) in text, text[-300:]



async def test_the_next_request_holds_the_summary_and_what_followed_while_history_keeps_everything(
        daemon_factory, nursery, monkeypatch):
    # F-CTX-1 as the provider receives it (Chat Completions over the wire): a pruned result goes
    # as its placeholder, an included one whole again, a snipped item not at all; after a
    # compaction the request holds the system prompt, the summary and the later items exactly,
    # while every replaced item stays readable by `GET /history/items/{id}` and by the model's
    # `history_read`, and the log keeps the events.
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, "LENS_TEST_CTX_KEY", context={
        "compaction": {"keepRecentTokens": 0},  # (the summary replaces every round; none kept as written)
        "pruneToolResults": {"enabled": True, "minTokens": 1, "keepRecentRounds": 1}}))
    token = await d.pair("c", strong=True)
    project = await d.project(token)
    (Path(project["workspace"]) / "a.txt").write_text("ALPHA-CONTENT " * 50)
    sid = (await d.session(token, project["id"]))["id"]

    async def turn(rid: str, text: str, *replies: Any) -> list[dict[str, Any]]:
        loop.push(*replies)
        await d.submit(token, sid, rid, text)
        view = await d.wait_idle(token, sid)
        assert view["status"] == "idle", view
        return loop.bodies[-1]["messages"][1:]  # (after the system prompt)

    await turn("r1", "my quokka is Pim; read a.txt", oc.chat_stream(calls=[("call_a", "read_file", {"path": "a.txt"})]),
               oc.chat_stream(text="read it"))
    sent = await turn("r2", "SNIP-ME please", oc.chat_stream(text="second answer"))
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}]}
    [read] = [it for it in (await d.view(token, sid))["items"] if it["role"] == "tool_call"]
    placeholder = pruned_placeholder(read["result"]["itemId"])
    assert sent == [{"role": "user", "content": "my quokka is Pim; read a.txt"}, call,
                    {"role": "tool", "tool_call_id": "call_a", "content": placeholder},
                    {"role": "assistant", "content": "read it"}, {"role": "user", "content": "SNIP-ME please"}]
    items = {i["role"] + ":" + (i.get("text") or ""): i for i in (await d.view(token, sid))["items"]}
    snip_id = items["user:SNIP-ME please"]["id"]
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [snip_id]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    r = await d.post(f"/sessions/{sid}/context/include", token, {"callId": "call_a"})
    assert r.status_code == 200 and r.json()["items"][0]["context"] == "included", r.text
    sent = await turn("r3", "third question", oc.chat_stream(text="third answer"))
    assert [m.get("content") for m in sent if m["role"] == "user"] == ["my quokka is Pim; read a.txt", "third question"]
    [result] = [m for m in sent if m["role"] == "tool"]
    assert result["content"].count("ALPHA-CONTENT") == 50  # included: whole again
    assert {"role": "assistant", "content": "second answer"} in sent  # (only the snipped item went)

    before = [i["id"] for i in (await d.view(token, sid))["items"]]
    loop.push(oc.chat_stream(text="SUMMARY: the user's quokka is Pim; a.txt holds ALPHA."))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    summary = r.json()["summary"]
    sent = await turn("r4", "what is my quokka called?", oc.chat_stream(text="Pim"))
    assert len(sent) == 2 and sent[1] == {"role": "user", "content": "what is my quokka called?"}, sent
    assert summary in str(sent[0]["content"]) and "ALPHA-CONTENT" not in str(sent)
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    marks = {c["id"]: c["context"] for c in context["items"] if c["id"] in before}
    assert marks == {i: "snipped" if i == snip_id else "compacted" for i in before}, marks

    # The Full Context keeps them: each replaced item reads back whole, over HTTP and by the model.
    result_id = next(i["result"]["itemId"] for i in items.values() if i["role"] == "tool_call")
    r = await d.get(f"/history/items/{result_id}", token)
    assert r.status_code == 200 and r.json()["text"].count("ALPHA-CONTENT") == 50, r.text[:300]
    r = await d.get(f"/history/items/{snip_id}", token)
    assert r.status_code == 200 and "SNIP-ME please" in r.json()["text"], r.text[:300]
    sent = await turn("r5", "read the old result", oc.chat_stream(calls=[
        ("call_h", "history_read", {"context_item_id": result_id})]), oc.chat_stream(text="done"))
    [read] = [m for m in sent if m["role"] == "tool" and m["tool_call_id"] == "call_h"]
    assert "ALPHA-CONTENT" in read["content"], read
    kinds = [e["kind"] for e in await d.events(token, sid)]
    assert {"tool.finished", "context.edited", "context.compacted"} <= set(kinds), kinds


async def test_trigger_percent_is_taken_from_1_to_100_and_resolves_saved_then_config_then_default(daemon_factory):
    # F-CTX-2: `context.compaction.triggerPercent` through the config-file API at its limits and
    # one past each (the message names the key and its range); then each level of "saved value
    # > config > default" as `GET …/context` shows it and as the threshold follows it: nothing
    # configured (80, the default), the config file's value after a restart, the session's PATCH.
    d = await daemon_factory()
    token = await d.pair("c", strong=True)
    name = "lens.jsonc"
    for value, ok in ((0, False), (1, True), (101, False), (100, True), (-1, False), (50.5, False), ("80", False)):
        r = await d.put(f"/config/files/{name}", token, {"text": json.dumps({"context": {"compaction": {"triggerPercent": value}}})})
        if ok:
            assert r.status_code == 200 and r.json()["unknownKeys"] == [], (value, r.text)
        else:
            assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", (value, r.text)
            assert "context.compaction.triggerPercent" in r.json()["error"]["message"], (value, r.text)
            if value in (0, 101, -1):
                assert f"must be 1 to 100, not {value}" in r.json()["error"]["message"], r.text
    r = await d.put(f"/config/files/{name}", token, {"text": "{}"})
    assert r.status_code == 200, r.text
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]

    async def resolved() -> tuple[int, str, int, int]:
        c = (await d.get(f"/sessions/{sid}/context", token)).json()
        return (c["settings"]["compactionTriggerPercent"], c["settings"]["sources"]["compactionTriggerPercent"],
                c["compactionThreshold"], c["contextWindow"])

    percent, source, threshold, window = await resolved()
    assert (percent, source) == (80, "default") and threshold == -(-window * 80 // 100), (percent, source, threshold)
    r = await d.put(f"/config/files/{name}", token, {"text": json.dumps({"context": {"compaction": {"triggerPercent": 100}}})})
    assert r.status_code == 200, r.text
    await stop_daemon(d)
    d = await daemon_factory(root=d.root)
    assert await resolved() == (100, "config", window, window)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"compactionTriggerPercent": 1})
    assert r.status_code == 200, r.text
    assert await resolved() == (1, "saved", -(-window // 100), window)  # (rounded up)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"compactionTriggerPercent": None})
    assert r.status_code == 200, r.text
    assert await resolved() == (100, "config", window, window)


def _wire(protocol: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of each message after the system prompt, as ``protocol`` carries them."""
    def text_of(content: Any) -> str:
        if isinstance(content, str):
            return content
        return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))

    if protocol == "anthropic":  # (one message may carry several blocks: one entry per block)
        return [(m["role"], m["content"]) if isinstance(m["content"], str) else (m["role"], text_of([b]))
                for m in body["messages"] for b in ([m["content"]] if isinstance(m["content"], str) else m["content"])]
    if protocol == "openai-responses":
        return [(m.get("role", m.get("type", "")), text_of(m.get("content"))) for m in body["input"]][1:]
    return [(m["role"], text_of(m.get("content"))) for m in body["messages"]][1:]


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
async def test_a_skill_loaded_later_stays_at_its_real_position_on_each_protocols_wire(
        daemon_factory, nursery, monkeypatch, protocol):
    # F-CTX-4 "System instructions added later (skill loads, instruction updates) stay at their
    # real position in history": a skill loaded in the second turn goes between the first turn and
    # the input it came with, in that request and every later one, never into the system prompt.
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    reply = {"openai-chat": lambda t: oc.chat_stream(text=t), "openai-responses": lambda t: orr.response_stream(text=t),
             "anthropic": lambda t: an.message_stream(text=t)}[protocol]
    d = await daemon_factory(config={"providers": [
        {"id": "loop", "protocol": protocol, "baseUrl": url if protocol == "anthropic" else f"{url}/v1",
         "apiKeyEnv": "LENS_TEST_CTX_KEY", "maxRetries": 0, "models": [{"id": "m"}]}], "defaultModel": "loop/m"})
    token = await d.pair("c", strong=True)
    project = await d.project(token)
    write_review_skill(project["workspace"])
    sid = (await d.session(token, project["id"]))["id"]
    for rid, text, answer in (("r1", "first question", "one"), ("r2", "/skill:review second question", "two"),
                              ("r3", "third question", "three")):
        loop.push(reply(answer))
        await d.submit(token, sid, rid, text)
        view = await d.wait_idle(token, sid)
        assert view["status"] == "idle", view
    second, third = (_wire(protocol, b) for b in loop.bodies[1:])
    instruction_role = {"anthropic": "user", "openai-chat": "system", "openai-responses": "system"}[protocol]
    [(role, instruction)] = [(r, t) for r, t in second if "REVIEW-STEPS" in t]
    assert role in (instruction_role, "developer") and 'Skill "review" loaded' in instruction, second
    assert second == [("user", "first question"), ("assistant", "one"), (role, instruction), ("user", "second question")]
    assert third == [*second, ("assistant", "two"), ("user", "third question")], third
    for body in loop.bodies:  # the system prompt holds the skill's metadata only, in every request
        prompt = json.dumps({"anthropic": lambda: body["system"], "openai-chat": lambda: body["messages"][0],
                             "openai-responses": lambda: [body.get("instructions"), body["input"][0]]}[protocol]())
        assert "REVIEW-DESC" in prompt and "REVIEW-STEPS" not in prompt, prompt[:300]


async def test_pruning_is_off_by_default_so_an_old_large_result_goes_whole_rounds_later(
        daemon_factory, nursery, monkeypatch):
    # F-CTX-2 "tool-result pruning (off by default …)": nothing configured, nothing saved, an old
    # result far past the pruning size still goes whole, four rounds on; switched on by the
    # session's PATCH, the next request carries the placeholder, and the log keeps the result.
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, "LENS_TEST_CTX_KEY"))
    token = await d.pair("c", strong=True)
    project = await d.project(token)
    (Path(project["workspace"]) / "big.txt").write_text("BIG-LINE of the old result\n" * 2000)  # ~10k tokens
    sid = (await d.session(token, project["id"]))["id"]
    settings = (await d.get(f"/sessions/{sid}/context", token)).json()["settings"]
    assert (settings["pruneToolResults"], settings["sources"]["pruneToolResults"]) == (False, "default")
    loop.push(oc.chat_stream(calls=[("call_big", "read_file", {"path": "big.txt"})]), oc.chat_stream(text="read"))
    await d.submit(token, sid, "r0", "read big.txt")
    await d.wait_idle(token, sid)

    def result(body: dict[str, Any]) -> str:
        [m] = [m for m in body["messages"] if m.get("tool_call_id") == "call_big"]
        return m["content"]

    whole = result(loop.bodies[-1])
    assert whole.count("BIG-LINE") > 1000
    for i in range(1, 5):
        loop.push(oc.chat_stream(text=f"answer {i}"))
        await d.submit(token, sid, f"r{i}", f"question {i}")
        await d.wait_idle(token, sid)
        assert result(loop.bodies[-1]) == whole, i
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"pruneToolResults": True})
    assert r.status_code == 200, r.text
    loop.push(oc.chat_stream(text="answer 5"))
    await d.submit(token, sid, "r5", "question 5")
    await d.wait_idle(token, sid)
    [call] = [it for it in (await d.view(token, sid))["items"] if it["role"] == "tool_call"]
    assert result(loop.bodies[-1]) == pruned_placeholder(call["result"]["itemId"])
    [finished] = [e for e in await d.events(token, sid) if e["kind"] == "tool.finished"]
    assert "BIG-LINE" in json.dumps(finished["body"])


async def test_compact_takes_an_empty_body_or_an_empty_object_and_refuses_any_field(daemon_factory):
    # F-CTX-2 manual compaction, `POST /sessions/{id}/compact`: a body field was ignored, so
    # `{"agentId": "sub_…"}` compacted the main agent while the client meant a subagent. Any field
    # is now 422 naming it, nothing written; no body and `{}` compact as before.
    d = await daemon_factory()
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    path = f"/sessions/{sid}/compact"
    for rid in ("r1", "r2"):
        await d.submit(token, sid, rid, f"hello {rid}")
        await d.wait_idle(token, sid)
        before = await d.events(token, sid)
        for body in ({"agentId": "sub_call_1"}, {"agentId": "main"}, {"x": 1}):
            r = await d.post(path, token, body)
            assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", (body, r.text)
            assert f"unknown field `{next(iter(body))}`" in r.json()["error"]["message"], r.text
        assert await d.events(token, sid) == before
        # `{}`, then no body at all
        r = await (d.post(path, token, {}) if rid == "r1" else d.request("POST", path, token))
        assert r.status_code == 200 and r.json()["trigger"] == "manual", r.text


async def test_a_pruned_result_names_the_history_read_call_that_brings_it_back(daemon_factory, nursery, monkeypatch):
    # F-CTX-2 pruning: the placeholder said "include it again by id", naming no id and an edit the
    # model cannot make (Include is the user's). It now names the model's own tool, history_read,
    # with the item's context_item_id; called as it says, the tool reads the result back whole.
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, "LENS_TEST_CTX_KEY", context={
        "pruneToolResults": {"enabled": True, "minTokens": 1, "keepRecentRounds": 1}}))
    token = await d.pair("c", strong=True)
    project = await d.project(token)
    (Path(project["workspace"]) / "big.txt").write_text("BIG-LINE of the old result\n" * 200)
    sid = (await d.session(token, project["id"]))["id"]
    loop.push(oc.chat_stream(calls=[("call_big", "read_file", {"path": "big.txt"})]), oc.chat_stream(text="read"))
    await d.submit(token, sid, "r0", "read big.txt")
    await d.wait_idle(token, sid)
    [call] = [it for it in (await d.view(token, sid))["items"] if it["role"] == "tool_call"]
    item_id = call["result"]["itemId"]

    loop.push(oc.chat_stream(calls=[("call_back", "history_read", {"context_item_id": item_id})]),
              oc.chat_stream(text="read it back"))
    await d.submit(token, sid, "r1", "what did big.txt hold?")
    await d.wait_idle(token, sid)
    asked, answered = loop.bodies[-2], loop.bodies[-1]
    [pruned] = [m["content"] for m in asked["messages"] if m.get("tool_call_id") == "call_big"]
    assert pruned == ('[tool result pruned from the working context; history_read {"context_item_id": "'
                      + item_id + '"} reads it again]'), pruned
    assert "history_read" in {t["function"]["name"] for t in asked["tools"]}  # (the model has the tool)
    [back] = [m["content"] for m in answered["messages"] if m.get("tool_call_id") == "call_back"]
    assert back.count("BIG-LINE") == 200 and item_id in back, back[:300]
