"""A daemon killed outright (kill -9) leaves no MCP server running, also one that reads nothing.

An MCP server's standard input is the daemon's pipe: a server that reads it sees its end when the
daemon dies and exits. One that reads nothing at that moment (busy in a long computation, or
simply ignoring its input) ran on for good, re-parented to init with its parent
(``tools/reaper.py``), in a session of its own that no terminal's signal reaches. The reaper now
watches the daemon and ends the server (SIGTERM, then SIGKILL) once it is gone.

A real ``lens serve`` with the suite's stdio MCP server (``--deaf``: its ``deaf`` tool answers,
then reads nothing until a file appears, which never does), SIGKILLed; the server's pid comes
from its ``--pidfile``; the wait for its end is a bounded poll of ``/proc``. Also a server that
ignores SIGTERM (the SIGKILL after the reaper's grace ends it), and a reaper whose parent was gone
before the reaper got to watch it (it is told the daemon's pid rather than reading its own parent's,
which by then is init's), and the reaper's usage.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.procfs import alive, processes, read_proc
from tools.mcp.client import REAPER

from ..mcp.conftest import SERVER
from .conftest import LIMIT, serving, wait_until


async def test_a_daemon_killed_outright_takes_an_mcp_server_that_reads_nothing_with_it(tmp_path: Path) -> None:
    await _killed_outright_takes_the_server(tmp_path, [])


async def test_a_daemon_killed_outright_takes_an_mcp_server_that_ignores_sigterm_with_it(tmp_path: Path) -> None:
    await _killed_outright_takes_the_server(tmp_path, ["--ignore-term"])


async def _killed_outright_takes_the_server(tmp_path: Path, flags: list[str]) -> None:
    pidfile = tmp_path / "pids"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({"mcpServers": {"t": {
        "command": sys.executable, "args": [SERVER, "--pidfile", str(pidfile), "--deaf", *flags]}}}))
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


# A parent that starts a reaper and is gone before the reaper watches it: it forks and exits at
# once; its child waits for that end (the parent's pidfd, or its pid already gone) and only then
# becomes the reaper (exec), told the parent's pid, as the daemon tells it its own. Its own
# parent is init's by then.
GONE_PARENT = """
import os, select, sys
reaper, status, *server = sys.argv[1:]
parent = os.getpid()
child = os.fork()
if child == 0:
    try:
        select.select([os.pidfd_open(parent)], [], [])
    except ProcessLookupError:  # (gone, and waited for, already)
        pass
    os.execv(sys.executable, [sys.executable, "-I", "-S", reaper, status, "0", f"same:{parent}", *server])
print(child, flush=True)
os._exit(0)
"""


async def test_a_reaper_whose_daemon_was_gone_before_it_watched_ends_the_server(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"  # (a path of this test's own: in the server's argv, to find it by)
    errors = tmp_path / "stderr"
    status_read, status_write = os.pipe()
    os.set_inheritable(status_write, True)
    # (the server's standard input is a pipe this test holds open: it sees no end there)
    with errors.open("wb") as fe:
        parent = subprocess.Popen(
            [sys.executable, "-c", GONE_PARENT, REAPER, str(status_write), sys.executable, SERVER,
             "--pidfile", str(pidfile), "--deaf"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fe, pass_fds=(status_write,))
    os.close(status_write)
    assert parent.stdout is not None and parent.stdin is not None

    def left() -> list[int]:  # (the reaper, once it runs, and the server)
        return [p.pid for p in processes() if str(pidfile).encode() in p.argv and p.state not in ("Z", "X")]

    try:
        reaper = int(parent.stdout.readline())
        assert parent.wait(timeout=LIMIT) == 0
        # The status pipe ends empty once the reaper has started the server (it would say an errno
        # if it could not); what failed before (the fork's child, the reaper) would say so on stderr.
        said = b""
        with trio.fail_after(LIMIT):
            async with trio.lowlevel.FdStream(status_read) as stream:
                while chunk := await stream.receive_some(64):
                    said += chunk
        assert said == b"" and errors.read_bytes() == b""

        async def gone() -> bool:
            return not alive(reaper) and not left()

        await wait_until(gone, 3 * LIMIT, "the reaper and its server gone, their daemon gone before the watch")
        assert errors.read_bytes() == b""
    finally:
        parent.stdin.close()
        parent.stdout.close()
        for pid in left():
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("group", ["same", "same:", "same:0", "same:x", "same:-3", "same:١", "own:", "own:-1",
                                   "own:nan", "own:inf", "other:1", ""])
def test_the_reaper_refuses_a_group_not_as_its_usage_says(tmp_path: Path, group: str) -> None:
    marker = tmp_path / "ran"
    r = subprocess.run([sys.executable, "-I", "-S", REAPER, "9", "0", group, "/bin/touch", str(marker)],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=LIMIT)
    assert r.returncode == 2
    assert r.stderr.decode().startswith("usage: reaper.py STATUS_FD HAD_LC_CTYPE GROUP ARGV...")
    assert "same:PARENT_PID" in r.stderr.decode() and b"Traceback" not in r.stderr
    assert not marker.exists()
