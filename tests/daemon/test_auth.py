"""F-API-2 / F-API-3: bearer authentication on every route, trust levels, pairing and the pair file.

The route list is read from the app's own URL map, so a new route is covered (and must be
classified in :data:`ROUTE_TRUST`) without editing the loops below.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re

import pytest
import trio

from runtime.bus import Bus
from runtime.guard import Guard
from runtime.pairing import TOKEN_PREFIX, PairFileInvalid, credential_hash, parse_pair_file

from .conftest import API, BUSY, LIMIT, Daemon, app_routes, error_of, file_mode, run_lens, wait_until

PUBLIC, READ, STRONG = "public", "read", "strong"

# Every route of the app and who may call it. Reads are open to read-only credentials (history
# search is a POST that changes nothing); everything that changes state or touches raw config
# needs strong trust.
ROUTE_TRUST: dict[tuple[str, str], str] = {
    ("GET", "/"): PUBLIC,  # the dashboard page (it holds no data; the credential is pasted in)
    ("GET", "/api/v1/health"): PUBLIC,
    ("POST", "/api/v1/pair/requests"): PUBLIC,
    ("GET", "/api/v1/whoami"): READ,
    ("GET", "/api/v1/models"): READ,
    ("PUT", "/api/v1/models/default"): STRONG,
    ("GET", "/api/v1/projects"): READ,
    ("GET", "/api/v1/sessions"): READ,
    ("GET", "/api/v1/sessions/<sid>"): READ,
    ("GET", "/api/v1/sessions/<sid>/events"): READ,
    ("GET", "/api/v1/events/stream"): READ,
    ("GET", "/api/v1/artifacts/<aid>"): READ,
    ("GET", "/api/v1/tools/inventory"): READ,
    ("POST", "/api/v1/history/search"): READ,
    ("GET", "/api/v1/history/items/<item_id>"): READ,
    ("GET", "/api/v1/sessions/<sid>/jobs"): READ,
    ("GET", "/api/v1/sessions/<sid>/jobs/<job_id>"): READ,
    ("GET", "/api/v1/sessions/<sid>/context"): READ,
    ("POST", "/api/v1/sessions/<sid>/compact"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/context/snip"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/context/include"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/context/unsnip"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/context/hide"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/context/unhide"): STRONG,
    ("GET", "/api/v1/sessions/<sid>/workspace/tree"): READ,
    ("GET", "/api/v1/sessions/<sid>/workspace/file"): READ,
    ("GET", "/api/v1/sessions/<sid>/changes"): READ,
    ("POST", "/api/v1/projects"): STRONG,
    ("POST", "/api/v1/sessions"): STRONG,
    ("PATCH", "/api/v1/sessions/<sid>"): STRONG,
    ("DELETE", "/api/v1/sessions/<sid>"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/fork"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/inputs"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/inputs/<rid>/withdraw"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/inputs/<rid>/steer"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/abort"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/questions/<qid>/answer"): STRONG,
    ("POST", "/api/v1/sessions/<sid>/jobs/<job_id>/stop"): STRONG,
    ("GET", "/api/v1/config/files"): STRONG,
    ("GET", "/api/v1/config/files/<name>"): STRONG,
    ("PUT", "/api/v1/config/files/<name>"): STRONG,
}

# Routes the spec (section 9) names; each must exist and need a credential.
SPEC_ROUTES = {
    ("GET", "/api/v1/projects"), ("POST", "/api/v1/projects"), ("GET", "/api/v1/sessions"),
    ("POST", "/api/v1/sessions"), ("GET", "/api/v1/sessions/<sid>"), ("POST", "/api/v1/sessions/<sid>/inputs"),
    ("POST", "/api/v1/sessions/<sid>/inputs/<rid>/withdraw"), ("POST", "/api/v1/sessions/<sid>/inputs/<rid>/steer"),
    ("POST", "/api/v1/sessions/<sid>/abort"), ("GET", "/api/v1/sessions/<sid>/events"),
    ("POST", "/api/v1/sessions/<sid>/questions/<qid>/answer"), ("GET", "/api/v1/events/stream"),
    ("GET", "/api/v1/artifacts/<aid>"), ("GET", "/api/v1/tools/inventory"), ("GET", "/api/v1/config/files"),
    ("GET", "/api/v1/config/files/<name>"), ("PUT", "/api/v1/config/files/<name>"),
}

ARTIFACT = b"\x89PNG\r\n\x1a\n" + b"lens test artifact"
ARTIFACT_ID = hashlib.sha256(ARTIFACT).hexdigest()


def fill(rule: str, **values: str) -> str:
    """A concrete path for ``rule`` (placeholders from ``values``, else a harmless id)."""
    defaults = {"sid": "ses_nope", "rid": "r1", "qid": "q1", "aid": "0" * 64, "name": "lens.jsonc", "item_id": "c1"}
    defaults.update(values)
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: defaults.get(m.group(1), "x"), rule)


async def call(d: Daemon, method: str, rule: str, token: str | None, body: object = None, **values: str):
    path = fill(rule, **values)
    assert path.startswith(API)
    if method in ("POST", "PUT", "PATCH"):
        return await d.request(method, path[len(API):], token, json_body={} if body is None else body)
    if rule.endswith("/events/stream"):  # a rejected stream is an ordinary JSON error response
        return await d.request(method, path[len(API):], token, params={"after": "0"})
    return await d.request(method, path[len(API):], token)


def api_routes() -> list[tuple[str, str]]:
    return [r for r in app_routes() if r[1].startswith(API)]


# --------------------------------------------------------------------------- the route table


def test_every_route_is_classified_and_the_spec_routes_exist():
    routes = set(app_routes())
    unclassified = routes - set(ROUTE_TRUST)
    assert not unclassified, f"classify these routes in ROUTE_TRUST (public/read/strong): {sorted(unclassified)}"
    assert SPEC_ROUTES <= routes, f"routes of SPEC section 9 missing: {sorted(SPEC_ROUTES - routes)}"


async def test_every_route_but_health_and_pairing_needs_a_credential(daemon: Daemon, strong: str):
    revoked = await daemon.pair("to-be-revoked", strong=True)
    await trio.to_thread.run_sync(lambda: daemon.pairs().revoke("to-be-revoked"))
    await daemon.wait_refused(revoked)
    wrong = []
    checked = 0
    for method, rule in api_routes():
        if ROUTE_TRUST.get((method, rule)) == PUBLIC:
            continue
        for label, header, expected in [
            ("none", None, "AUTH_REQUIRED"),
            ("basic", {"Authorization": "Basic dXNlcjpwYXNz"}, "AUTH_REQUIRED"),
            ("bare bearer", {"Authorization": "Bearer"}, "AUTH_REQUIRED"),
            ("unknown", {"Authorization": f"Bearer {TOKEN_PREFIX}{'A' * 43}"}, "AUTH_INVALID"),
            ("not ours", {"Authorization": "Bearer sk-abcdef"}, "AUTH_INVALID"),
            ("revoked", {"Authorization": f"Bearer {revoked}"}, "AUTH_INVALID"),
            ("tampered", {"Authorization": f"Bearer {strong[:-1]}{'B' if strong[-1] != 'B' else 'C'}"}, "AUTH_INVALID"),
        ]:
            path = fill(rule)[len(API):]
            r = await daemon.request(method, path, None, json_body={} if method in ("POST", "PUT") else None,
                                     headers=header)
            checked += 1
            if r.status_code != 401 or error_of(r) != expected:
                wrong.append((method, rule, label, r.status_code, r.text[:200]))
            elif r.headers.get("www-authenticate", "").split(" ")[0] != "Bearer":
                wrong.append((method, rule, label, "no WWW-Authenticate: Bearer"))
    assert checked >= 7 * len(SPEC_ROUTES)
    assert not wrong, wrong


async def test_public_routes_answer_without_a_credential(daemon: Daemon):
    r = await daemon.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    r = await daemon.request("HEAD", "/health")  # as GET, without the body (it was 401)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json" and r.content == b""
    r = await daemon.post("/pair/requests", body={"clientId": "phone-1", "name": "my phone"})
    assert r.status_code == 202
    assert r.json() == {"clientId": "phone-1", "status": "pending"}
    r = await daemon.post("/pair/requests", body={"clientId": "phone-1", "name": "again"})
    assert r.status_code == 202 and r.json()["status"] == "pending"
    r = await daemon.post("/pair/requests", body={"clientId": "../etc", "name": "x"})
    assert r.status_code == 400 and error_of(r) == "PAIRING_INVALID"
    r = await daemon.get("/pair/requests")
    assert r.status_code in (401, 405)  # only POST is public


# --------------------------------------------------------------------------- trust levels


async def test_read_only_credential_is_forbidden_on_every_mutating_route(daemon: Daemon, strong: str, reader: str):
    project = await daemon.project(strong, "p")
    sid = (await daemon.session(strong, project["id"]))["id"]
    before = (await daemon.get("/health")).json()["lastSeq"]
    wrong = []
    for method, rule in api_routes():
        if ROUTE_TRUST.get((method, rule)) != STRONG:
            continue
        body = {"requestId": "r9", "content": "hi"} if rule.endswith("/inputs") else \
            {"projectId": project["id"]} if rule.endswith("/sessions") else \
            {"name": "x", "workspace": str(daemon.root)} if rule.endswith("/projects") else \
            {"text": "{}"} if method == "PUT" else {"kind": "skip"} if rule.endswith("/answer") else {}
        r = await call(daemon, method, rule, reader, body, sid=sid)
        if r.status_code != 403 or error_of(r) != "FORBIDDEN":
            wrong.append((method, rule, r.status_code, r.text[:200]))
    assert not wrong, wrong
    # nothing happened: no event was appended, the config file was not created
    assert (await daemon.get("/health")).json()["lastSeq"] == before
    assert not daemon.config_path.exists()
    assert [p["id"] for p in (await daemon.get("/projects", reader)).json()["projects"]] == [project["id"]]


async def test_read_only_credential_may_read(daemon: Daemon, strong: str, reader: str):
    project = await daemon.project(strong, "p")
    sid = (await daemon.session(strong, project["id"]))["id"]
    art_dir = daemon.data_dir / "artifacts"
    art_dir.mkdir(exist_ok=True)
    (art_dir / ARTIFACT_ID).write_bytes(ARTIFACT)
    wrong = []
    for method, rule in api_routes():
        if ROUTE_TRUST.get((method, rule)) != READ or rule.endswith("/events/stream"):
            continue
        body = {"projectId": project["id"], "query": "hello"} if rule.endswith("/history/search") else None
        r = await call(daemon, method, rule, reader, body, sid=sid, aid=ARTIFACT_ID)
        ok = r.status_code == 200 or (rule.endswith(("<item_id>", "<job_id>")) and r.status_code == 404) or (
            rule.endswith("/workspace/file") and r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT")  # (no path)
        if not ok:
            wrong.append((method, rule, r.status_code, r.text[:200]))
    assert not wrong, wrong
    r = await daemon.get(f"/artifacts/{ARTIFACT_ID}", reader)
    assert r.content == ARTIFACT and r.headers["content-type"] == "image/png"
    async with daemon.sse(reader, params={"session": sid}, last_event_id=0) as stream:
        first = await stream.next_event()
        assert first is not None and first.event == "session.created"


def aborted_seq(events: list[dict]) -> int:
    return next(e["seq"] for e in events if e["kind"] == "run.aborted")


async def test_strong_credential_succeeds_on_every_mutating_route(daemon: Daemon, strong: str):
    """Each STRONG route, called as a real client would, succeeds (answer: only up to the lookup)."""
    done: set[tuple[str, str]] = set()

    async def ok(method: str, rule: str, status: int, body: object = None, **values: str):
        r = await call(daemon, method, rule, strong, body, **values)
        assert r.status_code == status, (method, rule, r.status_code, r.text)
        done.add((method, rule))
        return r.json()

    ws = daemon.root / "ws"
    ws.mkdir()
    project = await ok("POST", "/api/v1/projects", 201, {"name": "p", "workspace": str(ws)})
    sid = (await ok("POST", "/api/v1/sessions", 201, {"projectId": project["id"]}))["id"]
    configured = await ok("PATCH", "/api/v1/sessions/<sid>", 200, {"thinkingLevel": "low"}, sid=sid)
    assert configured["thinkingLevel"] == "low"
    await ok("POST", "/api/v1/sessions/<sid>/inputs", 202, {"requestId": "busy", "content": BUSY}, sid=sid)
    await daemon.wait_running_call(strong, sid)
    await ok("POST", "/api/v1/sessions/<sid>/inputs", 202, {"requestId": "r2", "content": "second"}, sid=sid)
    await ok("POST", "/api/v1/sessions/<sid>/inputs", 202, {"requestId": "r3", "content": "third"}, sid=sid)
    steer = await ok("POST", "/api/v1/sessions/<sid>/inputs/<rid>/steer", 200, sid=sid, rid="r2")
    assert steer == {"requestId": "r2", "status": "queued", "whenBusy": "steer"}
    withdrawn = await ok("POST", "/api/v1/sessions/<sid>/inputs/<rid>/withdraw", 200, sid=sid, rid="r3")
    assert withdrawn["status"] == "withdrawn" and withdrawn["text"] == "third"
    aborted = await ok("POST", "/api/v1/sessions/<sid>/abort", 200, sid=sid)
    assert aborted["aborted"] is True and aborted["withdrawn"] == ["r2"]
    forked = await ok("POST", "/api/v1/sessions/<sid>/fork", 201, {"seq": aborted_seq(await daemon.events(strong, sid))},
                      sid=sid)
    assert forked["forkedFrom"]["sessionId"] == sid and forked["status"] == "idle"
    other = (await ok("POST", "/api/v1/sessions", 201, {"projectId": project["id"]}))["id"]
    assert await ok("DELETE", "/api/v1/sessions/<sid>", 200, sid=other) == {"deleted": True}
    listing = await ok("GET", "/api/v1/config/files", 200)
    assert {f["name"] for f in listing["files"]} >= {"lens.jsonc", "pair.json"}
    await ok("PUT", "/api/v1/config/files/<name>", 200, {"text": '{ "server": { "port": 7420 } } // kept\n'},
             name="lens.jsonc")
    read = await ok("GET", "/api/v1/config/files/<name>", 200, name="lens.jsonc")
    saved = await ok("PUT", "/api/v1/models/default", 200, {"model": "faux/faux-1"})
    assert saved == {"effective": "faux/faux-1", "source": "saved", "saved": "faux/faux-1"}
    assert read["text"] == '{ "server": { "port": 7420 } } // kept\n'
    # The answer route needs an open question (the Answer command is being added to the actor):
    # here strong trust gets past the guard to the lookup.
    r = await call(daemon, "POST", "/api/v1/sessions/<sid>/questions/<qid>/answer", strong, {"kind": "skip"}, sid=sid)
    assert r.status_code == 404 and error_of(r) == "QUESTION_NOT_FOUND"
    r = await call(daemon, "POST", "/api/v1/sessions/<sid>/questions/<qid>/answer", strong, {"kind": "skip"})
    assert r.status_code == 404 and error_of(r) == "SESSION_NOT_FOUND"
    done.add(("POST", "/api/v1/sessions/<sid>/questions/<qid>/answer"))
    # Stopping a job needs a running one (tests/daemon/test_jobs.py): past the guard to the lookup.
    r = await call(daemon, "POST", "/api/v1/sessions/<sid>/jobs/<job_id>/stop", strong, sid=sid, job_id="job_x")
    assert r.status_code == 404 and error_of(r) == "JOB_NOT_FOUND"
    done.add(("POST", "/api/v1/sessions/<sid>/jobs/<job_id>/stop"))
    # The Working Context (tests/daemon/test_context_http.py): compacting the aborted run, then
    # edits that get past the guard to the lookup of their ids.
    compacted = await ok("POST", "/api/v1/sessions/<sid>/compact", 200, sid=sid)
    assert compacted["trigger"] == "manual"
    for rule, body in [("/api/v1/sessions/<sid>/context/snip", {"itemIds": ["c999999"]}),
                       ("/api/v1/sessions/<sid>/context/include", {"callId": "call_nope"}),
                       *((f"/api/v1/sessions/<sid>/context/{op}", {"itemIds": ["c999999"]})
                         for op in ("unsnip", "hide", "unhide"))]:
        r = await call(daemon, "POST", rule, strong, body, sid=sid)
        assert r.status_code == 404 and error_of(r) == "CONTEXT_ITEM_NOT_FOUND"
        done.add(("POST", rule))
    assert done == {k for k, v in ROUTE_TRUST.items() if v == STRONG}


# --------------------------------------------------------------------------- issuing and revoking


async def test_cli_approve_prints_the_credential_alone_on_the_last_line(daemon: Daemon):
    await daemon.register("laptop")
    out = await run_lens(daemon.root, "pair", "approve", "--client", "laptop", "--strong-trust")
    last = out.stdout.rstrip("\n").splitlines()[-1]
    assert last == last.strip() and last.startswith(TOKEN_PREFIX)
    secret = last[len(TOKEN_PREFIX):]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43,}", secret), last  # >= 256 bits, urlsafe base64
    assert last not in out.stderr
    await daemon.wait_accepted(last)
    # stored only as a hash, bound to the client and its trust; the file is private
    text = daemon.pair_path.read_text()
    assert last not in text and secret not in text
    rec = next(c for c in json.loads(text)["clients"] if c["clientId"] == "laptop")
    assert rec["credentialHash"] == credential_hash("laptop", "strong", last)
    assert file_mode(daemon.pair_path) == 0o600
    # two approvals never give the same credential
    again = (await run_lens(daemon.root, "pair", "approve", "--client", "laptop")).stdout.splitlines()[-1]
    assert again != last and again.startswith(TOKEN_PREFIX)
    assert file_mode(daemon.pair_path) == 0o600


async def test_cli_approve_without_strong_trust_gives_a_read_only_credential(daemon: Daemon, strong: str):
    # F-API-2 "Without --strong-trust the credential is read-only", through the real command: it
    # reads (projects, a session's view and events, the stream) and may not submit or create.
    project = await daemon.project(strong, "ro")
    sid = (await daemon.session(strong, project["id"]))["id"]
    reader = await daemon.pair("reader-cli", via="cli")
    rec = next(c for c in json.loads(daemon.pair_path.read_text())["clients"] if c["clientId"] == "reader-cli")
    assert rec["credentialHash"] == credential_hash("reader-cli", "read", reader)
    for path in ("/projects", f"/sessions/{sid}", f"/sessions/{sid}/events"):
        assert (await daemon.get(path, reader)).status_code == 200, path
    r = await daemon.post(f"/sessions/{sid}/inputs", reader, {"requestId": "ro-1", "content": "hi"})
    assert r.status_code == 403, r.text
    r = await daemon.post("/projects", reader, {"name": "no", "workspace": str(daemon.root)})
    assert r.status_code == 403, r.text
    assert [e for e in await daemon.events(strong, sid) if e["kind"] == "input.submitted"] == []


async def test_cli_approve_of_an_unknown_client_fails_cleanly(daemon: Daemon):
    for command in ("approve", "revoke"):
        out = await run_lens(daemon.root, "pair", command, "--client", "stranger", check=False)
        assert out.returncode != 0
        assert "CLIENT_NOT_FOUND" in out.stderr and "Traceback" not in out.stderr
        assert out.stdout == ""
        # before any client asked: nothing is made (a lock file, and the directory, were)
        assert sorted(p.name for p in daemon.config_dir.iterdir()) == []


async def test_cli_list_never_prints_hashes_or_credentials(daemon: Daemon):
    tokens = [await daemon.pair("reader-1"), await daemon.pair("writer-1", strong=True)]
    await daemon.register("waiting-1")
    out = await run_lens(daemon.root, "pair", "list")
    hashes = [c["credentialHash"] for c in json.loads(daemon.pair_path.read_text())["clients"] if c.get("credentialHash")]
    assert len(hashes) == 2
    for secret in tokens + hashes + [t[len(TOKEN_PREFIX):] for t in tokens] + [h[:16] for h in hashes]:
        assert secret not in out.stdout and secret not in out.stderr
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines()[1:]}
    assert lines["reader-1"][1:3] == ["approved", "read"]
    assert lines["writer-1"][1:3] == ["approved", "strong"]
    assert lines["waiting-1"][1] == "pending"
    assert not re.search(r"[0-9a-f]{32}", out.stdout)


@pytest.mark.parametrize("name", ["\x1b[2J", "a\r\nadmin approved strong", "nul\x00", "c1\x9b31m", "rtl\u202e",
                                  "nel\x85x", "ls\u2028admin approved strong", "ps\u2029x"])
async def test_a_pairing_name_with_control_characters_is_refused(daemon: Daemon, name: str):
    r = await daemon.post("/pair/requests", body={"clientId": "evil", "name": name})
    assert r.status_code == 400 and error_of(r) == "PAIRING_INVALID", r.text
    assert "control characters" in r.json()["error"]["message"]
    assert not daemon.pair_path.exists() or "evil" not in daemon.pair_path.read_text()


@pytest.mark.parametrize("name, named", [("zw\u200bsp", "U+200B"), ("\u200d", "U+200D"), ("\ufeffbom", "U+FEFF"),
                                         ("wj\u2060", "U+2060"), ("lri\u2066x", "U+2066"), ("tag\U000e0001", "U+E0001")])
async def test_a_pairing_name_with_invisible_format_characters_is_refused_naming_one(daemon: Daemon, name: str,
                                                                                     named: str):
    r = await daemon.post("/pair/requests", body={"clientId": "evil", "name": name})
    assert r.status_code == 400 and error_of(r) == "PAIRING_INVALID", r.text
    assert r.json()["error"]["message"] == (
        "name must be a string of at most 200 characters without control characters, line separators or "
        f"invisible format characters (zero-width characters, bidirectional controls); it holds {named}")
    assert not daemon.pair_path.exists() or "evil" not in daemon.pair_path.read_text()
    r = await daemon.post("/pair/requests", body={"clientId": "fine", "name": "caf\u00e9 \u65e5\u672c"})
    assert r.status_code == 202 and r.json() == {"clientId": "fine", "status": "pending"}, r.text


async def test_cli_list_escapes_what_a_terminal_would_act_on(daemon: Daemon):
    await daemon.register("edited")
    data = json.loads(daemon.pair_path.read_text())
    data["clients"][0]["name"] = "\x1b[2J\r\nadmin     approved  strong  laptop\u2028x\u2029y\x85z"  # edited by hand
    daemon.pair_path.write_text(json.dumps(data))
    out = await run_lens(daemon.root, "pair", "list")
    assert "\x1b" not in out.stdout and "\r" not in out.stdout
    assert out.stdout.splitlines()[1:] == [
        f"{'edited':<32} {'pending':<9} {'-':<7} \\u001b[2J\\u000d\\u000aadmin     approved  strong  laptop"
        f"\\u2028x\\u2029y\\u0085z"]


async def test_reissue_revokes_the_old_credential_and_ends_its_open_stream(daemon: Daemon):
    old = await daemon.pair("tablet", strong=True, via="cli")
    async with daemon.sse(old) as stream:
        greeting = await stream.next()
        assert greeting is not None and greeting.comment is not None
        out = await run_lens(daemon.root, "pair", "approve", "--client", "tablet", "--strong-trust")
        new = out.stdout.splitlines()[-1]
        assert new != old
        start = trio.current_time()
        end = await stream.until(lambda m: m.event == "stream.end", timeout=2.0)
        assert trio.current_time() - start < 1.5, "the stream outlived its credential"
        assert end.json()["reason"] == "credential revoked"
        assert await stream.to_end(timeout=2.0) == []  # and the response really ends
    assert await daemon.status_of(old) == 401
    r = await daemon.get("/projects", old)
    assert error_of(r) == "AUTH_INVALID"
    assert await daemon.status_of(new) == 200


async def test_reissue_is_honoured_within_a_second_without_restart(daemon: Daemon):
    old = await daemon.pair("c1", strong=False)
    new = await trio.to_thread.run_sync(lambda: daemon.pairs().approve("c1", strong=False))
    start = trio.current_time()
    await daemon.wait_refused(old, timeout=1.5)
    assert trio.current_time() - start < 1.5
    await daemon.wait_accepted(new, timeout=1.5)


async def test_cli_revoke_ends_open_streams_and_refuses_the_credential(daemon: Daemon, strong: str):
    token = await daemon.pair("watcher", strong=False)
    async with daemon.sse(token) as stream, daemon.sse(strong) as other:
        await stream.next()
        await other.next()
        out = await run_lens(daemon.root, "pair", "revoke", "--client", "watcher")
        assert "watcher" in out.stdout
        end = await stream.until(lambda m: m.event == "stream.end", timeout=1.5)
        assert end.json()["reason"] == "credential revoked"
        # another client's stream is not touched: it still gets live events
        project = await daemon.project(strong, "after-revoke")
        ev = await other.until(lambda m: m.event == "project.created")
        assert ev.json()["project_id"] == project["id"]
    assert error_of(await daemon.get("/projects", token)) == "AUTH_INVALID"
    listing = (await run_lens(daemon.root, "pair", "list")).stdout
    assert re.search(r"^watcher\s+revoked", listing, re.M)
    # a revoked client may ask again; its old credential stays dead
    await daemon.register("watcher")
    assert await daemon.status_of(token) == 401


@pytest.mark.parametrize("resume", [False, True], ids=["live", "replay"])
async def test_a_revocation_between_authentication_and_the_streams_start_ends_the_stream(
        daemon: Daemon, strong: str, monkeypatch: pytest.MonkeyPatch, resume: bool):
    """The stream's body runs some time after its request was authenticated; a revocation the
    daemon noticed in between used to go unseen (the stream took the pair file's generation of
    when its body first ran as the one it was checked against), and the revoked credential was
    served the log and live events. Now the generation of the check itself is compared."""
    before = await daemon.project(strong, "before")
    token = await daemon.pair("victim")
    guards = [o for o in gc.get_objects() if isinstance(o, Guard) and o.pairs.path == daemon.pair_path]
    assert len(guards) == 1  # (this test's daemon: an earlier test's may not be collected yet)
    pairs = guards[0].pairs  # the daemon's own PairStore
    real = Bus.subscribe

    def subscribe(self, *args, **kwargs):
        # Forces the interleaving: the body subscribes first thing, after the request was
        # authenticated; the revocation is written and the daemon reloads the file right there.
        monkeypatch.setattr(Bus, "subscribe", real)
        daemon.pairs().revoke("victim")
        assert pairs.reload()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Bus, "subscribe", subscribe)
    async with daemon.sse(token, last_event_id=0 if resume else None) as stream:
        assert (await stream.next()).comment is not None  # the greeting
        assert await daemon.status_of(token) == 401
        await daemon.project(strong, "after")
        msg = await stream.until(lambda m: m.event is not None, timeout=LIMIT)
        assert msg.event == "stream.end", msg  # not the project.created of either project
        assert msg.json() == {"reason": "credential revoked", "code": "AUTH_INVALID",
                              "lastEventId": 0 if resume else before["seq"]}
        assert await stream.to_end() == []


# --------------------------------------------------------------------------- pair-file tampering


def edit_pair_file(d: Daemon, change) -> None:
    """Edit the pair file by hand (as an attacker with file access would), atomically."""
    data = json.loads(d.pair_path.read_text())
    change(data)
    tmp = d.pair_path.with_name("pair.json.edit")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, d.pair_path)


def record(data: dict, client_id: str) -> dict:
    return next(c for c in data["clients"] if c["clientId"] == client_id)


async def test_extra_fields_on_a_pending_record_grant_nothing(daemon: Daemon, caplog: pytest.LogCaptureFixture):
    # F-API-2: such flags "grant nothing" — neither to their record, nor by locking the other
    # clients out (a record's unknown field made the whole file invalid: every credential 503).
    caplog.set_level("WARNING", logger="lens.pairing")
    marker = await daemon.pair("marker")
    await daemon.register("mallory")
    token = TOKEN_PREFIX + "m" * 43

    def forge(data: dict) -> None:
        rec = record(data, "mallory")
        rec.update(isVerified=True, verified=True, trust="strong", approved=True, isAdmin=True,
                   credentialHash=credential_hash("mallory", "strong", token),
                   deviceId="copied-device", publicKey="AAAA", Status="approved")

    edit_pair_file(daemon, forge)
    await wait_until(lambda: _logged(caplog, "isVerified"), 2.0, "the daemon noticing the edited pair file")
    assert await daemon.status_of(marker) == 200  # the others keep their access
    r = await daemon.get("/projects", token)
    assert r.status_code == 401 and error_of(r) == "AUTH_INVALID"  # the forged record is still pending
    assert record(json.loads(daemon.pair_path.read_text()), "mallory")["isVerified"] is True  # (left as edited)
    warnings = [m for m in caplog.messages if "ignoring fields" in m]
    assert len(warnings) == 1, warnings
    for field in ("isVerified", "deviceId", "approved", "isAdmin", "publicKey", "verified"):
        assert f".{field}" in warnings[0]
    assert '.Status (did you mean "status"?)' in warnings[0], warnings  # (a key but for its case: named)
    for _ in range(3):  # re-read (an unknown credential forces it): not logged again
        await daemon.get("/projects", TOKEN_PREFIX + "z" * 43)
    assert len([m for m in caplog.messages if "ignoring fields" in m]) == 1
    # the next pairing change writes the record back without them
    await daemon.register("newcomer")
    assert "isVerified" not in daemon.pair_path.read_text() and "deviceId" not in daemon.pair_path.read_text()
    # and a forged "approved" record needs a hash only approval makes: a guessed token still fails
    edit_pair_file(daemon, lambda data: record(data, "mallory").update(status="approved", credentialHash="0" * 64))
    await daemon.wait_refused(token)
    await daemon.wait_accepted(marker)
    r = await daemon.get("/projects", token)
    assert r.status_code == 401 and error_of(r) == "AUTH_INVALID"


async def _logged(caplog: pytest.LogCaptureFixture, words: str) -> bool:
    return any(words in m for m in caplog.messages)


async def test_a_pairing_request_with_extra_fields_is_an_ordinary_pending_one(daemon: Daemon):
    marker = await daemon.pair("marker", strong=True)
    r = await daemon.post("/pair/requests", body={"clientId": "x2", "name": "n", "isVerified": True, "trust": "strong",
                                                   "status": "approved", "deviceId": "copied", "credentialHash": "0" * 64})
    assert r.status_code == 202, r.text
    assert r.json() == {"clientId": "x2", "status": "pending"}
    stored = record(json.loads(daemon.pair_path.read_text()), "x2")
    assert set(stored) <= {"clientId", "name", "status", "trust", "credentialHash", "requestedAt", "approvedAt"}
    assert stored.get("status", "pending") == "pending" and "credentialHash" not in stored and stored.get("trust", "read") == "read"
    assert "isVerified" not in daemon.pair_path.read_text() and "copied" not in daemon.pair_path.read_text()
    assert await daemon.status_of(marker) == 200
    # the known fields are still checked
    r = await daemon.post("/pair/requests", body={"clientId": "../x", "isVerified": True})
    assert r.status_code == 400 and error_of(r) == "PAIRING_INVALID", r.text
    r = await daemon.post("/pair/requests", body={"clientId": "x3", "name": 5, "isVerified": True})
    assert r.status_code == 422, r.text


async def test_a_copied_credential_hash_grants_nothing_to_the_other_record(daemon: Daemon):
    alice = await daemon.pair("alice", strong=False)
    await daemon.register("bob")

    def copy(data: dict) -> None:
        bob = record(data, "bob")
        bob.update(status="approved", trust="strong", credentialHash=record(data, "alice")["credentialHash"])

    edit_pair_file(daemon, copy)
    ws = daemon.root / "ws"
    ws.mkdir()
    # still alice, read-only: bob's strong record does not match her credential

    async def forbidden() -> bool:
        r = await daemon.post("/projects", alice, {"name": "x", "workspace": str(ws)})
        assert r.status_code in (403, 201), r.text
        return r.status_code == 403

    assert await forbidden()
    # revoke alice in the file, keeping bob's copy: the credential matches nothing any more
    edit_pair_file(daemon, lambda data: record(data, "alice").update(status="revoked", credentialHash=None))
    await daemon.wait_refused(alice)
    assert (await daemon.get("/projects")).status_code == 401
    projects = (await daemon.get("/projects", await daemon.pair("auditor"))).json()["projects"]
    assert projects == []


async def test_editing_trust_by_hand_invalidates_rather_than_escalates(daemon: Daemon):
    token = await daemon.pair("editor", strong=False)
    edit_pair_file(daemon, lambda data: record(data, "editor").update(trust="strong"))
    await daemon.wait_refused(token)
    r = await daemon.post("/projects", token, {"name": "x", "workspace": str(daemon.root)})
    assert r.status_code == 401 and error_of(r) == "AUTH_INVALID"
    # and back to what approve wrote: valid again (the hash is bound to the trust it was issued with)
    edit_pair_file(daemon, lambda data: record(data, "editor").update(trust="read"))
    await daemon.wait_accepted(token)


async def test_an_invalid_pair_file_denies_everyone_and_does_not_crash(daemon: Daemon):
    token = await daemon.pair("c1", strong=True)
    good = daemon.pair_path.read_bytes()
    tmp = daemon.pair_path.with_name("pair.json.edit")
    copied = json.loads(good)
    copied["clients"].append(dict(copied["clients"][0]))  # a second record of c1 (hash and all)
    for garbage in [b"{not json", b'{"clients": "everyone"}', b"", b'{"clients": [{"name": 1}]}', b"\xff\xfe",
                    json.dumps(copied).encode(), b'{"version": 2, "clients": []}', b"[" * 5000,
                    b'{"version": 1, "Clients": []}']:
        tmp.write_bytes(garbage)
        os.replace(tmp, daemon.pair_path)
        await wait_until(lambda: daemon._is(token, 503), 2.0, "the daemon noticing the bad pair file")
        # Refused, as the daemon's fault (503), so that no client discards a good credential.
        assert error_of(await daemon.get("/projects", token)) == "PAIR_FILE_INVALID"
        assert error_of(await daemon.get("/projects", "lens_" + "x" * 43)) == "PAIR_FILE_INVALID"
        assert error_of(await daemon.get("/projects")) == "AUTH_REQUIRED"
        assert (await daemon.get("/health")).status_code == 200
        r = await daemon.post("/pair/requests", body={"clientId": "newcomer", "name": ""})
        assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID", r.text  # the daemon lives
        assert "retry-after" not in r.headers, r.headers  # (the operator mends the file: waiting does not)
        assert str(daemon.pair_path) not in r.text and "pair.json" not in r.text
        assert daemon.pair_path.read_bytes() == garbage  # and the bad file is not overwritten
        tmp.write_bytes(good)
        os.replace(tmp, daemon.pair_path)
        await daemon.wait_accepted(token)


async def test_an_invalid_pair_file_ends_streams_as_the_daemons_fault_not_as_a_revocation(daemon: Daemon, strong: str):
    """A broken pair file ends open streams (no credential can be checked, as ordinary requests
    are refused) with a reason naming it, which a client retries. It used to say "credential
    revoked", which the dashboard takes as final: it gave up and asked for a new credential,
    while the credential was good all along."""
    good = daemon.pair_path.read_bytes()
    tmp = daemon.pair_path.with_name("pair.json.edit")
    async with daemon.sse(strong) as stream:
        await stream.next()
        tmp.write_bytes(b"{ not json")
        os.replace(tmp, daemon.pair_path)
        end = await stream.until(lambda m: m.event == "stream.end", timeout=5)
        assert await stream.next() is None  # and the stream is over
    assert end.json() == {"reason": "pair file invalid", "code": "PAIR_FILE_INVALID",
                          "lastEventId": end.json()["lastEventId"]}, end.data
    assert "revoked" not in end.data
    # a reconnect meanwhile is refused as the daemon's fault; once the file is fixed it streams
    r = await daemon.get("/events/stream", strong)
    assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID"
    tmp.write_bytes(good)
    os.replace(tmp, daemon.pair_path)
    await daemon.wait_accepted(strong)
    async with daemon.sse(strong, last_event_id=end.json()["lastEventId"]) as again:
        p = await daemon.project(strong, "after-the-fix")
        assert (await again.until(lambda m: m.id is not None)).id == p["seq"]


async def test_client_ids_and_hashes_are_checked_whole(daemon: Daemon):
    """A trailing newline is no part of a client id or a credential hash (``CLIENT_ID_RE`` and
    ``HASH_RE`` were matched with ``$``, which matches before a final newline: ``"c1\\n"`` was
    accepted as a client id and written to the pair file)."""
    r = await daemon.post("/pair/requests", body={"clientId": "c1\n", "name": ""})
    assert r.status_code == 400 and error_of(r) == "PAIRING_INVALID", r.text
    r = await daemon.post("/pair/requests", body={"clientId": "c" * 64, "name": ""})  # the edge
    assert r.status_code == 202, r.text
    good = {"clientId": "c1", "status": "approved", "trust": "read", "credentialHash": "0" * 64}
    parse_pair_file(json.dumps({"version": 1, "clients": [good]}).encode(), "test")
    for bad in ({**good, "clientId": "c1\n"}, {**good, "credentialHash": "0" * 64 + "\n"}):
        with pytest.raises(PairFileInvalid):
            parse_pair_file(json.dumps({"version": 1, "clients": [bad]}).encode(), "test")
    # The pair file's rule is worded as the route's: ASCII only ("é" is a letter, and refused).
    with pytest.raises(PairFileInvalid, match=r"clients\[0\]\.clientId 'caf\u00e9' is not 1 to 64 characters of "
                                              r"ASCII letters, digits, '\.', '_' or '-'$"):
        parse_pair_file(json.dumps({"version": 1, "clients": [{**good, "clientId": "caf\u00e9"}]}).encode(), "test")



def test_a_pair_file_saved_with_a_byte_order_mark_names_its_encoding() -> None:
    """Notepad's "Unicode" save is UTF-16 with its mark: it was "invalid character (byte 0)", and
    only UTF-8's mark was named. Each mark is named with its encoding (UTF-32's little-endian mark
    begins with UTF-16's)."""
    text = '{"version": 1, "clients": []}'
    for raw, encoding in [(b"\xef\xbb\xbf" + text.encode(), "UTF-8"), (text.encode("utf-16"), "UTF-16"),
                          (text.encode("utf-16-be").join([b"\xfe\xff", b""]), "UTF-16"),
                          (text.encode("utf-32"), "UTF-32"), (b"\x00\x00\xfe\xff" + text.encode("utf-32-be"), "UTF-32")]:
        with pytest.raises(PairFileInvalid) as caught:
            parse_pair_file(raw, "pair.json")
        assert str(caught.value).endswith(f"(it starts with a {encoding} byte order mark; a pair file is plain JSON in "
                                          "UTF-8: save it as UTF-8 without one)"), (encoding, str(caught.value))
    assert parse_pair_file(text.encode(), "pair.json").clients == []


