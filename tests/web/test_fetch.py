"""``web_fetch`` against real loopback HTTP/1.1 servers (tests/web/server.py).

Servers on loopback are fetched with full access (what ``web.allowPrivateAddresses`` grants) or
with ``127.0.0.2`` allowed by network; the public-address rule is checked without either.
Timing is virtual (``autojump_clock``) wherever a test waits.
"""

from __future__ import annotations

import gzip
import ipaddress
import zlib

import pytest
import trio

from events import types as t
from tools.artifacts import ArtifactStore
from tools.base import ToolRegistry
from tools.web import web_fetch_tool
from tools.web.fetch import MAX_BODY_BYTES, MAX_REDIRECTS
from tests.files.sample_images import png_sized
from tests.image_walks import image_work_on_this_thread
from tests.unwritable import unwritable

from .conftest import call, text_of
from .server import Request, WebServer, chunked, png, response
MiB = 1024 * 1024


# ---------------------------------------------------------------------------- formats


PAGE = ("<html><head><title>Doc</title><script>alert('x')</script></head><body><h2>Guide</h2>"
        "<p>See <a href='next.html'>next</a> and <a href='/top'>top</a>.</p><ul><li>a</li><li>b</li></ul></body></html>")


async def test_html_as_markdown_with_links_resolved_against_the_final_url(full: ToolRegistry,
                                                                          web_server: WebServer) -> None:
    web_server.reply("/docs/guide/page.html", PAGE)
    start = web_server.redirect("/start", "/docs/guide/page.html", status=301)
    r = await call(full, "web_fetch", {"url": start})
    assert not r.is_error, text_of(r)
    base = web_server.base
    assert text_of(r) == (f"[redirected to {base}/docs/guide/page.html]\n\n## Guide\n\n"
                          f"See [next]({base}/docs/guide/next.html) and [top]({base}/top).\n\n- a\n- b")
    s = r.structured_content
    assert s["url"] == start and s["final_url"] == f"{base}/docs/guide/page.html"
    assert (s["status"], s["format"], s["title"], s["redirects"]) == (200, "markdown", "Doc", [s["final_url"]])
    assert web_server.requests[0].headers["accept"].startswith("text/markdown")


async def test_text_and_html_formats(full: ToolRegistry, web_server: WebServer) -> None:
    url = web_server.reply("/p", PAGE)
    r = await call(full, "web_fetch", {"url": url, "format": "text"})
    assert text_of(r) == "Guide\n\nSee next and top.\n\na\nb"
    r = await call(full, "web_fetch", {"url": url, "format": "html"})
    assert text_of(r) == PAGE


async def test_a_page_without_text_says_so(full: ToolRegistry, web_server: WebServer) -> None:
    url = web_server.reply("/app", "<html><head><script>render()</script></head><body><div id=app></div></body></html>")
    for fmt in ("markdown", "text"):
        r = await call(full, "web_fetch", {"url": url, "format": fmt})
        assert not r.is_error and 'format "html" returns its source' in text_of(r)


async def test_other_text_is_returned_as_it_is_in_any_format(full: ToolRegistry, web_server: WebServer) -> None:
    body = '{"a": "<b>not html</b>"}\n'
    url = web_server.reply("/j", body, "application/json")
    for fmt in ("markdown", "text", "html"):
        r = await call(full, "web_fetch", {"url": url, "format": fmt})
        assert text_of(r) == body, fmt
    url = web_server.reply("/plain", "  spaced\n\n\n  text  ", "text/plain")
    assert text_of(await call(full, "web_fetch", {"url": url})) == "  spaced\n\n\n  text  "


async def test_charsets(full: ToolRegistry, web_server: WebServer) -> None:
    latin = web_server.reply("/latin", "<p>caf\xe9</p>".encode("latin-1"), "text/html; charset=ISO-8859-1")
    meta = web_server.reply("/meta", b"<meta charset='windows-1252'><p>\x93quoted\x94</p>", "text/html")
    bom = web_server.reply("/bom", "bom text".encode("utf-16"), "text/plain")
    broken = web_server.reply("/broken", b"ok \xff\xfe end", "text/plain; charset=utf-8")
    bogus = web_server.reply("/bogus", "caf\xe9".encode(), "text/plain; charset=base64")
    assert text_of(await call(full, "web_fetch", {"url": latin})) == "caf\xe9"
    assert text_of(await call(full, "web_fetch", {"url": meta})) == "\u201cquoted\u201d"
    assert text_of(await call(full, "web_fetch", {"url": bom})) == "bom text"
    assert text_of(await call(full, "web_fetch", {"url": broken})) == "ok \ufffd\ufffd end"
    assert text_of(await call(full, "web_fetch", {"url": bogus})) == "caf\xe9"  # not a text encoding: UTF-8
    strict = web_server.reply("/strict", b"caf\xc3\xa9 \xff", "text/plain; charset=idna")  # (strict errors only)
    assert text_of(await call(full, "web_fetch", {"url": strict})) == "caf\xe9 \ufffd"
    utf7 = web_server.reply("/utf7", b"a+2AA-b", "text/plain; charset=utf-7")  # a lone surrogate in UTF-7
    text = text_of(await call(full, "web_fetch", {"url": utf7}))
    assert text.encode("utf-8") and text.startswith("a") and text.endswith("b")


