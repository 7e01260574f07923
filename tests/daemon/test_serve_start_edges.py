"""``lens serve`` at the edges of its start: a stop signal before its receiver is open, and the
one bind of its port.

Both hold the daemon at a named point of its start for a real reason: its standard output is a
pipe nobody reads yet, already full, so the daemon sleeps in the write of a start-up line (a
reader slower than the daemon, as `lens serve | slow-consumer`). The line it stops on tells where
it is: with no config file, the note "using built-in defaults", written before the port is bound
and the store opened; with a config of its own, the line naming the default model, written once
the store is open and before HTTP serves. The test waits until the kernel shows it asleep in that
write (``/proc/<pid>/wchan``), acts, then reads the pipe and lets it go on.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
from pathlib import Path

import httpx2
import pytest
import trio

from tests.procfs import blocked_writing_a_pipe, listening_ports

from .conftest import LIMIT, ServeProcess, lens_command, lock_is_free, run_lens, served_once, wait_until


def full_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) whose buffer is full: the next write to it blocks."""
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        while True:
            os.write(w, b"x" * 65536)
    except BlockingIOError:
        pass
    fcntl.fcntl(w, fcntl.F_SETFL, flags)  # (the flag is the open file's: the daemon shares it)
    return r, w


async def held_serve(cwd: Path, *args: str) -> tuple[trio.Process, trio.lowlevel.FdStream]:
    """``lens serve ARGS`` in ``cwd``, asleep in the write of its first start-up line; returns the
    process and the pipe's read end (reading it lets the daemon go on)."""
    if os.geteuid() != 0:  # (the daemon is not dumpable: its wait channel is root's to read)
        pytest.skip("reading lens serve's /proc/<pid>/wchan needs root")
    r, w = full_pipe()
    with open(cwd / "serve.err", "wb") as err:
        proc = await trio.lowlevel.open_process([*lens_command(), "serve", "--data", "data", *args], cwd=cwd,
                                                stdout=w, stderr=err)
    os.close(w)
    stream = trio.lowlevel.FdStream(r)

    async def asleep_in_write() -> bool:
        assert proc.returncode is None, (cwd / "serve.err").read_text()[-3000:]
        return blocked_writing_a_pipe(proc.pid)

    try:
        await wait_until(asleep_in_write, 30, "lens serve asleep writing its first line")
    except BaseException:
        proc.kill()
        await stream.aclose()
        raise
    return proc, stream


async def drained_lines(stream: trio.lowlevel.FdStream) -> list[str]:
    """What the daemon wrote past the filler, to the end of its standard output, as lines."""
    data = b""
    async for chunk in stream:
        data += chunk
    return data.lstrip(b"x").decode().splitlines()


async def stopped_by(proc: trio.Process, stream: trio.lowlevel.FdStream,
                     *signals: signal.Signals) -> tuple[list[str], int]:
    """Send ``signals`` to a held ``lens serve`` in turn; its output lines and exit status (the
    process is killed and the stream closed whatever happens)."""
    try:
        for sig in signals:
            proc.send_signal(sig)
        with trio.fail_after(30):
            lines = await drained_lines(stream)
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
        await stream.aclose()
    return lines, code


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
async def test_a_stop_signal_before_the_receiver_opens_stops_the_daemon_cleanly(tmp_path: Path, sig: signal.Signals):
    # The daemon's signal receiver opened once the store was open: a SIGTERM or SIGHUP before it
    # killed the process outright, a SIGINT was a KeyboardInterrupt traceback. Held here before
    # the port is bound and the store opened, it stops the daemon as a stop while it starts does.
    proc, stream = await held_serve(tmp_path, "--port", "0")
    lines, code = await stopped_by(proc, stream, sig)
    stderr = (tmp_path / "serve.err").read_text()
    assert code == 0 and "Traceback" not in stderr, (code, stderr[-3000:])
    assert "using built-in defaults" in lines[0] and lines[-1] == "lens: stopped", lines
    assert not any(line.startswith("lens: listening on") for line in lines), lines
    # the store was closed as at any stop: its log verifies, and the next start has it
    assert (await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)).returncode == 0