async def test_a_pair_file_that_cannot_be_read_denies_everyone_and_the_daemon_lives(daemon: Daemon):
    # (An IsADirectoryError or PermissionError in the watcher took the whole daemon down.)
    token = await daemon.pair("c1", strong=True)
    good = daemon.pair_path.read_bytes()
    daemon.pair_path.unlink()
    daemon.pair_path.mkdir()  # as unreadable as a file of another user's with mode 0600, to root too
    try:
        await wait_until(lambda: daemon._is(token, 503), 2.0, "the daemon noticing the unreadable pair file")
        assert error_of(await daemon.get("/projects", token)) == "PAIR_FILE_INVALID"
        assert (await daemon.get("/health")).status_code == 200
        out = await run_lens(daemon.root, "pair", "list", check=False)
        assert out.returncode == 2 and "PAIR_FILE_INVALID" in out.stderr and "cannot be read" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    finally:
        daemon.pair_path.rmdir()
    daemon.pair_path.write_bytes(good)
    await daemon.wait_accepted(token)


async def test_cli_list_of_an_invalid_pair_file_is_an_error(daemon: Daemon):
    await daemon.register("c1")
    daemon.pair_path.write_text('{"clients": "everyone"}')
    out = await run_lens(daemon.root, "pair", "list", check=False)
    assert out.returncode == 2 and "lens: PAIR_FILE_INVALID:" in out.stderr, (out.stdout, out.stderr)
    assert "no clients" not in out.stdout  # (it said so, and exited 0)


