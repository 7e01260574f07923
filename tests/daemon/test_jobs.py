"""F-HAR-2: background jobs, end to end — the ``job`` tool called by the (faux) model, the command
run by a real executor process over gRPC, the end recorded and reported back as an input that
starts a new round, the HTTP routes (list, read, stop; auth), the per-session limit, a session
delete, and a daemon stop while a job runs (recorded ``stopped`` and reported after the restart;
a kill -9 and the ``lost`` it leaves: test_jobs_at_stop.py)."""

from __future__ import annotations

import json
import os
import signal
import shlex
from typing import Any

from events import types as t
from events.store import Draft, open_store
from runtime.jobs import STOPPED_BY_DAEMON

from ..procfs import alive
from .conftest import BUSY, Daemon, error_of, run_tool, stop_daemon, wait_until


async def log_of(d: Daemon, token: str, sid: str) -> list[dict[str, Any]]:
    """The session's events, in one page (these sessions stay far below a page): one request
    from 0, never an ``after`` that may race the log's acknowledged end."""
    r = await d.get(f"/sessions/{sid}/events", token, params={"after": 0, "limit": 1000})
    assert r.status_code == 200, r.text
    assert len(r.json()["events"]) < 1000
    return r.json()["events"]


def tool(args: dict[str, Any]) -> str:
    return "/tool job " + json.dumps(args)


async def start_job(d: Daemon, token: str, sid: str, rid: str, command: str, **extra: Any) -> str:
    """Have the model start ``command`` as a job; returns its id (from the log's job.started)."""
    known = {e["body"]["job_id"] for e in await log_of(d, token, sid) if e["kind"] == "job.started"}
    await d.submit(token, sid, rid, tool({"action": "start", "command": command, **extra}))

    async def new_job() -> str | None:
        ids = [e["body"]["job_id"] for e in await log_of(d, token, sid) if e["kind"] == "job.started"]
        fresh = [i for i in ids if i not in known]
        return fresh[0] if fresh else None

    return await wait_until(new_job, what="job.started")


async def finished_of(d: Daemon, token: str, sid: str, job_id: str) -> dict[str, Any]:
    async def finished() -> dict[str, Any] | None:
        for e in await log_of(d, token, sid):
            if e["kind"] == "job.finished" and e["body"]["job_id"] == job_id:
                return e
        return None

    return await wait_until(finished, what=f"job {job_id} finished")


async def report_answered(d: Daemon, token: str, sid: str, job_id: str) -> dict[str, Any]:
    """Wait until the job's report was placed and a model request answered it; returns the view."""
    async def answered() -> dict[str, Any] | None:
        v = await d.view(token, sid)
        if v["status"] != "idle" or v["queued"]:
            return None
        texts = [it.get("text", "") for it in v["items"]]
        hits = [i for i, x in enumerate(texts) if x.startswith(f"[background job {job_id} ")]
        return v if hits and any("You said: [background job " + job_id in x for x in texts[hits[0]:]) else None

    return await wait_until(answered, what=f"the report of {job_id} answered")


