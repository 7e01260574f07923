"""Malformed HTTP/2 fields answered on their stream (runtime.server_answers, ``_fields_answered``).

Each request is written with a raw h2 client (prior knowledge, h2's own checks of what it sends
turned off) to a real ``lens serve`` process on loopback port 0. A malformed field (RFC 9113 8.2,
8.3) ended the whole connection with GOAWAY PROTOCOL_ERROR, and every other stream on it: the
request is answered 400 in the error shape on its own stream now, a stream sent beside it gets
its 200, the same request with its fields written correctly is served on the same connection,
a new connection is served, and the daemon's log holds no traceback and never the field's bytes.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Callable

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest
import trio

from .conftest import API, LIMIT, assert_error_shape, parse_raw_response, serving
from .test_head_limit import h2_client, h2_get, served_on_a_new_http2_connection

SECRET = "sk-lens-field-secret-7f3a"  # (in every malformed field: never in an answer or the log)

Fields = list[tuple[str, str]]


def base(port: int) -> Fields:
    return h2_get(port, [])[0]  # :method, :path, :scheme, :authority of a GET of /health


def extra(field: tuple[str, str], fixed: tuple[str, str] | None) -> Callable[[int], tuple[Fields, Fields]]:
    """A case of one regular field after the pseudo-headers: as sent, and written correctly."""
    return lambda port: (base(port) + [field], base(port) + ([fixed] if fixed else []))


def without(name: str) -> Callable[[int], tuple[Fields, Fields]]:
    return lambda port: ([f for f in base(port) if f[0] != name] + [("x-trace", SECRET)], base(port))


def pseudo_after_regular(port: int) -> tuple[Fields, Fields]:
    fields = base(port)
    return fields[:2] + [("x-trace", SECRET)] + fields[2:], fields + [("x-trace", SECRET)]


def pseudo_twice(port: int) -> tuple[Fields, Fields]:
    fields = base(port)
    return fields + [(":path", f"{API}/health?{SECRET}")], fields


def unknown_pseudo(port: int) -> tuple[Fields, Fields]:
    fields = base(port)
    return fields + [(":trace", SECRET)], fields + [("trace", SECRET)]


MALFORMED = [  # (kind, the fields as sent and written correctly, the words the message holds)
    ("uppercase name", extra(("X-Trace", SECRET), ("x-trace", SECRET)), "a field name holds an uppercase letter"),
    ("connection", extra(("connection", SECRET), None), "a connection-specific field"),
    ("keep-alive", extra(("keep-alive", SECRET), None), "a connection-specific field"),
    ("proxy-connection", extra(("proxy-connection", SECRET), None), "a connection-specific field"),
    ("transfer-encoding", extra(("transfer-encoding", SECRET), None), "a connection-specific field"),
    ("upgrade", extra(("upgrade", SECRET), None), "a connection-specific field"),
    ("te other than trailers", extra(("te", SECRET), ("te", "trailers")), 'te may only be "trailers"'),
    ("NUL in a value", extra(("x-trace", f"{SECRET}\x00"), ("x-trace", SECRET)), "a field value holds a NUL, CR or LF"),
    ("CR in a value", extra(("x-trace", f"{SECRET}\r"), ("x-trace", SECRET)), "a field value holds a NUL, CR or LF"),
    ("LF in a value", extra(("x-trace", f"{SECRET}\nx"), ("x-trace", SECRET)), "a field value holds a NUL, CR or LF"),
    ("pseudo-header after a regular field", pseudo_after_regular, "a pseudo-header field follows a regular field"),
    ("pseudo-header twice", pseudo_twice, "a pseudo-header field appears twice"),
    ("unknown pseudo-header", unknown_pseudo, "a pseudo-header field is not one HTTP/2 defines"),
    ("no :method", without(":method"), "the :method pseudo-header field is missing"),
    ("no :path", without(":path"), "the :path pseudo-header field is missing"),
    ("no :scheme", without(":scheme"), "the :scheme pseudo-header field is missing"),
    # (beyond RFC 9113 8.2: other fields h2 refuses, each named)
    ("empty :path", lambda port: ([(n, "" if n == ":path" else v) for n, v in base(port)] + [("x-trace", SECRET)],
                                  base(port)), ":path is empty"),
    ("neither :authority nor host", without(":authority"), "the request has neither :authority nor host"),
    (":authority and host differ", lambda port: (base(port) + [("host", SECRET)],
                                                 base(port) + [("host", f"127.0.0.1:{port}")]),
     ":authority and host differ"),
    (":protocol outside CONNECT", lambda port: (base(port)[:1] + [(":protocol", SECRET)] + base(port)[1:], base(port)),
     "a request other than CONNECT has :protocol"),
    # (RFC 9113 8.1.1: a content-length h2 cannot read; it read it before the fields' checks)
    ("content-length not a number", extra(("content-length", SECRET), ("content-length", "0")),
     "content-length is not a number of bytes"),
    ("content-length negative", extra(("content-length", "-1"), ("content-length", "0")),
     "content-length is not a number of bytes"),
    ("content-length twice, differing", lambda port: (base(port) + [("content-length", "0"), ("content-length", "1")],
                                                      base(port) + [("content-length", "0"), ("content-length", "0")]),
     "content-length is given twice with different values"),
]


class Answer:
    def __init__(self) -> None:
        self.headers: dict[bytes, bytes] = {}
        self.body = b""
        self.reset: int | None = None  # (the error code of a reset, if the stream was reset)
        self.ended = False


async def exchange(stream: trio.SocketStream, conn: h2.connection.H2Connection, ids: list[int],
                   answers: dict[int, Answer] | None = None) -> tuple[dict[int, Answer], list]:
    """Write what ``conn`` has to send in one write, then read until every stream of ``ids`` is
    ended or reset (or the server ends the connection): each stream's answer (added to
    ``answers``, which may hold streams read before), and every event."""
    answers = answers if answers is not None else {}
    for i in ids:
        answers.setdefault(i, Answer())
    events: list = []
    await stream.send_all(conn.data_to_send())
    with trio.fail_after(LIMIT):
        while not all(answers[i].ended or answers[i].reset is not None for i in ids):
            data = await stream.receive_some(65536)
            if not data:
                break
            for ev in conn.receive_data(data):
                events.append(ev)
                a = answers.get(getattr(ev, "stream_id", None) or 0)
                if a is None:
                    continue
                if isinstance(ev, h2.events.ResponseReceived):
                    a.headers = dict(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    a.body += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    a.ended = True
                elif isinstance(ev, h2.events.StreamReset):
                    a.reset = ev.error_code
            await stream.send_all(conn.data_to_send())
    return answers, events


def error_of(a: Answer, where: str) -> tuple[str, str]:
    r = parse_raw_response(b"HTTP/2 " + a.headers[b":status"] + b" \r\ncontent-type: application/json\r\n\r\n" + a.body)
    return assert_error_shape(r, where)


def no_traceback_nor_field(log: Path) -> None:
    err = log.read_text(errors="replace")
    assert "Traceback" not in err and "Error in ASGI" not in err, err[-3000:]
    assert SECRET not in err, err[-3000:]


@pytest.mark.parametrize("kind,case,words", MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_a_malformed_http2_field_is_400_on_its_stream(tmp_path: Path, kind: str, case, words: str) -> None:
    """The malformed request, sent in one write beside a well-formed one (stream 1), is answered
    400 ``INVALID_ARGUMENT`` on its stream naming the problem (never the field's bytes); stream
    1 gets its 200, no GOAWAY comes, and the request written correctly is then served on the
    same connection, and another connection too."""
    async with serving(tmp_path) as (serve, d):
        conn = h2_client()
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", d.port)
        async with stream:
            malformed, fixed = case(d.port)
            conn.send_headers(1, base(d.port), end_stream=True)
            conn.send_headers(3, malformed, end_stream=True)
            answers, events = await exchange(stream, conn, [1, 3])
            assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
            assert answers[1].headers.get(b":status") == b"200", events
            bad = answers[3]
            assert bad.headers.get(b":status") == b"400" and bad.ended, events
            assert bad.headers[b"content-type"] == b"application/json", bad.headers
            code, message = error_of(bad, kind)
            assert code == "INVALID_ARGUMENT", bad.body
            assert message.startswith("the request's HTTP/2 fields are malformed") and words in message, message
            assert SECRET.encode() not in bad.body + b"".join(k + v for k, v in bad.headers.items())
            conn.send_headers(5, fixed, end_stream=True)
            answers, events = await exchange(stream, conn, [5])
            assert answers[5].headers.get(b":status") == b"200", events
        await served_on_a_new_http2_connection(d.port)
        assert serve.proc is not None and serve.proc.returncode is None, "the daemon died"
        assert await serve.terminate() == 0
    no_traceback_nor_field(tmp_path / "serve-0.err")


# --------------------------------------------------------------------------- at the answer's edges


@asynccontextmanager
async def connected(tmp_path: Path, conn: h2.connection.H2Connection) -> AsyncIterator[tuple[trio.SocketStream, int]]:
    """A ``lens serve`` and one connection to it (for ``conn``); once the block is done, a new
    connection is served, the daemon stops cleanly and its log holds no traceback nor the field."""
    async with serving(tmp_path) as (serve, d):
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", d.port)
        async with stream:
            yield stream, d.port
        await served_on_a_new_http2_connection(d.port)
        assert await serve.terminate() == 0
    no_traceback_nor_field(tmp_path / "serve-0.err")


async def test_a_malformed_request_whose_body_is_still_coming_is_answered_then_reset(tmp_path: Path) -> None:
    """Answered before its request ended (RFC 9113 8.1 allows it): 400 with END_STREAM, then
    RST_STREAM NO_ERROR; the DATA the client had already sent on it changes nothing, and the
    next request on the connection is served."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, [(":method", "POST")] + base(port)[1:] + [("X-Trace", SECRET)])
        conn.send_data(1, b'{"clientId": "c"}')
        answers, events = await exchange(stream, conn, [1])
        assert answers[1].headers.get(b":status") == b"400" and answers[1].ended, events
        assert error_of(answers[1], "a POST still sending")[0] == "INVALID_ARGUMENT"
        conn.send_headers(3, base(port), end_stream=True)
        answers, events = await exchange(stream, conn, [3])
        assert answers[3].headers.get(b":status") == b"200", events
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events


async def test_a_malformed_head_request_is_400_without_a_body(tmp_path: Path) -> None:
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, [(":method", "HEAD")] + base(port)[1:] + [("connection", SECRET)], end_stream=True)
        answers, events = await exchange(stream, conn, [1])
        assert answers[1].headers.get(b":status") == b"400" and answers[1].ended, events
        assert answers[1].body == b"" and int(answers[1].headers[b"content-length"]) > 0, answers[1].headers
        conn.send_headers(3, [(":method", "HEAD")] + base(port)[1:], end_stream=True)
        answers, events = await exchange(stream, conn, [3])
        assert answers[3].headers.get(b":status") == b"200", events


