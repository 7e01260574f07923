"""The connection contract against a real executor process: version handshake, token, secrecy."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import trio

from proto import executor_pb2 as pb
from proto import executor_pb2_grpc as pb_grpc
from runtime.executor_client import (ExecutorClient, ExecutorError, ExecutorUnauthenticated,
                                     ExecutorUnavailable, ExecutorVersionMismatch, unary)
from tools.executor import PROTOCOL_VERSION
from tools.executor.server import TOKEN_ENV

from tests.cli.lens_script import executor_serve

from .conftest import ExecutorProcess, other_version_executor, remote_pool, start_executor, stop_process


async def test_hello_reports_the_protocol_and_the_workspace(client: ExecutorClient, executor: ExecutorProcess) -> None:
    reply = await client.hello()
    assert reply.protocol_version == PROTOCOL_VERSION == 8
    assert reply.workspace_name == executor.workspace.name
    assert reply.executor_version


async def test_an_older_protocol_in_the_metadata_fails_at_connect_naming_both_versions(executor: ExecutorProcess) -> None:
    channel = grpc.insecure_channel(executor.address)
    try:
        stub = pb_grpc.ExecutorStub(channel)
        meta = (("authorization", f"Bearer {executor.token}"), ("lens-protocol", "7"))
        with pytest.raises(ExecutorVersionMismatch) as info:
            await unary(stub.Hello, pb.HelloRequest(protocol_version=PROTOCOL_VERSION), metadata=meta, timeout=10)
        assert "8" in str(info.value) and "7" in str(info.value)
        assert info.value.code == "EXECUTOR_VERSION_MISMATCH"
        # The guard runs before any handler: a tool call with the wrong version is refused too.
        with pytest.raises(ExecutorVersionMismatch):
            await unary(stub.Call, pb.ToolRequest(tool="read_file", arguments_json='{"path": "."}'),
                        metadata=meta, timeout=10)
        # A long version is not echoed back whole.
        long_meta = (("authorization", f"Bearer {executor.token}"), ("lens-protocol", "9" * 6000))
        with pytest.raises(ExecutorVersionMismatch) as info:
            await unary(stub.Hello, pb.HelloRequest(protocol_version=8), metadata=long_meta, timeout=10)
        assert "9" * 40 + "…" in str(info.value) and "9" * 41 not in str(info.value)
        # No protocol metadata at all.
        with pytest.raises(ExecutorVersionMismatch, match="none"):
            await unary(stub.Hello, pb.HelloRequest(protocol_version=8),
                        metadata=(("authorization", f"Bearer {executor.token}"),), timeout=10)
    finally:
        channel.close()


async def test_an_older_protocol_in_the_hello_request_is_refused_naming_both(executor: ExecutorProcess) -> None:
    channel = grpc.insecure_channel(executor.address)
    try:
        stub = pb_grpc.ExecutorStub(channel)
        meta = (("authorization", f"Bearer {executor.token}"), ("lens-protocol", str(PROTOCOL_VERSION)))
        with pytest.raises(ExecutorVersionMismatch) as info:
            await unary(stub.Hello, pb.HelloRequest(protocol_version=7), metadata=meta, timeout=10)
        message = str(info.value)
        assert "speaks 8" in message and "caller 7" in message
    finally:
        channel.close()


@pytest.mark.parametrize("version", [7, 9])
async def test_the_pool_refuses_an_executor_process_of_another_version_at_connect(tmp_path: Path, version: int) -> None:
    with other_version_executor(tmp_path, version) as ex:
        async with remote_pool(ex, tmp_path / "executors") as pool:
            for _ in range(2):  # (and again on the next call: nothing half-connected is kept)
                with pytest.raises(ExecutorVersionMismatch) as info:
                    await pool.get("p")
                assert info.value.code == "EXECUTOR_VERSION_MISMATCH"
                assert f"speaks {version}" in str(info.value) and f"caller {PROTOCOL_VERSION}" in str(info.value)


def connections_to(port: int) -> int:
    """Established TCP connections of this process to ``port`` (grpc dials IPv4 on IPv6 sockets too)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                count += 1
    return count