async def test_no_content_type_is_judged_by_the_bytes(full: ToolRegistry, web_server: WebServer,
                                                      artifacts: ArtifactStore) -> None:
    page = web_server.reply("/page", "<!DOCTYPE html><h1>T</h1>", None)
    plain = web_server.reply("/plain", "just text", None)
    blob = web_server.reply("/blob", b"\x00\x01\x02binary", None)
    assert text_of(await call(full, "web_fetch", {"url": page})) == "# T"
    assert text_of(await call(full, "web_fetch", {"url": plain})) == "just text"
    r = await call(full, "web_fetch", {"url": blob})
    assert artifacts.get(r.structured_content["artifact_id"]) == b"\x00\x01\x02binary"


# ---------------------------------------------------------------------------- binaries


async def test_an_image_is_stored_as_an_artifact_and_shown(full: ToolRegistry, web_server: WebServer,
                                                           artifacts: ArtifactStore) -> None:
    data = png(3, 2)
    url = web_server.reply("/i.png", data, "image/png")
    r = await call(full, "web_fetch", {"url": url})
    assert not r.is_error
    aid = r.structured_content["artifact_id"]
    assert artifacts.get(aid) == data
    assert r.structured_content["mime"] == "image/png" and r.structured_content["size"] == len(data)
    assert r.content[1] == t.ImagePart(aid, "image/png")
    assert f"saved as artifact {aid}" in text_of(r)
    assert r.events == [t.ArtifactStored(artifact_id=aid, sha256=aid, mime="image/png", size=len(data),
                                         source="web_fetch")]


async def test_an_image_that_is_not_whole_is_stored_but_not_shown(full: ToolRegistry, web_server: WebServer,
                                                                   artifacts: ArtifactStore) -> None:
    # An image cut short or of enormous declared size was shown to the model: a provider refuses
    # it, and it went with every later request of the session. Stored, and said why not shown.
    cut, huge = png(3, 2)[:-12], png_sized(100_000, 4)
    for path, data, why in (("/cut.png", cut, "the image is truncated (no IEND chunk)"),
                            ("/huge.png", huge, "the image is 100000x4 pixels; each side may be at most 8000")):
        with image_work_on_this_thread(data) as on_loop:  # (walked in a worker thread)
            r = await call(full, "web_fetch", {"url": web_server.reply(path, data, "image/png")})
        assert on_loop == []
        assert not r.is_error and [type(p) for p in r.content] == [t.TextPart], r.content
        aid = r.structured_content["artifact_id"]
        assert artifacts.get(aid) == data and r.structured_content["mime"] == "image/png"
        assert text_of(r).endswith(f"saved as artifact {aid} ({why}: not shown to the model)"), text_of(r)


async def test_a_pdf_is_stored_as_an_artifact_not_shown(full: ToolRegistry, web_server: WebServer,
                                                        artifacts: ArtifactStore) -> None:
    data = b"%PDF-1.7\n" + bytes(range(256)) * 10
    url = web_server.reply("/d.pdf", data, "application/pdf")
    r = await call(full, "web_fetch", {"url": url, "format": "text"})
    aid = r.structured_content["artifact_id"]
    assert artifacts.get(aid) == data and [type(p) for p in r.content] == [t.TextPart]
    assert "application/pdf" in text_of(r) and r.events[0].mime == "application/pdf"


async def test_a_binary_declared_as_text_is_stored_as_an_artifact(full: ToolRegistry, web_server: WebServer,
                                                                   artifacts: ArtifactStore) -> None:
    image, pdf, archive = png(2, 2), b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj", b"PK\x03\x04" + bytes(range(256))
    for path, data, declared, stored in (("/i", image, "text/plain", "image/png"),
                                         ("/d", pdf, "text/plain; charset=utf-8", "application/pdf"),
                                         ("/z", archive, "text/html", "application/zip"),
                                         ("/b", b"ab\x00\x01\xfe", "application/json", "application/octet-stream")):
        r = await call(full, "web_fetch", {"url": web_server.reply(path, data, declared)})
        assert not r.is_error and r.structured_content["mime"] == stored, (path, text_of(r))
        assert artifacts.get(r.structured_content["artifact_id"]) == data
        assert r.events[0].mime == stored and f"is {stored}" in text_of(r)
    # UTF-16 text holds NUL bytes and stays text
    wide = web_server.reply("/w", "wide".encode("utf-16-le"), "text/plain; charset=utf-16le")
    assert text_of(await call(full, "web_fetch", {"url": wide})) == "wide"


