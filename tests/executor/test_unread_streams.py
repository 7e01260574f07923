"""Command streams whose client stops reading or goes away (F-EXE-7, SPEC §5).

A real ``lens executor serve`` process (test hooks on, so its send-stall bound can be shortened)
and a raw grpc client on the wire. Each running command holds a server thread and one of the
executor's ``MAX_RUNNING_COMMANDS`` slots; a stream the client opened and then left must give
both back within a bound, and its command must end:

- a client that stops reading (its window fills, the executor's send waits): the call is
  cancelled once the client has taken nothing for the send-stall bound, even while the call's
  deadline and the command's timeout are far off;
- a client that goes away (its channel closed, or its process killed): grpc sees the connection
  end and the call is cancelled at once;
- Core's own client, whose reader falls behind: what it holds of the stream unread is bounded.

Nothing here sleeps for ordering: waits are bounded polls of an observable condition.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest
import trio

from proto import executor_pb2 as pb
from tools.executor import PROTOCOL_VERSION
from tools.executor.server import MAX_RUNNING_COMMANDS, SEND_STALL_S, TEST_SEND_STALL_ENV

from .conftest import ExecutorProcess, poll_until, processes_marked, running_executor, start_executor, stop_process

RUN = "/lens.executor.v8.Executor/Run"
STALL_S = 1.0  # the executor's send-stall bound in this module
BOUND_S = 15.0  # the stall bound, the commands' SIGTERM and a loaded machine's margin
FAR_S = 120.0  # the calls' deadlines and the commands' timeouts: never reached here
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 64 * 1024)]
MARK_ENV = "LENS_UNREAD_STREAMS_MARK"  # carried by every process the executor starts


@pytest.fixture(scope="module")
def stalling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ExecutorProcess, str]]:
    mark = secrets.token_hex(8)
    os.environ[MARK_ENV] = mark  # (start_executor hands the executor this environment)
    os.environ[TEST_SEND_STALL_ENV] = str(STALL_S)
    try:
        ex = start_executor(tmp_path_factory.mktemp("unread"))
    finally:
        del os.environ[MARK_ENV], os.environ[TEST_SEND_STALL_ENV]
    try:
        yield ex, mark
    finally:
        stop_process(ex.proc)


def meta(ex: ExecutorProcess) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {ex.token}"), ("lens-protocol", str(PROTOCOL_VERSION)))


def commands_running(mark: str) -> list[int]:
    """Live processes carrying the module's mark in their environment: the executor's commands."""
    return processes_marked(MARK_ENV, mark, argv0=b"yes")


def wait_for(condition: Any, timeout: float = BOUND_S) -> bool:
    return poll_until(condition, timeout)


def endless(channel: grpc.Channel, ex: ExecutorProcess) -> Any:
    """A stream of endless output (its command's timeout and the call's deadline far off), unread."""
    request = pb.CommandRequest(command="exec yes", timeout_ms=int(FAR_S * 1000), max_output_bytes=16 << 20)
    return channel.unary_stream(RUN)(request.SerializeToString(), metadata=meta(ex), timeout=FAR_S)


def run_once(ex: ExecutorProcess, command: str = "echo free") -> list[pb.CommandEvent] | grpc.RpcError:
    with grpc.insecure_channel(ex.address) as channel:
        try:
            return [pb.CommandEvent.FromString(e) for e in channel.unary_stream(RUN)(
                pb.CommandRequest(command=command, timeout_ms=10_000).SerializeToString(),
                metadata=meta(ex), timeout=BOUND_S)]
        except grpc.RpcError as exc:
            return exc


def refused_too_many(answer: Any) -> bool:
    return isinstance(answer, grpc.RpcError) and answer.code() == grpc.StatusCode.RESOURCE_EXHAUSTED \
        and "TOO_MANY_COMMANDS" in (answer.details() or "")  # type: ignore[attr-defined]


def all_slots_free(ex: ExecutorProcess) -> None:
    """Every slot is free: MAX_RUNNING_COMMANDS commands at once all run to their exit, within
    BOUND_S. A call gives its slot back as its handler ends, a moment after its command's process
    is gone (the handler unwinds its stream then): a batch that found one still taken
    (TOO_MANY_COMMANDS) is sent again until the bound; any other answer fails at once."""
    deadline = time.monotonic() + BOUND_S
    while True:
        taken = 0
        with grpc.insecure_channel(ex.address) as channel:
            calls = [channel.unary_stream(RUN)(pb.CommandRequest(command=f"sleep 0.3; echo {i}", timeout_ms=10_000)
                                               .SerializeToString(), metadata=meta(ex), timeout=BOUND_S)
                     for i in range(MAX_RUNNING_COMMANDS)]
            for i, call in enumerate(calls):
                try:
                    events = [pb.CommandEvent.FromString(e) for e in call]
                except grpc.RpcError as exc:
                    if not refused_too_many(exc):
                        raise
                    taken += 1
                    continue
                assert events[0].stdout == f"{i}\n".encode() and events[-1].exit.exit_code == 0, events
        if not taken:
            return
        assert time.monotonic() < deadline, f"{taken} of {MAX_RUNNING_COMMANDS} slots still taken after {BOUND_S} s"


def test_the_production_bound_is_far_past_what_a_reading_client_takes() -> None:
    # (Core reads every stream it opens; the bound is for a client that is stuck or hostile)
    assert SEND_STALL_S >= 30


def test_streams_their_client_stopped_reading_give_back_their_slots_and_end_their_commands(
        stalling: tuple[ExecutorProcess, str]) -> None:
    ex, mark = stalling
    # (a window that stays at 64 KiB: grpc grows it with its bandwidth estimate, and a window past
    # the output cap would take all a command may send, leaving no send to wait)
    with grpc.insecure_channel(ex.address, options=SMALL_WINDOW) as channel:
        streams = [endless(channel, ex) for _ in range(MAX_RUNNING_COMMANDS)]
        assert wait_for(lambda: len(commands_running(mark)) == MAX_RUNNING_COMMANDS, FAR_S / 4), \
            commands_running(mark)
        started = time.monotonic()
        # Every slot is taken (the streams are unread, their client still connected) — unless the
        # machine was slow enough for the bound to have passed already.
        answer = run_once(ex)
        assert refused_too_many(answer) or time.monotonic() - started >= STALL_S, answer
        # Within the bound, and long before the commands' timeout or the calls' deadline, the
        # slots are free again and the commands ended.
        assert wait_for(lambda: not commands_running(mark)), \
            f"{len(commands_running(mark))} unread commands still run after {BOUND_S} s: {ex.output()[-2000:]}"
        assert wait_for(lambda: isinstance(run_once(ex), list)), run_once(ex)
        assert time.monotonic() - started < BOUND_S
        all_slots_free(ex)
        # The client, reading at last, finds each stream cancelled (after the output it had taken).
        with pytest.raises(grpc.RpcError) as info:
            for _ in streams[0]:
                pass
        assert info.value.code() == grpc.StatusCode.CANCELLED, info.value  # type: ignore[attr-defined]
    assert ex.proc.poll() is None
    assert "Traceback" not in ex.output(), ex.output()[-3000:]
    assert "took none of its output" in ex.output()  # (the executor says why it cancelled them)


def test_streams_whose_channel_is_closed_give_back_their_slots_at_once(stalling: tuple[ExecutorProcess, str]) -> None:
    ex, mark = stalling
    channel = grpc.insecure_channel(ex.address)
    try:
        streams = [endless(channel, ex) for _ in range(MAX_RUNNING_COMMANDS)]
        assert wait_for(lambda: len(commands_running(mark)) == MAX_RUNNING_COMMANDS, FAR_S / 4)
        assert streams
    finally:
        channel.close()
    assert wait_for(lambda: not commands_running(mark)), commands_running(mark)
    assert wait_for(lambda: isinstance(run_once(ex), list)), run_once(ex)
    all_slots_free(ex)


CLIENT = """
import sys, grpc
from proto import executor_pb2 as pb
address, token, version = sys.argv[1:4]
channel = grpc.insecure_channel(address)
call = channel.unary_stream("{run}")(
    pb.CommandRequest(command="exec yes", timeout_ms={far_ms}, max_output_bytes=16 << 20).SerializeToString(),
    metadata=(("authorization", "Bearer " + token), ("lens-protocol", version)), timeout={far})
