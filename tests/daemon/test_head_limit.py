"""The request head's limit at its edge (runtime.head_limit), however the bytes arrive.

Each request is written by hand on a raw socket to a real daemon (loopback, port 0), in one write
and one byte a write: a head of exactly ``HEAD_LIMIT`` bytes is read, one byte more is 431
``HEADERS_TOO_LARGE`` in the error shape, over HTTP/1.1, over HTTP/2 (prior knowledge), and for
a WebSocket handshake. A 20,000-byte head sent at once was answered 200 before: h11's bound
counted only what was unfinished after a read.
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trio

from runtime import daemon as daemon_module
from runtime.head_limit import HEAD_LIMIT, UNFINISHED_HEAD_BYTES

from .conftest import API, LIMIT, Daemon, assert_error_shape, parse_raw_response
from .test_http_connections import BOUND, closed_within, healthy

KEY = "Sec-WebSocket-Key: bKdPyn3u98cTfZJSh4TNeQ==\r\n"
WRITES = ["one write", "byte by byte"]
WRITES_AT_THE_BOUND = ["one write", "one byte, then the rest", "1,000 bytes a write"]  # (64 KiB a byte a write is slow)


@pytest.fixture
async def daemon(daemon_factory, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    """A daemon whose keep-alive bound, which also bounds the time a head takes to arrive, leaves a
    head written one byte a write the time it needs on a loaded machine."""
    monkeypatch.setattr(daemon_module, "KEEP_ALIVE_SECONDS", LIMIT)
    return await daemon_factory()


def http1_head(port: int, size: int, *lines: str) -> bytes:
    """A GET of ``/health`` whose head (request line to the blank line) is ``size`` bytes, padded
    by an ``X-Pad`` header line."""
    start = (f"GET {API}/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + "".join(line + "\r\n" for line in lines)
             + "X-Pad: ").encode()
    end = b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def pieces(raw: bytes, writes: str) -> list[bytes]:
    """``raw`` cut as ``writes`` says (one of WRITES or WRITES_AT_THE_BOUND)."""
    if writes == "one write":
        return [raw]
    if writes == "one byte, then the rest":
        return [raw[:1], raw[1:]]
    step = 1000 if writes == "1,000 bytes a write" else 1
    return [raw[i:i + step] for i in range(0, len(raw), step)]


async def exchange(port: int, raw: bytes, writes: str) -> bytes:
    """Write ``raw`` on a new connection (cut as :func:`pieces` cuts it) and read until the server
    closes it."""
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            try:
                for piece in pieces(raw, writes):
                    await stream.send_all(piece)
            except trio.BrokenResourceError:
                pass  # (refused before its end: the answer is read below)
            return await closed_within(stream, BOUND)


def assert_refused(data: bytes, size: int) -> None:
    r = parse_raw_response(data)
    assert r.status == 431, data[:300]
    assert r.headers.get("connection", "").lower() == "close", data[:300]
    assert int(r.headers["content-length"]) == len(r.body), data[:300]
    code, message = assert_error_shape(r, f"a head of {size} bytes")
    assert code == "HEADERS_TOO_LARGE", data[:300]
    assert f"the request head is {size} bytes; at most {HEAD_LIMIT} are read" in message, message


# --------------------------------------------------------------------------- HTTP/1.1


@pytest.mark.parametrize("writes", WRITES)
async def test_a_head_at_the_limit_is_read_and_one_byte_more_is_431(daemon: Daemon, writes: str) -> None:
    raw = http1_head(daemon.port, HEAD_LIMIT, "Connection: close")
    assert raw.index(b"\r\n\r\n") + 4 == HEAD_LIMIT
    data = await exchange(daemon.port, raw, writes)
    assert parse_raw_response(data).status == 200, data[:300]
    assert_refused(await exchange(daemon.port, http1_head(daemon.port, HEAD_LIMIT + 1), writes), HEAD_LIMIT + 1)
    await healthy(daemon)


async def test_a_client_field_named_as_the_dropped_fields_count_is_an_ordinary_field(daemon: Daemon) -> None:
    """The field the HTTP/2 decoder adds for the bytes it dropped is the decoder's alone: sent by a
    client over HTTP/1.1 it was read as that count — a value that is no number ended the request
    in a 500 with an empty body (a traceback in the log), a large one refused a small head."""
    for value in ("abc", "99999", ""):
        raw = http1_head(daemon.port, 200, f"Lens-Dropped-Field-Bytes: {value}", "Connection: close")
        r = parse_raw_response(await exchange(daemon.port, raw, "one write"))
        assert r.status == 200, (value, r)
    assert_refused(await exchange(daemon.port, http1_head(daemon.port, HEAD_LIMIT + 1, "Lens-Dropped-Field-Bytes: 1"),
                                  "one write"), HEAD_LIMIT + 1)
    await healthy(daemon)


async def test_a_head_of_20000_bytes_in_one_write_is_431(daemon: Daemon) -> None:
    """The case that was answered 200: the whole head in one read, never unfinished past h11's bound."""
    assert_refused(await exchange(daemon.port, http1_head(daemon.port, 20_000), "one write"), 20_000)


