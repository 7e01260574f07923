"""Commands against a real executor process: a command stopped (SIGSTOP) when its timeout or a
cancel ends it. The daemon-level checks of the same pass are in
``tests/daemon/test_commands_second_pass.py``."""

from __future__ import annotations

from runtime.executor_client import ExecutorClient

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
