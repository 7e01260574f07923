"""The HTTP interface of SPEC section 9 under generated hostile requests.

One daemon (built-in defaults but a 64 KiB body limit, the faux provider, a real executor) with
a project, a second project, an idle session, a session with a finished faux run and a fork of
it. Hypothesis (derandomized by the suite's profile) then draws requests over every route of
the list "HTTP under ``/api/v1``": ids unknown, empty, long, unicode, ``..``, percent-encoded
slashes and NULs, another project's; query values negative, zero, past 2^63, fractional,
non-numeric, repeated; bodies not JSON, not UTF-8, of the wrong type at the top and in every
field, with fields missing or extra, deeply nested, at and one past the body limit; a wrong or
missing ``Content-Type``; credentials missing, malformed, of another scheme, revoked, read-only.

Every answer is checked against the same oracle (:func:`check_answer`): no 5xx; an error is
exactly ``{"error": {"code": "UPPER_SNAKE", "message": …}}`` with the status its code has in the
API's table, one of the spec's list (plus 405 and 429, "Which 4xx"), and a message without a
traceback, an object's repr or a path of the machine the client did not send itself; a refused
request appended no event; ``GET /health`` answers after each. At the end the log verifies and
a rebuild of the projections equals what the daemon kept up to date.

Requests are written on a socket by hand (an HTTP library would normalise the target), one
connection each. Hypothesis runs in a worker thread and reaches the daemon's trio loop through
``trio.from_thread``: the daemon is the ``daemon_factory`` fixture's, started once for the whole
run.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import (
    LIMIT,
    Daemon,
    RawResponse,
    assert_error_shape,
    parse_raw_response,
    read_answer,
    projection_dump,
    run_lens,
    stop_daemon,
    wait_until,
)

BODY_LIMIT = 64 * 1024  # server.maxBodyBytes of the daemon under test (the lowest allowed)
ALLOWED = {400, 401, 403, 404, 405, 409, 413, 422, 429}  # the spec's list, 405 and 429 ("Which 4xx")
ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,200}")
EXAMPLES = 600  # requests drawn (about 25 s); HYPOTHESIS_PROFILE=explore draws fresh ones
REPO = str(Path(__file__).resolve().parents[2])


# --------------------------------------------------------------------------- one raw request


async def send(port: int, method: str, target: str, headers: list[tuple[str, bytes]], body: bytes | None,
               *, pieces: int = 1) -> RawResponse:
    """One HTTP/1.1 request with this exact target and these header bytes; ``Connection: close``.

    A streaming answer (``text/event-stream``) is returned with its head only, once it began."""
    head = [f"{method} {target} HTTP/1.1".encode(), f"Host: 127.0.0.1:{port}".encode(), b"Connection: close"]
    head += [k.encode() + b": " + v for k, v in headers]
    if body is not None:
        head.append(b"Content-Length: %d" % len(body))
    raw = b"\r\n".join(head) + b"\r\n\r\n"
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(raw)
            if body:
                step = max(1, -(-len(body) // pieces))
                for i in range(0, len(body), step):  # (a slow client's pieces: each its own send)
                    await stream.send_all(body[i:i + step])
                    await trio.lowlevel.checkpoint()
            data = await read_answer(stream)
    return parse_raw_response(data)


# --------------------------------------------------------------------------- the oracle


@dataclass
class Sent:
    """What a request carried that decides its answer."""

    method: str
    target: str
    raw: bytes  # everything the client wrote (headers and body): what a message may echo
    credential: str  # strong | read | none | malformed | scheme | revoked | unknown | twice
    strong_route: bool
    public: bool
    json_body: str | None = None  # "invalid" | "not-object" | None (an object, or no body)
    ids_well_formed: bool = True  # every id of the path is one the API's id rule accepts


def fits(sent: Sent, status: int, code: str) -> str | None:
    """Why ``status``/``code`` do not fit what was sent ("Which 4xx"); ``None`` when they do."""
    if sent.public:
        return None
    if sent.credential in ("none", "malformed", "scheme", "twice"):
        return None if (status, code) == (401, "AUTH_REQUIRED") else "expected 401 AUTH_REQUIRED"
    if sent.credential in ("revoked", "unknown"):
        return None if (status, code) == (401, "AUTH_INVALID") else "expected 401 AUTH_INVALID"
    if sent.credential == "read" and sent.strong_route and status < 400:
        return "a read-only credential changed something"
    if sent.credential == "strong" and sent.ids_well_formed and sent.json_body == "invalid" and status != 413:
        return None if (status, code) == (400, "INVALID_JSON") else "expected 400 INVALID_JSON"
    if sent.credential == "strong" and sent.ids_well_formed and sent.json_body == "not-object" and status != 413:
        return None if (status, code) == (422, "VALIDATION_FAILED") else "expected 422 VALIDATION_FAILED"
    return None


def check_answer(sent: Sent, r: RawResponse, private: list[str]) -> None:
    where = f"{sent.method} {sent.target[:300]} -> {r.status} {r.body[:500]!r}"
    assert r.status < 500, where
    if r.status < 400 or sent.method == "HEAD":  # (a HEAD answer has no body)
        return
    assert r.status in ALLOWED, where
    code, message = assert_error_shape(r, where)
    why = fits(sent, r.status, code)
    assert why is None, f"{why}: {where}"
    sent_text = sent.raw.decode("utf-8", "replace")
    for path in private:
        assert path not in message or path in sent_text, f"the message names {path}: {where}"


# --------------------------------------------------------------------------- what is drawn


@dataclass
class World:
    d: Daemon
    tokens: dict[str, str]  # strong, read, revoked
    project: str
    other_project: str
    idle: str
    ran: str
    fork: str
    other_session: str
    request_id: str  # the finished run's input
    item: str  # a context item of the finished run
    workspace: str
    sessions: list[str]


def hostile_ids(w: World) -> st.SearchStrategy[str]:
    """Path segments, already written as they go on the wire (percent-encoded where needed)."""
    known = [w.project, w.other_project, w.idle, w.ran, w.fork, w.other_session, w.request_id, w.item,
             "lens.jsonc", "pair.json"]
    fixed = ["", "x", "unknown-id", "a" * 200, "a" * 201, "a" * 4000, "..", ".", "...", "%2e%2e", "%2F", "a%2Fb",
             "%2f..%2f..%2fetc%2fpasswd", "%00", "a%00b", "%FF", "%C3%A9", "%E2%9C%93", "%F0%9F%98%80", "a%20b",
             "a%0Ab", "a%0D%0Ab", "%25", "a;b", "a:b", "-", "_", "lens.example.jsonc", "..%2Fpair.json",
             "config", "%5C", "con", "nul", "0", "-1", "9" * 30]
    texts = st.text(max_size=40).map(lambda s: quote(s, safe=""))
    return st.sampled_from(known) | st.sampled_from(fixed) | texts


NUMBERS = ["-1", "0", "1", "2", "100", "1000", "1001", "1048576", "1048577", "9223372036854775807",
           "9223372036854775808", "18446744073709551616", "9" * 40, "1.5", "0.0", "-0", "1e3", "abc", "", "+5",
           "%205", "%D9%A3", "0x10", "1_000", "%00", "%FF", "NaN", "Infinity"]


def query_values(w: World) -> st.SearchStrategy[str]:
    ids = [w.project, w.other_project, w.idle, w.ran, "unknown", "", "a%2Fb", "%00", "x" * 201, "%C3%A9",
           "newest", "oldest"]  # (and the values of `order`)
    return (st.sampled_from(NUMBERS) | st.sampled_from(ids)
            | st.integers(-(2**70), 2**70).map(str) | st.text(max_size=12).map(lambda s: quote(s, safe="")))


LONG = ["x" * 199, "x" * 200, "x" * 201, "x" * 5000]
WRONG_TYPES = st.sampled_from([None, True, 0, -1, 1.5, 2**64, -(2**63) - 1, 10**400, [], [1], {}, {"a": 1}, "",
                               "x", " ", "\u0000", "\ud7ff\uffff", "é✓😀"] + LONG)


def field_values(valid: list[Any]) -> st.SearchStrategy[Any]:
    """Mostly one of the field's own values (the first ones valid), else a value of a wrong type
    or ``...`` (the field left out)."""
    return st.sampled_from(["own"] * 7 + ["wrong"] * 2 + ["missing"]).flatmap(
        lambda how: st.sampled_from(valid) if how == "own" else WRONG_TYPES if how == "wrong" else st.just(...))


def object_bodies(fields: dict[str, list[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects over ``fields`` (each valid or of a wrong type), some left out, some extra."""
    per_field = {name: field_values(valid) for name, valid in fields.items()}
    extra = st.dictionaries(st.sampled_from(["extra", "isVerified", "trust", "ID", "__proto__", "é", "k" * 5000]), WRONG_TYPES,
                            max_size=2)

    def build(values: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
        return {**{k: v for k, v in values.items() if v is not ...}, **more}

    return st.builds(build, st.fixed_dictionaries(per_field), st.sampled_from([True, True, False]).flatmap(
        lambda plain: st.just({}) if plain else extra))


def padded(obj: Any, size: int) -> bytes:
    raw = json.dumps(obj).encode()
    return raw + b" " * max(0, size - len(raw))


@st.composite
def bodies(draw: st.DrawFn, fields: dict[str, list[Any]] | None) -> tuple[bytes | None, str | None]:
    """(body bytes, "invalid" | "not-object" | None)."""
    choice = draw(st.sampled_from(["object"] * 6 + ["none", "empty", "garbage", "not-utf8", "top", "deep", "limit"]))
    if choice == "none":
        return None, None
    if choice == "empty":
        return b"", ("invalid" if fields else None)
    if choice == "garbage":
        raw = draw(st.sampled_from([b"{", b"not json", b'{"a": 1,}', b"{'a': 1}", b"\x00", b"[1, 2", b'{"a": 1} x',
                                    b"NaN", b"name=x&workspace=y", b'{"a": "\\ud800"}']) | st.binary(min_size=1,
                                                                                                    max_size=40))
        try:
            msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return raw, ("invalid" if raw.strip() or fields else None)
        return raw, (None if raw.strip().startswith(b"{") else "not-object")
    if choice == "not-utf8":
        return b'{"text": "\xff\xfe", "name": "\xc3"}', "invalid"
    if choice == "top":
        value = draw(st.sampled_from([[], [{}], 1, -1, 1.5, "x", True, None, 10**400]))
        return json.dumps(value).encode(), "not-object"
    if choice == "deep":
        depth = draw(st.sampled_from([100, 1000, 5000, 20000]))
        if draw(st.booleans()):
            return b"[" * depth + b"]" * depth, {100: "not-object", 1000: None}.get(depth, "invalid")
        return b'{"a": ' + b"[" * depth + b"]" * depth + b"}", None if depth <= 1000 else "invalid"
    obj = draw(object_bodies(fields or {}))
    if choice == "limit":
        size = draw(st.sampled_from([BODY_LIMIT, BODY_LIMIT + 1]))
        return padded(obj, size), None
    return json.dumps(obj).encode(), None


CONTENT_TYPES = [None, "application/json", "application/json; charset=utf-8", "text/plain",
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=latin-1",
                 "", "*/*", "application/xml", "\u00e9"]


@st.composite
def credentials(draw: st.DrawFn, w: World) -> tuple[str, bytes | None]:
    kind = draw(st.sampled_from(["strong"] * 12 + ["read"] * 3 + ["none", "malformed", "scheme", "revoked", "unknown",
                                                                  "twice"]))
    if kind in ("strong", "read", "revoked"):
        return kind, b"Bearer " + w.tokens[kind].encode()
    if kind == "twice":  # (two headers: the request builder splits at the NUL)
        first, second = draw(st.permutations(["strong", draw(st.sampled_from(["strong", "read", "revoked"]))]))
        return kind, b"Bearer " + w.tokens[first].encode() + b"\0Bearer " + w.tokens[second].encode()
    if kind == "none":
        return kind, None
    if kind == "malformed":
        return kind, draw(st.sampled_from([b"", b"Bearer", b"Bearer ", b"Bearer    ", b"Token", b"bearer"]))
    if kind == "scheme":
        return kind, draw(st.sampled_from([b"Basic " + w.tokens["strong"].encode(), b"Token " + w.tokens["strong"].encode(),
                                           b"Digest x", b"Bearer\t" + w.tokens["strong"].encode()]))
    return kind, draw(st.sampled_from([b"Bearer lens_unknown", b"Bearer " + b"x" * 4000, b"Bearer \xc3\xa9",
                                       b"Bearer " + w.tokens["strong"].encode()[:-1]]))


def routes(w: World) -> list[tuple[str, str, list[str], dict[str, list[Any]] | None, bool]]:
    """(method, path with {placeholders}, query parameters, body fields or None, strong trust)."""
    ws = w.workspace
    content = ["hello", "", [{"type": "text", "text": "hi"}], [{"type": "x"}], "x" * 70000] + [
        [{"type": "image", "artifactId": aid, "mime": mime}]
        for aid in ("a" * 64, "", "../../etc/passwd", "a%2Fb", "x" * 201) for mime in ("image/png", "text/html")]
    return [
        ("GET", "/health", [], None, False),
        ("POST", "/pair/requests", [], {"clientId": ["fuzz-client", "", "a b", "x" * 201], "name": ["n", ""]}, False),
        ("GET", "/projects", ["order", "limit", "after"], None, False),
        ("POST", "/projects", [], {"name": ["p2", "", " ", "a\nb", "x" * 200, "x" * 201],
                                   "workspace": [ws, "", "relative", "/", "/etc", "/nonexistent", ws + "\u0000",
                                                 ws + "/..", "~"]}, True),
        ("GET", "/sessions", ["project", "projectId", "includeDeleted", "order", "limit", "after"], None, False),
        ("POST", "/sessions", [], {"projectId": [w.project, w.other_project, "", "unknown", "x" * 201],
                                   "model": [None, "faux/echo", "unknown/model", "", " x", "x" * 201]}, True),
        ("GET", "/sessions/{sid}", ["itemsLimit", "itemsBefore", "agentsStart", "agentsLimit", "agentId"], None, False),
        ("POST", "/sessions/{sid}/inputs", [], {"requestId": ["r-fuzz", w.request_id, "", "a b", "x" * 201],
                                                "content": content, "whenBusy": ["followUp", "steer", "later", ""]}, True),
        ("POST", "/sessions/{sid}/inputs/{rid}/withdraw", [], {}, True),
        ("POST", "/sessions/{sid}/inputs/{rid}/steer", [], {}, True),
        ("POST", "/sessions/{sid}/abort", [], {}, True),
        ("GET", "/sessions/{sid}/events", ["after", "limit"], None, False),
        ("POST", "/sessions/{sid}/questions/{qid}/answer", [], {"kind": ["answer", "skip", "other"],
                                                               "optionIds": [None, [], ["a"], ["a"] * 1000],
                                                               "text": [None, "", "t", "x" * 70000]}, True),
        ("GET", "/events/stream", ["session", "project", "sessionId", "projectId", "after"], None, False),
        ("GET", "/artifacts/{aid}", [], None, False),
        ("GET", "/tools/inventory", ["session", "sessionId"], None, False),
        ("GET", "/config/files", [], None, True),
        ("GET", "/config/files/{name}", [], None, True),
        ("PUT", "/config/files/{name}", [], {"text": ["", "{", "[]", "1", '{"server": {"port": "x"}}', "// c\n{}",
                                                      "{\"x\": 1}", "\u0000",
                                                      '{"' + "k" * 5000 + '": 1}', '{"defaultModel": "' + "m" * 5000 + '"}',
                                                      '{"server": {"host": "' + "h" * 5000 + '"}}',
                                                      '{"providers": [{"id": "' + "i" * 5000 + '"}]}'],
                                             "expectDigest": [None, "", "x" * 64, "sha256:" + "0" * 64]}, True),
        ("POST", "/history/search", [], {"projectId": [w.project, w.other_project, "", "x" * 201],
                                         "query": ["hello", "", "x" * 4096, "x" * 4097, "的" * 64, "的" * 65,
                                                   "a " * 33, '"', "*", "NEAR(", "a OR b", "\u0000"],
                                         "sessionId": [None, w.ran, w.other_session, "", "a b"],
                                         "agentId": [None, "main", ""], "taskId": [None, "t", ""],
                                         "afterContextItemId": [None, w.item, "unknown", ""],
                                         "limit": [1, 0, -1, 100, 101, 2**63, 1.5]}, False),
        ("GET", "/history/items/{cid}", ["offset", "limit"], None, False),
    ]


@st.composite
def requests(draw: st.DrawFn, w: World) -> tuple[Sent, list[tuple[str, bytes]], bytes | None, str | None]:
    method, path, params, fields, strong = draw(st.sampled_from(routes(w)))
    own = method
    if draw(st.integers(0, 9)) == 0:  # another method on the route (its own other verbs too)
        method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "FOO"]))
    ids_ok = True
    for slot in re.findall(r"\{(\w+)\}", path):
        value = draw(hostile_ids(w))
        if slot != "name":
            ids_ok = ids_ok and bool(ID_RE.fullmatch(value))
        else:
            ids_ok = ids_ok and value != "" and "%2" not in value.lower()
        path = path.replace("{" + slot + "}", value, 1)
    pairs = []
    for name in draw(st.lists(st.sampled_from(params), max_size=4)) if params else []:
        pairs.append(f"{name}={draw(query_values(w))}")
    target = "/api/v1" + path + ("?" + "&".join(pairs) if pairs else "")
    body, shape = (None, None)
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        body, shape = draw(bodies(fields))
    if method == "PUT" and path == "/config/files/pair.json" and body is not None and b"{" in body[1:]:
        body, shape = b'{"text": "{"}', None  # (never a valid pair file: it would lock every credential out)
    credential, authorization = draw(credentials(w))
    headers: list[tuple[str, bytes]] = []
    for value in authorization.split(b"\0") if authorization is not None else []:
        headers.append(("Authorization", value))
    if body is not None or draw(st.booleans()):
        ctype = draw(st.sampled_from(CONTENT_TYPES))
        if ctype is not None:
            headers.append(("Content-Type", ctype.encode("utf-8")))
    if path == "/events/stream" and draw(st.booleans()):
        headers.append(("Last-Event-ID", draw(st.sampled_from(NUMBERS)).encode("latin-1")))
    raw = b"".join(k.encode() + v for k, v in headers) + (body or b"")
    public = path in ("/health", "/pair/requests")  # (any method: another one is 405, needing no credential)
    if method != own:
        shape = None  # (the body rules are the route's own method's)
    sent = Sent(method, target, raw, credential, strong, public, shape, ids_ok)
    return sent, headers, body, None


