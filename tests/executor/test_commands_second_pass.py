"""Commands against a real executor process: a command stopped (SIGSTOP) when its timeout or a
cancel ends it. The daemon-level checks of the same pass are in
``tests/daemon/test_commands_second_pass.py``."""

from __future__ import annotations

import pytest
import trio

from runtime.executor_client import ExecutorClient, ExecutorToolError
from tools.command_output import StreamJoin, drain

from .test_commands import collect


async def test_a_stopped_command_gets_its_sigterm_at_its_timeout_not_only_the_sigkill(client: ExecutorClient) -> None:
    # A stopped process holds a SIGTERM pending until it is continued: the group is continued
    # after it, so the command's trap runs and it ends by the SIGTERM, not the SIGKILL 2 s on.
    out, _, ex = await collect(client, "trap 'echo trapped; exit 7' TERM; echo stopping; kill -STOP $$; echo resumed",
                               timeout_ms=500)
    assert ex.timed_out, ex
    assert out == b"stopping\ntrapped\n" and ex.exit_code == 7, (out, ex)



async def test_what_a_command_prints_as_its_timeout_ends_it_is_kept(client: ExecutorClient) -> None:
    out, _, ex = await collect(client, "trap 'echo trapped; exit 7' TERM; echo waiting; sleep 30 & wait",
                               timeout_ms=500)
    assert ex.timed_out, ex
    assert out == b"waiting\ntrapped\n" and ex.exit_code == 7, (out, ex)


async def test_a_slot_freed_by_a_command_that_ended_is_free_on_the_executor_too(client: ExecutorClient) -> None:
    # 15 of the 16 slots held; each command after that takes the last one. The client frees its
    # slot only once the executor has (the stream's own end), so the next command, or a job's
    # start (which is not sent again), never finds the executor still counting the one before.
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
            await run_one("true")  # (as a job starts: the client's slot waited for, no resend)
            nursery.cancel_scope.cancel()
    assert refused == [], refused


async def test_a_free_slot_is_taken_with_no_time_left_to_wait() -> None:
    # The last resend of a command comes with no slot wait left: a free slot is still taken, and
    # only with none free is it refused.
    slots = trio.CapacityLimiter(1)
    c = ExecutorClient("127.0.0.1:1", "unused", stream_limiter=slots)
    try:
        async with c._slot(0.0, 1000):
            assert slots.borrowed_tokens == 1
        assert slots.borrowed_tokens == 0  # (given back)
        other = object()
        slots.acquire_on_behalf_of_nowait(other)  # (another stream holds the only slot)
        with pytest.raises(ExecutorToolError) as refused:
            async with c._slot(0.0, 1000):
                pass
        assert refused.value.code == "TOO_MANY_COMMANDS"
        slots.release_on_behalf_of(other)
    finally:
        c.close()
