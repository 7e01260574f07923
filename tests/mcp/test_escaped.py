"""The walk for a server's escaped children (``tools.mcp.escaped``) against real processes.

The walk runs in a worker thread while the event loop goes on, so the server could be reaped (and
its pid given to another process) before it ends: its findings are then dropped, never held.
Here the walk is held right after it read the child's ``/proc/<pid>/stat`` (which names the
server as its parent) while the test reaps the server, or does not.
"""

from __future__ import annotations

import builtins
import io
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
import trio

from tools.mcp.escaped import Escaped

from ..procfs import alive
from .conftest import LIMIT, wait_for

# A "server" that starts a child in a session of its own, prints its pid, and waits on stdin.
SERVER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL,
                         start_new_session=True)
print(child.pid, flush=True)
sys.stdin.read()
"""


async def walk_while(monkeypatch: pytest.MonkeyPatch, reap: bool) -> tuple[Escaped, int]:
    proc = await trio.lowlevel.open_process([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdin is not None
    child = 0
    try:
        with trio.fail_after(LIMIT):
            line = b""
            while not line.endswith(b"\n"):
                line += await proc.stdout.receive_some(100)
        child = int(line)
        real_open, started, let_go = builtins.open, threading.Event(), threading.Event()

        def held_open(file: Any, *args: Any, **kw: Any) -> Any:
            if file != f"/proc/{child}/stat":
                return real_open(file, *args, **kw)
            with real_open(file, *args, **kw) as f:
                read = f.read()  # (the child's parent read as the server, as the walk reads it)
            started.set()
            let_go.wait(timeout=LIMIT)
            return io.BytesIO(read)

        escaped = Escaped()
        monkeypatch.setattr(builtins, "open", held_open)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(escaped.add_from, proc.pid)
            await wait_for(started.is_set, "the walk started")
            if reap:  # the server ends and is reaped while the walk runs
                proc.send_signal(signal.SIGKILL)
                with trio.fail_after(LIMIT):
                    await proc.wait()
            let_go.set()
        monkeypatch.undo()
        return escaped, child
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.stdin.aclose()
        await proc.stdout.aclose()


async def test_a_walk_finds_the_child_that_left_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    escaped, child = await walk_while(monkeypatch, reap=False)
    try:
        assert len(escaped) == 1 and alive(child)
        escaped.signal(signal.SIGKILL)
        await wait_for(lambda: not alive(child), "the escaped child ended")
    finally:
        escaped.close()
        if alive(child):
            os.kill(child, signal.SIGKILL)


async def test_a_walk_during_which_the_server_was_reaped_holds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # (its pid could be another process's by the time the walk reads its children: dropped)
    escaped, child = await walk_while(monkeypatch, reap=True)
    try:
        assert len(escaped) == 0
    finally:
        escaped.close()
        if child and alive(child):
            os.kill(child, signal.SIGKILL)