# --------------------------------------------------------------------------- the run


async def last_seq(d: Daemon) -> int:
    r = await d.get("/health")
    assert r.status_code == 200, r.text
    return r.json()["lastSeq"]


async def settle(d: Daemon, token: str, sessions: list[str]) -> int:
    """Wait until every session is idle (a request that was accepted may have started a run)."""
    listed = (await d.get("/sessions", token, params={"includeDeleted": "true"})).json()["sessions"]
    for sid in {*sessions, *(s["id"] for s in listed)}:
        v = (await d.get(f"/sessions/{sid}", token)).json()
        if not v.get("deleted"):
            await d.wait_idle(token, sid)
    return await last_seq(d)


async def make_world(daemon_factory) -> World:
    d = await daemon_factory(config={"server": {"maxBodyBytes": BODY_LIMIT}})
    strong = await d.pair("fuzz-strong", strong=True)
    read = await d.pair("fuzz-read")
    revoked = await d.pair("fuzz-revoked", strong=True)
    await trio.to_thread.run_sync(lambda: d.pairs().revoke("fuzz-revoked"))
    await d.wait_refused(revoked)
    project = await d.project(strong, "p")
    other = await d.project(strong, "q")
    idle = (await d.session(strong, project["id"]))["id"]
    ran = (await d.session(strong, project["id"]))["id"]
    await d.submit(strong, ran, "r-ran", "hello fuzz")
    await d.wait_idle(strong, ran)
    first = (await d.events(strong, ran))[0]["seq"]
    fork = await d.post(f"/sessions/{ran}/fork", strong, {"seq": first})
    assert fork.status_code == 201, fork.text
    other_session = (await d.session(strong, other["id"]))["id"]
    hits = await d.post("/history/search", strong, {"projectId": project["id"], "query": "fuzz"})
    item = hits.json()["results"][0]["contextItemId"]
    sessions = [idle, ran, fork.json()["id"], other_session]
    return World(d, {"strong": strong, "read": read, "revoked": revoked}, project["id"], other["id"], idle, ran,
                 fork.json()["id"], other_session, "r-ran", item, project["workspace"], sessions)


