"""The HTTP API (SPEC section 9): request guards, projects, sessions, inputs, events, tools.

Every call goes to the real daemon over loopback. Sessions run on the built-in ``faux`` model,
whose default answer echoes the input, and whose ``/tool NAME {json}`` input calls a tool: a
``sleep_milliseconds`` call holds a run busy (until it is aborted) so queued inputs can be steered
and withdrawn without any timing assumption.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import trio

from events.store import READ_BYTES, Draft, open_store
from events.types import InstructionAppended, SessionCreated
from runtime import api
from runtime import daemon as daemon_module
from tests.files.sample_images import png_of_size, png_sized, tiny_png
from tools.artifacts import ArtifactError, ArtifactStore

from ..rawlog import edit_log
from .conftest import API, BUSY, LIMIT, Daemon, error_of, raw_http, run_lens, stop_daemon

DECODE_KEYS = {"seq", "ts", "project_id", "session_id", "agent_id", "task_id", "kind", "request_id", "body"}


# --------------------------------------------------------------------------- Host / Origin


async def test_health(daemon: Daemon):
    r = await daemon.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and isinstance(body["lastSeq"], int) and body["version"]


FOREIGN_HOSTS = ["evil.example", "evil.example:{port}", "127.0.0.1.nip.io:{port}", "127.0.0.1:1", "localhost:{other}",
                 "10.0.0.1:{port}", "[::1:{port}", "", "localhost:{port}@evil.example"]
LOOPBACK_HOSTS = ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}", "127.0.0.1", "localhost"]


async def test_foreign_host_is_refused_and_loopback_accepted(daemon: Daemon, strong: str):
    """DNS-rebinding defence: only this daemon's own address (or a loopback name) may be the Host."""
    fmt = {"port": daemon.port, "other": daemon.port + 1 if daemon.port < 65535 else 1}
    for host in FOREIGN_HOSTS:
        for path, token in [("/api/v1/health", None), ("/api/v1/projects", strong)]:
            r = await raw_http(daemon.port, "GET", path, {"Authorization": f"Bearer {token}"} if token else {},
                               host=host.format(**fmt))
            assert r.status in (400, 403), (host, r.status, r.body)
            if r.status == 403:
                assert r.code == "HOST_FORBIDDEN", r.body
    for host in LOOPBACK_HOSTS:
        r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": f"Bearer {strong}"},
                           host=host.format(**fmt))
        assert r.status == 200, (host, r.body)


async def test_a_refused_host_is_answered_in_the_error_shape_short_and_as_the_client_wrote_it(
        daemon: Daemon, strong: str):
    """A host with a label past 63 characters or an empty one was an empty 500 (werkzeug's
    IDNA encoding raised while Quart made the request's context, before the guard ran), and a
    traceback in the log. The Host check also echoed the header whole (kilobytes) and showed a
    client's UTF-8 as the Latin-1 text the server reads it as (`caf\u00c3\u00a9`)."""
    for host, shown in [("caf\u00c3\u00a9.example", "'caf\u00e9.example'"),  # (UTF-8 bytes of "café")
                        ("a..example", "'a..example'"), ("x" * 64 + ".example", "'" + "x" * 64 + ".example'"),
                        ("caf\u00e9.example", "'caf\u00e9.example'"),  # (one Latin-1 byte: shown as read)
                        ("x" * 5000 + ".example", "'" + "x" * 80 + "\u2026'")]:
        r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": f"Bearer {strong}"}, host=host)
        assert r.status == 403 and r.code == "HOST_FORBIDDEN", (host[:40], r.status, r.body[:200])
        message = json.loads(r.body)["error"]["message"]
        assert message == f"Host {shown} is not this daemon's address", message
    r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": f"Bearer {strong}",
                                                                "Origin": "http://caf\u00c3\u00a9.example"})
    assert r.status == 403 and json.loads(r.body)["error"]["message"] == \
        "Origin 'http://caf\u00e9.example' is not this daemon", r.body


async def test_foreign_origin_is_refused_and_same_origin_accepted(daemon: Daemon, strong: str):
    p = daemon.port
    for origin in ["http://evil.example", f"http://evil.example:{p}", "null", f"http://127.0.0.1:{p + 1}",
                   f"https://127.0.0.1:{p}0", "file://", f"ftp://127.0.0.1:{p}", "http://127.0.0.1"]:
        for method, path, body in [("GET", "/projects", None), ("POST", "/projects", {"name": "x", "workspace": "/"}),
                                   ("GET", "/health", None), ("POST", "/pair/requests", {"clientId": "o", "name": ""})]:
            r = await daemon.request(method, path, strong, json_body=body, headers={"Origin": origin})
            assert r.status_code == 403 and error_of(r) == "ORIGIN_FORBIDDEN", (origin, method, path, r.text)
    assert (await daemon.get("/projects", strong)).json()["projects"] == []  # nothing was created
    for origin in [f"http://127.0.0.1:{p}", f"http://localhost:{p}", f"http://[::1]:{p}"]:
        r = await daemon.get("/projects", strong, headers={"Origin": origin})
        assert r.status_code == 200, (origin, r.text)
    (daemon.root / "ws").mkdir()
    project = await daemon.request("POST", "/projects", strong, json_body={"name": "o", "workspace": str(daemon.root / "ws")},
                                   headers={"Origin": f"http://127.0.0.1:{p}"})
    assert project.status_code == 201


async def test_an_origin_with_more_than_scheme_host_and_port_is_refused_as_not_valid(daemon: Daemon, strong: str):
    """An origin is scheme://host[:port] (RFC 6454), which is all a browser sends. This daemon's
    own origin with a path, a query, a fragment or user info after it was accepted: no page
    sends such a value, so it is refused as malformed, as other values that are no origin are."""
    own = f"http://127.0.0.1:{daemon.port}"
    for origin in [own + "/", own + "/dashboard", own + "?x=1", own + "#top", f"http://evil.example@127.0.0.1:{daemon.port}",
                   f"http://u:p@127.0.0.1:{daemon.port}", own + "/" + "x" * 5000]:
        for method, path, body in [("GET", "/projects", None), ("POST", "/projects", {"name": "x", "workspace": "/"}),
                                   ("GET", "/health", None)]:
            r = await daemon.request(method, path, strong, json_body=body, headers={"Origin": origin})
            assert r.status_code == 403 and error_of(r) == "ORIGIN_FORBIDDEN", (origin, method, path, r.text)
            message = r.json()["error"]["message"]
            assert message.endswith("is not valid: an origin is scheme://host[:port] only"), message
            assert len(message) < 200, message  # (the value shown up to 80 characters)
    assert (await daemon.get("/projects", strong)).json()["projects"] == []  # nothing was created
    assert (await daemon.get("/projects", strong, headers={"Origin": own})).status_code == 200
    r = await daemon.get("/projects", strong, headers={"Origin": "http://evil.example/" + "x" * 5000})
    assert r.status_code == 403 and len(r.json()["error"]["message"]) < 200, r.text


async def test_an_origin_whose_brackets_do_not_parse_is_refused_as_not_valid(daemon: Daemon, strong: str):
    """An unclosed ``[``, a stray ``]`` or a bracketed host that is no IP address made the URL
    parser raise inside the Origin check: an error answer of 500 ``INTERNAL`` and a traceback in
    the daemon log (found by the header fuzz test)."""
    p = daemon.port
    for origin in ["http://[::1", f"http://[::1:{p}", "http://]", f"http://a]b:{p}", f"http://[abc]:{p}",
                   f"http://[127.0.0.1]:{p}"]:
        for method, path, body in [("GET", "/projects", None), ("POST", "/projects", {"name": "x", "workspace": "/"}),
                                   ("GET", "/health", None), ("POST", "/pair/requests", {"clientId": "o", "name": ""})]:
            r = await daemon.request(method, path, strong, json_body=body, headers={"Origin": origin})
            assert r.status_code == 403 and error_of(r) == "ORIGIN_FORBIDDEN", (origin, method, path, r.text)
            assert r.json()["error"]["message"] == f"Origin {origin!r} is not valid", r.text
    assert (await daemon.get("/projects", strong)).json()["projects"] == []  # nothing was created
    assert (await daemon.get("/projects", strong, headers={"Origin": f"http://[::1]:{p}"})).status_code == 200


async def test_two_origin_headers_are_refused_whichever_comes_first(daemon: Daemon, strong: str):
    """The first header counted: this daemon's origin followed by a foreign one was accepted, the
    two the other way round refused. Which page a request comes from is no guess, as which
    credential it carries is none."""
    p = daemon.port
    own, foreign = f"http://127.0.0.1:{p}", "http://evil.example"
    for first, second in [(own, foreign), (foreign, own), (own, own)]:
        headers = [("Authorization", f"Bearer {strong}"), ("Content-Type", "application/json"),
                   ("Origin", first), ("Origin", second)]
        for method, path, body in [("GET", "/projects", None), ("POST", "/projects", b'{"name": "x", "workspace": "/"}'),
                                   ("GET", "/health", None), ("GET", "/events/stream", None)]:
            r = await daemon.client.request(method, API + path, headers=headers, content=body)
            assert r.status_code == 403 and error_of(r) == "ORIGIN_FORBIDDEN", (first, second, method, path, r.text)
            assert r.json()["error"]["message"] == "Origin is given 2 times; a request comes from one page"
    assert (await daemon.get("/projects", strong)).json()["projects"] == []  # nothing was created
    assert (await daemon.get("/projects", strong, headers={"Origin": own})).status_code == 200


