"""web_fetch and web_search in a running daemon: a faux-model session calls them, and their
results are in the log (F-TOOL-8). The pages and the search backend are loopback HTTP servers."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from ..web.conftest import web_server  # noqa: F401 (fixture: pages on 127.0.0.1)
from ..web.server import Request, WebServer, png, response
from .conftest import DaemonFactory, run_tool


async def test_a_session_fetches_a_page_and_an_image_with_full_access(daemon_factory: DaemonFactory,
                                                                      web_server: WebServer) -> None:
    d = await daemon_factory(config={"web": {"allowPrivateAddresses": True}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    web_server.reply("/docs/page.html", "<h1>Lens</h1><p>Read <a href='more.html'>more</a>.</p>")
    url = web_server.redirect("/start", "/docs/page.html")
    body = await run_tool(d, token, sid, "r1", "web_fetch", {"url": url})
    assert body["status"] == "ok" and not body["is_error"]
    assert body["content"] == [{"type": "text", "text": f"[redirected to {web_server.base}/docs/page.html]\n\n"
                                                        f"# Lens\n\nRead [more]({web_server.base}/docs/more.html)."}]
    assert body["structured_content"]["final_url"] == f"{web_server.base}/docs/page.html"
    # the model was given the result (the faux model echoes it)
    view = await d.view(token, sid)
    assert any("# Lens" in json.dumps(it) for it in view["items"])

    image = png(2, 2)
    body = await run_tool(d, token, sid, "r2", "web_fetch", {"url": web_server.reply("/i.png", image, "image/png")})
    aid = body["structured_content"]["artifact_id"]
    assert body["content"][1] == {"type": "image", "artifact_id": aid, "mime": "image/png"}
    stored = [e["body"] for e in await d.events(token, sid) if e["kind"] == "artifact.stored"]
    assert stored[-1]["artifact_id"] == aid and stored[-1]["source"] == "web_fetch"
    r = await d.get(f"/artifacts/{aid}", token)
    assert r.status_code == 200 and r.content == image


async def test_without_the_grant_loopback_is_refused(daemon_factory: DaemonFactory, web_server: WebServer) -> None:
    d = await daemon_factory()  # built-in defaults: public addresses only
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    url = web_server.reply("/secret", "internal", "text/plain")
    body = await run_tool(d, token, sid, "r1", "web_fetch", {"url": url})
    assert body["is_error"] and body["error_code"] == "ADDRESS_NOT_PUBLIC"
    assert body["content"][0]["text"].startswith("ADDRESS_NOT_PUBLIC: 127.0.0.1 is at 127.0.0.1")
    body = await run_tool(d, token, sid, "r2", "web_fetch", {"url": url.replace("127.0.0.1", "localhost")})
    assert body["error_code"] == "ADDRESS_NOT_PUBLIC"
    assert web_server.requests == []


async def test_without_the_grant_other_spellings_of_private_addresses_are_refused(daemon_factory: DaemonFactory,
                                                                                  web_server: WebServer) -> None:
    d = await daemon_factory()
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    web_server.reply("/secret", "internal", "text/plain")
    for i, host in enumerate(("2130706433", "0x7f.1", "[::ffff:127.0.0.1]", "[fe80::1%25eth0]")):
        body = await run_tool(d, token, sid, f"r{i}", "web_fetch", {"url": f"http://{host}:{web_server.port}/secret"})
        assert body["error_code"] == "ADDRESS_NOT_PUBLIC", body["content"]
    # an IPv4-mapped address is named with its IPv4 part dotted, not in hex (::ffff:7f00:1)
    body = await run_tool(d, token, sid, "r-mapped", "web_fetch", {"url": f"http://[::ffff:7f00:1]:{web_server.port}/secret"})
    assert body["content"][0]["text"].startswith("ADDRESS_NOT_PUBLIC: ::ffff:127.0.0.1 is at ::ffff:127.0.0.1, not a "
                                                 "public address"), body["content"]
    assert web_server.requests == []


async def test_a_mapped_address_of_an_allowed_network_is_fetched_and_its_neighbour_is_not(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # web.allowedPrivateNetworks ["127.0.0.2/32"]: [::ffff:127.0.0.2] is 127.0.0.2 and is fetched;
    # [::ffff:127.0.0.3] is outside the grant and refused before any connection
    allowed = WebServer("127.0.0.2")
    await nursery.start(allowed.run)
    d = await daemon_factory(config={"web": {"allowedPrivateNetworks": ["127.0.0.2/32"]}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    allowed.reply("/page", "inside the grant", "text/plain")
    body = await run_tool(d, token, sid, "r1", "web_fetch", {"url": f"http://[::ffff:127.0.0.2]:{allowed.port}/page"})
    assert not body["is_error"] and body["content"][0]["text"] == "inside the grant", body["content"]
    assert body["structured_content"]["final_url"] == f"http://[::ffff:7f00:2]:{allowed.port}/page"
    body = await run_tool(d, token, sid, "r2", "web_fetch", {"url": f"http://[::ffff:127.0.0.3]:{allowed.port}/page"})
    assert body["error_code"] == "ADDRESS_NOT_PUBLIC"
    assert body["content"][0]["text"].startswith("ADDRESS_NOT_PUBLIC: ::ffff:127.0.0.3 is at ::ffff:127.0.0.3, not a "
                                                 "public address"), body["content"]
    assert [q.path for q in allowed.requests] == ["/page"]


async def test_a_backslash_redirect_is_judged_by_the_host_it_names(daemon_factory: DaemonFactory,
                                                                   web_server: WebServer, nursery: trio.Nursery) -> None:
    # a page on an allowed network (127.0.0.2) redirects with backslashes, which browsers read as
    # another host: its credentials are refused, and that host (127.0.0.1) is not an allowed one
    allowed = WebServer("127.0.0.2")
    await nursery.start(allowed.run)
    d = await daemon_factory(config={"web": {"allowedPrivateNetworks": ["127.0.0.2/32"]}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    web_server.reply("/secret", "internal", "text/plain")
    target = f"127.0.0.1:{web_server.port}/secret"
    creds = allowed.redirect("/creds", f"http:\\\\me:hunter2@{target}")
    body = await run_tool(d, token, sid, "r1", "web_fetch", {"url": creds})
    assert body["content"][0]["text"] == (f"URL_CREDENTIALS: the redirect from {creds} to 'http://{target}' carries a "
                                          f"user name or password (user:pass@host): URLs with credentials are not fetched")
    body = await run_tool(d, token, sid, "r2", "web_fetch", {"url": allowed.redirect("/hop", f"/\\{target}")})
    assert body["error_code"] == "ADDRESS_NOT_PUBLIC", body["content"]
    assert web_server.requests == [] and [q.path for q in allowed.requests] == ["/creds", "/hop"]
    # an invalid first URL is refused without its user name and password
    body = await run_tool(d, token, sid, "r3", "web_fetch", {"url": "ftp://me:hunter2@files.example/x"})
    assert body["content"][0]["text"] == ("URL_INVALID: url 'ftp://files.example/x': only http:// and https:// URLs "
                                          "can be fetched")


async def test_a_session_searches_the_configured_backend(daemon_factory: DaemonFactory, web_server: WebServer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    async def search(req: Request, stream: trio.SocketStream) -> None:
        results = [{"title": "Found", "url": "https://found.example/", "text": f"about {req.json()['query']}"}]
        await stream.send_all(response(200, json.dumps({"results": results}).encode(),
                                       [("Content-Type", "application/json")]))
    web_server.route("/search", search)
    monkeypatch.setenv("LENS_TEST_WEB_SEARCH_KEY", "k-123")
    d = await daemon_factory(config={"webSearch": {"baseUrl": web_server.base, "apiKeyEnv": "LENS_TEST_WEB_SEARCH_KEY"}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "web_search", {"query": "lens", "num_results": 1})
    assert body["content"][0]["text"] == "## 1. Found\nURL: https://found.example/\n\nabout lens"
    assert body["structured_content"]["results"][0]["url"] == "https://found.example/"
    assert web_server.requests[0].headers["x-api-key"] == "k-123"
    assert "k-123" not in json.dumps(await d.events(token, sid))


async def test_a_backends_score_the_log_cannot_hold_is_left_out_not_the_results(daemon_factory: DaemonFactory,
                                                                                web_server: WebServer) -> None:
    # A score of more than 64 bits (JSON has no limit) made the result unencodable: the call
    # answered RESULT_NOT_RECORDED ("ask for less") and the results were lost. NaN and the
    # infinities (Python's JSON reads them) were stored as they came and shown as null.
    scores = iter(["100000000000000000000000000000", "-18446744073709551616", "NaN", "-Infinity", "1e999",
                   "9223372036854775807", "0.5"])

    async def search(req: Request, stream: trio.SocketStream) -> None:
        body = '{"results": [{"title": "Found", "url": "https://found.example/", "score": %s}]}' % next(scores)
        await stream.send_all(response(200, body.encode(), [("Content-Type", "application/json")]))
    web_server.route("/search", search)
    d = await daemon_factory(config={"webSearch": {"baseUrl": web_server.base, "apiKeyEnv": None}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    seen = []
    for i in range(7):
        body = await run_tool(d, token, sid, f"r{i}", "web_search", {"query": "lens"})
        assert not body["is_error"], body["content"]
        assert body["content"][0]["text"] == "## 1. Found\nURL: https://found.example/"
        seen.append(body["structured_content"]["results"][0]["score"])
    assert seen == [None, None, None, None, None, 9223372036854775807, 0.5]
    decoded = [e for e in await d.events(token, sid) if e["kind"] == "tool.finished"]
    assert [e["body"]["structured_content"]["results"][0]["score"] for e in decoded] == seen


async def test_a_backends_huge_title_and_url_are_cut_and_the_results_kept(daemon_factory: DaemonFactory,
                                                                           web_server: WebServer) -> None:
    # Titles, URLs, authors and dates were shown whole: a title of 1.2 million characters made
    # the result larger than the log's event (here log.maxEventBytes 1 MiB; 32 MiB by default,
    # the backend's answer may be as large), so the call answered RESULT_NOT_RECORDED and every
    # result was lost. Each field is now held to its bound and the result says which were cut.
    big = [{"title": "T" * 1_200_000, "url": "https://long.example/" + "u" * 20_000, "author": "A" * 5_000,
            "publishedDate": "2024-05-01" + "0" * 500, "text": "the long one"},
           {"title": "Short", "url": "https://short.example/", "text": "the short one"}]

    async def search(req: Request, stream: trio.SocketStream) -> None:
        body = json.dumps({"results": big}).encode()
        await stream.send_all(response(200, body, [("Content-Type", "application/json")]))
    web_server.route("/search", search)
    d = await daemon_factory(config={"webSearch": {"baseUrl": web_server.base, "apiKeyEnv": None},
                                     "log": {"maxEventBytes": 1_048_576}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "web_search", {"query": "lens"})
    assert not body["is_error"] and body["status"] == "ok", (body.get("error_code"), str(body["content"])[:300])
    text = body["content"][0]["text"]
    assert text == ("## 1. " + "T" * 999 + "…\n"
                    "[title cut at 1,000 of 1,200,000 characters]\n"
                    "[URL left out: 20,021 characters, past 8,192]\n"
                    "[published_date cut at 100 of 510 characters]\n"
                    "[author cut at 1,000 of 5,000 characters]\n"
                    "Published: 2024-05-01" + "0" * 89 + "…\n"
                    "Author: " + "A" * 999 + "…\n\nthe long one\n\n"
                    "## 2. Short\nURL: https://short.example/\n\nthe short one"), text[:2000]
    long, short = body["structured_content"]["results"]
    assert long["cut"] == ["title", "url", "published_date", "author"] and long["url"] is None
    assert [len(long["title"]), len(long["author"]), len(long["published_date"])] == [1_000, 1_000, 100]
    assert short == {"title": "Short", "url": "https://short.example/", "published_date": None, "author": None,
                     "score": None}


async def test_a_search_backend_with_credentials_is_refused_without_them(daemon_factory: DaemonFactory,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    d = await daemon_factory()
    token = await d.pair("web-client", strong=True)
    caplog.set_level("DEBUG")
    for base_url in ("https://alice:hunter2@search.example", "http:\\\\alice:hunter2@search.example",
                     "https://alice:hunter2@search.example:99999/v1"):
        r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps({"webSearch": {"baseUrl": base_url}})})
        assert r.status_code == 400 and r.json()["error"]["code"] == "CONFIG_INVALID", r.text
        message = r.json()["error"]["message"]
        assert "webSearch.baseUrl" in message and "search.example" in message
        assert "alice" not in message and "hunter2" not in message, message
    assert "hunter2" not in caplog.text


async def test_web_search_without_a_backend_says_so(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"webSearch": {"baseUrl": None}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "web_search", {"query": "lens"})
    assert body["is_error"] and body["error_code"] == "WEB_SEARCH_NOT_CONFIGURED"


async def test_the_inventory_lists_the_web_tools(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token = await d.pair("web-client")
    tools = {t["name"]: t for t in (await d.get("/tools/inventory", token)).json()["tools"]}
    assert tools["web_fetch"]["inputSchema"]["required"] == ["url"]
    assert tools["web_search"]["inputSchema"]["required"] == ["query"]
    assert tools["web_fetch"]["visibleToSubagents"] and tools["web_search"]["readOnly"]
