"""Commands against a real executor process: a command stopped (SIGSTOP) when its timeout or a
cancel ends it. The daemon-level checks of the same pass are in
``tests/daemon/test_commands_second_pass.py``."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest
import trio

from runtime.executors import ExecutorPool
from tools.base import ToolResult
from tools.executor.server import MAX_RUNNING_COMMANDS

from runtime.executor_client import ExecutorClient, ExecutorToolError
from tools.command_output import StreamJoin, drain

from .conftest import tool_ctx
from .test_commands import collect
from .test_tools import CoreTools, core_and_pool  # noqa: F401  (a fixture)


async def test_a_stopped_command_gets_its_sigterm_at_its_timeout_not_only_the_sigkill(client: ExecutorClient) -> None:
    # A stopped process holds a SIGTERM pending until it is continued: the group is continued
    # after it, so the command's trap runs and it ends by the SIGTERM, not the SIGKILL 2 s on.
    out, _, ex = await collect(client, "trap 'echo trapped; exit 7' TERM; echo stopping; kill -STOP $$; echo resumed",
                               timeout_ms=2_000)  # (the shell must trap and print first: room for a loaded host)
    assert ex.timed_out, ex
    assert out == b"stopping\ntrapped\n" and ex.exit_code == 7, (out, ex)


async def test_what_a_command_prints_as_its_timeout_ends_it_is_kept(client: ExecutorClient) -> None:
    out, _, ex = await collect(client, "trap 'echo trapped; exit 7' TERM; echo waiting; sleep 30 & wait",
                               timeout_ms=2_000)  # (the shell must trap and print first: room for a loaded host)
    assert ex.timed_out, ex
    assert out == b"waiting\ntrapped\n" and ex.exit_code == 7, (out, ex)


async def test_a_slot_freed_by_a_command_that_ended_is_free_on_the_executor_too(client: ExecutorClient) -> None:
    # 15 of the 16 slots held; each command after that takes the last one. The client frees its
    # slot only once the executor has (the stream's own end), so the next command never finds the
    # executor still counting the one before: no refusal comes, so none needs sending again (a
    # job's start, whose attempt waits for the client's slot with no bound, included).
    refused: list[str] = []

    async def run_one(command: str, **kw: object) -> None:
        # (read as run_command and a job read a stream: up to the exit, then the block is left)
        try:
            async with client.run(command, **kw) as events:  # type: ignore[arg-type]
                assert await drain(events, StreamJoin(lambda _: None)) is not None
        except ExecutorToolError as exc:
            refused.append(exc.code)

    async def hold(task_status: trio.TaskStatus[None]) -> None:
        async with client.run("echo up; exec sleep 300") as events:
            async for ev in events:
                if isinstance(ev, Exception):
                    raise ev
                task_status.started()  # (its first output: the executor runs it)
                break
            await trio.sleep_forever()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(15):
                await nursery.start(hold)
            for _ in range(200):
                await run_one("true", slot_wait_s=30.0)
            await run_one("true")  # (as a job's start is sent: the client's slot waited for with no bound)
            nursery.cancel_scope.cancel()
    assert refused == [], refused


async def test_a_free_slot_is_taken_with_no_time_left_to_wait() -> None:
    # The last resend of a command comes with no slot wait left: a free slot is still taken, and
    # only with none free is it refused.
    slots = trio.CapacityLimiter(1)
    c = ExecutorClient("127.0.0.1:1", "unused", stream_limiter=slots)
    try:
        async with c._slot(0.0):
            assert slots.borrowed_tokens == 1
        assert slots.borrowed_tokens == 0  # (given back)
        other = object()
        slots.acquire_on_behalf_of_nowait(other)  # (another stream holds the only slot)
        with pytest.raises(ExecutorToolError) as refused:
            async with c._slot(0.0):
                pass
        assert refused.value.code == "TOO_MANY_COMMANDS"
        # (the client's own message says what it knows: the slots, the wait; run_command says more)
        assert "all 1 command streams" in refused.value.message and "within 0 s" in refused.value.message, \
            refused.value.message
        slots.release_on_behalf_of(other)
    finally:
        c.close()


@asynccontextmanager
async def every_slot_held(client: ExecutorClient) -> AsyncIterator[Callable[[], None]]:
    """All 16 of the executor's command slots held by ``client``'s streams while the block runs.
    (A slot an earlier test's stream held comes free once the executor has ended its command:
    a refusal is tried again.) Yields ``free_one()``, which leaves one of the streams: its
    command is ended and its slot comes free on the executor."""
    holding: list[trio.CancelScope] = []

    async def hold(task_status: trio.TaskStatus[None]) -> None:
        with trio.CancelScope() as scope:
            holding.append(scope)
            while True:
                async with client.run("echo up; exec sleep 300") as events:
                    async for ev in events:
                        if isinstance(ev, ExecutorToolError) and ev.code == "TOO_MANY_COMMANDS":
                            break
                        if isinstance(ev, Exception):
                            raise ev
                        task_status.started()  # (its first output: the executor runs it)
                        await trio.sleep_forever()
                await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        for _ in range(MAX_RUNNING_COMMANDS):
            await nursery.start(hold)
        yield lambda: holding.pop().cancel()
        nursery.cancel_scope.cancel()


def _says_what_happened(result: ToolResult, timeout_ms: int) -> None:
    assert result.is_error and result.error_code == "TOO_MANY_COMMANDS", result
    text = result.content[0].text  # type: ignore[union-attr]
    assert f"all {MAX_RUNNING_COMMANDS} command streams" in text and f"timeout of {timeout_ms} ms" in text \
        and "stop a job" in text, text


@pytest.mark.parametrize("holder", ["the client's count", "the executor"])
async def test_a_command_refused_for_the_slots_says_the_slots_its_timeout_and_what_to_do(
        core_and_pool: tuple[CoreTools, ExecutorPool], client: ExecutorClient, workspace: Path, holder: str) -> None:
    # "the client's count": Core's own client holds the slots, its count refuses the command.
    # "the executor": another client of the executor holds its slots: Core's count is free, the
    # executor refuses each time the command is sent, to the command's timeout.
    core, pool = core_and_pool
    (workspace / "ran.txt").unlink(missing_ok=True)
    with trio.fail_after(30):
        async with every_slot_held((await pool.get("p1")).client if holder == "the client's count" else client):
            _, result = await core.run("run_command", {"command": "echo ran > ran.txt", "timeout_ms": 300})
    _says_what_happened(result, 300)
    assert not (workspace / "ran.txt").exists()


async def test_a_command_the_executor_refuses_is_cancelled_at_once_between_its_resends(
        core_and_pool: tuple[CoreTools, ExecutorPool], client: ExecutorClient, workspace: Path) -> None:
    # Core's count is free, the executor refuses: run_command sends the command again every
    # SLOT_RETRY_S up to its timeout (10 min here). An abort (a cancel) in that loop ends it at
    # once, and nothing runs.
    core, pool = core_and_pool
    (workspace / "ran.txt").unlink(missing_ok=True)
    ours = (await pool.get("p1")).client
    ended: list[object] = []
    with trio.fail_after(30):
        async with every_slot_held(client):
            async with trio.open_nursery() as nursery:
                async def run() -> None:
                    ended.append(await core.run("run_command", {"command": "echo ran > ran.txt",
                                                                "timeout_ms": 600_000}))

                before = ours.used
                nursery.start_soon(run)
                while ours.used == before:  # (a refused attempt ended: the command is between resends)
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    assert ended == [], ended  # (cancelled, not ended by the refusal)
    assert not (workspace / "ran.txt").exists()


@asynccontextmanager
async def session_jobs(session_id: str) -> AsyncIterator[tuple[Any, Any]]:
    """A real :class:`SessionJobs` over a folded session (as the actor keeps it); the session's
    ``kinds`` lists the kinds of the events it was given, in order."""
    from runtime.jobs import SessionJobs

    from .test_cwd_judged import FoldedSession

    class RecordingSession(FoldedSession):
        def __init__(self, session_id: str) -> None:
            super().__init__(session_id)
            self.kinds: list[str] = []

        async def emit(self, scoped: Any, request_id: str | None = None, *, within: float | None = None) -> None:
            decided = list(scoped() if callable(scoped) else scoped)
            self.kinds += [type(s.event).__struct_config__.tag for s in decided]
            await super().emit(decided, request_id, within=within)

    session = RecordingSession(session_id)
    async with trio.open_nursery() as nursery:
        jobs = SessionJobs(session_id, emit=session.emit, state=lambda: session.state,
                           new_id=session.new_id, wake=lambda: None)
        jobs.attach(nursery)
        yield session, jobs
        nursery.cancel_scope.cancel()


async def _start_job(pool: ExecutorPool, jobs: Any, args: dict[str, Any]) -> str:
    from tools.jobs import job_tool

    ctx = tool_ctx(jobs.session_id, "call_1", "p1", jobs=jobs)
    res = await job_tool(pool).run({"action": "start", **args}, ctx)
    assert not res.is_error, res.content
    return res.structured_content["job_id"]  # type: ignore[index]


async def _ended(jobs: Any, session: Any, job_id: str) -> dict[str, Any]:
    while job_id in jobs.live:
        await jobs.live[job_id].done.wait()
    return jobs.describe(session.state.jobs[job_id])


async def _between_resends(pool: ExecutorPool, jobs: Any, command: str) -> str:
    """A job started while another client holds the executor's slots, once a refused attempt of
    its start has ended (the job is waiting to send it again); its id."""
    ours = (await pool.get("p1")).client
    job_id = await _start_job(pool, jobs, {"command": command})
    before = ours.used  # (the job's command is not sent yet: its task has not run)
    while ours.used == before:
        await trio.sleep(0.01)
    assert job_id in jobs.live
    return job_id


async def test_a_job_start_the_executor_refuses_for_its_slots_is_sent_again_until_one_frees(
        core_and_pool: tuple[CoreTools, ExecutorPool], client: ExecutorClient, workspace: Path) -> None:
    # Another client of the executor holds its slots: Core's count is free, the executor refuses
    # the job's command. It is sent again (as run_command's is) and runs once a slot frees.
    _, pool = core_and_pool
    (workspace / "job_ran.txt").unlink(missing_ok=True)
    with trio.fail_after(30):
        async with session_jobs("ses_job_slots") as (session, jobs):
            async with every_slot_held(client):
                job_id = await _between_resends(pool, jobs, "echo ran > job_ran.txt")
            ended = await _ended(jobs, session, job_id)
    assert ended["status"] == "exited" and ended["exit_code"] == 0, ended
    assert (workspace / "job_ran.txt").read_text() == "ran\n"


async def test_a_job_start_the_executor_keeps_refusing_ends_at_its_bound_saying_why(
        core_and_pool: tuple[CoreTools, ExecutorPool], client: ExecutorClient, workspace: Path) -> None:
    # The resends last the job's timeout when it is shorter than run_command's default wait.
    _, pool = core_and_pool
    (workspace / "job_ran.txt").unlink(missing_ok=True)
    with trio.fail_after(30):
        async with session_jobs("ses_job_slots_bound") as (session, jobs):
            async with every_slot_held(client):
                job_id = await _start_job(pool, jobs, {"command": "echo ran > job_ran.txt", "timeout_ms": 300})
                ended = await _ended(jobs, session, job_id)
    assert ended["status"] == "crashed", ended
    reason = ended["reason"]
    assert reason.startswith("TOO_MANY_COMMANDS: ") and f"all {MAX_RUNNING_COMMANDS} command streams" in reason \
        and "within 300 ms" in reason and "stop a job" in reason, reason
    assert not (workspace / "job_ran.txt").exists()


@asynccontextmanager
async def job_between_resends(core_and_pool: tuple[CoreTools, ExecutorPool], client: ExecutorClient,
                              workspace: Path, session_id: str) -> AsyncIterator[tuple[Any, Any, str]]:
    """A job (``echo ran > job_ran.txt``) of a session's :func:`session_jobs` waiting to send its
    start again while ``client`` holds every slot, as (session, jobs, job id); the block runs
    within 30 s, and nothing ran once it ends."""
    _, pool = core_and_pool
    (workspace / "job_ran.txt").unlink(missing_ok=True)
    with trio.fail_after(30):
        async with session_jobs(session_id) as (session, jobs):
            async with every_slot_held(client):
                yield session, jobs, await _between_resends(pool, jobs, "echo ran > job_ran.txt")
    assert not (workspace / "job_ran.txt").exists()


async def test_a_job_stopped_while_its_start_waits_to_be_sent_again_ends_at_once_reported(
        core_and_pool: tuple[CoreTools, ExecutorPool], client: ExecutorClient, workspace: Path) -> None:
    # The resends would go on for minutes (JOB_SLOT_RESEND_MS): a stop ends the wait at once,
    # the job is stopped (not crashed by a refusal) and its end is reported to the agent.
    async with job_between_resends(core_and_pool, client, workspace, "ses_job_resend_stop") as (session, jobs, job_id):
        with trio.fail_after(5):
            ended = await jobs.stop(job_id, "stopped by the agent")
    assert (ended["status"], ended["reason"]) == ("stopped", "stopped by the agent"), ended
    assert session.kinds[-2:] == ["input.submitted", "job.finished"], session.kinds


async def test_a_delete_while_a_jobs_start_waits_to_be_sent_again_ends_it_at_once_unreported(
        core_and_pool: tuple[CoreTools, ExecutorPool], client: ExecutorClient, workspace: Path) -> None:
    from runtime import decide as d

    async with job_between_resends(core_and_pool, client, workspace, "ses_job_resend_delete") as (session, jobs,
                                                                                                 job_id):
        with trio.fail_after(5):
            await jobs.stop_all(d.SESSION_DELETED, deleted=True)
        ended = jobs.describe(session.state.jobs[job_id])
    assert (ended["status"], ended["reason"]) == ("stopped", d.SESSION_DELETED), ended
    assert session.kinds[-1] == "job.finished" and "input.submitted" not in session.kinds, session.kinds
