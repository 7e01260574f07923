"""SPEC section 9 from a fresh install, as an acceptance suite's author would drive it.

Every request goes to a real daemon on a loopback port 0 (built-in defaults, the ``faux`` model,
a real executor child) over real HTTP. These tests pin what the audit "Acceptance pass: the HTTP
and SSE contract from a fresh install" (docs/decisions.md) found answered against the spec, the
README or the daemon's own words, and changed.
"""

from __future__ import annotations

from tests.daemon.conftest import Daemon, error_of
from tests.daemon.test_routes import store_artifact


async def test_a_revalidated_artifact_is_answered_without_a_type_or_length_of_its_own(daemon: Daemon, reader: str):
    """A 304 stands for the artifact a client holds: it said ``Content-Type: text/html`` and
    ``Content-Length: 0`` (the empty body's), which a cache updating its stored answer from the
    304 (RFC 9111 4.3.4) takes for the PNG's own type and length; RFC 9110 8.6 forbids a length
    other than the one a 200 would send. It now carries neither, only its ETag (GET and HEAD)."""
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 61
    aid = store_artifact(daemon, png)
    whole = await daemon.get(f"/artifacts/{aid}", reader)
    assert whole.status_code == 200 and whole.headers["content-type"] == "image/png", whole.headers
    for method in ("GET", "HEAD"):
        for tag in (f'"{aid}"', f'W/"{aid}"', "*"):
            r = await daemon.request(method, f"/artifacts/{aid}", reader, headers={"If-None-Match": tag})
            assert r.status_code == 304 and r.content == b"", (method, tag, r.status_code)
            assert r.headers["etag"] == f'"{aid}"', r.headers
            assert "content-type" not in r.headers, (method, tag, r.headers)
            assert r.headers.get("content-length") in (None, str(len(png))), (method, tag, r.headers)


async def test_a_name_refuses_c1_controls_and_bidirectional_overrides(daemon: Daemon, strong: str):
    """Project and session names are "without control characters" (the error says so), but
    only C0 and DEL were refused: a C1 control (U+0085, a line break to ``str.splitlines``) or
    a right-to-left override (shown by the dashboard and reordering what follows) was stored.
    They are refused as a pairing name's are (422 ``VALIDATION_FAILED``), nothing recorded."""
    ws = daemon.root / "ws"
    ws.mkdir()
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    before = (await daemon.get("/health")).json()["lastSeq"]
    for name in ("a\u0085b", "\u0080", "x\u009f", "a\u202eb", "\u2066x\u2069", "a\x1bb", "a\x7fb", "a\u2028b", "\u2029"):
        for method, path, body in [("POST", "/projects", {"name": name, "workspace": str(ws)}),
                                   ("POST", "/sessions", {"projectId": p["id"], "name": name}),
                                   ("PATCH", f"/sessions/{sid}", {"name": name})]:
            r = await daemon.request(method, path, strong, json_body=body)
            assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", (name, path, r.text)
            assert "control characters" in r.json()["error"]["message"], r.text
    assert (await daemon.get("/health")).json()["lastSeq"] == before
    for name in ("caf\u00e9 \U0001f600", "\u05e9\u05dc\u05d5\u05dd", "a\u00a0b"):  # (ordinary letters: kept)
        r = await daemon.post("/projects", strong, {"name": name, "workspace": str(ws)})
        assert r.status_code == 201 and r.json()["name"] == name, r.text