async def test_pair_file_is_private_from_the_first_request(daemon: Daemon):
    await daemon.register("first")
    assert daemon.pair_path.exists()
    assert file_mode(daemon.pair_path) == 0o600
    rec = json.loads(daemon.pair_path.read_text())["clients"][0]
    assert rec["clientId"] == "first" and rec.get("status", "pending") == "pending"
    assert "credentialHash" not in rec
    assert not list(daemon.config_dir.glob(".pair.json.*.tmp"))  # written atomically, no leftovers


async def test_pending_pairings_are_bounded(daemon_factory):
    d = await daemon_factory(config={"server": {"maxPendingPairings": 2}})
    await d.register("a")
    await d.register("b")
    r = await d.post("/pair/requests", body={"clientId": "c", "name": ""})
    assert r.status_code == 429 and error_of(r) == "PAIRING_LIMIT"
    await d.register("a")  # a known client may ask again


async def test_a_pending_request_an_hour_old_gives_up_its_place(daemon_factory):
    d = await daemon_factory(config={"server": {"maxPendingPairings": 2}})
    await d.register("a")
    await d.register("b")
    data = json.loads(d.pair_path.read_text())
    hour = 60 * 60 * 1000
    for rec in data["clients"]:  # "a" asked just over an hour ago, "b" just under
        rec["requestedAt"] -= hour + 1000 if rec["clientId"] == "a" else hour - 60_000
    d.pair_path.write_text(json.dumps(data))
    r = await d.post("/pair/requests", body={"clientId": "c", "name": ""})
    assert r.status_code == 202, r.text
    ids = [c["clientId"] for c in json.loads(d.pair_path.read_text())["clients"]]
    assert ids == ["b", "c"]  # the expired request was dropped to make room; "b" kept its place
    r = await d.post("/pair/requests", body={"clientId": "e", "name": ""})
    assert r.status_code == 429 and error_of(r) == "PAIRING_LIMIT"
    assert [c["clientId"] for c in json.loads(d.pair_path.read_text())["clients"]] == ["b", "c"]


