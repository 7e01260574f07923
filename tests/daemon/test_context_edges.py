"""SPEC §3 F-CTX-1 … F-CTX-5 at their edges through a running daemon: what earlier passes left
untried (see "Context at its edges through a real daemon" in docs/decisions.md)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Callable

from runtime.working_context import AUTO_COMPACTION_RETRY_AFTER

from ..providers.conftest import tiny_png
from ..providers.servers import openai_chat as oc
from ..providers.servers.base import ScriptedServer
from .conftest import Daemon, awaiting_an_answer, error_of, stop_daemon
from .keyleaks import loop_config
from .test_context_acceptance import _system_text
from .test_context_http import _session
from .test_question_restart import CONFIG as ASKING

FILLER = "word " * 50_000  # (about 62,500 estimated tokens: past half of a 100,000-token window)


def _faux(script: list[dict[str, Any]], **context: Any) -> dict[str, Any]:
    return {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 100_000}],
                           "script": script}],
            "defaultModel": "faux/m1", "context": {"compaction": {"triggerPercent": 50}, **context}}


async def _failed_compactions(d: Daemon, token: str, sid: str) -> list[dict[str, Any]]:
    return [e["body"] for e in await d.events(token, sid) if e["kind"] == "context.compaction_failed"]


async def test_an_automatic_compaction_whose_summary_request_fails_is_recorded_and_counts_no_request(
        daemon_factory):
    # F-CTX-2 with a summarizer that fails at once: the request went on as it was, and nothing but
    # the daemon's log said a compaction had been tried and why it failed; the user, the
    # dashboard and `GET …/events` saw a context past its threshold and no word.
    config = _faux([{"when": "Summarize the conversation so far",
                     "error": {"code": "OVERLOADED", "message": "the summarizer is busy"}},
                    {"when": "call a tool", "toolCalls": [{"name": "get_system_time", "arguments": {}}]}])
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    await d.submit(token, sid, "r1", "call a tool " + FILLER)
    view = await d.wait_idle(token, sid)
    assert [it["role"] for it in view["items"]] == ["user", "tool_call", "assistant"], view["items"]
    assert view["items"][-1]["text"].startswith("The tool answered"), view["items"][-1]
    # Tried once, before the request after the tool's result (the first one held only the input,
    # which a compaction keeps as written).
    assert await _failed_compactions(d, token, sid) == [{
        "code": "COMPACTION_FAILED", "message": "the summarizing request failed: OVERLOADED: the summarizer is busy",
        "trigger": "auto", "usage": None, "provider": "faux", "model": "m1"}]
    # The Working Context is as it was, and the request that never got an answer is no request
    # of the session's usage (its counts unknown, not guessed, and not one more "unreported").
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["compactions"] == 0 and context["workingItemIds"] == [it["id"] for it in context["items"]]
    assert context["estimatedTokens"] >= context["compactionThreshold"] == 50_000
    usage = view["usage"]
    assert usage["requests"] == 2 and usage["unreported"]["inputTokens"] == 0, usage

    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    assert (await d2.view(token, sid))["usage"] == usage


async def test_a_workspace_agents_md_the_executor_will_not_read_is_named_in_the_prompt(
        daemon_factory, nursery, tmp_path, monkeypatch):
    # F-CTX-4 project context: `<workspace>/AGENTS.md` is read through the executor, which reads
    # nothing outside the workspace. A link to a file elsewhere (a shared rules file) or a link
    # loop was left out of the prompt with a line in the daemon's log only, while a file that is
    # not UTF-8 gets a note in its place: the model and the user could not learn why the rules
    # were not followed.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, "LENS_TEST_CTX_KEY"))
    token = await d.pair("c", strong=True)
    outside = tmp_path / "shared-rules.md"
    outside.write_text("OUTSIDE-RULE: never read.\n")

    async def prompt(name: str, place: Callable[[Path], None]) -> str:
        project = await d.project(token, name)  # (a new project each: its prompt is built afresh)
        place(Path(project["workspace"]) / "AGENTS.md")
        sid = (await d.session(token, project["id"]))["id"]
        loop.push(oc.chat_stream(text="ok"))
        await d.submit(token, sid, "r1", "hello")
        await d.wait_idle(token, sid)
        return _system_text(loop.bodies[-1])

    text = await prompt("link-out", lambda md: md.symlink_to(outside))
    assert ("## <workspace>/AGENTS.md\n[left out: the executor does not read it (PATH_OUTSIDE_WORKSPACE: AGENTS.md: "
            "leads outside the workspace); fix the file for its instructions to apply]") in text, text
    assert "OUTSIDE-RULE" not in text
    text = await prompt("link-loop", lambda md: md.symlink_to(md.name))
    assert ("## <workspace>/AGENTS.md\n[left out: the executor does not read it (TOO_MANY_LINKS: AGENTS.md: "
            "too many levels of symbolic links); fix the file for its instructions to apply]") in text, text
    # A link inside the workspace is read; a dangling one is a missing file (no section, no note).
    text = await prompt("link-in", lambda md: (md.with_name("rules.md").write_text("IN-RULE\n"),
                                               md.symlink_to("rules.md")))
    assert "## <workspace>/AGENTS.md\nIN-RULE" in text, text
    text = await prompt("link-dangling", lambda md: md.symlink_to("gone.md"))
    assert "# Project context" not in text and "left out" not in text, text


async def test_older_images_counts_an_image_result_included_again_after_a_snip(daemon_factory, nursery, monkeypatch):
    # F-CTX-3: Snip of older images looked for image-bearing results in the Working Context that
    # were never snipped, so one snipped and then re-attached by Include Result (in the Working
    # Context again, its images sent) was neither counted among the newest kept nor snipped: the
    # snip answered `changed: false` and the next request still carried both images.
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    config = {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                             "apiKeyEnv": "LENS_TEST_CTX_KEY", "maxRetries": 0,
                             "models": [{"id": "m", "images": True}]}], "defaultModel": "loop/m"}
    d = await daemon_factory(config=config)
    token = await d.pair("c", strong=True)
    project = await d.project(token)
    shots = [tiny_png(0), tiny_png(200)]
    for i, png in enumerate(shots):
        Path(project["workspace"], f"shot{i}.png").write_bytes(png)
    sid = (await d.session(token, project["id"]))["id"]

    async def images_sent(d: Daemon, rid: str) -> list[int]:
        loop.push(oc.chat_stream(text="seen"))
        await d.submit(token, sid, rid, "what do you see?")
        await d.wait_idle(token, sid)
        parts = [p for m in loop.bodies[-1]["messages"] if isinstance(m.get("content"), list) for p in m["content"]]
        return [shots.index(base64.b64decode(p["image_url"]["url"].split(",", 1)[1]))
                for p in parts if p.get("type") == "image_url"]

    loop.push(oc.chat_stream(calls=[(f"call_{i}", "view_image", {"path": f"shot{i}.png"}) for i in range(2)]),
              oc.chat_stream(text="two shots"))
    await d.submit(token, sid, "r1", "look at the shots")
    await d.wait_idle(token, sid)
    first, second = [it["result"]["itemId"] for it in (await d.view(token, sid))["items"] if it["role"] == "tool_call"]
    older = {"olderImages": True, "keepImages": 1}
    r = await d.post(f"/sessions/{sid}/context/snip", token, older)
    assert r.status_code == 200 and r.json()["itemIds"] == [first], r.text
    assert await images_sent(d, "r2") == [1]
    r = await d.post(f"/sessions/{sid}/context/include", token, {"callId": "call_0"})
    assert r.status_code == 200 and r.json()["items"] == [{"id": first, "context": "included"}], r.text
    assert await images_sent(d, "r3") == [0, 1]

    r = await d.post(f"/sessions/{sid}/context/snip", token, older)
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    assert r.json()["items"] == [{"id": first, "context": "snipped"}], r.text
    assert await images_sent(d, "r4") == [1]
    r = await d.post(f"/sessions/{sid}/context/snip", token, older)  # (the newest is kept: nothing more)
    assert r.status_code == 200 and r.json()["changed"] is False, r.text
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"olderImages": True, "keepImages": 0})
    assert r.status_code == 200 and r.json()["itemIds"] == [second], r.text

    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    assert await images_sent(d2, "r5") == []


async def test_compact_while_the_session_awaits_an_answer_says_so(daemon_factory):
    # `POST …/compact` of a session awaiting an answer is SESSION_BUSY, as docs/http-api.md says; its message
    # said the session "is running" while its view said `awaiting_answer`.
    d = await daemon_factory(config=ASKING)
    token = await d.pair("c", strong=True)
    sid, view = await awaiting_an_answer(d, token, "pick a colour")
    n = len(await d.events(token, sid))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert (r.status_code, error_of(r)) == (409, "SESSION_BUSY"), r.text
    assert r.json()["error"]["message"] == f"session {sid!r} awaits an answer to its question; compact it when idle"
    assert len(await d.events(token, sid)) == n and (await d.view(token, sid))["status"] == "awaiting_answer"


async def test_a_tool_call_awaiting_its_answer_is_not_snipped_or_hidden(daemon_factory):
    # F-CTX-3: a snip (or hide) of the `ask_user` call while the session awaited its answer was
    # taken; the answer's result then came in with its call out of the Working Context and was
    # left out with it, so the model saw the input alone and asked again.
    d = await daemon_factory(config=ASKING)
    token = await d.pair("c", strong=True)
    sid, view = await awaiting_an_answer(d, token, "pick a colour")
    [call] = [it for it in view["items"] if it["role"] == "tool_call"]
    n = len(await d.events(token, sid))
    for op in ("snip", "hide"):
        r = await d.post(f"/sessions/{sid}/context/{op}", token, {"itemIds": [call["id"]]})
        assert (r.status_code, error_of(r)) == (409, "CONTEXT_CALL_PENDING"), r.text
        assert r.json()["error"]["message"] == (f"the tool call {call['id']} has no result yet (it runs or awaits "
                                                "an answer); snip or hide it once it has one"), r.text
    assert len(await d.events(token, sid)) == n

    qid = view["questions"][0]["questionId"]
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["blue"]})
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)
    # Once its result is in, the call is snipped as before.
    r = await d.post(f"/sessions/{sid}/context/snip", token, {"itemIds": [call["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    marks = {it["id"]: it["context"] for it in context["items"]}
    assert marks[call["id"]] == "snipped" and call["id"] not in context["workingItemIds"], context


async def test_an_automatic_compaction_that_failed_is_not_tried_again_in_the_same_task(daemon_factory):
    # F-CTX-2 with a summarizer that keeps failing: a session past its threshold tried (and
    # recorded) an automatic compaction before every model request of its task. Once failed, it
    # is not tried again in that task; the next input's task tries again.
    call = {"toolCalls": [{"name": "get_system_time", "arguments": {}}]}
    config = _faux([{"when": "Summarize the conversation so far",
                     "error": {"code": "OVERLOADED", "message": "the summarizer is busy"}}, call, call, call])
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    await d.submit(token, sid, "r1", "look at the time " + FILLER)
    view = await d.wait_idle(token, sid)
    assert [it["role"] for it in view["items"]] == ["user", "tool_call", "tool_call", "tool_call", "assistant"], \
        view["items"]
    # Four requests past the threshold but the first (its input alone, kept as written): one try.
    failed = await _failed_compactions(d, token, sid)
    assert [(f["code"], f["trigger"]) for f in failed] == [("COMPACTION_FAILED", "auto")], failed
    assert view["usage"]["requests"] == 4, view["usage"]

    await d.submit(token, sid, "r2", "and now?")
    view = await d.wait_idle(token, sid)
    assert len(await _failed_compactions(d, token, sid)) == 2
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["compactions"] == 0 and context["estimatedTokens"] >= context["compactionThreshold"], context
    last = [e for e in await d.events(token, sid) if e["kind"] == "context.compaction_failed"][-1]
    assert context["compactionFailed"] == {"seq": last["seq"], "trigger": "auto", "code": "COMPACTION_FAILED",
                                           "message": last["body"]["message"]}, context

    # Replay decides the same: after a restart the next task tries once more, and only once.
    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    await d2.submit(token, sid, "r3", "/tool get_system_time")
    await d2.wait_idle(token, sid)
    assert len(await _failed_compactions(d2, token, sid)) == 3


async def test_a_long_task_tries_its_automatic_compaction_again_a_few_answers_after_it_failed(daemon_factory):
    # Once failed, no automatic compaction was tried again in the task: a long task whose
    # summarizer had failed once (a passing outage) grew on to its window's end uncompacted.
    # It is tried again AUTO_COMPACTION_RETRY_AFTER answers later, and only then.
    call = {"toolCalls": [{"name": "get_system_time", "arguments": {}}]}
    config = _faux([{"when": "Summarize the conversation so far",
                     "error": {"code": "OVERLOADED", "message": "the summarizer is busy"}}] + [call] * 7)
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    await d.submit(token, sid, "r1", "look at the time " + FILLER)
    view = await d.wait_idle(token, sid)
    assert view["usage"]["requests"] == 8, view["usage"]
    # Before the second request, then AUTO_COMPACTION_RETRY_AFTER answers later (before the
    # sixth); the seventh and eighth come sooner than that after it.
    evs = await d.events(token, sid)
    requested = [e["seq"] for e in evs if e["kind"] == "model.requested"]
    tried = [e["seq"] for e in evs if e["kind"] == "context.compaction_failed"]
    assert [sum(1 for r in requested if r < f) for f in tried] == [1, 1 + AUTO_COMPACTION_RETRY_AFTER], (requested, tried)


async def test_a_manual_compaction_whose_summary_request_fails_at_once_is_recorded(daemon_factory):
    # F-CTX-2 by hand with a summarizer that fails before any answer: the caller had its 502 and
    # the log, the live stream and the dashboard nothing. It is recorded as an automatic one is.
    config = _faux([{"when": "Summarize the conversation so far",
                     "error": {"code": "OVERLOADED", "message": "the summarizer is busy"}}])
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    await d.submit(token, sid, "r1", "hello")
    view = await d.wait_idle(token, sid)
    r = await d.post(f"/sessions/{sid}/compact", token)
    message = "the summarizing request failed: OVERLOADED: the summarizer is busy"
    assert (r.status_code, error_of(r), r.json()["error"]["message"]) == (502, "COMPACTION_FAILED", message), r.text
    assert await _failed_compactions(d, token, sid) == [{
        "code": "COMPACTION_FAILED", "message": message, "trigger": "manual", "usage": None, "provider": "faux",
        "model": "m1"}]
    [last] = [e for e in await d.events(token, sid) if e["kind"] == "context.compaction_failed"]
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["compactionFailed"] == {"seq": last["seq"], "trigger": "manual", "code": "COMPACTION_FAILED",
                                           "message": message}, context
    assert context["compactions"] == 0 and context["workingItemIds"] == [it["id"] for it in view["items"]]
    # No answer came, so no request is counted.
    assert (await d.view(token, sid))["usage"] == view["usage"]

    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    assert (await d2.view(token, sid))["usage"] == view["usage"]