async def setup(d: Daemon) -> tuple[str, str]:
    token = await d.pair("jobs-client", strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"]


async def test_a_job_runs_in_the_background_and_its_end_starts_a_new_round(daemon: Daemon):
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "echo hi; sleep 0.2; echo done")
    fin = await finished_of(daemon, token, sid, job_id)
    assert fin["body"]["status"] == "exited" and fin["body"]["exit_code"] == 0
    assert fin["body"]["output_tail"] == "hi\ndone\n"
    view = await report_answered(daemon, token, sid, job_id)
    events = await log_of(daemon, token, sid)
    kinds = [(e["kind"], e["request_id"]) for e in events]
    # The tool answered at once (the first round ended while the job ran on)...
    tool_done = next(e for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == "job")
    assert tool_done["body"]["status"] == "ok" and tool_done["body"]["structured_content"]["status"] == "running"
    assert tool_done["seq"] < fin["seq"]
    # ... and the end came back as an input (request id job:<id>) that started a new task.
    report = next(e for e in events if e["kind"] == "input.submitted" and e["request_id"] == f"job:{job_id}")
    text = report["body"]["content"][0]["text"]
    assert text.startswith(f"[background job {job_id} exited with code 0]\ncommand: echo hi; sleep 0.2; echo done")
    assert text.endswith("hi\ndone\n")
    placed = next(e for e in events if e["kind"] == "input.placed" and e["body"]["input_request_id"] == f"job:{job_id}")
    assert any(e["kind"] == "model.requested" and e["seq"] > placed["seq"] for e in events)
    assert ("task.started", None) in kinds and sum(k == "task.started" for k, _ in kinds) == 2
    assert view["items"][-1]["role"] == "assistant" and job_id in view["items"][-1]["text"]
    assert view["jobs"] == [{"jobId": job_id, "command": "echo hi; sleep 0.2; echo done", "status": "exited",
                             "exitCode": 0, "reason": ""}]
    # HTTP: the list and the output (from memory: the daemon still holds it).
    r = await daemon.get(f"/sessions/{sid}/jobs", token)
    assert r.status_code == 200, r.text
    [job] = r.json()["jobs"]
    assert (job["jobId"], job["status"], job["exitCode"], job["command"]) == (job_id, "exited", 0,
                                                                            "echo hi; sleep 0.2; echo done")
    assert job["startedSeq"] < job["finishedSeq"] and job["outputBytes"] == 8
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token)
    body = r.json()
    assert (body["output"], body["offset"], body["nextOffset"], body["eof"], body["source"]) == \
        ("hi\ndone\n", 0, 8, True, "memory")
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"offset": 3, "limit": 2})
    assert (r.json()["output"], r.json()["nextOffset"], r.json()["eof"]) == ("do", 5, False)


async def test_a_running_job_is_read_and_stopped_over_http_with_auth_and_id_checks(daemon: Daemon):
    token, sid = await setup(daemon)
    reader = await daemon.pair("jobs-reader", strong=False)
    job_id = await start_job(daemon, token, sid, "r1", "echo started; exec sleep 600")

    async def output() -> dict[str, Any] | None:
        r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", reader)
        assert r.status_code == 200, r.text
        return r.json() if r.json()["output"] == "started\n" else None

    body = await wait_until(output, what="the job's first output")
    assert (body["status"], body["eof"], body["source"], body["nextOffset"]) == ("running", False, "memory", 8)
    r = await daemon.get(f"/sessions/{sid}/jobs", reader)
    assert [(j["jobId"], j["status"]) for j in r.json()["jobs"]] == [(job_id, "running")]
    # a read-only client may read, not stop
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", reader)
    assert r.status_code == 403 and error_of(r) == "FORBIDDEN"
    assert (await daemon.get(f"/sessions/{sid}/jobs/{job_id}", reader)).json()["status"] == "running"
    # bad and unknown ids
    for path, status, code in ((f"/sessions/{sid}/jobs/job_nope", 404, "JOB_NOT_FOUND"),
                               (f"/sessions/{sid}/jobs/bad%20id", 400, "INVALID_ARGUMENT"),
                               ("/sessions/ses_nope/jobs", 404, "SESSION_NOT_FOUND")):
        r = await daemon.get(path, reader)
        assert (r.status_code, error_of(r)) == (status, code), (path, r.text)
    r = await daemon.post(f"/sessions/{sid}/jobs/job_nope/stop", token)
    assert (r.status_code, error_of(r)) == (404, "JOB_NOT_FOUND")
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", reader, params={"offset": "-1"})
    assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT")
    # stop: answered once the end is recorded
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert r.status_code == 200, r.text
    assert (r.json()["jobId"], r.json()["status"], r.json()["reason"]) == (job_id, "stopped", "stopped by request")
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert (r.status_code, error_of(r)) == (409, "JOB_FINISHED")
    # (in the report's words: this said "it stopped: …", the report "was stopped")
    assert r.json()["error"]["message"] == f"job {job_id!r} is not running (it was stopped: stopped by request)", r.text
    fin = await finished_of(daemon, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["output_tail"]) == ("stopped", "started\n")
    view = await report_answered(daemon, token, sid, job_id)
    assert any(it.get("text", "").startswith(f"[background job {job_id} was stopped (stopped by request)]")
               for it in view["items"])


