"""SPEC §6–7 read as a client author reads them, through the running daemon: the edges of
``history_search`` / ``history_read`` as the model calls them (F-TOOL-7), the main-agent-only
tools refused to a subagent at execution (F-HAR-1, F-ACT-5), and the job routes on a job that
ended by itself, on another session's job and at their read limit (F-HAR-2).

The (faux) model calls the tools: ``/tool NAME {json}`` as an input; a subagent's prompt of that
form has the subagent call it. Every wait is bounded (conftest ``wait_until``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import trio

from events.ids import is_id

from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, DaemonFactory, error_of, question_opened, run_tool, sdks_ready, wait_until
from .test_jobs import finished_of, log_of, start_job

# A text of 1-, 2-, 3- and 4-byte characters, found by one word of it.
TEXT = "quokka é€𝄞 ok"
OTHER = "quokka ü"


async def _setup(d: Daemon) -> tuple[str, str]:
    token = await d.pair("harness-client", strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"]


def _error(body: dict[str, Any]) -> tuple[str, str]:
    assert body["status"] == "error", body
    return body["error_code"], body["structured_content"]["error"]["message"]


async def test_history_tools_page_by_cursor_and_by_utf8_bytes_and_refuse_past_their_limits(daemon: Daemon):
    token, searched = await _setup(daemon)
    project_id = (await daemon.get(f"/sessions/{searched}", token)).json()["projectId"]
    # The items searched are in one session; the calls run in another, so that the calls' own
    # inputs and results (which hold the word too) are not among what is paged through.
    for i, text in enumerate([TEXT, OTHER, "quokka three", "quokka four", "quokka five"]):
        await daemon.submit(token, searched, f"in{i}", text)
        await daemon.wait_idle(token, searched)
    sid = (await daemon.session(token, project_id))["id"]
    everything = await daemon.post("/history/search", token, {"projectId": project_id, "query": "quokka",
                                                              "sessionId": searched, "limit": 100})
    assert everything.status_code == 200, everything.text
    expected = [r["contextItemId"] for r in everything.json()["results"]]
    assert len(expected) >= 10  # five inputs and five echoes

    n = 0

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        nonlocal n
        n += 1
        return await run_tool(daemon, token, sid, f"t{n}", name, args)

    # history_search pages by after_context_item_id: every item once, in the order of one page.
    seen: list[str] = []
    after = None
    while True:
        args = {"query": "quokka", "session_id": searched, "limit": 3}
        if after is not None:
            args["after_context_item_id"] = after
        body = await call("history_search", args)
        assert body["status"] == "ok", body
        page = body["structured_content"]
        assert len(page["results"]) <= 3
        seen += [r["context_item_id"] for r in page["results"]]
        after = page["next_after_context_item_id"]
        if after is None:
            break
        assert after == seen[-1]
    assert seen == expected
    # limit 1 to 100
    for limit, ok in ((1, True), (100, True), (0, False), (101, False)):
        body = await call("history_search", {"query": "quokka", "session_id": searched, "limit": limit})
        if ok:
            assert body["status"] == "ok" and len(body["structured_content"]["results"]) == min(limit, len(expected))
        else:
            code, message = _error(body)
            assert code == "INVALID_ARGUMENT" and "limit" in message, message

    # history_read pages by UTF-8 bytes and never splits a character; one digest, the text's.
    hits = everything.json()["results"]
    item = next(r["contextItemId"] for r in hits if r["role"] == "user" and "𝄞" in r["snippet"])
    other = next(r["contextItemId"] for r in hits if r["role"] == "user" and r["snippet"].endswith("ü"))
    full = TEXT.encode()
    for limit in (1, 3, 4, 1048576):
        out, offset, digests = b"", 0, set()
        while True:
            body = await call("history_read", {"context_item_id": item, "offset": offset, "limit": limit})
            assert body["status"] == "ok", body
            page = body["structured_content"]
            assert page["offset"] == offset and page["size"] == len(full)
            text = body["content"][0]["text"].split(":\n", 1)[1]
            chunk = text.encode()
            assert page["next_offset"] - offset == len(chunk) and len(chunk) <= max(limit, 4)
            out += chunk
            digests.add(page["digest"])
            offset = page["next_offset"]
            if page["eof"]:
                break
        assert out == full and digests == {hashlib.sha256(full).hexdigest()}
    # another item, another digest
    body = await call("history_read", {"context_item_id": other})
    assert body["structured_content"]["digest"] == hashlib.sha256(OTHER.encode()).hexdigest()
    assert body["structured_content"]["digest"] != hashlib.sha256(full).hexdigest()
    # offset: the size is the end (empty, eof); past it, or inside a character, is refused
    body = await call("history_read", {"context_item_id": item, "offset": len(full)})
    assert (body["structured_content"]["eof"], body["structured_content"]["next_offset"]) == (True, len(full))
    inside = full.index("€".encode()) + 1
    for args, named in (({"offset": len(full) + 1}, "offset"), ({"offset": inside}, "inside a UTF-8 character"),
                        ({"offset": -1}, "offset"), ({"limit": 0}, "limit"), ({"limit": 1048577}, "limit"),
                        ({"limit": "5"}, "limit"), ({"offset": 1.5}, "offset")):
        code, message = _error(await call("history_read", {"context_item_id": item, **args}))
        assert code == "INVALID_ARGUMENT" and named in message, (args, message)
    code, message = _error(await call("history_read", {"context_item_id": "ci_nope"}))
    assert code == "HISTORY_ITEM_NOT_FOUND" and "ci_nope" in message


QUESTION = {"questions": [{"id": "q", "text": "Which colour?", "options": [{"id": "r", "label": "red"}]}]}


@pytest.mark.parametrize("name, args, event", [
    ("ask_user", QUESTION, "question.asked"),
    ("todo", {"items": [{"id": "a", "text": "step"}]}, "todo.updated"),
    ("job", {"action": "start", "command": "echo hi"}, "job.started"),
])
async def test_a_subagent_calling_a_main_only_tool_is_refused_at_execution(daemon: Daemon, name: str,
                                                                          args: dict[str, Any], event: str):
    token, sid = await _setup(daemon)
    await daemon.submit(token, sid, "r1", "/tool subagent " + json.dumps({"prompt": f"/tool {name} {json.dumps(args)}"}))
    await daemon.wait_idle(token, sid)
    events = await daemon.events(token, sid)
    [delegated] = [e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] == "main"]
    assert (delegated["name"], delegated["status"]) == ("subagent", "ok"), delegated
    [started] = [e for e in events if e["kind"] == "agent.started"]
    assert name not in started["body"]["tools"]  # withheld from the subagent's tools...
    [refused] = [e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] != "main"]
    # ... and refused when it calls it anyway
    assert (refused["name"], refused["status"], refused["error_code"]) == (name, "error", "TOOL_MAIN_ONLY")
    assert name in refused["structured_content"]["error"]["message"]
    assert not [e for e in events if e["kind"] == event]
    view = await daemon.view(token, sid)
    assert view["status"] == "idle" and not view.get("questions") and view["todos"] == []


async def test_job_routes_on_a_job_that_ended_by_itself_another_sessions_job_and_the_read_limit(daemon: Daemon):
    token, sid = await _setup(daemon)
    project_id = (await daemon.get(f"/sessions/{sid}", token)).json()["projectId"]
    other = (await daemon.session(token, project_id))["id"]
    job_id = await start_job(daemon, token, sid, "r1", "printf abc")
    fin = await finished_of(daemon, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["exit_code"]) == ("exited", 0)
    # a stop of a job that exited by itself: 409, naming the job and how it ended; nothing changes
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert (r.status_code, error_of(r)) == (409, "JOB_FINISHED"), r.text
    message = r.json()["error"]["message"]
    assert job_id in message and "exited" in message, message
    [job] = (await daemon.get(f"/sessions/{sid}/jobs", token)).json()["jobs"]
    assert (job["jobId"], job["status"], job["exitCode"]) == (job_id, "exited", 0)
    assert sum(e["kind"] == "job.finished" for e in await log_of(daemon, token, sid)) == 1
    # another session's job is unknown there, to read and to stop
    for method, path in (("get", f"/sessions/{other}/jobs/{job_id}"), ("post", f"/sessions/{other}/jobs/{job_id}/stop")):
        r = await getattr(daemon, method)(path, token)
        assert (r.status_code, error_of(r)) == (404, "JOB_NOT_FOUND"), (path, r.text)
    assert (await daemon.get(f"/sessions/{other}/jobs", token)).json()["jobs"] == []
    # a read: limit 1 to 1048576, offset from 0 (past the end: empty, eof)
    for params, status in (({"limit": "1"}, 200), ({"limit": "1048576"}, 200), ({"limit": "0"}, 400),
                           ({"limit": "1048577"}, 400), ({"offset": "3"}, 200), ({"offset": "-1"}, 400),
                           ({"limit": "1.5"}, 400)):
        r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params=params)
        assert r.status_code == status, (params, r.text)
        if status == 400:
            assert error_of(r) == "INVALID_ARGUMENT" and next(iter(params)) in r.json()["error"]["message"]
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"limit": "1"})
    assert (r.json()["output"], r.json()["nextOffset"], r.json()["eof"]) == ("a", 1, False)
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"offset": "3"})
    assert (r.json()["output"], r.json()["nextOffset"], r.json()["eof"]) == ("", 3, True)


async def _asked(d: Daemon, token: str, sid: str, rid: str, question: dict[str, Any]) -> str:
    """Have the model ask ``question`` (one); the open question's id once the session awaits it."""
    return await question_opened(d, token, sid, rid, "/tool ask_user " + json.dumps({"questions": [question]}))


