"""SSE fan-out internals: the direct socket write path, its fallback, shared chunks, disconnects.

The contract itself (frames, resume, filters, heartbeats, slow clients, shutdown) is in
test_sse.py; these tests pin down what the fan-out batching added: the live path writes HTTP/1.1
chunks straight to the socket (``runtime.sse_socket``), the ordinary quart path still works when
that is unavailable, and many subscribers of one filter share chunks without disturbing each
other when some of them leave.
"""

from __future__ import annotations

import socket

import pytest
import trio

import runtime.stream_api as stream_api
from runtime.sse_socket import ChunkedSocketWriter

from .conftest import API, LIMIT, Daemon, parse_block


def dechunk(body: bytes) -> tuple[bytes, bytes]:
    """Undo HTTP/1.1 chunked framing: (payload of the complete chunks, what is left over)."""
    text = b""
    while True:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            return text, body
        size = int(size_line, 16)
        if size == 0 or len(rest) < size + 2:
            return text, body
        assert rest[size:size + 2] == b"\r\n", "a chunk must end with CRLF"
        text, body = text + rest[:size], rest[size + 2:]


@pytest.fixture
def writers(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Records what ``direct_writer`` answered for each stream."""
    seen: list[object] = []
    real = stream_api.direct_writer

    def spy(scope):  # type: ignore[no-untyped-def]
        w = real(scope)
        seen.append(w)
        return w

    monkeypatch.setattr(stream_api, "direct_writer", spy)
    return seen


async def test_live_frames_go_out_as_well_formed_chunks_on_the_direct_path(daemon: Daemon, strong: str,
                                                                           writers: list[object]):
    with trio.fail_after(LIMIT):
        s = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with s:
            await s.send_all(f"GET {API}/events/stream HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
                             f"Authorization: Bearer {strong}\r\n\r\n".encode())
            data = b""
            while b"lens stream" not in data:
                data += await s.receive_some(65536)
            made = [await daemon.project(strong, f"p{i}") for i in range(3)]
            want = [p["seq"] for p in made]
            while True:
                text, _ = dechunk(data.partition(b"\r\n\r\n")[2])
                ids = [parse_block(b).id for b in text.split(b"\n\n") if b.startswith(b"id:")]
                if ids and ids[-1] >= want[-1]:
                    break
                data += await s.receive_some(65536)
    assert [type(w).__name__ for w in writers] == ["ChunkedSocketWriter"]  # plain HTTP/1.1: direct
    assert ids == want
    blocks = [parse_block(b) for b in text.split(b"\n\n") if b.startswith(b"id:")]
    assert [b.event for b in blocks] == ["project.created"] * 3
    assert [b.json()["project_id"] for b in blocks] == [p["id"] for p in made]


async def test_the_ordinary_path_when_direct_writes_are_unavailable(daemon: Daemon, strong: str, reader: str,
                                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(stream_api, "direct_writer", lambda scope: None)
    p = await daemon.project(strong, "one")
    sid = (await daemon.session(strong, p["id"]))["id"]
    async with daemon.sse(reader) as everything, daemon.sse(reader, params={"session": sid}) as one:
        await everything.next()
        await one.next()
        acks = [(await daemon.submit(strong, sid, f"r{i}", f"hello {i}"))["seq"] for i in range(3)]
        await daemon.wait_idle(strong, sid)
        logged = [e["seq"] for e in await daemon.events(reader, sid)]
        with trio.fail_after(LIMIT):
            while not one.seqs or one.seqs[-1] < logged[-1]:
                assert await one.next() is not None
            while not everything.seqs or everything.seqs[-1] < logged[-1]:
                assert await everything.next() is not None
    # both streams were subscribed before the first submit: each has everything from there on
    assert set(acks) <= set(one.seqs) and set(acks) <= set(everything.seqs)
    assert one.seqs == [s for s in logged if s >= one.seqs[0]]
    assert everything.seqs == list(range(everything.seqs[0], logged[-1] + 1))  # gap-free


async def test_subscribers_leaving_do_not_disturb_the_others(daemon: Daemon, strong: str, reader: str):
    first = await daemon.project(strong, "first")
    async with trio.open_nursery() as nursery:
        leavers: list[trio.CancelScope] = []
        got: dict[int, list[int]] = {}

        async def follow(i: int, until: int, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                if i % 2:
                    leavers.append(scope)
                async with daemon.sse(reader, last_event_id=first["seq"]) as stream:
                    await stream.next()
                    task_status.started()
                    while not stream.seqs or stream.seqs[-1] < until:
                        assert await stream.next() is not None
                    got[i] = stream.seqs

        for i in range(12):
            await nursery.start(follow, i, first["seq"] + 6)
        for j in range(3):
            await daemon.project(strong, f"a{j}")
        for scope in leavers:  # half the subscribers hang up mid-stream
            scope.cancel()
        for j in range(3):
            await daemon.project(strong, f"b{j}")
    assert sorted(got) == list(range(0, 12, 2))
    assert all(seqs == list(range(first["seq"] + 1, first["seq"] + 7)) for seqs in got.values())


async def test_chunked_socket_writer_partial_writes_and_a_closed_socket():
    a, b = trio.socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        w = ChunkedSocketWriter(a)
        assert w.write_nowait(b"") is None
        data = b"x" * (1 << 20)
        rest = w.write_nowait(data)
        assert rest is not None and 0 < len(rest) < len(data) + 20  # the socket took a part
        received = bytearray()

        async def drain() -> None:
            while len(received) < len(data) + len(b"100000\r\n\r\n"):
                received.extend(await b.recv(1 << 16))

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain)
                await w.write_rest(rest)
        assert bytes(received) == b"100000\r\n" + data + b"\r\n"
        a.close()
        with pytest.raises(BrokenPipeError):
            w.write_nowait(b"late")