# --------------------------------------------------------------------------- bodies


async def test_bodies_are_json_whatever_their_content_type(daemon: Daemon, strong: str):
    (daemon.root / "ws").mkdir()
    for i, ctype in enumerate([None, "text/plain", "application/x-www-form-urlencoded", "text/json"]):
        headers = {"Authorization": f"Bearer {strong}", **({"Content-Type": ctype} if ctype else {})}
        body = json.dumps({"name": f"p{i}", "workspace": str(daemon.root / "ws")}).encode()
        r = await raw_http(daemon.port, "POST", "/api/v1/projects", headers, body)
        assert r.status == 201 and r.json()["name"] == f"p{i}", (ctype, r.body)
        r = await raw_http(daemon.port, "PUT", "/api/v1/config/files/lens.jsonc", headers, b'{"text": "{}"}')
        assert r.status == 200, (ctype, r.body)
        r = await raw_http(daemon.port, "POST", "/api/v1/pair/requests", {k: v for k, v in headers.items() if k != "Authorization"},
                           json.dumps({"clientId": f"c{i}", "name": ""}).encode())
        assert r.status == 202, (ctype, r.body)
        r = await raw_http(daemon.port, "POST", "/api/v1/projects", headers, b"name=p&workspace=/tmp")
        assert r.status == 400 and r.code == "INVALID_JSON", (ctype, r.body)
    assert len((await daemon.get("/projects", strong)).json()["projects"]) == 4


async def test_a_post_without_a_body_needs_no_content_type_and_the_credential_comes_first(
        daemon: Daemon, strong: str, reader: str):
    project = await daemon.project(strong)
    sid = (await daemon.session(strong, project["id"]))["id"]
    for path, status in [(f"/api/v1/sessions/{sid}/abort", 200), (f"/api/v1/sessions/{sid}/inputs/r1/withdraw", 200),
                         (f"/api/v1/sessions/{sid}/inputs/r1/steer", 409)]:
        r = await raw_http(daemon.port, "POST", path)
        assert r.status == 401 and r.code == "AUTH_REQUIRED", (path, r.body)
        r = await raw_http(daemon.port, "POST", path, {"Authorization": f"Bearer {reader}"})
        assert r.status == 403 and r.code == "FORBIDDEN", (path, r.body)
        r = await raw_http(daemon.port, "POST", path, {"Authorization": f"Bearer {strong}"})
        assert r.status == status, (path, r.body)
        assert status == 200 or r.code == "INPUT_NOT_QUEUED"


async def test_json_content_type_with_parameters_is_accepted(daemon: Daemon, strong: str):
    (daemon.root / "ws").mkdir()
    r = await daemon.request("POST", "/projects", strong, json_body={"name": "x", "workspace": str(daemon.root / "ws")},
                             headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 201, r.text


LIMIT_BYTES = 64 * 1024  # the lowest server.maxBodyBytes allowed


def padded(obj: dict, size: int) -> bytes:
    """``obj`` as JSON padded with trailing spaces to exactly ``size`` bytes."""
    raw = json.dumps(obj).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


async def test_body_limit_is_exact(daemon_factory):
    d = await daemon_factory(config={"server": {"maxBodyBytes": LIMIT_BYTES}})
    token = await d.pair("c", strong=True)
    ws = d.root / "ws"
    ws.mkdir()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    at_limit = padded({"name": "at-limit", "workspace": str(ws)}, LIMIT_BYTES)
    r = await raw_http(d.port, "POST", "/api/v1/projects", headers, at_limit)
    assert r.status == 201, r.body
    over = padded({"name": "over", "workspace": str(ws)}, LIMIT_BYTES + 1)
    r = await raw_http(d.port, "POST", "/api/v1/projects", headers, over)
    assert r.status == 413 and r.code == "BODY_TOO_LARGE", r.body
    # the public route has the same limit
    r = await raw_http(d.port, "POST", "/api/v1/pair/requests", {"Content-Type": "application/json"},
                       padded({"clientId": "big", "name": ""}, LIMIT_BYTES + 1))
    assert r.status == 413 and r.code == "BODY_TOO_LARGE", r.body
    r = await raw_http(d.port, "POST", "/api/v1/pair/requests", {"Content-Type": "application/json"},
                       padded({"clientId": "fits", "name": ""}, LIMIT_BYTES))
    assert r.status == 202, r.body
    names = [p["name"] for p in (await d.get("/projects", token)).json()["projects"]]
    assert names == ["at-limit"]
    # the credential is checked first, as for a body within the limit (an oversized one was 413)
    for auth_headers, code in [({}, "AUTH_REQUIRED"), ({"Authorization": "Bearer lens_nope"}, "AUTH_INVALID")]:
        r = await raw_http(d.port, "POST", "/api/v1/projects", {"Content-Type": "application/json", **auth_headers}, over)
        assert r.status == 401 and r.code == code, r.body


async def test_chunked_body_over_the_limit_is_413(daemon_factory):
    d = await daemon_factory(config={"server": {"maxBodyBytes": LIMIT_BYTES}})
    token = await d.pair("c", strong=True)
    body = padded({"name": "chunked", "workspace": str(d.root)}, LIMIT_BYTES + 100)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 500]), body[i:i + 500]) for i in range(0, len(body), 500))
    chunked += b"0\r\n\r\n"
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
        async with stream:
            await stream.send_all(
                f"POST /api/v1/projects HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
                + chunked)
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(65536)
    assert data.split(b" ", 2)[1] == b"413", data
    assert (await d.get("/projects", token)).json()["projects"] == []


