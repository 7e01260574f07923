"""A client that stops reading is reset on the path where the server writes the stream too.

``test_sse.py::test_a_client_that_stops_reading_is_reset`` covers the direct socket path of plain
HTTP/1.1. Here the stream is written through the server (runtime.write_stall): an HTTP/1.0 client
on a raw socket that never reads, and an HTTP/2 (prior knowledge) stream whose flow-control window
the client never opens again, beside a stream on the same connection that it keeps reading. The
daemon's bound is 1 s (``write_stall_seconds``); the writer and the other readers go on, and the
stalled client is reset within the bound: its HTTP/1.0 connection closed by the server (which
hypercorn does once the request's task has ended), its HTTP/2 stream alone reset.
"""

from __future__ import annotations

import gc
import inspect
import socket

import h2.config
import h2.connection
import h2.errors
import h2.events
import trio

from runtime.stream_api import _sse

from .conftest import API, BUSY, LIMIT, DaemonFactory, parse_block, slow_stream_request

STALL = 1.0  # the daemon's write_stall_seconds here
MARGIN = 2.0  # what the reset may take past the bound (the watch looks every 0.25 s)
BIG = 64 * 1024  # characters of each input: a few fill any socket buffer or HTTP/2 window
TCP_CLOSE = 7  # tcpi_state of a socket its peer reset


def tcp_state(sock: trio.socket.SocketType) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def open_streams() -> int:
    """The SSE bodies of this process not yet ended (their tasks still hold them)."""
    gc.collect()
    return sum(1 for o in gc.get_objects()
               if inspect.isasyncgen(o) and o.ag_code is _sse.__code__ and o.ag_frame is not None)


async def streams_down_to(n: int, since: float) -> None:
    """Wait (bounded) until ``n`` stream bodies are open; within the stall's bound of ``since``."""
    with trio.fail_after(LIMIT):
        while open_streams() != n:
            await trio.sleep(0.05)
    took = trio.current_time() - since
    assert took < STALL + MARGIN, f"the stalled stream's task ended {took:.1f} s after the stall began"


async def test_an_http_1_0_client_that_never_reads_is_reset_after_the_stall(daemon_factory: DaemonFactory):
    d = await daemon_factory(write_stall_seconds=STALL)
    token = await d.pair("c", strong=True)
    p = await d.project(token)
    sid = (await d.session(token, p["id"]))["id"]
    await d.submit(token, sid, "busy", BUSY)  # the run holds: each input below is one event
    await d.wait_running_call(token, sid)
    with await slow_stream_request(d.port, token, f"session={sid}", http="1.0") as slow:
        async with d.sse(token, params={"session": sid}) as fast:
            await fast.next()
            with trio.fail_after(LIMIT):
                while open_streams() != 2:  # (the slow one's body may start a moment later)
                    await trio.sleep(0.05)
            acks: list[int] = []
            with trio.fail_after(LIMIT):
                for i in range(12):  # ~800 KB: far more than the slow client's buffers hold
                    acks.append((await d.submit(token, sid, f"big{i}", f"{i:04d}" + "x" * BIG))["seq"])
                    await fast.until(lambda m, seq=acks[-1]: m.id == seq)
            stalled = trio.current_time()
            with trio.fail_after(LIMIT):  # the server closes the connection: a reset arrives
                while tcp_state(slow) != TCP_CLOSE:
                    await trio.sleep(0.05)
            took = trio.current_time() - stalled
            assert took < STALL + MARGIN, f"reset {took:.1f} s after the client stopped taking bytes"
            await streams_down_to(1, stalled)  # the reader's alone
            # the writer and a reader that keeps up go on
            more = (await d.submit(token, sid, "after", "after the reset"))["seq"]
            await fast.until(lambda m: m.id == more)
        assert fast.seqs[-13:] == acks + [more]
    assert (await d.get("/health")).status_code == 200


