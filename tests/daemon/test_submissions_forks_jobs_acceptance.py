"""F-ACT-3, F-ACT-6, F-ACT-7 and F-HAR-2 at their edges, read as a user who has the spec, the
README and docs/ and drives a real daemon over HTTP (loopback port 0, the built-in ``faux``
provider, the real executor over gRPC).

What earlier modules pin is not repeated (withdraw/steer in each state of one input, the
``whenBusy`` refusals, a request id as one session's own, a deleted session on every route, forks
from a deletion and from a session's first event, the job routes' auth and id checks). Here: a
withdraw racing the placement, an abort racing a withdraw and a steer, withdraw/steer of another
session's id, a duplicate ``requestId`` carrying another text and ``whenBusy``, a steered follow-up
placed at the next tool round, a fork at another session's seq lying inside this one's range and a
fork of a fork at a seq it inherited, a configuration change sent while a model request is in
flight, a job that exits non-zero, a stop racing a job's own end, a job's report queued behind a
run and steered or withdrawn by its id, the view's queue in the order it runs, a finished job's
output read after a restart (its tail at its place in the whole output), and a fork made while a
job runs. Every wait is bounded (conftest ``wait_until``)."""

from __future__ import annotations

from typing import Any

import trio

from .conftest import BUSY, Daemon, error_of, stop_daemon, wait_until
from .test_jobs import finished_of, log_of, report_answered, start_job


async def _session(d: Daemon, client: str = "acceptance") -> tuple[str, str, str]:
    token = await d.pair(client, strong=True)
    project = await d.project(token)
    return token, project["id"], (await d.session(token, project["id"]))["id"]


async def _last_seq(d: Daemon) -> int:
    return (await d.get("/health")).json()["lastSeq"]


def _of(events: list[dict[str, Any]], kind: str, rid: str) -> list[dict[str, Any]]:
    """The events of ``kind`` about input ``rid`` (an ``input.submitted`` by its own request id,
    an ``input.placed``/``input.withdrawn`` by the input's)."""
    if kind == "input.submitted":
        return [e for e in events if e["kind"] == kind and e["request_id"] == rid]
    return [e for e in events if e["kind"] == kind and e["body"].get("input_request_id") == rid]


# --------------------------------------------------------------------------- F-ACT-3


async def test_a_withdraw_racing_the_placement_answers_what_the_log_then_holds(daemon: Daemon):
    # "second" is sent while "first" is answered (the faux answers at once), and withdrawn at
    # once: the withdraw meets it queued or already placed. Either answer must be the truth: a
    # withdrawn input is never placed nor seen by the model, a placed one is not withdrawn.
    token, pid, _ = await _session(daemon)
    answers = set()
    for i in range(10):
        sid = (await daemon.session(token, pid))["id"]
        await daemon.submit(token, sid, "first", "first")
        await daemon.submit(token, sid, "second", "second")
        r = await daemon.post(f"/sessions/{sid}/inputs/second/withdraw", token)
        assert r.status_code == 200, r.text
        answer = r.json()
        view = await daemon.wait_idle(token, sid)
        events = await daemon.events(token, sid)
        placed, withdrawn = _of(events, "input.placed", "second"), _of(events, "input.withdrawn", "second")
        texts = [it["text"] for it in view["items"]]
        answers.add(answer["status"])
        if answer["status"] == "withdrawn":
            assert answer["text"] == "second" and (len(placed), len(withdrawn)) == (0, 1), (i, events)
            assert texts == ["first", "(faux) You said: first"]
        else:
            assert answer == {"requestId": "second", "status": answer["status"], "text": None}
            assert answer["status"] in ("placed", "settled") and (len(placed), len(withdrawn)) == (1, 0), i
            assert texts[-2:] == ["second", "(faux) You said: second"]
        # asked again once the session is idle: withdrawn stays withdrawn, a placed one is settled
        again = (await daemon.post(f"/sessions/{sid}/inputs/second/withdraw", token)).json()
        assert again["status"] == ("withdrawn" if answer["status"] == "withdrawn" else "settled"), again
    assert answers <= {"withdrawn", "placed", "settled"}