async def test_an_answers_text_is_taken_at_20000_characters_and_refused_past_them_and_where_no_text_is_asked(
        daemon: Daemon):
    token, sid = await _setup(daemon)
    qid = await _asked(daemon, token, sid, "r1", {"id": "q", "text": "Why?", "options": [{"id": "r", "label": "red"}]})
    path = f"/sessions/{sid}/questions/{qid}/answer"
    for body, named in (({"kind": "answer", "text": "x" * 20_001}, "20000"),
                        ({"kind": "answer", "optionIds": ["r", "nope"]}, "nope"),
                        ({"kind": "answer", "optionIds": ["r"], "extra": 1}, "extra")):
        r = await daemon.post(path, token, body)
        assert r.status_code == 422 and error_of(r) in ("ANSWER_INVALID", "VALIDATION_FAILED"), r.text
        assert named in r.json()["error"]["message"] and len(r.json()["error"]["message"]) < 300, r.text
    r = await daemon.post(path, token, {"kind": "answer", "optionIds": ["r"], "text": "é" * 20_000})
    assert r.status_code == 200 and r.json()["duplicate"] is False, r.text
    assert r.json()["answer"] == {"kind": "answer", "optionIds": ["r"], "text": "é" * 20_000}
    await daemon.wait_idle(token, sid)
    # A question that takes options only refuses text, with the option or without it.
    qid = await _asked(daemon, token, sid, "r2", {"id": "q2", "text": "Go?", "allow_text": False,
                                                  "options": [{"id": "y", "label": "yes"}]})
    path = f"/sessions/{sid}/questions/{qid}/answer"
    for body in ({"kind": "answer", "text": "sure"}, {"kind": "answer", "optionIds": ["y"], "text": "sure"}):
        r = await daemon.post(path, token, body)
        assert (r.status_code, error_of(r)) == (422, "ANSWER_INVALID"), r.text
        assert "text" in r.json()["error"]["message"]
    r = await daemon.post(path, token, {"kind": "skip"})
    assert r.status_code == 200 and r.json()["answer"] == {"kind": "skip"}, r.text
    await daemon.wait_idle(token, sid)
    asks = [e["body"] for e in await daemon.events(token, sid)
            if e["kind"] == "tool.finished" and e["body"]["name"] == "ask_user"]
    assert [(a["status"], a["structured_content"]["answer"]) for a in asks] == [
        ("ok", {"kind": "answer", "optionIds": ["r"], "text": "é" * 20_000}), ("ok", {"kind": "skip"})]