class H2Reader:
    """A prior-knowledge HTTP/2 client connection; it reads and acknowledges every stream's data
    except the streams in ``stalled`` (whose window it never opens again)."""

    def __init__(self, stream: trio.SocketStream, stalled: set[int]) -> None:
        self.stream = stream
        self.stalled = stalled
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(1 << 30)  # the connection's window: never the limit
        self.data: dict[int, bytes] = {}
        self.resets: dict[int, tuple[int, float]] = {}  # stream -> (error code, trio time)
        self.ended: set[int] = set()
        self.changed = trio.Event()

    def get(self, stream_id: int, path: str, token: str, port: int) -> None:
        self.data[stream_id] = b""
        self.conn.send_headers(stream_id, [(":method", "GET"), (":path", f"{API}{path}"), (":scheme", "http"),
                                           (":authority", f"127.0.0.1:{port}"),
                                           ("authorization", f"Bearer {token}")], end_stream=True)

    async def flush(self) -> None:
        await self.stream.send_all(self.conn.data_to_send())

    async def run(self) -> None:
        await self.flush()
        while True:
            data = await self.stream.receive_some(1 << 16)
            if not data:
                return
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.DataReceived):
                    self.data[ev.stream_id] = self.data.get(ev.stream_id, b"") + ev.data
                    if ev.stream_id not in self.stalled:
                        self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamReset):
                    self.resets[ev.stream_id] = (ev.error_code, trio.current_time())
                elif isinstance(ev, h2.events.StreamEnded):
                    self.ended.add(ev.stream_id)
            await self.flush()
            self.changed.set()
            self.changed = trio.Event()

    async def until(self, done) -> None:  # type: ignore[no-untyped-def]
        with trio.fail_after(LIMIT):
            while not done():
                await self.changed.wait()

    def seqs(self, stream_id: int) -> list[int]:
        blocks = self.data[stream_id].split(b"\n\n")[:-1]  # (the last may be cut)
        return [m.id for m in map(parse_block, blocks) if m.id is not None]


async def test_an_http_2_stream_whose_window_stays_shut_is_reset_alone(daemon_factory: DaemonFactory):
    d = await daemon_factory(write_stall_seconds=STALL)
    token = await d.pair("c", strong=True)
    p = await d.project(token)
    sid = (await d.session(token, p["id"]))["id"]
    await d.submit(token, sid, "busy", BUSY)
    await d.wait_running_call(token, sid)
    async with await trio.open_tcp_stream("127.0.0.1", d.port) as tcp, trio.open_nursery() as nursery:
        client = H2Reader(tcp, stalled={1})
        client.get(1, f"/events/stream?session={sid}", token, d.port)  # never opened again
        client.get(3, f"/events/stream?session={sid}", token, d.port)  # read as it comes
        nursery.start_soon(client.run)
        await client.until(lambda: b": lens stream" in client.data[1] and b": lens stream" in client.data[3])
        assert open_streams() == 2
        acks: list[int] = []
        for i in range(12):  # ~800 KB: far past stream 1's window (64 KiB)
            acks.append((await d.submit(token, sid, f"big{i}", f"{i:04d}" + "x" * BIG))["seq"])
            await client.until(lambda seq=acks[-1]: seq in client.seqs(3))
        stalled = trio.current_time()
        await client.until(lambda: 1 in client.resets)
        code, at = client.resets[1]
        assert code == h2.errors.ErrorCodes.CANCEL
        assert at - stalled < STALL + MARGIN, f"reset {at - stalled:.1f} s after the window was shut"
        assert len(client.seqs(1)) < len(acks)  # it did stall
        await streams_down_to(1, stalled)  # stream 3's alone
        # the connection's other stream, and the writer, go on; the connection serves new streams
        more = (await d.submit(token, sid, "after", "after the reset"))["seq"]
        await client.until(lambda: more in client.seqs(3))
        assert client.seqs(3)[-13:] == acks + [more] and 3 not in client.resets
        client.get(5, "/health", token, d.port)
        await client.flush()
        await client.until(lambda: 5 in client.ended)
        assert b'"status"' in client.data[5]
        nursery.cancel_scope.cancel()
