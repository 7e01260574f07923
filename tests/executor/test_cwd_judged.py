"""A command's cwd judged by the workspace allowlist starts the command there or nowhere.

Core judges where a ``cwd`` leads (``resolve``) and then starts the command (``Run``): two calls.
Core reaches the module's real executor process through a gRPC relay
(``tests/executor/relay.py``) that swaps the directory for a symlink exactly between them, so
the race is forced on every run: for ``run_command`` and for ``job start``, whose command runs
in a real :class:`runtime.jobs.SessionJobs` (its decisions folded by the session reducer).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence

import pytest
import trio

from events.reader import StoredEvent
from projections.session_state import SessionState, apply
from proto import executor_pb2 as pb
from runtime import decide as d
from runtime.jobs import SessionJobs
from tools.jobs import job_tool

from .conftest import ExecutorProcess, tool_ctx
from .relay import Relay
from .test_tools import CoreTools, core_tools


@dataclasses.dataclass
class Relayed:
    core: CoreTools
    seen: list[str]  # the cwd_leads_to of each Run, as the relay passed it on
    pool: Any


@pytest.fixture
async def swapping(executor: ExecutorProcess, tmp_path: Path) -> AsyncIterator[Relayed]:
    base = executor.workspace / "judged"
    if (base / "src").is_symlink():  # (the executor and its workspace outlive one test: as it was)
        (base / "src").unlink()
        (base / "src.old").rename(base / "src")
    for left in base.glob("*/ran_here"):
        left.unlink()
    (base / "src").mkdir(parents=True, exist_ok=True)
    (base / "secrets").mkdir(exist_ok=True)
    seen: list[str] = []

    def swap(req: pb.CommandRequest) -> None:  # (in the relay's thread, before Run is passed on)
        seen.append(req.cwd_leads_to)
        if (base / "src").is_dir() and not (base / "src").is_symlink():
            (base / "src").rename(base / "src.old")
            (base / "src").symlink_to("secrets")

    with Relay(executor.address, before_run=swap) as relay:
        async with core_tools(executor, tmp_path, address=relay.address) as (core, pool):
            yield Relayed(core, seen, pool)


async def test_a_cwd_swapped_after_the_allowlist_judged_it_is_not_entered(
        swapping: Relayed, workspace: Path) -> None:
    core, seen = swapping.core, swapping.seen
    _, res = await core.run("run_command", {"command": "touch ran_here", "cwd": "judged/src"},
                            allowlist=["judged/src"])
    assert res.is_error and res.error_code == "CWD_MOVED", res.content
    assert seen == ["judged/src"]
    assert not (workspace / "judged" / "secrets" / "ran_here").exists()
    assert not (workspace / "judged" / "src.old" / "ran_here").exists()
    # without an allowlist nothing was judged, and the command starts where the cwd leads
    _, res = await core.run("run_command", {"command": "pwd -P", "cwd": "judged/src"})
    assert not res.is_error and seen[-1] == ""


class FoldedSession:
    """A session's state as its actor keeps it: what :class:`SessionJobs` decides is folded
    by the session reducer (``apply``), numbered as the log would number it."""

    def __init__(self, session_id: str) -> None:
        self.state = SessionState(session_id, project_id="p1", created=True)
        self._seq = itertools.count(1)
        self._ids = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    async def emit(self, scoped: Sequence[d.Scoped] | Callable[[], Sequence[d.Scoped]],
                   request_id: str | None = None, *, within: float | None = None) -> None:
        for i, s in enumerate(scoped() if callable(scoped) else scoped):
            seq = next(self._seq)
            kind = type(s.event).__struct_config__.tag
            apply(self.state, StoredEvent(seq, 0, "p1", self.state.session_id, seq, s.agent_id, s.task_id, kind,
                                          request_id if i == 0 else None, s.event))


async def test_a_jobs_cwd_swapped_after_the_allowlist_judged_it_is_not_entered(
        swapping: Relayed, workspace: Path) -> None:
    # job start goes through the same check as run_command; its command starts later, in the
    # session's nursery, so the refusal is the job's end (its reason), not the call's error.
    session = FoldedSession("ses_job_cwd")
    job = job_tool(swapping.pool)
    async with trio.open_nursery() as nursery:
        jobs = SessionJobs(session.state.session_id, emit=session.emit, state=lambda: session.state,
                           new_id=session.new_id, wake=lambda: None)
        jobs.attach(nursery)

        async def start(call_id: str, allowlist: list[str] | None) -> dict[str, Any]:
            ctx = tool_ctx(session.state.session_id, call_id, "p1", workspace_allowlist=allowlist, jobs=jobs)
            res = await job.run({"action": "start", "command": "touch ran_here", "cwd": "judged/src"}, ctx)
            assert not res.is_error, res.content
            job_id = res.structured_content["job_id"]
            with trio.fail_after(30):
                while job_id in jobs.live:
                    await jobs.live[job_id].done.wait()
            return jobs.describe(session.state.jobs[job_id])

        ended = await start("call_1", ["judged/src"])
        assert ended["status"] == "crashed" and ended["reason"].startswith("CWD_MOVED: "), ended
        assert "the command was not started" in ended["reason"]
        assert swapping.seen == ["judged/src"]
        assert not (workspace / "judged" / "secrets" / "ran_here").exists()
        assert not (workspace / "judged" / "src.old" / "ran_here").exists()
        # without an allowlist nothing was judged, and the job runs where the cwd leads now
        ended = await start("call_2", None)
        assert ended["status"] == "exited" and ended["exit_code"] == 0, ended
        assert swapping.seen[-1] == "" and (workspace / "judged" / "secrets" / "ran_here").exists()
