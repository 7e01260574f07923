"""``web_fetch`` of bodies built to break or stall what reads them (F-TOOL-8), from real loopback
servers (tests/web/server.py): pages the stdlib HTML parser fails on or takes hours over, charsets
that are no character sets, gzip bodies of several members.

A page is anyone's input: whatever it holds, the call ends in bounded time with a result or a
stable error code, never an exception (which would crash the session's actor, whose restart
fetches the same page again).
"""

from __future__ import annotations

import gzip
import os
import time

import trio

from tools.artifacts import ArtifactStore
from tools.base import ToolRegistry
from tools.web import web_fetch_tool
from tools.web.fetch import MAX_BODY_BYTES
from tools.web.http import WIRE_SLACK

from .conftest import call, text_of
from .server import WebServer


async def test_a_page_the_html_parser_fails_on_is_a_conversion_failure(full: ToolRegistry,
                                                                        web_server: WebServer) -> None:
    # Python 3.11's _markupbase raises AssertionError on "<![" not followed by a name.
    url = web_server.reply("/assert", "<p>before</p><![<![ x")
    for fmt in ("markdown", "text"):
        r = await call(full, "web_fetch", {"url": url, "format": fmt})
        assert r.error_code == "CONVERSION_FAILED", text_of(r)
        assert 'format "html" returns it as sent' in text_of(r)
    r = await call(full, "web_fetch", {"url": url, "format": "html"})
    assert not r.is_error and text_of(r) == "<p>before</p><![<![ x"
    # the same page as an error body: the HTTP error is still reported, with no excerpt
    bad = web_server.reply("/assert-404", "<![<![", status=404, reason="Not Found")
    r = await call(full, "web_fetch", {"url": bad})
    assert r.error_code == "HTTP_ERROR" and "404" in text_of(r)


async def test_a_page_that_makes_the_parser_quadratic_ends_at_the_conversion_limit(
        artifacts: ArtifactStore, web_server: WebServer) -> None:
    # Each "<a" with no ">" after it makes html.parser scan to the end of the page: 1 MiB of
    # them takes minutes (5 MiB, hours), in a thread nothing can stop.
    registry = ToolRegistry([web_fetch_tool(artifacts, full_access=True, convert_limit=0.5)])
    url = web_server.reply("/slow", "<p>x</p>" + "<a" * (512 * 1024))
    for fmt in ("markdown", "text"):
        started = time.monotonic()
        with trio.fail_after(60):
            r = await call(registry, "web_fetch", {"url": url, "format": fmt})
        assert r.error_code == "CONVERSION_FAILED", text_of(r)
        assert "did not finish within 0.5 s" in text_of(r)
        assert time.monotonic() - started < 10
    r = await call(registry, "web_fetch", {"url": url, "format": "html"})
    assert not r.is_error and r.structured_content["bytes"] == 8 + 1024 * 1024
    # a plain page of the same size is converted well within the limit
    page = web_server.reply("/fine", "<p>" + "word " * (200 * 1024) + "</p>")
    r = await call(registry, "web_fetch", {"url": page})
    assert not r.is_error and text_of(r).startswith("word word")


async def test_a_charset_that_is_no_character_set_is_read_as_utf8(full: ToolRegistry,
                                                                   web_server: WebServer) -> None:
    # punycode decoding is quadratic (512 KiB took 8 s); the escapes codecs rewrite the text
    slow = ("a" * (512 * 1024) + "-" + "99" * (128 * 1024)).encode()
    for charset in ("punycode", "unicode_escape", "raw-unicode-escape", "undefined"):
        url = web_server.reply(f"/{charset}", slow, f"text/plain; charset={charset}")
        with trio.fail_after(30):
            r = await call(full, "web_fetch", {"url": url})
        assert not r.is_error and text_of(r) == slow.decode(), charset
    meta = web_server.reply("/meta", b"<meta charset=punycode><p>caf\xc3\xa9 \\u0041</p>", "text/html")
    assert text_of(await call(full, "web_fetch", {"url": meta})) == "caf\xe9 \\u0041"


async def test_a_meta_charset_of_utf16_or_utf32_is_ignored(full: ToolRegistry, web_server: WebServer) -> None:
    # A <meta> found by reading the bytes as ASCII shows they are not UTF-16/32; decoding the
    # page as the tag says gave the model a line of CJK noise (browsers read it as UTF-8).
    for charset in ("utf-16", "UTF-16LE", "utf-32", "ucs-2"):
        url = web_server.reply(f"/wide-{charset}", f"<meta charset='{charset}'><p>caf\xe9</p>".encode(), "text/html")
        assert text_of(await call(full, "web_fetch", {"url": url})) == "caf\xe9", charset
    # the header's charset still wins, as in browsers (a real UTF-16 page)
    wide = web_server.reply("/wide-header", "<p>caf\xe9</p>".encode("utf-16-le"), "text/html; charset=utf-16le")
    assert text_of(await call(full, "web_fetch", {"url": wide})) == "caf\xe9"


async def test_every_member_of_a_gzip_body_is_decoded(full: ToolRegistry, web_server: WebServer) -> None:
    # RFC 1952: a gzip file is a series of members (what `cat a.gz b.gz` makes); the first
    # alone is a page cut short with nothing to say so.
    body = gzip.compress(b"first half, ") + gzip.compress(b"second half")
    url = web_server.raw("/members", b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
                                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    r = await call(full, "web_fetch", {"url": url})
    assert not r.is_error and text_of(r) == "first half, second half"


async def test_an_encoded_body_is_held_to_the_cap_and_a_slack_as_sent(full: ToolRegistry, web_server: WebServer) -> None:
    # Padding after the last gzip member decodes to nothing; without a bound on the bytes as
    # sent it was read until the server stopped or the call's time ran out.
    member = gzip.compress(b"ok")
    room = MAX_BODY_BYTES + WIRE_SLACK - len(member)
    for name, padding, ok in (("at", room, True), ("past", room + 1, False)):
        body = member + b"\0" * padding
        url = web_server.raw(f"/pad-{name}", b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
                                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        r = await call(full, "web_fetch", {"url": url})
        if ok:
            assert not r.is_error and text_of(r) == "ok", text_of(r)
        else:
            assert r.error_code == "RESPONSE_TOO_LARGE" and "as sent" in text_of(r), text_of(r)
    # a real body at the cap that does not compress stays within the slack
    data = os.urandom(MAX_BODY_BYTES)
    url = web_server.gzip("/random", data, "application/octet-stream")
    r = await call(full, "web_fetch", {"url": url})
    assert not r.is_error and r.structured_content["size"] == MAX_BODY_BYTES