async def test_a_stream_survives_unrelated_pair_file_changes(daemon: Daemon, strong: str):
    async with daemon.sse(strong) as stream:
        await stream.next()
        marker = await daemon.pair("someone-else")  # rewrites the pair file
        await daemon.wait_accepted(marker)
        with trio.fail_after(LIMIT):
            project = await daemon.project(strong, "still-live")
            ev = await stream.until(lambda m: m.event is not None and m.event.startswith("project."))
        assert ev.event == "project.created" and ev.json()["project_id"] == project["id"]
    await wait_until(lambda: daemon._is(strong, 200), what="strong still accepted")


async def test_a_pairing_request_does_not_reveal_whether_a_client_is_approved(daemon: Daemon) -> None:
    # POST /pair/requests needs no credential: answering "approved" for an approved client's id
    # told anyone which client ids exist. Every id gets SPEC F-API-2's shape, and an approved
    # client's record (and credential) is left as it was.
    token = await daemon.pair("known-phone", strong=True)
    before = daemon.pair_path.read_bytes()
    r = await daemon.post("/pair/requests", body={"clientId": "known-phone", "name": "someone else"})
    assert r.status_code == 202 and r.json() == {"clientId": "known-phone", "status": "pending"}, r.text
    r = await daemon.post("/pair/requests", body={"clientId": "never-seen", "name": "new"})
    assert r.status_code == 202 and r.json() == {"clientId": "never-seen", "status": "pending"}, r.text
    stored = json.loads(before)
    after = json.loads(daemon.pair_path.read_bytes())
    assert record(after, "known-phone") == record(stored, "known-phone")
    assert (await daemon.get("/projects", token)).status_code == 200