async def test_malformed_json_is_400_and_wrong_shape_is_422(daemon: Daemon, strong: str):
    deep = b"[" * 5000 + b"]" * 5000  # past the interpreter's recursion limit (was a 500)
    for raw in [b"{", b"not json", b'{"name": "x",}', b"\xff\xfe", b'{"name": "x"} trailing', b"", deep, b"[" * 5000,
                b'{"name": "x", "workspace": "/", "extra": ' + deep + b"}"]:
        r = await daemon.client.post("/api/v1/projects", content=raw,
                                     headers={"Authorization": f"Bearer {strong}", "Content-Type": "application/json"})
        assert r.status_code == 400 and error_of(r) == "INVALID_JSON", (raw[:40], r.text)
    r = await daemon.client.post("/api/v1/pair/requests", content=deep, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and error_of(r) == "INVALID_JSON", r.text  # no credential needed to ask
    for raw in [b'{"name": "a\\ud800b", "workspace": "/"}', b'{"name": "a\\uDBFF", "workspace": "/"}']:
        r = await daemon.client.post("/api/v1/projects", content=raw, headers={"Authorization": f"Bearer {strong}"})
        assert r.status_code == 400 and error_of(r) == "INVALID_JSON", r.text
        assert "surrogate" in r.json()["error"]["message"], r.text  # (msgspec said "truncated" for the first)
    for body in [[], "x", 1, None, {}, {"name": "x"}, {"name": 1, "workspace": "/"},
                 {"name": "x", "workspace": "/", "extra": True}, {"Name": "x", "Workspace": "/"}]:
        r = await daemon.request("POST", "/projects", strong, content=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", (body, r.text)
    assert (await daemon.get("/projects", strong)).json()["projects"] == []


async def test_a_key_twice_in_one_object_is_400_naming_it_and_nothing_is_done(daemon: Daemon, strong: str):
    """RFC 8259 leaves a repeated name's meaning to the reader: a proxy reading the first
    ``requestId`` and Lens the last would each take a different input, so neither is taken."""
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    before = await daemon.events(strong, sid)
    for raw, key in [(b'{"requestId": "a1", "content": "x", "requestId": "a2"}', "requestId"),
                     (b'{"requestId": "a3", "content": "x", "\\u0063ontent": "y"}', "content"),  # the same name escaped
                     (b'{"requestId": "a4", "content": [{"type": "text", "text": "x", "text": "y"}]}', "text")]:
        r = await daemon.request("POST", f"/sessions/{sid}/inputs", strong, content=raw,
                                 headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and error_of(r) == "INVALID_JSON", (raw, r.text)
        assert f"the key '{key}' twice" in r.json()["error"]["message"], r.text
    assert await daemon.events(strong, sid) == before
    # the same name in two objects is no repetition
    r = await daemon.request("POST", f"/sessions/{sid}/inputs", strong, headers={"Content-Type": "application/json"},
                             content=b'{"requestId": "a5", "content": [{"type": "text", "text": "x"}, '
                                     b'{"type": "text", "text": "y"}]}')
    assert r.status_code == 202, r.text


async def test_unknown_route_and_method(daemon: Daemon, strong: str):
    r = await daemon.get("/nope", strong)
    assert r.status_code == 404 and error_of(r) == "NOT_FOUND"
    r = await daemon.request("DELETE", "/projects", strong)
    assert r.status_code == 405 and error_of(r) == "METHOD_NOT_ALLOWED"
    r = await daemon.request("PATCH", "/projects", strong, json_body={})
    assert r.status_code == 405 and error_of(r) == "METHOD_NOT_ALLOWED"


# --------------------------------------------------------------------------- projects


async def test_projects_create_and_list(daemon: Daemon, strong: str, reader: str):
    ws = daemon.root / "workspace one"
    ws.mkdir()
    r = await daemon.post("/projects", strong, {"name": "One", "workspace": str(ws)})
    assert r.status_code == 201
    p = r.json()
    assert {"id", "name", "workspace"} <= set(p)
    assert p["name"] == "One" and p["workspace"] == str(ws.resolve()) and p["id"]
    listed = (await daemon.get("/projects", reader)).json()["projects"]
    assert [(x["id"], x["name"], x["workspace"]) for x in listed] == [(p["id"], "One", str(ws.resolve()))]


async def test_project_workspace_must_be_an_existing_directory(daemon: Daemon, strong: str):
    (daemon.root / "a-file").write_text("x")
    (daemon.root / "loop").symlink_to(daemon.root / "loop")
    (daemon.root / "rel").mkdir()
    long_name = "{root}/" + "a" * 300  # one name past NAME_MAX (was a 500: the stat raised)
    for workspace, own in [("{root}", "data directory"), ("{root}/data", "data directory"),
                           ("{root}/config", "config directory")]:
        # holding (or lying in) the daemon's own directories: the agent could edit pair.json there
        r = await daemon.post("/projects", strong, {"name": "p", "workspace": workspace.format(root=daemon.root)})
        assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", r.text
        assert f"and the daemon's {own}" in r.json()["error"]["message"] and "overlap" in r.text, r.text
    for workspace in [
                      "{root}/missing", "{root}/a-file", "", "relative/missing", "{root}/x\u0000y", long_name,
                      "/" + "a/" * 3000, "{root}/loop", "rel", "/", "/etc", "/usr", "/proc", "/proc/self", "/sys/kernel",
                      "/dev", "{root}" + "/.." * 64]:  # (the last resolves to /)
        r = await daemon.post("/projects", strong, {"name": "p", "workspace": workspace.format(root=daemon.root)})
        assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", (workspace[:60], r.text)
        assert len(r.json()["error"]["message"]) < 400
    for workspace in ["~", "~/", str(Path.home()), "/root"]:  # the whole home: ~/.ssh, ~/.bashrc…
        r = await daemon.post("/projects", strong, {"name": "p", "workspace": workspace})
        assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", (workspace, r.text)
        assert "home directory" in r.json()["error"]["message"] or not Path(workspace).expanduser().is_dir(), r.text
    assert (await daemon.get("/projects", strong)).json()["projects"] == []


async def test_a_workspace_a_later_daemon_keeps_its_config_in_is_not_used(daemon_factory, tmp_path: Path):
    # POST /projects checks a workspace against the directories of the daemon it is made by. A
    # daemon started later with its config in that workspace (here its data too, through a link)
    # let a read-only credential read the pair file by browsing the workspace, and the agent
    # read and change it (F-API-3: raw config is for strong trust only).
    first_root, ws = tmp_path / "first", tmp_path / "ws"
    first_root.mkdir()
    ws.mkdir()
    first = await daemon_factory(root=first_root)
    token = await first.pair("s", strong=True)
    r = await first.post("/projects", token, {"name": "p", "workspace": str(ws)})
    assert r.status_code == 201, r.text
    sid = (await first.session(token, r.json()["id"]))["id"]
    await stop_daemon(first)
    (ws / "data").symlink_to(first.data_dir)  # the same log, from a daemon whose root is the workspace
    later = await daemon_factory(root=ws)
    strong, reader = await later.pair("s2", strong=True), await later.pair("r2")
    assert (ws / "config" / "pair.json").exists()
    r = await later.get(f"/sessions/{sid}/workspace/file", reader, params={"path": "config/pair.json"})
    assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", r.text
    assert "and the daemon's config directory" in r.json()["error"]["message"], r.text
    r = await later.get(f"/sessions/{sid}/workspace/tree", reader)
    assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", r.text
    await later.submit(strong, sid, "r1", '/tool read_file {"path": "config/pair.json"}')
    await later.wait_idle(strong, sid)
    done = [e["body"] for e in await later.events(strong, sid) if e["kind"] == "tool.finished"]
    assert done[-1]["is_error"] and done[-1]["error_code"] == "WORKSPACE_INVALID", done[-1]
    assert "credentialHash" not in json.dumps(done[-1])


async def test_a_workspace_may_not_lie_in_system_trees_or_hidden_home_directories(
    daemon: Daemon, strong: str, monkeypatch: pytest.MonkeyPatch
):
    """Not only the directories themselves: /etc/ssh, /usr/local or ~/.ssh were accepted."""
    system = [p for p in ("/etc/ssh", "/etc/default", "/usr/local", "/usr/share", "/usr/lib", "/var/lib",
                          "/var/log", "/var/cache") if Path(p).is_dir()]
    assert len(system) >= 3
    for workspace in system:
        r = await daemon.post("/projects", strong, {"name": "p", "workspace": workspace})
        assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", (workspace, r.text)
        assert "system directory" in r.json()["error"]["message"]
    home = daemon.root / "home" / "me"
    for sub in (".ssh", ".config/gcloud", ".local/share/x", "projects/.hidden-in-a-project", "code/app"):
        (home / sub).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for workspace in ("~/.ssh", "~/.config", "~/.config/gcloud", "~/.local/share/x"):
        r = await daemon.post("/projects", strong, {"name": "p", "workspace": workspace})
        assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", (workspace, r.text)
        assert "hidden directory of a home" in r.json()["error"]["message"], r.text
    for workspace in [p for p in ("/root/.cache", "/root/.config") if Path(p).is_dir()]:
        r = await daemon.post("/projects", strong, {"name": "p", "workspace": workspace})
        assert error_of(r) == "WORKSPACE_INVALID", (workspace, r.text)
    # a project inside a home, hidden directories within the project included, is fine
    for workspace in ("~/code/app", "~/projects/.hidden-in-a-project"):
        r = await daemon.post("/projects", strong, {"name": "p", "workspace": workspace})
        assert r.status_code == 201, (workspace, r.text)


async def test_project_name_must_not_be_blank(daemon: Daemon, strong: str):
    r = await daemon.post("/projects", strong, {"name": "  ", "workspace": str(daemon.root)})
    assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED"


# --------------------------------------------------------------------------- sessions


async def test_sessions_create_list_and_view(daemon: Daemon, strong: str, reader: str):
    p1 = await daemon.project(strong, "one")
    p2 = await daemon.project(strong, "two")
    r = await daemon.post("/sessions", strong, {"projectId": p1["id"]})
    assert r.status_code == 201
    s1 = r.json()
    assert s1["id"] and s1["projectId"] == p1["id"]
    assert s1["status"] == "idle" and s1["items"] == [] and s1["queued"] == [] and s1["todos"] == []
    assert "usage" in s1
    s2 = await daemon.session(strong, p2["id"])
    all_ids = {s["id"] for s in (await daemon.get("/sessions", reader)).json()["sessions"]}
    assert all_ids == {s1["id"], s2["id"]}
    only = (await daemon.get("/sessions", reader, params={"project": p1["id"]})).json()["sessions"]
    assert [(s["id"], s["projectId"]) for s in only] == [(s1["id"], p1["id"])]
    view = await daemon.view(reader, s1["id"])
    assert view["id"] == s1["id"] and view["projectId"] == p1["id"]
    for key in ("status", "items", "queued", "todos", "usage"):
        assert key in view, key


async def test_session_for_unknown_project_is_404(daemon: Daemon, strong: str):
    r = await daemon.post("/sessions", strong, {"projectId": "prj_nope"})
    assert r.status_code == 404 and error_of(r) == "PROJECT_NOT_FOUND"
    assert (await daemon.get("/sessions", strong)).json()["sessions"] == []


@pytest.mark.parametrize("project_id", ["", "a b", "x" * 201, "prj/1"])
async def test_a_malformed_project_id_in_a_body_is_400_as_in_a_path(daemon: Daemon, strong: str, project_id: str):
    # An id of the right type but malformed is INVALID_ARGUMENT wherever it is given (an empty
    # projectId was "no project ''", 404); a wrong type is a shape problem (422).
    for route, body in (("/sessions", {"projectId": project_id}),
                        ("/history/search", {"projectId": project_id, "query": "q"})):
        r = await daemon.post(route, strong, body)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (route, r.text)
        assert "projectId must be 1 to 200 characters" in r.json()["error"]["message"]
    r = await daemon.post("/sessions", strong, {"projectId": 5})
    assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED"


async def test_an_id_with_a_letter_outside_ascii_is_told_the_letters_are_ascii(daemon: Daemon, strong: str):
    # Ids are 1-200 of A-Z a-z 0-9 . _ : - ; the message said "letters, digits", and a client
    # whose requestId "é1" (a letter) was refused could not tell why. The pairing clientId too.
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    for request_id in ("é1", "r\u0661"):  # (a Latin letter, an Arabic-Indic digit)
        r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": request_id, "content": "x"})
        assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT"), r.text
        assert "requestId must be 1 to 200 characters of ASCII letters, digits" in r.json()["error"]["message"], r.text
    r = await daemon.post("/pair/requests", None, {"clientId": "é1"})
    assert (r.status_code, error_of(r)) == (400, "PAIRING_INVALID"), r.text
    assert "clientId must be 1 to 64 characters of ASCII letters, digits" in r.json()["error"]["message"], r.text


async def test_session_with_unknown_model_is_422(daemon: Daemon, strong: str):
    p = await daemon.project(strong)
    r = await daemon.post("/sessions", strong, {"projectId": p["id"], "model": "nobody/nothing"})
    assert r.status_code == 422 and error_of(r) == "MODEL_UNKNOWN"


async def test_unknown_session_is_404(daemon: Daemon, strong: str, reader: str):
    for path in ["/sessions/ses_nope", "/sessions/ses_nope/events", "/tools/inventory?session=ses_nope"]:
        r = await daemon.get(path, reader)
        assert r.status_code == 404 and error_of(r) == "SESSION_NOT_FOUND", (path, r.text)
    for path in ["/sessions/ses_nope/inputs", "/sessions/ses_nope/abort", "/sessions/ses_nope/inputs/r1/withdraw",
                 "/sessions/ses_nope/inputs/r1/steer"]:
        body = {"requestId": "r1", "content": "hi"} if path.endswith("/inputs") else {}
        r = await daemon.post(path, strong, body)
        assert r.status_code == 404 and error_of(r) == "SESSION_NOT_FOUND", (path, r.text)
    assert (await daemon.get("/health")).json()["lastSeq"] == 0  # nothing was created on the way
    # an empty id is no route (not a redirect elsewhere), and a wrong method is 405 whatever
    # the body's type
    for path in ["/sessions//events", "/sessions//inputs"]:
        r = await daemon.get(path, reader)
        assert r.status_code == 404 and error_of(r) == "NOT_FOUND", (path, r.status_code, r.text)
    r = await daemon.request("POST", "/sessions/ses_nope/events", strong, content=b"x",
                             headers={"Content-Type": "text/plain"})
    assert r.status_code == 405 and error_of(r) == "METHOD_NOT_ALLOWED", r.text


async def test_bad_ids_are_400(daemon: Daemon, strong: str):
    r = await daemon.get("/sessions/bad%20id", strong)
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "has space", "content": "x"})
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
    for q in ["after=-1", "after=x", "limit=0", "limit=100000"]:
        r = await daemon.get(f"/sessions/{sid}/events?{q}", strong)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", q


async def test_an_events_page_is_bounded_in_bytes_as_well_as_in_events(daemon_factory, tmp_path):
    # Five events of 6 MiB each (compressed to almost nothing on disk): a page of limit=1000
    # stops before its bodies pass 16 MiB, and paging on by nextAfter returns each event once.
    big = 6 * 1024 * 1024
    async with open_store(tmp_path / "data") as store:
        await store.append(Draft(SessionCreated(model="faux/echo"), project_id="prj_x", session_id="ses_big"))
        for i in range(5):
            await store.append(Draft(InstructionAppended(text=str(i) * big), project_id="prj_x", session_id="ses_big"))
    daemon = await daemon_factory(root=tmp_path)
    token = await daemon.pair("reader", strong=False)
    pages, after = [], 0
    while True:
        r = await daemon.get("/sessions/ses_big/events", token, params={"after": after, "limit": 1000})
        assert r.status_code == 200, r.text[:200]
        page = r.json()
        if not page["events"]:
            break
        pages.append([e["seq"] for e in page["events"]])
        texts = [e["body"].get("text", "") for e in page["events"]]
        assert sum(map(len, texts)) <= READ_BYTES
        after = page["nextAfter"]
    assert [seq for p in pages for seq in p] == [1, 2, 3, 4, 5, 6]
    assert [len(p) for p in pages] == [3, 2, 1]  # created + 2 × 6 MiB | 2 × 6 MiB | 6 MiB


async def test_session_fields_are_checked_like_project_fields(daemon: Daemon, strong: str):
    p = await daemon.project(strong)
    before = (await daemon.get("/health")).json()["lastSeq"]
    for body, code in [({"name": ""}, "VALIDATION_FAILED"), ({"name": "   "}, "VALIDATION_FAILED"),
                       ({"name": "n" * 201}, "VALIDATION_FAILED"), ({"name": "a\u0000b"}, "VALIDATION_FAILED"),
                       ({"name": "line\nbreak"}, "VALIDATION_FAILED"), ({"thinkingLevel": "ultra"}, "VALIDATION_FAILED"),
                       ({"thinkingLevel": ""}, "VALIDATION_FAILED"), ({"model": ""}, "MODEL_UNKNOWN"),
                       ({"model": " faux/echo"}, "MODEL_UNKNOWN"), ({"model": "faux/" + "m" * 196}, "MODEL_UNKNOWN")]:
        r = await daemon.post("/sessions", strong, {"projectId": p["id"], **body})
        assert r.status_code == 422 and error_of(r) == code, (body, r.text[:200])
    r = await daemon.post("/projects", strong, {"name": "a\u0000b", "workspace": str(daemon.root)})
    assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", r.text
    assert (await daemon.get("/health")).json()["lastSeq"] == before  # nothing was created
    r = await daemon.post("/sessions", strong, {"projectId": p["id"], "name": "n" * 200, "thinkingLevel": "high"})
    assert r.status_code == 201, r.text


async def test_query_filters_are_given_once_and_well_formed(daemon: Daemon, strong: str, reader: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    for path in ["/sessions?project=", f"/sessions?project={p['id']}&project=other", "/sessions?project=a%20b",
                 f"/sessions?project={p['id']}&projectId=other", f"/sessions?project={p['id']}&projectId={p['id']}",
                 "/sessions?includeDeleted=maybe",
                 "/sessions?includeDeleted=1&includeDeleted=0", "/tools/inventory?session=",
                 f"/tools/inventory?session={sid}&session={sid}", f"/events/stream?session={sid}&session=x",
                 "/events/stream?project=p&project=q", "/events/stream?after=1&after=2"]:
        r = await daemon.get(path, reader)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (path, r.status_code, r.text[:200])
    for query in [f"project={p['id']}", f"projectId={p['id']}"]:  # (either name, given once)
        listed = (await daemon.get(f"/sessions?{query}", reader)).json()["sessions"]
        assert [x["id"] for x in listed] == [sid], query
    for verb in ["withdraw", "steer"]:
        for rid in ["%C3%A9", "r" * 201, "has%20space"]:
            r = await daemon.post(f"/sessions/{sid}/inputs/{rid}/{verb}", strong, {})
            assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (verb, rid[:20], r.text)


async def test_an_id_with_a_trailing_newline_is_malformed_wherever_ids_are_checked(
        daemon: Daemon, strong: str, reader: str):
    """Ids are checked whole (``fullmatch``). The check was ``ID_RE.match`` with a ``$``, which
    matches before a final newline: ``?session=ses_x%0A`` opened a stream on the id
    ``'ses_x\\n'``, and an input with requestId ``"r1\\n"`` was accepted and written."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    before = (await daemon.get("/health")).json()["lastSeq"]
    for path in ["/events/stream?session=ses_x%0A", "/events/stream?project=prj_x%0A", "/sessions?project=prj_x%0A",
                 f"/tools/inventory?session={sid}%0A", f"/sessions/{sid}%0A", f"/sessions/{sid}%0A/events"]:
        r = await daemon.get(path, reader)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (path, r.status_code, r.text[:200])
    for route, body in ((f"/sessions/{sid}/inputs", {"requestId": "r1\n", "content": "x"}),
                        (f"/sessions/{sid}%0A/abort", {}), (f"/sessions/{sid}/inputs/r1%0A/withdraw", {}),
                        ("/sessions", {"projectId": p["id"] + "\n"}),
                        ("/history/search", {"projectId": p["id"] + "\n", "query": "q"})):
        r = await daemon.post(route, strong, body)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (route, r.status_code, r.text[:200])
    assert (await daemon.get("/health")).json()["lastSeq"] == before  # nothing was written
    # the edge: 200 characters of the set are an id
    await daemon.submit(strong, sid, "r" * 200, "x")


async def test_an_artifact_id_is_checked_whole(daemon: Daemon, reader: str):
    """``GET /artifacts/<sha>%0A`` is no artifact (the check's ``$`` took the trailing newline: a
    file of that name was read, and answered 500 ARTIFACT_CORRUPT). The route now refuses it as a
    malformed id; the store itself finds no artifact by that name."""
    store = ArtifactStore(daemon.data_dir / "artifacts")
    aid = store.put(b"some bytes")
    (store.root / (aid + "\n")).write_bytes(b"some bytes")
    assert (await daemon.get(f"/artifacts/{aid}", reader)).content == b"some bytes"
    r = await daemon.get(f"/artifacts/{aid}%0A", reader)
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text
    with pytest.raises(ArtifactError) as caught:
        store.get(aid + "\n")
    assert caught.value.code == "ARTIFACT_NOT_FOUND"


# --------------------------------------------------------------------------- inputs


async def test_submit_runs_and_the_view_shows_it(daemon: Daemon, strong: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    ack = await daemon.submit(strong, sid, "r1", "hello there")
    assert set(ack) == {"requestId", "seq", "duplicate"}
    assert ack["requestId"] == "r1" and ack["duplicate"] is False and ack["seq"] > 0
    view = await daemon.wait_idle(strong, sid)
    assert [(it["role"], it["text"]) for it in view["items"]] == [
        ("user", "hello there"), ("assistant", "(faux) You said: hello there")]
    assert view["usage"]["requests"] == 1
    # a repeated requestId is acknowledged with the original seq and appends nothing
    before = (await daemon.get("/health")).json()["lastSeq"]
    again = await daemon.submit(strong, sid, "r1", "hello there")
    assert again == {"requestId": "r1", "seq": ack["seq"], "duplicate": True}
    again = await daemon.submit(strong, sid, "r1", "different text, same id")
    assert again["duplicate"] is True and again["seq"] == ack["seq"]
    assert (await daemon.get("/health")).json()["lastSeq"] == before
    assert len((await daemon.wait_idle(strong, sid))["items"]) == 2


async def test_a_retried_submission_is_a_duplicate_even_when_a_new_one_would_be_refused(daemon_factory):
    # F-LOG-4: a request id already recorded returns the original result. After a restart with its
    # provider disabled, the retry of a recorded input was 422 PROVIDER_DISABLED: the client took
    # its input for lost, though the session had run it.
    provider = {"id": "fx", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 100_000}]}
    d = await daemon_factory(config={"providers": [provider], "defaultModel": "fx/m1"})
    strong = await d.pair("c1", strong=True)
    sid = (await d.session(strong, (await d.project(strong))["id"]))["id"]
    ack = await d.submit(strong, sid, "r1", "hello there")
    await d.wait_idle(strong, sid)
    await stop_daemon(d)
    d2 = await daemon_factory(config={"providers": [dict(provider, enabled=False)], "defaultModel": "fx/m1"},
                              root=d.root)
    before = (await d2.get("/health")).json()["lastSeq"]
    for content in ("hello there", " "):  # (the first try's answer, whatever the retry holds)
        again = await d2.submit(strong, sid, "r1", content)
        assert again == {"requestId": "r1", "seq": ack["seq"], "duplicate": True}
    r = await d2.post(f"/sessions/{sid}/inputs", strong, {"requestId": "r2", "content": "new"})
    assert r.status_code == 422 and error_of(r) == "PROVIDER_DISABLED"  # a new input is still checked
    r = await d2.post(f"/sessions/{sid}/inputs", strong, {"requestId": "r3", "content": " "})
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
    assert (await d2.get("/health")).json()["lastSeq"] == before


def store_artifact(daemon: Daemon, data: bytes) -> str:
    aid = hashlib.sha256(data).hexdigest()
    (daemon.data_dir / "artifacts").mkdir(parents=True, exist_ok=True)
    (daemon.data_dir / "artifacts" / aid).write_bytes(data)
    return aid


async def test_an_artifact_id_is_a_sha256_in_lowercase_hex(daemon: Daemon, reader: str):
    """An artifact is named by the SHA-256 of its bytes: any other name is malformed (400), not
    unknown (404), in GET /artifacts/{id} as in an image part; only a well-formed id that names
    nothing is 404."""
    aid = store_artifact(daemon, b"some bytes")
    assert (await daemon.get(f"/artifacts/{aid}", reader)).content == b"some bytes"
    for bad in ("abc", aid.upper(), aid[:63], aid + "0", "g" * 64, "sha256:" + aid, aid[:32] + "-" + aid[33:]):
        r = await daemon.get(f"/artifacts/{bad}", reader)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (bad, r.text)
        assert "64 lowercase hex digits" in r.json()["error"]["message"], r.text
    r = await daemon.get("/artifacts/" + "0" * 64, reader)
    assert r.status_code == 404 and error_of(r) == "ARTIFACT_NOT_FOUND", r.text


async def test_an_artifact_is_served_in_byte_ranges_and_by_its_etag(daemon: Daemon, reader: str):
    """An artifact's bytes never change under its id: it carries its id as a strong ETag (a
    revalidation is 304) and is served in byte ranges (206), as a client resuming or showing part
    of a large binary asks; a range past its end is 416 with a clear code. Range was ignored."""
    data = bytes(range(256)) * 40  # 10,240 bytes
    aid = store_artifact(daemon, data)
    r = await daemon.get(f"/artifacts/{aid}", reader)
    assert r.status_code == 200 and r.content == data
    assert r.headers["accept-ranges"] == "bytes" and r.headers["etag"] == f'"{aid}"', r.headers
    for header, status, part, content_range in [
        ("bytes=0-9", 206, data[:10], "bytes 0-9/10240"),
        ("bytes=10230-", 206, data[10230:], "bytes 10230-10239/10240"),
        ("bytes=-4", 206, data[-4:], "bytes 10236-10239/10240"),
        ("bytes=10239-99999", 206, data[10239:], "bytes 10239-10239/10240"),  # (the end is cut to the size)
        ("bytes=0-", 206, data, "bytes 0-10239/10240"),
        ("bytes=-20000", 206, data, "bytes 0-10239/10240"),  # (more than it has: all of it)
    ]:
        r = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": header})
        assert r.status_code == status and r.content == part, (header, r.status_code, r.headers)
        assert r.headers["content-range"] == content_range, (header, r.headers)
    for header in ("bytes=10240-", "bytes=20000-30000", "bytes=-0"):
        r = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": header})
        assert r.status_code == 416 and error_of(r) == "RANGE_NOT_SATISFIABLE", (header, r.text)
        assert r.headers["content-range"] == "bytes */10240" and "10240 bytes" in r.text, r.headers
        assert r.headers["content-type"].startswith("application/json"), r.headers
    # not a range this route serves: the whole artifact, as HTTP allows
    for header in ("bytes=x", "lines=1-2", "bytes=5-1", "bytes=0-1,4-5", "bytes=-", "bytes=" + "9" * 5000 + "-"):
        r = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": header})
        assert r.status_code == 200 and r.content == data, (header, r.status_code)
    r = await daemon.get(f"/artifacts/{aid}", reader, headers={"If-None-Match": f'"{aid}"'})
    assert r.status_code == 304 and r.content == b"", r.status_code
    r = await daemon.get(f"/artifacts/{aid}", reader, headers={"If-Range": '"other"', "Range": "bytes=0-9"})
    assert r.status_code == 200 and r.content == data, r.status_code  # (another version: all of it)
    r = await daemon.get(f"/artifacts/{aid}", reader, headers={"If-Range": f'"{aid}"', "Range": "bytes=0-9"})
    assert r.status_code == 206 and r.content == data[:10], r.status_code


async def test_an_image_input_must_name_a_stored_image_of_its_type(daemon: Daemon, strong: str):
    # Checked at submit: a bad image part in the log would fail every later model request of the
    # session (each loads its images afresh), so it never gets there.
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    png = store_artifact(daemon, tiny_png())
    magic_only = store_artifact(daemon, b"\x89PNG\r\n\x1a\n" + b"\x00" * 32)
    cut = store_artifact(daemon, tiny_png()[:-12])
    huge = store_artifact(daemon, png_sized(9000, 20))
    text = store_artifact(daemon, b"<html>not an image</html>")
    damaged = store_artifact(daemon, b"\xff\xd8\xff" + b"jpeg")
    (daemon.data_dir / "artifacts" / damaged).write_bytes(b"\xff\xd8\xff" + b"JPEG")  # no longer its hash
    limit = 5 * 1024 * 1024  # view_image's MAX_IMAGE_BYTES holds for image inputs too
    at_limit = store_artifact(daemon, png_of_size(limit))
    too_big = store_artifact(daemon, png_of_size(limit + 1))
    before = (await daemon.get("/health")).json()["lastSeq"]
    refused = [
        ({"artifactId": png, "mime": "image/jpeg"}, 422, "IMAGE_UNSUPPORTED"),  # PNG bytes
        ({"artifactId": png, "mime": "text/html"}, 422, "IMAGE_UNSUPPORTED"),
        ({"artifactId": text, "mime": "image/png"}, 422, "IMAGE_UNSUPPORTED"),
        ({"artifactId": "0" * 64, "mime": "image/png"}, 404, "ARTIFACT_NOT_FOUND"),
        # malformed ids are 400 as in GET /artifacts/{id} ("Which 4xx"; these were 404, or 422
        # with a mime that is no image)
        ({"artifactId": "../../etc/passwd", "mime": "image/png"}, 400, "INVALID_ARGUMENT"),
        ({"artifactId": "", "mime": "image/png"}, 400, "INVALID_ARGUMENT"),
        ({"artifactId": "a b", "mime": "text/html"}, 400, "INVALID_ARGUMENT"),
        ({"artifactId": "a" * 201, "mime": "image/png"}, 400, "INVALID_ARGUMENT"),
        ({"artifactId": "abc", "mime": "image/png"}, 400, "INVALID_ARGUMENT"),  # (was 404: no SHA-256)
        ({"artifactId": png.upper(), "mime": "image/png"}, 400, "INVALID_ARGUMENT"),
        ({"artifactId": damaged, "mime": "image/jpeg"}, 500, "ARTIFACT_CORRUPT"),  # was "not found"
        ({"artifactId": too_big, "mime": "image/png"}, 422, "IMAGE_UNSUPPORTED"),  # was sent, 7.5 MB
        # not a whole image (a provider refuses it, and with it every later request): these were taken
        ({"artifactId": magic_only, "mime": "image/png"}, 422, "IMAGE_UNSUPPORTED"),
        ({"artifactId": cut, "mime": "image/png"}, 422, "IMAGE_UNSUPPORTED"),
        ({"artifactId": huge, "mime": "image/png"}, 422, "IMAGE_UNSUPPORTED"),
    ]
    said = {cut: f"artifact {cut}: the image/png image is truncated (no IEND chunk)",
            huge: f"artifact {huge}: the image/png image is 9000x20 pixels; each side may be at most 8000"}
    for image, status, code in refused:
        r = await daemon.post(f"/sessions/{sid}/inputs", strong, {
            "requestId": "img", "content": [{"type": "text", "text": "look"}, {"type": "image", **image}]})
        assert r.status_code == status and error_of(r) == code, (image, r.text)
        if image["artifactId"] in said:
            assert r.json()["error"]["message"] == said[image["artifactId"]], r.text
    assert (await daemon.get("/health")).json()["lastSeq"] == before  # nothing was appended
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "many", "content": [
        {"type": "image", "artifactId": png, "mime": "image/png"}] * 21})
    assert r.status_code == 422 and "an input holds 21 images; at most 20" in r.text, r.text
    assert (await daemon.get("/health")).json()["lastSeq"] == before  # nothing was appended
    ack = await daemon.submit(strong, sid, "img", [{"type": "text", "text": "look"},
                                                   {"type": "image", "artifactId": png, "mime": "image/png"}])
    assert ack["duplicate"] is False
    await daemon.submit(strong, sid, "big", [{"type": "image", "artifactId": at_limit, "mime": "image/png"}]
                        + [{"type": "image", "artifactId": png, "mime": "image/png"}] * 19)  # both limits, exactly
    sub = next(e for e in await daemon.events(strong, sid) if e["kind"] == "input.submitted")
    assert sub["body"]["content"][1] == {"type": "image", "artifact_id": png, "mime": "image/png"}


async def test_submit_with_content_parts(daemon: Daemon, strong: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    ack = await daemon.submit(strong, sid, "parts", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    assert ack["duplicate"] is False
    events = await daemon.events(strong, sid)
    sub = next(e for e in events if e["kind"] == "input.submitted")
    assert sub["seq"] == ack["seq"] and sub["request_id"] == "parts"
    assert sub["body"]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    for bad in [[{"type": "video", "url": "x"}], [{"type": "text"}], 5]:
        r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "bad", "content": bad})
        assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", bad
    for blank in ("", " \n\t ", [{"type": "text", "text": "  "}, {"type": "text", "text": "\n"}]):
        r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "empty", "content": blank})
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", blank
        assert "must not be empty or only white space" in r.json()["error"]["message"]
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "one", "content": " x "})
    assert r.status_code == 202  # one character that is not white space is an input


async def test_queue_steer_withdraw_and_abort(daemon: Daemon, strong: str, reader: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "busy", BUSY)
    running = await daemon.wait_running_call(strong, sid)
    assert running["status"] == "running" and running["runningTaskId"]
    a2 = await daemon.submit(strong, sid, "r2", "second")
    a3 = await daemon.submit(strong, sid, "r3", "third", whenBusy="followUp")
    view = await daemon.view(reader, sid)
    assert [(q["requestId"], q["text"], q["whenBusy"], q["seq"]) for q in view["queued"]] == [
        ("r2", "second", "followUp", a2["seq"]), ("r3", "third", "followUp", a3["seq"])]
    r = await daemon.post(f"/sessions/{sid}/inputs/r3/steer", strong)
    assert r.status_code == 200 and r.json() == {"requestId": "r3", "status": "queued", "whenBusy": "steer"}
    assert {q["requestId"]: q["whenBusy"] for q in (await daemon.view(reader, sid))["queued"]} == {
        "r2": "followUp", "r3": "steer"}
    r = await daemon.post(f"/sessions/{sid}/inputs/r2/withdraw", strong)
    assert r.status_code == 200 and r.json() == {"requestId": "r2", "status": "withdrawn", "text": "second"}
    assert [q["requestId"] for q in (await daemon.view(reader, sid))["queued"]] == ["r3"]
    r = await daemon.post(f"/sessions/{sid}/inputs/r2/steer", strong)
    assert r.status_code == 409 and error_of(r) == "INPUT_NOT_QUEUED"
    r = await daemon.post(f"/sessions/{sid}/abort", strong)
    assert r.status_code == 200 and r.json() == {"aborted": True, "withdrawn": ["r3"]}
    view = await daemon.wait_idle(strong, sid)
    assert view["status"] == "idle" and view["queued"] == [] and view["runningTaskId"] is None
    kinds = [e["kind"] for e in await daemon.events(reader, sid)]
    assert kinds.count("input.withdrawn") == 2
    # an abort of an idle session is answered too: nothing stopped, nothing written (it said
    # "aborted": true; audit C, defect 5)
    r = await daemon.post(f"/sessions/{sid}/abort", strong)
    assert r.status_code == 200 and r.json() == {"aborted": False, "withdrawn": []}
    assert [e["kind"] for e in await daemon.events(reader, sid)] == kinds


async def test_steer_input_while_busy_submitted_directly(daemon: Daemon, strong: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "busy", BUSY)
    await daemon.wait_running_call(strong, sid)
    await daemon.submit(strong, sid, "s1", "look here", whenBusy="steer")
    assert [(q["requestId"], q["whenBusy"]) for q in (await daemon.view(strong, sid))["queued"]] == [("s1", "steer")]
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "x", "content": "y", "whenBusy": "later"})
    assert r.status_code == 422
    r = await daemon.post(f"/sessions/{sid}/abort", strong)
    assert r.json()["withdrawn"] == ["s1"]


# --------------------------------------------------------------------------- events


async def test_events_paging_matches_lens_log_decode(daemon: Daemon, strong: str, reader: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    other = (await daemon.session(strong, p["id"]))["id"]
    for i in range(3):
        await daemon.submit(strong, sid, f"r{i}", f"message {i}")
        await daemon.submit(strong, other, f"r{i}", f"other {i}")
    await daemon.wait_idle(strong, sid)
    await daemon.wait_idle(strong, other)
    pages, after = [], 0
    while True:
        r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": after, "limit": 4})
        assert r.status_code == 200
        page = r.json()
        assert set(page) == {"events", "nextAfter"}
        assert len(page["events"]) <= 4
        if not page["events"]:
            assert page["nextAfter"] == after
            break
        assert page["nextAfter"] == page["events"][-1]["seq"]
        pages.append(page["events"])
        after = page["nextAfter"]
    events = [e for pg in pages for e in pg]
    assert len(pages) >= 4
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))
    assert all(e["session_id"] == sid for e in events)
    assert all(DECODE_KEYS <= set(e) for e in events)
    assert events[0]["kind"] == "session.created"
    assert [e["kind"] for e in events].count("input.submitted") == 3
    out = await run_lens(daemon.root, "log", "decode", "--data", str(daemon.data_dir), "--session", sid)
    decoded = [json.loads(line) for line in out.stdout.splitlines()]
    assert decoded == events
    # default page and a page past the end
    first = (await daemon.get(f"/sessions/{sid}/events", reader)).json()
    assert first["events"] == events[:100]
    last = (await daemon.get("/health")).json()["lastSeq"]
    at_end = (await daemon.get(f"/sessions/{sid}/events", reader, params={"after": last})).json()
    assert at_end == {"events": [], "nextAfter": last}
    # past the log's last seq: no client saw such a position, and a poller following that
    # nextAfter would skip every event below it once they exist (as SSE refuses it)
    for past in (last + 1, seqs[-1] + 1000, 2**63 - 1):
        r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": past})
        assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_ARGUMENT", past
        assert f"after {past} is past the last event of this log ({last})" in r.json()["error"]["message"]
    for bad in (2**63, 10**30, "1_000", "\u0663", "+5", " 5", "1.0", ""):
        r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": bad})
        assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_ARGUMENT", bad
    r = await daemon.get(f"/sessions/{sid}/events?after=1&after=2", reader)
    assert r.status_code == 400 and "given 2 times" in r.json()["error"]["message"]
    r = await daemon.get(f"/sessions/{sid}/events?limit=", reader)
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_ARGUMENT"
    # an unknown session is 404 from any position, not an empty page
    for after in (0, 5):
        r = await daemon.get("/sessions/ses_unknown/events", reader, params={"after": after})
        assert r.status_code == 404 and r.json()["error"]["code"] == "SESSION_NOT_FOUND", after


async def test_an_events_page_that_meets_a_damaged_event_names_its_seq(daemon: Daemon, strong: str, reader: str):
    """F-LOG-6: a body that does not decode is reported with its seq, on this route as in
    ``lens log decode`` and the stream's final event (the message said only what failed, so a
    client could neither report nor step past the event)."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    events = (await daemon.get(f"/sessions/{sid}/events", reader)).json()["events"]
    bad = events[1]["seq"]
    edit_log(daemon.data_dir, "UPDATE events SET body = X'28b52ffd0000' WHERE seq = ?", (bad,))
    r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": events[0]["seq"]})
    assert r.status_code == 500 and error_of(r) == "EVENT_CORRUPT", r.text
    assert r.json()["error"]["message"].startswith(f"seq {bad}: "), r.text
    # the client can read on past it
    r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": bad})
    assert r.status_code == 200 and [e["seq"] for e in r.json()["events"]] == [e["seq"] for e in events[2:]]



