"""README.md, with the pages it sends a first user to for the details (docs/http-api.md, the HTTP
API's reference, and docs/dashboard.md, the dashboard's behaviour), read as a first user reads them,
word by word, against the code and the running daemon.

What they show is taken from their own text wherever that is robust (the route list of the HTTP
reference, the error codes it names and the statuses it gives them, the `lens` command lines
and flags, the answer shapes it prints, the limits it states), so that a README and a code that
drift apart fail here. The live checks run the real daemon on a loopback port 0 (built-in
defaults, the ``faux`` model, a real executor child) and the real ``lens`` CLI.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import msgspec.inspect
import pytest

from projections.history import MAX_LIMIT, MAX_QUERY_BYTES, MAX_QUERY_TERMS
from runtime.bus import BUFFER_BYTES
from runtime.config import Config
from runtime.head_limit import HEAD_LIMIT, UNFINISHED_HEAD_BYTES
from runtime.config_api import ConfigWriteBody
from runtime.history_api import HistorySearchBody
from runtime.http_parts import RETRY_AFTER_CODES, RETRY_AFTER_SECONDS, STATUS
from runtime.list_pages import LIST_LIMIT_MAX
from runtime.projection_service import STOP_BUSY_WAIT_SECONDS
from runtime.sessions_api import MAX_EVENTS_PAGE, ForkBody, InputBody, SessionBody, SessionPatchBody
from runtime.views import VIEW_AGENTS_MAX, VIEW_ITEMS_MAX, VIEW_QUEUED_MAX
from tests.contract.error_codes import ROOT, documented_codes
from tests.daemon.conftest import API, BUSY, Daemon, app_routes, error_of, run_lens

from .docs_pages import assert_taken, lens_help, shell_lines

README = (ROOT / "README.md").read_text(encoding="utf-8")
# The HTTP API's full reference (the README's "HTTP API" section is its overview and points there).
HTTP_API = (ROOT / "docs" / "http-api.md").read_text(encoding="utf-8")
# The dashboard's behaviour (the README's Quick start points there).
DASHBOARD = (ROOT / "docs" / "dashboard.md").read_text(encoding="utf-8")
# The README's words wherever they now live: the README and the two pages its details moved to.
README_PAGES = "\n".join((README, HTTP_API, DASHBOARD))
ERRORS_DOC = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
PAGE = (ROOT / "runtime" / "static" / "index.html").read_text(encoding="utf-8")

_METHODS = "GET|POST|PUT|PATCH|DELETE"
_CODE = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"
# Upper-case names in backquotes that are no Lens error code: environment variables, and the
# HTTP/2 names the README quotes (a stream reset's code, a SETTINGS parameter).
NOT_CODES = {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "EXA_API_KEY",
             "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "SSH_AUTH_SOCK", "DATABASE_URL", "LENS_TEST_GC_EACH",
             "PROTOCOL_ERROR", "SETTINGS_MAX_HEADER_LIST_SIZE"}


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _one(pattern: str, text: str = README) -> re.Match[str]:
    """The single place ``pattern`` matches the README (a sentence rewritten fails here, to be
    pointed again at the new words)."""
    found = list(re.finditer(pattern, text))
    assert len(found) == 1, (pattern, [m.group(0) for m in found])
    return found[0]


def _shape(route_words: str) -> tuple[int, dict[str, str | None]]:
    """The status and the answer's fields the HTTP reference prints right after ``route_words``:
    ``(202 `{requestId, seq, duplicate}``` -> 202, {requestId: None, ...}; ``status: "queued"``
    gives the literal value."""
    m = _one(re.escape(route_words) + r"[^`]*?`?\(?(\d{3}) `\{([^}]*)\}`", HTTP_API)
    fields: dict[str, str | None] = {}
    for part in m.group(2).split(","):
        name, _, value = part.partition(":")
        fields[name.strip()] = value.strip().strip('"') or None
    return int(m.group(1)), fields


def _assert_shape(answer: dict, fields: dict[str, str | None], where: str) -> None:
    assert sorted(answer) == sorted(fields), (where, sorted(answer), sorted(fields))
    for name, value in fields.items():
        if value is not None:
            assert answer[name] == value, (where, name, answer)


# --------------------------------------------------------------------------- the route list


def test_the_routes_the_readme_lists_are_the_routes_the_daemon_serves():
    """Every ``METHOD /path`` of the HTTP reference (docs/http-api.md) is a route of the API, and
    every route of the API is listed there (placeholders compared by place, not name)."""
    listed = set()
    for m in re.finditer(rf"`((?:{_METHODS})(?:\|(?:{_METHODS}))*) (/[^` ?]*)", HTTP_API):
        listed |= {(method, m.group(2)) for method in m.group(1).split("|")}
    served = {(method, rule[len(API):]) for method, rule in app_routes() if rule.startswith(API)}
    norm = lambda routes: {(m, re.sub(r"\{[^}]*\}|<[^>]*>", "{}", p)) for m, p in routes}  # noqa: E731
    assert len(listed) > 40  # (the list was read: a broken pattern would find none)
    assert not norm(listed) - norm(served), f"listed but not served: {sorted(norm(listed) - norm(served))}"
    assert not norm(served) - norm(listed), f"served but not listed: {sorted(norm(served) - norm(listed))}"


# --------------------------------------------------------------------------- error codes


def test_every_code_the_readme_names_is_documented_with_the_status_the_readme_gives():
    documented = documented_codes()
    rows = dict(re.findall(rf"^\| `({_CODE})` \| ([0-9]{{3}}|–) \|", ERRORS_DOC, re.M))
    named = set(re.findall(rf"`(?:lens(?: [a-z]+)*: )?({_CODE})", README_PAGES)) - NOT_CODES
    assert len(named) > 30
    assert not [c for c in sorted(named) if c not in documented], "codes the README names that docs/errors.md has not"
    given = re.findall(rf"\b([1-5][0-9]{{2}}) `({_CODE})`", README_PAGES)
    assert len(given) > 15
    wrong = [(status, code, rows.get(code), STATUS.get(code)) for status, code in given
             if rows.get(code) != status or STATUS.get(code, int(status)) != int(status)]
    assert not wrong, "README status / docs/errors.md status / the API's status differ"


def test_the_503s_the_readme_says_a_retry_helps_are_those_that_carry_retry_after():
    m = _one(r"A 503 a retry can help \(([^)]*)\)\s+carries `Retry-After: (\d+)`", HTTP_API)
    assert set(re.findall(rf"`({_CODE})`", m.group(1))) == set(RETRY_AFTER_CODES)
    assert int(m.group(2)) == RETRY_AFTER_SECONDS
    assert all(STATUS[c] == 503 for c in RETRY_AFTER_CODES)


# --------------------------------------------------------------------------- the command line


def _readme_command_lines() -> list[list[str]]:
    """Every `lens …` command line of the README and the pages its details moved to (code blocks
    and inline), as argument lists without the ``.venv/bin/`` and the ``[ ]`` of optional parts."""
    out = []
    for line in shell_lines(README_PAGES, r"`((?:\.venv/bin/)?lens [^`]*)`"):
        for part in line.split("&&"):
            part = part.strip()
            m = re.match(r"(?:\.venv/bin/)?lens ((?:[a-z]+ ?)+)(.*)$", part)
            if m and ": " not in part:
                out.append([*m.group(1).split(), *re.findall(r"--[a-z][a-z-]*", m.group(2))])
    return out


def test_every_lens_command_line_of_the_readme_is_one_lens_takes():
    """Each command the README shows exists, and each flag it shows is in that command's help."""
    commands = _readme_command_lines()
    assert len(commands) >= 8, commands
    assert_taken(commands)


def test_the_data_and_config_defaults_the_readme_gives_are_the_cli_s():
    """``--data``'s default (the config's ``dataDir``, else ``.lens``) and ``--config``'s
    (``config/lens.jsonc`` when present), and ``lens serve``'s port and address."""
    _one(r"the `dataDir` of `--config\s+PATH` \(default `config/lens\.jsonc` when present\), else `\.lens`")
    log = lens_help(["log", "decode"])
    assert "the config's dataDir, else\n" in log or "the config's dataDir, else .lens" in log, log
    assert re.search(r"\.lens\)", log) and "config/lens.jsonc if present" in log.replace("\n" + " " * 19, " "), log
    serve = lens_help(["serve"])
    port = _number(_one(r"listens on http://127\.0\.0\.1:(\d+)").group(1))
    assert port == Config().server.port and f"(default {port};" in serve, serve
    assert Config().server.host == "127.0.0.1" and "(default 127.0.0.1)" in serve


async def test_an_option_given_twice_to_lens_serve_is_answered_as_the_readme_prints_it(tmp_path: Path):
    """``lens serve`` with an option twice prints the usage and a ``lens serve: USAGE_ERROR: …``
    line (argparse's, as for ``lens log decode``), exits 2 and makes nothing on disk; the README
    said it answered like every other start that cannot go on, ``lens: CODE: message``."""
    m = _one(r"an option given twice \(([^)]*)\)")
    assert "`lens serve: USAGE_ERROR: …`" in m.group(1), m.group(0)
    out = await run_lens(tmp_path, "serve", "--port", "0", "--port", "0", check=False)
    assert out.returncode == 2, out
    assert out.stderr.startswith("usage: lens serve "), out.stderr
    assert out.stderr.splitlines()[-1].startswith("lens serve: USAGE_ERROR: argument --port"), out.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [("serve", "--port", "x"), ("pair", "approve"), ("pair", "list", "--x"),
                                  ("log", "decode", "--from"), ("executor", "serve")], ids=" ".join)