async def test_the_pool_closes_the_channel_of_an_executor_that_failed_the_handshake(tmp_path: Path) -> None:
    # The client was left to the garbage collector: while anything held the error (a log, another
    # error's context), its channel, connection and grpc's threads stayed open.
    with other_version_executor(tmp_path, 9) as ex:
        port = int(ex.address.rsplit(":", 1)[1])
        kept: list[BaseException] = []
        async with remote_pool(ex, tmp_path / "executors") as pool:
            for _ in range(5):
                with pytest.raises(ExecutorVersionMismatch) as info:
                    await pool.get("p")
                kept.append(info.value)
            with trio.move_on_after(10):
                while connections_to(port):
                    await trio.sleep(0.02)  # bounded poll: grpc closes the connection on its own threads
            assert connections_to(port) == 0


@pytest.mark.parametrize("token", ["", "wrong-token-of-some-length", "Bearer"])
async def test_calls_without_the_right_token_are_refused(executor: ExecutorProcess, token: str) -> None:
    bad = ExecutorClient(executor.address, token)
    try:
        with pytest.raises(ExecutorUnauthenticated) as info:
            await bad.hello()
        assert info.value.code == "EXECUTOR_UNAUTHENTICATED"
        with pytest.raises(ExecutorUnauthenticated):
            await bad.call("read_file", {"path": "."})
        with pytest.raises(ExecutorUnauthenticated):
            await bad.probe("x", "0" * 64)
        async with bad.run("echo never") as events:
            got = [ev async for ev in events]
        assert len(got) == 1 and isinstance(got[0], ExecutorUnauthenticated)
    finally:
        bad.close()
    assert not (executor.workspace / "never").exists()


async def test_no_authorization_metadata_at_all_is_refused(executor: ExecutorProcess) -> None:
    channel = grpc.insecure_channel(executor.address)
    try:
        stub = pb_grpc.ExecutorStub(channel)
        with pytest.raises(ExecutorUnauthenticated):
            await unary(stub.Hello, pb.HelloRequest(protocol_version=8), metadata=(("lens-protocol", "8"),), timeout=10)
    finally:
        channel.close()


async def test_the_token_never_appears_in_argv_or_output(client: ExecutorClient, executor: ExecutorProcess) -> None:
    # Exercise refusals and a command first, so any logging they do has happened.
    bad = ExecutorClient(executor.address, executor.token[:-1] + ("A" if executor.token[-1] != "A" else "B"))
    try:
        with pytest.raises(ExecutorUnauthenticated) as info:
            await bad.hello()
        assert executor.token not in str(info.value)
    finally:
        bad.close()
    out = bytearray()
    async with client.run("env; cat /proc/$PPID/cmdline 2>/dev/null | tr '\\0' ' '") as events:
        async for ev in events:
            assert not isinstance(ev, Exception), ev
            if ev.WhichOneof("event") in ("stdout", "stderr"):
                out += getattr(ev, ev.WhichOneof("event"))
    assert b"PATH=" in out  # the command ran and printed its environment
    assert executor.token.encode() not in out, "commands must not inherit the executor token"
    cmdline = Path(f"/proc/{executor.pid}/cmdline").read_bytes()
    assert b"executor" in cmdline and executor.token.encode() not in cmdline
    assert executor.token not in executor.output()


async def test_an_unreachable_executor_is_a_clear_unavailable_error() -> None:
    # A port nobody listens on: bind one, close it, dial it.
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = ExecutorClient(f"127.0.0.1:{port}", "x" * 32)
    try:
        with trio.fail_after(20):
            with pytest.raises(ExecutorUnavailable) as info:
                await c.hello(timeout=5)
        assert info.value.code == "EXECUTOR_UNAVAILABLE"
        assert isinstance(info.value, ExecutorError)
    finally:
        c.close()


@pytest.mark.parametrize("where", ["inside", "same", "above", "default-inside"])
def test_a_state_directory_overlapping_the_workspace_is_refused(tmp_path: Path, where: str) -> None:
    workspace = tmp_path / "home" / "ws"
    workspace.mkdir(parents=True)
    env = {**os.environ, TOKEN_ENV: secrets.token_urlsafe(32)}
    state = {"inside": ["--state", str(workspace / ".lens-state")], "same": ["--state", str(workspace)],
             "above": ["--state", str(tmp_path / "home")], "default-inside": []}[where]
    if where == "default-inside":  # the default state lies under XDG_STATE_HOME
        env["XDG_STATE_HOME"] = str(workspace / ".local" / "state")
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace",
                           str(workspace), "--listen", "127.0.0.1:0", *state],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "lens executor: STATE_DIR_INVALID: the state directory" in proc.stderr
    assert "lies inside the workspace or holds it" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in workspace.iterdir()) == []  # nothing was created in it