async def test_an_abort_a_withdraw_and_a_steer_sent_together_withdraw_the_input_once(daemon: Daemon):
    token, pid, _ = await _session(daemon)
    for i in range(4):
        sid = (await daemon.session(token, pid))["id"]
        await daemon.submit(token, sid, "busy", BUSY)
        await daemon.wait_running_call(token, sid)
        await daemon.submit(token, sid, "q", "queued")
        out: dict[str, Any] = {}

        async def send(name: str, path: str) -> None:
            out[name] = await daemon.post(f"/sessions/{sid}{path}", token)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "withdraw", "/inputs/q/withdraw")
            nursery.start_soon(send, "abort", "/abort")
            nursery.start_soon(send, "steer", "/inputs/q/steer")
        assert out["abort"].status_code == 200 and out["abort"].json()["aborted"] is True
        # whichever came first, the withdraw answers withdrawn with the text: by its own hand or
        # by the abort's, which then names it (and no other)
        assert out["withdraw"].json() == {"requestId": "q", "status": "withdrawn", "text": "queued"}
        assert out["abort"].json()["withdrawn"] in ([], ["q"])
        # a steer that came after either is 409 naming the status; one that came first re-queued it
        if out["steer"].status_code == 409:
            assert error_of(out["steer"]) == "INPUT_NOT_QUEUED" and "withdrawn" in out["steer"].text
        else:
            assert out["steer"].json() == {"requestId": "q", "status": "queued", "whenBusy": "steer"}
        await daemon.wait_idle(token, sid)
        events = await daemon.events(token, sid)
        assert (len(_of(events, "input.withdrawn", "q")), len(_of(events, "input.placed", "q"))) == (1, 0), i


async def test_withdraw_and_steer_of_another_sessions_input_leave_it_queued_there(daemon: Daemon):
    token, pid, a = await _session(daemon)
    b = (await daemon.session(token, pid))["id"]
    await daemon.submit(token, a, "busy", BUSY)
    await daemon.wait_running_call(token, a)
    await daemon.submit(token, a, "q", "queued in a")
    before = await _last_seq(daemon)
    r = await daemon.post(f"/sessions/{b}/inputs/q/withdraw", token)
    assert (r.status_code, r.json()) == (200, {"requestId": "q", "status": "unknown", "text": None})
    r = await daemon.post(f"/sessions/{b}/inputs/q/steer", token)
    assert (r.status_code, error_of(r)) == (409, "INPUT_NOT_QUEUED") and "unknown" in r.text
    for path in ("/inputs/q/withdraw", "/inputs/q/steer", "/abort"):  # a session that is not there
        r = await daemon.post(f"/sessions/ses_nope{path}", token)
        assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND") and "ses_nope" in r.text
    assert await _last_seq(daemon) == before
    queued = (await daemon.view(token, a))["queued"]
    assert [(q["requestId"], q["whenBusy"]) for q in queued] == [("q", "followUp")]
    r = await daemon.post(f"/sessions/{a}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": ["q"]}


async def test_a_duplicate_request_id_with_another_text_is_the_first_input_in_every_answer(daemon: Daemon):
    token, _, sid = await _session(daemon)
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    first = await daemon.submit(token, sid, "q", "the original")
    before = await daemon.events(token, sid)
    again = await daemon.submit(token, sid, "q", [{"type": "text", "text": "another text"}], whenBusy="steer")
    assert again == {**first, "duplicate": True}
    assert await daemon.events(token, sid) == before  # nothing recorded
    [queued] = (await daemon.view(token, sid))["queued"]
    assert (queued["requestId"], queued["text"], queued["whenBusy"], queued["seq"]) == \
        ("q", "the original", "followUp", first["seq"])
    r = await daemon.post(f"/sessions/{sid}/inputs/q/withdraw", token)
    assert r.json() == {"requestId": "q", "status": "withdrawn", "text": "the original"}
    # a withdrawn input's id stays taken: sent again it is the same duplicate, and stays withdrawn
    assert await daemon.submit(token, sid, "q", "once more") == {**first, "duplicate": True}
    r = await daemon.post(f"/sessions/{sid}/inputs/q/withdraw", token)
    assert r.json() == {"requestId": "q", "status": "withdrawn", "text": "the original"}
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": []}  # nothing queued is left to withdraw
    view = await daemon.wait_idle(token, sid)
    assert all("once more" not in it.get("text", "") and "another text" not in it.get("text", "") for it in view["items"])


