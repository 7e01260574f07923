"""Commands through the real executor process: streaming, exit, timeout, cap, cancellation.

Every command that could outlive its test prints its process group id first (``echo $$``: the
shell leads its own group); the test then checks that no live process is left in that group and,
whatever happens, kills the group on the way out.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
import trio

from proto import executor_pb2 as pb
from runtime.executor_client import (RUN_DEADLINE_MARGIN_S, ExecutorClient, ExecutorError, ExecutorToolError,
                                     ExecutorUnavailable, run_deadline_s)
from tools.executor.commands import DEFAULT_TIMEOUT_MS

from ..procfs import alive
from .conftest import group_members, reaping, start_executor, stop_process, wait_group_gone, wait_path

BOUND_S = 20.0  # generous bound for anything that should take well under a second


async def collect(client: ExecutorClient, command: str, *,
                  on_stdout: Callable[[bytes], Awaitable[None]] | None = None,
                  **kw: Any) -> tuple[bytes, bytes, pb.CommandExit]:
    """Run ``command`` and read its stream to the end: stdout, stderr, the exit. ``on_stdout`` is
    awaited with the stdout so far after each stdout chunk, while the stream stays open."""
    out, err, exit_ = bytearray(), bytearray(), None
    with trio.fail_after(BOUND_S):
        async with client.run(command, **kw) as events:
            async for ev in events:
                if isinstance(ev, Exception):
                    raise ev
                which = ev.WhichOneof("event")
                if which == "stdout":
                    out += ev.stdout
                    if on_stdout is not None:
                        await on_stdout(bytes(out))
                elif which == "stderr":
                    err += ev.stderr
                else:
                    exit_ = ev.exit
    assert exit_ is not None, "no exit event"
    return bytes(out), bytes(err), exit_


async def test_output_and_exit_code(client: ExecutorClient) -> None:
    out, err, ex = await collect(client, "echo out; echo err >&2; exit 3")
    assert out == b"out\n" and err == b"err\n"
    assert ex.exit_code == 3 and not ex.timed_out and not ex.truncated


async def test_cwd_is_workspace_relative_and_confined(client: ExecutorClient, workspace: Path) -> None:
    (workspace / "cmd_cwd").mkdir(exist_ok=True)
    out, _, ex = await collect(client, "pwd", cwd="cmd_cwd")
    assert ex.exit_code == 0 and Path(out.decode().strip()).resolve() == (workspace / "cmd_cwd").resolve()
    for bad, code in (("../..", "PATH_OUTSIDE_WORKSPACE"), ("no_such_dir", "NOT_FOUND")):
        async with client.run("pwd", cwd=bad) as events:
            got = [ev async for ev in events]
        assert len(got) == 1 and isinstance(got[0], ExecutorToolError) and got[0].code == code, got


async def test_output_is_streamed_before_the_command_ends(client: ExecutorClient, workspace: Path) -> None:
    release = workspace / f"release-{secrets.token_hex(4)}"
    with reaping() as groups:
        with trio.fail_after(BOUND_S):
            async with client.run(f"echo $$; while [ ! -e {release.name} ]; do sleep 0.01; done; echo after") as events:
                first = await events.receive()
                groups.append(int(first.stdout))
                # The command is still running (it waits for the release file): the first line came
                # while it ran, not at its end.
                assert group_members(groups[0])
                release.touch()
                rest = [ev async for ev in events]
        assert [ev.stdout for ev in rest if ev.WhichOneof("event") == "stdout"] == [b"after\n"]
        assert rest[-1].exit.exit_code == 0


async def test_timeout_kills_the_whole_process_group(client: ExecutorClient) -> None:
    with reaping() as groups:
        with trio.fail_after(BOUND_S):
            async with client.run("echo $$; sleep 100 & sleep 100", timeout_ms=300) as events:
                items = [ev async for ev in events]
        groups.append(int(items[0].stdout))
        ex = items[-1].exit
        assert ex.timed_out and ex.exit_code < 0  # killed by a signal
        assert wait_group_gone(groups[0]) == []  # the background sleep too


async def test_background_jobs_end_with_the_command_that_started_them(client: ExecutorClient) -> None:
    # `cmd &` used to hold the output pipe until the timeout (reported as a timeout after 120 s),
    # and a detached job (`(cmd >/dev/null 2>&1 &)`) ran on unowned after the command "ended".
    with reaping() as groups:
        for command in ["echo $$; sleep 100 & echo started", "echo $$; (sleep 100 >/dev/null 2>&1 &); echo detached"]:
            out, _, ex = await collect(client, command, timeout_ms=60_000)
            groups.append(int(out.split()[0]))
            assert ex.exit_code == 0 and not ex.timed_out, (command, ex)  # (not held to the timeout)
            assert out.split()[1] in (b"started", b"detached")
            assert wait_group_gone(groups[-1]) == []  # the background sleep is gone too


async def test_the_timeout_holds_while_the_caller_stops_reading(client: ExecutorClient, executor) -> None:
    await trio.to_thread.run_sync(_stall_a_raw_stream, executor.address, client._meta)


def _stall_a_raw_stream(address: str, meta: Any) -> None:
    # A plain grpc caller that reads one message and stalls. An audit saw the handler parked in
    # a send, past its deadline check, with `yes` running on for as long as the caller stalled;
    # a timer thread now ends the group at the deadline whatever the handler does. (On this
    # machine grpc buffered enough that the old code met the deadline too: this checks the
    # behaviour, it does not reproduce the stall. ExecutorClient drains streams into a queue;
    # this is the raw wire, as any other client may use it.)
    import grpc

    from proto import executor_pb2_grpc as pb_grpc

    with reaping() as groups, grpc.insecure_channel(address) as channel:
        stream = pb_grpc.ExecutorStub(channel).Run(
            pb.CommandRequest(command="echo $$; exec yes STALLED", timeout_ms=1000), metadata=meta)
        groups.append(int(next(stream).stdout.split(b"\n")[0]))
        # not reading now: grpc's flow-control window fills and the server's send blocks
        assert wait_group_gone(groups[0], timeout=BOUND_S) == []
        exits = [ev.exit for ev in stream if ev.WhichOneof("event") == "exit"]
        assert len(exits) == 1 and exits[0].timed_out and exits[0].exit_code < 0, exits


async def test_commands_at_once_are_capped_and_other_calls_still_answer(client: ExecutorClient, executor) -> None:
    # 40 long commands from one client used to take all 32 server threads: other clients' calls
    # (even a Hello) timed out. The server runs at most MAX_RUNNING_COMMANDS at once.
    from tools.executor.server import MAX_RUNNING_COMMANDS

    other = ExecutorClient(executor.address, executor.token)  # (a client caps its own streams)

    release = trio.Event()
    with reaping() as groups:
        async with trio.open_nursery() as nursery:
            started = trio.Semaphore(0)

            async def hold() -> None:
                async with client.run("echo $$; exec sleep 100") as events:
                    groups.append(int((await events.receive()).stdout))
                    started.release()
                    await release.wait()

            for _ in range(MAX_RUNNING_COMMANDS):
                nursery.start_soon(hold)
            with trio.fail_after(BOUND_S):
                for _ in range(MAX_RUNNING_COMMANDS):
                    await started.acquire()
                async with other.run("echo one too many") as events:
                    got = [ev async for ev in events]
                assert len(got) == 1 and isinstance(got[0], ExecutorToolError), got
                assert got[0].code == "TOO_MANY_COMMANDS", got[0]
                assert (await other.hello()).protocol_version == 8  # the server still answers
            release.set()
        other.close()
        for g in groups:
            assert wait_group_gone(g) == []  # leaving each stream killed its command


async def test_output_cap_truncates_and_keeps_draining(client: ExecutorClient) -> None:
    out, err, ex = await collect(client, "head -c 300000 /dev/zero; echo done >&2", max_output_bytes=1000)
    assert len(out) + len(err) == 1000
    assert ex.truncated and ex.exit_code == 0 and not ex.timed_out
    out, _, ex = await collect(client, "printf abc", max_output_bytes=3)
    assert out == b"abc" and not ex.truncated


async def test_trio_cancellation_kills_the_remote_process_promptly(client: ExecutorClient) -> None:
    with reaping() as groups:
        with trio.fail_after(BOUND_S):
            with trio.CancelScope() as scope:
                async with client.run("echo $$; sleep 100 & sleep 100") as events:
                    first = await events.receive()
                    groups.append(int(first.stdout))
                    assert group_members(groups[0])
                    scope.cancel()
                    await trio.sleep_forever()  # cancelled here
            assert scope.cancelled_caught
        # The executor polls is_active() every 0.1 s, then SIGTERM to the group: well under 10 s.
        assert wait_group_gone(groups[0], timeout=10) == []


async def test_cancelling_a_command_that_closed_its_output_kills_it(client: ExecutorClient) -> None:
    # With both pipes closed the executor waited for the shell up to the command's timeout and
    # never asked whether the caller had gone: the command ran on and kept its slot.
    with reaping() as groups:
        with trio.fail_after(BOUND_S):
            with trio.CancelScope() as scope:
                async with client.run("echo $$; exec >/dev/null 2>&1; sleep 100") as events:
                    groups.append(int((await events.receive()).stdout))
                    scope.cancel()
                    await trio.sleep_forever()
            assert scope.cancelled_caught
        assert wait_group_gone(groups[0], timeout=10) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_stopping_the_executor_ends_a_command_that_closed_its_output(tmp_path: Path, sig: int) -> None:
    # SIGTERM left the executor running (and the command after a SIGKILL of it). SIGHUP (a remote
    # executor's terminal closed) killed the executor outright, and the command ran on.
    ex = start_executor(tmp_path)
    pgid: list[int] = []

    async def start_command() -> None:
        c = ExecutorClient(ex.address, ex.token)
        try:
            async with trio.open_nursery() as nursery:
                async def run() -> None:
                    try:
                        async with c.run("echo $$; exec >/dev/null 2>&1; sleep 100") as events:
                            pgid.append(int((await events.receive()).stdout))
                            await trio.sleep_forever()
                    except ExecutorError:
                        pass  # the executor went away under the stream
                nursery.start_soon(run)
                with trio.fail_after(BOUND_S):
                    while not pgid:
                        await trio.sleep(0.02)
                ex.proc.send_signal(sig)
                with trio.fail_after(BOUND_S):
                    await trio.to_thread.run_sync(ex.proc.wait, abandon_on_cancel=True)
                nursery.cancel_scope.cancel()
        finally:
            c.close()

    try:
        with reaping() as groups:
            trio.run(start_command)
            groups.extend(pgid)
            assert ex.proc.returncode == 0  # (a graceful stop, not the signal's default)
            assert wait_group_gone(pgid[0], timeout=10) == []
    finally:
        stop_process(ex.proc)


async def test_leaving_the_stream_early_kills_the_remote_process(client: ExecutorClient) -> None:
    with reaping() as groups:
        with trio.fail_after(BOUND_S):
            async with client.run("echo $$; exec sleep 100") as events:
                groups.append(int((await events.receive()).stdout))
        assert wait_group_gone(groups[0], timeout=10) == []


async def test_trio_cancellation_of_a_slow_unary_call_reaches_the_server(client: ExecutorClient,
                                                                        workspace: Path) -> None:
    # `_test_wait_cancel` (enabled by LENS_EXECUTOR_TEST_HOOKS in this suite's executor) writes
    # `<marker>.started`, blocks until its RPC is no longer active, then writes `<marker>`.
    marker = f"cancel-marker-{secrets.token_hex(4)}"
    with trio.fail_after(BOUND_S):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                async def call() -> None:
                    await client.call("_test_wait_cancel", {"marker": marker, "max_s": 15})

                nursery.start_soon(call)
                await wait_path(workspace / f"{marker}.started")  # the handler is running
                scope.cancel()
        assert scope.cancelled_caught
        await wait_path(workspace / marker, timeout=10)
    assert (workspace / marker).read_text() == "cancelled"  # is_active() turned false, not the 15 s cap


async def test_a_deadline_on_a_unary_call_is_a_clear_error(client: ExecutorClient, workspace: Path) -> None:
    marker = f"deadline-marker-{secrets.token_hex(4)}"
    with trio.fail_after(BOUND_S):
        with pytest.raises(ExecutorError) as info:
            await client.call("_test_wait_cancel", {"marker": marker, "max_s": 15}, timeout=0.2)
        # (its own code, and still a kind of ExecutorUnavailable for whoever handles that)
        assert info.value.code == "EXECUTOR_TIMEOUT" and "DEADLINE_EXCEEDED" in str(info.value)
        assert isinstance(info.value, ExecutorUnavailable) and not client.lost
        await wait_path(workspace / marker, timeout=10)


async def test_hostile_raw_requests_get_stable_codes(client: ExecutorClient, executor) -> None:
    # Sent on the raw wire (the Core's own client never builds these): each was an UNKNOWN status
    # carrying Python internals, one because the reply echoed a lone surrogate protobuf cannot hold.
    import grpc

    from proto import executor_pb2_grpc as pb_grpc

    def send() -> list[Any]:
        out: list[Any] = []
        with grpc.insecure_channel(executor.address) as channel:
            stub = pb_grpc.ExecutorStub(channel)
            for args in ['{"path": "x", "offset": 1' + "0" * 5000 + "}", "[" * 5000 + "]" * 5000,
                         '{"path": "x", "\\ud800": 1}']:
                out.append(stub.Call(pb.ToolRequest(tool="read_file", arguments_json=args), metadata=client._meta))
            out.append(stub.Probe(pb.ProbeRequest(path="x", sha256="é" * 64), metadata=client._meta))
            try:
                list(stub.Run(pb.CommandRequest(command="echo a\0b"), metadata=client._meta))
            except grpc.RpcError as exc:
                out.append((exc.code(), exc.details()))
        return out

    big, deep, surrogate, probe, nul = await trio.to_thread.run_sync(send)
    for reply in (big, deep, surrogate):
        assert not reply.ok and reply.error_code == "INVALID_ARGUMENT", reply
    assert "nested too deeply" in deep.error_message and "\\ud800" in surrogate.error_message  # escaped
    assert probe.seen is False
    assert nul[0] == grpc.StatusCode.INVALID_ARGUMENT and nul[1].startswith("INVALID_ARGUMENT: "), nul


def test_a_command_stream_always_has_a_deadline():
    """A command without ``timeout_ms`` runs under the executor's default timeout; its stream's
    gRPC deadline follows that default (an executor that stopped answering held the call, and the
    workspace's write lock, until the session was aborted)."""
    assert run_deadline_s(0) == DEFAULT_TIMEOUT_MS / 1000 + RUN_DEADLINE_MARGIN_S
    assert run_deadline_s(1) == 0.001 + RUN_DEADLINE_MARGIN_S
    assert run_deadline_s(3_600_000) == 3600 + RUN_DEADLINE_MARGIN_S


def test_a_burst_of_signals_stops_the_executor(tmp_path: Path) -> None:
    """SIGTERMs in a burst (the daemon closes the lifeline and terminates together; an operator's
    repeated Ctrl-C) stop the executor. A handler that set the stop event could be interrupted by
    the next signal inside that event's lock, and its nested handler then waited for the lock
    for ever: the executor outlived its daemon."""
    for n in range(3):
        ex = start_executor(tmp_path / f"x{n}")
        try:
            for _ in range(200):
                ex.proc.send_signal(signal.SIGTERM)
            assert ex.proc.wait(timeout=30) == 0
        finally:
            if ex.proc.poll() is None:
                ex.proc.kill()
                ex.proc.wait(timeout=5)


# A process that leaves the command's process group — `setsid` (a session of its own), or a
# double fork into one — is out of reach of the group signal. It writes its pid to a file the
# command waits for, so it is surely running before the shell ends.
ESCAPE = "setsid sh -c 'echo $$ > {f}; exec sleep 100' >/dev/null 2>&1 </dev/null & while [ ! -s {f} ]; do sleep 0.01; done; "
ESCAPE_DOUBLE_FORK = ("(setsid sh -c 'echo $$ > {f}; exec sleep 100' >/dev/null 2>&1 </dev/null &); "
                      "while [ ! -s {f} ]; do sleep 0.01; done; ")


@pytest.mark.parametrize("escape", [ESCAPE, ESCAPE_DOUBLE_FORK], ids=["setsid", "double-fork"])
@pytest.mark.parametrize("how", ["ends", "times-out", "cancelled"])
async def test_a_process_that_left_the_group_ends_with_the_command(client: ExecutorClient, workspace: Path,
                                                                     escape: str, how: str) -> None:
    pidfile = workspace / f"escaped-{secrets.token_hex(4)}"
    command = escape.format(f=pidfile.name) + ("echo done" if how == "ends" else "echo waiting; sleep 100")
    escaped = 0
    try:
        if how == "cancelled":
            with trio.fail_after(BOUND_S):
                with trio.CancelScope() as scope:
                    async with client.run(command) as events:
                        async for ev in events:
                            if ev.WhichOneof("event") == "stdout" and b"waiting" in ev.stdout:
                                scope.cancel()
                assert scope.cancelled_caught
        else:
            out, _, ex = await collect(client, command, timeout_ms=60_000 if how == "ends" else 1_500)
            assert ex.timed_out == (how == "times-out"), ex
            if how == "ends":
                assert out == b"done\n" and ex.exit_code == 0
        escaped = int(pidfile.read_text())
        assert not await trio.to_thread.run_sync(lambda: poll_gone(escaped)), \
            f"process {escaped} (left the command's group) still runs after the command"
    finally:
        if escaped and alive(escaped):
            os.kill(escaped, signal.SIGKILL)


def poll_gone(pid: int, timeout: float = 10.0) -> bool:
    """Bounded poll until ``pid`` no longer runs; whether it still does at the end."""
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive(pid)


async def test_a_cwd_judged_by_resolve_and_swapped_before_the_start_is_not_entered(
        client: ExecutorClient, workspace: Path) -> None:
    # The workspace allowlist judges a command's cwd by where `resolve` says it leads, then the
    # command starts in a second call: a directory swapped for a symlink in between (by a
    # background job, another process) started it in a directory nobody judged. The race is
    # forced: the swap is made exactly between the two calls. With `cwd_leads_to`, the walk that
    # opens the directory compares it with what was judged, and nothing starts.
    base = workspace / "judged_cwd"
    (base / "other").mkdir(parents=True, exist_ok=True)
    (base / "allowed").mkdir(exist_ok=True)
    judged = (await client.call("resolve", {"path": "judged_cwd/allowed"})).result["path"]
    assert judged == "judged_cwd/allowed"
    (base / "allowed").rename(base / "allowed.old")
    (base / "allowed").symlink_to("other")  # the swap, after the judgement, before the start
    async with client.run("touch started", cwd="judged_cwd/allowed", cwd_leads_to=judged) as events:
        item = await events.receive()
    assert isinstance(item, ExecutorToolError) and item.code == "CWD_MOVED", item
    assert "leads to 'judged_cwd/other' now, not to 'judged_cwd/allowed'" in item.message
    assert not (base / "other" / "started").exists() and not (base / "allowed.old" / "started").exists()
    # where the cwd leads to what was judged (through a link too), the command starts there
    out, _, ex = await collect(client, "pwd -P", cwd="judged_cwd/allowed", cwd_leads_to="judged_cwd/other")
    assert ex.exit_code == 0 and Path(out.decode().strip()) == (base / "other").resolve()
    out, _, ex = await collect(client, "pwd -P", cwd="", cwd_leads_to=".")
    assert ex.exit_code == 0 and Path(out.decode().strip()) == workspace.resolve()