async def test_an_artifact_that_cannot_be_written_fails_the_call_only(full: ToolRegistry, web_server: WebServer,
                                                                       artifacts: ArtifactStore) -> None:
    artifacts.root.mkdir(parents=True)
    url = web_server.reply("/d.bin", b"\x00binary", "application/octet-stream")
    with unwritable(artifacts.root):
        r = await call(full, "web_fetch", {"url": url})
    assert r.error_code == "ARTIFACT_WRITE_FAILED", text_of(r)


# ---------------------------------------------------------------------------- transfer and encodings


async def test_a_chunked_body(full: ToolRegistry, web_server: WebServer) -> None:
    body = chunked(b"<p>one ", b"two ", b"three</p>")
    url = web_server.raw("/c", response(200, body, [("Content-Type", "text/html"), ("Transfer-Encoding", "chunked")],
                                        length=False))
    assert text_of(await call(full, "web_fetch", {"url": url})) == "one two three"


async def test_a_body_delimited_by_the_connection_closing(full: ToolRegistry, web_server: WebServer) -> None:
    url = web_server.raw("/eof", response(200, b"until close", [("Content-Type", "text/plain")], length=False))
    assert text_of(await call(full, "web_fetch", {"url": url})) == "until close"


async def test_gzip_and_both_kinds_of_deflate(full: ToolRegistry, web_server: WebServer) -> None:
    text = b"compressed " * 1000
    raw = zlib.compressobj(wbits=-15)
    urls = [
        web_server.gzip("/gz", text),
        web_server.raw("/zlib", response(200, zlib.compress(text), [("Content-Type", "text/plain"),
                                                                    ("Content-Encoding", "deflate")])),
        web_server.raw("/raw", response(200, raw.compress(text) + raw.flush(), [("Content-Type", "text/plain"),
                                                                                ("Content-Encoding", "deflate")])),
        web_server.raw("/gzc", response(200, chunked(gzip.compress(text)), [
            ("Content-Type", "text/plain"), ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")],
            length=False)),
    ]
    for url in urls:
        r = await call(full, "web_fetch", {"url": url})
        assert text_of(r) == text.decode() and r.structured_content["bytes"] == len(text), url


async def test_an_unsupported_or_broken_encoding(full: ToolRegistry, web_server: WebServer) -> None:
    br = web_server.raw("/br", response(200, b"\x1b\x00", [("Content-Encoding", "br")]))
    bad = web_server.raw("/bad", response(200, b"not gzip at all", [("Content-Encoding", "gzip")]))
    cut = web_server.raw("/cut", response(200, gzip.compress(b"x" * 5000)[:-12], [("Content-Encoding", "gzip")]))
    assert (await call(full, "web_fetch", {"url": br})).error_code == "CONTENT_ENCODING_UNSUPPORTED"
    assert (await call(full, "web_fetch", {"url": bad})).error_code == "HTTP_PROTOCOL_ERROR"
    assert (await call(full, "web_fetch", {"url": cut})).error_code == "HTTP_PROTOCOL_ERROR"


# ---------------------------------------------------------------------------- the 5 MiB cap


async def test_a_body_of_exactly_5_mib_passes_and_one_byte_more_does_not(full: ToolRegistry,
                                                                         web_server: WebServer) -> None:
    exact = web_server.reply("/exact", b"a" * MAX_BODY_BYTES, "text/plain")
    over = web_server.reply("/over", b"a" * (MAX_BODY_BYTES + 1), "text/plain")
    over_chunked = web_server.raw("/overc", response(
        200, chunked(*[b"a" * MiB] * 5, b"a"), [("Content-Type", "text/plain"), ("Transfer-Encoding", "chunked")],
        length=False))
    r = await call(full, "web_fetch", {"url": exact})
    assert not r.is_error and r.structured_content["bytes"] == MAX_BODY_BYTES == 5 * MiB
    for url in (over, over_chunked):
        r = await call(full, "web_fetch", {"url": url})
        assert r.error_code == "RESPONSE_TOO_LARGE", text_of(r)


async def test_a_declared_length_past_the_cap_is_refused_before_the_body(full: ToolRegistry, web_server: WebServer,
                                                                         autojump_clock) -> None:
    async def stalls(req: Request, stream: trio.SocketStream) -> None:
        await stream.send_all(f"HTTP/1.1 200 OK\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\nabc".encode())
        await trio.sleep(1000)
    start = trio.current_time()
    r = await call(full, "web_fetch", {"url": web_server.route("/stall", stalls)})
    assert r.error_code == "RESPONSE_TOO_LARGE" and trio.current_time() == start


async def test_the_cap_counts_decompressed_bytes(full: ToolRegistry, web_server: WebServer) -> None:
    exact = web_server.gzip("/gz-exact", b"\0" * MAX_BODY_BYTES, "application/octet-stream")
    bomb = web_server.gzip("/gz-over", b"\0" * (MAX_BODY_BYTES + 1), "application/octet-stream")
    huge = web_server.gzip("/gz-huge", b"\0" * (64 * MiB), "text/plain")  # ~64 KiB on the wire
    r = await call(full, "web_fetch", {"url": exact})
    assert not r.is_error and r.structured_content["size"] == MAX_BODY_BYTES
    assert (await call(full, "web_fetch", {"url": bomb})).error_code == "RESPONSE_TOO_LARGE"
    assert (await call(full, "web_fetch", {"url": huge})).error_code == "RESPONSE_TOO_LARGE"


# ---------------------------------------------------------------------------- redirects


def chain(server: WebServer, hops: int, final_body: str = "<p>arrived</p>") -> str:
    """``/hop0`` redirects to ``/hop1`` … ``/hop<hops>``, which answers ``final_body``."""
    for i in range(hops):
        server.redirect(f"/hop{i}", f"/hop{i + 1}" if i % 2 else server.url(f"/hop{i + 1}"), status=(301, 302, 303, 307, 308)[i % 5])
    server.reply(f"/hop{hops}", final_body)
    return server.url("/hop0")


async def test_five_redirects_are_followed_and_a_sixth_is_refused(full: ToolRegistry, web_server: WebServer,
                                                                  other_server: WebServer) -> None:
    r = await call(full, "web_fetch", {"url": chain(web_server, MAX_REDIRECTS)})
    assert not r.is_error and text_of(r).endswith("arrived")
    assert len(r.structured_content["redirects"]) == 5 == MAX_REDIRECTS
    r = await call(full, "web_fetch", {"url": chain(other_server, MAX_REDIRECTS + 1)})
    assert r.error_code == "TOO_MANY_REDIRECTS", text_of(r)
    assert [q.path for q in other_server.requests] == [f"/hop{i}" for i in range(6)]  # the 6th target never asked


async def test_a_redirect_is_checked_like_the_first_url(full: ToolRegistry, web_server: WebServer) -> None:
    creds = web_server.redirect("/to-creds", f"http://user:pw@127.0.0.1:{web_server.port}/x")
    ftp = web_server.redirect("/to-ftp", "ftp://127.0.0.1/file")
    broken = web_server.redirect("/to-broken", "http://[::1/x")
    r = await call(full, "web_fetch", {"url": creds})
    assert r.error_code == "URL_CREDENTIALS" and "pw" not in text_of(r)
    assert (await call(full, "web_fetch", {"url": ftp})).error_code == "URL_INVALID"
    assert (await call(full, "web_fetch", {"url": broken})).error_code == "URL_INVALID"
    assert [q.path for q in web_server.requests] == ["/to-creds", "/to-ftp", "/to-broken"]


async def test_credentials_in_a_redirect_are_refused_in_every_spelling(full: ToolRegistry,
                                                                        web_server: WebServer) -> None:
    target = f"127.0.0.1:{web_server.port}/x"
    for i, location in enumerate((f"//me:hunter2@{target}", f"http://me@{target}", f"http://me:@{target}",
                                  f"http://:hunter2@{target}", f"http://me%40x:hunter2@{target}",
                                  f"HTTP://ME:HUNTER2@{target}", f"http://me:hunter2@{target}#@x")):
        hop = web_server.redirect(f"/r{i}", location)
        r = await call(full, "web_fetch", {"url": hop})
        assert text_of(r) == (f"URL_CREDENTIALS: the redirect from {hop} to 'http://{target}' carries a user name "
                              f"or password (user:pass@host): URLs with credentials are not fetched"), location
    assert [q.path for q in web_server.requests] == [f"/r{i}" for i in range(7)]  # the target never asked


# A backslash in a Location is a slash (WHATWG, as browsers read it): each of these names the other
# server, not a path on this one, so its credentials are refused and its host is checked.
BACKSLASH_LOCATIONS = ["http:\\\\{}", "\\\\{}", "/\\{}", "/\\\\{}", "\\/{}", "http:/\\{}", "///{}"]


@pytest.mark.parametrize("spelling", BACKSLASH_LOCATIONS)
async def test_a_backslash_in_a_redirect_names_another_host(full: ToolRegistry, web_server: WebServer,
                                                            other_server: WebServer, spelling: str) -> None:
    other = f"127.0.0.2:{other_server.port}"
    other_server.reply("/x", "other host", "text/plain")
    hop = web_server.redirect("/creds", spelling.format(f"me:hunter2@{other}/x"))
    r = await call(full, "web_fetch", {"url": hop})
    assert text_of(r) == (f"URL_CREDENTIALS: the redirect from {hop} to 'http://{other}/x' carries a user name "
                          f"or password (user:pass@host): URLs with credentials are not fetched")
    hop = web_server.redirect("/plain", spelling.format(f"{other}/x"))
    r = await call(full, "web_fetch", {"url": hop})
    assert text_of(r) == f"[redirected to http://{other}/x]\n\nother host"
    assert [q.path for q in web_server.requests] == ["/creds", "/plain"]
    assert [q.path for q in other_server.requests] == ["/x"]


@pytest.mark.parametrize("spelling", BACKSLASH_LOCATIONS)
async def test_a_backslash_redirect_to_loopback_is_refused(artifacts: ArtifactStore, web_server: WebServer,
                                                           other_server: WebServer, spelling: str) -> None:
    # 127.0.0.2 is allowed by network; the host a backslash names is checked as any redirect's
    tool = ToolRegistry([web_fetch_tool(artifacts, networks=[ipaddress.ip_network("127.0.0.2/32")])])
    web_server.reply("/secret", "internal", "text/plain")
    hop = other_server.redirect("/hop", spelling.format(f"127.0.0.1:{web_server.port}/secret"))
    r = await call(tool, "web_fetch", {"url": hop})
    assert r.error_code == "ADDRESS_NOT_PUBLIC", text_of(r)
    assert web_server.requests == [] and [q.path for q in other_server.requests] == ["/hop"]


async def test_an_unreadable_location_is_refused_without_its_credentials(full: ToolRegistry,
                                                                         web_server: WebServer) -> None:
    hop = web_server.redirect("/r", "http://me:hunter2@[::1/x")
    r = await call(full, "web_fetch", {"url": hop})
    assert text_of(r) == f"URL_INVALID: the redirect from {hop} to 'http://[::1/x' is not a valid URL"


async def test_a_3xx_without_location_is_the_answer(full: ToolRegistry, web_server: WebServer) -> None:
    url = web_server.reply("/nr", "not modified", "text/plain", status=300, reason="Multiple Choices")
    r = await call(full, "web_fetch", {"url": url})
    assert not r.is_error and text_of(r) == "not modified" and r.structured_content["status"] == 300


# ---------------------------------------------------------------------------- the address rule


async def test_loopback_and_names_of_it_are_refused_without_full_access(public_only: ToolRegistry,
                                                                        web_server: WebServer) -> None:
    for url in (web_server.url("/x"), f"http://localhost:{web_server.port}/x", f"http://[::ffff:127.0.0.1]:{web_server.port}/",
                f"http://2130706433:{web_server.port}/", "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/",
                "http://[::1]/", "http://0.0.0.0/", "http://100.64.0.1/"):
        r = await call(public_only, "web_fetch", {"url": url})
        assert r.error_code == "ADDRESS_NOT_PUBLIC", (url, text_of(r))
    assert web_server.requests == []  # never connected


# Spellings of loopback and other non-public addresses in a URL's host: each is refused before any
# connection; the numeric ones that name 127.0.0.1 reach it with full access.
LOOPBACK_SPELLINGS = ["2130706433", "0177.0.0.1", "0x7f.1", "0x7f000001", "127.1", "[::ffff:127.0.0.1]",
                      "[::ffff:7f00:1]"]
NOT_PUBLIC_SPELLINGS = ["[64:ff9b::7f00:1]", "[2002:7f00:1::]", "0.0.0.0", "0", "[::]", "[::1]", "[fe80::1%25eth0]",
                        "[fe80::1%25lo]", "[fe80::a9fe:a9fe%251]", "[::127.0.0.1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
                        "[fd00::1]", "[fec0::1]", "100.64.0.1", "0x64.0x40.0.1", "1681915905", "[::ffff:100.64.0.1]",
                        "[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::1]", "[3fff::1]", "169.254.169.254", "0251.0376.0251.0376"]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS + NOT_PUBLIC_SPELLINGS)
