"""F-HAR-2, F-API-1: a background job running when ``lens serve`` is stopped.

A graceful stop (SIGTERM, SIGINT or SIGHUP to the process) ends the job's command and records the job
``stopped`` with the output it had, its report waiting in the log; the restarted daemon runs the
session for that report, so the model is told. A kill -9 records nothing: the restart records the
job ``lost``, as before. Real ``lens serve`` processes on one data directory, the real executor,
and ``lens log verify`` over the log they leave."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime.jobs import STOPPED_BY_DAEMON

from .conftest import LIMIT, Daemon, run_lens, serving, wait_until
from .test_jobs import finished_of, log_of, report_answered, setup, start_job

COMMAND = "echo before stop; exec sleep 600"


async def _job_with_output(d: Daemon, token: str, sid: str) -> str:
    """Start the job and wait until its first line is in the daemon's memory (not in the log)."""
    job_id = await start_job(d, token, sid, "r1", COMMAND)
    await d.wait_idle(token, sid)

    async def printed() -> bool:
        r = await d.get(f"/sessions/{sid}/jobs/{job_id}", token)
        return r.status_code == 200 and r.json()["output"] == "before stop\n"

    await wait_until(printed, what="the job's first line")
    return job_id


async def _decode(cwd: Path) -> list[dict[str, Any]]:
    out = await run_lens(cwd, "log", "decode", "--data", "data")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
async def test_a_graceful_stop_records_a_running_job_stopped_with_its_output(tmp_path: Path, sig: int):
    with trio.fail_after(4 * LIMIT):
        async with serving(tmp_path, stderr_name="serve-0.err") as (serve, d):
            token, sid = await setup(d)
            job_id = await _job_with_output(d, token, sid)
            assert serve.proc is not None
            serve.proc.send_signal(sig)
            with trio.fail_after(LIMIT):
                code = await serve.proc.wait()
            assert code == 0, (tmp_path / "serve-0.err").read_text()[-2000:]

        # Recorded by the stopping daemon itself, before any restart: its end, with the output it
        # had, and the report (an input not yet placed: the next run places it).
        events = [e for e in await _decode(tmp_path) if e["session_id"] == sid]
        (fin,) = [e for e in events if e["kind"] == "job.finished"]
        assert fin["body"]["job_id"] == job_id
        assert (fin["body"]["status"], fin["body"]["exit_code"]) == ("stopped", None)
        assert fin["body"]["reason"] == STOPPED_BY_DAEMON
        assert fin["body"]["output_tail"] == "before stop\n"
        (report,) = [e for e in events if e["kind"] == "input.submitted" and e["request_id"] == f"job:{job_id}"]
        assert report["seq"] == fin["seq"] - 1
        assert not [e for e in events if e["kind"] == "input.placed" and e["body"]["input_request_id"] == f"job:{job_id}"]

        async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d2):
            # Nobody asks for the session: the daemon wakes it for the waiting report.
            view = await report_answered(d2, token, sid, job_id)
            assert any(it.get("text", "").startswith(f"[background job {job_id} was stopped (Lens was stopped")
                       for it in view["items"]), view["items"]
            ends = [e for e in await log_of(d2, token, sid) if e["kind"] == "job.finished"]
            assert [e["body"]["status"] for e in ends] == ["stopped"]  # not recorded lost as well
            r = await d2.get(f"/sessions/{sid}/jobs/{job_id}", token)
            assert (r.json()["status"], r.json()["source"], r.json()["output"]) == ("stopped", "tail", "before stop\n")
            assert await serve.terminate() == 0
        verify = await run_lens(tmp_path, "log", "verify", "--data", "data")
        assert verify.returncode == 0, verify.stdout + verify.stderr


async def test_a_kill_9_leaves_a_running_job_to_be_recorded_lost_at_the_next_start(tmp_path: Path):
    with trio.fail_after(4 * LIMIT):
        async with serving(tmp_path, stderr_name="serve-0.err") as (serve, d):
            token, sid = await setup(d)
            job_id = await _job_with_output(d, token, sid)
            assert serve.proc is not None
            serve.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(LIMIT):
                assert await serve.proc.wait() == -signal.SIGKILL
        assert not [e for e in await _decode(tmp_path) if e["kind"] == "job.finished"]

        async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d2):
            fin = await finished_of(d2, token, sid, job_id)
            assert fin["body"]["status"] == "lost"
            assert fin["body"]["reason"] == "Lens restarted while the job ran; how its command ended was not recorded"
            assert fin["body"]["output_tail"] == ""  # the output was in the killed daemon's memory only
            await report_answered(d2, token, sid, job_id)
            # (a stop of it says how it ended in words: it said "it lost: …")
            r = await d2.post(f"/sessions/{sid}/jobs/{job_id}/stop", token)
            assert r.status_code == 409 and r.json()["error"]["code"] == "JOB_FINISHED", r.text
            assert r.json()["error"]["message"] == (f"job {job_id!r} is not running (it was lost: Lens restarted "
                                                    "while the job ran; how its command ended was not recorded)")
            assert await serve.terminate() == 0
        verify = await run_lens(tmp_path, "log", "verify", "--data", "data")
        assert verify.returncode == 0, verify.stdout + verify.stderr


async def _read_all(d: Daemon, token: str, sid: str, job_id: str) -> tuple[dict[str, Any], str]:
    """The first page's answer and the whole output, read page by page from offset 0."""
    first, text, offset = None, "", 0
    for _ in range(100):
        r = await d.get(f"/sessions/{sid}/jobs/{job_id}?offset={offset}&limit=1048576", token)
        assert r.status_code == 200, r.text
        page = r.json()
        first = first or page
        text += page["output"]
        if page["eof"]:
            return first, text
        offset = page["nextOffset"]
    raise AssertionError("the output never ended")


