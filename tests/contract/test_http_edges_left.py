"""The HTTP edges the last audits left (docs/decisions.md, "HTTP edges, subagents and MCP: what the
last audits left"): ``OPTIONS *``, a body past ``server.maxBodyBytes`` sent again the same way
over HTTP/1.1 and HTTP/2, and the type an artifact is served as.

Each request goes to a real daemon on a loopback port 0 (built-in defaults, the ``faux`` model)
over a socket: hand-written HTTP/1.1 (``raw_http``) or frames of the ``h2`` library.
"""

from __future__ import annotations

import json

import h2.config
import h2.connection
import h2.events
import trio

from runtime.api import ALLOWED_METHODS
from tests.daemon.conftest import API, LIMIT, Daemon, parse_raw_response, raw_http, read_answer
from tests.daemon.test_routes import store_artifact

BODY_LIMIT = 64 * 1024  # the lowest server.maxBodyBytes allowed


async def test_options_asterisk_asks_about_the_server_and_is_204_with_allow(daemon: Daemon) -> None:
    """``OPTIONS *`` (RFC 9110 9.3.7: the server itself, not a resource) was a 404 "no route
    OPTIONS '*'". It is answered as OPTIONS on a route is: 204, ``Allow`` naming every method the
    server takes, no body. It names no route, so it needs no credential."""
    r = await raw_http(daemon.port, "OPTIONS", "*")
    assert r.status == 204, (r.status, r.headers, r.body)
    assert r.headers.get("allow") == ", ".join(ALLOWED_METHODS) == "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
    assert r.body == b"" and "content-type" not in r.headers and "content-length" not in r.headers
    assert r.headers.get("x-content-type-options") == "nosniff"
    for method in ("GET", "POST", "DELETE"):  # (the asterisk form is OPTIONS' alone: RFC 9112 3.2.4)
        r = await raw_http(daemon.port, method, "*")
        assert r.status in (400, 404), (method, r.status, r.body)


def _padded(size: int) -> bytes:
    head = b'{"clientId": "big", "name": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


async def test_a_body_past_the_limit_sent_again_is_refused_again_naming_the_limit(daemon_factory) -> None:
    """A client retrying a 413 the same way (HTTP/1.1 keep-alive, ``Content-Length`` or chunked;
    HTTP/2 on one connection) is refused each time with the limit named and no ``Retry-After``
    (nothing changes by waiting, RFC 9110 15.5.14); on HTTP/1.1 the connection is closed (the rest
    of the body is not read), on HTTP/2 the stream alone ends and the connection serves the next."""
    d = await daemon_factory(config={"server": {"maxBodyBytes": BODY_LIMIT}})
    over = _padded(BODY_LIMIT + 1)
    for attempt in range(2):
        # HTTP/1.1, Content-Length declared: answered before the body is read.
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", d.port)
            async with stream:
                await stream.send_all(
                    f"POST {API}/pair/requests HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(over)}\r\n\r\n".encode() + over[:1000])
                r = parse_raw_response(await read_answer(stream))
        assert (r.status, r.code) == (413, "BODY_TOO_LARGE"), (attempt, r.body)
        message = r.json()["error"]["message"]
        assert f"the limit is {BODY_LIMIT}" in message and str(BODY_LIMIT + 1) in message, message
        assert r.headers.get("connection") == "close" and "retry-after" not in r.headers, r.headers
        # HTTP/1.1, chunked: no length to judge first; refused once the limit is passed.
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(over[i:i + 8192]), over[i:i + 8192])
                           for i in range(0, len(over), 8192)) + b"0\r\n\r\n"
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", d.port)
            async with stream:
                await stream.send_all(
                    f"POST {API}/pair/requests HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\nContent-Type: application/json\r\n"
                    f"Transfer-Encoding: chunked\r\n\r\n".encode() + chunked)
                r = parse_raw_response(await read_answer(stream))
        assert (r.status, r.code) == (413, "BODY_TOO_LARGE"), (attempt, r.body)
        assert f"the limit is {BODY_LIMIT}" in r.json()["error"]["message"], r.body
        assert r.headers.get("connection") == "close" and "retry-after" not in r.headers, r.headers
    # HTTP/2 (prior knowledge): the same request twice on one connection, then one that fits.
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
    async with stream:
        async def exchange(stream_id: int, body: bytes) -> tuple[dict[str, str], bytes]:
            conn.send_headers(stream_id, [(":method", "POST"), (":path", f"{API}/pair/requests"), (":scheme", "http"),
                                          (":authority", f"127.0.0.1:{d.port}"), ("content-type", "application/json"),
                                          ("content-length", str(len(body)))])
            sent, headers, data, ended = 0, {}, b"", False
            with trio.fail_after(LIMIT):
                while not ended:
                    # (the head and as much of the body as the window takes, in one write)
                    while sent < len(body) and (window := min(conn.local_flow_control_window(stream_id),
                                                              conn.max_outbound_frame_size, len(body) - sent)) > 0:
                        conn.send_data(stream_id, body[sent:sent + window], end_stream=sent + window == len(body))
                        sent += window
                    await stream.send_all(conn.data_to_send())
                    chunk = await stream.receive_some(65536)
                    assert chunk, "the connection ended before the answer"
                    for ev in conn.receive_data(chunk):
                        if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == stream_id:
                            headers = {k.decode(): v.decode() for k, v in ev.headers}
                        elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == stream_id:
                            data += ev.data
                            conn.acknowledge_received_data(ev.flow_controlled_length, stream_id)
                        elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)) and ev.stream_id == stream_id:
                            ended = True
                        elif isinstance(ev, h2.events.ConnectionTerminated):
                            raise AssertionError(f"the connection ended: {ev}")
                    await stream.send_all(conn.data_to_send())
            return headers, data

        # (the first pieces of data go with the head, in one write: the answer is sent before
        # they are read, which is the race that ended the connection; tried on many streams)
        for stream_id in range(1, 41, 2):
            headers, data = await exchange(stream_id, over)
            assert headers.get(":status") == "413" and "retry-after" not in headers, (stream_id, headers)
            error = json.loads(data)["error"]
            assert error["code"] == "BODY_TOO_LARGE" and f"the limit is {BODY_LIMIT}" in error["message"], error
        headers, data = await exchange(41, json.dumps({"clientId": "fits", "name": "n"}).encode())
        assert headers.get(":status") == "202", (headers, data)


