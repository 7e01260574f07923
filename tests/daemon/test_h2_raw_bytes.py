"""Request bytes hypercorn or Quart cannot read, answered 400 before they reach either:
an HTTP/2 request's ``:path``, ``:method`` and WebSocket handshake (runtime.server_answers,
``unreadable_request``), an HTTP/1.1 WebSocket handshake (``_ws_handle``), and an empty path or a
raw query that is no UTF-8 text (runtime.api, ``_target_checked``).

Over HTTP/1.1 h11 refuses a request line holding a byte outside 0x21-0x7E. Over HTTP/2 the bytes
came through: one past ASCII in the path or the method ended the whole daemon (hypercorn decodes
both as ASCII as it makes the stream), and so did a CONNECT without ``:path``; a control byte,
space or DEL reached the app; one in the query that is no UTF-8 answered an empty 500 on every
route (Quart decodes the query as UTF-8 before any handler). A WebSocket handshake whose
``Connection``, ``Sec-WebSocket-Extensions`` or ``Sec-WebSocket-Protocol`` holds a byte past ASCII
ended the daemon over either protocol, and an empty path before ``?`` answered an empty 500. Each
is 400 ``INVALID_ARGUMENT`` now, naming the problem, on its own stream: the stream beside it is
served, the connection goes on, the daemon too, and its log holds no traceback. Each request is
written with a raw h2 client (prior knowledge) or a raw socket to a real ``lens serve`` process
on loopback port 0.
"""

from __future__ import annotations

from pathlib import Path

import h2.events
import pytest
import trio

from .conftest import API, LIMIT, assert_error_shape, parse_raw_response, read_answer, serving
from .test_h2_malformed_fields import base, connected, error_of, exchange, no_traceback_nor_field
from .test_head_limit import h2_client

Fields = list[tuple[bytes, bytes]]


def request(port: int, path: bytes, method: bytes = b"GET") -> Fields:
    """The fields of a request of ``path`` (bytes as sent) with ``method``."""
    return [(n.encode(), path if n == ":path" else method if n == ":method" else v.encode()) for n, v in base(port)]


RAW_IN_PATH = [  # (what, :path, :method, the words the message holds)
    ("0xff in the path", f"{API}/he\xffalth".encode("latin-1"), b"GET",
     "the :path holds the byte 0xFF at offset 10, in its path, which is not ASCII"),
    ("UTF-8 text unencoded in the path", f"{API}/héalth".encode(), b"GET",
     "the :path holds the byte 0xC3 at offset 9, in its path, which is not ASCII"),
    ("0xff in a path outside the API", b"/\xff", b"GET", "the :path holds the byte 0xFF at offset 1"),
    ("a lone surrogate's bytes in the path, a query after", f"{API}/".encode() + b"\xed\xa0\x80?x=1", b"GET",
     "the :path holds the byte 0xED at offset 8"),
    ("a space in the path", f"{API}/he alth".encode(), b"GET",
     "the :path holds the byte 0x20 at offset 10, in its path, which is a space; percent-encode it (%20)"),
    ("a tab in the path", f"{API}/\thealth".encode(), b"GET",
     "the byte 0x09 at offset 8, in its path, which is a control byte"),
    ("DEL in the path", f"{API}/health\x7f".encode(), b"GET", "the byte 0x7F at offset 14, in its path, which is DEL"),
    ("a space in the query", f"{API}/health?x=a b".encode(), b"GET",
     "the :path holds the byte 0x20 at offset 18, in its query, which is a space"),
    ("a control byte in the query", f"{API}/health?x=\x01".encode(), b"GET",
     "the byte 0x01 at offset 17, in its query"),
    ("DEL in the query", f"{API}/health?\x7f".encode(), b"GET",
     "the byte 0x7F at offset 15, in its query, which is DEL"),
    ("0xff in the method", f"{API}/health".encode(), b"G\xffT", "the :method is not a token"),
    ("a space in the method", f"{API}/health".encode(), b"G T", "the :method is not a token"),
]


