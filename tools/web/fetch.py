"""``web_fetch(url, format?, timeout?)`` (F-TOOL-8).

One GET, following at most :data:`MAX_REDIRECTS` redirects, all within ``timeout`` seconds
(default 30, at most 120): one wall-clock limit, from the call's start, covers DNS, every
redirect, the connection, the headers, the body (past it: ``FETCH_TIMEOUT``) and the conversion
of the body to text (past it: ``CONVERSION_FAILED``; the conversion has what the fetch left). Before each request (the first and every redirect's) the
URL is checked (:func:`~tools.web.address.parse_url`: http/https, no credentials) and its host
resolved; without full access only public addresses pass, and the connection is made to the
address that passed (:mod:`tools.web.http`), never to the name again. Full access is granted to
every call by the server config key ``web.allowPrivateAddresses`` (default off);
``web.allowedPrivateNetworks`` opens only the networks it lists (an intranet, say).

The body is held to :data:`MAX_BODY_BYTES` after decompression (5 MiB exactly is fine; one byte
more is ``RESPONSE_TOO_LARGE``, nothing returned). What comes back:

- HTML: as ``markdown`` (default; links resolved against the final URL), ``text`` or raw ``html``;
- other text (``text/*``, JSON, XML, JavaScript…): the text as it is, whatever the format;
- anything else (images, PDF, archives, ``application/octet-stream``): stored as an artifact; the
  result names its id (and shows a PNG/JPEG/GIF/WebP image to the model, as ``view_image`` does,
  if it is one ``view_image`` takes: whole, at most 8000 pixels a side; else it says why not).
- a body declared as text or HTML that is not (an image, PDF or archive by its first bytes, or NUL
  bytes in its first 8 KiB without a UTF-16/32 BOM or charset) is a binary too, under its sniffed type.

Text is decoded by its byte-order mark, else the Content-Type charset, else (HTML) a
``<meta charset>``, else UTF-8; undecodable bytes become U+FFFD. A status of 400 or more is the
error ``HTTP_ERROR`` with the status and the start of the body.
"""

from __future__ import annotations

import codecs
import re
import ssl
from dataclasses import dataclass
from typing import Any, Sequence

import trio

from events import types as t
from events.secrets import Secrets
from runtime.atomicfile import why_not_written
from runtime.errors import shortened_json, shortened_names  # (imports nothing: no cycle)

from ..artifacts import ArtifactStore, reads_as_text
from ..base import ToolContext, ToolError, ToolResult, ToolSpec
from ..files.image import fault as image_fault
from ..files.image import sniff as sniff_image
from . import html
from .address import IPNetwork, Resolver, SystemResolver, Url, join, parse_url, resolve, shown_url
from .http import TlsOnDemand, request

MAX_BODY_BYTES = 5 * 1024 * 1024
MAX_REDIRECTS = 5
DEFAULT_TIMEOUT = 30
MAX_TIMEOUT = 120
FORMATS = ("markdown", "text", "html")
REDIRECTS = (301, 302, 303, 307, 308)
ERROR_EXCERPT_CHARS = 2000

ACCEPT = {
    "markdown": "text/markdown;q=1.0, text/html;q=0.9, text/plain;q=0.8, */*;q=0.1",
    "text": "text/plain;q=1.0, text/html;q=0.9, */*;q=0.1",
    "html": "text/html;q=1.0, application/xhtml+xml;q=0.9, */*;q=0.1",
}
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = frozenset({
    "application/json", "application/xml", "application/javascript", "application/ecmascript",
    "application/x-javascript", "application/x-sh", "application/x-yaml", "application/yaml", "application/toml",
    "application/sql", "application/graphql", "application/x-ndjson", "application/jsonl", "application/csv",
    "application/x-www-form-urlencoded", "application/x-tex", "application/x-latex", "application/x-python",
})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
# Codecs Python counts as text encodings that are no character set: they rewrite escapes or
# host names (and punycode decodes in quadratic time: 512 KiB took 8 s). A page declaring one is
# read as UTF-8, as one declaring an unknown charset is.
_NOT_CHARSETS = frozenset({"punycode", "idna", "unicode-escape", "raw-unicode-escape", "undefined"})
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def check_arguments(args: dict[str, Any]) -> tuple[str, str, float]:
    """(url, format, timeout) of a web_fetch call, or ``INVALID_ARGUMENT``."""
    extra = sorted(set(args) - {"url", "format", "timeout"})
    if extra:
        raise ToolError("INVALID_ARGUMENT", f"web_fetch does not take {shortened_names(extra)}")
    if "url" not in args:
        raise ToolError("INVALID_ARGUMENT", "web_fetch needs 'url'")
    if not isinstance(args["url"], str):
        raise ToolError("INVALID_ARGUMENT", f"url must be a string, got {shortened_json(args['url'])}")
    # (an optional argument sent as null is that argument left out: its default)
    fmt = args.get("format")
    if fmt is None:
        fmt = "markdown"
    elif fmt not in FORMATS:
        raise ToolError("INVALID_ARGUMENT", f"format must be one of {', '.join(FORMATS)}, got {shortened_json(fmt)}")
    timeout = args.get("timeout")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
        raise ToolError("INVALID_ARGUMENT",
                        f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT}, got {shortened_json(timeout)}")
    return args["url"], fmt, float(timeout)


