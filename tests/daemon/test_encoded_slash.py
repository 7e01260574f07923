"""An encoded slash (``%2F``) in a request path: the server decodes the path before routing, and
the daemon answers by the path's words as the client wrote them (runtime/path_words.py).

Every route with a placeholder is read from the app's own URL map, so a new route is covered.
"""

from __future__ import annotations

from runtime.path_words import PLACEHOLDER, PLACEHOLDER_WORDS

from .conftest import API, Daemon, app_routes, assert_error_shape, raw_http

HARMLESS = {"sid": "ses_nope", "rid": "r1", "qid": "q1", "aid": "0" * 64, "name": "lens.jsonc", "item_id": "c1",
            "job_id": "j1"}


def routes_with_placeholders() -> list[tuple[str, str]]:
    return [(m, r) for m, r in app_routes() if r.startswith(API + "/") and PLACEHOLDER.search(r)]


def filled(rule: str, slashed: str, value: str) -> str:
    """``rule`` with ``value`` (as written on the wire) in the placeholder ``slashed`` and a
    harmless id in the others."""
    return PLACEHOLDER.sub(lambda m: value if m.group(1) == slashed else HARMLESS.get(m.group(1), "x"), rule)


def body_for(method: str) -> bytes:
    return b"{}" if method in ("POST", "PUT", "PATCH") else b""


async def test_every_placeholder_holding_an_encoded_slash_is_named(daemon: Daemon, strong: str):
    """An id holding a slash is malformed (400); a config file's name is looked up among the
    directory's files instead, and one holding a slash is not listed (404, as ``..`` is)."""
    routes = routes_with_placeholders()
    assert len(routes) >= 20  # (sessions, inputs, jobs, questions, context, workspace, artifacts, config, history)
    wrong = []
    for method, rule in routes:
        for key in PLACEHOLDER.findall(rule):
            assert key in PLACEHOLDER_WORDS, f"name the placeholder {key!r} of {rule} in PLACEHOLDER_WORDS"
            for written, value in [("a%2Fb", "a/b"), ("a%2fb", "a/b"), ("x%2Fevents", "x/events"), ("x%2F", "x/")]:
                target = filled(rule, key, written)
                r = await raw_http(daemon.port, method, target,
                                   {"Authorization": f"Bearer {strong}", "Content-Type": "application/json"},
                                   body_for(method))
                code, message = assert_error_shape(r, f"{method} {target}")
                if key == "name":
                    if (r.status, code, message) != (404, "CONFIG_FILE_NOT_FOUND",
                                                     f"{value!r} is not one of the daemon's config files"):
                        wrong.append((method, target, r.status, message))
                    continue
                written = "%2f" if "%2f" in written else "%2F"
                if r.status != 400 or code != "INVALID_ARGUMENT" \
                        or f"{PLACEHOLDER_WORDS[key]} {value!r}" not in message \
                        or f"({written} in the path {target!r})" not in message:
                    wrong.append((method, target, r.status, code, message))
    assert not wrong, wrong


async def test_an_encoded_slash_does_not_reach_another_resource(daemon: Daemon, strong: str):
    """``{sid}%2Fevents`` was the events of session ``sid``; ``{sid}%2F`` its view."""
    project = await daemon.project(strong)
    sid = (await daemon.session(strong, project["id"]))["id"]
    auth = {"Authorization": f"Bearer {strong}"}
    for target in (f"{API}/sessions/{sid}%2Fevents", f"{API}/sessions/{sid}%2F", f"{API}/sessions/{sid}%2Fjobs"):
        r = await raw_http(daemon.port, "GET", target, auth)
        assert r.status == 400, (target, r.status, r.body[:200])
        code, message = assert_error_shape(r, target)
        assert code == "INVALID_ARGUMENT" and f"session id '{sid}/" in message, message
    r = await raw_http(daemon.port, "GET", f"{API}/sessions/{sid}/events", auth)  # (as written with a slash: routed)
    assert r.status == 200


