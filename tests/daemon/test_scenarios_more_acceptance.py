"""More stories across SPEC sections, told as a client tells them (HTTP, SSE and ``lens log
decode``) against ``lens serve`` processes on loopback port 0 with a real executor child:

- A session using a real stdio MCP server (``tests/mcp/server.py``) and background jobs across a
  clean restart and a kill -9: each job's status and output after the restart, the MCP server
  started again (a new process, the old one gone), every call recorded once (F-TOOL-5, F-HAR-2,
  F-ACT-4, F-API-5, F-API-7).
- A kill -9 while a ``/skill:`` input is being checked (accepted, not yet recorded): after the
  restart nothing of it is in the log, the retry with its ``requestId`` is recorded once and loads
  the skill once, a second retry is a duplicate (F-TOOL-6, F-LOG-4, F-ACT-3, F-ACT-4).
- The next model request after a kill -9 is byte for byte the live one over the OpenAI Responses
  protocol (F-ACT-2, F-MOD-1).

At every step the events route, the SSE stream from the start and (at the end of each daemon's
life) ``lens log decode`` agree. Every wait is bounded; nothing sleeps for ordering.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import trio

from ..mcp.conftest import SERVER
from ..procfs import alive
from ..providers.servers.base import Received, Reply, ScriptedServer
from ..providers.servers.openai_responses import response_stream
from .conftest import Daemon, run_lens, serving, wait_until
from .test_scenarios_acceptance import _copy_log

REVIEW = "---\nname: review\ndescription: how to review\n---\nREVIEW-STEPS: read twice, then answer.\n"


def _tool(name: str, args: dict[str, Any]) -> str:
    return f"/tool {name} {json.dumps(args)}"


def _write_config(root: Path, config: dict[str, Any]) -> None:
    (root / "config").mkdir(parents=True, exist_ok=True)
    (root / "config" / "lens.jsonc").write_text(json.dumps(config, indent=2))


async def _agree(d: Daemon, token: str, sid: str) -> list[dict[str, Any]]:
    """The session's events as the events route gives them, checked against the SSE stream read
    from the start: the same seqs, kinds and decoded events, in the same order."""
    events = await d.events(token, sid)
    frames = []
    async with d.sse(token, params={"session": sid}, last_event_id=0) as stream:
        while not frames or frames[-1].id < events[-1]["seq"]:
            msg = await stream.next_event()
            assert msg is not None, "the stream ended early"
            frames.append(msg)
    assert [(m.id, m.event, m.json()) for m in frames] == [(e["seq"], e["kind"], e) for e in events]
    return events


async def _decoded(root: Path, sid: str) -> list[dict[str, Any]]:
    out = await run_lens(root, "log", "decode", "--data", "data", "--session", sid)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def _finished(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e["body"] for e in events if e["kind"] == "tool.finished" and e["body"]["name"] == name]


def _started(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e["body"] for e in events if e["kind"] == "tool.started" and e["body"]["name"] == name]


async def _mcp_pid(d: Daemon, token: str) -> int:
    async def running() -> int | None:
        r = await d.get("/tools/inventory", token)
        assert r.status_code == 200, r.text
        [t] = [s for s in r.json()["mcpServers"] if s["name"] == "t"]
        return t["pid"] if t["status"] == "running" and t["pid"] else None

    return await wait_until(running, what="the MCP server running")


async def _gone(pid: int, what: str) -> None:
    async def dead() -> bool:
        return not alive(pid)

    await wait_until(dead, what=what)


async def _job_started(d: Daemon, token: str, sid: str, rid: str, command: str) -> str:
    known = {e["body"]["job_id"] for e in await d.events(token, sid) if e["kind"] == "job.started"}
    await d.submit(token, sid, rid, _tool("job", {"action": "start", "command": command}))

    async def fresh() -> str | None:
        ids = [e["body"]["job_id"] for e in await d.events(token, sid) if e["kind"] == "job.started"]
        new = [i for i in ids if i not in known]
        return new[0] if new else None

    job_id = await wait_until(fresh, what="job.started")
    await d.wait_idle(token, sid)
    return job_id


async def _job(d: Daemon, token: str, sid: str, job_id: str) -> dict[str, Any]:
    r = await d.get(f"/sessions/{sid}/jobs/{job_id}", token)
    assert r.status_code == 200, r.text
    return r.json()


async def _job_printed(d: Daemon, token: str, sid: str, job_id: str, text: str) -> None:
    async def printed() -> bool:
        return (await _job(d, token, sid, job_id))["output"] == text

    await wait_until(printed, what=f"job {job_id} printing {text!r}")


async def _reported(d: Daemon, token: str, sid: str, job_id: str) -> dict[str, Any]:
    """The view once the job's report was placed and answered (the faux model echoes it)."""
    async def answered() -> dict[str, Any] | None:
        v = await d.view(token, sid)
        if v["status"] != "idle" or v["queued"]:
            return None
        texts = [it.get("text", "") for it in v["items"]]
        return v if any(t.startswith(f"(faux) You said: [background job {job_id} ") for t in texts) else None

    return await wait_until(answered, what=f"the report of {job_id} answered")