async def test_an_events_page_over_a_session_event_without_session_seq_names_its_seq(
        daemon: Daemon, strong: str, reader: str):
    """F-LOG-6: a session's events are read along UNIQUE(session_id, session_seq); a row whose
    session_seq was edited to NULL lay outside it, and the page left that event out with 200."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    events = (await daemon.get(f"/sessions/{sid}/events", reader)).json()["events"]
    bad = events[1]["seq"]
    edit_log(daemon.data_dir, "UPDATE events SET session_seq = NULL WHERE seq = ?", (bad,))
    r = await daemon.get(f"/sessions/{sid}/events", reader)
    assert r.status_code == 500 and error_of(r) == "EVENT_CORRUPT", r.text
    assert r.json()["error"]["message"].startswith(f"seq {bad}: "), r.text
    assert "has no session_seq" in r.json()["error"]["message"], r.text
    r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": bad})
    assert r.status_code == 200 and [e["seq"] for e in r.json()["events"]] == [e["seq"] for e in events[2:]]


# --------------------------------------------------------------------------- tools and answers


async def test_tools_inventory(daemon: Daemon, strong: str, reader: str):
    r = await daemon.get("/tools/inventory", reader)
    assert r.status_code == 200
    tools = {t["name"]: t for t in r.json()["tools"]}
    assert {"get_system_time", "sleep_milliseconds"} <= set(tools)
    t = tools["sleep_milliseconds"]
    assert t["inputSchema"]["required"] == ["milliseconds"]
    assert {"description", "source", "mainOnly", "readOnly", "visibleToMain", "visibleToSubagents"} <= set(t)
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    r = await daemon.get("/tools/inventory", reader, params={"session": sid})
    assert r.status_code == 200 and r.json()["session"] == sid
    assert {x["name"] for x in r.json()["tools"]} == set(tools)


async def test_the_edit_file_description_says_what_a_rewrite_keeps(daemon: Daemon, reader: str):
    # (the rule is tools/files/edit.py's; the model reads only the description, so it must say it)
    r = await daemon.get("/tools/inventory", reader)
    assert r.status_code == 200, r.text
    said = {t["name"]: t for t in r.json()["tools"]}["edit_file"]["description"]
    assert "rewrite keeps the file's UTF-8 BOM, and its CRLF endings unless content has a CRLF of its own." in said, said


async def test_answer_route_guards(daemon: Daemon, strong: str, reader: str):
    """Until the Answer command is settled, only the route's 401/403/404 (and body shape) answers are checked."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    path = f"/sessions/{sid}/questions/q_nope/answer"
    assert error_of(await daemon.post(path, None, {"kind": "skip"})) == "AUTH_REQUIRED"
    assert error_of(await daemon.post(path, reader, {"kind": "skip"})) == "FORBIDDEN"
    r = await daemon.post(path, strong, {"kind": "skip"})
    assert r.status_code == 404 and error_of(r) == "QUESTION_NOT_FOUND"
    r = await daemon.post("/sessions/ses_nope/questions/q1/answer", strong, {"kind": "skip"})
    assert r.status_code == 404 and error_of(r) == "SESSION_NOT_FOUND"
    r = await daemon.post(path, strong, {"kind": "maybe"})
    assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED"


