"""F-HAR-1, F-HAR-2 and F-EXE-7 over HTTP, a fourth pass as a client author drives a real daemon
(loopback port 0, the ``faux`` provider calling tools, the real executor over gRPC).

What the earlier passes pin is not redone. Here: an optional argument of ``run_command``,
``job``, ``todo`` and ``ask_user`` sent as ``null`` is that argument left out, as ``read_file``,
``edit_file``, ``history_search`` and ``subagent`` already read it (a model that fills every
property of a tool's schema sends ``null`` for those it does not use)."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Daemon, question_opened, run_tool, wait_until


async def _ok(d: Daemon, token: str, sid: str, rid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    body = await run_tool(d, token, sid, rid, name, args)
    assert body["is_error"] is False, (name, args, body)
    return body


async def test_an_optional_argument_sent_as_null_is_that_argument_left_out(daemon: Daemon, strong: str):
    # Before: run_command and job refused "timeout_ms must be an integer …, got null" and "cwd
    # must be a workspace-relative path", job list/read/stop refused the unused properties as
    # arguments they do not take, todo "Expected `str`, got `null` - at `$[0].status`", and
    # ask_user the same for options and allow_text.
    project = await daemon.project(strong)
    sid = (await daemon.session(strong, project["id"]))["id"]
    unused = {"command": None, "timeout_ms": None, "cwd": None, "job_id": None, "offset": None, "max_bytes": None}
    ran = await _ok(daemon, strong, sid, "r1", "run_command",
                    {"command": "pwd", "timeout_ms": None, "max_output_bytes": None, "cwd": None})
    assert ran["content"][0]["text"] == f"{project['workspace']}\n\n[exit 0]", ran
    started = await _ok(daemon, strong, sid, "r2", "job",
                        {**unused, "action": "start", "command": "echo from the job"})
    job_id = started["structured_content"]["job_id"]

    async def ended() -> bool:
        r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", strong)
        return r.json()["status"] == "exited"

    await wait_until(ended, what="the job's end")
    await daemon.wait_idle(strong, sid)
    listed = await _ok(daemon, strong, sid, "r3", "job", {**unused, "action": "list"})
    assert [j["job_id"] for j in listed["structured_content"]["jobs"]] == [job_id]
    read = await _ok(daemon, strong, sid, "r4", "job", {**unused, "action": "read", "job_id": job_id})
    assert read["content"][0]["text"].startswith("from the job\n"), read
    stopped = await run_tool(daemon, strong, sid, "r5", "job", {**unused, "action": "stop", "job_id": job_id})
    assert stopped["error_code"] == "JOB_FINISHED", stopped  # (its own refusal, not the arguments')
    needs = await run_tool(daemon, strong, sid, "r6", "job", {**unused, "action": "read"})
    assert needs["error_code"] == "INVALID_ARGUMENT" and "job read needs job_id" in needs["content"][0]["text"], needs
    # a name the schema lacks is refused though null, as run_command refuses it (job dropped it)
    for i, (args, named) in enumerate((({"action": "list", "bogus": None}, "'bogus'"),
                                       ({"action": "start", "command": "true", "timout_ms": None}, "'timout_ms'"))):
        odd = await run_tool(daemon, strong, sid, f"r6{i}", "job", args)
        assert odd["error_code"] == "INVALID_ARGUMENT" and f"does not take {named}" in odd["content"][0]["text"], odd
    odd = await run_tool(daemon, strong, sid, "r6r", "run_command", {"command": "true", "timout_ms": None})
    assert odd["error_code"] == "INVALID_ARGUMENT" and "timout_ms" in odd["content"][0]["text"], odd
    await _ok(daemon, strong, sid, "r7", "todo", {"items": [{"id": "a", "text": "A", "status": None}]})
    assert (await daemon.view(strong, sid))["todos"] == [{"id": "a", "text": "A", "status": "pending"}]
    # a required field null is still refused, naming it
    refused = await run_tool(daemon, strong, sid, "r8", "todo", {"items": [{"id": "a", "text": None}]})
    assert refused["error_code"] == "INVALID_ARGUMENT" and "$[0].text" in refused["content"][0]["text"], refused
    ask = {"questions": [{"id": "q", "text": "Anything to add?", "options": None, "allow_text": None}]}
    qid = await question_opened(daemon, strong, sid, "r9", "/tool ask_user " + json.dumps(ask))
    view = await daemon.view(strong, sid)
    assert view["questions"][0]["questions"] == [{"id": "q", "text": "Anything to add?", "options": [],
                                                  "allow_text": True}], view["questions"]
    r = await daemon.post(f"/sessions/{sid}/questions/{qid}/answer", strong, {"kind": "answer", "text": "no"})
    assert r.status_code == 200, r.text
    await daemon.wait_idle(strong, sid)