ASK = {"questions": [{"id": "go", "text": "Go on?", "options": [{"id": "yes", "label": "Yes"}]}]}
ASKING = {"providers": [{"id": "faux", "protocol": "faux",
                         "script": [{"when": "start", "toolCalls": [{"name": "ask_user", "arguments": ASK}]}]}],
          "defaultModel": "faux/faux-1"}


async def test_a_steered_follow_up_is_placed_after_the_tool_round_the_other_after_the_answer(daemon_factory):
    # The run waits in a tool round (ask_user) while two follow-ups queue; one is re-queued as a
    # steer. Once the round ends (the answer), the steer goes into the very next model request of
    # that task; the follow-up waits for the task's answer and starts a task of its own.
    d = await daemon_factory(config=ASKING)
    token, _, sid = await _session(d)
    await d.submit(token, sid, "r1", "start")

    async def asking() -> dict[str, Any] | None:
        v = await d.view(token, sid)
        return v if v["status"] == "awaiting_answer" else None

    qid = (await wait_until(asking, what="the question"))["questions"][0]["questionId"]
    await d.submit(token, sid, "later", "a follow-up")
    await d.submit(token, sid, "sooner", "to be steered")
    r = await d.post(f"/sessions/{sid}/inputs/sooner/steer", token)
    assert r.json() == {"requestId": "sooner", "status": "queued", "whenBusy": "steer"}
    queued = (await d.view(token, sid))["queued"]
    assert {(q["requestId"], q["whenBusy"]) for q in queued} == {("sooner", "steer"), ("later", "followUp")}
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["yes"]})
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [steer] = _of(events, "input.placed", "sooner")
    [follow] = _of(events, "input.placed", "later")
    [answered] = [e for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == "ask_user"]
    requested = [e for e in events if e["kind"] == "model.requested"]
    tasks = [e for e in events if e["kind"] == "task.started"]
    # the steer: after the tool round, before the task's next request, in the first task
    assert answered["seq"] < steer["seq"] < requested[1]["seq"] and steer["task_id"] == tasks[0]["task_id"]
    # the follow-up: a task of its own, after the first task's last answer
    assert len(tasks) == 2 and follow["task_id"] == tasks[1]["task_id"]
    last_of_first = max(e["seq"] for e in events if e["kind"] == "model.responded" and e["task_id"] == tasks[0]["task_id"])
    assert last_of_first < follow["seq"]


# --------------------------------------------------------------------------- F-ACT-6

MODELS = {"providers": [{"id": "faux", "protocol": "faux",
                         "models": [{"id": "m1", "contextWindow": 8192}, {"id": "m2", "contextWindow": 8192}],
                         "script": [{"when": "hold", "text": "held", "delayMs": 600000}]}],
          "defaultModel": "faux/m1"}