async def test_the_port_the_daemon_checks_is_the_port_it_serves(tmp_path: Path):
    # The port was checked by a bind that let its socket go, then bound again by the HTTP server
    # once the store was open: another process could take it in between, and the daemon failed
    # then (LISTEN_FAILED) after making its data directory. It is bound once now, and held.
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text("{}")  # (no note: the first line comes after the bind)
    proc, stream = await held_serve(tmp_path, "--port", "0")
    try:
        assert (tmp_path / "data" / "events.db").exists()  # the store is open: past the bind
        ports = listening_ports(proc.pid)
        assert len(ports) == 1, ports  # held all along, from the bind
        (port,) = ports
        intruder = socket.socket()
        with pytest.raises(OSError) as taken:
            intruder.bind(("127.0.0.1", port))  # another process cannot take it in between
        intruder.close()
        assert taken.value.errno == 98  # EADDRINUSE
        lines: list[str] = []

        async def read_lines() -> None:
            lines.extend(await drained_lines(stream))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_lines)
            async with httpx2.AsyncClient(timeout=LIMIT) as client:
                async def healthy() -> bool:
                    try:
                        return (await client.get(f"http://127.0.0.1:{port}/api/v1/health")).status_code == 200
                    except httpx2.TransportError:
                        return False

                await wait_until(healthy, 30, "the daemon serving on the port it held")
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
        await stream.aclose()
    assert code == 0, (tmp_path / "serve.err").read_text()[-3000:]
    assert f"lens: listening on http://127.0.0.1:{port}" in lines and lines[-1] == "lens: stopped", lines


async def test_a_port_in_use_is_refused_by_the_one_bind(tmp_path: Path):
    # The refusal comes from the bind itself, before anything is made on disk.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        out = await run_lens(tmp_path, "serve", "--port", str(port), "--data", "data", check=False)
    finally:
        taken.close()
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-1] == f"lens: LISTEN_FAILED: cannot listen on 127.0.0.1:{port} (Address already in use)"
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("second", [False, True], ids=["one signal", "two signals"])
@pytest.mark.parametrize("store_open", [False, True], ids=["before the store opens", "with the store open"])
async def test_stop_signals_while_the_daemon_starts_leave_nothing_behind(tmp_path: Path, store_open: bool,
                                                                       second: bool):
    # One signal while the daemon starts stops it as a stop while it serves does (exit 0); a
    # second one (SIGTERM after SIGINT: two kinds, so the kernel cannot merge them while the
    # daemon sleeps) makes it a stop now, with its line and exit 143. Either way: no traceback,
    # the store closed and its lock free, the log verifying, and a next start serving.
    if store_open:
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "lens.jsonc").write_text("{}")  # (held at a line written once the store is open)
    proc, stream = await held_serve(tmp_path, "--port", "0")
    opened = (tmp_path / "data" / "events.db").exists()
    lines, code = await stopped_by(proc, stream, signal.SIGINT, *([signal.SIGTERM] if second else []))
    assert opened == store_open
    stderr = (tmp_path / "serve.err").read_text()
    assert code == (128 + signal.SIGTERM if second else 0) and "Traceback" not in stderr, (code, stderr[-3000:])
    assert lines[-1] == "lens: stopped" and not any(line.startswith("lens: listening on") for line in lines), lines
    assert [line for line in lines if "again: stopping now" in line] == (
        ["lens: SIGTERM again: stopping now; requests, tool calls and model requests in progress are cut, "
         "executors and MCP servers killed; the event log still writes what it accepted (exit 143)"] if second else [])
    assert lock_is_free(tmp_path / "data")
    assert (await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)).returncode == 0
    async with served_once(ServeProcess(tmp_path, stderr_name="serve-1.err")):
        pass  # (it started: not STORE_LOCKED)
