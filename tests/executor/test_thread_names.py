"""The executor's threads by name in the kernel's thread list (``/proc/<pid>/task/*/comm``), which
the resource-cycle test (tests/daemon/test_resource_cycles.py) reads to count the gRPC pool's
threads apart from the ones it judges. A thread inherits the kernel name of the thread that
starts it: a thread a call starts (a command stream's send watch) must name itself, or it reads
as a pool thread and its leak is never counted.

A real ``lens executor serve`` process and a raw grpc client on the wire; waits are bounded polls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import grpc
import pytest

from proto import executor_pb2 as pb
from tools.executor.server import CALL_THREAD_NAME, SEND_WATCH_THREAD_NAME, SERVER_THREADS

from ..procfs import thread_names
from .conftest import ExecutorProcess, poll_until, start_executor, stop_process
from .test_unread_streams import BOUND_S, FAR_S, RUN, meta


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[ExecutorProcess]:
    ex = start_executor(tmp_path)
    try:
        yield ex
    finally:
        stop_process(ex.proc)


def test_a_command_streams_send_watch_is_named_apart_from_the_pool(executor: ExecutorProcess) -> None:
    """While a command's output is streamed, its send watch reads as itself, not as a pool thread;
    when the stream is given up it ends, and the pool's threads stay (at most SERVER_THREADS)."""
    assert len(SEND_WATCH_THREAD_NAME.encode()) <= 15 and SEND_WATCH_THREAD_NAME != CALL_THREAD_NAME
    ex = executor
    with grpc.insecure_channel(ex.address) as channel:
        request = pb.CommandRequest(command="exec yes", timeout_ms=int(FAR_S * 1000), max_output_bytes=16 << 20)
        stream = channel.unary_stream(RUN)(request.SerializeToString(), metadata=meta(ex), timeout=FAR_S)
        first = pb.CommandEvent.FromString(next(stream))
        assert first.stdout.startswith(b"y\n"), first
        assert poll_until(lambda: thread_names(ex.pid)[SEND_WATCH_THREAD_NAME] == 1, BOUND_S), thread_names(ex.pid)
        assert 1 <= thread_names(ex.pid)[CALL_THREAD_NAME] <= SERVER_THREADS, thread_names(ex.pid)
        stream.cancel()
    assert poll_until(lambda: thread_names(ex.pid)[SEND_WATCH_THREAD_NAME] == 0, BOUND_S), thread_names(ex.pid)
    assert 1 <= thread_names(ex.pid)[CALL_THREAD_NAME] <= SERVER_THREADS, thread_names(ex.pid)
