"""The answers the HTTP server gives itself, before a request reaches the app (runtime.server_answers).

Each request is written by hand on a raw socket to a real daemon (loopback, port 0): requests
h11 cannot parse (400), a head still unfinished past the server's bound (431), a transfer
coding other than chunked (501), WebSocket handshakes hypercorn refuses before the app, and an HTTP/2 connection
that sends its preface (and SETTINGS) and then nothing. The seam into hypercorn is pinned first:
a hypercorn whose methods or call sites moved fails here by name, not by a changed answer.
"""

from __future__ import annotations

import inspect
import logging

import h2.errors
import h2.events
import h2.frame_buffer
import h2.utilities
import h11
import hpack
import pytest
import trio
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.stream import H2Stream
from hypercorn.config import Config as HyperConfig
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.ws_stream import Handshake, WSStream
from hypercorn.trio import serve as hyper_serve

from runtime import daemon as daemon_module
from runtime import server_answers
from runtime.head_limit import UNFINISHED_HEAD_BYTES

from .conftest import API, LIMIT, Daemon, assert_error_shape, parse_raw_response
from .test_http_connections import BOUND, closed_within, healthy

KEY = "Sec-WebSocket-Key: bKdPyn3u98cTfZJSh4TNeQ==\r\n"


# --------------------------------------------------------------------------- the seam


def h2_events_source() -> str:
    return inspect.getsource(H2Protocol._handle_events._lens_original)  # type: ignore[attr-defined]