async def test_spellings_of_non_public_addresses_are_refused(public_only: ToolRegistry, web_server: WebServer,
                                                             host: str) -> None:
    web_server.reply("/x", "internal", "text/plain")
    r = await call(public_only, "web_fetch", {"url": f"http://{host}:{web_server.port}/x"})
    assert r.error_code == "ADDRESS_NOT_PUBLIC", text_of(r)
    assert "not a public address" in text_of(r)
    assert web_server.requests == []


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
async def test_spellings_of_loopback_are_fetched_with_full_access(full: ToolRegistry, web_server: WebServer,
                                                                  host: str) -> None:
    r = await call(full, "web_fetch", {"url": web_server.reply("/x", "internal", "text/plain").replace("127.0.0.1", host)})
    assert text_of(r) == "internal"


async def test_a_mapped_address_is_named_in_dotted_form(public_only: ToolRegistry, full: ToolRegistry,
                                                        web_server: WebServer) -> None:
    # An IPv4-mapped IPv6 address was named in hex: "::ffff:7f00:1 is at ::ffff:7f00:1".
    web_server.reply("/x", "internal", "text/plain")
    for host in ("[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::FFFF:127.0.0.1]"):
        r = await call(public_only, "web_fetch", {"url": f"http://{host}:{web_server.port}/x"})
        assert text_of(r).startswith("ADDRESS_NOT_PUBLIC: ::ffff:127.0.0.1 is at ::ffff:127.0.0.1, not a public "
                                     "address; "), text_of(r)
    # and so in a refused connection's message
    r = await call(full, "web_fetch", {"url": "http://[::ffff:127.0.0.1]:1/x"})
    # (after the address, the reason trio gives, which names it as it does)
    assert text_of(r).startswith("CONNECTION_FAILED: cannot connect to ::ffff:127.0.0.1 port 1 (::ffff:127.0.0.1: "), \
        text_of(r)
    # (other IPv6 addresses are named as before)
    r = await call(public_only, "web_fetch", {"url": f"http://[::1]:{web_server.port}/x"})
    assert text_of(r).startswith("ADDRESS_NOT_PUBLIC: ::1 is at ::1, not a public address"), text_of(r)
    assert web_server.requests == []


