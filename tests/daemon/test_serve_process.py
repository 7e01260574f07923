"""F-API-1: ``lens serve`` as a real process: start-up lines, health, SIGTERM, restart, durability.

The daemon runs in a temporary working directory with no config file (built-in defaults), on
port 0 with a relative ``--data`` directory. A strong client pairs through the public route and
the real ``lens pair approve``; an SSE stream is open when SIGTERM arrives.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import trio

from events import types as t
from events.store import Draft, EventStore
from tests.procfs import processes

from .conftest import (LIMIT, ServeProcess, lens_command, run_lens, served_once, serving, stopped_listening,
                       wait_until)
from .conftest import as_daemon  # noqa: F401  (other modules of the suite import it and ServeProcess from here)


async def test_lens_serve_process_start_sigterm_restart(tmp_path: Path):
    cwd = tmp_path
    async with serving(cwd) as (first, d):
        assert d.url.startswith("http://127.0.0.1:") and not d.url.endswith(":0")
        assert any("using built-in defaults" in line for line in first.lines), first.lines
        r = await d.get("/health")
        assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["lastSeq"] == 0
        token = await d.pair("proc-client", strong=True, via="cli")
        project = await d.project(token, "p")
        sid = (await d.session(token, project["id"]))["id"]
        acks = [(await d.submit(token, sid, f"r{i}", f"message {i}"))["seq"] for i in range(3)]
        await d.wait_idle(token, sid)
        before = await d.events(token, sid)
        last_seq = (await d.get("/health")).json()["lastSeq"]
        assert set(acks) <= {e["seq"] for e in before}
        async with d.sse(token, last_event_id=0) as stream:
            await stream.until(lambda m: m.id == last_seq)
            start = trio.current_time()
            first.proc.send_signal(signal.SIGTERM)
            end = await stream.until(lambda m: m.event == "stream.end", timeout=5.0)
            assert end.json() == {"reason": "shutdown", "lastEventId": last_seq}
            assert await stream.to_end(timeout=5.0) == []  # a clean end of the response
        with trio.fail_after(8):
            code = await first.proc.wait()
            await first.stdout_closed.wait()
        assert code == 0, (cwd / "serve-0.err").read_text()[-2000:]
        assert trio.current_time() - start < 4.0, "shutdown was not prompt"
        assert first.lines[-1] == "lens: stopped"

    # after a restart every acknowledged event is still there
    async with serving(cwd) as (second, d):
        assert any(f"{last_seq} event(s)" in line for line in second.lines), second.lines
        assert (await d.get("/health")).json()["lastSeq"] == last_seq
        assert await d.events(token, sid) == before  # the credential survives too
        view = await d.view(token, sid)
        assert [it["text"] for it in view["items"] if it["role"] == "user"] == [f"message {i}" for i in range(3)]
        assert await second.terminate() == 0
    out = await run_lens(cwd, "log", "verify", "--data", "data")
    assert out.returncode == 0
    decoded = await run_lens(cwd, "log", "decode", "--data", "data")
    assert len(decoded.stdout.splitlines()) == last_seq


async def test_lens_serve_refuses_a_bad_config_cleanly(tmp_path: Path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text('{"server": {"port": "not a port"}}')
    out = await run_lens(tmp_path, "serve", "--port", "0", check=False)
    assert out.returncode != 0
    assert "CONFIG_INVALID" in out.stderr and "Traceback" not in out.stderr


async def test_lens_serve_refuses_a_bad_faux_script_cleanly(tmp_path: Path):
    # A faux script with a misspelt key, or a negative delay, was a msgspec traceback at start
    # (or a ValueError on every request).
    (tmp_path / "config").mkdir()
    for turn, words in [({"txt": "hi"}, "provider 'demo': script: Object contains unknown field `txt` - at `script[0]` "
                                        '(did you mean "text"?)'),
                        ({"text": "hi", "delayMs": -1}, "Expected `int` >= 0 - at `script[0].delayMs`"),
                        # (stopDetails on a turn not refused was taken and dropped without a word)
                        ({"text": "hi", "stopReason": "max_tokens", "stopDetails": {"category": "cyber"}},
                         "stopDetails says why a refusal was refused, and this turn has stopReason 'max_tokens': "
                         "give stopReason 'refusal' with it, or leave stopDetails out - at `script[0]`"),
                        ({"text": "hi", "stopDetails": {"explanation": "no"}}, "this turn has no stopReason"),
                        # (any text was taken, and recorded as a model.failed code no client knows)
                        ({"error": {"code": "weird code"}}, "Invalid enum value 'weird code' - at `script[0].error.code`")]:
        (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(
            {"providers": [{"id": "demo", "protocol": "faux", "script": [turn]}]}))
        out = await run_lens(tmp_path, "serve", "--port", "0", check=False)
        assert out.returncode == 2, out.stderr
        assert "CONFIG_INVALID" in out.stderr and words in out.stderr and "Traceback" not in out.stderr, out.stderr


async def test_lens_serve_names_an_address_it_cannot_listen_on(tmp_path: Path):
    # A port another socket holds, an address this machine does not have, a name that does not
    # resolve: `lens: LISTEN_FAILED: …`, exit 2, no traceback (it was a tree of exception groups),
    # and no data directory made (an initialised one was left wherever --data pointed).
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        for i, (host, port_arg, reason) in enumerate([("127.0.0.1", str(port), "in use"),
                                                      ("192.0.2.1", "0", "Cannot assign requested address"),
                                                      ("no-such-host.invalid", "0", "")]):
            out = await run_lens(tmp_path, "serve", "--host", host, "--port", port_arg, "--data", f"data{i}",
                                 check=False)
            assert out.returncode == 2, out.stderr
            assert f"lens: LISTEN_FAILED: cannot listen on {host}:{port_arg}" in out.stderr, out.stderr
            assert reason in out.stderr and "Traceback" not in out.stderr, out.stderr
            assert not (tmp_path / f"data{i}").exists(), out.stderr
    finally:
        taken.close()


async def test_a_second_lens_serve_of_the_same_daemon_is_told_the_data_directory_is_in_use(tmp_path: Path):
    # Started twice as it was (same data directory, same port): the data directory is the cause
    # to name, not the port it also cannot have; on another port, the same. A port another
    # program holds is LISTEN_FAILED, without a data directory made (the test above).
    async with served_once(ServeProcess(tmp_path)) as url:
        port = url.rsplit(":", 1)[1]
        for port_arg in (port, "0"):
            out = await run_lens(tmp_path, "serve", "--port", port_arg, "--data", "data", check=False)
            assert out.returncode == 2, out.stderr
            assert out.stderr.splitlines()[-1] == ("lens: STORE_LOCKED: data directory data is in use by another "
                                                   "Lens process; stop it or choose another --data directory"), \
                out.stderr


async def test_lens_serve_holds_its_flags_to_the_configs_checks(tmp_path: Path):
    # A port past 65535 was a traceback from bind() (after the data directory was made); an
    # empty --host bound every interface, an empty --data made the working directory the log.
    for args, words in [(["--port", "65536"], "--port must be 0 to 65535, not 65536"),
                        (["--port", "-1"], "--port must be 0 to 65535, not -1"),
                        (["--host", ""], "--host '' is not an IP address or host name"),
                        (["--data", ""], "--data must be a non-empty path"),
                        (["--model", "nope"], "--model must be '<provider id>/<model id>'")]:
        out = await run_lens(tmp_path, "serve", *args, check=False)
        assert out.returncode == 2, (args, out.stderr)
        assert words in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # refused before anything was made
    # A --model no provider serves (a typo, most likely) is refused too, before serving.
    out = await run_lens(tmp_path, "serve", "--port", "0", "--model", "zzz/x", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "lens: MODEL_UNKNOWN: no provider 'zzz' is configured" in out.stderr, out.stderr


def projected_positions(data: Path) -> list[int]:
    """The projections' positions in ``data/projections.db`` (none while it is not made yet)."""
    try:
        con = sqlite3.connect(f"file:{data / 'projections.db'}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return []
    try:
        return [seq for (seq,) in con.execute("SELECT seq FROM positions")]
    except sqlite3.OperationalError:  # (the table is not made yet)
        return []
    finally:
        con.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_a_signal_during_start_up_stops_the_daemon_cleanly(tmp_path: Path, sig: signal.Signals):
    # The projections' first catch-up refolds the whole log when projections.db is new (after an
    # upgrade that changes a projection, a minute for a large log), before the daemon listens.
    # SIGINT then was a traceback and exit 1 once that catch-up was done; SIGTERM killed it.
    events = 30_000
    store = EventStore.open(tmp_path / "data")
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            for i in range(events // 1000):
                await store.append(*[Draft(t.ProjectCreated(name=f"p{i}.{k}", workspace=f"/srv/p{i}.{k}"),
                                           project_id=f"prj_{i}_{k}") for k in range(1000)])
            store.close_writer()
    finally:
        store.close()
    with open(tmp_path / "serve.err", "wb") as err:
        proc = await trio.lowlevel.open_process([*lens_command(), "serve", "--port", "0", "--data", "data"],
                                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=err)
        try:
            async def folding() -> bool:  # a first chunk of the refold is committed, the rest to come
                return any(0 < seq < events for seq in await trio.to_thread.run_sync(projected_positions,
                                                                                     tmp_path / "data"))

            await wait_until(folding, 30, "the start-up catch-up under way")
            proc.send_signal(sig)
            with trio.fail_after(30):
                assert proc.stdout is not None
                out = b"".join([chunk async for chunk in proc.stdout]).decode()
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
    stderr = (tmp_path / "serve.err").read_text()
    assert code == 0 and "Traceback" not in stderr, (code, stderr[-3000:])
    assert out.splitlines()[-1] == "lens: stopped", out
    # the catch-up ended at the end of a chunk, without refolding the rest of the log first
    assert max(projected_positions(tmp_path / "data")) < events
    # what the catch-up committed stays; the next start goes on from there and serves
    async with served_once(ServeProcess(tmp_path)):
        pass
    assert set(projected_positions(tmp_path / "data")) == {events}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_a_second_signal_cuts_the_shutdowns_wait_short(tmp_path: Path, sig: signal.Signals):
    # A request in progress holds the shutdown up to its grace period (5 s). A second signal
    # meanwhile (a second Ctrl-C: stop now) was a traceback and exit 1 (SIGINT) or a kill
    # (SIGTERM); it now ends the wait: the request's connection is reset, the daemon stops.
    daemon = ServeProcess(tmp_path)
    async with trio.open_nursery() as nursery:
        try:
            url = await daemon.run(nursery)
            port = int(url.rsplit(":", 1)[1])
            with trio.fail_after(LIMIT):
                stalled = await trio.open_tcp_stream("127.0.0.1", port)
                # The handler reads the body, so hypercorn answers "100 Continue": the request is
                # in progress; the body never comes.
                await stalled.send_all(f"POST /api/v1/pair/requests HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                       f"Expect: 100-continue\r\nContent-Length: 100\r\n\r\n".encode())
                assert (await stalled.receive_some(1024)).startswith(b"HTTP/1.1 100 ")
            assert daemon.proc is not None
            daemon.proc.send_signal(sig)
            await stopped_listening(port)  # the shutdown has begun (and waits for the request)
            daemon.proc.send_signal(sig)
            with trio.fail_after(LIMIT):
                code = await daemon.proc.wait()
                await daemon.stdout_closed.wait()
                try:
                    assert await stalled.receive_some(1024) == b""
                except trio.BrokenResourceError:
                    pass  # (reset)
            await stalled.aclose()
            daemon.stderr.close()
            stderr = (tmp_path / "serve-0.err").read_text()
            assert code == 128 + sig and "Traceback" not in stderr, (code, stderr[-3000:])
            assert "1 request(s) still in progress" in stderr and daemon.lines[-1] == "lens: stopped"
        finally:
            daemon.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_a_second_signal_while_the_services_stop_is_the_daemons(tmp_path: Path, sig: signal.Signals):
    # Once the services were cancelled, the signal receiver was gone with them, yet stopping them
    # can take seconds: an MCP server that outlives its closed stdin and SIGTERM is waited for
    # (1 s, then 2 s) before it is killed. A second Ctrl-C then was a traceback, a second SIGTERM
    # a kill, the store's last drain skipped. The server here says when its SIGTERM came.
    stopping = tmp_path / "mcp-got-sigterm"
    server = Path(__file__).resolve().parents[1] / "mcp" / "server.py"
    pidfile = tmp_path / "mcp-shell"  # (the shell's pid: its group is found from it)
    script = (f'echo $$ > {pidfile}; trap "touch {stopping}" TERM; "{sys.executable}" "{server}"; '
              f'while :; do sleep 0.05; done')
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(
        {"mcpServers": {"stubborn": {"command": "sh", "args": ["-c", script]}}}))
    daemon = ServeProcess(tmp_path)
    group: int | None = None
    async with trio.open_nursery() as nursery:
        try:
            await daemon.run(nursery)
            assert daemon.proc is not None

            async def server_group() -> int | None:
                text = pidfile.read_text().strip() if pidfile.exists() else ""
                return os.getpgid(int(text)) if text.isdigit() else None

            # The server's shell runs in its reaper's process group (tools.reaper, `same`), which
            # the daemon signals: that group, not one named by the shell's pid (which leads none).
            group = await wait_until(server_group, LIMIT, "the MCP server's process group")
            daemon.proc.send_signal(sig)

            async def services_stopping() -> bool:
                return stopping.exists()

            async def group_gone() -> bool:
                try:
                    os.killpg(group, 0)
                except ProcessLookupError:
                    return True
                return False

            def group_ended() -> bool:  # (its processes dead: reaped or not, which waits on their parents)
                return not any(p.pgrp == group and p.state not in ("Z", "X") for p in processes())

            await wait_until(services_stopping, LIMIT, "the MCP server's SIGTERM")
            assert not await trio.to_thread.run_sync(group_ended)  # (held: its SIGTERM is given 2 s)
            daemon.proc.send_signal(sig)
            second = trio.current_time()
            # A stop now: the server's group is killed at once, not after the 2 s its SIGTERM is
            # given. Timed to the group's end, the step the stop now cuts short, not to the
            # process's exit, which a loaded machine stretches (the store's drain, the
            # interpreter's end: measured past 1.5 s).
            await wait_until(lambda: trio.to_thread.run_sync(group_ended), LIMIT, "the MCP server's process group ended")
            took = trio.current_time() - second
            with trio.fail_after(LIMIT):
                code = await daemon.proc.wait()
                await daemon.stdout_closed.wait()
            daemon.stderr.close()
            stderr = (tmp_path / "serve-0.err").read_text()
            assert code == 128 + sig and "Traceback" not in stderr, (code, stderr[-3000:])
            assert daemon.lines[-1] == "lens: stopped"
            assert took < 1.5, (took, daemon.lines)
            await wait_until(group_gone, LIMIT, "the MCP server's process group gone")  # (reaped too)
        finally:
            daemon.kill()
            if group is not None:  # (it ignores SIGTERM: killed whatever happened)
                try:
                    os.killpg(group, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # (the daemon stopped it, as it should)


async def test_a_reader_of_standard_output_that_goes_away_does_not_stop_the_daemon(tmp_path: Path):
    # `lens serve | head -n 1`: the daemon's next line met a broken pipe, and it exited 0 before
    # serving, saying nothing. Its lines now go nowhere, and it serves.
    proc = await trio.lowlevel.open_process([*lens_command(), "serve", "--port", "0", "--data", "data"], cwd=tmp_path,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        await proc.stdout.aclose()  # the reader goes away before the first line
        err = b""
        with trio.fail_after(30):
            while not (m := re.search(rb"Running on (http://\S+)", err)):
                chunk = await proc.stderr.receive_some(4096)
                assert chunk, (proc.returncode, err.decode())  # it stopped instead of serving
                err += chunk
        async with httpx2.AsyncClient(base_url=m.group(1).decode(), timeout=LIMIT) as client:
            assert (await client.get("/api/v1/health")).status_code == 200
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(LIMIT):
            err += b"".join([chunk async for chunk in proc.stderr])
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 0 and b"Traceback" not in err, err.decode()
    assert b"the reader of standard output went away" in err


def _signal_mask(pid: int, field: str) -> int:
    """The ``SigIgn`` or ``SigCgt`` mask of ``pid`` (Linux ``/proc``): its signals ignored or caught."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1], 16)


@pytest.mark.parametrize("nohup", [False, True], ids=["plain", "nohup"])
async def test_sighup_stops_the_daemon_gracefully_unless_it_was_started_ignoring_it(tmp_path: Path, nohup: bool):
    # SIGHUP (a closed terminal, an ended ssh session) killed the daemon outright, as a kill -9
    # does; it is now a graceful stop like SIGTERM. Under `nohup` it was asked to be ignored, and
    # stays so: the daemon keeps serving.
    hup = 1 << (signal.SIGHUP - 1)
    with open(tmp_path / "serve.err", "wb") as err:
        proc = await trio.lowlevel.open_process(
            [*(["nohup"] if nohup else []), *lens_command(), "serve", "--port", "0", "--data", "data"],
            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        try:
            assert proc.stdout is not None
            out = b""
            with trio.fail_after(30):
                while b"lens: listening on " not in out:
                    chunk = await proc.stdout.receive_some(4096)
                    assert chunk, out
                    out += chunk
            url = re.search(rb"lens: listening on (http://\S+)", out).group(1).decode()  # type: ignore[union-attr]
            if nohup:
                assert _signal_mask(proc.pid, "SigIgn") & hup and not _signal_mask(proc.pid, "SigCgt") & hup
            else:
                assert _signal_mask(proc.pid, "SigCgt") & hup and not _signal_mask(proc.pid, "SigIgn") & hup
            proc.send_signal(signal.SIGHUP)
            if nohup:
                async with httpx2.AsyncClient(base_url=url, timeout=LIMIT) as client:
                    assert (await client.get("/api/v1/health")).status_code == 200
                proc.send_signal(signal.SIGTERM)
            with trio.fail_after(LIMIT):
                out += b"".join([chunk async for chunk in proc.stdout])
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
    stderr = (tmp_path / "serve.err").read_text()
    assert code == 0 and "Traceback" not in stderr, (code, stderr[-3000:])
    assert out.decode().splitlines()[-1] == "lens: stopped", out


def _serve_on_a_terminal_then_hang_it_up(cwd: Path) -> tuple[int, bytes]:
    """``lens serve`` with a pseudo-terminal as its controlling terminal (and standard streams),
    which is then closed as a terminal window is: the kernel sends SIGHUP. Its exit code and what it
    printed before."""
    import fcntl
    import select
    import termios
    import time

    master, slave = os.openpty()

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([*lens_command(), "serve", "--port", "0", "--data", "data"], cwd=cwd, stdin=slave,
                            stdout=slave, stderr=slave, preexec_fn=own_terminal)
    os.close(slave)
    try:
        shown, deadline = b"", time.monotonic() + 30
        while b"lens: listening on " not in shown and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                shown += os.read(master, 4096)
        assert b"lens: listening on " in shown, shown
        os.close(master)
        master = -1
        return proc.wait(LIMIT), shown
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_closed_terminal_stops_the_daemon_gracefully(tmp_path: Path):
    # The daemon's terminal went away (a closed window, an ended ssh session): SIGHUP, which by
    # default killed it outright. It is a graceful stop now: exit 0, the log and its projections
    # closed as at any stop (the lines it prints meanwhile go nowhere: the terminal is gone).
    code, shown = await trio.to_thread.run_sync(_serve_on_a_terminal_then_hang_it_up, tmp_path)
    assert code == 0, (code, shown)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["events.db", "lock", "projections.db"]
    verify = await run_lens(tmp_path, "log", "verify", "--data", "data")
    assert verify.returncode == 0, verify.stdout + verify.stderr
