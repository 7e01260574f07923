"""web_search, capability_search and get_system_time driven as a user drives them (F-TOOL-8,
F-TOOL-3, F-TOOL-9): a daemon on loopback port 0, a faux-model session, a loopback server
standing in for the search backend and the stdio test MCP server for deferred tools."""

from __future__ import annotations

import gzip
import json
import sys
from typing import Any

import pytest
import trio

from ..mcp.conftest import SERVER
from ..web.conftest import web_server  # noqa: F401 (fixture: a loopback HTTP server)
from ..web.server import Request, WebServer, response
from .conftest import Daemon, DaemonFactory, run_tool

KEY = "k-search-0123456789abcdef"


async def searching(daemon_factory: DaemonFactory, web_server: WebServer, monkeypatch: pytest.MonkeyPatch,
                    answer: Any) -> tuple[Daemon, str, str]:
    """A daemon whose search backend is ``web_server``, answering each request with ``answer(req)``
    (the raw response bytes); its key in the environment. (daemon, token, session id)"""
    async def search(req: Request, stream: trio.SocketStream) -> None:
        await stream.send_all(answer(req))
    web_server.route("/search", search)
    monkeypatch.setenv("LENS_TEST_WEB_SEARCH_KEY", KEY)
    d = await daemon_factory(config={"webSearch": {"baseUrl": web_server.base, "apiKeyEnv": "LENS_TEST_WEB_SEARCH_KEY"}})
    token = await d.pair("search-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    return d, token, sid


def text(body: dict[str, Any]) -> str:
    return body["content"][0]["text"]


# --------------------------------------------------------------------------- web_search


async def test_a_backend_quoting_the_key_in_any_field_of_a_result_shows_it_redacted(
        daemon_factory: DaemonFactory, web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a backend that reflects the request's headers: the key in the title, URL, date, author and text)
    def answer(req: Request) -> bytes:
        k = req.headers["x-api-key"]
        results = [{"title": f"t {k}", "url": f"https://x.example/?k={k}", "publishedDate": k, "author": f"a {k}",
                    "text": f"page {k}"}]
        return response(200, json.dumps({"results": results}).encode(), [("Content-Type", "application/json")])
    d, token, sid = await searching(daemon_factory, web_server, monkeypatch, answer)
    body = await run_tool(d, token, sid, "r1", "web_search", {"query": "lens"})
    assert not body["is_error"], body["content"]
    assert web_server.requests[0].headers["x-api-key"] == KEY  # (the key was sent)
    marker = "[redacted LENS_TEST_WEB_SEARCH_KEY]"
    assert text(body) == (f"## 1. t {marker}\nURL: https://x.example/?k={marker}\nPublished: {marker}\n"
                          f"Author: a {marker}\n\npage {marker}")
    assert body["structured_content"]["results"] == [{"title": f"t {marker}", "url": f"https://x.example/?k={marker}",
                                                      "published_date": marker, "author": f"a {marker}", "score": None}]
    assert KEY not in json.dumps(await d.events(token, sid))


async def test_a_backend_refusing_redirecting_or_flooding_ends_the_call_with_its_code_and_the_session_goes_on(
        daemon_factory: DaemonFactory, web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([
        response(429, b'{"error": "rate limited for key %s"}' % KEY.encode(), [("Retry-After", "30")],
                 reason="Too Many Requests"),
        response(302, b"", [("Location", "http://127.0.0.1:1/search")], reason="Found"),
        response(200, b"<html><body>Sign in</body></html>", [("Content-Type", "text/html")]),
        # 40 MiB of spaces gzipped to 40 KiB: held to the 32 MiB bound as it is decoded
        response(200, gzip.compress(b" " * (40 * 1024 * 1024)), [("Content-Encoding", "gzip")]),
        response(200, json.dumps({"results": [1, "two", None]}).encode()),
    ])
    d, token, sid = await searching(daemon_factory, web_server, monkeypatch, lambda req: next(answers))
    seen = []
    for i in range(5):
        body = await run_tool(d, token, sid, f"r{i}", "web_search", {"query": "lens"})
        seen.append((body["error_code"] if body["is_error"] else None, text(body)))
    assert seen == [
        ("WEB_SEARCH_FAILED", 'WEB_SEARCH_FAILED: the search backend answered 429 Too Many Requests: '
                              '{"error": "rate limited for key [redacted]"}'),
        ("WEB_SEARCH_FAILED", "WEB_SEARCH_FAILED: the search backend answered 302 Found"),
        ("WEB_SEARCH_FAILED", "WEB_SEARCH_FAILED: the search backend's answer is not JSON"),
        ("RESPONSE_TOO_LARGE", "RESPONSE_TOO_LARGE: the search backend: the response body is larger than "
                               "33554432 bytes (after decompression); the backend sent more than was asked for "
                               "(num_results 8, context_max_characters 10000)"),
        (None, 'No results for "lens".'),
    ]
    assert [q.path for q in web_server.requests] == ["/search"] * 5  # (the redirect was not followed)
    assert (await d.view(token, sid))["status"] == "idle"


async def test_an_answer_past_the_bound_for_arguments_in_range_says_how_to_ask_for_less(
        daemon_factory: DaemonFactory, web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # 50 results of up to 1,048,576 characters each are arguments in range, and a backend that
    # gives that much answers past the 32 MiB held in memory (50 x 700,000 characters here): the
    # refusal did not say that asking for less would do.
    results = [{"title": f"R{i}", "url": f"https://r{i}.example/", "text": "w" * 700_000} for i in range(50)]
    body = gzip.compress(json.dumps({"results": results}).encode(), 1)
    d, token, sid = await searching(daemon_factory, web_server, monkeypatch,
                                    lambda req: response(200, body, [("Content-Encoding", "gzip")]))
    args = {"query": "lens", "num_results": 50, "context_max_characters": 1_048_576}
    answer = await run_tool(d, token, sid, "r1", "web_search", args)
    assert answer["error_code"] == "RESPONSE_TOO_LARGE"
    assert text(answer) == ("RESPONSE_TOO_LARGE: the search backend: the response body is larger than 33554432 bytes "
                            "(after decompression); ask for less: fewer results (num_results 50) or less text per "
                            "result (context_max_characters 1048576)")


async def test_the_ask_for_less_hint_names_only_what_can_go_lower(
        daemon_factory: DaemonFactory, web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hint was added whole even at num_results 1 and context_max_characters 1, where asking
    # for less is no way out: the backend sent more than was asked for. So it is whenever what was
    # asked for (6 bytes a character at most, as JSON escapes, and 4 KiB a result besides) could
    # not come near the bound: 3 results of 1 character were told to ask for fewer results.
    results = [{"title": "R", "url": "https://r.example/", "text": "w" * (34 * 1024 * 1024)}]
    body = gzip.compress(json.dumps({"results": results}).encode(), 1)
    d, token, sid = await searching(daemon_factory, web_server, monkeypatch,
                                    lambda req: response(200, body, [("Content-Encoding", "gzip")]))
    head = "RESPONSE_TOO_LARGE: the search backend: the response body is larger than 33554432 bytes (after decompression)"
    for n, (args, tail) in enumerate((
            ({"num_results": 1, "context_max_characters": 1},
             "; the backend sent more than was asked for (num_results 1, context_max_characters 1)"),
            ({"num_results": 1, "context_max_characters": 5000},
             "; the backend sent more than was asked for (num_results 1, context_max_characters 5000)"),
            ({"num_results": 3, "context_max_characters": 1},
             "; the backend sent more than was asked for (num_results 3, context_max_characters 1)"),
            ({"num_results": 1, "context_max_characters": 1_048_576},
             "; the backend sent more than was asked for (num_results 1, context_max_characters 1048576)"),
            ({"num_results": 10, "context_max_characters": 1_048_576},
             "; ask for less: fewer results (num_results 10) or less text per result "
             "(context_max_characters 1048576)"))):
        answer = await run_tool(d, token, sid, f"r{n}", "web_search", {"query": "lens", **args})
        assert answer["error_code"] == "RESPONSE_TOO_LARGE"
        assert text(answer) == head + tail, args


async def test_web_search_refusals_name_the_value_received_as_json(
        daemon_factory: DaemonFactory, web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The values were quoted as Python writes them (None, True, '5'): a model reads JSON.
    d, token, sid = await searching(daemon_factory, web_server, monkeypatch, lambda req: response(200, b'{"results": []}'))
    refused = {
        # (an optional argument sent as null is that argument left out: test_harness_fourth_pass.py)
        "num_results": ({"query": "q", "num_results": []}, "num_results must be an integer from 1 to 50, got []"),
        "true": ({"query": "q", "num_results": True}, "num_results must be an integer from 1 to 50, got true"),
        "string": ({"query": "q", "num_results": "5"}, 'num_results must be an integer from 1 to 50, got "5"'),
        "0": ({"query": "q", "num_results": 0}, "num_results must be an integer from 1 to 50, got 0"),
        "51": ({"query": "q", "num_results": 51}, "num_results must be an integer from 1 to 50, got 51"),
        "5.5": ({"query": "q", "num_results": 5.5}, "num_results must be an integer from 1 to 50, got 5.5"),
        "type": ({"query": "q", "type": False}, "type must be one of auto, fast, deep, got false"),
        "query-null": ({"query": None}, "web_search needs 'query', a non-empty string, got null"),
        "livecrawl": ({"query": "q", "livecrawl": "always"}, 'livecrawl must be one of fallback, preferred, got "always"'),
        "query": ({"query": 5}, "web_search needs 'query', a non-empty string, got 5"),
        "blank": ({"query": " \t\n"}, "web_search needs 'query', a non-empty string, got \" \\t\\n\""),
        "missing": ({}, "web_search needs 'query', a non-empty string"),
        "long": ({"query": "q" * 4097}, "query is 4,097 characters, more than 4,096"),
    }
    for name, (args, message) in refused.items():
        body = await run_tool(d, token, sid, f"r-{name}", "web_search", args)
        assert body["error_code"] == "INVALID_ARGUMENT" and text(body) == f"INVALID_ARGUMENT: {message}", name
    # at the edges: taken, and the backend asked for exactly that many
    for i, n in enumerate((1, 50, 7.0)):
        body = await run_tool(d, token, sid, f"ok{i}", "web_search", {"query": "q", "num_results": n})
        assert not body["is_error"], body["content"]
    assert [q.json()["numResults"] for q in web_server.requests] == [1, 50, 7]
    # a query of 4,096 characters is taken, sent whole and quoted as JSON when nothing is found
    body = await run_tool(d, token, sid, "ok-long", "web_search", {"query": '"' * 4096})
    assert text(body) == "No results for " + '"' + '\\"' * 4096 + '".'
    assert web_server.requests[-1].json()["query"] == '"' * 4096


# --------------------------------------------------------------------------- capability_search


async def mcp_session(daemon_factory: DaemonFactory) -> tuple[Daemon, str, str]:
    """A daemon with the test MCP server's tools (and 12 generated ones, t0…t11) all deferred."""
    d = await daemon_factory(config={"tools": {"deferred": ["mcp__*"]},
                                     "mcpServers": {"t": {"command": sys.executable, "args": [SERVER, "--many", "12"]}}})
    token = await d.pair("search-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    return d, token, sid


async def test_a_query_naming_a_tool_finds_that_tool_alone(daemon_factory: DaemonFactory) -> None:
    # Every tool of a server shares the words "mcp" and the server's name: the query
    # "mcp__t__echo" (default limit 5) loaded echo and four tools nobody asked for (add, big,
    # crash, fail: 6 points each from those two words).
    d, token, sid = await mcp_session(daemon_factory)
    body = await run_tool(d, token, sid, "c1", "capability_search", {"query": "mcp__t__echo"})
    assert not body["is_error"], body["content"]
    found = body["structured_content"]
    assert [m["name"] for m in found["matches"]] == ["mcp__t__echo"] and found["loaded"] == ["mcp__t__echo"]
    assert text(body).endswith("Loaded mcp__t__echo: callable from your next request.")
    loads = [e["body"]["capability_ids"] for e in await d.events(token, sid) if e["kind"] == "capability.loaded"]
    assert loads == [["mcp__t__echo"]]
    # in another case it still names that tool; with other words beside it, it is a search again
    body = await run_tool(d, token, sid, "c2", "capability_search", {"query": "MCP__T__ADD", "load": False})
    assert [m["name"] for m in body["structured_content"]["matches"]] == ["mcp__t__add"]
    body = await run_tool(d, token, sid, "c3", "capability_search", {"query": "mcp__t__add numbers", "load": False})
    assert len(body["structured_content"]["matches"]) == 5
    # the loaded tool runs
    body = await run_tool(d, token, sid, "c4", "mcp__t__echo", {"text": "hi"})
    assert body["content"] == [{"type": "text", "text": "echo: hi"}]


async def test_a_query_naming_a_tool_the_search_cannot_load_says_why_and_loads_nothing(
        daemon_factory: DaemonFactory) -> None:
    # The named tool was no candidate (disabled, or eager and offered already): the query was
    # taken as words, and "mcp" and "t" loaded five other tools of the server in its place.
    d = await daemon_factory(config={"tools": {"deferred": ["mcp__*"], "policy": {"mcp__t__echo": {"enabled": False}}},
                                     "mcpServers": {"t": {"command": sys.executable, "args": [SERVER]}}})
    token = await d.pair("search-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    query, why = "mcp__t__echo", "mcp__t__echo is disabled by the tools policy"
    body = await run_tool(d, token, sid, "c0", "capability_search", {"query": query})
    assert not body["is_error"] and body["structured_content"]["matches"] == [], body["content"]
    assert text(body) == f"No deferred capability matches {json.dumps(query)}: {why}. Nothing was loaded."
    # an eager tool's name is searched as words (none of the server's tools holds "read" or
    # "file"), the answer saying first that the agent has it
    body = await run_tool(d, token, sid, "c1", "capability_search", {"query": "READ_FILE"})
    assert not body["is_error"] and body["structured_content"]["matches"] == [], body["content"]
    assert text(body).startswith("read_file is in your tool list already. No deferred capability matches ")
    assert [e for e in await d.events(token, sid) if e["kind"] == "capability.loaded"] == []
    # a query naming no tool is still a search of its words
    body = await run_tool(d, token, sid, "c9", "capability_search", {"query": "mcp__t__adder", "load": False})
    assert body["structured_content"]["matches"][0]["name"] == "mcp__t__add"


async def test_a_query_that_is_a_native_tools_name_still_finds_the_deferred_tools_it_names(
        daemon_factory: DaemonFactory) -> None:
    # "job" (the native tool's name, in any case) answered "job is not deferred: it is in your
    # tool list already. Nothing was loaded." and hid the deferred tools the word finds.
    d = await daemon_factory(config={"tools": {"deferred": ["mcp__*"]},
                                     "mcpServers": {"job": {"command": sys.executable, "args": [SERVER]}}})
    token = await d.pair("search-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    for i, query in enumerate(("job", "JOB")):
        body = await run_tool(d, token, sid, f"c{i}", "capability_search", {"query": query, "limit": 2, "load": False})
        assert not body["is_error"], body["content"]
        matches = [m["name"] for m in body["structured_content"]["matches"]]
        assert len(matches) == 2 and all(m.startswith("mcp__job__") for m in matches), matches
        assert text(body).startswith(f"job is in your tool list already.\n- {matches[0]} "), text(body)
    body = await run_tool(d, token, sid, "c9", "capability_search", {"query": "job", "limit": 1})
    [loaded] = body["structured_content"]["loaded"]
    assert loaded.startswith("mcp__job__")
    loads = [e["body"]["capability_ids"] for e in await d.events(token, sid) if e["kind"] == "capability.loaded"]
    assert loads == [[loaded]]


async def test_capability_search_refusals_say_what_was_wrong_and_what_was_sent(daemon_factory: DaemonFactory) -> None:
    # One message served a blank query, a number and one of 501 characters, and the limit and
    # load refusals did not say what was sent.
    d, token, sid = await mcp_session(daemon_factory)
    refused = {
        "unknown": ({"query": "echo", "verbose": True}, "capability_search does not take 'verbose'"),
        "missing": ({}, "capability_search needs 'query'"),
        "number": ({"query": 5}, "query must be a string, got 5"),
        "blank": ({"query": "  "}, "query is empty (or only white space)"),
        "long": ({"query": "a" * 501}, "query is 501 characters, more than 500"),
        "limit0": ({"query": "echo", "limit": 0}, "limit must be an integer from 1 to 20, got 0"),
        "limit21": ({"query": "echo", "limit": 21}, "limit must be an integer from 1 to 20, got 21"),
        "limit-str": ({"query": "echo", "limit": "3"}, 'limit must be an integer from 1 to 20, got "3"'),
        "load": ({"query": "echo", "load": "yes"}, 'load must be true or false, got "yes"'),
    }
    for name, (args, message) in refused.items():
        body = await run_tool(d, token, sid, f"c-{name}", "capability_search", args)
        assert body["error_code"] == "INVALID_ARGUMENT" and text(body) == f"INVALID_ARGUMENT: {message}", name
    assert [e for e in await d.events(token, sid) if e["kind"] == "capability.loaded"] == []
    # at the edges: 500 characters and a limit of 20 (or 20.0) are taken
    for i, args in enumerate(({"query": "e" * 500}, {"query": "generated", "limit": 20.0, "load": False})):
        body = await run_tool(d, token, sid, f"ok{i}", "capability_search", args)
        assert not body["is_error"], body["content"]
    assert len(body["structured_content"]["matches"]) == 12


# --------------------------------------------------------------------------- get_system_time


async def test_get_system_time_refuses_anything_but_an_empty_object(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token = await d.pair("time-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    refused = {"tz": ({"tz": "UTC"}, "get_system_time does not take 'tz'"),
               "array": ([], 'get_system_time arguments must be a JSON object, not an array; received: "[]"'),
               "null": (None, 'get_system_time arguments must be a JSON object, not null; received: "null"')}
    for name, (args, message) in refused.items():
        body = await run_tool(d, token, sid, f"t-{name}", "get_system_time", args)
        assert body["error_code"] == "INVALID_ARGUMENT" and text(body) == f"INVALID_ARGUMENT: {message}", name
    body = await run_tool(d, token, sid, "t-ok", "get_system_time", {})
    fields = body["structured_content"]
    assert set(fields) == {"unix_ms", "utc", "local"} and text(body).startswith(fields["utc"])
