"""SPEC section 9 (the interface contract), walked again from a stranger's client.

Every request goes to a real daemon on a loopback port 0 (built-in defaults, the ``faux`` model,
a real executor child) over real HTTP: ``httpx2`` where an ordinary client is meant, a socket and
hand-written HTTP/1.1 (``raw_http``) where the exact target, method or headers matter. Pairing
goes through ``POST /pair/requests`` and the real ``lens pair approve`` command, and the events a
session's route answers are compared with what the real ``lens log decode`` prints.

The first test walks the documented surface in the order a client meets it; the others pin what
the audit "Audit, once more: the interface contract from a stranger's client" (docs/decisions.md)
changed: what a client may reasonably send that the spec does not forbid (another method, OPTIONS,
a trailing slash, a byte order mark, an empty body, a content coding) gets a correct answer or a
clear, stable error.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import trio

from tests.daemon.conftest import API, Daemon, error_of, raw_http, run_lens, wait_until

DECODE_KEYS = {"seq", "ts", "project_id", "session_id", "agent_id", "task_id", "kind", "request_id", "body"}
CAMEL = __import__("re").compile(r"[a-z][A-Za-z0-9]*")


def camel_keys(value: Any, path: str = "") -> list[str]:
    """Keys of ``value`` (at any depth) that are not camelCase."""
    bad: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if not CAMEL.fullmatch(k):
                bad.append(f"{path}.{k}")
            bad.extend(camel_keys(v, f"{path}.{k}"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            bad.extend(camel_keys(v, f"{path}[{i}]"))
    return bad


def message_of(body: bytes) -> str:
    return json.loads(body)["error"]["message"]


# --------------------------------------------------------------------------- the walk


async def test_the_documented_surface_answers_as_section_9_writes_it(daemon: Daemon) -> None:
    d = daemon
    # Pairing: 202 {clientId, status: "pending"}; `lens pair approve` prints the credential alone
    # on its last line; without --strong-trust it is read-only.
    r = await d.post("/pair/requests", body={"clientId": "stranger", "name": "a laptop"})
    assert r.status_code == 202 and r.json() == {"clientId": "stranger", "status": "pending"}
    approved = await run_lens(d.root, "pair", "approve", "--client", "stranger", "--strong-trust")
    token = approved.stdout.rstrip("\n").splitlines()[-1]
    assert token and " " not in token
    await d.wait_accepted(token)
    await d.post("/pair/requests", body={"clientId": "watcher", "name": "a phone"})
    read_only = (await run_lens(d.root, "pair", "approve", "--client", "watcher")).stdout.rstrip("\n").splitlines()[-1]
    await d.wait_accepted(read_only)
    listed = await run_lens(d.root, "pair", "list")
    assert "stranger" in listed.stdout and token not in listed.stdout

    # Every route but health and pairing registration needs the credential.
    assert (await d.get("/health")).json()["status"] == "ok"
    r = await d.get("/projects")
    assert r.status_code == 401 and error_of(r) == "AUTH_REQUIRED"
    assert r.headers["www-authenticate"].startswith("Bearer")

    # Projects: 201 {id, name, workspace}.
    ws = d.root / "workspaces" / "walk"
    ws.mkdir(parents=True)
    (ws / "notes.txt").write_text("the walk's workspace\n")
    r = await d.post("/projects", token, {"name": "walk", "workspace": str(ws)})
    assert r.status_code == 201, r.text
    project = r.json()
    assert {"id", "name", "workspace"} <= set(project) and project["name"] == "walk"
    assert project["workspace"] == str(ws.resolve())
    r = await d.post("/projects", read_only, {"name": "no", "workspace": str(ws)})
    assert r.status_code == 403 and error_of(r) == "FORBIDDEN"
    assert project["id"] in [p["id"] for p in (await d.get("/projects", read_only)).json()["projects"]]

    # Sessions: 201 {id, projectId, …}; a Content-Type with a charset is JSON all the same.
    r = await d.request("POST", "/sessions", token, content=json.dumps({"projectId": project["id"]}).encode(),
                        headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 201, r.text
    session = r.json()
    sid = session["id"]
    assert session["projectId"] == project["id"] and not camel_keys(session)
    assert sid in [s["id"] for s in (await d.get("/sessions", token, params={"projectId": project["id"]})).json()["sessions"]]

    # Inputs: 202 {requestId, seq, duplicate}; a repeat gives the original seq and duplicate: true.
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "walk-1", "content": "hello walk"})
    assert r.status_code == 202 and set(r.json()) == {"requestId", "seq", "duplicate"}, r.text
    first = r.json()
    assert first["requestId"] == "walk-1" and first["duplicate"] is False and isinstance(first["seq"], int)
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "walk-1", "content": "hello walk"})
    assert r.status_code == 202 and r.json() == {**first, "duplicate": True}
    view = await d.wait_idle(token, sid)

    # The view state: status, items, queued, todos, usage (camelCase keys everywhere).
    assert {"status", "items", "queued", "todos", "usage"} <= set(view)
    assert view["status"] == "idle" and not camel_keys(view)
    assert [it["role"] for it in view["items"]] == ["user", "assistant"]

    # Events: {events: [...], nextAfter}, shaped as `lens log decode` prints them.
    r = await d.get(f"/sessions/{sid}/events", token, params={"after": "0", "limit": "1000"})
    page = r.json()
    assert set(page) == {"events", "nextAfter"} and page["nextAfter"] == page["events"][-1]["seq"]
    kinds = [e["kind"] for e in page["events"]]
    assert kinds[:2] == ["session.created", "input.submitted"] and "model.responded" in kinds
    assert all(DECODE_KEYS <= set(e) for e in page["events"])
    decoded = await run_lens(d.root, "log", "decode", "--data", str(d.data_dir), "--session", sid)
    assert [json.loads(line) for line in decoded.stdout.splitlines()] == page["events"]
    r = await d.get(f"/sessions/{sid}/events", token, params={"after": str(page["nextAfter"])})
    assert r.json() == {"events": [], "nextAfter": page["nextAfter"]}

    # History: search and read, paged by UTF-8 bytes.
    r = await d.post("/history/search", read_only, {"projectId": project["id"], "query": "walk", "limit": 1})
    found = r.json()
    assert set(found) == {"results", "nextAfterContextItemId"}, found
    hit = found["results"][0]
    assert {"contextItemId", "sessionId", "agentId", "taskId", "role", "snippet"} <= set(hit)
    assert found["nextAfterContextItemId"] == hit["contextItemId"]
    r = await d.get(f"/history/items/{hit['contextItemId']}", token, params={"offset": "0", "limit": "5"})
    item = r.json()
    assert {"contextItemId", "text", "offset", "nextOffset", "eof", "digest"} <= set(item)
    assert item["text"] == "hello" and item["nextOffset"] == 5 and item["eof"] is False

    # The SSE stream: id = seq, event = kind, data = the decoded event; Last-Event-ID resumes.
    async with d.sse(token, params={"session": sid}, last_event_id=first["seq"]) as stream:
        frames = [await stream.next_event() for _ in range(len(page["events"]) - 2)]
    assert [f.id for f in frames] == [e["seq"] for e in page["events"][2:]]
    assert [f.event for f in frames] == [e["kind"] for e in page["events"][2:]]
    assert [f.json() for f in frames] == page["events"][2:]

    # Other routes a client reads: tools, config files (strong trust), models, workspace, jobs.
    assert (await d.get("/tools/inventory", token, params={"session": sid})).status_code == 200
    assert (await d.get("/config/files", read_only)).status_code == 403
    names = [f["name"] for f in (await d.get("/config/files", token)).json()["files"]]
    assert "lens.jsonc" in names and "pair.json" in names
    r = await d.get(f"/sessions/{sid}/workspace/file", read_only, params={"path": "notes.txt"})
    assert r.json()["text"] == "the walk's workspace\n"
    assert (await d.get(f"/sessions/{sid}/jobs", read_only)).json() == {"jobs": []}

    # Steer / withdraw / abort while nothing is queued: the spec's answers, no error.
    r = await d.post(f"/sessions/{sid}/inputs/walk-1/withdraw", token)
    assert r.status_code == 200 and r.json()["status"] == "settled"
    r = await d.post(f"/sessions/{sid}/inputs/nothing/withdraw", token)
    assert r.json()["status"] == "unknown"
    r = await d.post(f"/sessions/{sid}/inputs/walk-1/steer", token)
    assert r.status_code == 409 and error_of(r) == "INPUT_NOT_QUEUED"
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200

    # A parameter the route does not know is ignored (clients add their own: cache busting).
    r = await d.get("/projects", token, params={"_": "1733222222"})
    assert r.status_code == 200
    # HEAD on a GET route: the GET's status and type, no body.
    r = await raw_http(d.port, "HEAD", f"{API}/sessions/{sid}", {"Authorization": f"Bearer {token}"})
    assert r.status == 200 and r.headers["content-type"] == "application/json" and r.body == b""


# --------------------------------------------------------------------------- what the audit changed


async def test_another_method_is_405_naming_the_methods_also_in_allow(daemon: Daemon, strong: str) -> None:
    """RFC 9110 15.5.6: a 405 carries ``Allow``. The answer had none, and its message was
    werkzeug's "The method is not allowed for the requested URL."."""
    for method, path, allowed in [("DELETE", "/projects", "GET, HEAD, OPTIONS, POST"),
                                  ("PUT", "/sessions", "GET, HEAD, OPTIONS, POST"),
                                  ("GET", "/history/search", "OPTIONS, POST"),
                                  ("POST", "/events/stream", "GET, HEAD, OPTIONS")]:
        r = await raw_http(daemon.port, method, API + path, {"Authorization": f"Bearer {strong}"})
        assert r.status == 405 and r.code == "METHOD_NOT_ALLOWED", (method, path, r.status, r.body)
        assert r.headers.get("allow") == allowed, (method, path, r.headers)
        assert message_of(r.body) == f"{method} is not allowed on '{API}{path}'; it takes {allowed}"