async def test_dashboard_page_is_served_with_strict_headers(daemon: Daemon):
    r = await daemon.client.get("/")
    assert r.status_code in (200, 404)
    if r.status_code == 200:
        assert r.headers["content-type"].startswith("text/html")
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"
    r = await daemon.client.get("/", headers={"Host": "evil.example"})
    assert r.status_code == 403


STATIC_PROBES = ["/index.html", "/static/index.html", "/runtime/static/index.html", "/../runtime/api.py",
                 "/%2e%2e/runtime/api.py", "/..%2fruntime%2fapi.py", "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "//etc/passwd",
                 "/static/../api.py", "/static/..%2fapi.py", "/./", "/index.html/", "/%00", "/.git/config",
                 "/config/lens.jsonc", "/favicon.ico", "/api.py", "/static/"]


async def test_only_the_dashboard_page_is_served_outside_the_api(daemon: Daemon):
    """The daemon serves one file, `/` (runtime/static/index.html): no other path, whatever its
    spelling (dot segments, encoded `..` or `/`, NUL), reaches a file, and each answer is the
    JSON 404 with nosniff, never a file's bytes."""
    page = await raw_http(daemon.port, "GET", "/")
    assert page.status == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["x-content-type-options"] == "nosniff"
    csp = page.headers["content-security-policy"]
    assert "script-src 'self' 'sha256-" in csp and "'unsafe-inline'" not in csp.split("script-src", 1)[1].split(";")[0]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp and "base-uri 'none'" in csp
    for target in STATIC_PROBES:
        r = await raw_http(daemon.port, "GET", target)
        assert r.status in (400, 404), (target, r.status, r.body[:200])
        assert r.headers["content-type"] == "application/json", (target, r.headers)
        assert r.headers["x-content-type-options"] == "nosniff"
        assert b"<html" not in r.body and b"import" not in r.body and b"root:" not in r.body, target
    head = await raw_http(daemon.port, "HEAD", "/")
    assert head.status == 200 and head.body == b"" and "content-security-policy" in head.headers