async def test_two_authorization_headers_are_refused_whichever_comes_first(daemon: Daemon, strong: str,
                                                                           reader: str) -> None:
    """The first header counted: a strong credential followed by a revoked one was accepted, the
    same two the other way round refused, and a read-only one first made a strong client's
    request 403 (found by test_http_fuzz.py). Which credential a request carries is no guess."""
    revoked = await daemon.pair("revoked-client", strong=True)
    await trio.to_thread.run_sync(lambda: daemon.pairs().revoke("revoked-client"))
    await daemon.wait_refused(revoked)
    for first, second in [(strong, revoked), (revoked, strong), (reader, strong), (strong, strong)]:
        headers = [("Authorization", f"Bearer {first}"), ("Authorization", f"Bearer {second}")]
        for method, path, body in [("GET", "/projects", None), ("POST", "/projects", b"{}"),
                                   ("GET", "/events/stream", None)]:
            r = await daemon.client.request(method, API + path, headers=headers, content=body)
            assert r.status_code == 401 and error_of(r) == "AUTH_REQUIRED", (method, path, r.text)
            assert r.json()["error"]["message"] == "Authorization is given 2 times; give one credential"
    assert await daemon.status_of(strong) == 200


def test_a_check_made_while_the_pair_file_is_reread_uses_the_new_records(tmp_path):
    # The daemon re-reads the pair file on a worker thread after each pairing write it makes. The
    # re-read took the file's new stamp before reading it, so a credential check on the event
    # loop in the middle of that read saw the stamp unchanged and matched the old records: a
    # credential `lens pair revoke` had just revoked passed once. The check is made here at that
    # very point of the read (the real read, with the check run inside it).
    from runtime.pairing import PairStore

    pair = tmp_path / "pair.json"
    daemon = PairStore(pair)
    daemon.register("c1", "client", max_pending=32)
    token = PairStore(pair).approve("c1", strong=True)  # (as `lens pair approve` does)
    assert daemon.authenticate(token) is not None
    PairStore(pair).revoke("c1")  # (as `lens pair revoke` does; the daemon has not looked yet)

    real_read, checks = daemon._read, []

    def read_with_a_check_inside():
        if not checks:  # (the check's own re-read, if it makes one, is the plain read)
            checks.append("made")
            checks.append(daemon.authenticate(token))
        return real_read()

    daemon._read = read_with_a_check_inside
    assert daemon.reload(force=True)
    assert checks == ["made", None]
    assert daemon.authenticate(token) is None