def test_the_seam_into_hypercorn_is_where_it_was() -> None:
    """The methods exist with the parameters the replacements take, are replaced, and are still
    called where the server answers (or reads, starts HTTP/2, handles its frames, decodes a
    header block) itself. An upgrade of hypercorn, h11, h2 or hpack that moves any of it fails here."""
    assert server_answers.install() == []
    for cls, name, params, _ in server_answers.SEAMS:
        method = vars(cls)[name]
        assert getattr(method, "_lens_original", None) is not None, f"{cls.__name__}.{name} is not replaced"
        assert tuple(inspect.signature(method._lens_original).parameters) == params
    for cls, name, params in server_answers.DECODER_SEAMS:  # (extended by the daemon's HPACK decoder)
        assert tuple(inspect.signature(vars(cls)[name]).parameters) == params, f"{cls.__name__}.{name}"
    decoding = inspect.getsource(hpack.Decoder.decode)
    assert "header, consumed = self._decode_indexed(" in decoding and "if header:" in decoding
    assert "return self._decode_literal(data, should_index=" in inspect.getsource(hpack.Decoder._decode_literal_index)
    assert "_decode_headers(self.decoder, frame.data)" in inspect.getsource(H2Connection._receive_headers_frame)
    assert "self.decoder.max_header_list_size = " in inspect.getsource(H2Connection._local_settings_acked)
    # Malformed fields answered on their stream: h2 handles a HEADERS frame through its dispatch
    # table (the daemon's connection puts its own handler there), opens the stream, then checks
    # the fields in _process_received_headers (replaced: MalformedFields); hypercorn flushes what
    # h2 queued after handling a read's events, and closes a stream h2 reports reset.
    assert "HeadersFrame: self._receive_headers_frame," in inspect.getsource(H2Connection.__init__)
    assert "self._frame_dispatch_table[frame.__class__](frame)" in inspect.getsource(H2Connection._receive_frame)
    assert "frames, stream_events = stream.receive_headers(" in inspect.getsource(H2Connection._receive_headers_frame)
    assert "headers_event.headers = self._process_received_headers(" in inspect.getsource(H2Stream.receive_headers)
    assert "headers = validate_headers(headers, header_validation_flags)" in inspect.getsource(
        H2Stream._process_received_headers._lens_original)  # type: ignore[attr-defined]
    assert "await self._handle_events(events)" in inspect.getsource(H2Protocol.handle)
    assert "elif isinstance(event, h2.events.StreamReset):\n                await self._close_stream(event.stream_id)" in h2_events_source()
    assert h2_events_source().rstrip().endswith("await self._flush()")
    for method, params in [(H2Connection.send_headers, ("self", "stream_id", "headers", "end_stream")),
                           (H2Connection.send_data, ("self", "stream_id", "data", "end_stream")),
                           (H2Connection.reset_stream, ("self", "stream_id", "error_code")),
                           (H2Connection.local_flow_control_window, ("self", "stream_id")),
                           (h2.utilities.extract_method_header, ("headers",)),
                           (h2.events.StreamReset, ("stream_id", "error_code", "remote_reset"))]:
        assert tuple(inspect.signature(method).parameters)[:len(params)] == params, method
    assert "self.max_outbound_frame_size = " in inspect.getsource(H2Connection.__init__)
    # The last malformed requests: content-length read (replaced: MalformedFields) before the
    # fields' checks; a body's length checked on DATA (InvalidBodyLengthError, caught by the
    # daemon's handler of DATA frames, which hands the frame's bytes back to the window).
    assert "self._initialize_content_length(headers)" in inspect.getsource(H2Stream.receive_headers)
    assert "raise ProtocolError(msg)" in inspect.getsource(
        H2Stream._initialize_content_length._lens_original)  # type: ignore[attr-defined]
    assert "DataFrame: self._receive_data_frame," in inspect.getsource(H2Connection.__init__)
    assert "frames, stream_events = stream.receive_data(" in inspect.getsource(H2Connection._receive_data_frame)
    assert "self._track_content_length(len(data), end_stream)" in inspect.getsource(H2Stream.receive_data)
    assert "raise InvalidBodyLengthError(expected, actual)" in inspect.getsource(H2Stream._track_content_length)
    assert tuple(inspect.signature(H2Connection.acknowledge_received_data).parameters) == (
        "self", "acknowledged_size", "stream_id")
    # (a request ended by HEADERS short of its content-length: the stream's two counts, read
    # after h2 has taken the frame, and h2 buffering CONTINUATION frames into the HEADERS frame)
    stream_init = inspect.getsource(H2Stream.__init__)
    assert "self._expected_content_length: int | None = None" in stream_init
    assert "self._actual_content_length = 0" in stream_init
    assert "self._actual_content_length += length" in inspect.getsource(H2Stream._track_content_length)
    assert "self._expected_content_length = content_length" in inspect.getsource(
        H2Stream._initialize_content_length._lens_original)  # type: ignore[attr-defined]
    assert "f = self._headers_buffer[0]\n                f.flags.add(\"END_HEADERS\")" in inspect.getsource(
        h2.frame_buffer.FrameBuffer._update_header_buffer)  # (END_STREAM stays on the HEADERS frame)
    h2_events = h2_events_source()
    assert "await self._create_stream(event)\n                    await self.send(Updated(idle=False))" in h2_events
    h11_reading = inspect.getsource(H11Protocol._handle_events)
    assert "except h11.RemoteProtocolError as error:" in h11_reading
    assert "await self._send_error_response(error.error_status_hint)" in h11_reading
    h11_handle = inspect.getsource(H11Protocol.handle._lens_original)  # type: ignore[attr-defined]
    assert "self.connection.receive_data(event.data)\n            await self._handle_events()" in h11_handle
    h11_next = inspect.getsource(h11.Connection.next_event)  # (the bound h11 checks, on the buffer the cut measures)
    assert "if len(self._receive_buffer) > self._max_incomplete_event_size:" in h11_next
    assert "return await self.protocol.handle(RawData(data=error.data))" in inspect.getsource(ProtocolWrapper.handle)
    ws_handle = inspect.getsource(WSStream.handle._lens_original)  # type: ignore[attr-defined]
    assert "elif not self.handshake.is_valid():\n                await self._send_error_response(400)" in ws_handle
    # (the handshake's lists read as ASCII, refused before: server_answers.HANDSHAKE_LISTS)
    assert "self.handshake = Handshake(event.headers, event.http_version)" in ws_handle
    handshake = inspect.getsource(Handshake.__init__)
    assert all(f'name == b"{name.decode()}"' in handshake for name in server_answers.HANDSHAKE_LISTS), handshake
    assert "self.subprotocols = split_comma_header(value)" in handshake
    assert "except H2ProtocolAssumedError" in inspect.getsource(ProtocolWrapper.handle)
    assert "await self.protocol.initiate()" in inspect.getsource(ProtocolWrapper.handle)