async def test_a_configuration_sent_while_a_request_is_in_flight_applies_from_the_next_one(daemon_factory):
    d = await daemon_factory(config=MODELS)
    token, _, sid = await _session(d)
    await d.submit(token, sid, "r1", "hold")  # the faux holds this answer (until the abort)

    async def requested() -> list[dict[str, Any]]:
        return [e for e in await d.events(token, sid) if e["kind"] == "model.requested"]

    await wait_until(requested, what="the request in flight")
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "high"})
    assert r.status_code == 200, r.text
    assert (r.json()["model"], r.json()["thinkingLevel"], r.json()["status"]) == ("faux/m2", "high", "running")
    # the request in flight goes on as it was sent: not restarted, not cancelled
    assert [(e["body"]["model"], e["body"]["thinking_level"]) for e in await requested()] == [("m1", None)]
    assert (await d.view(token, sid))["status"] == "running"
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": []}
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "r2", "next")
    view = await d.wait_idle(token, sid)
    assert view["items"][-1]["text"] == "(faux) You said: next"
    assert [(e["body"]["model"], e["body"]["thinking_level"]) for e in await requested()] == \
        [("m1", None), ("m2", "high")]


# --------------------------------------------------------------------------- F-ACT-7


async def test_a_fork_at_another_sessions_seq_inside_this_ones_range_or_a_seq_a_fork_inherited(daemon: Daemon):
    token, pid, a = await _session(daemon)
    b = (await daemon.session(token, pid))["id"]
    for sid, rid, text in ((a, "r1", "one"), (b, "r1", "bee"), (a, "r2", "two")):
        await daemon.submit(token, sid, rid, text)
        await daemon.wait_idle(token, sid)
    ea, eb = await daemon.events(token, a), await daemon.events(token, b)
    inside = [e["seq"] for e in eb if ea[0]["seq"] < e["seq"] < ea[-1]["seq"]]
    assert inside  # b's events lie between a's first and last
    sessions = len((await daemon.get("/sessions", token)).json()["sessions"])
    for seq in inside[:1] + inside[-1:]:
        r = await daemon.post(f"/sessions/{a}/fork", token, {"seq": seq})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
        assert f"seq {seq} " in r.json()["error"]["message"] and a in r.json()["error"]["message"]
    r = await daemon.post("/sessions/ses_nope/fork", token, {"seq": ea[-1]["seq"]})
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND")
    assert len((await daemon.get("/sessions", token)).json()["sessions"]) == sessions

    # a fork after a's first answer, then a fork of that fork: its own event forks, and a seq it
    # holds only by inheritance (a's, which its view shows) is made from a, where it was recorded
    [placed] = _of(ea, "input.placed", "r1")
    r = await daemon.post(f"/sessions/{a}/fork", token, {"seq": placed["seq"], "name": "from one"})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert (fork["name"], [it["text"] for it in fork["items"]]) == ("from one", ["one"])
    own = await daemon.events(token, fork["id"])
    assert [e["kind"] for e in own] == ["session.created"]
    r = await daemon.post(f"/sessions/{fork['id']}/fork", token, {"seq": placed["seq"]})
    assert r.status_code == 201, r.text
    assert r.json()["forkedFrom"] == {"sessionId": a, "seq": placed["seq"]}
    assert [it["text"] for it in r.json()["items"]] == ["one"]
    r = await daemon.post(f"/sessions/{fork['id']}/fork", token, {"seq": own[-1]["seq"]})
    assert r.status_code == 201, r.text
    second = r.json()
    assert second["forkedFrom"] == {"sessionId": fork["id"], "seq": own[-1]["seq"]}
    assert [it["text"] for it in second["items"]] == ["one"]
    # the fork runs: the model is sent what the fork holds, not a's later input
    await daemon.submit(token, second["id"], "go", "again")
    view = await daemon.wait_idle(token, second["id"])
    assert [it["text"] for it in view["items"]] == ["one", "again", "(faux) You said: again"]
    assert [it["text"] for it in (await daemon.view(token, a))["items"]][-2:] == ["two", "(faux) You said: two"]