async def test_generated_hostile_requests_get_clear_errors_and_change_nothing(daemon_factory) -> None:
    w = await make_world(daemon_factory)
    d = w.d
    strong = w.tokens["strong"]
    private = sorted({str(d.root), str(d.data_dir), str(d.config_dir), REPO, sys.prefix}, key=len, reverse=True)
    seen: dict[str, int] = {}

    def one(request: tuple[Sent, list[tuple[str, bytes]], bytes | None, str | None]) -> None:
        sent, headers, body, _ = request

        async def run() -> None:
            before = await last_seq(d)
            r = await send(d.port, sent.method, sent.target, headers, body)
            check_answer(sent, r, private)
            seen[f"{r.status}"] = seen.get(f"{r.status}", 0) + 1
            if r.status >= 400:
                assert await last_seq(d) == before, f"a refused request appended events: {sent.target[:200]}"
            elif sent.method != "GET":
                await settle(d, strong, w.sessions)
            assert (await d.get("/health")).status_code == 200

        trio.from_thread.run(run)

    fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))(
        given(requests(w))(one))
    await trio.to_thread.run_sync(fuzz)
    assert {"200", "400", "401", "404", "422"} <= set(seen), seen  # the generator reaches past every check

    # The log is whole, and a rebuild of the projections gives what the daemon kept up to date.
    final = await settle(d, strong, w.sessions)
    await wait_until(lambda: _caught_up(d.data_dir, final), what="the projections catching up")
    await stop_daemon(d)
    incremental = projection_dump(d.data_dir)
    verify = await run_lens(d.root, "log", "verify", "--data", "data", check=False)
    assert verify.returncode == 0, (verify.stdout, verify.stderr)
    await run_lens(d.root, "log", "rebuild", "--data", "data")
    assert projection_dump(d.data_dir) == incremental