async def test_a_malformed_request_whose_answer_the_window_cannot_hold_is_reset(tmp_path: Path) -> None:
    """A client whose flow-control window (10 bytes a stream) cannot take the 400's body gets
    RST_STREAM PROTOCOL_ERROR on the stream instead; a stream beside it is answered once the
    client opens its window."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False))
    conn.local_settings = h2.settings.Settings(client=True, initial_values={
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10})
    conn.initiate_connection()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, base(port), end_stream=True)
        conn.send_headers(3, base(port) + [("te", SECRET)], end_stream=True)
        answers, events = await exchange(stream, conn, [3], {1: Answer()})  # (stream 1's head may come first)
        assert answers[3].reset == h2.errors.ErrorCodes.PROTOCOL_ERROR and not answers[3].headers, events
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})
        answers, events = await exchange(stream, conn, [1], answers)
        assert answers[1].headers.get(b":status") == b"200" and answers[1].ended, events
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events


async def test_malformed_trailers_reset_their_stream(tmp_path: Path) -> None:
    """Trailers with a pseudo-header (RFC 9113 8.1) on a request the app already has: its
    stream is reset PROTOCOL_ERROR (the app hears of it as of a reset) and the connection goes on."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, [(":method", "POST"), (":path", f"{API}/pair/requests")] + base(port)[2:]
                          + [("content-type", "application/json")])
        conn.send_data(1, b'{"clientId": ')
        conn.send_headers(1, [(":path", SECRET)], end_stream=True)
        answers, events = await exchange(stream, conn, [1])
        assert answers[1].reset == h2.errors.ErrorCodes.PROTOCOL_ERROR and not answers[1].headers, events
        conn.send_headers(3, base(port), end_stream=True)
        answers, events = await exchange(stream, conn, [3])
        assert answers[3].headers.get(b":status") == b"200", events
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events