async def test_mcp_calls_and_background_jobs_across_a_clean_restart_and_a_kill_9(tmp_path: Path) -> None:
    root = tmp_path / "r"
    _write_config(root, {"mcpServers": {"t": {"command": sys.executable, "args": [SERVER]}}})
    job1 = "echo job-one; exec sleep 600"
    job2 = "echo $$ > job2.pid; echo job-two; exec sleep 600"
    with trio.fail_after(80):
        async with serving(root) as (proc, d):
            token = await d.pair("story", strong=True)
            project = await d.project(token)
            ws = Path(project["workspace"])
            sid = (await d.session(token, project["id"]))["id"]
            pid1 = await _mcp_pid(d, token)
            await d.submit(token, sid, "m1", _tool("mcp__t__echo", {"text": "before the restart"}))
            view = await d.wait_idle(token, sid)
            assert "echo: before the restart" in json.dumps(view["items"]), view["items"]
            j1 = await _job_started(d, token, sid, "j1", job1)
            await _job_printed(d, token, sid, j1, "job-one\n")
            assert (await _job(d, token, sid, j1))["status"] == "running"
            r = await d.get(f"/sessions/{sid}/jobs", token)
            assert [j["jobId"] for j in r.json()["jobs"]] == [j1], r.text
            events = await _agree(d, token, sid)
            assert len(_started(events, "mcp__t__echo")) == len(_finished(events, "mcp__t__echo")) == 1
            assert await proc.terminate() == 0  # a clean stop (SIGTERM)
        await _gone(pid1, "the MCP server of the stopped daemon")
        decoded = await _decoded(root, sid)
        assert decoded == events + decoded[len(events):]  # what the clients saw, then the stop's records
        [fin] = [e["body"] for e in decoded if e["kind"] == "job.finished"]
        assert (fin["job_id"], fin["status"], fin["output_tail"]) == (j1, "stopped", "job-one\n")

        async with serving(root, stderr_name="serve-1.err") as (proc, d):
            view = await _reported(d, token, sid, j1)  # the report runs without anyone asking
            job = await _job(d, token, sid, j1)
            assert (job["status"], job["output"]) == ("stopped", "job-one\n"), job
            pid2 = await _mcp_pid(d, token)
            assert pid2 != pid1
            await d.submit(token, sid, "m2", _tool("mcp__t__echo", {"text": "after the restart"}))
            await d.wait_idle(token, sid)
            events = await _agree(d, token, sid)
            echoes = _finished(events, "mcp__t__echo")
            assert [b["content"][0]["text"] for b in echoes] == ["echo: before the restart", "echo: after the restart"]
            assert len(_started(events, "mcp__t__echo")) == 2  # nothing ran twice
            # A retry of the first call's request after the restart is a duplicate: no new call.
            again = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "m1", "content": "other"})
            assert again.status_code == 202 and again.json()["duplicate"] is True, again.text

            # A second job prints, and an MCP call is under way, at the kill -9.
            j2 = await _job_started(d, token, sid, "j2", job2)
            await _job_printed(d, token, sid, j2, "job-two\n")
            job_pid = int((ws / "job2.pid").read_text())
            await d.submit(token, sid, "m3", _tool("mcp__t__slow", {}))
            await d.wait_running_call(token, sid)
            events = await _agree(d, token, sid)
            proc.kill()
            with trio.fail_after(10):
                await proc.proc.wait()
        await _gone(pid2, "the MCP server of the killed daemon")
        assert await _decoded(root, sid) == events  # nothing was written after the clients saw it

        async with serving(root, stderr_name="serve-2.err") as (proc, d):
            await _reported(d, token, sid, j2)
            job = await _job(d, token, sid, j2)
            assert job["status"] == "lost" and job["output"] == "", job  # its output was in the killed daemon
            await _gone(job_pid, "the killed daemon's job command")
            pid3 = await _mcp_pid(d, token)
            assert pid3 not in (pid1, pid2)
            tools = {t["name"] for t in (await d.get("/tools/inventory", token)).json()["tools"]}
            assert {"mcp__t__echo", "mcp__t__slow"} <= tools
            events = await _agree(d, token, sid)
            [slow] = _finished(events, "mcp__t__slow")
            assert (slow["status"], slow["error_code"]) == ("interrupted", "INTERRUPTED"), slow
            assert len(_started(events, "mcp__t__slow")) == 1  # not re-run: not declared replay-safe
            assert [c["call"]["status"] for c in (await d.view(token, sid))["items"] if c.get("call")] == [
                "ok", "ok", "ok", "ok", "interrupted"]
            await d.submit(token, sid, "m4", _tool("mcp__t__echo", {"text": "and on"}))
            await d.wait_idle(token, sid)
            events = await _agree(d, token, sid)
            assert len(_started(events, "mcp__t__echo")) == 3
            assert await proc.terminate() == 0
        assert await _decoded(root, sid) == events


