"""F-API-1, F-API-3 and F-API-5 a third time, as a client author who has only the spec, the README
and docs/http-api.md: the real daemon on loopback port 0, read and written with raw HTTP/1.1.

The earlier passes (``test_sse*.py``, ``test_api_acceptance.py``, ``test_auth*.py``,
``test_routes.py``, ``test_http_connections.py``, ``test_http_fuzz.py``,
``test_http_header_fuzz.py``, ``test_large_frames_and_bodies.py``) leave these:

- a request body at ``server.maxBodyBytes`` and one byte past it sent chunked (no length to
  judge it by up front), and behind ``Expect: 100-continue``;
- pipelined requests on one kept-alive connection, and many connections at once each sending two;
- a refusal of a request whose body the daemon never read (401, 405, 413) closes the connection
  rather than reading the unread body as the next request;
- such a refusal with a request pipelined behind it reaches the client whole (its body was cut
  off after the head: docs/decisions.md, "The SSE stream and the HTTP surface, a third pass");
- a stream open across writes of the main config and of the pair file that keep its credential;
- a session deleted while a live stream of it is open.

Nothing sleeps for ordering: every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json

import trio

from .conftest import API, LIMIT, Daemon, DaemonFactory, parse_raw_response

LIMIT_BYTES = 65536  # the smallest server.maxBodyBytes the config takes


def request(port: int, method: str, target: str, headers: list[tuple[str, str]] = (), body: bytes = b"",
            *, close: bool = False) -> bytes:
    """One HTTP/1.1 request as bytes; a ``Content-Length`` is added for a body unless the headers
    frame it themselves."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += ["Connection: close"] if close else []
    lines += [f"{k}: {v}" for k, v in headers]
    if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw`` on a new connection and read until the server closes it."""
    data = b""
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(raw)
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data


def answers(data: bytes) -> list:
    """The answers in ``data``, one after another, each by its ``content-length`` (a ``100
    Continue`` left out)."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"an answer cut inside its head: {data[:200]!r}"
        if head.startswith(b"HTTP/1.1 100"):
            data = rest
            continue
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")[1:]
                          if line.lower().startswith(b"content-length:")))
        out.append(parse_raw_response(head + sep + rest[:length]))
        data = rest[length:]
    return out


def chunked(body: bytes, piece: int = 30000) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + piece]), body[i:i + piece])
                    for i in range(0, len(body), piece)) + b"0\r\n\r\n"


def project_body(d: Daemon, size: int, name: str = "p") -> bytes:
    """A valid ``POST /projects`` body of exactly ``size`` bytes (padded with spaces)."""
    workspace = d.root / "ws"
    workspace.mkdir(exist_ok=True)
    body = json.dumps({"name": name, "workspace": str(workspace)}).encode()
    return body[:-1] + b" " * (size - len(body)) + b"}"


async def test_a_chunked_body_at_the_limit_is_read_and_one_byte_past_is_413(daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"maxBodyBytes": LIMIT_BYTES}})
    token = await d.pair("c", strong=True)
    auth = [("Authorization", f"Bearer {token}"), ("Transfer-Encoding", "chunked")]
    at = project_body(d, LIMIT_BYTES, "at")
    (r,) = answers(await exchange(d.port, request(d.port, "POST", f"{API}/projects", auth, chunked(at), close=True)))
    assert r.status == 201 and r.json()["name"] == "at", r.body
    past = project_body(d, LIMIT_BYTES + 1, "past")
    (r,) = answers(await exchange(d.port, request(d.port, "POST", f"{API}/projects", auth, chunked(past), close=True)))
    assert r.status == 413 and r.code == "BODY_TOO_LARGE", r.body
    assert f"the limit is {LIMIT_BYTES}" in r.json()["error"]["message"], r.body
    names = [p["name"] for p in (await d.get("/projects", token)).json()["projects"]]
    assert names == ["at"], names


async def test_expect_100_continue_reads_a_body_at_the_limit_and_refuses_one_past_without_it(
        daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"maxBodyBytes": LIMIT_BYTES}})
    token = await d.pair("c", strong=True)
    auth = [("Authorization", f"Bearer {token}"), ("Expect", "100-continue")]
    at = project_body(d, LIMIT_BYTES, "at")
    (r,) = answers(await exchange(d.port, request(d.port, "POST", f"{API}/projects", auth, at, close=True)))
    assert r.status == 201 and r.json()["name"] == "at", r.body
    # a length past the limit is refused by its length: the client need not send the body at all
    head_only = request(d.port, "POST", f"{API}/projects", auth + [("Content-Length", str(LIMIT_BYTES + 1))])
    (r,) = answers(await exchange(d.port, head_only))
    assert r.status == 413 and r.code == "BODY_TOO_LARGE", r.body
    assert f"the body is {LIMIT_BYTES + 1} bytes; the limit is {LIMIT_BYTES}" in r.json()["error"]["message"]
    # chunked behind Expect: judged as it arrives
    past = project_body(d, LIMIT_BYTES + 1, "past")
    raw = request(d.port, "POST", f"{API}/projects", auth + [("Transfer-Encoding", "chunked")], chunked(past))
    (r,) = answers(await exchange(d.port, raw))
    assert r.status == 413 and r.code == "BODY_TOO_LARGE", r.body
    assert [p["name"] for p in (await d.get("/projects", token)).json()["projects"]] == ["at"]