# --------------------------------------------------------------------------- a body and its content-length


def pair_request(port: int, length: int) -> Fields:
    return [(":method", "POST"), (":path", f"{API}/pair/requests")] + base(port)[2:] + [
        ("content-type", "application/json"), ("content-length", str(length))]


BODY = b'{"clientId": "c-1"}'  # (19 bytes)

CUT = [  # (kind, the DATA frames as (bytes, END_STREAM))
    ("one byte past, in one frame", [(BODY + b" ", True)]),
    ("one byte short, then END_STREAM", [(BODY[:-1], True)]),
    ("past it in a second frame", [(BODY[:10], False), (BODY[10:] + b" ", False)]),
    ("short, END_STREAM on an empty frame", [(BODY[:10], False), (b"", True)]),
]


@pytest.mark.parametrize("kind,frames", CUT, ids=[c[0] for c in CUT])
async def test_a_body_other_than_its_content_length_resets_its_stream(tmp_path: Path, kind: str, frames) -> None:
    """A body longer or shorter than its content-length (RFC 9113 8.1.1) ended the whole
    connection (GOAWAY PROTOCOL_ERROR): its stream alone is reset PROTOCOL_ERROR now, the app
    hearing of it as of a client's reset. A well-formed request sent in the same write gets its
    200, and the same body at its exact length is then answered on the same connection."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, base(port), end_stream=True)
        conn.send_headers(3, pair_request(port, len(BODY)))
        for data, end in frames:
            conn.send_data(3, data, end_stream=end)
        answers, events = await exchange(stream, conn, [1, 3])
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
        assert answers[1].headers.get(b":status") == b"200" and answers[1].ended, events
        assert answers[3].reset == h2.errors.ErrorCodes.PROTOCOL_ERROR, (kind, events)
        conn.send_headers(5, pair_request(port, len(BODY)))
        conn.send_data(5, BODY, end_stream=True)  # (at its content-length exactly: read)
        answers, events = await exchange(stream, conn, [5])
        assert answers[5].reset is None and answers[5].ended, events
        assert answers[5].headers.get(b":status") in (b"200", b"201", b"202"), (answers[5].headers, answers[5].body)


async def test_a_request_ended_short_of_its_content_length_by_headers(tmp_path: Path) -> None:
    """h2 checks a body's length on DATA only: a request whose HEADERS end it with a
    content-length above 0, or trailers ending a shorter body, reached the app with its body
    cut (the app answered "not valid JSON (Input data was truncated)"). The first is answered
    400 on its stream, never reaching the app; the second, whose request the app has, is reset
    PROTOCOL_ERROR. At its content-length exactly, a body ended by trailers is read, and a
    content-length of 0 ended by the HEADERS is no body at all."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        conn.send_headers(1, base(port), end_stream=True)
        conn.send_headers(3, pair_request(port, 1), end_stream=True)
        conn.send_headers(5, pair_request(port, len(BODY)))
        conn.send_data(5, BODY[:-1])
        conn.send_headers(5, [("x-trace", "1")], end_stream=True)
        answers, events = await exchange(stream, conn, [1, 3, 5])
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
        assert answers[1].headers.get(b":status") == b"200", events
        assert answers[3].headers.get(b":status") == b"400" and answers[3].ended, events
        code, message = error_of(answers[3], "HEADERS ending a request short")
        assert code == "INVALID_ARGUMENT" and "short of its content-length" in message, message
        assert answers[5].reset == h2.errors.ErrorCodes.PROTOCOL_ERROR and not answers[5].headers, events
        conn.send_headers(7, pair_request(port, len(BODY)))
        conn.send_data(7, BODY)
        conn.send_headers(7, [("x-trace", "1")], end_stream=True)
        conn.send_headers(9, base(port) + [("content-length", "0")], end_stream=True)
        answers, events = await exchange(stream, conn, [7, 9])
        assert answers[7].reset is None and answers[7].headers.get(b":status") in (b"200", b"201", b"202"), (
            answers[7].headers, answers[7].body)
        assert answers[9].headers.get(b":status") == b"200", events