async def test_another_method_on_a_public_route_is_405_not_a_demand_for_a_credential(daemon: Daemon) -> None:
    """``POST /health`` and ``GET /pair/requests`` without a credential answered 401 "this route
    needs Authorization": false (neither route needs one), and a client went to pair for nothing."""
    for method, path, allowed in [("POST", "/health", "GET, HEAD, OPTIONS"), ("DELETE", "/health", "GET, HEAD, OPTIONS"),
                                  ("GET", "/pair/requests", "OPTIONS, POST")]:
        r = await raw_http(daemon.port, method, API + path)
        assert r.status == 405 and r.code == "METHOD_NOT_ALLOWED", (method, path, r.status, r.body)
        assert r.headers.get("allow") == allowed
    r = await raw_http(daemon.port, "GET", API + "/projects")  # (every other route still needs one)
    assert r.status == 401 and r.code == "AUTH_REQUIRED"


async def test_options_is_204_with_allow_and_no_body(daemon: Daemon, strong: str) -> None:
    """OPTIONS was a 200 with an empty ``text/html`` body (Quart's default): the API answers no
    HTML, and an empty answer is a 204 (with no ``Content-Length``, RFC 9110 8.6)."""
    for path, token, allowed in [("/health", None, "GET, HEAD, OPTIONS"),
                                 ("/pair/requests", None, "OPTIONS, POST"),
                                 ("/projects", strong, "GET, HEAD, OPTIONS, POST"),
                                 ("/sessions/s1", strong, "DELETE, GET, HEAD, OPTIONS, PATCH")]:
        r = await raw_http(daemon.port, "OPTIONS", API + path, {"Authorization": f"Bearer {token}"} if token else {})
        assert r.status == 204, (path, r.status, r.headers, r.body)
        assert r.headers.get("allow") == allowed, (path, r.headers)
        assert r.body == b"" and "content-type" not in r.headers and "content-length" not in r.headers
    r = await raw_http(daemon.port, "OPTIONS", API + "/projects")  # (the route's credential rule holds)
    assert r.status == 401 and r.code == "AUTH_REQUIRED"