async def test_the_model_lists_reads_and_stops_its_jobs(daemon: Daemon):
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "echo one; exec sleep 600")
    await daemon.wait_idle(token, sid)

    async def has_output() -> bool:
        return (await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token)).json()["output"] == "one\n"

    await wait_until(has_output, what="output")
    for rid, args in (("r2", {"action": "list"}), ("r3", {"action": "read", "job_id": job_id}),
                      ("r4", {"action": "stop", "job_id": job_id}), ("r5", {"action": "stop", "job_id": job_id}),
                      ("r6", {"action": "read", "job_id": "job_nope"}), ("r7", {"action": "start"})):
        await daemon.submit(token, sid, rid, tool(args))
        await daemon.wait_idle(token, sid)
    results = [e["body"] for e in await log_of(daemon, token, sid)
               if e["kind"] == "tool.finished" and e["body"]["name"] == "job"]
    assert len(results) == 7
    listed, read, stopped, again, unknown, invalid = results[1:]
    assert listed["structured_content"]["jobs"][0]["status"] == "running"
    assert listed["content"][0]["text"] == f"{job_id} running: echo one; exec sleep 600"
    assert read["content"][0]["text"].startswith("one\n[")
    assert read["structured_content"]["next_offset"] == 4 and read["structured_content"]["eof"] is False
    assert stopped["status"] == "ok" and stopped["structured_content"]["status"] == "stopped"
    assert stopped["structured_content"]["reason"] == "stopped by the agent"
    assert (again["error_code"], unknown["error_code"], invalid["error_code"]) == \
        ("JOB_FINISHED", "JOB_NOT_FOUND", "INVALID_ARGUMENT")
    await report_answered(daemon, token, sid, job_id)


async def test_run_command_and_job_start_name_their_bad_arguments(daemon: Daemon):
    # The command tools check their integer arguments and their cwd with the same rules.
    token, sid = await setup(daemon)
    calls = [
        ("run_command", {"command": "true", "timeout_ms": -1}, "timeout_ms must be an integer from 0 to 3600000, got -1"),
        ("run_command", {"command": "true", "max_output_bytes": True},
         "max_output_bytes must be an integer from 0 to 16777216, got true"),
        ("run_command", {"command": "true", "timeout_ms": 3600001, "cwd": 5},
         "timeout_ms must be an integer from 0 to 3600000, got 3600001"),
        ("run_command", {"command": "true", "cwd": 5}, "cwd must be a workspace-relative path"),
        ("run_command", {"command": "true", "cwd": "a\0b"}, "command and cwd cannot hold NUL characters"),
        ("job", {"action": "start", "command": "true", "timeout_ms": -1},
         "timeout_ms must be an integer from 0 to 3600000, got -1"),
        ("job", {"action": "start", "command": "true", "cwd": ["."]}, "cwd must be a workspace-relative path"),
        ("job", {"action": "start", "command": "echo \0"}, "command and cwd cannot hold NUL characters"),
        ("job", {"action": "read", "job_id": "job_x", "max_bytes": 0},
         "max_bytes must be an integer from 1 to 65536, got 0"),
    ]
    for i, (name, args, _) in enumerate(calls):
        await daemon.submit(token, sid, f"r{i}", f"/tool {name} " + json.dumps(args))
        await daemon.wait_idle(token, sid)
    results = [e["body"] for e in await log_of(daemon, token, sid) if e["kind"] == "tool.finished"]
    assert [(r["error_code"], r["content"][0]["text"]) for r in results] == \
        [("INVALID_ARGUMENT", f"INVALID_ARGUMENT: {message}") for _, _, message in calls], results


async def test_a_timeout_of_0_is_the_default_for_a_job_as_for_run_command(daemon: Daemon):
    # run_command read `timeout_ms: 0` as its default while a job's start refused it ("must be an
    # integer from 1 to 3600000, got 0"): the two command tools now take the same values, 0 being
    # the default (a job's, 1 hour; run_command's, 120 s).
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r-job", "echo ran-with-0", timeout_ms=0)
    end = (await finished_of(daemon, token, sid, job_id))["body"]
    assert (end["status"], end["exit_code"], end["reason"]) == ("exited", 0, ""), end
    assert "ran-with-0" in end["output_tail"], end
    body = await run_tool(daemon, token, sid, "r-command", "run_command", {"command": "echo ran-too", "timeout_ms": 0})
    assert not body["is_error"] and "ran-too" in body["content"][0]["text"], body