async def test_another_hypercorn_server_keeps_its_own_answers() -> None:
    """The replacements act for the daemon's server only (its config is a ``ServerConfig``): any
    other hypercorn server in the process answers as hypercorn does."""
    server_answers.install()

    async def app(scope, receive, send):  # noqa: ANN001 - a minimal ASGI app
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    config = HyperConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: hyper_serve(app, config, task_status=task_status))
        port = int(binds[0].rsplit(":", 1)[1])
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(b"GARBAGE\r\n\r\n")
                data = await closed_within(stream, BOUND)
            # (a malformed HTTP/2 field: h2's connection error, GOAWAY PROTOCOL_ERROR, as before)
            conn = H2Connection(H2Configuration(client_side=True, validate_outbound_headers=False,
                                                normalize_outbound_headers=False))
            conn.initiate_connection()
            conn.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "a"),
                                  ("X-Upper", "1")], end_stream=True)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(conn.data_to_send())
                h2_events = conn.receive_data(await closed_within(stream, BOUND))
        nursery.cancel_scope.cancel()
    assert data.startswith(b"HTTP/1.1 400 ") and b"content-length: 0\r\n" in data and data.endswith(b"\r\n\r\n"), data
    assert any(isinstance(ev, h2.events.ConnectionTerminated) and ev.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
               for ev in h2_events), h2_events


async def test_requests_refused_before_the_app_reach_the_access_log() -> None:
    """A request refused before it became an ASGI request (h11's 400 and 431, a malformed HTTP/2
    field's 400 on its stream) goes to the server's access log as every request does, with its
    status, client and protocol, and never a field's bytes (no path, no headers). The daemon
    itself runs with no access log (``hc.accesslog = None``): a server of the daemon's config
    class with one shows the lines."""
    server_answers.install()
    secret = "sk-access-log-secret-91"
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    access = logging.getLogger("lens.test.access")
    access.addHandler(Lines())
    access.setLevel(logging.INFO)
    access.propagate = False

    async def app(scope, receive, send):  # noqa: ANN001 - a minimal ASGI app
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    config = server_answers.ServerConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = access
    config.errorlog = None
    config.h11_max_incomplete_size = 1024
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: hyper_serve(app, config, task_status=task_status))
        port = int(binds[0].rsplit(":", 1)[1])
        with trio.fail_after(LIMIT):
            for raw in (f"GET /{secret} HTTP/1.1\r\nHost: a\r\nx-a: {secret}\0\r\n\r\n".encode(),
                        f"GET /{secret} HTTP/1.1\r\nHost: a\r\nx-a: {secret * 100}\r\n\r\n".encode()):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    await stream.send_all(raw)
                    await closed_within(stream, BOUND)
            conn = H2Connection(H2Configuration(client_side=True, validate_outbound_headers=False,
                                                normalize_outbound_headers=False))
            conn.initiate_connection()
            fields = [(":method", "GET"), (":path", "/ok"), (":scheme", "http"), (":authority", "a")]
            conn.send_headers(1, fields, end_stream=True)
            conn.send_headers(3, fields[:1] + [(":path", f"/{secret}")] + fields[2:] + [("X-Upper", secret)],
                              end_stream=True)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(conn.data_to_send())
                ended: set[int] = set()
                while ended != {1, 3}:
                    data = await stream.receive_some(65536)
                    assert data, "the connection was closed"
                    ended |= {ev.stream_id for ev in conn.receive_data(data) if isinstance(ev, h2.events.StreamEnded)}
                    await stream.send_all(conn.data_to_send())
            while len(lines) < 4:  # (the refused stream is logged once its read's events are handled)
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert not any(secret in line for line in lines), lines
    assert any('"- - 1.1" 400 ' in line and line.startswith("127.0.0.1:") for line in lines), lines
    assert any('"- - 1.1" 431 ' in line for line in lines), lines
    assert any('"GET - 2" 400 ' in line for line in lines), lines
    assert any('"GET /ok 2" 200 ' in line for line in lines), lines  # (a request read: logged as ever)