async def _caught_up(data_dir: Path, seq: int) -> bool:
    return all(p == seq for _, _, p in projection_dump(data_dir)["positions"])



# --------------------------------------------------------------------------- shapes hypothesis is poor at


async def test_every_body_route_takes_a_body_at_the_limit_and_refuses_one_byte_more(daemon_factory) -> None:
    w = await make_world(daemon_factory)
    d, strong = w.d, w.tokens["strong"]
    auth = [("Authorization", f"Bearer {strong}".encode()), ("Content-Type", b"application/json")]
    bodies_of = [
        ("/pair/requests", {"clientId": "limit-client", "name": "n"}),
        ("/projects", {"name": "limit", "workspace": w.workspace}),
        ("/sessions", {"projectId": w.project}),
        (f"/sessions/{w.idle}/inputs", {"requestId": "r-limit", "content": "at the limit"}),
        (f"/sessions/{w.idle}/inputs/r-none/withdraw", {}),
        (f"/sessions/{w.idle}/inputs/r-none/steer", {}),
        (f"/sessions/{w.idle}/abort", {}),
        (f"/sessions/{w.idle}/questions/q-none/answer", {"kind": "skip"}),
        ("/history/search", {"projectId": w.project, "query": "fuzz"}),
    ]
    for path, obj in bodies_of:
        before = await last_seq(d)
        over = await send(d.port, "POST", "/api/v1" + path, auth, padded(obj, BODY_LIMIT + 1))
        assert (over.status, over.code) == (413, "BODY_TOO_LARGE"), (path, over.body)
        assert await last_seq(d) == before
        at = await send(d.port, "POST", "/api/v1" + path, auth, padded(obj, BODY_LIMIT))
        assert at.status != 413 and at.status < 500, (path, at.status, at.body)
        await settle(d, strong, w.sessions)
    text = (await d.get("/config/files/lens.jsonc", strong)).json()["text"]
    put = {"text": text}
    over = await send(d.port, "PUT", "/api/v1/config/files/lens.jsonc", auth, padded(put, BODY_LIMIT + 1))
    assert (over.status, over.code) == (413, "BODY_TOO_LARGE"), over.body
    at = await send(d.port, "PUT", "/api/v1/config/files/lens.jsonc", auth, padded(put, BODY_LIMIT))
    assert at.status == 200, at.body