async def test_an_unknown_route_names_itself_and_a_trailing_slash_names_the_route(daemon: Daemon, strong: str) -> None:
    """A 404 for a route said "The requested URL was not found on the server. If you entered the
    URL manually please check your spelling and try again." — also for ``/projects/``, where
    the only problem is the trailing slash."""
    h = {"Authorization": f"Bearer {strong}"}
    r = await raw_http(daemon.port, "GET", API + "/projects/", h)
    assert r.status == 404 and r.code == "NOT_FOUND"
    assert message_of(r.body) == f"no route GET '{API}/projects/'; routes take no trailing slash: '{API}/projects'"
    r = await raw_http(daemon.port, "POST", API + "/sessions/s1/inputs/", h, b"{}")
    assert r.status == 404 and message_of(r.body).endswith(f"no trailing slash: '{API}/sessions/s1/inputs'")
    r = await raw_http(daemon.port, "PUT", API + "/config/files/", h, b"{}")  # (the list takes no PUT: no hint)
    assert r.status == 404 and message_of(r.body) == f"no route PUT '{API}/config/files/'"
    r = await raw_http(daemon.port, "GET", API + "/nothing", h)
    assert r.status == 404 and message_of(r.body) == f"no route GET '{API}/nothing'"
    r = await raw_http(daemon.port, "GET", API + "/nothing/", h)  # (no route without the slash either)
    assert r.status == 404 and message_of(r.body) == f"no route GET '{API}/nothing/'"
    r = await raw_http(daemon.port, "GET", API + "/" + "x" * 5000, h)  # (a long path is not echoed whole)
    assert r.status == 404 and len(message_of(r.body)) < 200