async def test_an_empty_cwd_is_refused_as_an_empty_path_is_and_dot_is_the_root(daemon: Daemon):
    # run_command (and a job's start) ran a command given cwd "" at the workspace root, where
    # read_file refuses path "" and asks for ".": the empty string is now refused by both,
    # naming cwd, before anything runs; "." and no cwd still run at the root.
    token, sid = await setup(daemon)
    refusal = 'INVALID_ARGUMENT: cwd is empty (leave it out, or give ".", for the workspace root)'
    for i, (name, args) in enumerate((("run_command", {"command": "touch ran-here", "cwd": ""}),
                                      ("job", {"action": "start", "command": "touch ran-here", "cwd": ""}))):
        body = await run_tool(daemon, token, sid, f"r-empty-{i}", name, args)
        assert (body["error_code"], body["content"][0]["text"]) == ("INVALID_ARGUMENT", refusal), body
    body = await run_tool(daemon, token, sid, "r-read", "read_file", {"path": ""})
    assert body["error_code"] == "INVALID_ARGUMENT" and '"."' in body["content"][0]["text"], body
    roots = []
    for i, args in enumerate(({"command": "pwd -P; ls -A", "cwd": "."}, {"command": "pwd -P; ls -A"})):
        body = await run_tool(daemon, token, sid, f"r-root-{i}", "run_command", args)
        assert not body["is_error"], body
        roots.append(body["content"][0]["text"])
    assert roots[0] == roots[1] and "ran-here" not in roots[0], roots  # (the refused ones ran nothing)


async def test_a_job_action_that_is_no_string_is_refused_naming_action(daemon: Daemon):
    # An action sent as a list or an object was looked up among the actions as it was: a
    # TypeError (unhashable) crashed the session's actor, whose restart answered the call
    # INTERRUPTED ("Lens stopped before it finished") where the model had only sent a bad argument.
    token, sid = await setup(daemon)
    for i, action in enumerate(([], ["list"], {"a": 1}, 5, None, "bogus")):
        body = await run_tool(daemon, token, sid, f"r{i}", "job", {"action": action})
        assert body["error_code"] == "INVALID_ARGUMENT", (action, body)
        assert body["content"][0]["text"].startswith(
            "INVALID_ARGUMENT: action must be one of start, list, read, stop, got "), body
    # a missing or an unknown argument is named too (the answer was the usage line alone)
    body = await run_tool(daemon, token, sid, "r-read", "job", {"action": "read"})
    assert body["content"][0]["text"].startswith("INVALID_ARGUMENT: job read needs job_id; job takes "), body
    body = await run_tool(daemon, token, sid, "r-stop", "job", {"action": "stop", "job_id": "job_x", "offset": 0})
    assert body["content"][0]["text"].startswith("INVALID_ARGUMENT: job stop does not take 'offset'; job takes "), body
    body = await run_tool(daemon, token, sid, "r-list", "job", {"action": "list"})
    assert body["content"][0]["text"] == "no jobs in this session"
    assert not any(e["kind"] == "tool.interrupted" or e["body"].get("error_code") == "INTERRUPTED"
                   for e in await log_of(daemon, token, sid))


async def test_a_timeout_and_a_signal_end_jobs_as_stopped_and_crashed(daemon: Daemon):
    token, sid = await setup(daemon)
    slow = await start_job(daemon, token, sid, "r1", "exec sleep 600", timeout_ms=300)
    killed = await start_job(daemon, token, sid, "r2", "echo bye; kill -9 $$")
    fin = await finished_of(daemon, token, sid, slow)
    assert (fin["body"]["status"], fin["body"]["reason"]) == ("stopped", "timed out after 300 ms")
    fin = await finished_of(daemon, token, sid, killed)
    assert (fin["body"]["status"], fin["body"]["exit_code"], fin["body"]["reason"]) == \
        ("crashed", -9, "killed by signal 9")
    assert fin["body"]["output_tail"] == "bye\n"
    await report_answered(daemon, token, sid, slow)
    await report_answered(daemon, token, sid, killed)


