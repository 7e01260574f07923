"""A daemon killed outright (kill -9) leaves no MCP server running, also one that reads nothing.

An MCP server's standard input is the daemon's pipe: a server that reads it sees its end when the
daemon dies and exits. One that reads nothing at that moment (busy in a long computation, or
simply ignoring its input) ran on for good, re-parented to init with its parent
(``tools/reaper.py``), in a session of its own that no terminal's signal reaches. The reaper now
watches the daemon and ends the server (SIGTERM, then SIGKILL) once it is gone.

A real ``lens serve`` with the suite's stdio MCP server (``--deaf``: its ``deaf`` tool answers,
then reads nothing until a file appears, which never does), SIGKILLed; the server's pid comes
from its ``--pidfile``; the wait for its end is a bounded poll of ``/proc``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import trio

from tests.procfs import alive, read_proc

from ..mcp.conftest import SERVER
from .conftest import LIMIT, serving, wait_until


async def test_a_daemon_killed_outright_takes_an_mcp_server_that_reads_nothing_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({"mcpServers": {"t": {
        "command": sys.executable, "args": [SERVER, "--pidfile", str(pidfile), "--deaf"]}}}))
    pids: list[int] = []
    try:
        async with serving(tmp_path) as (serve, d):
            token = await d.pair("c", strong=True)
            sid = await d.new_session(token)
            await d.submit(token, sid, "r1", "/tool mcp__t__deaf " + json.dumps({"until": str(tmp_path / "never")}))
            await d.wait_idle(token, sid)
            assert any(e["kind"] == "tool.finished" and not e["body"].get("is_error")
                       for e in await d.events(token, sid))
            pids = [int(p) for p in pidfile.read_text().split()]
            server = read_proc(pids[0])
            assert server is not None and alive(pids[0])
            reaper = server.ppid
            pids.append(reaper)
            assert serve.proc is not None
            serve.proc.send_signal(signal.SIGKILL)
            await serve.proc.wait()

        async def gone() -> bool:
            return not any(alive(p) for p in pids)

        await wait_until(gone, 3 * LIMIT, "the MCP server and its parent gone after the daemon's kill -9")
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
                with trio.move_on_after(5):
                    while alive(pid):
                        await trio.sleep(0.02)  # (bounded: cleaning up after a failure)