# --------------------------------------------------------------------------- HTTP/1.1


async def refused(d: Daemon, raw: bytes, status: int, code: str) -> str:
    """Send ``raw`` on a new connection: the answer is ``status`` with ``code`` in the error shape,
    says ``connection: close``, and the connection is closed after it. Returns the message."""
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
        async with stream:
            await stream.send_all(raw)
            data = await closed_within(stream, BOUND)
    r = parse_raw_response(data)
    assert r.status == status, data
    assert r.headers.get("connection", "").lower() == "close", data
    assert int(r.headers["content-length"]) == len(r.body), data
    got, message = assert_error_shape(r, repr(raw[:80]))
    assert got == code, data
    return message


def request(port: int, *lines: str, method: str = "GET", body: bytes = b"") -> bytes:
    return (f"{method} {API}/health HTTP/1.1\r\n" + "".join(line + "\r\n" for line in lines) + "\r\n").encode() + body


MALFORMED = [  # (what, the request given the port, a fragment of the message)
    ("a request line h11 cannot parse", lambda p: b"GARBAGE secret-token\r\n\r\n", "illegal request line"),
    ("no Host", lambda p: request(p), "Missing mandatory Host: header"),
    ("two Hosts", lambda p: request(p, f"Host: 127.0.0.1:{p}", f"Host: 127.0.0.1:{p}"), "multiple Host"),
    ("a NUL in a value", lambda p: request(p, f"Host: 127.0.0.1:{p}", "Authorization: Bearer secret-token\0"),
     "illegal header line"),
    ("a bad Content-Length", lambda p: request(p, f"Host: 127.0.0.1:{p}", "Content-Length: -1", method="POST"),
     "bad Content-Length"),
    ("two different Content-Lengths", lambda p: request(p, f"Host: 127.0.0.1:{p}", "Content-Length: 1",
                                                        "Content-Length: 2", method="POST", body=b"ab"),
     "conflicting Content-Length"),
    ("a bad chunk", lambda p: request(p, f"Host: 127.0.0.1:{p}", "Transfer-Encoding: chunked", method="POST",
                                      body=b"zz\r\n"), "illegal chunk header"),
]