print("open", flush=True)
sys.stdin.read()  # (never reads the stream; killed by the test)
"""


def test_a_stream_whose_client_process_is_killed_gives_back_its_slot_at_once(
        stalling: tuple[ExecutorProcess, str]) -> None:
    ex, mark = stalling
    repo = Path(__file__).resolve().parents[2]
    code = CLIENT.format(run=RUN, far_ms=int(FAR_S * 1000), far=FAR_S)
    client = subprocess.Popen([sys.executable, "-c", code, ex.address, ex.token, str(PROTOCOL_VERSION)], cwd=repo,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        assert client.stdout is not None and client.stdout.readline() == b"open\n"
        assert wait_for(lambda: len(commands_running(mark)) == 1, FAR_S / 4)
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=BOUND_S)
        started = time.monotonic()
        assert wait_for(lambda: not commands_running(mark)), commands_running(mark)
        assert time.monotonic() - started < BOUND_S
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=BOUND_S)
        assert client.stdin is not None and client.stdout is not None
        client.stdin.close()
        client.stdout.close()
    all_slots_free(ex)


# Writes 64 KiB at a time for as long as it can, and after each write the total written so far.
COUNTING_WRITER = """
import os
n = 0
while True:
    n += os.write(1, b"x" * 65536)
    with open("written.tmp", "w") as f:
        f.write(str(n))
    os.replace("written.tmp", "written")
"""
# What Core may hold of a stream it does not read (its events channel, grpc's receive window) plus
# what the executor and the pipe hold: 1.5 MiB measured. A window grown by grpc's
# bandwidth-delay probing and a 64-event channel held 9 MiB and more.
UNREAD_HELD_BOUND = 2560 * 1024
STALLED_S = 2.0  # the writer's count unchanged this long: nothing more is taken from it


async def test_core_holds_a_bounded_part_of_a_stream_it_does_not_read(tmp_path: Path) -> None:
    async with running_executor(tmp_path) as (ex, client):
        written = ex.workspace / "written"
        command = f"exec {shlex.quote(sys.executable)} -c {shlex.quote(COUNTING_WRITER)}"
        async with client.run(command, timeout_ms=int(FAR_S * 1000), max_output_bytes=16 << 20) as events:
            first = await events.receive()  # then nothing more is read
            assert first.WhichOneof("event") == "stdout", first
            last, since = -1, time.monotonic()
            with trio.fail_after(BOUND_S):
                while time.monotonic() - since < STALLED_S:
                    await trio.sleep(0.05)
                    now = int(written.read_text() or 0) if written.exists() else 0
                    if now != last:
                        last, since = now, time.monotonic()
        held = last - len(first.stdout)
        assert held <= UNREAD_HELD_BOUND, f"{held} bytes of output written and not read"