@pytest.mark.parametrize("what,path,method,words", RAW_IN_PATH, ids=[r[0] for r in RAW_IN_PATH])
async def test_a_byte_past_ascii_in_an_http2_path_or_method_is_400_on_its_stream(
        tmp_path: Path, what: str, path: bytes, method: bytes, words: str) -> None:
    """Sent in one write beside a well-formed request (stream 1): 400 on its stream naming the
    byte and its offset (the daemon ended, every connection with it, before); stream 1 gets its
    200, no GOAWAY comes, the next request on the connection is served, and so is another
    connection (``connected``), the daemon stopping cleanly with no traceback in its log."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, base(port), end_stream=True)
        conn.send_headers(3, request(port, path, method), end_stream=True)
        answers, events = await exchange(stream, conn, [1, 3])
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
        assert answers[1].headers.get(b":status") == b"200", events
        assert answers[3].headers.get(b":status") == b"400" and answers[3].ended, events
        code, message = error_of(answers[3], what)
        assert code == "INVALID_ARGUMENT" and words in message, message
        conn.send_headers(5, base(port), end_stream=True)
        answers, events = await exchange(stream, conn, [5])
        assert answers[5].headers.get(b":status") == b"200", events


NOT_UTF8_QUERIES = [  # (what, the query as sent, the byte named and its offset)
    ("0xff", b"x=\xff", "the byte 0xFF at offset 2 of the query"),
    ("a lone surrogate's UTF-8 bytes", b"x=a&y=\xed\xa0\x80", "the byte 0xED at offset 6 of the query"),
    ("an overlong encoding of /", b"x=\xc0\xaf", "the byte 0xC0 at offset 2 of the query"),
    ("a continuation byte alone", b"\x80", "the byte 0x80 at offset 0 of the query"),
    ("a sequence cut at the end", b"x=\xc3", "the byte 0xC3 at offset 2 of the query"),
]
# (a public route, one that needs a credential, and the dashboard outside the API: the query is
# refused before any of them, the credential's check included, as h11 refuses it over HTTP/1.1)
ROUTES = [f"{API}/health", f"{API}/projects", "/"]


@pytest.mark.parametrize("what,query,words", NOT_UTF8_QUERIES, ids=[q[0] for q in NOT_UTF8_QUERIES])
async def test_an_http2_query_that_is_no_utf8_is_400_on_every_route(
        tmp_path: Path, what: str, query: bytes, words: str) -> None:
    """An empty 500 on every route before (``/health`` too, nothing in the error shape): 400
    ``INVALID_ARGUMENT`` now, naming the first byte that is no UTF-8 text and its offset, and the
    connection serves the next request."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        for i, route in enumerate(ROUTES):
            sid = 1 + 2 * i
            conn.send_headers(sid, request(port, route.encode() + b"?" + query), end_stream=True)
            answers, events = await exchange(stream, conn, [sid])
            answer = answers[sid]
            assert answer.headers.get(b":status") == b"400" and answer.ended, (route, events)
            code, message = error_of(answer, f"{what} on {route}")
            assert code == "INVALID_ARGUMENT", answer.body
            assert message.startswith("the query is not UTF-8: ") and words in message, message
        conn.send_headers(11, base(port), end_stream=True)
        answers, events = await exchange(stream, conn, [11])
        assert answers[11].headers.get(b":status") == b"200", events