async def _project_with_review(d: Daemon, token: str) -> tuple[dict[str, Any], Path]:
    """A project whose workspace has the ``review`` skill, and that workspace."""
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW)
    return project, ws


async def test_a_kill_9_while_a_skill_input_is_checked_leaves_nothing_and_the_retry_loads_it_once(
        tmp_path: Path) -> None:
    root = tmp_path / "r"
    _write_config(root, {})
    hold = {"command": "touch started && sleep 600", "timeout_ms": 900000}
    with trio.fail_after(60):
        async with serving(root) as (proc, d):
            token = await d.pair("story", strong=True)
            project, ws = await _project_with_review(d, token)
            sid = (await d.session(token, project["id"]))["id"]
            other = (await d.session(token, project["id"]))["id"]
            await d.submit(token, sid, "r0", "hello")
            await d.wait_idle(token, sid)
            # Another session's command holds the workspace's write lock: the check waits.
            await d.submit(token, other, "o1", _tool("run_command", hold))
            await wait_until(lambda: trio.to_thread.run_sync((ws / "started").exists), what="the command holding the lock")
            answers: list[Any] = []

            async def send() -> None:
                try:
                    answers.append(await d.post(f"/sessions/{sid}/inputs", token,
                                                {"requestId": "s1", "content": "/skill:review go"}))
                except Exception as exc:  # (the daemon is killed under it: no answer)
                    answers.append(exc)

            async with trio.open_nursery() as n:
                n.start_soon(send)

                async def checking() -> dict[str, Any] | None:
                    v = await d.view(token, sid)
                    return v if v["status"] == "running" else None

                view = await wait_until(checking, what="the skill input's check pending")
                assert view["queued"] == [] and not answers
                before = await _agree(d, token, sid)
                assert not [e for e in before if e["request_id"] == "s1"]
                proc.kill()
                with trio.fail_after(10):
                    await proc.proc.wait()
            assert len(answers) == 1 and not hasattr(answers[0], "status_code")  # no answer was given
        assert await _decoded(root, sid) == before

        async with serving(root, stderr_name="serve-1.err") as (proc, d):
            view = await d.wait_idle(token, sid)
            assert [it["text"] for it in view["items"] if it["role"] == "user"] == ["hello"]
            rows = (await d.get("/sessions", token, params={"project": project["id"]})).json()["sessions"]
            assert {row["id"]: row["status"] for row in rows}[sid] == "idle"  # no check is pending now
            other_view = await d.wait_idle(token, other)
            assert [it["call"]["status"] for it in other_view["items"] if it.get("call")] == ["interrupted"]
            first = await d.submit(token, sid, "s1", "/skill:review go")
            assert first["duplicate"] is False
            view = await d.wait_idle(token, sid)
            again = await d.submit(token, sid, "s1", "/skill:review go")
            assert again == {"requestId": "s1", "seq": first["seq"], "duplicate": True}
            view2 = await d.wait_idle(token, sid)
            assert view2 == view
            assert [it["text"] for it in view["items"] if it["role"] == "user"] == ["hello", "go"]
            system = [it for it in view["items"] if it["role"] == "system"]
            assert len(system) == 1 and "REVIEW-STEPS" in system[0]["text"], system
            events = await _agree(d, token, sid)
            assert [e["kind"] for e in events].count("skill.loaded") == 1
            assert [e["request_id"] for e in events if e["kind"] == "input.submitted"] == ["r0", "s1"]
            assert await proc.terminate() == 0
        assert await _decoded(root, sid) == events