async def test_a_fork_inside_a_running_tool_call_starts_idle_with_the_call_interrupted(daemon: Daemon):
    token, _, sid = await _session(daemon)
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    started = next(e for e in await daemon.events(token, sid) if e["kind"] == "tool.started")
    r = await daemon.post(f"/sessions/{sid}/fork", token, {"seq": started["seq"]})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert (fork["status"], fork["queued"], fork["runningTaskId"]) == ("idle", [], None)
    assert [it.get("call", {}).get("status") for it in fork["items"]] == [None, "interrupted"]
    await daemon.submit(token, fork["id"], "go", "after the fork")
    view = await daemon.wait_idle(token, fork["id"])
    assert view["items"][-1]["text"] == "(faux) You said: after the fork"
    assert (await daemon.view(token, sid))["status"] == "running"  # the source runs on, untouched
    await daemon.post(f"/sessions/{sid}/abort", token)


# --------------------------------------------------------------------------- F-HAR-2


async def test_a_job_that_exits_non_zero_is_exited_with_its_code_and_reported(daemon: Daemon):
    token, _, sid = await _session(daemon)
    job_id = await start_job(daemon, token, sid, "r1", "echo out; exit 3")
    fin = await finished_of(daemon, token, sid, job_id)
    assert (fin["body"]["status"], fin["body"]["exit_code"], fin["body"]["reason"], fin["body"]["output_tail"]) == \
        ("exited", 3, "", "out\n")
    view = await report_answered(daemon, token, sid, job_id)
    [report] = [it.get("text", "") for it in view["items"] if it.get("text", "").startswith(f"[background job {job_id} ")]
    assert report.startswith(f"[background job {job_id} exited with code 3]\ncommand: echo out; exit 3\n")
    assert report.endswith("out\n")
    r = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
    assert (r.status_code, error_of(r)) == (409, "JOB_FINISHED") and "exited with code 3" in r.text
    silent = await start_job(daemon, token, sid, "r2", "exit 0")
    await finished_of(daemon, token, sid, silent)
    view = await report_answered(daemon, token, sid, silent)
    assert any(it.get("text") == f"[background job {silent} exited with code 0]\ncommand: exit 0\n(no output)"
               for it in view["items"])


async def test_a_stop_racing_a_jobs_own_end_is_answered_as_the_one_recorded_end(daemon: Daemon):
    token, _, sid = await _session(daemon)
    ws = daemon.root / "workspaces" / "p"
    for i in range(4):
        job_id = await start_job(daemon, token, sid, f"r{i}", f"while [ ! -e go{i} ]; do sleep 0.01; done; exit 4")
        await daemon.wait_idle(token, sid)
        out: dict[str, Any] = {}

        async def stop() -> None:
            out["stop"] = await daemon.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)

        async def end() -> None:
            (ws / f"go{i}").touch()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(end)
            nursery.start_soon(stop)
        fin = await finished_of(daemon, token, sid, job_id)
        ends = [e for e in await log_of(daemon, token, sid)
                if e["kind"] == "job.finished" and e["body"]["job_id"] == job_id]
        assert len(ends) == 1
        r = out["stop"]
        if r.status_code == 200:
            assert (r.json()["status"], r.json()["reason"]) == ("stopped", "stopped by request")
            assert (fin["body"]["status"], fin["body"]["reason"]) == ("stopped", "stopped by request")
        else:
            assert (r.status_code, error_of(r)) == (409, "JOB_FINISHED") and "exited with code 4" in r.text
            assert (fin["body"]["status"], fin["body"]["exit_code"]) == ("exited", 4)
        await report_answered(daemon, token, sid, job_id)