async def test_an_http2_query_of_utf8_text_unencoded_or_percent_encoded_is_served(tmp_path: Path) -> None:
    """What is left as it was: UTF-8 text sent unencoded in the query is read, and a
    percent-encoded byte that is no UTF-8 is the route's to judge (``/health`` takes no
    argument: 200)."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        for sid, query in ((1, "x=é".encode()), (3, b"x=%ff")):
            conn.send_headers(sid, request(port, f"{API}/health?".encode() + query), end_stream=True)
            answers, events = await exchange(stream, conn, [sid])
            assert answers[sid].headers.get(b":status") == b"200", (query, answers[sid].body, events)


async def test_an_http2_connect_without_path_is_400_on_its_stream(tmp_path: Path) -> None:
    """A CONNECT tunnel (:method CONNECT and :authority, no :path nor :scheme: well-formed for
    HTTP/2) ended the whole daemon (hypercorn made its stream with no path); it is 400 on its
    stream now, naming it, and the connection and the daemon go on."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, base(port), end_stream=True)
        tunnel = [(b":method", b"CONNECT"), (b":authority", f"127.0.0.1:{port}".encode())]
        conn.send_headers(3, tunnel, end_stream=False)
        answers, events = await exchange(stream, conn, [1, 3])
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
        assert answers[1].headers.get(b":status") == b"200", events
        assert answers[3].headers.get(b":status") == b"400" and answers[3].ended, events
        code, message = error_of(answers[3], "CONNECT")
        assert code == "INVALID_ARGUMENT" and "(a CONNECT tunnel) is not served" in message, message
        conn.send_headers(5, base(port), end_stream=True)
        answers, events = await exchange(stream, conn, [5])
        assert answers[5].headers.get(b":status") == b"200", events


def extended_connect(port: int, field: tuple[bytes, bytes] | None) -> Fields:
    """An HTTP/2 WebSocket handshake (RFC 8441) with ``field`` after its own."""
    return [(b":method", b"CONNECT"), (b":protocol", b"websocket"), (b":scheme", b"http"),
            (b":path", f"{API}/health".encode()), (b":authority", f"127.0.0.1:{port}".encode()),
            (b"sec-websocket-version", b"13")] + ([field] if field else [])


HANDSHAKE_FIELDS = [  # (the field, with a byte past ASCII; the name the message gives)
    (b"sec-websocket-protocol", b"chat, \xffx", "Sec-WebSocket-Protocol holds the byte 0xFF at offset 6"),
    (b"sec-websocket-extensions", "permessage-deflate; é".encode(), "Sec-WebSocket-Extensions holds the byte 0xC3"),
]