async def test_a_command_line_lens_cannot_read_is_answered_as_docs_errors_says(tmp_path: Path, argv: tuple[str, ...]):
    """docs/errors.md gave every CLI refusal as ``lens: CODE: message``; a command line argparse
    refuses prints the command's usage, then ``lens <command>: USAGE_ERROR: message`` (exit 2)."""
    bullet = _one(r"- \*\*CLI\*\*: [^\n]*(?:\n  [^\n]*)*", ERRORS_DOC).group(0)
    assert "its usage, then `lens <command>: USAGE_ERROR: message`" in " ".join(bullet.split()), bullet
    words = list(argv[:next((i for i, w in enumerate(argv) if w.startswith("-")), len(argv))])
    out = await run_lens(tmp_path, *argv, check=False)
    assert out.returncode == 2, out
    assert out.stderr.startswith(f"usage: lens {' '.join(words)} "), out.stderr
    assert out.stderr.splitlines()[-1].startswith(f"lens {' '.join(words)}: USAGE_ERROR: "), out.stderr


# --------------------------------------------------------------------------- the numbers


def test_the_numbers_the_readme_gives_are_the_code_s():
    assert _number(_one(r"`server\.heartbeatSeconds` \((\d+) by default\)", HTTP_API).group(1)) == Config().server.heartbeat_seconds
    assert _one(r"\(or (\d+) MiB\) behind", HTTP_API).group(1) == str(BUFFER_BYTES // 2**20)
    assert _number(_one(r"A request head is at most\s+([\d,]+) bytes", HTTP_API).group(1)) == HEAD_LIMIT
    assert _number(_one(r"more than ([\d,]+) bytes arrive without its end", HTTP_API).group(1)) == UNFINISHED_HEAD_BYTES
    m = _one(r"at most `limit` events \(1–([\d,]+), default (\d+)\)", HTTP_API)
    assert _number(m.group(1)) == MAX_EVENTS_PAGE
    m = _one(r"`POST /history/search` takes a `limit` of 1–(\d+)\s+\(default (\d+)\) and a `query` of at most (\d+)"
             r" bytes of UTF-8 and (\d+) distinct terms", HTTP_API)
    assert [int(m.group(i)) for i in (1, 3, 4)] == [MAX_LIMIT, MAX_QUERY_BYTES, MAX_QUERY_TERMS]
    assert HistorySearchBody(project_id="p", query="q").limit == int(m.group(2))
    m = _one(r"at most `limit` rows \((\d+)–(\d+)\)", HTTP_API)
    assert int(m.group(2)) == LIST_LIMIT_MAX
    assert _number(_one(r"the latest (\d+) unless asked otherwise, `itemsLimit` 1–(\d+)", HTTP_API).group(1)) == VIEW_ITEMS_MAX
    assert _number(_one(r"its `agents` are at most (\d+)", HTTP_API).group(1)) == VIEW_AGENTS_MAX
    assert _number(_one(r"`agentsLimit` \(1–(\d+)\)", HTTP_API).group(1)) == VIEW_AGENTS_MAX
    assert _number(_one(r"its `queued` inputs are at most (\d+)", HTTP_API).group(1)) == VIEW_QUEUED_MAX
    assert _number(_one(r"`queuedLimit` \(1–(\d+)\)", HTTP_API).group(1)) == VIEW_QUEUED_MAX
    assert float(_one(r"the stop waits at most (\d+) s for it").group(1)) == STOP_BUSY_WAIT_SECONDS
    assert re.search(r"\bhc\.graceful_timeout = " + _one(r"requests in progress get up to (\d+) s").group(1) + r"\.0\b",
                     (ROOT / "runtime" / "daemon.py").read_text())


def test_the_dashboard_numbers_the_readme_gives_are_the_page_s():
    """(Read from docs/dashboard.md, where the README sends a user for the dashboard's behaviour.)"""
    def said(pattern: str) -> str:
        return _one(pattern, DASHBOARD).group(1)

    n = _one(r"The project list shows the newest (\d+) projects and a\s+project's session list its newest (\d+)", DASHBOARD)
    assert f"PROJECTS_PAGE = {n.group(1)}" in PAGE and f"SESSIONS_PAGE = {n.group(2)}" in PAGE
    assert "WINDOW = " + said(r"the latest (\d+)\s+items;") in PAGE
    assert "ARTIFACT_TEXT_SHOWN = " + said(r"its first (\d+) KiB, read as a range") + " * 1024" in PAGE
    assert "LIST_POLL_MS = " + said(r"the (\d+) s poll") + "000" in PAGE
    one, two = said(r"Up to (\d+) px wide"), said(r"up to (\d+) px the side panel")
    assert f"@media (max-width: {one}px)" in PAGE and f"(width > {one}px) and (width <= {two}px)" in PAGE
    assert said(r"at least (\d+) % of the screen") + "vh" in PAGE
    small, touch = _one(r"at\s+least (\d+)×\1 px, and (\d+)×\2 px", DASHBOARD).groups()
    assert f"min-width: {small}px" in PAGE and f"min-height: {touch}px" in PAGE


# --------------------------------------------------------------------------- the quick start, live


async def test_the_quick_start_pairing_runs_as_written(daemon: Daemon):
    """The pairing request and the ``lens pair`` lines of the Quick start, run literally: the
    request's body as printed, the credential alone on the last line, a second revoke said so
    (exit 0), an approve of a revoked client issuing a new credential without a new request."""
    body = _one(r"Pair a client: `POST /api/v1/pair/requests (\{[^`]*\})`").group(1)
    r = await daemon.client.post(API + "/pair/requests", content=body.encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 202 and r.json() == {"clientId": "me", "status": "pending"}, r.text
    approve = _one(r"`\.venv/bin/lens (pair approve --client me --strong-trust)`").group(1).split()
    token = (await run_lens(daemon.root, *approve)).stdout.splitlines()[-1]
    await daemon.wait_accepted(token)
    assert (await daemon.get("/whoami", token)).json()["trust"] == "strong"
    revoke = _one(r"`lens (pair revoke --client me)`").group(1).split()
    await run_lens(daemon.root, *revoke)
    await daemon.wait_refused(token)
    again = await run_lens(daemon.root, *revoke)
    assert "revoked already" in again.stdout + again.stderr, again
    fresh = (await run_lens(daemon.root, *approve)).stdout.splitlines()[-1]
    assert fresh != token
    await daemon.wait_accepted(fresh)


async def test_the_answer_shapes_the_readme_prints_are_the_daemon_s(daemon: Daemon, strong: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "busy", BUSY)
    await daemon.wait_running_call(strong, sid)

    status, fields = _shape("`POST /sessions/{id}/inputs {requestId, content, whenBusy?}` (")
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "q1", "content": "one"})
    assert r.status_code == status
    _assert_shape(r.json(), fields, "inputs")
    await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "q2", "content": "two"})

    status, fields = _shape("`POST /sessions/{id}/inputs/{requestId}/steer` (")
    r = await daemon.post(f"/sessions/{sid}/inputs/q1/steer", strong)
    assert r.status_code == status
    _assert_shape(r.json(), fields, "steer")

    status, fields = _shape("`POST /sessions/{id}/inputs/{requestId}/withdraw` (")
    r = await daemon.post(f"/sessions/{sid}/inputs/q2/withdraw", strong)
    assert r.status_code == status and r.json()["status"] == "withdrawn" and r.json()["text"] == "two", r.text
    _assert_shape(r.json(), fields, "withdraw")
    r = await daemon.post(f"/sessions/{sid}/inputs/busy/withdraw", strong)
    assert r.json()["status"] == "placed" and r.json()["text"] is None, r.text

    status, fields = _shape("`POST /sessions/{id}/abort` (")
    r = await daemon.post(f"/sessions/{sid}/abort", strong)
    assert r.status_code == status and r.json() == {"aborted": True, "withdrawn": ["q1"]}, r.text
    _assert_shape(r.json(), fields, "abort")

    fields = _one(r"`decode` prints one JSON object per event: `([^`]*)`").group(1).replace("\n", " ").split(", ")
    r = await daemon.get(f"/sessions/{sid}/events", strong, params={"limit": 1000})
    assert r.status_code == 200 and r.json()["events"], r.text
    assert all(list(e) == fields for e in r.json()["events"]), (fields, r.json()["events"][0])

    m = _one(r"`PUT /config/files/\{name\}` answers `\{([^}]*)\}`", HTTP_API)
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{"nosuchkey": 1}'})
    assert r.status_code == 200, r.text
    _assert_shape(r.json(), {k.strip(): None for k in m.group(1).split(",")}, "PUT /config/files")
    assert r.json()["unknownKeys"] == ["nosuchkey"]