def web_fetch_tool(artifacts: ArtifactStore, *, full_access: bool = False, networks: Sequence[IPNetwork] = (),
                   tls: ssl.SSLContext | None = None, resolver: Resolver | None = None) -> ToolSpec:
    """The ``web_fetch`` tool. ``full_access``: every call may reach non-public addresses;
    ``networks``: non-public networks every call may reach. ``tls``: the certificate store for
    https (default: the system's). ``resolver``: looks host names up (default: a
    :class:`~tools.web.address.SystemResolver` of its own)."""
    networks = tuple(networks)
    tls_store = TlsOnDemand(tls)
    lookup = resolver or SystemResolver()

    async def fetch(url: Url, fmt: str, timeout: float, deadline: float,
                    secrets: Secrets) -> tuple[Url, list[str], Any]:
        # (a redirect's target is the server's text, cut in a message after the keys are replaced)
        redirects: list[str] = []
        current = url
        looking_up = False
        try:
            with trio.fail_at(deadline):
                while True:
                    looking_up = True
                    addresses = await resolve(current, full_access=full_access, networks=networks, resolver=lookup)
                    looking_up = False
                    resp = await request(current, addresses, headers=[("Accept", ACCEPT[fmt])],
                                         max_body=MAX_BODY_BYTES, tls=tls_store, secrets=secrets)
                    location = resp.header("location")
                    if resp.status not in REDIRECTS or location is None:
                        return current, redirects, resp
                    if len(redirects) == MAX_REDIRECTS:
                        raise ToolError("TOO_MANY_REDIRECTS", f"{secrets.cut(url.url, 300)} redirected more than "
                                                              f"{MAX_REDIRECTS} times (last to {secrets.cut(current.url, 300)})")
                    what = f"the redirect from {secrets.cut(current.url, 200)} to"
                    try:
                        target = join(current.url, _header_text(location).strip())
                    except ValueError:  # (e.g. "http://[::1": urlsplit refuses it)
                        raise ToolError("URL_INVALID", f"{what} {shown_url(location, secrets)} is not a valid URL") from None
                    current = parse_url(target, what=what, secrets=secrets)
                    redirects.append(current.url)
        except trio.TooSlowError:
            if looking_up:
                raise ToolError("FETCH_TIMEOUT", f"looking up the address of {current.host} did not finish within "
                                                 f"{timeout:g} s ({len(redirects)} redirect(s) followed)") from None
            raise ToolError("FETCH_TIMEOUT", f"{secrets.cut(url.url, 300)} did not answer in full within {timeout:g} s "
                                             f"({len(redirects)} redirect(s) followed)") from None

    async def web_fetch(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raw_url, fmt, timeout = check_arguments(args)
        deadline = trio.current_time() + timeout  # (the whole call's: fetch and conversion)
        url = parse_url(raw_url)
        final, redirects, resp = await fetch(url, fmt, timeout, deadline, ctx.secrets)
        limit = _Limit(deadline, timeout)
        content_type = resp.header("content-type")
        mime = (content_type or "").split(";", 1)[0].strip().lower()
        structured: dict[str, Any] = {"url": url.url, "final_url": final.url, "status": resp.status,
                                      "content_type": content_type, "format": fmt, "bytes": len(resp.body),
                                      "redirects": redirects}
        kind = _kind(mime, resp.body)
        if kind != "binary":
            lied = _binary_despite_type(resp.body, content_type)
            if lied is not None:  # (a Content-Type that says text over an image, a PDF, an archive)
                kind, mime = "binary", lied
        if resp.status >= 400:
            text = "" if kind == "binary" else await _excerpt_text(resp.body, content_type, kind, fmt, final, limit)
            excerpt = ctx.secrets.cut(text, ERROR_EXCERPT_CHARS, "…")  # (scrubbed before the cut)
            raise ToolError("HTTP_ERROR", f"{ctx.secrets.cut(final.url, 300)} answered {resp.status} {resp.reason}".rstrip()
                            + (f"\n\n{excerpt}" if excerpt.strip() else ""))
        note = f"[redirected to {final.url}]\n\n" if redirects else ""
        if not resp.body:
            return ToolResult.text(f"{note}(the response body of {final.url} is empty; status {resp.status})",
                                   structured)
        if kind == "binary":
            return await _binary(artifacts, resp.body, mime, final, note, structured)
        text, title = await _convert(resp.body, content_type, kind, fmt, final, limit, ctx.secrets)
        structured["title"] = title or None
        if not text.strip() and kind == "html" and fmt != "html":
            # (a page drawn by scripts: the model would see nothing and not know why)
            text = "(the page has no text outside scripts, styles and markup; format \"html\" returns its source)"
        return ToolResult.text(note + text, structured)

    return ToolSpec(
        "web_fetch",
        "Fetch a public http(s) URL: HTML comes back as markdown (default), text or html; other text as is; "
        f"binaries (images, PDF…) are saved as artifacts. timeout in seconds (default {DEFAULT_TIMEOUT}, at most "
        f"{MAX_TIMEOUT}) covers DNS, up to {MAX_REDIRECTS} redirects, the body (at most 5 MiB) and its conversion.",
        {"type": "object", "properties": {
            "url": {"type": "string", "description": "an http:// or https:// URL without credentials"},
            "format": {"enum": list(FORMATS), "default": "markdown"},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT, "default": DEFAULT_TIMEOUT}},
         "required": ["url"], "additionalProperties": False},
        web_fetch,
        replay_safe=True,
    )


