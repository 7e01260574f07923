"""F-HAR-1..3 and their HTTP/SSE shapes, a second pass as a user who has SPEC.md, the README and
docs/ drives a real daemon (loopback port 0, the ``faux`` provider calling tools, the real
executor over gRPC).

What ``test_harness_acceptance.py``, ``test_harness_edges_acceptance.py``,
``test_submissions_forks_jobs_acceptance.py``, ``test_jobs.py``, ``test_question_restart.py``,
``test_todo_and_question_limits.py`` and ``test_workspace_browse.py`` pin is not redone. Here: two
``todo`` calls in one answer (the view and the stream), a repeated todo id or question/option id
and an unknown todo status named in the refusal, an answer repeating an option id, an answer
sent after a restart cancelled its question, a job's output at the documented 1 MiB ring and
4 KiB tail and one byte past each, stops of a job already stopped, a workspace entry whose name
is not UTF-8 or holds a newline, beside a rename made by a command, a job's end while a question
waits, and a job's report withdrawn before a restart. Every wait is bounded (conftest ``wait_until``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .conftest import Daemon, DaemonFactory, error_of, question_opened, run_tool, stop_daemon, wait_until
from .test_jobs import finished_of, report_answered, start_job

MIB = 1 << 20
FIRST = [{"id": "a", "text": "one", "status": "pending"}]
SECOND = [{"id": "a", "text": "one", "status": "done"}, {"id": "b", "text": "two"}]
ASK = {"questions": [{"id": "q", "text": "Which colour?",
                      "options": [{"id": "r", "label": "red"}, {"id": "b", "label": "blue"}]}]}
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "<two-todos>", "toolCalls": [{"name": "todo", "arguments": {"items": FIRST}},
                                          {"name": "todo", "arguments": {"items": SECOND}}]},
    {"when": "<ask>", "toolCalls": [{"name": "ask_user", "arguments": ASK}]},
]}], "defaultModel": "faux/faux-1"}


async def _setup(d: Daemon) -> tuple[str, str, Path]:
    token = await d.pair("second-pass", strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"], Path(project["workspace"])


async def _asked(d: Daemon, token: str, sid: str, rid: str) -> str:
    """Submit ``<ask>`` as ``rid`` and return the id of the question it opens."""
    return await question_opened(d, token, sid, rid, "<ask>")


def _refused(body: dict[str, Any]) -> str:
    assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
    return body["content"][0]["text"]


async def test_two_todo_calls_in_one_answer_leave_the_second_list_in_the_view_and_on_the_stream(
        daemon_factory: DaemonFactory):
    d = await daemon_factory(config=CONFIG)
    token, sid, _ = await _setup(d)
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "<two-todos>")
        frames = []
        while len(frames) < 2:
            msg = await stream.until(lambda m: m.event == "todo.updated")
            frames.append(msg)
    view = await d.wait_idle(token, sid)
    # the calls run in the order the model made them: the view holds the second list
    assert view["todos"] == [{**SECOND[0]}, {**SECOND[1], "status": "pending"}]
    events = [e for e in await d.events(token, sid) if e["kind"] == "todo.updated"]
    assert [e["body"]["call_id"] for e in events] == ["call_main_0_0", "call_main_0_1"]
    assert [len(e["body"]["items"]) for e in events] == [1, 2]
    # each SSE frame is the logged event as the events route decodes it, its seq as the id
    assert [(m.id, m.json()) for m in frames] == [(e["seq"], e) for e in events]


async def test_a_repeated_id_and_an_unknown_status_are_named_in_the_refusal(daemon: Daemon):
    # "todo item ids must be unique" and "question and option ids must be unique" named neither
    # the id nor where it was repeated: a model with 150 items had to find the pair itself.
    token, sid, _ = await _setup(daemon)
    text = _refused(await run_tool(daemon, token, sid, "t1", "todo", {"items": [
        {"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}]}))
    assert "items[2]" in text and "'a'" in text and "items[0]" in text, text
    text = _refused(await run_tool(daemon, token, sid, "t2", "todo", {"items": [
        {"id": "a", "text": "x", "status": "blocked"}]}))
    assert "items[0]" in text and "'blocked'" in text and "pending, in_progress, done or cancelled" in text, text
    for rid, questions, named in (
            ("q1", [{"id": "q", "text": "x", "options": [{"id": "q", "label": "Q"}]}], "'q'"),
            ("q2", [{"id": "q", "text": "x", "options": [{"id": "o", "label": "A"}, {"id": "o", "label": "B"}]}],
             "'o'"),
            ("q3", [{"id": "q", "text": "x", "allow_text": True}, {"id": "q", "text": "y", "allow_text": True}],
             "'q'")):
        text = _refused(await run_tool(daemon, token, sid, rid, "ask_user", {"questions": questions}))
        assert named in text and "used twice" in text, text
    assert not [e for e in await daemon.events(token, sid) if e["kind"] in ("todo.updated", "question.asked")]


async def test_an_answer_repeating_an_option_and_an_answer_sent_after_a_restart(daemon_factory: DaemonFactory):
    d = await daemon_factory(config=CONFIG)
    token, sid, _ = await _setup(d)

    qid = await _asked(d, token, sid, "r1")
    # a repeated id is taken once, in the options' order (docs: duplicates dropped)
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["b", "r", "b"]})
    assert r.status_code == 200 and r.json()["answer"] == {"kind": "answer", "optionIds": ["r", "b"]}, r.text
    await d.wait_idle(token, sid)
    qid = await _asked(d, token, sid, "r2")
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    view = await d2.wait_idle(token, sid)
    assert view["questions"] == []
    path = f"/sessions/{sid}/questions/{qid}/answer"
    # a body that is no answer is refused as such first; a valid one learns the question is gone
    r = await d2.post(path, token, {"kind": "answer", "optionIds": ["green"]})
    assert (r.status_code, error_of(r)) == (422, "ANSWER_INVALID") and "green" in r.text, r.text
    r = await d2.post(path, token, {"kind": "answer", "optionIds": ["r"]})
    assert (r.status_code, error_of(r)) == (409, "QUESTION_SETTLED"), r.text
    assert qid in r.json()["error"]["message"] and "restarted" in r.json()["error"]["message"], r.text
    events = await d2.events(token, sid)
    assert [e["body"]["answer"] for e in events if e["kind"] == "question.answered"] == [
        {"kind": "answer", "optionIds": ["r", "b"]}]


async def test_a_jobs_output_at_the_ring_and_tail_bounds_and_one_byte_past_each(daemon: Daemon):
    # docs/decisions.md "Background jobs": the latest 1 MiB of output is kept in memory,
    # job.finished keeps its last 4 KiB.
    token, sid, _ = await _setup(daemon)
    for n, dropped in ((4096, 0), (4097, 0), (MIB, 0), (MIB + 1, 1)):
        job_id = await start_job(daemon, token, sid, f"r{n}", f"head -c {n} /dev/zero | tr '\\0' a")
        fin = await finished_of(daemon, token, sid, job_id)
        assert fin["body"]["output_tail"] == "a" * 4096, n
        await report_answered(daemon, token, sid, job_id)
        r = (await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"limit": MIB})).json()
        assert (r["source"], r["outputBytes"], r["droppedBefore"], r["offset"], r["nextOffset"], r["eof"]) == \
            ("memory", n, dropped, dropped, n, True), (n, {k: v for k, v in r.items() if k != "output"})
        assert r["output"] == "a" * (n - dropped)
        # the tool says where what is kept begins when bytes were dropped, and only then
        body = await run_tool(daemon, token, sid, f"read{n}", "job", {"action": "read", "job_id": job_id, "offset": 0})
        assert body["status"] == "ok" and body["structured_content"]["dropped_before"] == dropped, body
        assert ("no longer kept" in body["content"][0]["text"]) == bool(dropped)
    # a job stopped over HTTP: a second stop, and the agent's stop, are told how it ended
    job_id = await start_job(daemon, token, sid, "long", "exec sleep 600")
    await daemon.wait_idle(token, sid)
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert r.status_code == 200 and r.json()["reason"] == "stopped by request", r.text
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert (r.status_code, error_of(r)) == (409, "JOB_FINISHED") and "stopped by request" in r.text, r.text
    body = await run_tool(daemon, token, sid, "stop-tool", "job", {"action": "stop", "job_id": job_id})
    assert (body["status"], body["error_code"]) == ("error", "JOB_FINISHED") and job_id in body["content"][0]["text"]
    assert [e["body"]["status"] for e in await daemon.events(token, sid)
            if e["kind"] == "job.finished" and e["body"]["job_id"] == job_id] == ["stopped"]


async def test_a_name_not_utf8_or_with_a_newline_is_listed_and_a_rename_by_command_is_no_change(daemon: Daemon):
    token, sid, ws = await _setup(daemon)
    (ws / "new\nline.txt").write_text("nl\n")
    os.close(os.open(os.fsencode(ws) + b"/bad\xffname.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    r = await daemon.get(f"/sessions/{sid}/workspace/tree", token)
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()["entries"]] == ["bad\ufffdname.txt", "new\nline.txt"]
    r = await daemon.get(f"/sessions/{sid}/workspace/file", token, params={"path": "new\nline.txt"})
    assert r.status_code == 200 and r.json()["text"] == "nl\n", r.text
    # The listed name is not the name on disk: the read is 404, and says why rather than "no
    # such file" for a file the listing just showed.
    r = await daemon.get(f"/sessions/{sid}/workspace/file", token, params={"path": "bad\ufffdname.txt"})
    assert (r.status_code, error_of(r)) == (404, "PATH_NOT_FOUND"), r.text
    assert "not UTF-8" in r.json()["error"]["message"], r.text
    r = await daemon.get(f"/sessions/{sid}/workspace/file", token, params={"path": "gone\ufffd.txt"})
    assert (r.status_code, error_of(r)) == (404, "PATH_NOT_FOUND") and "no such file" in r.text, r.text
    (ws / "real\ufffd.txt").write_text("U+FFFD is a character a name may hold\n")
    r = await daemon.get(f"/sessions/{sid}/workspace/file", token, params={"path": "real\ufffd.txt"})
    assert r.status_code == 200 and r.json()["text"].startswith("U+FFFD"), r.text
    # a directory so named: listed, its files too; the tree of it and a read below it say the same
    os.mkdir(os.fsencode(ws) + b"/dir\xfe")
    os.close(os.open(os.fsencode(ws) + b"/dir\xfe/in.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    r = await daemon.get(f"/sessions/{sid}/workspace/tree", token, params={"depth": "2"})
    assert "dir\ufffd/in.txt" in [e["path"] for e in r.json()["entries"]], r.text
    for route, path in (("tree", "dir\ufffd"), ("file", "dir\ufffd/in.txt")):
        r = await daemon.get(f"/sessions/{sid}/workspace/{route}", token, params={"path": path})
        assert (r.status_code, error_of(r)) == (404, "PATH_NOT_FOUND"), (route, r.text)
        assert "'dir\ufffd' on disk is not UTF-8" in r.json()["error"]["message"], (route, r.text)
    # "changes this session" are the edit calls (docs/decisions.md): a file an edit created and a
    # command renamed is listed as created under the name the edit wrote
    body = await run_tool(daemon, token, sid, "c1", "edit_file", {"path": "x.txt", "mode": "create", "content": "x\n"})
    assert body["status"] == "ok", body
    body = await run_tool(daemon, token, sid, "c2", "run_command", {"command": "mv x.txt y.txt"})
    assert body["status"] == "ok" and (ws / "y.txt").exists(), body
    r = await daemon.get(f"/sessions/{sid}/changes", token)
    assert [(f["path"], f["status"]) for f in r.json()["files"]] == [("x.txt", "created")], r.text
    assert json.loads(r.text)["sessionId"] == sid


async def test_a_jobs_end_while_a_question_waits_queues_its_report_behind_the_answer(daemon_factory: DaemonFactory):
    # F-HAR-1 and F-HAR-2 together: the report is a follow-up (docs/decisions.md "Background
    # jobs"), so it waits while the session awaits an answer, runs once the question is settled,
    # and an abort of the wait withdraws it; a stop while the question waits answers at once.
    d = await daemon_factory(config=CONFIG)
    token, sid, ws = await _setup(d)
    job_id = await start_job(d, token, sid, "j1", "while [ ! -e go ]; do sleep 0.01; done; echo done")
    await d.wait_idle(token, sid)

    qid = await _asked(d, token, sid, "r1")
    (ws / "go").touch()
    await finished_of(d, token, sid, job_id)
    view = await d.view(token, sid)
    assert view["status"] == "awaiting_answer"
    assert [(q["requestId"], q["whenBusy"]) for q in view["queued"]] == [(f"job:{job_id}", "followUp")]
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "skip"})
    assert r.status_code == 200, r.text
    view = await report_answered(d, token, sid, job_id)
    texts = [it.get("text", "") for it in view["items"]]
    skipped = texts.index("The tool answered: The user skipped the question.")
    assert texts[skipped + 1].startswith(f"[background job {job_id} exited with code 0]"), texts
    sleeper = await start_job(d, token, sid, "j2", "exec sleep 600")
    await d.wait_idle(token, sid)
    await _asked(d, token, sid, "r2")
    r = await d.post(f"/sessions/{sid}/jobs/{sleeper}/stop", token)
    assert r.status_code == 200 and r.json()["status"] == "stopped", r.text
    assert [q["requestId"] for q in (await d.view(token, sid))["queued"]] == [f"job:{sleeper}"]
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": [f"job:{sleeper}"]}, r.text
    view = await d.wait_idle(token, sid)
    assert view["queued"] == [] and [(j["jobId"], j["status"]) for j in view["jobs"]] == \
        [(job_id, "exited"), (sleeper, "stopped")]
    assert not any(t.startswith(f"[background job {sleeper} ") for t in
                   [it.get("text", "") for it in view["items"]])


async def test_a_withdrawn_report_stays_withdrawn_across_a_restart_and_the_other_runs(daemon_factory: DaemonFactory):
    # Two jobs end while a command runs: both reports queue; one is withdrawn. After a restart
    # (the command's call recorded interrupted, README) the other report runs, the withdrawn one
    # never does, and both jobs stay listed as they ended.
    d = await daemon_factory()
    token, sid, ws = await _setup(d)
    kept = await start_job(d, token, sid, "j1", "while [ ! -e go ]; do sleep 0.01; done; echo kept")
    dropped = await start_job(d, token, sid, "j2", "while [ ! -e go ]; do sleep 0.01; done; echo dropped")
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "busy", '/tool run_command {"command": "exec sleep 600"}')
    await d.wait_running_call(token, sid)
    (ws / "go").touch()
    await finished_of(d, token, sid, kept)
    await finished_of(d, token, sid, dropped)
    assert sorted(q["requestId"] for q in (await d.view(token, sid))["queued"]) == \
        sorted([f"job:{kept}", f"job:{dropped}"])
    r = await d.post(f"/sessions/{sid}/inputs/job:{dropped}/withdraw", token)
    assert r.json()["status"] == "withdrawn", r.text
    await stop_daemon(d)
    d2 = await daemon_factory(root=d.root)
    view = await report_answered(d2, token, sid, kept)
    texts = [it.get("text", "") for it in view["items"]]
    assert not any(t.startswith(f"[background job {dropped} ") for t in texts), texts
    assert any(t.startswith("The tool answered: This tool call was interrupted") for t in texts), texts
    assert sorted((j["jobId"], j["status"]) for j in view["jobs"]) == sorted([(kept, "exited"), (dropped, "exited")])
    r = (await d2.get(f"/sessions/{sid}/jobs/{dropped}", token)).json()
    assert (r["source"], r["output"]) == ("tail", "dropped\n"), r