async def test_a_mapped_address_in_an_allowed_network_is_fetched_and_one_outside_it_is_not(
        artifacts: ArtifactStore, web_server: WebServer, other_server: WebServer) -> None:
    # web.allowedPrivateNetworks ["127.0.0.2/32"] grants 127.0.0.2 in its IPv4-mapped form too,
    # and nothing else of 127.0.0.0/8 in that form
    tool = ToolRegistry([web_fetch_tool(artifacts, networks=[ipaddress.ip_network("127.0.0.2/32")])])
    other_server.reply("/x", "allowed", "text/plain")
    r = await call(tool, "web_fetch", {"url": f"http://[::ffff:127.0.0.2]:{other_server.port}/x"})
    assert not r.is_error and text_of(r) == "allowed"
    assert other_server.requests[0].headers["host"] == f"[::ffff:7f00:2]:{other_server.port}"
    r = await call(tool, "web_fetch", {"url": f"http://[::ffff:127.0.0.3]:{other_server.port}/x"})
    assert text_of(r).startswith("ADDRESS_NOT_PUBLIC: ::ffff:127.0.0.3 is at ::ffff:127.0.0.3, not a public "
                                 "address"), text_of(r)
    assert len(other_server.requests) == 1 and web_server.requests == []


async def test_a_trailing_dot_name_of_loopback_is_refused(public_only: ToolRegistry, web_server: WebServer) -> None:
    # (whether the system resolver knows "localhost." varies: it is refused either way)
    r = await call(public_only, "web_fetch", {"url": f"http://localhost.:{web_server.port}/x"})
    assert r.error_code in ("ADDRESS_NOT_PUBLIC", "DNS_FAILED"), text_of(r)
    assert web_server.requests == []