async def test_a_name_refuses_invisible_format_characters_naming_the_first(daemon: Daemon, strong: str):
    """Zero-width characters, the byte order mark, bidirectional controls and the other format
    characters (Unicode's Cf) were stored in names: two names that look the same could differ.
    They are refused on the three name routes with the name rule's error, which names the first
    as U+XXXX; nothing is recorded. Ordinary letters of any script stay accepted."""
    ws = daemon.root / "ws"
    ws.mkdir()
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    before = (await daemon.get("/health")).json()["lastSeq"]
    refused = [("​", "U+200B"), ("​‌‍⁠", "U+200B"), ("ab‍cd", "U+200D"),
               ("﻿name", "U+FEFF"), ("name⁠", "U+2060"), ("a‎b", "U+200E"), ("a؜b", "U+061C"),
               ("⁧x⁩", "U+2067"), ("soft­hyphen", "U+00AD"), ("flag󠁧", "U+E0067"),
               ("café​", "U+200B"), ("a‪b", "U+202A"), ("\U0001f469\u200d", "U+200D")]
    for name, named in refused:
        for method, path, body in [("POST", "/projects", {"name": name, "workspace": str(ws)}),
                                   ("POST", "/sessions", {"projectId": p["id"], "name": name}),
                                   ("PATCH", f"/sessions/{sid}", {"name": name})]:
            r = await daemon.request(method, path, strong, json_body=body)
            assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", (name, path, r.text)
            message = r.json()["error"]["message"]
            assert message.startswith("name must be 1 to 200 characters, not all blank, without control characters")
            assert message.endswith(f"invisible format characters (zero-width characters, bidirectional controls); "
                                    f"it holds {named}"), (name, message)
    assert (await daemon.get("/health")).json()["lastSeq"] == before
    # (a joiner between two written characters is part of them: an emoji sequence, a Persian word)
    for name in ("café", "日本", "مرحبا", "a b", "😀",
                 "\U0001f469\u200d\U0001f469\u200d\U0001f467", "\U0001f3f3\ufe0f\u200d\U0001f308",
                 "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"):
        r = await daemon.post("/projects", strong, {"name": name, "workspace": str(ws)})
        assert r.status_code == 201 and r.json()["name"] == name, r.text
        r = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"name": name})
        assert r.status_code == 200 and r.json()["name"] == name, r.text


async def test_the_documented_bounds_hold_at_and_one_past_them(daemon: Daemon, strong: str):
    """The bounds docs/http-api.md states for the event page, history search and history reads, at
    the limit (answered) and one past it (400, nothing else changed)."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    text = "caf\u00e9 \U0001f600 end"  # (bytes: 3 + 2, 1, 4, 1, 3)
    await daemon.submit(strong, sid, "r1", text)
    view = await daemon.wait_idle(strong, sid)
    item = view["items"][0]["id"]
    for limit, status in ((1000, 200), (1001, 400), (1, 200), (0, 400)):
        r = await daemon.get(f"/sessions/{sid}/events", strong, params={"limit": limit})
        assert r.status_code == status, (limit, r.text)
    history = {"projectId": p["id"], "query": "caf\u00e9"}
    for body, status, code in [({"limit": 100}, 200, None), ({"limit": 101}, 400, "INVALID_ARGUMENT"),
                               ({"limit": 0}, 400, "INVALID_ARGUMENT"),
                               ({"query": "\u00e9" * 2048}, 200, None),  # 4096 bytes of UTF-8
                               ({"query": "\u00e9" * 2048 + "e"}, 400, "QUERY_TOO_LONG")]:
        r = await daemon.post("/history/search", strong, {**history, **body})
        assert r.status_code == status and (code is None or error_of(r) == code), (body.keys(), r.text[:200])
    r = await daemon.post("/history/search", strong, history)
    assert [h["contextItemId"] for h in r.json()["results"]][:1] == [item], r.text
    size = len(text.encode())
    for params, status, got in [({"limit": 1048576}, 200, text), ({"limit": 1048577}, 400, None),
                                ({"offset": size}, 200, ""), ({"offset": size + 1}, 400, None),
                                ({"offset": 4}, 400, None),  # (inside "é")
                                ({"offset": 6, "limit": 1}, 200, "\U0001f600"),  # (smaller than one: it whole)
                                ({"offset": 5, "limit": 4}, 200, " ")]:  # (ends before the one it would cut)
        r = await daemon.get(f"/history/items/{item}", strong, params=params)
        assert r.status_code == status, (params, r.text)
        if got is not None:
            assert r.json()["text"] == got, (params, r.json())