@pytest.mark.parametrize("what,raw,fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_a_request_h11_cannot_parse_is_400_in_the_error_shape(daemon: Daemon, what, raw, fragment) -> None:
    """Hypercorn's 400 had an empty body; it names h11's reason now, and never the bytes h11
    quotes (a credential may be among them)."""
    message = await refused(daemon, raw(daemon.port), 400, "INVALID_ARGUMENT")
    assert message.startswith("the request is not valid HTTP/1.1: ") and fragment in message, message
    assert "secret-token" not in message and "bytearray" not in message, message
    await healthy(daemon)


async def test_an_unsupported_transfer_coding_is_501_in_the_error_shape(daemon: Daemon) -> None:
    for coding in ("gzip", "chunked, chunked", "identity"):
        raw = request(daemon.port, f"Host: 127.0.0.1:{daemon.port}", f"Transfer-Encoding: {coding}", method="POST")
        message = await refused(daemon, raw, 501, "TRANSFER_ENCODING_UNSUPPORTED")
        assert "Transfer-Encoding" in message, message
    await healthy(daemon)


async def test_a_head_unfinished_past_the_bound_is_431_and_one_at_it_is_read(daemon: Daemon) -> None:
    """h11 refuses a head of which more than ``h11_max_incomplete_size`` bytes (the daemon's
    ``UNFINISHED_HEAD_BYTES``) arrived before its end: one byte more is the server's 431 in the
    error shape. Exactly that many then the end is read, and reaches the app, whose limit on the
    whole head (runtime.head_limit, tests/daemon/test_head_limit.py) answers it."""
    start = f"GET {API}/health HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\nX-Pad: ".encode()

    def unfinished(size: int) -> bytes:
        return start + b"a" * (size - len(start))

    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with stream:
            await stream.send_all(unfinished(UNFINISHED_HEAD_BYTES))  # (however it is read, no more is unfinished)
            await stream.send_all(b"\r\nConnection: close\r\n\r\n")
            data = await closed_within(stream, BOUND)
    r = parse_raw_response(data)
    assert r.status == 431, data[:300]
    assert assert_error_shape(r, "a head read whole")[1].startswith("the request head is "), data[:300]
    message = await refused(daemon, unfinished(UNFINISHED_HEAD_BYTES + 1), 431, "HEADERS_TOO_LARGE")
    assert f"more than {UNFINISHED_HEAD_BYTES} bytes arrived before its end" in message, message
    await healthy(daemon)


# --------------------------------------------------------------------------- WebSocket handshakes


HANDSHAKES = [  # (what, the handshake's lines after Host, a fragment of the message)
    ("no Sec-WebSocket-Key", ["Connection: upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13"],
     "Sec-WebSocket-Key is missing"),
    ("version 8", ["Connection: upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 8", KEY.strip()],
     "Sec-WebSocket-Version must be 13"),
]


@pytest.mark.parametrize("what,lines,fragment", HANDSHAKES, ids=[h[0] for h in HANDSHAKES])
async def test_a_handshake_refused_before_the_app_is_answered_and_closed(daemon: Daemon, what, lines,
                                                                        fragment) -> None:
    """Hypercorn refuses these before the app runs: its 400 had no body and, though it said
    ``connection: close``, nothing ended the connection (no timer ran). Now the answer names
    the problem and the connection is closed after it."""
    raw = request(daemon.port, f"Host: 127.0.0.1:{daemon.port}", *lines)
    message = await refused(daemon, raw, 400, "INVALID_ARGUMENT")
    assert fragment in message and "no WebSocket route" in message, message
    await healthy(daemon)


async def test_a_handshake_in_http_1_0_is_answered_and_closed(daemon: Daemon) -> None:
    raw = (f"GET {API}/health HTTP/1.0\r\nHost: 127.0.0.1:{daemon.port}\r\nConnection: upgrade\r\n"
           f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n{KEY}\r\n").encode()
    message = await refused(daemon, raw, 400, "INVALID_ARGUMENT")
    assert "HTTP/1.0" in message, message


async def test_data_before_a_handshake_is_answered_in_the_error_shape(daemon: Daemon) -> None:
    """Data sent before the handshake's answer: the server's 400 or the app's, whichever went out
    first (runtime.connection_races), is in the error shape either way."""
    raw = request(daemon.port, f"Host: 127.0.0.1:{daemon.port}", "Connection: upgrade", "Upgrade: websocket",
                  "Sec-WebSocket-Version: 13", KEY.strip()) + b"x\n"
    for _ in range(5):
        await refused(daemon, raw, 400, "INVALID_ARGUMENT")


# --------------------------------------------------------------------------- HTTP/2


@pytest.mark.parametrize("settings", [False, True], ids=["preface alone", "preface and SETTINGS"])
async def test_an_http2_connection_without_a_request_is_closed(daemon_factory, monkeypatch: pytest.MonkeyPatch,
                                                              settings: bool) -> None:
    """HTTP/2 with prior knowledge: the preface is read as a request by the HTTP/1.1 side, which
    stops the keep-alive timer, and the HTTP/2 side started it only when a stream ended: a client
    sending the preface (or a SETTINGS frame too) and nothing more held its connection for ever.
    It is closed at the keep-alive bound now, as an HTTP/1.1 connection without a request is."""
    import h2.config
    import h2.connection

    monkeypatch.setattr(daemon_module, "KEEP_ALIVE_SECONDS", 0.5)
    d = await daemon_factory()
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()  # the preface and a SETTINGS frame
    out = conn.data_to_send()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
    async with stream:
        await stream.send_all(out if settings else out[:24])  # (the preface is 24 bytes)
        start = trio.current_time()
        await closed_within(stream, BOUND)
        assert trio.current_time() - start < BOUND
    await healthy(d)


async def test_data_on_an_http2_stream_answered_before_its_request_ended_is_refused(daemon: Daemon) -> None:
    """A POST over HTTP/2 answered before its body ended (401: no credential), then one more DATA
    frame on the stream: hypercorn had dropped the stream and failed reading the frame (a
    ``KeyError``), which ended the whole server. The stream is reset (NO_ERROR) after its answer
    now; the frame is ignored, and the daemon goes on."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":path", f"{API}/projects"), (":scheme", "http"),
                          (":authority", f"127.0.0.1:{daemon.port}"), ("content-type", "application/json")])
    conn.send_data(1, b'{"name": ')
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with stream:
            await stream.send_all(conn.data_to_send())
            events: list = []
            while not any(isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)) for ev in events):
                data = await stream.receive_some(65536)
                assert data, f"the connection ended before the answer: {events}"
                events += conn.receive_data(data)
            assert any(isinstance(ev, h2.events.ResponseReceived) and (b":status", b"401") in ev.headers
                       for ev in events), events
            await stream.send_all(b"\x00\x00\x01\x00\x00\x00\x00\x00\x01x")  # DATA, stream 1, one byte
            while not any(isinstance(ev, h2.events.StreamReset) for ev in events):
                data = await stream.receive_some(65536)
                assert data, f"the connection ended without a reset of the stream: {events}"
                events += conn.receive_data(data)
            reset = next(ev for ev in events if isinstance(ev, h2.events.StreamReset))
            assert reset.error_code == 0, reset
            # the connection still serves
            conn.send_headers(3, [(":method", "GET"), (":path", f"{API}/health"), (":scheme", "http"),
                                  (":authority", f"127.0.0.1:{daemon.port}")], end_stream=True)
            await stream.send_all(conn.data_to_send())
            while not any(isinstance(ev, h2.events.StreamEnded) and ev.stream_id == 3 for ev in events):
                data = await stream.receive_some(65536)
                assert data, "the connection ended"
                events += conn.receive_data(data)
    await healthy(daemon)


@pytest.mark.parametrize("version", [[("sec-websocket-version", "8")], []], ids=["version 8", "no version"])
async def test_an_http2_websocket_refused_before_the_app_ends_its_stream(daemon_factory,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        version) -> None:
    """A WebSocket over HTTP/2 (extended CONNECT, RFC 8441) that hypercorn refuses itself got its
    400, but its stream stayed open and the connection, marked busy by the request, had no timer:
    it was held as long as the client kept it. The stream is ended (reset NO_ERROR, the client's
    side being open) and the connection closed at the keep-alive bound now."""
    import h2.config
    import h2.connection
    import h2.events

    monkeypatch.setattr(daemon_module, "KEEP_ALIVE_SECONDS", 0.5)
    d = await daemon_factory()
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
    async with stream:
        with trio.fail_after(LIMIT):
            await stream.send_all(conn.data_to_send())
            events: list = []
            while not conn.remote_settings.enable_connect_protocol:  # (the server's SETTINGS first)
                data = await stream.receive_some(65536)
                assert data, "the connection ended before the server's SETTINGS"
                events += conn.receive_data(data)
            conn.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"), (":path", f"{API}/health"),
                                  (":scheme", "http"), (":authority", f"127.0.0.1:{d.port}")] + version)
            await stream.send_all(conn.data_to_send())
            while not any(isinstance(ev, h2.events.StreamReset) for ev in events):
                data = await stream.receive_some(65536)
                assert data, f"the connection ended before the stream: {events}"
                events += conn.receive_data(data)
        head = next(ev for ev in events if isinstance(ev, h2.events.ResponseReceived))
        body = b"".join(ev.data for ev in events if isinstance(ev, h2.events.DataReceived))
        assert (b":status", b"400") in head.headers, head
        r = parse_raw_response(b"HTTP/2 400 \r\ncontent-type: application/json\r\n\r\n" + body)
        code, message = assert_error_shape(r, "a WebSocket over HTTP/2 refused before the app")
        assert code == "INVALID_ARGUMENT" and "Sec-WebSocket-Version must be 13" in message, message
        assert any(isinstance(ev, h2.events.StreamEnded) for ev in events), events
        assert next(ev for ev in events if isinstance(ev, h2.events.StreamReset)).error_code == 0
        await closed_within(stream, BOUND)
    await healthy(d)


class _Closing:
    """The server's side of a close, as :func:`runtime.connection_races.close_in_turn` calls it:
    when its own close ran and when the socket was closed, by the (fake) clock."""

    def __init__(self) -> None:
        self.closed_at: float | None = None
        self.aclosed_at: float | None = None

    async def close(self) -> None:
        self.closed_at = trio.current_time()

    async def aclose(self) -> None:
        self.aclosed_at = trio.current_time()


@pytest.mark.parametrize("answer_ends_at", [None, 3.0])
async def test_a_close_waits_one_bound_for_the_answer_and_the_send_lock_together(autojump_clock,
                                                                                answer_ends_at: float | None):
    """A close asked between the parts of a sized answer, with the send lock held by a write that
    never ends: the answer's last part (never sent, or sent at 3 s) and the lock are waited for
    within one ``CLOSE_WAIT_SECONDS`` in all, then the socket is closed; the server's own close
    never runs (it waited twice as long, one bound each, before)."""
    from runtime.connection_races import CLOSE_WAIT_SECONDS, Answer, close_in_turn

    answer = Answer()
    answer.sized = True
    lock = trio.Lock()
    closing = _Closing()
    held = trio.Event()

    async def stuck_write() -> None:
        async with lock:
            held.set()
            await trio.sleep_forever()

    async def answer_end() -> None:
        await trio.sleep(answer_ends_at)
        answer.done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stuck_write)
        await held.wait()
        if answer_ends_at is not None:
            nursery.start_soon(answer_end)
        began = trio.current_time()
        await close_in_turn(answer, lock, closing.close, closing)
        nursery.cancel_scope.cancel()
    assert closing.closed_at is None
    assert closing.aclosed_at is not None and closing.aclosed_at - began == pytest.approx(CLOSE_WAIT_SECONDS)


async def test_a_close_runs_once_the_answer_is_whole_and_the_lock_free(autojump_clock):
    """The answer's last part at 2 s, the lock free at 4 s: the server's own close runs then, within the bound."""
    from runtime.connection_races import Answer, close_in_turn

    answer = Answer()
    answer.sized = True
    lock = trio.Lock()
    closing = _Closing()
    held = trio.Event()

    async def write() -> None:
        async with lock:
            held.set()
            await trio.sleep(4)

    async def answer_end() -> None:
        await trio.sleep(2)
        answer.done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await held.wait()
        nursery.start_soon(answer_end)
        began = trio.current_time()
        await close_in_turn(answer, lock, closing.close, closing)
    assert closing.aclosed_at is None
    assert closing.closed_at is not None and closing.closed_at - began == pytest.approx(4)