async def test_a_redirect_from_an_allowed_server_to_loopback_is_refused(artifacts: ArtifactStore,
                                                                        web_server: WebServer,
                                                                        other_server: WebServer) -> None:
    # 127.0.0.2 is allowed by network (web.allowedPrivateNetworks); 127.0.0.1 is not
    tool = ToolRegistry([web_fetch_tool(artifacts, networks=[ipaddress.ip_network("127.0.0.2/32")])])
    web_server.reply("/secret", "internal", "text/plain")
    ok = other_server.reply("/page", "<p>allowed</p>")
    assert text_of(await call(tool, "web_fetch", {"url": ok})) == "allowed"
    for location in (web_server.url("/secret"), f"http://localhost:{web_server.port}/secret"):
        hop = other_server.redirect("/hop", location)
        r = await call(tool, "web_fetch", {"url": hop})
        assert r.error_code == "ADDRESS_NOT_PUBLIC", text_of(r)
    assert web_server.requests == []  # the redirect target was never connected to


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS + NOT_PUBLIC_SPELLINGS)
async def test_a_redirect_to_any_spelling_of_a_non_public_address_is_refused(artifacts: ArtifactStore,
                                                                            web_server: WebServer,
                                                                            other_server: WebServer, host: str) -> None:
    tool = ToolRegistry([web_fetch_tool(artifacts, networks=[ipaddress.ip_network("127.0.0.2/32")])])
    web_server.reply("/secret", "internal", "text/plain")
    hop = other_server.redirect("/hop", f"http://{host}:{web_server.port}/secret")
    r = await call(tool, "web_fetch", {"url": hop})
    assert r.error_code == "ADDRESS_NOT_PUBLIC", text_of(r)
    assert web_server.requests == [] and len(other_server.requests) == 1


