"""A client whose executor went away reaches it again soon after it is back.

grpc spaces its attempts to reconnect a channel further and further apart (1 s, ×1.6 each time,
up to 120 s by default): a remote executor back after a minute away was refused for ~35 s more.
The client caps the spacing (``RECONNECT_BACKOFF_MAX_MS``, 2 s). Checked here with the cap made
small, so that a short outage already tells the two apart: without the cap the executor, back
after 6 s, is reached ~3 s later; with a 300 ms cap, within a second.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import trio

import runtime.executor_client as executor_client
from runtime.executor_client import ExecutorClient, ExecutorError

from .conftest import reaping, running_executor, start_executor, stop_process

DOWN_SECONDS = 6.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_client_reaches_an_executor_back_on_its_address_within_the_reconnect_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor_client, "RECONNECT_BACKOFF_MAX_MS", 300)
    listen = f"127.0.0.1:{free_port()}"
    ex = start_executor(tmp_path / "one", listen=listen)
    client = ExecutorClient(ex.address, ex.token)
    try:
        await client.hello()
        stop_process(ex.proc)
        gone = time.monotonic()
        refused = 0
        while time.monotonic() - gone < DOWN_SECONDS:  # calls meanwhile fail (and grow grpc's back-off)
            with pytest.raises(ExecutorError):
                await client.hello(timeout=1.0)
            refused += 1
            await trio.sleep(0.1)
        assert refused >= 5
        ex = start_executor(tmp_path / "two", token=ex.token, listen=listen)
        back = time.monotonic()
        with trio.fail_after(10):
            while True:
                try:
                    await client.hello(timeout=1.0)
                    break
                except ExecutorError:
                    await trio.sleep(0.05)
        assert time.monotonic() - back < 1.5, "the client waited out grpc's growing back-off"
    finally:
        client.close()
        stop_process(ex.proc)


async def test_a_call_past_its_deadline_says_so_not_that_the_executor_is_unreachable() -> None:
    # A call that outlives its deadline (a listing of a huge tree) has, as a rule, reached a
    # working executor: it answered "the executor is not reachable", sending an operator after a
    # dead process, and its code was EXECUTOR_UNAVAILABLE, so a client could not tell "too slow"
    # from "down". It is EXECUTOR_TIMEOUT now, an ExecutorUnavailable still (whoever handles that
    # handles this), and the client is not marked lost. Here the peer takes the connection and
    # never answers.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    client = ExecutorClient(f"127.0.0.1:{silent.getsockname()[1]}", "t" * 43)
    try:
        with pytest.raises(executor_client.ExecutorUnavailable) as info:
            await client.call("read_file", {"path": "."}, timeout=0.5)
    finally:
        client.close()
        silent.close()
    exc = info.value
    assert isinstance(exc, executor_client.ExecutorTimeout)
    assert exc.code == "EXECUTOR_TIMEOUT" and exc.status == "DEADLINE_EXCEEDED", (exc.code, exc.status, exc.message)
    assert "did not answer within the call's deadline" in exc.message and "not reachable" not in exc.message
    assert not client.lost


async def test_a_refused_connection_is_still_executor_unavailable_not_a_timeout() -> None:
    # Nothing listens on the port: the connection is refused at once, long before the deadline.
    client = ExecutorClient(f"127.0.0.1:{free_port()}", "t" * 43)
    try:
        with pytest.raises(executor_client.ExecutorUnavailable) as info:
            await client.call("read_file", {"path": "."}, timeout=30)
    finally:
        client.close()
    exc = info.value
    assert not isinstance(exc, executor_client.ExecutorTimeout)
    assert exc.code == "EXECUTOR_UNAVAILABLE" and exc.status == "UNAVAILABLE", (exc.code, exc.status, exc.message)
    assert "not reachable" in exc.message and client.lost


async def test_a_run_refused_at_connect_is_unsent_and_one_whose_executor_died_under_it_is_not(
        tmp_path: Path) -> None:
    # ``unsent`` (no Stop, no warning for a command that never ran) rests on grpc's wording for a
    # call it could put on no connection: no signal apart from the text tells the two (both are
    # UNAVAILABLE with no metadata, and the channel's state when the failure is read may have
    # been moved by another call since; docs/decisions.md). Pinned here for the grpcio in use.
    client = ExecutorClient(f"127.0.0.1:{free_port()}", "t" * 43)
    try:
        with trio.fail_after(10):
            async with client.run("true") as events:
                [refused] = [ev async for ev in events]
    finally:
        client.close()
    assert isinstance(refused, executor_client.ExecutorUnavailable) and refused.unsent, refused
    with reaping() as groups:
        async with running_executor(tmp_path) as (ex, client):
            with trio.fail_after(10):
                async with client.run("echo $$; exec sleep 30") as events:
                    groups.append(int((await events.receive()).stdout))  # (running, silent from here)
                    ex.proc.kill()
                    [lost] = [ev async for ev in events]
    assert isinstance(lost, executor_client.ExecutorUnavailable) and not lost.unsent, lost
    assert lost.status == "UNAVAILABLE", lost.message