async def test_pipelined_requests_on_one_connection_are_answered_in_order(daemon: Daemon, strong: str):
    p = daemon.port
    auth = [("Authorization", f"Bearer {strong}")]
    raw = (request(p, "GET", f"{API}/health")
           + request(p, "POST", f"{API}/projects", auth, project_body(daemon, 200, "one"))
           + request(p, "GET", f"{API}/nothing", auth)
           + request(p, "GET", f"{API}/projects", auth, close=True))
    got = answers(await exchange(p, raw))
    assert [r.status for r in got] == [200, 201, 404, 200], [(r.status, r.body) for r in got]
    assert got[0].json()["status"] == "ok" and got[2].code == "NOT_FOUND"
    assert [x["name"] for x in got[3].json()["projects"]] == ["one"]


async def test_a_refusal_that_leaves_the_body_unread_closes_the_connection(daemon_factory: DaemonFactory):
    # A body the daemon did not read must never be taken for the next request on the connection:
    # here the body is itself a well-formed request, which would be answered 200 if it were.
    d = await daemon_factory(config={"server": {"maxBodyBytes": LIMIT_BYTES}})
    token = await d.pair("c", strong=True)
    inner = request(d.port, "GET", f"{API}/health")
    cases = [
        ("POST", f"{API}/projects", [], inner, 401, "AUTH_REQUIRED"),
        ("PUT", f"{API}/health", [], inner, 405, "METHOD_NOT_ALLOWED"),
        ("POST", f"{API}/projects", [("Authorization", f"Bearer {token}")],
         inner + b" " * (LIMIT_BYTES + 1 - len(inner)), 413, "BODY_TOO_LARGE"),
    ]
    for method, target, headers, body, status, code in cases:
        got = answers(await exchange(d.port, request(d.port, method, target, headers, body)))
        assert [(r.status, r.code) for r in got] == [(status, code)], (target, [(r.status, r.body) for r in got])
        assert got[0].headers.get("connection", "").lower() == "close", got[0].headers


async def test_a_refusal_followed_by_a_pipelined_request_is_sent_whole_before_the_close(
        daemon_factory: DaemonFactory):
    # The refusal says `connection: close`, so the request pipelined behind it is not answered; but
    # the refusal itself reaches the client whole, its body as long as its `content-length` says.
    d = await daemon_factory(config={"server": {"maxBodyBytes": LIMIT_BYTES}})
    token = await d.pair("c", strong=True)
    after = request(d.port, "GET", f"{API}/health", close=True)
    cases = [
        ("POST", f"{API}/projects", [], b'{"name": "a"}', 401, "AUTH_REQUIRED"),
        ("PUT", f"{API}/health", [], b'{"name": "a"}', 405, "METHOD_NOT_ALLOWED"),
        ("POST", f"{API}/projects", [("Authorization", f"Bearer {token}")], b" " * (LIMIT_BYTES + 1),
         413, "BODY_TOO_LARGE"),
    ]
    for method, target, headers, body, status, code in cases:
        for _ in range(3):
            data = await exchange(d.port, request(d.port, method, target, headers, body) + after)
            got = answers(data)
            assert [(r.status, r.code) for r in got] == [(status, code)], (target, data[:600])
            assert got[0].json()["error"]["message"], data[:600]


async def test_many_connections_at_once_each_get_both_their_answers(daemon: Daemon, strong: str):
    p = daemon.port
    auth = [("Authorization", f"Bearer {strong}")]
    raw = request(p, "GET", f"{API}/health") + request(p, "GET", f"{API}/projects", auth, close=True)
    results: list[list] = []

    async def one() -> None:
        results.append(answers(await exchange(p, raw)))

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            for _ in range(200):
                nursery.start_soon(one)
    assert len(results) == 200
    assert all([r.status for r in got] == [200, 200] for got in results), results[:3]
    assert (await daemon.get("/health")).status_code == 200


async def test_a_stream_stays_open_across_writes_of_the_config_and_of_the_pair_file(daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 0.2}})
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    async with d.sse(token, params={"session": sid}) as stream:
        assert (await stream.next()).comment == "lens stream"
        main = (await d.get("/config/files/lens.jsonc", token)).json()
        r = await d.put("/config/files/lens.jsonc", token,
                        {"text": '{"server": {"heartbeatSeconds": 5}}\n', "expectDigest": main["digest"]})
        assert r.status_code == 200 and r.json()["appliesAt"] == "nextStart", r.text
        pair = (await d.get("/config/files/pair.json", token)).json()
        r = await d.put("/config/files/pair.json", token,
                        {"text": json.dumps(json.loads(pair["text"]), indent=4) + "\n", "expectDigest": pair["digest"]})
        assert r.status_code == 200 and r.json()["appliesAt"] == "watched", r.text
        # the running daemon keeps its heartbeat and the credential; the stream goes on
        assert (await stream.next()).comment == "ping"
        done = await d.submit(token, sid, "after-writes", "hello")
        msg = await stream.until(lambda m: m.id == done["seq"])
        assert msg.event == "input.submitted" and msg.json()["request_id"] == "after-writes"
        assert not [m for m in stream.messages if m.event in ("stream.end", "stream.dropped")]


async def test_a_session_deleted_while_its_stream_is_open_streams_the_deletion_then_only_pings(
        daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 0.2}})
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    async with d.sse(token, params={"session": sid}) as stream:
        assert (await stream.next()).comment == "lens stream"
        r = await d.request("DELETE", f"/sessions/{sid}", token, json_body={})
        assert r.status_code == 200, r.text
        deleted = await stream.next_event()
        assert deleted.event == "session.deleted" and deleted.json()["session_id"] == sid, deleted
        r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "late", "content": "x"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "SESSION_DELETED", r.text
        assert (await stream.next()).comment == "ping"
        assert (await stream.next()).comment == "ping"
        assert [m.event for m in stream.messages if m.comment is None] == ["session.deleted"]