MIB = 1024 * 1024


async def test_a_graceful_stop_saves_a_running_jobs_output_up_to_its_bound_and_the_restart_reads_it(tmp_path: Path):
    # The tail in job.finished holds the last 4096 bytes; the daemon holds the last 1 MiB in
    # memory. At a graceful stop that memory was lost: after the restart a job's output was its
    # tail. Now output longer than the tail is saved as an artifact (the last 1 MiB, as held),
    # named by job.finished, and read after the restart (`source: saved`, offsets of the whole
    # output). At the tail's size and one past it, at the ring's size and one past it.
    sizes = {"tail": 4096, "tail+1": 4097, "ring": MIB, "ring+1": MIB + 1}
    jobs: dict[str, str] = {}
    with trio.fail_after(6 * LIMIT):
        async with serving(tmp_path, stderr_name="serve-0.err") as (serve, d):
            token, sid = await setup(d)
            for i, (name, size) in enumerate(sizes.items()):
                # (one "x" per byte past the first, and a first byte of its own: the start shows)
                command = f"printf S; head -c {size - 1} /dev/zero | tr '\\0' x; exec sleep 600"
                jobs[name] = await start_job(d, token, sid, f"r{i}", command)
                await d.wait_idle(token, sid)
            for name, job_id in jobs.items():
                async def printed(job_id: str = job_id, size: int = sizes[name]) -> bool:
                    r = await d.get(f"/sessions/{sid}/jobs/{job_id}", token)
                    return r.status_code == 200 and r.json()["outputBytes"] == size
                await wait_until(printed, what=f"all of job {name}'s output in memory")
            assert serve.proc is not None
            serve.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(LIMIT):
                code = await serve.proc.wait()
            assert code == 0, (tmp_path / "serve-0.err").read_text()[-2000:]

        events = [e for e in await _decode(tmp_path) if e["session_id"] == sid]
        finished = {e["body"]["job_id"]: e for e in events if e["kind"] == "job.finished"}
        stored = {e["body"]["artifact_id"]: e for e in events if e["kind"] == "artifact.stored"}
        for name, job_id in jobs.items():
            body = finished[job_id]["body"]
            assert body["status"] == "stopped" and len(body["output_tail"]) == 4096, (name, body)
            if name == "tail":
                assert body.get("output_artifact_id") is None  # (the tail holds it all: nothing saved)
                continue
            aid = body["output_artifact_id"]
            assert stored[aid]["body"]["source"] == "job_output" and stored[aid]["seq"] == finished[job_id]["seq"] - 1
            kept = min(sizes[name], MIB)
            assert stored[aid]["body"]["size"] == kept and body.get("output_dropped", 0) == sizes[name] - kept
            assert (tmp_path / "data" / "artifacts" / aid).stat().st_size == kept

        async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d2):
            for name, job_id in jobs.items():
                first, text = await _read_all(d2, token, sid, job_id)
                size = sizes[name]
                if name == "tail":
                    assert first["source"] == "tail" and text == "S" + "x" * (size - 1)
                    continue
                assert first["source"] == "saved", (name, first)
                dropped = size - min(size, MIB)
                assert first["droppedBefore"] == dropped and first["offset"] == dropped, (name, first)
                expected = ("S" + "x" * (size - 1))[dropped:]
                assert text == expected, (name, len(text), len(expected))
            assert await serve.terminate() == 0
        verify = await run_lens(tmp_path, "log", "verify", "--data", "data")
        assert verify.returncode == 0, verify.stdout + verify.stderr


# Three ways a command leaves processes behind: a background job of its shell (in its process
# group), a `setsid` one (a session and group of its own) and a daemonizing double fork (setsid,
# then its parent exits: re-parented). Each writes its pid once it runs.
ESCAPERS = ("sleep 1000 & echo $! > bg.pid; "
            "setsid sh -c 'echo $$ > setsid.pid; exec sleep 1000' >/dev/null 2>&1 </dev/null & "
            "(setsid sh -c 'echo $$ > forked.pid; exec sleep 1000' >/dev/null 2>&1 </dev/null &); "
            "echo started; exec sleep 1000")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_graceful_stop_ends_every_process_a_running_job_started(tmp_path: Path, sig: int):
    # What the job's stop and a command's timeout or cancel end (tests/daemon/test_jobs.py,
    # tests/executor/test_commands.py), the daemon's own stop ends too: the executor, stopping,
    # cancels the command, whose reaper (a child subreaper) ends its group and what left it.
    from tests.procfs import read_proc

    pids: dict[str, int] = {}
    with trio.fail_after(4 * LIMIT):
        try:
            async with serving(tmp_path, stderr_name="serve-0.err") as (serve, d):
                token, sid = await setup(d)
                ws = d.root / "workspaces" / "p"
                await start_job(d, token, sid, "r1", ESCAPERS)

                async def all_started() -> bool:
                    for name in ("bg", "setsid", "forked"):
                        text = (ws / f"{name}.pid").read_text() if (ws / f"{name}.pid").exists() else ""
                        if text.endswith("\n"):
                            pids[name] = int(text)
                    return len(pids) == 3

                await wait_until(all_started, what="the job's three processes running")
                assert serve.proc is not None
                serve.proc.send_signal(sig)
                with trio.fail_after(LIMIT):
                    code = await serve.proc.wait()
                assert code == 0, (tmp_path / "serve-0.err").read_text()[-2000:]

            async def all_gone() -> bool:
                return all((p := read_proc(pid)) is None or p.state in ("Z", "X") for pid in pids.values())

            await wait_until(all_gone, timeout=15, what=f"the job's processes {pids} ended with the daemon")
        finally:
            for pid in pids.values():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