async def test_a_json_body_with_a_byte_order_mark_is_read(daemon: Daemon, strong: str) -> None:
    """RFC 8259 8.1 lets a parser ignore a UTF-8 BOM, and some clients write one (PowerShell,
    .NET, editors): it was 400 ``INVALID_JSON`` "invalid character (byte 0)"."""
    project = await daemon.project(strong)
    bom = b"\xef\xbb\xbf"
    r = await raw_http(daemon.port, "POST", API + "/sessions",
                       {"Authorization": f"Bearer {strong}", "Content-Type": "application/json"},
                       bom + json.dumps({"projectId": project["id"]}).encode())
    assert r.status == 201, (r.status, r.body)
    sid = r.json()["id"]
    r = await raw_http(daemon.port, "POST", API + "/pair/requests", {"Content-Type": "application/json"},
                       bom + b'{"clientId": "bom-client"}')
    assert r.status == 202 and r.json() == {"clientId": "bom-client", "status": "pending"}
    r = await raw_http(daemon.port, "POST", f"{API}/sessions/{sid}/abort", {"Authorization": f"Bearer {strong}"}, bom)
    assert r.status == 200, r.body  # (a BOM alone is an empty body: abort takes none)
    # Only one, only at the start: anything else stays no JSON.
    for body in (bom + bom + b"{}", b" " + bom + b"{}", b'{"projectId": "x"}' + bom):
        r = await raw_http(daemon.port, "POST", API + "/sessions", {"Authorization": f"Bearer {strong}"}, body)
        assert r.status == 400 and r.code == "INVALID_JSON", (body, r.body)


async def test_an_empty_body_says_it_is_empty_where_a_route_needs_one(daemon: Daemon, strong: str) -> None:
    """An empty body was 400 ``INVALID_JSON`` "the request body is not valid JSON (Input data was
    truncated)", which names no cause a client can see. Routes whose body is optional take it."""
    project = await daemon.project(strong)
    sid = (await daemon.session(strong, project["id"]))["id"]
    h = {"Authorization": f"Bearer {strong}", "Content-Type": "application/json"}
    for method, path in [("POST", "/sessions"), ("POST", f"/sessions/{sid}/inputs"), ("PATCH", f"/sessions/{sid}"),
                         ("POST", f"/sessions/{sid}/context/snip"), ("POST", "/history/search"),
                         ("PUT", "/config/files/lens.jsonc"), ("POST", "/pair/requests")]:
        for body in (b"", b"  \r\n"):
            r = await raw_http(daemon.port, method, API + path, h, body)
            assert r.status == 400 and r.code == "INVALID_JSON", (method, path, r.status, r.body)
            assert message_of(r.body) == "the request body is empty; this route takes a JSON object"
    for path in (f"/sessions/{sid}/abort", f"/sessions/{sid}/inputs/r/withdraw"):
        r = await raw_http(daemon.port, "POST", API + path, {"Authorization": f"Bearer {strong}"})
        assert r.status == 200, (path, r.status, r.body)
    r = await raw_http(daemon.port, "POST", f"{API}/sessions/{sid}/compact", {"Authorization": f"Bearer {strong}"})
    assert r.status == 409 and r.code == "NOTHING_TO_COMPACT", r.body  # (past the body: the session has nothing)