async def test_the_connection_goes_to_the_checked_address_with_the_name_as_host(full: ToolRegistry,
                                                                                web_server: WebServer) -> None:
    url = web_server.reply("/h", "x", "text/plain")
    await call(full, "web_fetch", {"url": url.replace("127.0.0.1", "localhost")})
    req = web_server.requests[-1]
    assert req.headers["host"] == f"localhost:{web_server.port}" and req.peer == "127.0.0.1"
    assert req.method == "GET" and req.target == "/h" and req.headers["connection"] == "close"


async def test_credentials_are_refused_before_any_connection(full: ToolRegistry, web_server: WebServer) -> None:
    url = web_server.reply("/c", "x", "text/plain")
    r = await call(full, "web_fetch", {"url": url.replace("http://", "http://me:hunter2@")})
    assert r.error_code == "URL_CREDENTIALS" and "hunter2" not in text_of(r)
    assert web_server.requests == []


# ---------------------------------------------------------------------------- failures


async def test_http_errors_carry_the_status_and_the_start_of_the_body(full: ToolRegistry,
                                                                      web_server: WebServer) -> None:
    url = web_server.reply("/gone", "<h1>Gone</h1><p>" + "why " * 1000 + "</p>", status=410, reason="Gone")
    r = await call(full, "web_fetch", {"url": url})
    assert r.error_code == "HTTP_ERROR"
    assert text_of(r).startswith(f"HTTP_ERROR: {url} answered 410 Gone\n\n# Gone\n\nwhy why")
    assert len(text_of(r)) < 2200
    r = await call(full, "web_fetch", {"url": web_server.url("/missing")})
    assert r.error_code == "HTTP_ERROR" and "404" in text_of(r)


async def test_connection_refused_and_malformed_answers(full: ToolRegistry, web_server: WebServer) -> None:
    with trio.socket.socket() as s:  # a port nobody listens on
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = await call(full, "web_fetch", {"url": f"http://127.0.0.1:{port}/"})
    assert r.error_code == "CONNECTION_FAILED"
    garbage = web_server.raw("/garbage", b"SSH-2.0-OpenSSH\r\n\r\n")
    early = web_server.raw("/early", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    cut = web_server.raw("/cut", response(200, b"5\r\nhel", [("Transfer-Encoding", "chunked")], length=False))
    nothing = web_server.raw("/nothing", b"")
    for url in (garbage, early, cut, nothing):
        r = await call(full, "web_fetch", {"url": url})
        assert r.error_code == "HTTP_PROTOCOL_ERROR", (url, text_of(r))


async def test_an_empty_body(full: ToolRegistry, web_server: WebServer) -> None:
    url = web_server.raw("/e", response(204, b"", reason="No Content"))
    r = await call(full, "web_fetch", {"url": url})
    assert not r.is_error and "empty" in text_of(r) and r.structured_content["status"] == 204


# ---------------------------------------------------------------------------- the time limit


def slow(server: WebServer, path: str, head_delay: float, body_delay: float) -> str:
    async def handler(req: Request, stream: trio.SocketStream) -> None:
        await trio.sleep(head_delay)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nfirst")
        await trio.sleep(body_delay)
        await stream.send_all(b"end")
    return server.route(path, handler)


async def test_the_timeout_covers_the_body(full: ToolRegistry, web_server: WebServer, autojump_clock) -> None:
    url = slow(web_server, "/slow-body", 0, 31)
    start = trio.current_time()
    r = await call(full, "web_fetch", {"url": url})  # default: 30 s
    assert r.error_code == "FETCH_TIMEOUT" and trio.current_time() - start == pytest.approx(30)
    r = await call(full, "web_fetch", {"url": slow(web_server, "/ok", 10, 19)})
    assert text_of(r) == "firstend"


async def test_the_timeout_covers_every_redirect_together(full: ToolRegistry, web_server: WebServer,
                                                          autojump_clock) -> None:
    async def slow_redirect(req: Request, stream: trio.SocketStream) -> None:
        n = int(req.path.removeprefix("/r"))
        await trio.sleep(4)  # each hop well within the limit; five of them are not
        await stream.send_all(response(302, b"", [("Location", f"/r{n + 1}")], reason="Found"))
    for i in range(5):
        web_server.route(f"/r{i}", slow_redirect)
    web_server.reply("/r5", "done", "text/plain")
    start = trio.current_time()
    r = await call(full, "web_fetch", {"url": web_server.url("/r0"), "timeout": 10})
    assert r.error_code == "FETCH_TIMEOUT" and trio.current_time() - start == pytest.approx(10)
    assert "2 redirect(s)" in text_of(r)
    r = await call(full, "web_fetch", {"url": web_server.url("/r0"), "timeout": 21})
    assert text_of(r).endswith("done")


async def test_the_longest_timeout_is_120_seconds(full: ToolRegistry, web_server: WebServer, autojump_clock) -> None:
    r = await call(full, "web_fetch", {"url": slow(web_server, "/s119", 0, 119), "timeout": 120})
    assert text_of(r) == "firstend"
    r = await call(full, "web_fetch", {"url": slow(web_server, "/s121", 0, 121), "timeout": 120})
    assert r.error_code == "FETCH_TIMEOUT"


# ---------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("args", [
    {}, {"url": 5}, {"url": None}, {"url": "http://x.example/", "format": "pdf"},
    {"url": "http://x.example/", "format": 1}, {"url": "http://x.example/", "timeout": 0},
    {"url": "http://x.example/", "timeout": -1}, {"url": "http://x.example/", "timeout": 121},
    {"url": "http://x.example/", "timeout": 120.001}, {"url": "http://x.example/", "timeout": "30"},
    {"url": "http://x.example/", "timeout": True}, {"url": "http://x.example/", "headers": {}},
    {"url": "http://x.example/", "full_access": True},
])
async def test_invalid_arguments(public_only: ToolRegistry, args: dict) -> None:
    r = await call(public_only, "web_fetch", args)
    assert r.error_code == "INVALID_ARGUMENT", text_of(r)


