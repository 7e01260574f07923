"""The answers a new user's first mistakes get (docs/decisions.md, "A new user's first hour by the
README"): a body of the wrong shape is told what the route takes there, and a path outside
``/api/v1`` is told the route it names under it. Through the real daemon, over real HTTP."""

from __future__ import annotations

import pytest

from .conftest import API, Daemon, error_of, raw_http


def message(r) -> str:  # (an httpx2 response or a RawResponse)
    return r.json()["error"]["message"]


async def test_a_body_of_the_wrong_shape_is_told_what_the_route_takes(daemon: Daemon, strong: str) -> None:
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    before = await daemon.events(strong, sid)
    # the config file's own text sent as the body of its write
    r = await daemon.put("/config/files/lens.jsonc", strong, {"server": {"port": 7421}})
    assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", r.text
    assert message(r) == ("the request body does not match: Object contains unknown field `server`; "
                          "the body takes {text, expectDigest?}")
    assert not daemon.config_path.exists()
    cases = [
        ({"requestId": "r2", "content": "x", "whenBusy": "queue"},
         "Invalid enum value 'queue' - at `$.whenBusy`; whenBusy takes 'followUp' or 'steer'"),
        ({"requestId": "r2", "content": [{"type": "txt", "text": "x"}]},
         "Invalid value 'txt' - at `$.content[0].type`; content[0].type takes 'text' or 'image'"),
        ({"requestId": "r2", "content": [{"type": "image", "artifactId": "a" * 64}]},
         "Object missing required field `mime` - at `$.content[0]`; content[0] takes "
         '{type: "text", text} or {type: "image", artifactId, mime}'),
        ({"request_id": "r2", "content": "x"},
         "Object contains unknown field `request_id`; the body takes {requestId, content, whenBusy?}"),
    ]
    for body, reason in cases:
        r = await daemon.post(f"/sessions/{sid}/inputs", strong, body)
        assert r.status_code == 422 and message(r) == f"the request body does not match: {reason}", r.text
    r = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"thinking_level": "low"})
    assert r.status_code == 422 and "the body takes {model?, thinkingLevel?, " in message(r), r.text
    r = await daemon.post(f"/sessions/{sid}/abort", strong, {"force": True})
    assert r.status_code == 422 and message(r).endswith("; the body takes no field: {} or no body"), r.text
    # a place whose type says nothing more gets no hint
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": 5, "content": "x"})
    assert message(r) == "the request body does not match: Expected `str`, got `int` - at `$.requestId`", r.text
    assert await daemon.events(strong, sid) == before


@pytest.mark.parametrize("method,target,meant", [
    ("GET", "/health", f"{API}/health"),
    ("GET", "/sessions", f"{API}/sessions"),
    ("GET", "/projects/", f"{API}/projects"),
    ("GET", "/v1/projects", f"{API}/projects"),
    ("GET", "/api/health", f"{API}/health"),
    ("GET", "/api/v2/health", f"{API}/health"),
    ("POST", "/api/v0/sessions/s1/inputs", f"{API}/sessions/s1/inputs"),
    ("GET", "/sessions/s1/inputs", f"{API}/sessions/s1/inputs"),  # (a route of another method: still it)
])
async def test_a_path_outside_the_api_names_the_route_meant(daemon: Daemon, method: str, target: str,
                                                            meant: str) -> None:
    # (no credential: there is no route outside the API to hide, and a wrong prefix is no 401)
    r = await raw_http(daemon.port, method, target, body=b"{}" if method == "POST" else b"")
    assert r.status == 404 and r.code == "NOT_FOUND", r.body
    assert message(r).endswith(f"; the API is under {API}: '{meant}'"), r.body