@pytest.mark.parametrize("writes", WRITES)
async def test_a_websocket_handshake_past_the_limit_is_431(daemon: Daemon, writes: str) -> None:
    """At the limit the handshake reaches the app (which serves no WebSocket route); one byte more
    is 431 before it."""
    lines = ("Connection: upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", KEY.strip())
    at = await exchange(daemon.port, http1_head(daemon.port, HEAD_LIMIT, *lines), writes)
    assert parse_raw_response(at).status == 400, at[:300]  # (the app's answer: no WebSocket route)
    past = await exchange(daemon.port, http1_head(daemon.port, HEAD_LIMIT + 1, *lines), writes)
    assert_refused(past, HEAD_LIMIT + 1)
    await healthy(daemon)


# --------------------------------------------------------------------------- HTTP/2


def h2_request(conn: h2.connection.H2Connection, stream_id: int, port: int, size: int, websocket: bool = False) -> None:
    """Send a GET of ``/health`` (or a WebSocket's extended CONNECT, RFC 8441) whose head, counted
    as HTTP/1.1 writes it, is ``size`` bytes."""
    authority = f"127.0.0.1:{port}"
    method, extra = ("CONNECT", [("sec-websocket-version", "13")]) if websocket else ("GET", [])
    fixed = (len(f"{method} {API}/health HTTP/2\r\n") + len(f"host: {authority}\r\n")
             + sum(len(f"{name}: {value}\r\n") for name, value in extra) + len("x-pad: \r\n") + 2)
    pseudo = [(":method", method)] + ([(":protocol", "websocket")] if websocket else [])
    conn.send_headers(stream_id, pseudo + [(":path", f"{API}/health"), (":scheme", "http"), (":authority", authority)]
                      + extra + [("x-pad", "a" * (size - fixed))], end_stream=not websocket)


async def h2_answer(stream: trio.SocketStream, conn: h2.connection.H2Connection, stream_id: int,
                    writes: str) -> tuple[dict[bytes, bytes], bytes, list]:
    """Write what ``conn`` has to send, then read until stream ``stream_id`` ends: its headers,
    its body, and every event read."""
    with trio.fail_after(LIMIT):
        return await _h2_exchange(stream, conn, stream_id, writes)


async def _h2_exchange(stream: trio.SocketStream, conn: h2.connection.H2Connection, stream_id: int,
                       writes: str) -> tuple[dict[bytes, bytes], bytes, list]:
    out = conn.data_to_send()
    if writes == "one write":
        await stream.send_all(out)
    else:
        for i in range(len(out)):
            await stream.send_all(out[i:i + 1])
    events: list = []
    headers: dict[bytes, bytes] = {}
    body = b""
    while not any(isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)) and ev.stream_id == stream_id
                  for ev in events):
        data = await stream.receive_some(65536)
        assert data, f"the connection ended before the answer: {events}"
        for ev in conn.receive_data(data):
            events.append(ev)
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == stream_id:
                headers = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == stream_id:
                body += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, stream_id)
        await stream.send_all(conn.data_to_send())
    return headers, body, events