@pytest.mark.parametrize("args, said", [
    ({"url": None}, "url must be a string, got null"), ({"url": 5}, "url must be a string, got 5"),
    ({"url": ["http://x.example/"]}, 'url must be a string, got ["http://x.example/"]'),
    ({"format": {}}, "format must be one of markdown, text, html, got {}"),
    ({"format": "MARKDOWN"}, 'format must be one of markdown, text, html, got "MARKDOWN"'),
    ({"timeout": True}, "timeout must be a number of seconds above 0 and at most 120, got true"),
    ({"timeout": [30]}, "timeout must be a number of seconds above 0 and at most 120, got [30]"),
    ({"timeout": "30"}, 'timeout must be a number of seconds above 0 and at most 120, got "30"'),
    ({"timeout": 120.5}, "timeout must be a number of seconds above 0 and at most 120, got 120.5"),
])
async def test_a_refusal_quotes_the_value_as_json(public_only: ToolRegistry, args: dict, said: str) -> None:
    # As web_search's do: a model reads and writes JSON, and "got None", "got True", "got '30'" or
    # "got NoneType" (Python's spellings) named nothing it sent.
    r = await call(public_only, "web_fetch", {"url": "http://x.example/", **args})
    assert r.error_code == "INVALID_ARGUMENT" and text_of(r) == f"INVALID_ARGUMENT: {said}", text_of(r)


async def test_a_long_bad_value_is_quoted_short(public_only: ToolRegistry) -> None:
    r = await call(public_only, "web_fetch", {"url": "http://x.example/", "format": "f" * 5000})
    assert r.error_code == "INVALID_ARGUMENT" and len(text_of(r)) < 200 and text_of(r).endswith("…"), text_of(r)


async def test_timeout_edges_are_accepted(full: ToolRegistry, web_server: WebServer) -> None:
    url = web_server.reply("/t", "ok", "text/plain")
    for timeout in (120, 0.5, 1):
        assert text_of(await call(full, "web_fetch", {"url": url, "timeout": timeout})) == "ok"


async def test_the_schema_lists_the_arguments(artifacts: ArtifactStore) -> None:
    spec = web_fetch_tool(artifacts)
    assert spec.name == "web_fetch" and spec.read_only and spec.replay_safe
    props = spec.input_schema["properties"]
    assert set(props) == {"url", "format", "timeout"} and props["format"]["enum"] == ["markdown", "text", "html"]
    assert props["timeout"]["maximum"] == 120 and spec.input_schema["required"] == ["url"]


async def test_an_error_page_quoting_a_key_across_its_excerpts_cut_shows_its_marker(full: ToolRegistry,
                                                                                   web_server: WebServer) -> None:
    # The excerpt of an error page is cut at 2,000 characters: scrubbed first, the key across
    # the cut is its marker, left out whole where the cut would split it (a marker cut to
    # "[redacted " names no key); cut first, its first 10 characters reached the result.
    import dataclasses
    import json

    from events.secrets import Secrets

    from .conftest import ctx

    key = "sk-proj-Q7mZ4kT1vB8nR3wY6pJ0dF5hGcanaryFetch"
    url = web_server.reply("/gone", "w" * 1990 + key + " and more", status=410, reason="Gone", content_type="text/plain")
    keyed = dataclasses.replace(ctx(), secrets=Secrets({key: "LENS_TEST_KEY"}))
    r = await full.run("web_fetch", json.dumps({"url": url, "format": "text"}), keyed)
    assert r.error_code == "HTTP_ERROR"
    shown = text_of(r)
    assert shown.endswith("w" * 1990 + "…") and key[:8] not in shown and "[redacted" not in shown, shown[-80:]
