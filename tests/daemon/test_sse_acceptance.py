"""F-API-5 and section 9's SSE sentence, tested as an acceptance author would: a raw HTTP/1.1
client and a standard SSE parser (the one the ``openai`` SDK reads its own streams with) against
the real daemon on loopback port 0 with the ``faux`` provider.

What ``test_sse.py``, ``test_sse_properties.py``, ``test_auth.py`` and
``test_revoke_ends_streams.py`` pin already (resume at every position, slow clients, heartbeats,
revocation ending a stream) is not redone here; this module covers what they leave: text holding
line breaks read back through a standard parser, the data byte for byte as ``lens log decode``
prints it, the filters' combinations and limits, the response's headers, the refusal before
any stream, and the code of the final event that ends a revoked client's stream.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

import trio
from openai._streaming import SSEDecoder

from .conftest import (
    API, BUSY, LIMIT, Daemon, DaemonFactory, error_of, parse_raw_response, read_answer, run_lens, slow_stream_request,
)

TRICKY = ("one\ntwo\r\nthree\rfour\n\ndata: forged\n\nid: 999999\nevent: input.submitted\n"
          "\u2028\u2029\u0085 end: ok")


def unchunk(body: bytes) -> bytes:
    """The payload of an HTTP/1.1 chunked body (complete chunks only)."""
    out = b""
    while body:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            break
        size = int(size_line, 16)
        if size == 0 or len(rest) < size + 2:
            break
        out, body = out + rest[:size], rest[size + 2:]
    return out


async def raw_stream(d: Daemon, token: str | None, query: str, *, until: bytes, times: int = 1,
                     headers: dict[str, str] | None = None, whole: bool = False) -> tuple[bytes, bytes]:
    """Open the stream on a plain socket; read until the unchunked body holds ``until``
    ``times`` times (``whole``: and the frame it begins has ended). Returns (the response head,
    the unchunked body read so far)."""
    h = {"Host": f"127.0.0.1:{d.port}", **({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    req = f"GET {API}/events/stream{query} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    data = b""
    with trio.fail_after(LIMIT):
        s = await trio.open_tcp_stream("127.0.0.1", d.port)
        async with s:
            await s.send_all(req.encode())
            while True:
                chunk = await s.receive_some(1 << 16)
                assert chunk, data
                data += chunk
                head, sep, body = data.partition(b"\r\n\r\n")
                text = unchunk(body)
                if sep and text.count(until) >= times and (not whole or b"\n\n" in text[text.rindex(until):]):
                    return head, text


def standard_parse(payload: bytes) -> list[Any]:
    """The events a standard SSE parser reads from ``payload`` (blocks without data left out:
    this parser reports a comment block after an id as an empty event)."""
    decoder = SSEDecoder()
    events = list(decoder.iter_bytes(iter([payload])))
    return [e for e in events if e.event is not None or e.data]


# --------------------------------------------------------------------------- the frames' data


async def test_text_with_line_breaks_is_one_data_line_and_equals_lens_log_decode_byte_for_byte(
        daemon: Daemon, strong: str, reader: str):
    """A text holding every SSE line terminator (LF, CRLF, CR), the line breaks ``str.splitlines``
    adds (U+0085, U+2028, U+2029) and lines that look like SSE fields travels escaped in one
    ``data:`` line of JSON: no forged field, and a standard parser
    gets back the very bytes ``lens log decode`` prints for that seq, which parse to what
    ``GET /sessions/{id}/events`` answers."""
    p = await daemon.project(strong, "p")
    sid = (await daemon.session(strong, p["id"]))["id"]
    ack = await daemon.submit(strong, sid, "r1", TRICKY)
    await daemon.wait_idle(strong, sid)
    logged = await daemon.events(reader, sid)
    last = logged[-1]["seq"]
    end = f"id: {last}\nevent: {logged[-1]['kind']}\ndata: ".encode()
    head, body = await raw_stream(daemon, reader, f"?session={sid}", until=end,
                                  headers={"Last-Event-ID": "0"}, whole=True)
    assert head.startswith(b"HTTP/1.1 200"), head
    body = body[:body.index(b"\n\n", body.index(end)) + 2]  # up to the last event's frame
    blocks = [b for b in body.split(b"\n\n") if b and not b.startswith(b":")]
    assert len(blocks) == len(logged)
    # (a reader of lines built like str.splitlines — requests' iter_lines, httpx's — finds the
    # same three lines per frame: U+0085, U+2028 and U+2029 are escaped in the JSON, as decode's)
    assert [ln for ln in body.decode().splitlines() if ln] == [ln for ln in body.decode().split("\n") if ln]
    for block, event in zip(blocks, logged):
        lines = block.split(b"\n")
        assert [ln.split(b":", 1)[0] for ln in lines] == [b"id", b"event", b"data"], block
        assert b"\r" not in block
        assert lines[0] == f"id: {event['seq']}".encode() and lines[1] == f"event: {event['kind']}".encode()
    parsed = standard_parse(body)
    assert [(int(e.id), e.event) for e in parsed] == [(e["seq"], e["kind"]) for e in logged]
    assert [json.loads(e.data) for e in parsed] == logged
    submitted = next(e for e in parsed if int(e.id) == ack["seq"])
    assert json.loads(submitted.data)["body"]["content"][0]["text"] == TRICKY, submitted.data
    out = await run_lens(daemon.root, "log", "decode", "--data", str(daemon.data_dir), "--session", sid)
    assert [e.data.encode() for e in parsed] == out.stdout.encode().splitlines()


# --------------------------------------------------------------------------- filters


async def replayed_before_the_second_ping(d: Daemon, token: str, query: str) -> list[Any]:
    """The events a stream resumed from 0 writes before its second heartbeat: the whole replay
    of the log as it was at subscription (every event committed before the request was made),
    and no more when nothing is being written. (A heartbeat may come before the replay's one
    page on a loaded machine, never after it while the replay still has events to write.)"""
    _, body = await raw_stream(d, token, query, until=b": ping\n\n", times=2, headers={"Last-Event-ID": "0"})
    return standard_parse(body)


async def test_filters_combine_and_unknown_ids_stream_nothing(daemon_factory: DaemonFactory):
    """Both filters must hold (a session of another project: nothing); a well-formed id that
    names nothing streams nothing (a client may subscribe before its session exists); either is
    200 with heartbeats, never 404."""
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 0.2}})
    token = await d.pair("c", strong=True)
    a = await d.project(token, "a")
    b = await d.project(token, "b")
    sa = (await d.session(token, a["id"]))["id"]
    await d.submit(token, sa, "r1", "hello")
    await d.wait_idle(token, sa)
    logged = [e["seq"] for e in await d.events(token, sa)]
    both = await replayed_before_the_second_ping(d, token, f"?session={sa}&project={a['id']}")
    assert [int(e.id) for e in both] == logged
    for query in (f"?session={sa}&project={b['id']}", "?session=ses_none", "?project=prj_none",
                  f"?sessionId={sa}&projectId={b['id']}"):
        assert await replayed_before_the_second_ping(d, token, query) == [], query
    only_project = await replayed_before_the_second_ping(d, token, f"?project={a['id']}")
    assert [int(e.id) for e in only_project] == [a["seq"], *logged]


async def test_filter_ids_at_the_limit_and_one_past_it_twice_and_malformed(daemon: Daemon, reader: str):
    at_limit = "s" * 200
    head, _ = await raw_stream(daemon, reader, f"?session={at_limit}&project={'p' * 200}", until=b": lens stream")
    assert head.startswith(b"HTTP/1.1 200"), head
    for name in ("session", "project", "sessionId", "projectId"):
        for bad in ("s" * 201, "a b", "caf\u00e9", "a/b", ""):
            r = await daemon.get("/events/stream", reader, params={name: bad})
            assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (name, bad, r.text)
            assert "filter" in r.json()["error"]["message"], r.text
        r = await daemon.get(f"/events/stream?{name}=x1&{name}=x1", reader)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text
        assert f"{name} is given 2 times; give it once" in r.json()["error"]["message"]


# --------------------------------------------------------------------------- headers and auth


async def test_the_response_headers_say_event_stream_without_caching_or_buffering(daemon: Daemon, reader: str):
    head, body = await raw_stream(daemon, reader, "", until=b": lens stream\n\n", headers={"Accept-Encoding": "gzip"})
    lines = head.decode().split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200"), lines[0]
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields.setdefault(name.strip().lower(), []).append(value.strip())
    assert fields["content-type"] == ["text/event-stream"], fields  # (always UTF-8, by the SSE spec)
    assert fields["cache-control"] == ["no-cache"]
    assert fields["x-accel-buffering"] == ["no"]
    assert fields["transfer-encoding"] == ["chunked"]
    assert "content-length" not in fields and "content-encoding" not in fields, fields
    assert body.startswith(b": lens stream\n\n")


async def test_no_or_a_wrong_credential_is_401_before_any_stream(daemon: Daemon):
    """Refused with a JSON error, a complete response and no stream bytes (the same with every
    filter and resume given, and with a credential in the query, which is no credential)."""
    for token, code, extra in ((None, "AUTH_REQUIRED", ""), ("nope", "AUTH_INVALID", ""),
                               (None, "AUTH_REQUIRED", "?session=s1&project=p1&after=0&token=x")):
        h = {"Host": f"127.0.0.1:{daemon.port}", "Last-Event-ID": "0"}
        if token:
            h["Authorization"] = f"Bearer {token}"
        req = f"GET {API}/events/stream{extra} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        with trio.fail_after(LIMIT):
            s = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            async with s:
                await s.send_all(req.encode())
                r = parse_raw_response(await read_answer(s))
        assert r.status == 401 and r.code == code, (token, r.status, r.body)
        assert r.headers["content-type"].startswith("application/json"), r.headers
        assert b"event:" not in r.body and b": lens stream" not in r.body
        assert "www-authenticate" in r.headers


async def test_a_revoked_credential_ends_its_stream_with_the_code_it_would_now_get(daemon: Daemon, strong: str):
    """The final event names the credential's code (``AUTH_INVALID``, as a request with it now
    gets) beside its reason and the last seq delivered, so a client knows not to resume with it."""
    token = await daemon.pair("gone")
    await stream_ends_as_revoked(daemon, strong, token,
                                 lambda: trio.to_thread.run_sync(lambda: daemon.pairs().revoke("gone")))


async def stream_ends_as_revoked(daemon: Daemon, strong: str, token: str,
                                 act: Callable[[], Awaitable[object]]) -> None:
    """``token``'s open stream, once ``act`` has taken its credential away, ends with
    ``stream.end`` naming ``AUTH_INVALID`` and the last seq delivered, and cannot be resumed."""
    p = await daemon.project(strong, "p")
    async with daemon.sse(token, last_event_id=0) as stream:
        await stream.until(lambda m: m.id == p["seq"])
        await act()
        end = await stream.until(lambda m: m.event is not None and m.id is None)
        assert end.event == "stream.end"
        assert end.json() == {"reason": "credential revoked", "code": "AUTH_INVALID", "lastEventId": p["seq"]}
        assert await stream.to_end() == []
    r = await daemon.get("/events/stream", token, headers={"Last-Event-ID": str(p["seq"])})
    assert r.status_code == 401 and error_of(r) == "AUTH_INVALID"


# --------------------------------------------------------------------------- a slow client on the ordinary path


async def test_a_slow_http_1_0_client_is_dropped_and_resumes_without_a_gap(daemon_factory: DaemonFactory):
    """``test_sse.py`` drops a slow HTTP/1.1 client, whose live frames the bus writes to the socket
    itself. An HTTP/1.0 client (no chunked body: the stream is written through the server, the
    ordinary path) that stops reading must not hold up the writer or a reader that keeps up
    either; once it reads again it gets a gap-free prefix, then ``stream.dropped`` naming the
    last seq it got, and resumes from there."""
    d = await daemon_factory(config={"server": {"sseBufferEvents": 8}})
    token = await d.pair("c", strong=True)
    p = await d.project(token)
    sid = (await d.session(token, p["id"]))["id"]
    await d.submit(token, sid, "busy", BUSY)  # the run holds: each input below is one event
    await d.wait_running_call(token, sid)
    start = (await d.get("/health")).json()["lastSeq"]
    with await slow_stream_request(d.port, token, f"session={sid}", http="1.0") as slow:
        data = b""
        with trio.fail_after(LIMIT):
            while b": lens stream\n\n" not in data:
                chunk = await slow.recv(4096)
                assert chunk, data
                data += chunk
        assert data.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in data.lower(), data
        acks: list[int] = []
        async with d.sse(token, params={"session": sid}) as fast:
            await fast.next()

            async def follow() -> None:  # (a reader that keeps up reads as the events come)
                while not fast.seqs or fast.seqs[-1] < start + 40:
                    assert await fast.next(timeout=LIMIT * 2) is not None, "the stream ended"

            with trio.fail_after(LIMIT * 2):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(follow)
                    for i in range(40):
                        acks.append((await d.submit(token, sid, f"big{i}", f"{i:04d}" + "x" * 64 * 1024))["seq"])
        assert acks == list(range(start + 1, start + 41)) and fast.seqs == acks
        with trio.fail_after(LIMIT):  # now read what it was sent: the response ends with the connection
            while chunk := await slow.recv(1 << 20):
                data += chunk
    events = standard_parse(data.partition(b"\r\n\r\n")[2])
    assert events[-1].event == "stream.dropped", [e.event for e in events][-3:]
    got = [int(e.id) for e in events[:-1]]
    assert got == acks[:len(got)] and len(got) < 40
    dropped = json.loads(events[-1].data)
    assert dropped["lastEventId"] == (got[-1] if got else start)
    async with d.sse(token, params={"session": sid}, last_event_id=dropped["lastEventId"]) as again:
        await again.until(lambda m: m.id == acks[-1])
    assert got + again.seqs == acks
    await d.post(f"/sessions/{sid}/abort", token)