def test_a_workspace_that_is_not_a_directory_is_refused_with_its_code(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    for workspace in (not_a_dir, tmp_path / "missing"):
        proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace",
                               str(workspace), "--listen", "127.0.0.1:0"],
                              env={**os.environ, TOKEN_ENV: secrets.token_urlsafe(32)}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"lens executor: WORKSPACE_INVALID: workspace {workspace} is not a directory\n"


def _serve_briefly(tmp_path: Path, listen: str) -> subprocess.CompletedProcess[str]:
    """``lens executor serve --listen LISTEN`` (:func:`executor_serve`) on ``ws`` with its state
    beside it."""
    workspace = tmp_path / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    return executor_serve("--workspace", str(workspace), "--listen", listen, "--state", str(tmp_path / "state"))


@pytest.mark.parametrize("listen", [":", "host", "host:", ":7421", "127.0.0.1:", "127.0.0.1:99999",
                                    "127.0.0.1:-1", "127.0.0.1:abc", "::1:0", "127.0.0.1:7421 ",
                                    "no-such-host.invalid:0"])
def test_a_listen_address_that_is_not_host_port_is_refused_plainly(tmp_path: Path, listen: str) -> None:
    # Before: a grpc RuntimeError traceback (exit 1), or a port out of range bound to another
    # port than the one asked for (99999 served on a random port, -1 on 65535).
    proc = _serve_briefly(tmp_path, listen)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "listening on" not in proc.stdout
    # A text that is no HOST:PORT is a bad argument (as `lens serve --port 70000` is); a name that
    # does not resolve to a local address cannot be bound (as the daemon says of its own bind).
    code = "LISTEN_FAILED" if listen == "no-such-host.invalid:0" else "INVALID_ARGUMENT"
    assert f"lens executor: {code}: cannot listen on {listen!r}" in proc.stderr, proc.stderr


def test_a_listen_port_in_use_is_refused_plainly(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        proc = _serve_briefly(tmp_path, listen)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "listening on" not in proc.stdout
    assert f"lens executor: LISTEN_FAILED: cannot listen on {listen!r}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("taken", [True, False])
def test_a_listen_address_that_cannot_be_bound_is_one_line_naming_why(tmp_path: Path, taken: bool) -> None:
    # Before: grpc's own log line came first (`E1204 … add_port.cc:83] Failed to add port to
    # server: …`), then a line guessing at two causes ("the host does not resolve to a local
    # address, or the port is in use").
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        # 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine
        listen = f"127.0.0.1:{holder.getsockname()[1]}" if taken else "192.0.2.1:0"
        proc = _serve_briefly(tmp_path, listen)
    reason = "Address already in use" if taken else "Cannot assign requested address"
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == f"lens executor: LISTEN_FAILED: cannot listen on {listen!r} ({reason})\n"
    assert "listening on" not in proc.stdout


@pytest.mark.parametrize("fault", ["state-is-a-file", "calls-is-a-file", "commands-is-a-file", "under-a-file"])
def test_a_state_directory_that_cannot_be_made_is_refused_with_its_code(tmp_path: Path, fault: str) -> None:
    # Before: `lens: IO_ERROR: Not a directory: …/calls` (or `File exists: …`), the generic last
    # resort, with another prefix than the executor's other refusals.
    state = tmp_path / "state"
    bad = {"state-is-a-file": state, "calls-is-a-file": state / "calls",
           "commands-is-a-file": state / "commands", "under-a-file": tmp_path / "file"}[fault]
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("x")
    if fault == "under-a-file":
        state = bad / "state"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(workspace),
                           "--listen", "127.0.0.1:0", "--state", str(state)],
                          env={**os.environ, TOKEN_ENV: secrets.token_urlsafe(32)}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("lens executor: STATE_DIR_INVALID: cannot ") and str(state) in line, line
    assert (f"{bad} is not a directory" if fault != "under-a-file" else "Not a directory") in line, line
    assert line.endswith("pass --state with a directory it can create and write"), line
    assert bad.read_text() == "x"


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:0", "localhost:0"])
def test_a_good_listen_address_prints_the_bound_one(tmp_path: Path, listen: str) -> None:
    if listen.startswith("[::1]"):
        import socket
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
    proc = _serve_briefly(tmp_path, listen)
    assert proc.returncode == 0, proc.stderr
    host = listen.rsplit(":", 1)[0]
    line = proc.stdout.splitlines()[0]
    assert line.startswith(f"lens executor: listening on {host}:")
    assert 0 < int(line.rsplit(":", 1)[1]) <= 65535


