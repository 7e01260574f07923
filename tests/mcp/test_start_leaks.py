"""What an MCP server's start leaves behind when it fails before the server runs: nothing (the
status pipe the reaper reports on is closed whatever ended the start, not only an OSError)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import trio

from tools.mcp.client import Launch, McpError, open_connection

BOUND_S = 30.0


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


async def test_a_start_cancelled_at_open_process_leaves_no_descriptor(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cancel lands at open_process's first checkpoint (trio.to_thread's), before any child is
    # made: the status pipe's read end, opened just before, was left open (only an OSError of the
    # start closed it).
    real_open = trio.lowlevel.open_process
    scope = trio.CancelScope()

    async def cancelled_meanwhile(*args: Any, **kwargs: Any) -> trio.Process:
        scope.cancel()
        return await real_open(*args, **kwargs)

    monkeypatch.setattr(trio.lowlevel, "open_process", cancelled_meanwhile)
    before = open_fds()
    with trio.fail_after(BOUND_S):
        with scope:
            async with open_connection(Launch([sys.executable, "-c", "pass"], dict(os.environ)), startup_timeout=5):
                pytest.fail("the start was cancelled: no connection")
    assert scope.cancelled_caught
    assert open_fds() - before == set()


async def test_a_start_that_fails_as_a_defect_leaves_no_descriptor_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    async def defect(*args: Any, **kwargs: Any) -> trio.Process:
        raise TypeError("a slip of ours")

    monkeypatch.setattr(trio.lowlevel, "open_process", defect)
    before = open_fds()
    with trio.fail_after(BOUND_S), pytest.raises(TypeError, match="a slip of ours"):
        async with open_connection(Launch([sys.executable, "-c", "pass"], dict(os.environ)), startup_timeout=5):
            pytest.fail("no connection")
    assert open_fds() - before == set()


async def test_a_command_that_cannot_be_started_is_still_mcp_start_failed(tmp_path: Any) -> None:
    before = open_fds()
    missing = str(tmp_path / "nowhere")
    with trio.fail_after(BOUND_S), pytest.raises(McpError) as caught:
        async with open_connection(Launch([sys.executable], dict(os.environ), cwd=missing), startup_timeout=5):
            pytest.fail("no connection")
    assert caught.value.code == "MCP_START_FAILED" and "working directory" in caught.value.message
    assert open_fds() - before == set()