async def test_a_path_that_names_no_route_anywhere_gets_no_hint_and_the_api_still_needs_a_credential(
        daemon: Daemon, strong: str) -> None:
    for target in ("/nothing", "/api/v2/nothing", "/api/v1"):
        r = await raw_http(daemon.port, "GET", target)
        assert r.status == 404 and message(r) == f"no route GET '{target}'", r.body
    r = await raw_http(daemon.port, "GET", API + "/projects")
    assert r.status == 401 and r.code == "AUTH_REQUIRED", r.body
    r = await raw_http(daemon.port, "GET", API + "/nothing")
    assert r.status == 401 and r.code == "AUTH_REQUIRED", r.body
    r = await raw_http(daemon.port, "GET", API + "/nothing", {"Authorization": f"Bearer {strong}"})
    assert r.status == 404 and message(r) == f"no route GET '{API}/nothing'", r.body


async def test_a_form_body_is_told_the_route_takes_json(daemon: Daemon, strong: str) -> None:
    """``curl -d 'clientId=me'`` sends a form (``application/x-www-form-urlencoded``): it was told
    only "invalid character (byte 0)"."""
    r = await daemon.request("POST", "/pair/requests", content=b"clientId=me&name=laptop",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400 and error_of(r) == "INVALID_JSON", r.text
    assert message(r) == ("the request body is not valid JSON (JSON is malformed: invalid character (byte 0)); "
                          "it came as a form (application/x-www-form-urlencoded), and this route takes a JSON "
                          'object, as {"key": "value"}'), r.text
    r = await daemon.request("POST", "/projects", strong, content=b"--x\r\n",
                             headers={"Content-Type": "multipart/form-data; boundary=x"})
    assert r.status_code == 400 and "it came as a form (multipart/form-data)" in message(r), r.text
    # JSON under a form's type is read as JSON (curl -d '{…}'), and no JSON of another type gets no such words
    r = await daemon.request("POST", "/pair/requests", content=b'{"clientId": "me"}',
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 202, r.text
    r = await daemon.request("POST", "/pair/requests", content=b"clientId=me", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and message(r).endswith("invalid character (byte 0))"), r.text


@pytest.mark.parametrize("method,target,near", [
    ("POST", "/sessions/s1/input", "/sessions/s1/inputs"),
    ("GET", "/session/s1", "/sessions/s1"),
    ("GET", "/sesions", "/sessions"),
    ("GET", "/project", "/projects"),
    ("GET", "/sessions/s1/event", "/sessions/s1/events"),
    ("POST", "/sessions/s1/abrot", "/sessions/s1/abort"),
    ("GET", "/tools/inventroy", "/tools/inventory"),
    ("POST", "/history/serch", "/history/search"),
    # two words misspelt: still the one route of as many words near both
    ("POST", "/sesions/s1/inputt", "/sessions/s1/inputs"),
    ("GET", "/sesions/s1/evnts", "/sessions/s1/events"),
    ("POST", "/session/s1/inputs/r1/withdrw", "/sessions/s1/inputs/r1/withdraw"),
    ("GET", "/confg/fils/lens.jsonc", "/config/files/lens.jsonc"),
])
async def test_a_route_misspelt_by_a_letter_or_two_names_the_route_near_it(daemon: Daemon, strong: str, method: str,
                                                                          target: str, near: str) -> None:
    r = await raw_http(daemon.port, method, API + target, {"Authorization": f"Bearer {strong}"},
                       b"{}" if method == "POST" else b"")
    assert r.status == 404 and r.code == "NOT_FOUND", r.body
    assert message(r) == f"no route {method} '{API}{target}'; a route near it: '{API}{near}'", r.body


async def test_a_path_far_from_every_route_names_none(daemon: Daemon, strong: str) -> None:
    h = {"Authorization": f"Bearer {strong}"}
    # (far from every route; a short word is not mended past half its letters; an empty id is no word;
    # three words misspelt are not mended, nor two words near a route of another length)
    for target in ("/nothing", "/sessions/s1/inputz/r1/stop", "/sessions//events", "/sessions/s1/xyz",
                   "/sesions/s1/inputt/r1/steerr", "/sesions/s1/inputt/r1", "/sesions/s1/xyz"):
        r = await raw_http(daemon.port, "GET", API + target, h)
        assert r.status == 404 and message(r) == f"no route GET '{API}{target}'", r.body