async def test_an_artifact_is_served_as_text_or_image_or_bytes_never_sniffed(daemon: Daemon, reader: str) -> None:
    """Every artifact that was no image was ``application/octet-stream``: a job's saved output or a
    fetched JSON document downloaded as an unnamed binary. UTF-8 text is ``text/plain;
    charset=utf-8`` (JSON and source included: nothing is served as HTML or script), shown inline;
    the four image types inline; anything else ``application/octet-stream`` as an attachment.
    ``nosniff`` on all of them."""
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
    cases = [
        (b"line one\nline two \xe2\x9c\x93\n", "text/plain; charset=utf-8", "inline"),
        (b'{"a": [1, 2, "\xc3\xa9"]}', "text/plain; charset=utf-8", "inline"),
        (b"<html><script>alert(1)</script></html>", "text/plain; charset=utf-8", "inline"),
        (b"", "text/plain; charset=utf-8", "inline"),
        (("é" * (1 << 19) + "!").encode(), "text/plain; charset=utf-8", "inline"),  # (1 MiB + 1: served in pieces)
        # typed by its first 8 KiB (HEAD_BYTES) alone, so a range is typed without reading the
        # rest: what comes after does not change it ("Artifacts at scale")
        (b"x" * (1 << 20) + b"\xff", "text/plain; charset=utf-8", "inline"),
        (b"x" * 8192 + b"\0", "text/plain; charset=utf-8", "inline"),
        (b"x" * 8191 + b"\0", "application/octet-stream", "attachment"),  # (a NUL inside the head)
        (b"x" * 8191 + "é".encode() + b"more", "text/plain; charset=utf-8", "inline"),  # (é cut at the head's end)
        (b"x" * 100 + "é".encode()[:1], "application/octet-stream", "attachment"),  # (cut at the artifact's end)
        (png, "image/png", "inline"),
        (b"caf\xe9", "application/octet-stream", "attachment"),  # (Latin-1: no UTF-8)
        (b"text\0with a NUL", "application/octet-stream", "attachment"),
        (bytes(range(256)), "application/octet-stream", "attachment"),
    ]
    for data, mime, disposition in cases:
        aid = store_artifact(daemon, data)
        r = await daemon.get(f"/artifacts/{aid}", reader)
        assert r.status_code == 200 and r.content == data, (data[:20], r.status_code)
        assert r.headers["content-type"] == mime, (data[:20], r.headers)
        assert r.headers["x-content-type-options"] == "nosniff", r.headers
        assert r.headers["content-disposition"].split(";")[0] == disposition, (data[:20], r.headers)
        assert aid[:16] in r.headers["content-disposition"], r.headers
        part = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": "bytes=0-0"}) if data else None
        if part is not None:  # (a range of a text artifact keeps the whole artifact's type)
            assert part.status_code == 206 and part.headers["content-type"] == mime, part.headers