def _header_text(value: str) -> str:
    """A header value as sent: UTF-8 if its bytes are (servers send UTF-8 in Location), else latin-1."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _kind(mime: str, body: bytes) -> str:
    """"html", "text" or "binary"; a response without a Content-Type is judged by its bytes."""
    if mime in HTML_TYPES:
        return "html"
    if mime.startswith("text/") or mime in TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if mime:
        return "binary"
    head = body[:1024].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if sniff_image(body) or not reads_as_text(body, whole=False):  # (a body may end inside a character)
        return "binary"
    return "text"


_BINARY_MAGIC = ((b"%PDF-", "application/pdf"), (b"PK\x03\x04", "application/zip"), (b"PK\x05\x06", "application/zip"),
                 (b"\x1f\x8b\x08", "application/gzip"), (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
                 (b"Rar!\x1a\x07", "application/vnd.rar"), (b"\x7fELF", "application/x-executable"))
_WIDE_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*(utf-?16|utf-?32|ucs-?2|ucs-?4)""", re.I)


def _binary_despite_type(body: bytes, content_type: str | None) -> str | None:
    """The MIME type of a body declared as text that is not: an image, PDF, archive or
    executable by its first bytes, or (``application/octet-stream``) NUL bytes in its first 8 KiB,
    unless a BOM or the charset says UTF-16/32. ``None``: the body may be the text it claims."""
    image = sniff_image(body)
    if image is not None:
        return image
    for magic, mime in _BINARY_MAGIC:
        if body.startswith(magic):
            return mime
    if b"\x00" in body[:8192] and not body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) \
            and not _WIDE_CHARSET.search(content_type or ""):
        return "application/octet-stream"
    return None