@pytest.mark.parametrize("writes", WRITES)
async def test_an_http2_head_at_the_limit_is_read_and_one_byte_more_is_431(daemon: Daemon, writes: str) -> None:
    """Over HTTP/2 the same head is counted (``:authority`` as the Host line): at the limit 200,
    one byte more 431 in the error shape, and the connection goes on serving."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
    async with stream:
        h2_request(conn, 1, daemon.port, HEAD_LIMIT)
        headers, _, events = await h2_answer(stream, conn, 1, writes)
        assert headers[b":status"] == b"200", events
        settings = next(ev for ev in events if isinstance(ev, h2.events.RemoteSettingsChanged))
        # (h2's own bound on the decoded list, a connection error past it, stays above the limit)
        advertised = settings.changed_settings[h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE].new_value
        assert advertised == 65536 > HEAD_LIMIT, advertised
        h2_request(conn, 3, daemon.port, HEAD_LIMIT + 1)
        headers, body, events = await h2_answer(stream, conn, 3, writes)
        assert headers[b":status"] == b"431", events
        assert headers[b"content-type"] == b"application/json" and b"connection" not in headers, headers
        r = parse_raw_response(b"HTTP/2 431 \r\ncontent-type: application/json\r\n\r\n" + body)
        code, message = assert_error_shape(r, "an HTTP/2 head one byte past the limit")
        assert code == "HEADERS_TOO_LARGE", body
        assert f"the request head is {HEAD_LIMIT + 1} bytes; at most {HEAD_LIMIT} are read" in message, message
        h2_request(conn, 5, daemon.port, 100)
        headers, _, events = await h2_answer(stream, conn, 5, "one write")
        assert headers[b":status"] == b"200", events
    await healthy(daemon)


@pytest.mark.parametrize("writes", WRITES)
async def test_an_http2_websocket_handshake_past_the_limit_is_431(daemon: Daemon, writes: str) -> None:
    """A WebSocket over HTTP/2 (extended CONNECT, which hypercorn offers) is counted the same way:
    at the limit it reaches the app, one byte more is 431 on its stream."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
    async with stream:
        await stream.send_all(conn.data_to_send())
        with trio.fail_after(LIMIT):
            while not conn.remote_settings.enable_connect_protocol:  # (the server's SETTINGS first)
                data = await stream.receive_some(65536)
                assert data, "the connection ended before the server's SETTINGS"
                conn.receive_data(data)
        h2_request(conn, 1, daemon.port, HEAD_LIMIT, websocket=True)
        headers, _, events = await h2_answer(stream, conn, 1, writes)
        assert headers.get(b":status") == b"400", events  # (the app's answer: no WebSocket route)
        h2_request(conn, 3, daemon.port, HEAD_LIMIT + 1, websocket=True)
        headers, body, events = await h2_answer(stream, conn, 3, writes)
        assert headers.get(b":status") == b"431", events
        r = parse_raw_response(b"HTTP/2 431 \r\ncontent-type: application/json\r\n\r\n" + body)
        assert assert_error_shape(r, "an HTTP/2 handshake one byte past the limit")[0] == "HEADERS_TOO_LARGE"
    await healthy(daemon)


# --------------------------------------------------------------------------- HTTP/2 past h2's bound


def h2_client() -> h2.connection.H2Connection:
    """A client connection that sends fields as given (surrounding whitespace too)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False))
    conn.initiate_connection()
    return conn


def h2_get(port: int, fields: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], int]:
    """The fields of a GET of ``/health`` with ``fields`` after its pseudo-headers, and its head's
    size as the limit counts it (a value without its surrounding whitespace)."""
    authority = f"127.0.0.1:{port}"
    size = (len(f"GET {API}/health HTTP/2\r\n") + len(f"host: {authority}\r\n")
            + sum(len(f"{name}: {value.strip(' ')}\r\n") for name, value in fields) + 2)
    return [(":method", "GET"), (":path", f"{API}/health"), (":scheme", "http"), (":authority", authority)] + fields, size


async def h2_status(stream: trio.SocketStream, conn: h2.connection.H2Connection, stream_id: int,
                    fields: list[tuple[str, str]]) -> tuple[bytes, str]:
    """Send a request of ``fields`` on ``stream_id``: its status, and the message of its error body."""
    conn.send_headers(stream_id, fields, end_stream=True)
    headers, body, events = await h2_answer(stream, conn, stream_id, "one write")
    assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
    if headers[b":status"] == b"200":
        return b"200", ""
    r = parse_raw_response(b"HTTP/2 " + headers[b":status"] + b" \r\ncontent-type: application/json\r\n\r\n" + body)
    return headers[b":status"], assert_error_shape(r, f"an HTTP/2 request answered {headers[b':status']!r}")[1]


async def served_on_a_new_http2_connection(port: int) -> None:
    """Another client's connection, opened after a bad one, is served."""
    conn = h2_client()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        assert (await h2_status(stream, conn, 1, h2_get(port, [])[0]))[0] == b"200"


PAST_H2_BOUND = [  # (what, the fields after the pseudo-headers)
    ("one field past 65,536 bytes", [("x-pad", "a" * 70_000)]),
    ("a list of 1 MB in CONTINUATION frames", [(f"x-pad-{i}", "a" * 15_000) for i in range(70)]),
    ("one 4,000-byte field repeated 1,000 times (HPACK indexes it: 4 MB decoded from 8 KB)",
     [("x-pad", "a" * 4_000)] * 1_000),
]


@pytest.mark.parametrize("what,fields", PAST_H2_BOUND, ids=[p[0] for p in PAST_H2_BOUND])
async def test_an_http2_header_list_past_h2s_bound_is_431_on_its_stream(daemon: Daemon, what, fields) -> None:
    """Past the ``SETTINGS_MAX_HEADER_LIST_SIZE`` the server sends (65,536 as HPACK counts it) h2
    ended the whole connection (GOAWAY ENHANCE_YOUR_CALM), with every other stream on it: the
    stream is answered 431 now, with the head's size, and the connection goes on. The next
    request on it is encoded with the HPACK table the refused one left (a 4,000-byte field it
    indexed is sent as its index): it is decoded as the client encoded it, so the server's
    table stayed the client's."""
    conn = h2_client()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
    async with stream:
        request, size = h2_get(daemon.port, fields)
        status, message = await h2_status(stream, conn, 1, request)
        assert status == b"431", message
        assert message.startswith(f"the request head is {size} bytes; at most {HEAD_LIMIT} are read"), message
        assert (await h2_status(stream, conn, 3, h2_get(daemon.port, [("x-pad", "a" * 4_000)])[0]))[0] == b"200"
    await served_on_a_new_http2_connection(daemon.port)


