"""A second pass over the file tools and the executor's commands (F-EXE-2..9) as a client sees
them: every call crosses the real ``lens executor serve`` over gRPC (or the Core tools over it).

What ``test_file_tools_acceptance.py``, ``test_commands_acceptance.py`` and the rest of
tests/executor and tests/files pin is not repeated; these are the edges they left: a command's
``timeout_ms`` and ``max_output_bytes`` past their bounds at the gRPC contract, the output cap at
exactly the bytes sent (two streams together), ``read_file`` with both selections, lone ``\\r``
and a directory of 10,000 entries paged to its end, devices, a ``replace_all`` whose matches
overlap, ``patch_file`` at the end of a file without a final newline, and ``revert_call`` of an
edit a later call built on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from events import types as t
from proto import executor_pb2 as pb
from runtime.executor_client import ExecutorClient, ExecutorToolError
from runtime.executors import RemoteExecutor
from tools.artifacts import ArtifactStore
from tools.executor.commands import MAX_OUTPUT, MAX_TIMEOUT_MS
from tools.workspace_tools import workspace_tools

from .conftest import ExecutorProcess, running_pool
from .test_tools import CoreTools, core, fails, sub  # noqa: F401  (core and sub are fixtures)

BOUND_S = 20


async def run_to_end(client: ExecutorClient, command: str, **kw: object) -> tuple[bytes, bytes, pb.CommandExit]:
    out, err, end = bytearray(), bytearray(), None
    with trio.fail_after(BOUND_S):
        async with client.run(command, **kw) as events:  # type: ignore[arg-type]
            async for ev in events:
                if isinstance(ev, Exception):
                    raise ev
                which = ev.WhichOneof("event")
                if which == "stdout":
                    out += ev.stdout
                elif which == "stderr":
                    err += ev.stderr
                else:
                    end = ev.exit
    assert end is not None, "no exit event"
    return bytes(out), bytes(err), end


# ---------------------------------------------------------------------------- F-EXE-7 commands


@pytest.mark.parametrize("field, value, says", [
    ("timeout_ms", MAX_TIMEOUT_MS + 1, f"timeout_ms {MAX_TIMEOUT_MS + 1} is past the most, {MAX_TIMEOUT_MS}"),
    ("timeout_ms", 2**32 - 1, f"timeout_ms {2**32 - 1} is past the most, {MAX_TIMEOUT_MS}"),
    ("max_output_bytes", MAX_OUTPUT + 1, f"max_output_bytes {MAX_OUTPUT + 1} is past the most, {MAX_OUTPUT}"),
])
async def test_a_command_bound_past_its_most_is_refused_and_nothing_runs(client: ExecutorClient, workspace: Path,
                                                                         sub: str, field: str, value: int,
                                                                         says: str) -> None:
    # docs/executor.md: timeout_ms "at most 3 600 000", max_output_bytes "at most 16 MiB". The
    # executor took more and quietly ran the command under the bound instead: a client asking
    # for a two-hour timeout had its command killed after one, told nothing but "timed out".
    marker = workspace / sub / "ran"
    err = await fails("INVALID_ARGUMENT", run_to_end(client, "touch ran", cwd=sub, **{field: value}))
    assert says in str(err), str(err)
    assert not marker.exists()


async def test_a_command_bound_at_its_most_runs(client: ExecutorClient, workspace: Path, sub: str) -> None:
    out, err, end = await run_to_end(client, "printf ok", cwd=sub, timeout_ms=MAX_TIMEOUT_MS,
                                     max_output_bytes=MAX_OUTPUT)
    assert (out, err, end.exit_code, end.timed_out, end.truncated) == (b"ok", b"", 0, False, False)


async def test_the_output_cap_counts_both_streams_and_exactly_the_cap_is_not_truncated(client: ExecutorClient
                                                                                       ) -> None:
    out, err, end = await run_to_end(client, "printf 01234; printf 56789 >&2", max_output_bytes=10)
    assert (out, err, end.truncated) == (b"01234", b"56789", False)
    out, err, end = await run_to_end(client, "printf 01234; printf 56789 >&2; printf x", max_output_bytes=10)
    assert (len(out) + len(err), end.truncated, end.exit_code) == (10, True, 0)
