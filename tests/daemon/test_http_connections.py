"""How long a connection to the daemon may be held by a client that sends too little (F-API-1).

Each test writes HTTP/1.1 by hand on a raw socket to a real daemon (loopback, port 0) and checks
that the server ends what the client left hanging within a bound: a connection that never sends
a request, a request head sent a byte at a time, a request body that stops arriving (or arrives
too slowly in all), a WebSocket handshake the server refused (Lens serves no WebSocket route),
an HTTP/2 connection whose requests are answered.
Bounds are made small where a test would otherwise wait for them (the daemon reads them when it
starts, or when a body is read); every wait of the client is bounded.
"""

from __future__ import annotations

import pytest
import trio

from runtime import http_parts
from runtime import daemon as daemon_module

from .conftest import API, LIMIT, Daemon, assert_error_shape, parse_raw_response, read_answer

BOUND = 3.0  # seconds: the server must have ended the connection by then (bounds here are 0.5 s)


async def closed_within(stream: trio.SocketStream, seconds: float) -> bytes:
    """Read ``stream`` until the server ends it (EOF or reset); fail if it is still open after
    ``seconds``. Returns what was read."""
    data = b""
    with trio.move_on_after(seconds):
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return data
            if not chunk:
                return data
            data += chunk
    raise AssertionError(f"the connection is still open {seconds} s on (read {data[:200]!r})")


async def healthy(d: Daemon) -> None:
    assert (await d.get("/health")).status_code == 200


# --------------------------------------------------------------------------- no request, or a slow head