async def test_many_small_http2_fields_past_h2s_bound_are_431(daemon: Daemon) -> None:
    """HPACK counts 28 bytes more per field than the field's line: 2,500 empty fields are past
    h2's 65,536 and within the head's 16,384. The fields past the bound are not kept, so the
    request is refused (431, naming the setting) rather than read without them."""
    conn = h2_client()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
    async with stream:
        request, size = h2_get(daemon.port, [("x", "")] * 2_500)
        assert size <= HEAD_LIMIT
        status, message = await h2_status(stream, conn, 1, request)
        assert status == b"431" and "SETTINGS_MAX_HEADER_LIST_SIZE" in message, message
        assert (await h2_status(stream, conn, 3, h2_get(daemon.port, [])[0]))[0] == b"200"
    await served_on_a_new_http2_connection(daemon.port)


# --------------------------------------------------------------------------- heads padded with whitespace


@pytest.mark.parametrize("writes", WRITES_AT_THE_BOUND)
async def test_whitespace_around_http1_values_is_not_counted_and_bounded_as_written(daemon: Daemon,
                                                                                   writes: str) -> None:
    """h11 drops the spaces around a value, and the limit counts the head without them: a head at
    the limit as counted is read, one byte more is 431, with whitespace around a value. h11's
    bound on the head as written (``UNFINISHED_HEAD_BYTES``) holds however its bytes arrive: a
    head one byte longer than it is read, two bytes refused. A head of 70,000 bytes as written
    in one write was read before (h11 looked only when a read left the head unfinished)."""
    def padded(counted: int, written: int) -> bytes:
        head = http1_head(daemon.port, counted, "Connection: close")
        spaces = written - counted
        head = head.replace(b"X-Pad: ", b"X-Pad: " + b" " * (spaces // 2)).replace(
            b"\r\n\r\n", b" " * (spaces - spaces // 2) + b"\r\n\r\n")
        assert head.index(b"\r\n\r\n") + 4 == written
        return head

    assert parse_raw_response(await exchange(daemon.port, padded(HEAD_LIMIT, 40_000), writes)).status == 200
    assert_refused(await exchange(daemon.port, padded(HEAD_LIMIT + 1, 40_000), writes), HEAD_LIMIT + 1)
    at = UNFINISHED_HEAD_BYTES + 1  # (at most UNFINISHED_HEAD_BYTES of it is ever unfinished)
    assert parse_raw_response(await exchange(daemon.port, padded(HEAD_LIMIT, at), writes)).status == 200
    for written in (at + 1, 70_000):
        r = parse_raw_response(await exchange(daemon.port, padded(HEAD_LIMIT, written), writes))
        assert r.status == 431, (written, r)
        message = assert_error_shape(r, f"a head of {written} bytes as written")[1]
        assert f"more than {UNFINISHED_HEAD_BYTES} bytes arrived before its end" in message, message
    await healthy(daemon)


async def test_whitespace_around_http2_values_is_read_as_http1_reads_it(daemon: Daemon) -> None:
    """A value with surrounding whitespace is malformed in HTTP/2 (RFC 9113 8.2.1), and h2 ended
    the whole connection on it (GOAWAY PROTOCOL_ERROR). The whitespace is dropped now, as h11
    drops it: the same head is read (at the limit as counted) or refused (431, one byte more) as
    over HTTP/1.1, on its stream, and the connection goes on."""
    conn = h2_client()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
    async with stream:
        request, size = h2_get(daemon.port, [("x-pad", " \t ")])  # (an empty value, once dropped)
        assert (await h2_status(stream, conn, 1, request))[0] == b"200"
        pad = HEAD_LIMIT - h2_get(daemon.port, [("x-pad", "")])[1]
        request, size = h2_get(daemon.port, [("x-pad", " " * 500 + "a" * pad + "\t" * 500)])
        assert (await h2_status(stream, conn, 3, request))[0] == b"200"
        request, size = h2_get(daemon.port, [("x-pad", " " * 500 + "a" * (pad + 1) + "\t" * 500)])
        status, message = await h2_status(stream, conn, 5, request)
        assert status == b"431" and f"the request head is {HEAD_LIMIT + 1} bytes" in message, message
        assert (await h2_status(stream, conn, 7, h2_get(daemon.port, [])[0]))[0] == b"200"
    await served_on_a_new_http2_connection(daemon.port)