def test_a_listed_session_with_queued_inputs_is_running():
    from runtime.views import session_row_view

    def row(open_tasks: int, queued: int, questions: int = 0, quarantined: int = 0, deleted: int = 0) -> tuple:
        return ("ses_1", "prj_1", "n", "faux/echo", None, 1, 2, 3, deleted, None, None, open_tasks, queued, questions,
                quarantined)

    assert [session_row_view(row(o, q))["status"] for o, q in [(0, 0), (1, 0), (0, 1), (1, 2)]] == [
        "idle", "running", "running", "running"]
    assert session_row_view(row(1, 0, 1))["status"] == "awaiting_answer"
    assert session_row_view(row(1, 1, 1, quarantined=1))["status"] == "quarantined"
    assert session_row_view(row(1, 1, 1, quarantined=1, deleted=1))["status"] == "deleted"


def test_a_daemon_bound_to_every_address_answers_to_its_ip_addresses_not_to_names(tmp_path):
    # Bound to 0.0.0.0, a request to the machine's LAN address was 403 HOST_FORBIDDEN: the
    # daemon listened everywhere and served no one but loopback. An IP address in Host (or
    # Origin) is safe from DNS rebinding; a name is not (unless it is the bound one).
    from runtime.guard import Guard, HostForbidden, OriginForbidden
    from runtime.pairing import PairStore

    pairs = PairStore(tmp_path / "pair.json")
    for bound in ("0.0.0.0", "::"):
        g = Guard(pairs, bound, port=7420)
        for host in ("192.168.1.5:7420", "10.0.0.2", "[fe80::1]:7420", "localhost:7420"):
            g.check_host(host)
        g.check_origin("http://192.168.1.5:7420")
        for host in ("evil.example:7420", "192.168.1.5.nip.io:7420", "192.168.1.5:80"):
            with pytest.raises(HostForbidden):
                g.check_host(host)
        with pytest.raises(OriginForbidden):
            g.check_origin("http://evil.example:7420")
    g = Guard(pairs, "127.0.0.1", port=7420)  # bound to loopback: only loopback names
    with pytest.raises(HostForbidden):
        g.check_host("192.168.1.5:7420")
    with pytest.raises(OriginForbidden):
        g.check_origin("http://192.168.1.5:7420")


