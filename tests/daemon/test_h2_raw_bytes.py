"""Raw bytes past ASCII in an HTTP/2 request's ``:path`` and ``:method`` (runtime.server_answers,
``unreadable_request``) and raw bytes that are no UTF-8 text in its query (runtime.api,
``_query_checked``).

Over HTTP/1.1 h11 refuses a request line holding such a byte. Over HTTP/2 the bytes came through:
one in the path or the method ended the whole daemon (hypercorn decodes both as ASCII as it makes
the stream), one in the query answered an empty 500 on every route (Quart decodes the query as
UTF-8 before any handler). Each is 400 ``INVALID_ARGUMENT`` now, naming the byte and its offset,
on its own stream: the stream beside it is served, the connection goes on, the daemon too, and
its log holds no traceback. Each request is written with a raw h2 client (prior knowledge) to a
real ``lens serve`` process on loopback port 0.
"""

from __future__ import annotations

from pathlib import Path

import h2.events
import pytest

from .conftest import API
from .test_h2_malformed_fields import base, connected, error_of, exchange
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