async def test_a_header_section_past_the_servers_limit_is_refused_and_the_daemon_goes_on(daemon: Daemon,
                                                                                         strong: str) -> None:
    """Refused by the HTTP layer (h11, through hypercorn) before the app runs, in the error shape
    (runtime/server_answers.py; docs/decisions.md, "Errors the HTTP server answers before the
    application")."""
    for name, value in [("X-Padding", b"x" * 100_000), ("Authorization", b"Bearer " + b"x" * 100_000)]:
        with trio.fail_after(LIMIT):
            stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            async with stream:
                await stream.send_all(b"GET /api/v1/projects HTTP/1.1\r\nHost: 127.0.0.1\r\n" + name.encode() + b": "
                                      + value + b"\r\n\r\n")
                data = await read_answer(stream)
        r = parse_raw_response(data)
        assert r.status in (400, 431), data[:200]
        assert_error_shape(r, name)
        assert (await daemon.get("/health")).status_code == 200
        assert await daemon.status_of(strong) == 200


async def test_a_body_sent_in_pieces_is_read_whole_and_a_body_cut_short_appends_nothing(daemon: Daemon,
                                                                                         strong: str) -> None:
    project = await daemon.project(strong, "p")
    sid = (await daemon.session(strong, project["id"]))["id"]
    auth = [("Authorization", f"Bearer {strong}".encode()), ("Content-Type", b"application/json")]
    body = json.dumps({"requestId": "r-pieces", "content": "sent in pieces " + "é" * 300}).encode()
    r = await send(daemon.port, "POST", f"/api/v1/sessions/{sid}/inputs", auth, body, pieces=len(body))
    assert r.status == 202, r.body  # (one byte a send: pieces end inside a character's bytes too)
    await daemon.wait_idle(strong, sid)
    submitted = [e for e in await daemon.events(strong, sid) if e["kind"] == "input.submitted"]
    assert [e["body"]["content"][0]["text"] for e in submitted] == ["sent in pieces " + "é" * 300]
    # chunked, in pieces, and invalid: 400 as for any other body
    r = await send(daemon.port, "POST", f"/api/v1/sessions/{sid}/inputs", auth, b'{"requestId": "r-bad", "content": ',
                   pieces=7)
    assert (r.status, r.code) == (400, "INVALID_JSON"), r.body
    # A client that declares a length, sends half and goes away: nothing is recorded.
    before = await last_seq(daemon)
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with stream:
            whole = json.dumps({"requestId": "r-cut", "content": "cut short"}).encode()
            await stream.send_all(f"POST /api/v1/sessions/{sid}/inputs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  f"Authorization: Bearer {strong}\r\nContent-Length: {len(whole)}\r\n\r\n".encode()
                                  + whole[:len(whole) // 2])
    assert (await daemon.get("/health")).status_code == 200
    assert await last_seq(daemon) == before
    assert not [e for e in await daemon.events(strong, sid) if e["request_id"] == "r-cut"]