# --------------------------------------------------------------------------- the limits, live


async def test_the_id_and_name_limits_the_readme_gives_hold_at_and_one_past_them(daemon: Daemon, strong: str):
    """Ids 1–N characters (400 ``INVALID_ARGUMENT``), a pairing ``clientId`` 1–N (400
    ``PAIRING_INVALID``), names 1–N (422 ``VALIDATION_FAILED``), a pairing name at most N (400
    ``PAIRING_INVALID``, empty allowed), with the numbers and codes read from the HTTP reference."""
    m = _one(r"Ids in paths, queries and bodies\s+\(`requestId` too\) are 1–(\d+) characters[^(]*\(a pairing\s+`clientId`"
             r" 1–(\d+) of them without `:`[^)]*\) \((\d{3}) `(" + _CODE + r")`\); project and\s+session names are 1–(\d+)"
             r" characters", HTTP_API)
    ids, client_ids, id_status, id_code, names = m.groups()
    ids, client_ids, names = int(ids), int(client_ids), int(names)
    m = _one(r"\((\d{3}) `(" + _CODE + r")`;\s+a pairing `name` ([^,]*), at most (\d+) characters, (\d{3}) `(" + _CODE + r")`\)", HTTP_API)
    name_status, name_code, pairing_note, pairing_names, pairing_status, pairing_code = m.groups()
    assert "may be empty or left out" in pairing_note, m.group(0)

    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    for size, status in ((ids, 202), (ids + 1, int(id_status))):
        r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "r" * size, "content": "x"})
        assert r.status_code == status, (size, r.text)
    assert error_of(r) == id_code and "requestId" in r.json()["error"]["message"]
    for size, status in ((client_ids, 202), (client_ids + 1, int(pairing_status))):
        r = await daemon.post("/pair/requests", None, {"clientId": "c" * size, "name": "x"})
        assert r.status_code == status, (size, r.text)
    assert error_of(r) == pairing_code
    r = await daemon.post("/pair/requests", None, {"clientId": "a:b", "name": "x"})
    assert (r.status_code, error_of(r)) == (int(pairing_status), pairing_code), r.text
    for name, status in (("", 202), ("n" * int(pairing_names), 202), ("n" * (int(pairing_names) + 1), int(pairing_status))):
        r = await daemon.post("/pair/requests", None, {"clientId": "named", "name": name})
        assert r.status_code == status, (len(name), r.text)
    assert error_of(r) == pairing_code
    r = await daemon.post("/pair/requests", None, {"clientId": "unnamed"})
    assert r.status_code == 202, r.text
    for size, status in ((names, 200), (names + 1, int(name_status))):
        r = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"name": "s" * size})
        assert r.status_code == status, (size, r.text)
    assert error_of(r) == name_code


