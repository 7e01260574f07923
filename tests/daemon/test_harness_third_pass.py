"""F-HAR-1..3 over HTTP, a third pass as a user who has SPEC.md, the README and docs/ drives a real
daemon (loopback port 0, the ``faux`` provider calling tools, the real executor over gRPC).

What the first two passes (``test_harness_acceptance.py``, ``test_harness_edges_acceptance.py``,
``test_harness_second_pass.py``) and the jobs and workspace tests pin is not redone. Here: an
answer raced with an abort or a delete of the session (exactly one of them settles the question, and each
reply says which), and ``ask_user`` at five questions of twenty options and one past either, each
refusal naming the bound it broke and what was given, and a job's output read by the ``job``
tool at its end, past it and at the job route's bound, and a job's and a question's events on the
SSE stream as the log holds them. Every wait is bounded (conftest
``wait_until``)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from .conftest import Daemon, DaemonFactory, error_of, question_opened, race, run_tool, wait_until
from .test_jobs import finished_of, report_answered, start_job

ASK = {"questions": [{"id": "q", "text": "Which colour?",
                      "options": [{"id": "r", "label": "red"}, {"id": "b", "label": "blue"}]}]}
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "<ask>", "toolCalls": [{"name": "ask_user", "arguments": ASK}]},
]}], "defaultModel": "faux/faux-1"}


async def _setup(d: Daemon) -> tuple[str, str]:
    token = await d.pair("third-pass", strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"]


async def _asked(d: Daemon, token: str, sid: str, rid: str) -> str:
    return await question_opened(d, token, sid, rid, "<ask>")


async def test_an_answer_raced_with_an_abort_settles_the_question_once_and_says_which(
        daemon_factory: DaemonFactory):
    d = await daemon_factory(config=CONFIG)
    token, sid = await _setup(d)
    for n in range(10):
        qid = await _asked(d, token, sid, f"r{n}")
        a, stop = await race(partial(d.post, f"/sessions/{sid}/questions/{qid}/answer", token,
                                     {"kind": "answer", "optionIds": ["b"]}),
                             partial(d.post, f"/sessions/{sid}/abort", token))
        view = await d.wait_idle(token, sid)
        assert view["questions"] == [], view["questions"]
        events = await d.events(token, sid)
        asked = next(e for e in events if e["kind"] == "question.asked" and e["body"]["question_id"] == qid)
        settled = [e for e in events
                   if e["kind"] in ("question.answered", "question.cancelled") and e["body"]["question_id"] == qid]
        assert len(settled) == 1, (n, settled)
        ends = [e["body"]["status"] for e in events if e["kind"] == "task.finished" and e["task_id"] == asked["task_id"]]
        assert stop.status_code == 200, stop.text
        # the abort says it stopped something exactly when the question's task ended aborted
        assert ends == (["aborted"] if stop.json()["aborted"] else ["completed"]), (stop.text, ends)
        if settled[0]["kind"] == "question.answered":
            assert a.status_code == 200 and a.json()["duplicate"] is False, a.text
        else:
            assert (a.status_code, error_of(a)) == (409, "QUESTION_SETTLED"), a.text


def _questions(n: int, options: int) -> list[dict[str, Any]]:
    return [{"id": f"q{i}", "text": f"Question {i}?",
             "options": [{"id": f"q{i}o{j}", "label": f"option {j}"} for j in range(options)]} for i in range(n)]


async def test_five_questions_of_twenty_options_are_asked_and_one_past_either_is_refused_naming_the_count(
        daemon: Daemon):
    token, sid = await _setup(daemon)
    for rid, questions, named in (
            ("six", _questions(6, 1), "6 questions"),
            ("options", _questions(2, 20)[:1] + _questions(2, 21)[1:], "question 'q1' has 21 options")):
        body = await run_tool(daemon, token, sid, rid, "ask_user", {"questions": questions})
        assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
        text = body["content"][0]["text"]
        assert named in text and ("1 to 5 questions" in text or "at most 20 are allowed" in text), text
    # a text past its bound is named as such, not as the options' count
    long_text = [{"id": "q", "text": "t" * 2001, "options": [{"id": "o", "label": "O"}]}]
    body = await run_tool(daemon, token, sid, "long", "ask_user", {"questions": long_text})
    text = body["content"][0]["text"]
    assert "2001 characters" in text and "options" not in text, text
    assert not [e for e in await daemon.events(token, sid) if e["kind"] == "question.asked"]

    await daemon.submit(token, sid, "most", "/tool ask_user " + json.dumps({"questions": _questions(5, 20)}))

    async def asked() -> dict[str, Any] | None:
        v = await daemon.view(token, sid)
        return v["questions"][0] if v["status"] == "awaiting_answer" and v["questions"] else None

    question = await wait_until(asked, what="the question of five")
    assert [len(q["options"]) for q in question["questions"]] == [20] * 5
    r = await daemon.post(f"/sessions/{sid}/questions/{question['questionId']}/answer", token,
                          {"kind": "answer", "optionIds": ["q0o19", "q4o0"]})
    assert r.status_code == 200 and r.json()["answer"]["optionIds"] == ["q0o19", "q4o0"], r.text
    await daemon.wait_idle(token, sid)



async def test_the_job_tool_reads_past_the_end_to_the_same_bound_as_the_job_route(daemon: Daemon):
    # The route took offsets to 2^63-1 and the tool refused past 2^62: one read, two bounds.
    token, sid = await _setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "printf abc")
    await finished_of(daemon, token, sid, job_id)
    for off in (3, 4, 2**63 - 1):
        r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"offset": str(off)})
        assert r.status_code == 200 and (r.json()["output"], r.json()["nextOffset"], r.json()["eof"]) == ("", 3, True)
        body = await run_tool(daemon, token, sid, f"read{off}", "job", {"action": "read", "job_id": job_id, "offset": off})
        assert body["status"] == "ok" and body["content"][0]["text"].endswith("output bytes 3-3]"), body
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"offset": str(2**63)})
    assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT") and "9223372036854775807" in r.text, r.text
    body = await run_tool(daemon, token, sid, "past", "job", {"action": "read", "job_id": job_id, "offset": 2**63})
    assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
    # (arguments past 64 bits are refused before the tool reads them, naming the number)
    assert "outside 64 bits (9223372036854775808)" in body["content"][0]["text"], body


async def test_an_answer_raced_with_a_delete_of_the_session_settles_the_question_once(
        daemon_factory: DaemonFactory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("third-pass", strong=True)
    project = await d.project(token)
    for n in range(6):
        sid = (await d.session(token, project["id"]))["id"]
        qid = await _asked(d, token, sid, "r1")
        a, deleted = await race(partial(d.post, f"/sessions/{sid}/questions/{qid}/answer", token,
                                        {"kind": "answer", "optionIds": ["b"]}),
                                partial(d.request, "DELETE", f"/sessions/{sid}", token))
        assert deleted.status_code == 200, deleted.text

        async def settled() -> list[dict[str, Any]] | None:
            found = [e for e in await d.events(token, sid)
                     if e["kind"] in ("question.answered", "question.cancelled") and e["body"]["question_id"] == qid]
            return found or None

        found = await wait_until(settled, what="the question settled")
        assert len(found) == 1, found
        if found[0]["kind"] == "question.answered":
            assert a.status_code == 200 and a.json()["duplicate"] is False, a.text
        else:
            assert a.status_code == 409 and error_of(a) in ("SESSION_DELETED", "QUESTION_SETTLED"), a.text
        assert (await d.view(token, sid))["questions"] == []


async def test_a_jobs_start_and_end_and_a_questions_ask_and_answer_reach_the_stream_as_logged(
        daemon_factory: DaemonFactory):
    # docs/decisions.md "Background jobs": the SSE stream carries job.started and job.finished.
    d = await daemon_factory(config=CONFIG)
    token, sid = await _setup(d)
    kinds = ("job.started", "job.finished", "question.asked", "question.answered")
    async with d.sse(token, params={"session": sid}) as stream:
        job_id = await start_job(d, token, sid, "r1", "printf abc")
        frames = [await stream.until(lambda m: m.event == "job.started"),
                  await stream.until(lambda m: m.event == "job.finished")]
        await report_answered(d, token, sid, job_id)
        qid = await _asked(d, token, sid, "r2")
        frames.append(await stream.until(lambda m: m.event == "question.asked"))
        r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["r"]})
        assert r.status_code == 200, r.text
        frames.append(await stream.until(lambda m: m.event == "question.answered"))
    await d.wait_idle(token, sid)
    events = [e for e in await d.events(token, sid) if e["kind"] in kinds]
    assert [e["kind"] for e in events] == list(kinds)
    assert [(m.id, m.json()) for m in frames] == [(e["seq"], e) for e in events]
    assert events[1]["body"]["job_id"] == job_id and events[1]["body"]["output_tail"] == "abc"
    assert events[3]["body"]["question_id"] == qid