def test_a_port_another_executor_serves_is_refused_not_shared(tmp_path: Path) -> None:
    # grpc sets SO_REUSEPORT by default: a second executor on the same port started serving beside
    # the first, and the kernel then spread new connections over both workspaces.
    first = start_executor(tmp_path / "first")
    try:
        proc = _serve_briefly(tmp_path / "second", first.address)
    finally:
        stop_process(first.proc)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "listening on" not in proc.stdout
    assert f"lens executor: LISTEN_FAILED: cannot listen on {first.address!r}" in proc.stderr, proc.stderr


def test_callers_without_the_token_cannot_hold_the_servers_threads(tmp_path: Path) -> None:
    # A refusal was a unary handler, which grpc runs on a server thread once the request message
    # has come: a peer with no token that sent only the headers of 60 calls held all 48 threads,
    # each until it hung up, and the executor answered nobody meanwhile (Core's calls timed out).
    import threading

    ex = start_executor(tmp_path)
    hang_up = threading.Event()

    def headers_only():  # a request stream that never sends its message
        hang_up.wait(30)
        return
        yield

    channel = grpc.insecure_channel(ex.address)  # one connection: the server sees the calls in order
    try:
        held = [channel.stream_unary("/lens.executor.v8.Executor/Call").future(headers_only(), timeout=30)
                for _ in range(60)]
        stub = pb_grpc.ExecutorStub(channel)
        reply = stub.Hello(pb.HelloRequest(protocol_version=PROTOCOL_VERSION), timeout=10,
                           metadata=(("authorization", f"Bearer {ex.token}"), ("lens-protocol", str(PROTOCOL_VERSION))))
        assert reply.protocol_version == PROTOCOL_VERSION
        for call in held:
            assert call.exception(timeout=10).code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[union-attr]
    finally:
        hang_up.set()
        channel.close()
        stop_process(ex.proc)


def test_stalled_calls_with_the_token_leave_the_executor_answering_and_end_at_their_deadline(tmp_path: Path) -> None:
    # A caller with the token that sends a call's headers and never its message holds one of the
    # 48 server threads (grpc reads a unary request on the thread that will run the handler).
    # Such callers are Core, whose every call carries a deadline, and grpc ends a call at its
    # deadline, request or not: a few stalled calls leave the executor answering, and even all
    # 48 threads held give way when those calls' deadlines pass.
    import threading

    ex = start_executor(tmp_path)
    meta = (("authorization", f"Bearer {ex.token}"), ("lens-protocol", str(PROTOCOL_VERSION)))
    hang_up = threading.Event()

    def headers_only():  # a request stream that never sends its message
        hang_up.wait(60)
        return
        yield

    channel = grpc.insecure_channel(ex.address)
    try:
        stub = pb_grpc.ExecutorStub(channel)
        stall = channel.stream_unary("/lens.executor.v8.Executor/Call")
        few = [stall.future(headers_only(), metadata=meta) for _ in range(8)]  # (no deadline at all)
        reply = stub.Call(pb.ToolRequest(tool="read_file", arguments_json='{"path": "."}'), timeout=10, metadata=meta)
        assert reply.ok, reply
        rest = [stall.future(headers_only(), metadata=meta, timeout=2) for _ in range(40)]  # every thread held
        reply = stub.Hello(pb.HelloRequest(protocol_version=PROTOCOL_VERSION), timeout=30, metadata=meta)
        assert reply.protocol_version == PROTOCOL_VERSION  # (answered once the 40 calls' deadlines passed)
        for call in rest:
            assert call.exception(timeout=10).code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[union-attr]
        assert not any(call.done() for call in few)
    finally:
        hang_up.set()
        channel.close()
        stop_process(ex.proc)