async def test_at_most_eight_jobs_run_at_once_and_a_delete_stops_them_without_reports(daemon: Daemon):
    token, sid = await setup(daemon)
    ids = [await start_job(daemon, token, sid, f"r{i}", "exec sleep 600") for i in range(8)]
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, "r9", tool({"action": "start", "command": "exec sleep 600"}))
    await daemon.wait_idle(token, sid)
    events = await log_of(daemon, token, sid)
    last = [e for e in events if e["kind"] == "tool.finished"][-1]["body"]
    assert last["error_code"] == "JOB_LIMIT" and "at most 8" in last["content"][0]["text"]
    assert sum(e["kind"] == "job.started" for e in events) == 8
    # a command longer than the cap is refused before anything runs
    await daemon.submit(token, sid, "r10", tool({"action": "start", "command": "x" * (16 * 1024 + 1)}))
    await daemon.wait_idle(token, sid)
    events = await log_of(daemon, token, sid)
    assert [e for e in events if e["kind"] == "tool.finished"][-1]["body"]["error_code"] == "COMMAND_TOO_LONG"
    # at the edge: one stopped, the next start runs again
    r = await daemon.post(f"/sessions/{sid}/jobs/{ids[0]}/stop", token)
    assert r.status_code == 200, r.text
    await report_answered(daemon, token, sid, ids[0])
    ids.append(await start_job(daemon, token, sid, "r11", "exec sleep 600"))
    await daemon.wait_idle(token, sid)
    r = await daemon.request("DELETE", f"/sessions/{sid}", token, json_body={})
    assert r.status_code == 200, r.text
    events = await log_of(daemon, token, sid)
    ends = {e["body"]["job_id"]: e["body"] for e in events if e["kind"] == "job.finished"}
    assert set(ends) == set(ids)
    assert {ends[i]["reason"] for i in ids[1:]} == {"session deleted"}
    reports = [e for e in events if e["kind"] == "input.submitted" and (e["request_id"] or "").startswith("job:")]
    assert [e["request_id"] for e in reports] == [f"job:{ids[0]}"]
    r = await daemon.get(f"/sessions/{sid}/jobs", token)
    assert r.status_code == 200 and {j["status"] for j in r.json()["jobs"]} == {"stopped"}
    r = await daemon.post(f"/sessions/{sid}/jobs/{ids[1]}/stop", token)
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")


async def test_a_job_running_at_a_stop_is_recorded_stopped_and_reported_after_the_restart(daemon_factory):
    # A graceful stop records the job's end with the output it had; the report waits in the log.
    # (A kill -9 leaves it to the restart, which records it lost: test_jobs_at_stop.py.)
    d = await daemon_factory()
    token, sid = await setup(d)
    job_id = await start_job(d, token, sid, "r1", "echo before; exec sleep 600")
    await d.wait_idle(token, sid)

    async def printed() -> bool:
        return (await d.get(f"/sessions/{sid}/jobs/{job_id}", token)).json()["output"] == "before\n"

    await wait_until(printed, what="the job's output")
    await stop_daemon(d)
    d2 = await daemon_factory(root=d.root)
    # Nobody asks for the session: the daemon wakes it because its report waits.
    fin = await finished_of(d2, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["output_tail"]) == ("stopped", "before\n")
    assert fin["body"]["reason"] == STOPPED_BY_DAEMON
    view = await report_answered(d2, token, sid, job_id)
    assert any(it.get("text", "").startswith(f"[background job {job_id} was stopped (Lens was stopped")
               for it in view["items"])
    r = await d2.get(f"/sessions/{sid}/jobs/{job_id}", token)
    assert (r.json()["status"], r.json()["source"], r.json()["output"]) == ("stopped", "tail", "before\n")
    r = await d2.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert (r.status_code, error_of(r)) == (409, "JOB_FINISHED")


async def test_a_session_with_a_job_running_does_not_passivate_before_the_job_ends(daemon_factory):
    # Idle actors passivate after sessions.idleSeconds; one whose job still runs stays (the job is
    # a task of its nursery) until the end is recorded and reported.
    d = await daemon_factory(config={"sessions": {"idleSeconds": 0.1}})
    token, sid = await setup(d)
    job_id = await start_job(d, token, sid, "r1", "sleep 1; echo late")
    fin = await finished_of(d, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["output_tail"]) == ("exited", "late\n")
    await report_answered(d, token, sid, job_id)


async def test_an_abort_stops_the_run_but_not_the_background_jobs(daemon: Daemon):
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "exec sleep 600")
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await daemon.wait_idle(token, sid)
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token)
    assert r.json()["status"] == "running"
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert r.status_code == 200 and r.json()["status"] == "stopped", r.text
    await report_answered(daemon, token, sid, job_id)