async def test_a_content_encoded_body_is_415_naming_the_coding(daemon: Daemon, strong: str) -> None:
    """``Content-Encoding: gzip`` was read as JSON: 400 "invalid character (byte 0)". The daemon
    decodes no content coding (a small gzip body inflates past any limit): 415
    ``CONTENT_ENCODING_UNSUPPORTED`` with ``Accept-Encoding: identity`` (RFC 9110 15.5.16), and
    nothing recorded."""
    project = await daemon.project(strong)
    last = (await daemon.get("/health")).json()["lastSeq"]
    body = gzip.compress(json.dumps({"projectId": project["id"]}).encode())
    for token, path in [(strong, "/sessions"), (None, "/pair/requests")]:
        h = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        if token:
            h["Authorization"] = f"Bearer {token}"
        r = await raw_http(daemon.port, "POST", API + path, h, body)
        assert r.status == 415 and r.code == "CONTENT_ENCODING_UNSUPPORTED", (path, r.status, r.body)
        assert r.headers.get("accept-encoding") == "identity"
        assert "'gzip'" in message_of(r.body)
    assert (await daemon.get("/health")).json()["lastSeq"] == last
    # The credential first, as for a body over the limit; identity is no coding.
    r = await raw_http(daemon.port, "POST", API + "/sessions", {"Content-Encoding": "gzip"}, body)
    assert r.status == 401 and r.code == "AUTH_REQUIRED"
    r = await raw_http(daemon.port, "POST", API + "/sessions",
                       {"Authorization": f"Bearer {strong}", "Content-Encoding": "identity"},
                       json.dumps({"projectId": project["id"]}).encode())
    assert r.status == 201, r.body
    r = await raw_http(daemon.port, "GET", API + "/projects",  # (no body: nothing to decode)
                       {"Authorization": f"Bearer {strong}", "Content-Encoding": "gzip"})
    assert r.status == 200


async def test_a_config_write_names_the_keys_the_daemon_will_ignore(daemon: Daemon, strong: str) -> None:
    """F-API-4: "a write is validated before it replaces the file". Unknown keys stay allowed (a
    newer config must not stop an older daemon), but a misspelt ``server.prot`` was answered 200
    with nothing more: the writer learns only at the next start, from the daemon's log, that the
    key did nothing. The answer now lists them (each cut to 80 characters, at most 100, and how
    many in all), and the known key each listed one may have meant (``unknownKeysMeant``: a
    misspelt key was named without the right one); the file holds what was written."""
    text = ('{\n  // hand-written\n  "server": {"prot": 7420, "heartbeatSeconds": 15},\n'
            '  "providers": [{"id": "local", "protocol": "faux", "modles": []}],\n  "x' + "k" * 100 + '": 1,\n}\n')
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": text})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["unknownKeys"] == ["providers[0].modles", "server.prot", "x" + "k" * 79 + "\u2026"]
    assert body["unknownKeysTotal"] == 3
    assert body["unknownKeysMeant"] == {"providers[0].modles": "models", "server.prot": "port"}
    assert (await daemon.get("/config/files/lens.jsonc", strong)).json()["text"] == text
    many = "{" + ", ".join(f'"k{i:03}": {i}' for i in range(150)) + "}"
    body = (await daemon.put("/config/files/lens.jsonc", strong, {"text": many})).json()
    assert len(body["unknownKeys"]) == 100 and body["unknownKeysTotal"] == 150 and body["unknownKeysMeant"] == {}
    # a key equal to a known one but for its case; the hints of the listed keys only
    near = "{" + ", ".join(f'"k{i:03}": {i}' for i in range(120)) + ', "Server": {}, "zzLog": {}, "tols": {}}'
    body = (await daemon.put("/config/files/lens.jsonc", strong, {"text": near})).json()
    assert body["unknownKeys"][0] == "Server" and body["unknownKeysTotal"] == 123
    assert body["unknownKeysMeant"] == {"Server": "server"}
    body = (await daemon.put("/config/files/lens.jsonc", strong, {"text": '{"server": {"heartbeatSeconds": 15}}'})).json()
    assert body["unknownKeys"] == [] and body["unknownKeysTotal"] == 0 and body["unknownKeysMeant"] == {}
    pair = (await daemon.get("/config/files/pair.json", strong)).json()
    body = (await daemon.put("/config/files/pair.json", strong, {"text": pair["text"], "expectDigest": pair["digest"]})).json()
    assert body["unknownKeys"] == [] and body["unknownKeysTotal"] == 0 and body["unknownKeysMeant"] == {}


