"""The HTTP surface of a real ``lens serve`` under hostile headers (F-API-1, F-API-3, F-API-5).

``test_http_fuzz.py`` draws hostile targets, queries, bodies and credentials with well-formed
headers; here the headers themselves are drawn: ``Host`` (empty, long and empty labels, IDNA,
UTF-8 and Latin-1 bytes, ports out of range, IPv6 with and without brackets, trailing dots,
user info, missing, twice), ``Origin``, ``Content-Type``, the framing (``Content-Length`` wrong,
twice, malformed; ``Transfer-Encoding`` chunked, unknown, beside a length), ``Authorization``
shapes, ``Last-Event-ID`` on the stream, ``Accept``, many headers and header sections near and
past the server's limit. One ``lens serve`` process (port 0, a real executor child) serves
every request; each is written on a socket by hand, one connection each.

Every route drawn changes nothing when it succeeds (a repeated submission, an unknown project, an
invalid config text, reads), so after every request, whatever its answer: the process is
alive, ``GET /health`` answers, ``lastSeq`` is what it was, the config and pair files hold the
bytes they held, and the daemon's standard error holds no traceback. Every error answer is
the error shape, the HTTP layer's own refusals of a malformed request too (400, 431, 501:
runtime/server_answers.py); a 431 or 501 only for a request that was malformed at that layer, and
a 431 for every other one whose head is past 16 KiB (runtime/head_limit.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.head_limit import HEAD_LIMIT

from .conftest import LIMIT, Daemon, RawResponse, ServeProcess, assert_error_shape, parse_raw_response, read_answer, serving

EXAMPLES = 300  # requests drawn (about 20 s); HYPOTHESIS_PROFILE=explore draws fresh ones
BODY_LIMIT = 64 * 1024


# --------------------------------------------------------------------------- what is drawn


@dataclass
class World:
    port: int
    strong: str
    read: str
    session: str

    def own(self) -> bytes:
        return b"127.0.0.1:%d" % self.port


def valid_hosts(w: World) -> list[bytes]:
    p = b"%d" % w.port
    return [w.own(), b"localhost:" + p, b"LOCALHOST:" + p, b"[::1]:" + p, b"127.0.0.1", b"localhost", b"[::1]",
            b"127.0.0.1:", b"localhost:0" + p]


def hostile_hosts(w: World) -> list[bytes]:
    """Hosts the daemon refuses (403 ``HOST_FORBIDDEN``), each one h11 lets through."""
    p = b"%d" % w.port
    return [b"", b"evil.example", b"evil.example:" + p, b"a" * 64 + b".example", b"a" * 63 + b"." + b"b" * 64,
            b"a..example", b".", b"..", b"xn--", b"xn--80ak6aa92e.com", b"xn--nxasmq6b:" + p, b"caf\xc3\xa9.example",
            b"caf\xe9.example", b"\xc3\xa9:" + p, b"127.0.0.1:99999", b"127.0.0.1:65536", b"127.0.0.1:-1",
            b"127.0.0.1:+" + p, b"127.0.0.1:" + p + b"0", b"127.0.0.1:1", b"::1", b"::1:" + p, b"[::1", b"[::1]x",
            b"[::1]:" + p + b":1", b"[]", b"[fe80::1%25eth0]:" + p, b"[v1.x]:" + p, b"localhost.", b"localhost.:" + p,
            b"127.0.0.1.:" + p, b"user@127.0.0.1:" + p, b"user:pw@localhost:" + p, b"localhost:" + p + b"@evil.example",
            b"localhost:" + p + b"/x", b"127.1:" + p, b"2130706433:" + p, b"0x7f.0.0.1:" + p, b"10.0.0.1:" + p,
            b"localhost:\xb2", b"localhost:" + b"9" * 5000, b"x" * 5000, b"\xef\xbc\x8elocalhost"]


def hostile_origins(w: World) -> list[bytes]:
    """Origins the daemon refuses (403 ``ORIGIN_FORBIDDEN``)."""
    own = b"http://" + w.own()
    return [b"", b"null", b"http://evil.example", own + b"/", own + b"?x", own + b"#", b"http://user@" + w.own(),
            b"http://[::1", b"http://[::1:%d" % w.port, b"http://]", b"http://[abc]:%d" % w.port,
            b"http://[127.0.0.1]:%d" % w.port, b"http://127.0.0.1:99999", b"http://127.0.0.1:-1",
            b"http://localhost.:%d" % w.port, b"http://caf\xc3\xa9.example", b"http://\xe9", b"file://",
            b"chrome-extension://abc", b"ftp://" + w.own(), own + b" http://evil.example", b"x" * 9000,
            b"http://127.0.0.1:%d" % (w.port + 1 if w.port < 65535 else 1), b"http://a" + b"a" * 70 + b".example"]


def valid_origins(w: World) -> list[bytes]:
    return [b"http://" + w.own(), b"http://localhost:%d" % w.port, b"http://[::1]:%d" % w.port,
            b"HTTP://LOCALHOST:%d" % w.port]


CONTENT_TYPES = [b"application/json", b"Application/JSON", b"application/json; charset=utf-8",
                 b"application/json; charset=latin-1", b'application/json;charset="utf-8"',
                 b"application/json; charset=utf-16", b"application/json; charset=nonsense", b"application/json; x=\xc3\xa9",
                 b"application/json;;;", b"application/json, text/plain", b"application/jsonx", b"text/plain",
                 b"multipart/form-data; boundary=x", b"application/x-www-form-urlencoded", b"", b"\xe9", b"*/*"]
ACCEPTS = [b"application/json", b"text/html", b"text/event-stream", b"*/*", b"", b"application/json;q=0",
           b"\xc3\xa9", b"x" * 5000]
LAST_EVENT_IDS = [b"0", b"", b" 0 ", b"-1", b"+1", b"1e3", b"\xd9\xa3", b"\xb2", b"9" * 30, b"0" * 500, b"abc",
                  b"1_0", b"0x0", b"0, 0"]
BAD_LAST_EVENT_IDS = {b"-1", b"+1", b"1e3", b"\xd9\xa3", b"\xb2", b"9" * 30, b"abc", b"1_0", b"0x0", b"0, 0"}
# (a byte h11 refuses in a header value: its 400 without a body)
HAZARDS = [b"a\x00b", b"a\rb", b"a\x7fb"]


@dataclass
class Request:
    method: str
    target: str
    body: bytes | None
    strong_route: bool  # only a strong-trust credential may succeed
    public: bool
    stream: bool = False
    lines: list[bytes] = field(default_factory=list)
    host: str = "valid"  # valid | hostile | generated | missing | twice
    origin: str = "none"  # none | valid | hostile | generated | twice
    credential: str = "strong"  # strong | read | none | malformed | unknown | twice
    http_malformed: bool = False  # something the HTTP layer itself may refuse (runtime/server_answers.py)
    head_too_large: bool = False  # a head past runtime.head_limit's limit: 431, however it is read
    last_event_id_bad: bool = False

    def describe(self) -> str:
        head = b"\r\n".join(line[:120] for line in self.lines)
        return f"{self.method} {self.target} host={self.host} origin={self.origin} cred={self.credential}\n{head!r}"


def routes(w: World) -> list[tuple[str, str, bytes | None, bool, bool, bool]]:
    """(method, target, body, strong trust, public, stream): every success changes nothing."""
    return [
        ("GET", "/api/v1/health", None, False, True, False),
        ("GET", "/api/v1/projects", None, False, False, False),
        ("GET", f"/api/v1/sessions/{w.session}", None, False, False, False),
        ("POST", f"/api/v1/sessions/{w.session}/inputs", b'{"requestId": "r-hdr", "content": "hello"}', True, False,
         False),  # (a repeat of the set-up's submission: 202, duplicate, nothing appended)
        ("POST", "/api/v1/sessions", b'{"projectId": "no-such-project"}', True, False, False),
        ("PUT", "/api/v1/config/files/lens.jsonc", b'{"text": "{"}', True, False, False),
        ("GET", "/api/v1/events/stream", None, False, False, True),
    ]


@st.composite
def requests(draw: st.DrawFn, w: World) -> Request:
    method, target, body, strong_route, public, stream = draw(st.sampled_from(routes(w)))
    req = Request(method, target, body, strong_route, public, stream)
    lines = [f"{method} {target} HTTP/1.1".encode()]

    how = draw(st.sampled_from(["valid"] * 6 + ["hostile"] * 3 + ["generated", "missing", "twice"]))
    req.host = how
    if how == "valid":
        lines.append(b"Host: " + draw(st.sampled_from(valid_hosts(w))))
    elif how == "hostile":
        lines.append(b"Host: " + draw(st.sampled_from(hostile_hosts(w))))
    elif how == "generated":  # (bytes h11 takes in a value, and some it does not)
        value = draw(st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"").strip(b" \t")))
        lines.append(b"Host: " + value)
        req.http_malformed |= any(c < 0x20 and c != 0x09 or c == 0x7F for c in value)
    elif how == "missing":
        req.http_malformed = True
    else:
        lines += [b"Host: " + w.own(), b"Host: " + draw(st.sampled_from([w.own(), b"evil.example"]))]
        req.http_malformed = True

    how = draw(st.sampled_from(["none"] * 6 + ["valid", "hostile", "hostile", "generated", "twice"]))
    req.origin = how
    if how == "valid":
        lines.append(b"Origin: " + draw(st.sampled_from(valid_origins(w))))
    elif how == "hostile":
        lines.append(b"Origin: " + draw(st.sampled_from(hostile_origins(w))))
    elif how == "generated":
        value = draw(st.text(max_size=30).map(lambda s: ("http://" + s).encode("utf-8")))
        value = value.replace(b"\r", b"").replace(b"\n", b"").strip(b" \t")
        lines.append(b"Origin: " + value)
        req.http_malformed |= any(c < 0x20 and c != 0x09 or c == 0x7F for c in value)
    elif how == "twice":
        lines += [b"Origin: http://" + w.own(), b"Origin: http://" + w.own()]

    how = draw(st.sampled_from(["strong"] * 6 + ["read"] * 2 + ["none", "malformed", "unknown", "twice"]))
    req.credential = how
    if how in ("strong", "read"):
        token = (w.strong if how == "strong" else w.read).encode()
        lines.append(b"Authorization: " + draw(st.sampled_from([b"Bearer ", b"bearer ", b"BEARER ", b"Bearer  "])) + token)
    elif how == "malformed":
        lines.append(b"Authorization: " + draw(st.sampled_from([
            b"", b"Bearer", b"Bearer ", b"Basic " + w.strong.encode(), b"Bearer\t" + w.strong.encode(),
            b"Bearer=" + w.strong.encode(), b"\xc3\xa9 " + w.strong.encode(), b"Token token=" + w.strong.encode()])))
    elif how == "unknown":
        lines.append(b"Authorization: " + draw(st.sampled_from([
            b"Bearer lens_unknown", b"Bearer " + b"x" * 8000, b"Bearer " + b"x" * 60000, b"Bearer \xc3\xa9",
            b"Bearer \xe9\xff", b"Bearer " + w.strong.encode() + b"\xc3\xa9", b"Bearer " + w.strong.encode() + b" x"])))
    else:
        lines += [b"Authorization: Bearer " + w.strong.encode(), b"authorization: Bearer " + w.strong.encode()]

    if draw(st.booleans()):
        lines.append(b"Content-Type: " + draw(st.sampled_from(CONTENT_TYPES)))
    if draw(st.integers(0, 3)) == 0:
        lines.append(b"Accept: " + draw(st.sampled_from(ACCEPTS)))
    if stream and draw(st.booleans()):
        value = draw(st.sampled_from(LAST_EVENT_IDS))
        lines.append(b"Last-Event-ID: " + value)
        req.last_event_id_bad = value.strip() in BAD_LAST_EVENT_IDS

    payload = body or b""
    framing = draw(st.sampled_from(["length"] * 8 + ["chunked", "chunked-and-length", "twice-same", "twice-other",
                                                     "short", "malformed", "unknown-coding"]))
    if body is None and framing == "length":
        framing = "none"
    if framing in ("length", "twice-same"):
        lines += [b"Content-Length: %d" % len(payload)] * (2 if framing == "twice-same" else 1)
    elif framing in ("chunked", "chunked-and-length"):
        lines.append(b"Transfer-Encoding: " + draw(st.sampled_from([b"chunked", b"Chunked", b" chunked "])))
        if framing == "chunked-and-length":
            lines.append(b"Content-Length: %d" % (len(payload) + 3))
        half = len(payload) // 2
        payload = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[:half], payload[half:]) if part)
        payload += b"0\r\n\r\n"
    elif framing == "twice-other":
        lines += [b"Content-Length: %d" % len(payload), b"Content-Length: %d" % (len(payload) + 1)]
        req.http_malformed = True
    elif framing == "short":  # (the rest of the body reads as the next request: garbage)
        lines.append(b"Content-Length: %d" % max(0, len(payload) - 5))
        payload = payload or b"xxxxx"
        req.http_malformed = True
    elif framing == "malformed":
        lines.append(b"Content-Length: " + draw(st.sampled_from([b"-1", b"+5", b"0x10", b"1 2", b"abc",
                                                                 b"99999999999999999999999"])))
        payload = b""
        req.http_malformed = True
    elif framing == "unknown-coding":
        lines.append(b"Transfer-Encoding: " + draw(st.sampled_from([b"gzip", b"gzip, chunked", b"identity",
                                                                    b"chunked, chunked", b"xchunked"])))
        payload = b""
        req.http_malformed = True

    padding = draw(st.sampled_from(["none"] * 8 + ["many", "large", "hazard", "fold"]))
    if padding == "many":
        lines += [b"X-Pad-%d: v" % i for i in range(draw(st.sampled_from([100, 1000, 3000])))]
    elif padding == "large":
        size = draw(st.sampled_from([8_000, 15_000, 16_500, 40_000, 70_000, 200_000]))
        lines.append(b"X-Pad: " + b"x" * size)
    elif padding == "hazard":
        lines.append(b"X-Pad: " + draw(st.sampled_from(HAZARDS)))
        req.http_malformed = True
    elif padding == "fold":  # (obs-fold: h11 joins it to the header before; harmless after X-Pad)
        lines += [b"X-Pad: a", b" folded"]
    lines.append(b"Connection: close")
    req.head_too_large = sum(len(line) + 2 for line in lines) + 2 > HEAD_LIMIT  # (each line's CRLF, the blank line's)
    req.lines = lines
    req.body = payload
    return req


# --------------------------------------------------------------------------- one request


async def send(port: int, req: Request) -> RawResponse | None:
    """Write ``req`` on a new connection; its answer (the head only for an event stream), or
    ``None`` when the server closed the connection without one."""
    raw = b"\r\n".join(req.lines) + b"\r\n\r\n" + (req.body or b"")
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            try:
                await stream.send_all(raw)
            except trio.BrokenResourceError:  # (refused before it was all written: the answer stands)
                pass
            data = await read_answer(stream)
    return parse_raw_response(data) if b"\r\n\r\n" in data else None


def check(req: Request, r: RawResponse | None) -> None:
    where = f"{req.describe()}\n-> {None if r is None else (r.status, r.headers, r.body[:300])}"
    assert r is not None, f"no answer: {where}"
    if req.http_malformed and len(r.body) < int(r.headers.get("content-length", len(r.body))):
        return  # (h11 failed on the rest of the request while the app answered: the server closed mid-answer)
    assert r.body or r.status < 400, f"an error answer without a body: {where}"
    if r.status in (431, 501):  # the HTTP layer's own refusals (a 400 may be the app's too)
        assert req.http_malformed or req.head_too_large, \
            f"the HTTP layer refused a request the app should have answered: {where}"
    assert r.status < 500 or r.status == 501, where
    if r.status >= 400:
        assert_error_shape(r, where)
    if req.http_malformed:
        return  # (h11 may have taken it, or refused it: either is checked above)
    if req.head_too_large:
        assert (r.status, r.code) == (431, "HEADERS_TOO_LARGE"), where
        return
    # What a well-formed request with these headers must get, in the guard's order.
    if req.host == "hostile":
        assert (r.status, r.code) == (403, "HOST_FORBIDDEN"), where
    elif req.host == "valid" and req.origin in ("hostile", "twice"):
        assert (r.status, r.code) == (403, "ORIGIN_FORBIDDEN"), where
    elif req.host == "valid" and req.origin in ("none", "valid") and not req.public:
        if req.credential in ("none", "malformed", "twice"):
            assert (r.status, r.code) == (401, "AUTH_REQUIRED"), where
        elif req.credential == "unknown":
            assert (r.status, r.code) == (401, "AUTH_INVALID"), where
        elif req.credential == "read" and req.strong_route:
            assert (r.status, r.code) == (403, "FORBIDDEN"), where
        elif req.stream and req.last_event_id_bad:
            assert (r.status, r.code) == (400, "INVALID_ARGUMENT"), where
    if r.status < 400:  # only what every check lets through succeeds
        assert req.host in ("valid", "generated") and req.origin in ("none", "valid", "generated"), where
        assert req.public or req.credential in ("strong", "read"), where


# --------------------------------------------------------------------------- the run


def files(cwd: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for name in ("lens.jsonc", "pair.json"):
        path = cwd / "config" / name
        out[name] = path.read_bytes() if path.exists() else None
    return out


async def test_hostile_headers_never_kill_the_daemon_nor_change_anything(tmp_path: Path) -> None:
    cwd = tmp_path
    (cwd / "config").mkdir()
    (cwd / "config" / "lens.jsonc").write_text(json.dumps({"server": {"maxBodyBytes": BODY_LIMIT}}))
    async with serving(cwd) as (serve, d):
        strong = await d.pair("hdr-strong", strong=True, via="cli")
        read = await d.pair("hdr-read")
        project = await d.project(strong, "p")
        sid = (await d.session(strong, project["id"]))["id"]
        await d.submit(strong, sid, "r-hdr", "hello")
        await d.wait_idle(strong, sid)
        await fuzz(d, serve, World(d.port, strong, read, sid))
        assert await serve.terminate() == 0
    err = (cwd / "serve-0.err").read_text()
    assert "Traceback" not in err and "Error in ASGI" not in err, err[-3000:]


async def fuzz(d: Daemon, serve: ServeProcess, w: World) -> None:
    before = (await d.get("/health")).json()["lastSeq"]
    kept = files(d.root)
    err_path = d.root / "serve-0.err"
    seen: dict[int, int] = {}

    def one(req: Request) -> None:
        async def run() -> None:
            r = await send(d.port, req)
            check(req, r)
            assert r is not None
            seen[r.status] = seen.get(r.status, 0) + 1
            assert serve.proc is not None and serve.proc.returncode is None, "the daemon died"
            health = await d.get("/health")
            assert health.status_code == 200 and health.json()["lastSeq"] == before, req.describe()
            assert files(d.root) == kept, req.describe()
            err = err_path.read_text()
            assert "Traceback" not in err and "Error in ASGI" not in err, f"{req.describe()}\n{err[-3000:]}"

        trio.from_thread.run(run)

    run_all = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))(
        given(requests(w))(one))
    await trio.to_thread.run_sync(run_all)
    # the generator reaches every kind of answer
    assert {200, 202, 400, 401, 403, 404} <= set(seen), seen
    assert set(seen) & {431, 501}, seen
    assert (await d.get("/projects", w.strong)).status_code == 200  # the next ordinary request


# --------------------------------------------------------------------------- shapes drawn once


TRAILING = [  # (a request, then bytes the server does not expect)
    b"GET /api/v1/health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\nx",
    b"GET /api/v1/health HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\nx",
    b"GET /api/v1/projects HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    b"GET /api/v1/health HTTP/1.0\r\nHost: {own}\r\n\r\nxx",
    b"POST /api/v1/projects HTTP/1.1\r\nHost: {own}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}garbage",
    b"GET /api/v1/events/stream HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\nx",
    b"GET /api/v1/health HTTP/1.1\r\nHost: {own}\r\nConnection: upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: bKdPyn3u98cTfZJSh4TNeQ==\r\n\r\nx\n",
]


async def test_bytes_after_a_request_never_stop_the_daemon(daemon: Daemon, caplog) -> None:
    """A request followed by bytes the server does not expect (after ``Connection: close``,
    after HTTP/1.0, after an unanswered WebSocket handshake) made h11 fail while the app
    answered, and hypercorn's two writers on the connection raced: ``BusyResourceError`` or
    h11's ``LocalProtocolError`` left the connection's task and ended the whole server (the
    first such request, without a credential). Every one is answered now, and the daemon goes on."""
    own = b"127.0.0.1:%d" % daemon.port
    for template in TRAILING:
        raw = template.replace(b"{own}", own)
        for _ in range(10):  # (which of the two writers comes first varies)
            with trio.fail_after(LIMIT):
                stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
                async with stream:
                    await stream.send_all(raw)
                    data = await read_answer(stream, head_only=True)
            assert data.split(b" ", 2)[1:2] in ([b"400"], [b"401"], [b"403"], [b"200"]), (raw, data[:200])
            assert (await daemon.get("/health")).status_code == 200
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]