async def test_an_encoded_slash_in_a_fixed_word_is_no_route(daemon: Daemon, strong: str):
    auth = {"Authorization": f"Bearer {strong}"}
    for method, target in [("GET", f"{API}/sessions%2Fses_nope"), ("GET", f"{API}/config%2Ffiles"),
                           ("POST", f"{API}/pair%2Frequests"), ("POST", f"{API}/pair%2frequests")]:
        r = await raw_http(daemon.port, method, target, {**auth, "Content-Type": "application/json"},
                           body_for(method))
        code, message = assert_error_shape(r, target)
        assert (r.status, code) == (404, "NOT_FOUND"), (target, r.status, message)
        written = target[target.lower().index("%2f"):][:3]  # (as the client wrote it)
        assert message == (f"no route {method} {target!r}: a {written} is a slash inside a word of the path, "
                           f"and no route has one there"), message
    # outside the API as written: 404 with no credential asked, never the route the slash makes
    for target in ("/api%2Fv1/health", "/api/v1%2Fhealth", "/%2Fapi/v1/health"):
        r = await raw_http(daemon.port, "GET", target)
        code, message = assert_error_shape(r, target)
        assert (r.status, code) == (404, "NOT_FOUND") and repr(target) in message, (target, r.status, message)


async def test_an_encoded_slash_is_answered_after_the_credential_and_by_method(daemon: Daemon, strong: str):
    target = f"{API}/sessions/a%2Fb"
    r = await raw_http(daemon.port, "GET", target)
    assert (r.status, assert_error_shape(r, target)[0]) == (401, "AUTH_REQUIRED")
    r = await raw_http(daemon.port, "PUT", target, {"Authorization": f"Bearer {strong}"}, b"{}")
    code, message = assert_error_shape(r, target)
    assert (r.status, code) == (405, "METHOD_NOT_ALLOWED") and repr(target) in message, message
    assert {"GET", "PATCH", "DELETE"} <= {m.strip() for m in r.headers["allow"].split(",")}
    # a percent sign encoded (%252F) is no slash: the id's own check names it
    r = await raw_http(daemon.port, "GET", f"{API}/sessions/a%252Fb", {"Authorization": f"Bearer {strong}"})
    code, message = assert_error_shape(r, "%252F")
    assert (r.status, code) == (400, "INVALID_ARGUMENT") and "session id must be" in message, message


async def test_a_path_no_route_takes_with_a_slash_either_gets_the_usual_hints(daemon: Daemon, strong: str):
    """The encoded slash is blamed only when a slash in its place would make a route of the path;
    else the path as written gets the hints any path no route takes gets."""
    auth = {"Authorization": f"Bearer {strong}"}
    for target, hint in [
        (f"{API}/sesions/a%2Fb", f"; a route near it: '{API}/sessions/a%2Fb'"),
        (f"{API}/sesions/a%2fb", f"; a route near it: '{API}/sessions/a%2fb'"),
        (f"{API}/sessions/a%2Fb/inputt", f"; a route near it: '{API}/sessions/a%2Fb/inputs'"),
        (f"{API}/sessions/a%2Fb/", f"; routes take no trailing slash: '{API}/sessions/a%2Fb'"),
        ("/v1/sessions/a%2Fb", f"; the API is under {API}: '{API}/sessions/a%2Fb'"),
        (f"{API}/sessions/ses_nope%2Fevents/x", ""),
    ]:
        r = await raw_http(daemon.port, "GET", target, auth)
        code, message = assert_error_shape(r, target)
        assert (r.status, code) == (404, "NOT_FOUND"), (target, r.status, message)
        assert message == f"no route GET {target!r}{hint}", message


async def test_a_config_file_name_holding_a_slash_needs_the_trust_any_name_does(daemon: Daemon, reader: str):
    for method, target in [("GET", f"{API}/config/files/a%2Fb.json"), ("PUT", f"{API}/config/files/lens.jsonc%2F")]:
        r = await raw_http(daemon.port, method, target, {"Authorization": f"Bearer {reader}",
                                                         "Content-Type": "application/json"}, body_for(method))
        listed = await raw_http(daemon.port, method, f"{API}/config/files/nope.json",
                                {"Authorization": f"Bearer {reader}", "Content-Type": "application/json"},
                                body_for(method))
        assert (r.status, assert_error_shape(r, target)[0]) == (listed.status, assert_error_shape(listed, "nope")[0])
        assert r.status == 403, r.body