async def test_a_client_reusing_its_connection_after_an_early_error_is_answered(daemon_factory):
    # An answer given before the body was read (over the limit, no credential) left the rest of
    # the body on the kept-alive connection, and the client's next request there waited forever.
    d = await daemon_factory(config={"server": {"maxBodyBytes": LIMIT_BYTES}})
    token = await d.pair("c", strong=True)
    for body, headers, status in ((b"x" * (4 * LIMIT_BYTES), {"Authorization": f"Bearer {token}"}, 413),
                                  (b"x" * LIMIT_BYTES, {}, 401)):
        with trio.fail_after(10):
            r = await d.client.post(API + "/projects", content=body,
                                    headers={"Content-Type": "application/json", **headers})
            assert r.status_code == status and r.headers.get("connection") == "close", r.text
            r = await d.client.get(API + "/health")  # the same client, so the same pool
            assert r.status_code == 200


# --------------------------------------------------------------------------- connections


async def test_an_idle_kept_alive_connection_is_closed(daemon_factory, monkeypatch: pytest.MonkeyPatch):
    """The keep-alive timer was cancelled with the request's task as each response ended: an
    idle connection kept alive after a request stayed open for ever (one socket and task each)."""
    monkeypatch.setattr(daemon_module, "KEEP_ALIVE_SECONDS", 0.5)
    d = await daemon_factory()
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", d.port)
        async with stream:
            for _ in range(2):  # kept alive: a second request on it works
                await stream.send_all(f"GET {API}/health HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n\r\n".encode())
                data = b""
                while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                    data += await stream.receive_some(65536)
                assert data.startswith(b"HTTP/1.1 200")
            start = trio.current_time()
            assert await stream.receive_some(65536) == b""  # then closed by the server
            assert trio.current_time() - start < 3.0