async def test_a_connection_that_sends_no_request_is_closed(daemon_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection opened and left silent is closed by the keep-alive timer (hypercorn starts it
    for a new connection as for a recycled one)."""
    monkeypatch.setattr(daemon_module, "KEEP_ALIVE_SECONDS", 0.5)
    d = await daemon_factory()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
        async with stream:
            assert await closed_within(stream, BOUND) == b""
    await healthy(d)


async def test_a_request_head_sent_a_byte_at_a_time_is_cut_off(daemon_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slowloris: the keep-alive timer runs until a whole request head has arrived, so a head
    trickling in (a byte every 0.05 s, each resetting no timer) is cut off at that bound, on a
    fresh connection and on one kept alive after an answer."""
    monkeypatch.setattr(daemon_module, "KEEP_ALIVE_SECONDS", 0.5)
    d = await daemon_factory()
    head = f"GET {API}/health HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n".encode() + b"X-Slow: " + b"a" * 1000
    for kept_alive in (False, True):
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", d.port)
            async with stream:
                if kept_alive:
                    await stream.send_all(f"GET {API}/health HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n\r\n".encode())
                    assert (await read_answer(stream)).startswith(b"HTTP/1.1 200")
                start = trio.current_time()
                async with trio.open_nursery() as nursery:
                    async def trickle() -> None:
                        for i in range(len(head)):
                            try:
                                await stream.send_all(head[i:i + 1])
                            except (trio.BrokenResourceError, trio.ClosedResourceError):
                                return
                            await trio.sleep(0.05)

                    nursery.start_soon(trickle)
                    assert await closed_within(stream, BOUND) == b""  # no answer: the head never ended
                    nursery.cancel_scope.cancel()
                assert trio.current_time() - start < BOUND
    await healthy(d)


# --------------------------------------------------------------------------- a body that stops arriving


def pair_request(port: int, body: bytes, length: int | None = None, *, chunked: bool = False) -> bytes:
    head = f"POST {API}/pair/requests HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {len(body) if length is None else length}\r\n"
    return head.encode() + b"\r\n" + body


async def test_a_body_that_stops_arriving_is_refused_with_408(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``Content-Length`` larger than the body sent (or a chunked body whose end never comes)
    held the request and its connection for Quart's 60 s, then answered 408 with a code outside
    the error table. No byte for ``BODY_STALL_SECONDS`` is now 408 ``BODY_TIMEOUT`` in the error
    shape, and the connection is closed (the rest of the body would be read as a request)."""
    monkeypatch.setattr(http_parts, "BODY_STALL_SECONDS", 0.5)
    for raw in (pair_request(daemon.port, b'{"clientId": "x"}', 100),
                pair_request(daemon.port, b'11\r\n{"clientId": "x"}\r\n', chunked=True),
                pair_request(daemon.port, b"", 10)):
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            async with stream:
                start = trio.current_time()
                await stream.send_all(raw)
                data = await closed_within(stream, BOUND)
                assert trio.current_time() - start < BOUND
        r = parse_raw_response(data)
        assert r.status == 408, (raw, data)
        code, message = assert_error_shape(r, repr(raw))
        assert code == "BODY_TIMEOUT" and "stopped arriving" in message, message
        assert r.headers.get("connection") == "close"
        await healthy(daemon)
    # nothing was registered by the bodies that never ended
    assert daemon.pairs().find("x") is None


async def test_a_body_arriving_slowly_but_steadily_is_read(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is on a stall, not on the pace: a body whose bytes keep coming, each within
    the bound, is read whole even when it takes several times the bound in all."""
    monkeypatch.setattr(http_parts, "BODY_STALL_SECONDS", 0.5)
    body = b'{"clientId": "slow", "name": "a slow client"}'
    raw = pair_request(daemon.port, body)
    head, body_at = raw[:-len(body)], 0
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with stream:
            await stream.send_all(head)
            start = trio.current_time()
            while body_at < len(body):
                await stream.send_all(body[body_at:body_at + 4])
                body_at += 4
                await trio.sleep(0.1)
            assert trio.current_time() - start > 1.0  # (longer than the stall bound, in all)
            r = parse_raw_response(await read_answer(stream))
    assert r.status == 202, r.body


async def test_a_body_that_takes_too_long_in_all_is_refused_with_408(daemon: Daemon,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A body trickling in a byte at a time, each within the stall bound, ends at the whole
    body's bound (``BODY_SECONDS``, Quart's 60 s before)."""
    monkeypatch.setattr(http_parts, "BODY_STALL_SECONDS", 0.5)
    monkeypatch.setattr(http_parts, "BODY_SECONDS", 1.0)
    raw = pair_request(daemon.port, b"", 1000)
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with stream:
            await stream.send_all(raw)
            async with trio.open_nursery() as nursery:
                async def trickle() -> None:
                    for _ in range(1000):
                        try:
                            await stream.send_all(b" ")
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            return
                        await trio.sleep(0.1)

                nursery.start_soon(trickle)
                data = await closed_within(stream, BOUND)
                nursery.cancel_scope.cancel()
    r = parse_raw_response(data)
    assert r.status == 408, data
    code, message = assert_error_shape(r, "a trickling body")
    assert code == "BODY_TIMEOUT" and "longer than 1 s" in message, message
    await healthy(daemon)


# --------------------------------------------------------------------------- WebSocket handshakes


async def test_a_websocket_handshake_the_server_refused_ends_its_connection(daemon: Daemon) -> None:
    """A WebSocket handshake followed by data before its answer is refused by the server itself
    (400, ``connection: close``), and the app's own refusal is dropped; the server ended the
    stream only through the app's last message, so the connection stayed open until the client
    closed it (an idle socket and task each, with no timer running). It is closed after the
    answer now, whichever answer went out."""
    raw = (f"GET {API}/health HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\nConnection: upgrade\r\n"
           "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: bKdPyn3u98cTfZJSh4TNeQ==\r\n"
           "\r\nx\n").encode()
    for _ in range(10):  # (which answer goes out first varies)
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            async with stream:
                await stream.send_all(raw)
                data = await closed_within(stream, BOUND)
        assert data.startswith(b"HTTP/1.1 400 "), data
    # and a handshake without early data is answered by the app, then closed, as before
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with stream:
            await stream.send_all(raw[:-2])
            data = await closed_within(stream, BOUND)
    assert data.startswith(b"HTTP/1.1 400 "), data
    await healthy(daemon)


# --------------------------------------------------------------------------- HTTP/2


async def test_an_idle_http2_connection_is_closed_after_its_requests(daemon_factory,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP/2 connection (prior knowledge, no TLS: no credential needed for the health route
    or the dashboard) stayed open for ever once its requests were answered: its idle timer
    starts in the response's last send, which was cancelled with the request's task. It is
    closed by the keep-alive timer, as an HTTP/1.1 one is."""
    import h2.config
    import h2.connection
    import h2.events

    monkeypatch.setattr(daemon_module, "KEEP_ALIVE_SECONDS", 0.5)
    d = await daemon_factory()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
    async with stream:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        for stream_id in (1, 3):  # two requests, one after the other, on the one connection
            conn.send_headers(stream_id, [(":method", "GET"), (":path", f"{API}/health"), (":scheme", "http"),
                                          (":authority", f"127.0.0.1:{d.port}")], end_stream=True)
            await stream.send_all(conn.data_to_send())
            with trio.fail_after(LIMIT):
                ended = False
                while not ended:
                    data = await stream.receive_some(65536)
                    assert data, "the connection ended before the answer"
                    events = conn.receive_data(data)
                    ended = any(isinstance(ev, h2.events.StreamEnded) and ev.stream_id == stream_id for ev in events)
                    if out := conn.data_to_send():
                        await stream.send_all(out)
        start = trio.current_time()
        rest = await closed_within(stream, BOUND)
        assert trio.current_time() - start < BOUND
        events = conn.receive_data(rest) if rest else []
        assert not any(isinstance(ev, h2.events.DataReceived) for ev in events), events
    await healthy(d)