async def test_the_body_fields_the_readme_lists_are_taken_by_their_routes(daemon: Daemon, strong: str):
    """Each field of ``PATCH /sessions/{id} {…}`` as the HTTP reference spells it is taken (null: back to
    its default), and a field it does not list is 422 ``VALIDATION_FAILED`` naming it; likewise
    ``…/context/snip {…}`` and ``…/fork {…}``."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    item = (await daemon.wait_idle(strong, sid))["items"][0]["id"]

    def listed(route: str) -> list[str]:
        found = re.search(re.escape(f"`{route} {{") + r"([^}]*)\}`", HTTP_API)  # (the first: the route list's)
        assert found, route
        body = found.group(1)
        return [f.strip().rstrip("?") for f in body.split(",")]

    patch = listed("PATCH /sessions/{id}")
    assert "toolPolicy" in patch and "model" in patch, patch
    r = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body=dict.fromkeys(patch))
    assert r.status_code == 200, r.text
    r = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"modelName": None})
    assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED" and "modelName" in r.text, r.text

    snip = listed("POST /sessions/{id}/context/snip")
    assert set(snip) == {"itemIds", "olderImages", "keepImages"}, snip
    for body in ({"itemIds": [item]}, {"olderImages": True}, {"olderImages": True, "keepImages": 1}):
        r = await daemon.post(f"/sessions/{sid}/context/snip", strong, body)
        assert r.status_code == 200, (body, r.text)

    fork = listed("POST /sessions/{id}/fork")
    assert fork == ["seq", "name"], fork
    first = (await daemon.events(strong, sid))[0]["seq"]
    r = await daemon.post(f"/sessions/{sid}/fork", strong, {"seq": first, "name": "copy"})
    assert r.status_code == 201 and r.json()["name"] == "copy" and r.json()["id"] != sid, r.text


def test_the_request_bodies_the_readme_shows_are_the_routes_own():
    """Each ``ROUTE {field, optional?}`` the HTTP reference (docs/http-api.md) shows is the route's body as
    the daemon reads it: the same fields, by their JSON names, those that may be left out marked
    ``?``, in the order of the body's type. The inputs, a new session, a config write and a
    history search were shown without their bodies, which a new user had to find in the spec."""
    bodies = {"POST /sessions/{id}/inputs": InputBody, "POST /sessions": SessionBody,
              "POST /history/search": HistorySearchBody, "PATCH /sessions/{id}": SessionPatchBody,
              "POST /sessions/{id}/fork": ForkBody}
    for route, kind in bodies.items():
        shown = re.search(re.escape(f"`{route} {{") + r"([^}]*)\}`", HTTP_API)
        assert shown, route
        fields = [f.encode_name if f.required else f"{f.encode_name}?" for f in msgspec.inspect.type_info(kind).fields]
        assert [f.strip() for f in shown.group(1).split(",")] == fields, (route, shown.group(1), fields)
    shown = _one(r"\(`PUT` takes `\{([^}]*)\}`", HTTP_API)
    fields = [f.encode_name if f.required else f"{f.encode_name}?" for f in msgspec.inspect.type_info(ConfigWriteBody).fields]
    assert [f.strip() for f in shown.group(1).split(",")] == fields