async def test_an_http2_client_granting_no_window_does_not_hold_shutdown(daemon_factory):
    """The last body message of a response is sent shielded so kept-alive HTTP/1.1 connections
    are recycled; over HTTP/2 that send waits for the client's flow-control window, and a client
    granting none (HTTP/2 without TLS needs no credential for the dashboard) held the daemon's
    shutdown for ever. Only HTTP/1.x is shielded, and never for long."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings

    d = await daemon_factory()
    stream = await trio.open_tcp_stream("127.0.0.1", d.port)
    async with stream:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1})
        await stream.send_all(conn.data_to_send())
        conn.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "http"),
                              (":authority", f"127.0.0.1:{d.port}")], end_stream=True)
        await stream.send_all(conn.data_to_send())
        with trio.fail_after(LIMIT):
            while True:  # the response has begun: its body waits for a window never granted
                events = conn.receive_data(await stream.receive_some(65536))
                if out := conn.data_to_send():
                    await stream.send_all(out)
                if any(isinstance(ev, h2.events.DataReceived) for ev in events):
                    break
        start = trio.current_time()
        d.stop.set()
        with trio.fail_after(LIMIT):
            await d.done.wait()
        assert trio.current_time() - start < 7.0  # the server's grace period (5 s) at most


async def big_session(d: Daemon) -> tuple[str, str]:
    """A strong credential and a session whose events page is ~7 MB: more than the socket
    buffers between a client that reads nothing and the server hold."""
    token = await d.pair("big", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    for i in range(8):
        await d.submit(token, sid, f"r{i}", "x" * 900_000)
    await d.wait_idle(token, sid)
    return token, sid


async def stalled_socket(port: int) -> trio.SocketStream:
    """A connection whose receive buffer is tiny and is never read."""
    sock = trio.socket.socket()
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def stop_within_grace(d: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    start = trio.current_time()
    with caplog.at_level("WARNING", logger="lens.daemon"):
        d.stop.set()
        with trio.fail_after(LIMIT):
            await d.done.wait()
    assert trio.current_time() - start < 7.0  # the server's grace period (5 s), then reset
    assert "1 request(s) still in progress after 5 s of shutdown; 1 connection(s) reset" in caplog.text


async def test_an_http1_client_that_stops_reading_a_large_response_does_not_hold_shutdown(daemon_factory, caplog):
    """Hypercorn writes response bytes shielded: a client that stopped reading a large
    ordinary response (an events page of big events) held that write, and the daemon's
    shutdown, for as long as it lived. After the grace period its connection is reset."""
    d = await daemon_factory()
    token, sid = await big_session(d)
    stream = await stalled_socket(d.port)
    async with stream:
        await stream.send_all(f"GET {API}/sessions/{sid}/events?limit=1000 HTTP/1.1\r\n"
                              f"Host: 127.0.0.1:{d.port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        with trio.fail_after(LIMIT):
            head = await stream.receive_some(200)
        assert head.startswith(b"HTTP/1.1 200")
        await stop_within_grace(d, caplog)


async def test_an_http2_client_that_stops_reading_a_large_response_does_not_hold_shutdown(daemon_factory, caplog):
    """The same over HTTP/2 with a window large enough for the whole body: the server's
    writes then block on the TCP connection itself, not on flow control."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings

    d = await daemon_factory()
    token, sid = await big_session(d)
    stream = await stalled_socket(d.port)
    async with stream:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
        conn.increment_flow_control_window(2**31 - 1 - 65535)
        await stream.send_all(conn.data_to_send())
        conn.send_headers(1, [(":method", "GET"), (":path", f"{API}/sessions/{sid}/events?limit=1000"),
                              (":scheme", "http"), (":authority", f"127.0.0.1:{d.port}"),
                              ("authorization", f"Bearer {token}")], end_stream=True)
        await stream.send_all(conn.data_to_send())
        with trio.fail_after(LIMIT):
            while True:  # the response has begun; from here nothing more is read
                events = conn.receive_data(await stream.receive_some(4096))
                if out := conn.data_to_send():
                    await stream.send_all(out)
                if any(isinstance(ev, h2.events.DataReceived) for ev in events):
                    break
        await stop_within_grace(d, caplog)


@pytest.mark.parametrize("version, shielded", [("1.1", True), ("1.0", True), ("2", True), ("3", False)])
async def test_the_last_body_send_is_shielded_but_never_for_ever(autojump_clock, version: str, shielded: bool):
    """The wrapper around the app, driven as the server drives it: the last body message of an
    HTTP/1.x or HTTP/2 response (its connection's keep-alive timer starts in that send) outlives
    the request's cancellation for at most FINISH_SECONDS, even over HTTP/2 where that send
    waits for the client's window; anything else is not shielded."""
    sent: list[str] = []

    async def server_send(message: dict) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            await trio.sleep_forever()  # a client that takes nothing
        sent.append(message["type"])

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": False})

    wrapped = api._finish_responses(app)
    start = trio.current_time()
    with trio.CancelScope() as outer:
        outer.cancel()  # the request's task is being cancelled as its handler returns
        await wrapped({"type": "http", "http_version": version}, None, server_send)
    took = trio.current_time() - start
    if shielded:
        assert took == pytest.approx(api.FINISH_SECONDS)  # held, then given up
    else:
        assert took == 0
    assert sent == ["http.response.start"]  # (the body never went: the client took nothing)


async def test_an_artifact_that_is_not_a_regular_file_is_refused_at_once(daemon: Daemon, reader: str) -> None:
    # A directory in an artifact's place answered 500 INTERNAL; a FIFO held the request (and the
    # daemon's stop) for ever; a link to /dev/zero was read without end.
    root = daemon.data_dir / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    made = {}
    for kind, make in (("a directory", lambda p: p.mkdir()), ("a FIFO", os.mkfifo),
                       ("a character device", lambda p: p.symlink_to("/dev/zero"))):
        aid = hashlib.sha256(kind.encode()).hexdigest()
        make(root / aid)
        made[kind] = aid
    for kind, aid in made.items():
        with trio.fail_after(10):
            r = await daemon.get(f"/artifacts/{aid}", reader)
        assert r.status_code == 500 and error_of(r) == "ARTIFACT_CORRUPT", (kind, r.text)
        assert f"{kind}, not a regular file" in r.json()["error"]["message"], (kind, r.text)


async def test_a_position_committed_but_not_yet_counted_by_the_writer_is_not_refused(daemon: Daemon, strong: str,
                                                                                   reader: str):
    # The writer counts a commit (last_seq) just after SQLite returns from it, and a reader may
    # see the commit first: a client given that event's seq as nextAfter used it at once and got
    # 400 "past the last event". A row committed behind the store's back opens the same window.
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.wait_idle(strong, sid)
    last = (await daemon.get("/health")).json()["lastSeq"]
    edit_log(daemon.data_dir, "INSERT INTO events SELECT seq + 1, ts, project_id, session_id, session_seq + 1, agent_id, "
                              "task_id, kind, NULL, dict_id, raw_size, body FROM events WHERE seq = ?", (last,))
    page = (await daemon.get(f"/sessions/{sid}/events", reader, params={"after": last})).json()
    assert [e["seq"] for e in page["events"]] == [last + 1] and page["nextAfter"] == last + 1
    r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": last + 1})
    assert r.status_code == 200 and r.json() == {"events": [], "nextAfter": last + 1}, r.text
    r = await daemon.get(f"/sessions/{sid}/events", reader, params={"after": last + 2})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_ARGUMENT"
    async with daemon.sse(reader, params={"session": sid}, last_event_id=last + 1):
        pass  # (a stream resuming there is accepted as well)


async def test_a_long_name_in_a_body_is_quoted_short(daemon: Daemon, strong: str) -> None:
    """msgspec's reason quotes the client's unknown field, a key of its path or an enum value:
    a field of 5,000 characters was echoed whole (a message of 5,065 characters, found by
    tests/daemon/test_http_fuzz.py). Each quoted name is cut to 80 characters."""
    long = "k" * 5000
    for method, path, body in [
        ("POST", "/projects", {long: 1}),
        ("POST", "/sessions", {"projectId": "p", long: 1}),
        ("PUT", "/config/files/lens.jsonc", {"text": json.dumps({"providers": [{"id": "a", "protocol": long}]})}),
        ("PUT", "/config/files/pair.json", {"text": json.dumps({long: 1})}),
    ]:
        r = await daemon.request(method, path, strong, json_body=body)
        assert r.status_code in (400, 422) and error_of(r) in ("VALIDATION_FAILED", "CONFIG_INVALID"), r.text[:300]
        message = r.json()["error"]["message"]
        assert len(message) < 300 and ("`" + "k" * 80 + "…`" in message or "'" + "k" * 80 + "…'" in message), message[:300]