def decode(body: bytes, content_type: str | None, is_html: bool) -> str:
    """``body`` as text: BOM, else Content-Type charset, else (HTML) ``<meta charset>``, else UTF-8."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return _recordable(body.decode(encoding, errors="replace"))
    candidates = []
    m = re.search(r"""charset\s*=\s*["']?([^"';\s]+)""", content_type or "", re.I)
    if m:
        candidates.append(m.group(1))
    if is_html:
        m2 = _META_CHARSET.search(body[:4096])
        if m2 and not _WIDE_CHARSET.search("charset=" + m2.group(1).decode("ascii")):
            # (a <meta> read as ASCII proves the bytes are no UTF-16/32: such a one is ignored, as
            # browsers ignore it — WHATWG's prescan takes UTF-8 then)
            candidates.append(m2.group(1).decode("ascii"))
    for encoding in candidates:
        try:
            if codecs.lookup(encoding).name in _NOT_CHARSETS:
                continue
            return _recordable(body.decode(encoding, errors="replace"))
        except (LookupError, UnicodeError):  # unknown, not a text encoding ("base64"), strict only ("idna")
            continue
    return body.decode("utf-8", errors="replace")


def _recordable(text: str) -> str:
    """``text`` with any lone surrogate (a UTF-7 or UTF-16 oddity) replaced: the log stores UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # (as providers' well_formed)


@dataclass(frozen=True)
class _Limit:
    """The call's one wall-clock limit: ``deadline`` on trio's clock, ``timeout`` seconds after
    the call started."""
    deadline: float
    timeout: float


async def _convert(body: bytes, content_type: str | None, kind: str, fmt: str, final: Url,
                   limit: _Limit, secrets: Secrets | None = None) -> tuple[str, str | None]:
    """``body`` as the text the model gets, and the page's title. Raises ``CONVERSION_FAILED``
    for a page the converter fails on or does not finish before the call's deadline (the
    converter's reason, which may quote the page, cut after ``secrets`` are replaced whole)."""
    too_slow = ToolError("CONVERSION_FAILED", f"the page could not be converted to {fmt}: it did not finish within "
                                              f"the call's timeout of {limit.timeout:g} s; format \"html\" returns it "
                                              f"as sent (or a longer timeout leaves the conversion more time)")
    if kind != "html" or fmt == "html":
        # (decoding alone is linear, milliseconds for 5 MiB; the codecs that are not are never used)
        return decode(body, content_type, kind == "html"), None
    if limit.deadline <= trio.current_time():
        raise too_slow

    def work() -> tuple[str, str | None]:
        check = trio.from_thread.check_cancelled  # (raises Cancelled once the call's scope is cancelled)
        text = decode(body, content_type, True)
        return html.to_markdown(text, final.url, check) if fmt == "markdown" else html.to_text(text, check)

    # (html.parser on 5 MiB takes seconds: off the event loop.) The thread is not abandoned: at
    # the deadline, or when the call is cancelled, the scope's cancel reaches the thread at its
    # next check (one step of the parser), and the call returns once the thread has ended, so
    # no thread is left converting a page nobody waits for.
    try:
        with trio.move_on_at(limit.deadline):
            return await trio.to_thread.run_sync(work, abandon_on_cancel=False)
        raise too_slow
    except ToolError:
        raise
    except Exception as exc:
        # A page the converter cannot handle fails this call, not the session (the page is
        # anyone's input; a crash would restart the actor and fetch it again). Python 3.11's
        # parser raises AssertionError on some markup ("<![<!["), so no exception type is trusted.
        raise ToolError("CONVERSION_FAILED", f"the page could not be converted to {fmt} ({type(exc).__name__}: "
                                             f"{(secrets or Secrets()).cut(str(exc), 200)}); format \"html\" returns it as sent") from None


async def _excerpt_text(body: bytes, content_type: str | None, kind: str, fmt: str, final: Url,
                        limit: _Limit) -> str:
    """The text an ``HTTP_ERROR`` quotes from: the converted body, or nothing when the body
    cannot be converted (the status is the error; the page's own failure would hide it)."""
    try:
        return (await _convert(body, content_type, kind, fmt, final, limit))[0]
    except ToolError:
        return ""


async def _binary(artifacts: ArtifactStore, body: bytes, mime: str, final: Url, note: str,
                  structured: dict[str, Any]) -> ToolResult:
    try:
        aid = await trio.to_thread.run_sync(artifacts.put, body)
    except OSError as exc:  # (a full disk fails this call, not the session)
        raise ToolError("ARTIFACT_WRITE_FAILED", f"the fetched {mime or 'binary'} could not be stored "
                                                 f"({why_not_written(exc)})") from None
    image = sniff_image(body)
    stored_mime = image or mime or "application/octet-stream"
    structured.update({"artifact_id": aid, "sha256": aid, "mime": stored_mime, "size": len(body)})
    # (an image a model is sent is a whole one, as view_image takes: a provider refuses any other,
    # and with it every later request of the session)
    wrong = await trio.to_thread.run_sync(image_fault, body) if image is not None else None
    shown = "" if wrong is None else f" (the image {wrong[1]}: not shown to the model)"
    content: list[t.ContentPart] = [t.TextPart(
        f"{note}{final.url} is {stored_mime} ({len(body)} bytes), not text: saved as artifact {aid}{shown}")]
    if image is not None and wrong is None:
        content.append(t.ImagePart(aid, image))
    return ToolResult(content, structured, events=[t.ArtifactStored(
        artifact_id=aid, sha256=aid, mime=stored_mime, size=len(body), source="web_fetch")])