async def test_a_report_whose_request_id_a_client_took_is_still_written(daemon: Daemon):
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "exec sleep 600")
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, f"job:{job_id}", "my own input of that id")
    await daemon.wait_idle(token, sid)
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert r.status_code == 200, r.text
    await report_answered(daemon, token, sid, job_id)
    events = await log_of(daemon, token, sid)
    reports = [e for e in events if e["kind"] == "input.submitted"
               and e["body"]["content"][0]["text"].startswith(f"[background job {job_id} ")]
    assert [e["request_id"] for e in reports] == [None]
    assert [e["body"]["status"] for e in events if e["kind"] == "job.finished"] == ["stopped"]
    # ... and its item (filed under "seq:<n>") is in history like any other input's
    [placed] = [e for e in events if e["kind"] == "input.placed"
                and e["body"]["input_request_id"] == f"seq:{reports[0]['seq']}"]
    r = await daemon.get(f"/history/items/c{placed['seq']}", token)
    assert r.status_code == 200 and r.json()["text"].startswith(f"[background job {job_id} "), r.text


async def test_a_request_id_of_the_reserved_seq_form_is_refused_while_a_report_is_queued(daemon: Daemon):
    # A report written without an id of its own is named "seq:<n>" (its seq). A client's submit of
    # that very id while the report was queued recorded a second input of the same name: withdraw
    # "seq:<n>" then emptied the queue, dropping the report unnamed. The form is reserved: 422,
    # the queue and the log unchanged, and the name still names the report alone.
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "exec sleep 600")
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, f"job:{job_id}", "my own input of that id")
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert r.status_code == 200, r.text

    async def queued() -> list[dict[str, Any]] | None:
        q = (await daemon.view(token, sid))["queued"]
        return q or None

    [report] = await wait_until(queued, what="the report queued")
    rid = report["requestId"]
    [seq] = [e["seq"] for e in await log_of(daemon, token, sid)
             if e["kind"] == "input.submitted" and e["request_id"] is None]
    assert rid == f"seq:{seq}"
    before = await log_of(daemon, token, sid)
    for content in ("an input of the report's name", " "):
        r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": rid, "content": content})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
        message = r.json()["error"]["message"]
        assert f"requestId {rid!r}" in message and "reserved" in message and "choose another" in message, message
    assert await log_of(daemon, token, sid) == before
    assert (await daemon.view(token, sid))["queued"] == [report]
    # ... whatever its digits (a seq no input has too); "seq:" alone or "seq:1a" is not the form
    for other, status in ((f"seq:{seq + 1000}", 422), ("seq:", 202), ("seq:1a", 202)):
        r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": other, "content": "queued"})
        assert r.status_code == status, (other, r.text)
    r = await daemon.post(f"/sessions/{sid}/inputs/{rid}/withdraw", token)
    assert r.status_code == 200 and r.json()["text"].startswith(f"[background job {job_id} "), r.text
    assert [q["requestId"] for q in (await daemon.view(token, sid))["queued"]] == ["seq:", "seq:1a"]
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200, r.text


async def test_a_request_id_of_the_reserved_form_a_log_holds_as_a_clients_stays_its_duplicate(daemon_factory):
    # A log written before the form was reserved may hold "seq:<n>" as a client's request id: a
    # repeat of it is still answered as its first try was, after a deletion too; nothing is written.
    d = await daemon_factory()
    token, sid = await setup(d)
    project_id = (await d.view(token, sid))["projectId"]
    await stop_daemon(d)
    async with open_store(d.data_dir) as store:
        first = await store.append(Draft(t.InputSubmitted([t.TextPart("an input of an older client")]),
                                         project_id=project_id, session_id=sid, request_id="seq:1"))
    d2 = await daemon_factory(root=d.root)
    original = {"requestId": "seq:1", "seq": first.seq, "duplicate": True}
    assert await d2.submit(token, sid, "seq:1", "again") == original
    await d2.wait_idle(token, sid)
    r = await d2.request("DELETE", f"/sessions/{sid}", token)
    assert r.status_code == 200, r.text
    before = await log_of(d2, token, sid)
    assert await d2.submit(token, sid, "seq:1", "after the deletion") == original
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "seq:2", "content": "new"})
    assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
    assert await log_of(d2, token, sid) == before