# ----------------------------------------------------------------- the OpenAI Responses protocol


def _input_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or item.get("output") or ""


def _responses_answer(received: Received) -> Reply:
    """What the model answers depends on the request's last input item only (replays agree)."""
    last = received.body["input"][-1]
    text = _input_text(last)
    if last.get("type") == "function_call_output":
        return response_stream(text=f"noted: {text[:40]}")
    call_id = f"call_{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    if "read the notes" in text:
        return response_stream(calls=[(call_id, "read_file", {"path": "notes.txt"})])
    if "load review" in text:
        return response_stream(calls=[(call_id, "skill", {"name": "review"})])
    return response_stream(text=f"echo: {text[:60]}")


def _responses_config(url: str) -> dict[str, Any]:
    return {"providers": [{"id": "resp", "protocol": "openai-responses", "baseUrl": url + "/v1",
                           "models": [{"id": "gpt-test", "contextWindow": 100000}]}],
            "defaultModel": "resp/gpt-test"}


async def test_the_next_request_after_a_kill_9_is_the_live_one_byte_for_byte_over_openai_responses(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    server = ScriptedServer(_responses_answer)
    root = tmp_path / "live"
    _write_config(root, _responses_config(await server.start(nursery)))
    with trio.fail_after(60):
        async with serving(root) as (proc, d):
            token = await d.pair("story", strong=True)
            project, ws = await _project_with_review(d, token)
            (ws / "notes.txt").write_text("alpha and the quokka\n")
            sid = (await d.session(token, project["id"]))["id"]
            for rid, text in (("r1", "hello quokka"), ("r2", "read the notes"), ("r3", "load review")):
                await d.submit(token, sid, rid, text)
                await d.wait_idle(token, sid)
            view = await d.view(token, sid)
            assert "alpha and the quokka" in json.dumps(view["items"]) and any(
                it["role"] == "system" and "REVIEW-STEPS" in it["text"] for it in view["items"])
            _copy_log(root, tmp_path / "copy")
            before = len(server.requests)
            await d.submit(token, sid, "r4", "what next?")
            await d.wait_idle(token, sid)
            live_next = [r.raw for r in server.requests[before:]]
            assert len(live_next) == 1 and server.requests[-1].path.endswith("/responses")
            events = await _agree(d, token, sid)
            view = await d.view(token, sid)
            proc.kill()
            with trio.fail_after(10):
                await proc.proc.wait()

        # The killed daemon, started again: the same view; its next request is the copy's.
        async with serving(root, stderr_name="serve-1.err") as (proc, d):
            assert await d.wait_idle(token, sid) == view
            assert await _agree(d, token, sid) == events
            before = len(server.requests)
            await d.submit(token, sid, "r5", "and then?")
            await d.wait_idle(token, sid)
            after_kill = [r.raw for r in server.requests[before:]]
            assert await proc.terminate() == 0

        # The copy taken before r4, started cleanly: r4's request is the live one, byte for byte;
        # then r5's is the one the killed-and-restarted daemon sent.
        copy = tmp_path / "copy"
        server2 = ScriptedServer(_responses_answer)
        _write_config(copy, _responses_config(await server2.start(nursery)))
        async with serving(copy, stderr_name="serve-c.err") as (proc, d):
            for rid, text in (("r4", "what next?"), ("r5", "and then?")):
                await d.submit(token, sid, rid, text)
                await d.wait_idle(token, sid)
            assert [r.raw for r in server2.requests] == live_next + after_kill
            assert await proc.terminate() == 0