async def test_the_bytes_of_a_cut_body_go_back_to_the_connections_window(tmp_path: Path) -> None:
    """No one reads a cut body's last frame: its bytes are handed back to the connection's
    flow-control window. Four streams whose DATA (16,000 bytes each) runs past a content-length
    of 19 take 64,000 of the connection's 65,535 bytes; the window comes back (h2 returns it
    once half of it is freed: 48,000 bytes here) and a fifth request of 20,000 bytes is read.
    Without the hand-back the window stayed at 1,535 bytes for good."""
    conn = h2_client()
    async with connected(tmp_path, conn) as (stream, port):
        ids = [1, 3, 5, 7]
        for i in ids:
            conn.send_headers(i, pair_request(port, len(BODY)))
            conn.send_data(i, BODY + b" " * (16_000 - len(BODY)))
        answers, events = await exchange(stream, conn, ids)
        assert all(answers[i].reset == h2.errors.ErrorCodes.PROTOCOL_ERROR for i in ids), events
        with trio.fail_after(LIMIT):
            while conn.outbound_flow_control_window < 65_535 - 16_000:
                data = await stream.receive_some(65536)
                assert data, ("the connection was closed", conn.outbound_flow_control_window)
                events += conn.receive_data(data)
        assert not any(isinstance(ev, h2.events.ConnectionTerminated) for ev in events), events
        body = b" " * (20_000 - len(BODY)) + BODY
        conn.send_headers(9, pair_request(port, len(body)))
        conn.send_data(9, body[:16_000])
        conn.send_data(9, body[16_000:], end_stream=True)
        answers, events = await exchange(stream, conn, [9])
        assert answers[9].reset is None and answers[9].ended, events
        assert answers[9].headers.get(b":status") in (b"200", b"201", b"202"), (answers[9].headers, answers[9].body)