async def test_the_job_tool_checks_a_job_id_as_the_job_routes_do(daemon: Daemon):
    # A malformed or 5,000-character job_id was looked up and answered JOB_NOT_FOUND, echoing it
    # whole; it is INVALID_ARGUMENT naming the rule, as GET …/jobs/{jobId} answers it.
    token, sid = await _setup(daemon)
    n = 0
    for action in ("read", "stop"):
        for job_id in ("x" * 5000, "bad id", "", 5, None):
            n += 1
            body = await run_tool(daemon, token, sid, f"r{n}", "job", {"action": action, "job_id": job_id})
            code, message = _error(body)
            assert code == "INVALID_ARGUMENT" and "job_id" in message and len(message) < 300, (job_id, message)
    body = await run_tool(daemon, token, sid, "r-last", "job", {"action": "read", "job_id": "job_nope"})
    assert _error(body)[0] == "JOB_NOT_FOUND"


@pytest.mark.parametrize("call_id", ["call 1", "call/1", "toolu_01€", "c" * 199])
async def test_a_question_asked_under_a_call_id_outside_the_id_rule_is_answered_over_http(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, call_id: str):
    # A compatible server names its calls as it likes; the question id (``q_<call id>``) is what
    # the answer route takes, so a call id with a space, a slash, a non-ASCII letter or past the
    # id rule's length left a question no client could answer (400, or no route) until an abort.
    server = ScriptedServer()
    url = await server.start(nursery)
    d = await daemon_factory(config={"providers": [{"id": "compat", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                                                    "models": [{"id": "compat-model"}]}],
                                     "defaultModel": "compat/compat-model"})
    server.push(chat_stream(calls=[(call_id, "ask_user", QUESTION)]), chat_stream(text="red it is"))
    token, sid = await _setup(d)
    await sdks_ready()
    await d.submit(token, sid, "r1", "pick a colour")

    async def awaiting() -> dict[str, Any] | None:
        v = await d.view(token, sid)
        return v if v["status"] == "awaiting_answer" else None

    view = await wait_until(awaiting, what="awaiting_answer")
    [question] = view["questions"]
    qid = question["questionId"]
    assert is_id(qid), qid
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["r"]})
    assert r.status_code == 200 and r.json()["duplicate"] is False, r.text
    view = await d.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "red it is"
    # The server got the answer as the result of the call it made, under one id in both.
    messages = server.bodies[1]["messages"]
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == results and len(calls) == 1
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["The user chose red (r)."]
    # The log records the id the session uses, the question's id derived from it.
    events = await d.events(token, sid)
    [started] = [e["body"] for e in events if e["kind"] == "tool.started"]
    assert is_id(started["call_id"]) and qid == f"q_{started['call_id']}"
