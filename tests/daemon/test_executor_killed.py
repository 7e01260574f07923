"""A project's local executor killed from outside a running ``lens serve`` (kill -9, the OOM
killer): what the operator reads on the daemon's standard error, and what the sessions see.

The job that ran in it ends ``crashed`` (`EXECUTOR_UNAVAILABLE`), the project's next call starts
another executor and runs. The daemon said nothing of the death itself: its log named the first
child's pid, then (at the next call) a new one, and the only hint was the new child's note of the
commands "left running by an earlier executor". It now says, once, which executor ended and how.
Real processes: ``lens serve`` on port 0 and its executor children."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import trio

from .conftest import LIMIT, run_tool, serving, wait_until
from .test_jobs import finished_of, setup, start_job

SPAWNED = re.compile(r"executor for project (\S+) on port \d+ \(pid (\d+)\)")


async def test_an_executor_killed_from_outside_is_named_in_the_log_and_replaced(tmp_path: Path):
    err = tmp_path / "serve-0.err"
    with trio.fail_after(4 * LIMIT):
        async with serving(tmp_path) as (serve, d):
            token, sid = await setup(d)
            job_id = await start_job(d, token, sid, "r1", "echo started; exec sleep 600")
            await d.wait_idle(token, sid)
            ((project, pid),) = SPAWNED.findall(err.read_text())
            os.kill(int(pid), signal.SIGKILL)

            expected = (f"WARNING lens.executors: executor for project {project} (pid {pid}) ended without Lens stopping it "
                        f"(killed by SIGKILL); the project's next call starts another")

            async def said() -> bool:
                return expected in err.read_text()

            await wait_until(said, what="the daemon's line on the killed executor")
            fin = await finished_of(d, token, sid, job_id)
            assert fin["body"]["status"] == "crashed"
            assert fin["body"]["reason"].startswith("EXECUTOR_UNAVAILABLE: ")

            result = await run_tool(d, token, sid, "r2", "run_command", {"command": "echo again"})
            assert not result["is_error"], result
            spawned = SPAWNED.findall(err.read_text())
            assert len(spawned) == 2 and spawned[1][0] == project and spawned[1][1] != pid, spawned
            assert await serve.terminate() == 0
    text = err.read_text()
    assert text.count("ended without Lens stopping it") == 1, text  # the pool's own stop of the second is not one
    assert "Traceback" not in text, text