@pytest.mark.parametrize("field,value,words", HANDSHAKE_FIELDS, ids=[f[0].decode() for f in HANDSHAKE_FIELDS])
async def test_an_http2_websocket_handshake_with_a_list_past_ascii_is_400_on_its_stream(
        tmp_path: Path, field: bytes, value: bytes, words: str) -> None:
    """An extended CONNECT whose list field holds a byte past ASCII ended the whole daemon
    (hypercorn reads it as ASCII tokens): 400 on its stream now. The same handshake with the
    field in ASCII reaches the app, which answers it as before (no route takes a WebSocket), and
    the connection goes on."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, base(port), end_stream=True)
        conn.send_headers(3, extended_connect(port, (field, value)), end_stream=False)
        answers, events = await exchange(stream, conn, [1, 3])
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
        assert answers[1].headers.get(b":status") == b"200", events
        assert answers[3].headers.get(b":status") == b"400" and answers[3].ended, events
        code, message = error_of(answers[3], field.decode())
        assert code == "INVALID_ARGUMENT", message
        assert message.startswith("the WebSocket handshake is not valid: ") and words in message, message
        conn.send_headers(5, extended_connect(port, (field, b"chat")), end_stream=False)
        answers, events = await exchange(stream, conn, [5])
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
        assert answers[5].headers.get(b":status") is not None and answers[5].ended, events
        assert b"WebSocket handshake is not valid" not in answers[5].body, answers[5].body
        conn.send_headers(7, base(port), end_stream=True)
        answers, events = await exchange(stream, conn, [7])
        assert answers[7].headers.get(b":status") == b"200", events


async def raw_exchange(port: int, raw: bytes) -> bytes:
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(raw)
            return await read_answer(stream)


HTTP1_HANDSHAKE_FIELDS = [  # (the header line, with a byte past ASCII; the words the message holds)
    (b"Connection: Upgrade, \xff", "Connection holds the byte 0xFF at offset 9"),
    (b"Connection: Upgrade\r\nSec-WebSocket-Protocol: chat\xff",
     "Sec-WebSocket-Protocol holds the byte 0xFF at offset 4"),
    (b"Connection: Upgrade\r\nSec-WebSocket-Extensions: \xc3\xa9",
     "Sec-WebSocket-Extensions holds the byte 0xC3 at offset 0"),
]


@pytest.mark.parametrize("lines,words", HTTP1_HANDSHAKE_FIELDS, ids=["connection", "protocol", "extensions"])
async def test_an_http1_websocket_handshake_with_a_list_past_ascii_is_400(
        tmp_path: Path, lines: bytes, words: str) -> None:
    """Over HTTP/1.1 h11 lets a byte past ASCII through in a field value, and hypercorn's reading
    of the handshake's lists failed on it, which ended the whole daemon: 400 in the error shape
    now, and the daemon serves the next client."""
    async with serving(tmp_path) as (serve, d):
        raw = (f"GET {API}/health HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\nUpgrade: websocket\r\n".encode() + lines
               + b"\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        r = parse_raw_response(await raw_exchange(d.port, raw))
        assert r.status == 400, r
        code, message = assert_error_shape(r, words)
        assert code == "INVALID_ARGUMENT" and words in message, message
        assert message.startswith("the WebSocket handshake is not valid: "), message
        assert (await d.get("/health")).status_code == 200
        assert serve.proc is not None and serve.proc.returncode is None, "the daemon died"
        assert await serve.terminate() == 0
    no_traceback_nor_field(tmp_path / "serve-0.err")


async def test_an_empty_path_before_the_query_is_400(tmp_path: Path) -> None:
    """``GET ?x=1`` (HTTP/1.1) and ``:path ?x=1`` (HTTP/2) answered an empty 500 with a traceback
    in the log (Quart reads the path's first character): 400 ``INVALID_ARGUMENT`` naming it."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        head = f"GET ?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        r = parse_raw_response(await raw_exchange(port, head))
        code, message = assert_error_shape(r, "HTTP/1.1")
        assert r.status == 400 and code == "INVALID_ARGUMENT", r
        assert "an empty path before its query" in message, message
        conn.send_headers(1, request(port, b"?x=1"), end_stream=True)
        answers, events = await exchange(stream, conn, [1])
        assert answers[1].headers.get(b":status") == b"400" and answers[1].ended, events
        code, message = error_of(answers[1], "HTTP/2")
        assert code == "INVALID_ARGUMENT" and "an empty path before its query" in message, message
        conn.send_headers(3, base(port), end_stream=True)
        answers, events = await exchange(stream, conn, [3])
        assert answers[3].headers.get(b":status") == b"200", events


async def test_a_bad_host_is_answered_before_a_bad_query(tmp_path: Path) -> None:
    """A request whose Host the daemon refuses and whose target it cannot read is answered by
    the Host's check first (403 ``HOST_FORBIDDEN``), over HTTP/2 and HTTP/1.1 alike."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        fields = [(n, b"evil.example" if n == b":authority" else v)
                  for n, v in request(port, f"{API}/health?x=\xff".encode("latin-1"))]
        conn.send_headers(1, fields, end_stream=True)
        answers, events = await exchange(stream, conn, [1])
        assert answers[1].headers.get(b":status") == b"403", events
        assert error_of(answers[1], "HTTP/2")[0] == "HOST_FORBIDDEN", answers[1].body
        r = parse_raw_response(await raw_exchange(port, b"GET ?x=1 HTTP/1.1\r\nHost: evil.example\r\n\r\n"))
        assert r.status == 403 and assert_error_shape(r, "HTTP/1.1")[0] == "HOST_FORBIDDEN", r