async def test_a_job_whose_output_passed_the_executors_cap_says_so(daemon: Daemon):
    token, sid = await setup(daemon)
    # 16 MiB is what the executor passes on of one command; one byte more is dropped
    job_id = await start_job(daemon, token, sid, "r1", "head -c 16777217 /dev/zero | tr '\\0' a; echo")
    fin = await finished_of(daemon, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["exit_code"]) == ("exited", 0)
    assert fin["body"]["reason"] == "the executor kept no output past its cap per command"
    assert fin["body"]["output_tail"] == "a" * 4096  # (the newline was past the cap)
    report = next(e for e in await log_of(daemon, token, sid)
                  if e["kind"] == "input.submitted" and e["request_id"] == f"job:{job_id}")
    assert report["body"]["content"][0]["text"].startswith(
        f"[background job {job_id} exited with code 0 (the executor kept no output past its cap per command)]")
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"offset": 0, "limit": 1})
    assert (r.json()["droppedBefore"], r.json()["offset"]) == (16 * 1024 * 1024 - 1024 * 1024, 16 * 1024 * 1024 - 1024 * 1024)
    await report_answered(daemon, token, sid, job_id)


async def test_a_job_at_the_executors_output_cap_is_not_called_truncated(daemon: Daemon):
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "head -c 16777216 /dev/zero | tr '\\0' a")
    fin = await finished_of(daemon, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["reason"]) == ("exited", "")
    await report_answered(daemon, token, sid, job_id)


# Writes "€\n" to stdout in two pieces with "ERR" on stderr between them, each write read by the
# executor before the next is made (the pipe polled empty with FIONREAD, bounded): the executor
# passes on a stdout chunk that ends inside a character, then a stderr chunk.
SPLIT_CHARACTER = shlex.quote("""
import fcntl, os, struct, termios, time
def drained(fd):
    end = time.monotonic() + 30
    while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\\0\\0\\0\\0"))[0]:
        if time.monotonic() > end:
            raise SystemExit(3)
        time.sleep(0.005)
os.write(1, b"\\xe2\\x82"); drained(1)
os.write(2, b"ERR"); drained(2)
os.write(1, b"\\xac\\n")
""")


async def test_a_character_split_across_stdout_chunks_stays_whole_when_stderr_comes_between(daemon: Daemon):
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", f"python3 -c {SPLIT_CHARACTER}")
    fin = await finished_of(daemon, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["exit_code"]) == ("exited", 0), fin
    assert fin["body"]["output_tail"] == "ERR€\n"
    r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token)
    assert (r.json()["output"], r.json()["nextOffset"], r.json()["eof"]) == ("ERR€\n", 7, True)
    await report_answered(daemon, token, sid, job_id)
    # run_command keeps the characters whole too, and each stream's lines: stdout's line is
    # written whole, stderr's "ERR" (which no newline ended) at the end
    done = await run_tool(daemon, token, sid, "r2", "run_command", {"command": f"python3 -c {SPLIT_CHARACTER}"})
    assert done["status"] == "ok", done
    assert done["content"][0]["text"] == "€\nERR\n[exit 0]"


async def test_output_that_is_not_utf8_read_in_pages_adds_up_to_the_whole(daemon: Daemon):
    token, sid = await setup(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "printf 'ab\\200\\200\\200cd\\303\\251'")
    await finished_of(daemon, token, sid, job_id)
    whole = (await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token)).json()
    assert (whole["output"], whole["nextOffset"]) == ("ab\ufffd\ufffd\ufffdcdé", 9)
    pages, offset = [], 0
    while True:
        page = (await daemon.get(f"/sessions/{sid}/jobs/{job_id}", token, params={"offset": offset, "limit": 2})).json()
        assert page["offset"] == offset, page
        pages.append(page["output"])
        offset = page["nextOffset"]
        if page["eof"]:
            break
    assert "".join(pages) == whole["output"]
    await report_answered(daemon, token, sid, job_id)


async def test_stopping_a_job_ends_the_process_it_started_in_a_session_of_its_own(daemon: Daemon):
    # `setsid` leaves the job's process group, which the executor signals; it ran on after the stop.
    token, sid = await setup(daemon)
    ws = daemon.root / "workspaces" / "p"
    job_id = await start_job(daemon, token, sid, "r1", "setsid sh -c 'echo $$ > server.pid; exec sleep 600' "
                             ">/dev/null 2>&1 </dev/null & echo started; exec sleep 600")

    async def pid() -> int | None:
        text = (ws / "server.pid").read_text() if (ws / "server.pid").exists() else ""
        return int(text) if text.endswith("\n") else None

    server = await wait_until(pid, what="the job's server started")
    try:
        r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
        assert r.status_code == 200 and r.json()["status"] == "stopped", r.text

        async def gone() -> bool:
            return not alive(server)
        await wait_until(gone, timeout=10, what=f"process {server} (setsid by the job) ended with the job")
    finally:
        if alive(server):
            os.kill(server, signal.SIGKILL)