async def test_a_jobs_report_queued_behind_a_run_is_steered_or_withdrawn_by_its_id(daemon: Daemon):
    token, _, sid = await _session(daemon)
    ws = daemon.root / "workspaces" / "p"
    job_id = await start_job(daemon, token, sid, "r1", "while [ ! -e go ]; do sleep 0.01; done; echo late")
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    (ws / "go").touch()
    await finished_of(daemon, token, sid, job_id)
    rid = f"job:{job_id}"
    [queued] = (await daemon.view(token, sid))["queued"]
    assert (queued["requestId"], queued["whenBusy"]) == (rid, "followUp")
    assert queued["text"].startswith(f"[background job {job_id} exited with code 0]")
    r = await daemon.post(f"/sessions/{sid}/inputs/{rid}/steer", token)
    assert r.json() == {"requestId": rid, "status": "queued", "whenBusy": "steer"}
    r = await daemon.post(f"/sessions/{sid}/inputs/{rid}/withdraw", token)
    assert (r.json()["status"], r.json()["text"]) == ("withdrawn", queued["text"])
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": []}
    view = await daemon.wait_idle(token, sid)
    assert not any(it.get("text", "").startswith("[background job") for it in view["items"])
    # the job's own record is not touched by withdrawing its report
    [job] = (await daemon.get(f"/sessions/{sid}/jobs", token)).json()["jobs"]
    assert (job["jobId"], job["status"], job["exitCode"]) == (job_id, "exited", 0)


async def test_the_views_queue_lists_the_next_to_run_first_a_steer_before_the_follow_ups_it_passes(daemon: Daemon):
    # docs/http-api.md: the view's `queued` is "indexed from 0 the next to run first". While a task
    # runs, a steer goes in at the next tool round, before any follow-up queued ahead of it (which
    # waits for the task's answer): the steer is next, whether sent as one or re-queued as one.
    token, _, sid = await _session(daemon)
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    await daemon.submit(token, sid, "f1", "first follow-up")
    await daemon.submit(token, sid, "s1", "sent as a steer", whenBusy="steer")
    await daemon.submit(token, sid, "f2", "second follow-up")
    await daemon.submit(token, sid, "f3", "to be steered")
    await daemon.post(f"/sessions/{sid}/inputs/f3/steer", token)
    view = await daemon.view(token, sid)
    assert [(q["requestId"], q["whenBusy"]) for q in view["queued"]] == \
        [("s1", "steer"), ("f3", "steer"), ("f1", "followUp"), ("f2", "followUp")]
    assert view["queuedTotal"] == 4
    # the window reads the same order by index
    r = await daemon.get(f"/sessions/{sid}", token, params={"queuedStart": 1, "queuedLimit": 2})
    assert [q["requestId"] for q in r.json()["queued"]] == ["f3", "f1"]
    # the abort's answer keeps submission order (docs/http-api.md)
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert r.json() == {"aborted": True, "withdrawn": ["f1", "s1", "f2", "f3"]}