async def test_a_body_in_another_charset_is_named_as_such(daemon: Daemon, strong: str) -> None:
    """A UTF-16 body (a UTF-16 byte order mark, or ``charset=utf-16``) was "not valid JSON (JSON
    is malformed: invalid character (byte 0))". JSON between systems is UTF-8 (RFC 8259 8.1): the
    message now says that, and what the request said instead. A charset that is no UTF-8 but
    whose body is plain ASCII is read (nothing in it differs)."""
    project = await daemon.project(strong)
    text = json.dumps({"projectId": project["id"]})
    h = {"Authorization": f"Bearer {strong}"}
    for body, ctype, expected in [
            (text.encode("utf-16"), "application/json",
             "JSON is sent as UTF-8, and this body starts with a UTF-16 or UTF-32 byte order mark"),
            (text.encode("utf-16-le"), "application/json; charset=utf-16",
             "JSON is sent as UTF-8, and the Content-Type says charset=utf-16"),
            (text.encode("utf-32"), "application/json",
             "JSON is sent as UTF-8, and this body starts with a UTF-16 or UTF-32 byte order mark"),
            (text[:-1].encode() + b', "name": "caf\xe9"}', 'application/json; charset="ISO-8859-1"',
             "JSON is sent as UTF-8, and the Content-Type says charset=ISO-8859-1")]:
        r = await raw_http(daemon.port, "POST", API + "/sessions", {**h, "Content-Type": ctype}, body)
        assert r.status == 400 and r.code == "INVALID_JSON", (ctype, r.status, r.body)
        assert message_of(r.body) == f"the request body is not valid JSON ({expected})", r.body
    r = await raw_http(daemon.port, "POST", API + "/sessions", {**h, "Content-Type": "application/json; charset=latin-1"},
                       text.encode())
    assert r.status == 201, r.body


async def test_too_many_pending_pairings_says_when_to_ask_again(daemon_factory) -> None:
    """429 ``PAIRING_LIMIT`` said "ask again once the oldest is an hour old" and nothing more: a
    client cannot know when that is. ``Retry-After`` (RFC 6585 4) and the message now give the
    seconds until the oldest pending request gives up its place."""
    d = await daemon_factory(config={"server": {"maxPendingPairings": 1}})
    await d.register("first")
    r = await d.post("/pair/requests", body={"clientId": "second"})
    assert r.status_code == 429 and error_of(r) == "PAIRING_LIMIT"
    wait = int(r.headers["retry-after"])
    assert 3500 <= wait <= 3600, wait
    assert r.json()["error"]["message"].endswith(f"(in {wait} s)")
    data = json.loads(d.pair_path.read_text())
    data["clients"][0]["requestedAt"] -= 60 * 60 * 1000 - 30_000  # asked 59 min 30 s ago
    d.pair_path.write_text(json.dumps(data))
    r = await d.post("/pair/requests", body={"clientId": "second"})
    assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 30, r.headers