async def test_a_finished_jobs_output_read_after_a_restart_keeps_its_offsets_and_says_what_was_dropped(daemon_factory):
    # State is durable, output was in memory: after a restart only the 4 KiB tail job.finished
    # recorded is left (source "tail"). It answered with offsets counted from the tail's start and
    # droppedBefore 0: a reader was told the output began with the tail and nothing was dropped,
    # and one going on from where memory stopped read the wrong bytes. Offsets are the whole
    # output's, as in memory (and as the output a stop saved is read): droppedBefore is where the
    # tail begins.
    d = await daemon_factory()
    token, _, sid = await _session(d)
    lines = "".join(f"{i:05d}\n" for i in range(2000))  # 12,000 bytes, each line says where it is
    job_id = await start_job(d, token, sid, "r1", "for i in $(seq 0 1999); do printf '%05d\\n' $i; done")
    fin = await finished_of(d, token, sid, job_id)
    assert fin["body"]["output_tail"] == lines[-4096:]
    await report_answered(d, token, sid, job_id)
    url = f"/sessions/{sid}/jobs/{job_id}"
    mem = (await d.get(url, token, params={"offset": 9000, "limit": 60})).json()
    assert (mem["source"], mem["offset"], mem["nextOffset"], mem["output"]) == ("memory", 9000, 9060, lines[9000:9060])
    await stop_daemon(d)
    d2 = await daemon_factory(root=d.root)
    whole = (await d2.get(url, token)).json()
    assert (whole["source"], whole["status"], whole["eof"]) == ("tail", "exited", True)
    assert (whole["droppedBefore"], whole["offset"], whole["nextOffset"]) == (12000 - 4096, 12000 - 4096, 12000)
    assert whole["output"] == lines[-4096:]
    # going on from where memory stopped reads the same bytes memory gave there
    again = (await d2.get(url, token, params={"offset": 9000, "limit": 60})).json()
    assert (again["offset"], again["nextOffset"], again["output"], again["eof"]) == (9000, 9060, lines[9000:9060], False)
    # an offset before the tail answers from where it begins (as memory does past its ring)
    first = (await d2.get(url, token, params={"offset": 0, "limit": 6})).json()
    assert (first["offset"], first["output"]) == (12000 - 4096, lines[12000 - 4096:12000 - 4090])
    # a short output is whole in its tail: nothing dropped
    short = await start_job(d2, token, sid, "r2", "echo short")
    await finished_of(d2, token, sid, short)
    await report_answered(d2, token, sid, short)
    await stop_daemon(d2)
    d3 = await daemon_factory(root=d.root)
    r = (await d3.get(f"/sessions/{sid}/jobs/{short}", token)).json()
    assert (r["source"], r["droppedBefore"], r["offset"], r["nextOffset"], r["output"]) == ("tail", 0, 0, 6, "short\n")
    # Output that is no UTF-8: its tail was recorded as text (each byte 0xFF read as U+FFFD, three
    # bytes). It was placed to end at the output's length, so it began before where it did
    # (droppedBefore 0 for 5,000 bytes). It is placed where it begins: 5000 - 4096; offsets inside
    # it are of its text.
    bad = await start_job(d3, token, sid, "r3", "head -c 5000 /dev/zero | tr '\\0' '\\377'")
    fin = await finished_of(d3, token, sid, bad)
    assert fin["body"]["output_tail"] == "\ufffd" * 4096
    await report_answered(d3, token, sid, bad)
    await stop_daemon(d3)
    d4 = await daemon_factory(root=d.root)
    r = (await d4.get(f"/sessions/{sid}/jobs/{bad}", token, params={"limit": 64 * 1024})).json()
    assert (r["source"], r["droppedBefore"], r["offset"], r["output"], r["eof"]) == \
        ("tail", 5000 - 4096, 5000 - 4096, "\ufffd" * 4096, True)


async def test_a_fork_made_while_a_job_runs_has_no_job_and_records_none_lost_at_a_restart(daemon_factory):
    # docs/decisions.md "Background jobs": forks start without jobs (a job belongs to the session
    # that ran it). So the fork lists none, cannot stop the source's, and a restart (which records
    # a job started and never finished as lost) finds nothing of it to record in the fork.
    d = await daemon_factory()
    token, _, sid = await _session(d)
    job_id = await start_job(d, token, sid, "r1", "exec sleep 600")
    await d.wait_idle(token, sid)
    events = await log_of(d, token, sid)
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": events[-1]["seq"]})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert fork["jobs"] == [] and (await d.get(f"/sessions/{fork['id']}/jobs", token)).json() == {"jobs": []}
    r = await d.post(f"/sessions/{fork['id']}/jobs/{job_id}/stop", token)
    assert (r.status_code, error_of(r)) == (404, "JOB_NOT_FOUND") and fork["id"] in r.text
    assert [(j["jobId"], j["status"]) for j in (await d.get(f"/sessions/{sid}/jobs", token)).json()["jobs"]] == \
        [(job_id, "running")]
    await stop_daemon(d)
    d2 = await daemon_factory(root=d.root)
    await d2.submit(token, fork["id"], "go", "hi")
    view = await d2.wait_idle(token, fork["id"])
    assert view["jobs"] == [] and view["items"][-1]["text"] == "(faux) You said: hi"
    assert not any(e["kind"].startswith("job.") for e in await log_of(d2, token, fork["id"]))
    fin = await finished_of(d2, token, sid, job_id)  # the source's job: stopped by the stop, as documented
    assert fin["body"]["status"] == "stopped"
