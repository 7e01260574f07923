"""A small HTTP/1.1 client on trio and h11, for the web tools.

One request per connection (``Connection: close``), to an address the caller chose: the
connection goes to that IP, while the ``Host`` header and the TLS server name (SNI and
certificate check) are the URL's host. That is how ``web_fetch`` pins a request to the address it
validated. The response body is decoded (``gzip`` / ``deflate``) as it arrives and held to
``max_body`` bytes *after* decoding; one byte more is ``RESPONSE_TOO_LARGE`` (no truncation).

Time limits are the caller's (``trio.fail_after`` around the call): nothing here waits on its
own clock. Errors are :class:`~tools.base.ToolError` with stable codes:

    CONNECTION_FAILED  no address accepted the connection
    TLS_FAILED         the TLS handshake failed (certificate, protocol)
    HTTP_PROTOCOL_ERROR  the server's bytes are not HTTP/1.x (or it closed mid-message), or
                         more than :data:`MAX_INFORMATIONAL` informational (1xx) responses, or
                         more than :data:`MAX_INFORMATIONAL_BYTES` of them, came before the
                         final one
    RESPONSE_TOO_LARGE   the decoded body passed ``max_body`` bytes (an encoded one: or its
                         encoded bytes passed ``max_body`` + :data:`WIRE_SLACK`)
    CONTENT_ENCODING_UNSUPPORTED  a Content-Encoding other than gzip, deflate or identity
"""

from __future__ import annotations

import ssl
import zlib
from dataclasses import dataclass
from typing import Sequence

import h11
import trio

from events.secrets import Secrets

from ..base import ToolError
from .address import IPAddress, Url, shown_address, shown_host

USER_AGENT = "lens-web/0.1"
READ_CHUNK = 65536
ATTEMPT_DELAY = 0.25  # seconds before the next address is tried alongside (RFC 8305's default)
MAX_HEADER_BYTES = 64 * 1024  # a response head larger than this is HTTP_PROTOCOL_ERROR
# Informational (1xx) responses taken before the final one: a real server sends one or two
# (100 Continue, 103 Early Hints); one that sends them without end would otherwise be read (up
# to 64 KiB each) until the caller's time ran out. One more is HTTP_PROTOCOL_ERROR.
MAX_INFORMATIONAL = 16
# Their heads together, in bytes as sent: no more than one head may be. Each head is held to
# MAX_HEADER_BYTES by h11, so a series bounded by count alone was up to 17 x 64 KiB read before
# the refusal; now at most this, plus the head being read when it is passed (and one read).
MAX_INFORMATIONAL_BYTES = MAX_HEADER_BYTES
# How many more bytes an encoded (gzip/deflate) body may have on the wire than ``max_body``.
# Compression adds a few bytes per block to data it cannot shrink (5 MiB of random bytes: about
# 2 KiB); more is padding after the last member or a stream of empty members, which would
# otherwise be read (and thrown away) until the call's time ran out.
WIRE_SLACK = 64 * 1024


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]  # names lower-cased, values latin-1 decoded, in order
    body: bytes  # decoded (Content-Encoding undone)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or ``None``."""
        for k, v in self.headers:
            if k == name:
                return v
        return None


class TlsOnDemand:
    """The certificate store for https, made at its first use (loading the system's trusted CAs
    is slow) and kept by its owner, a tool: ``given`` replaces the system's store (tests)."""

    def __init__(self, given: ssl.SSLContext | None = None) -> None:
        self._context = given

    def get(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = ssl.create_default_context()  # the system's CAs, hostnames checked
        return self._context


class _Decoder:
    """Undo a response's Content-Encoding, holding the output to ``limit`` bytes."""

    def __init__(self, content_encoding: str, limit: int, secrets: Secrets) -> None:
        self.limit = limit
        self.out = bytearray()
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise ToolError("CONTENT_ENCODING_UNSUPPORTED", f"the response is encoded as {secrets.cut(content_encoding, 60)!r}; "
                                                            f"only one of gzip or deflate is supported")
        self.encoding = codings[0] if codings else ""
        self.z: zlib._Decompress | None = None
        self.pending = b""  # deflate: the first bytes, until they tell zlib-wrapped from raw; gzip: a next member's
        self.trailing_ignored = False  # bytes after the last gzip member that start none
        self.fed = False
        self.wire = 0  # encoded bytes fed

    def feed(self, data: bytes) -> None:
        if not self.encoding:
            self._add(data)
            return
        self.fed = self.fed or bool(data)
        self.wire += len(data)
        if self.wire > self.limit + WIRE_SLACK:
            raise ToolError("RESPONSE_TOO_LARGE", f"the {self.encoding} response body is larger than "
                                                  f"{self.limit + WIRE_SLACK} bytes as sent ({len(self.out)} "
                                                  f"decoded so far)")
        if self.z is None:
            if self.encoding != "deflate":
                self.z = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                # "deflate" is meant to be zlib-wrapped (RFC 9110), but some servers send raw deflate
                self.pending += data
                if len(self.pending) < 2:
                    return
                data, self.pending = self.pending, b""
                zlib_wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
                self.z = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        try:
            while data:
                if self.z.eof:
                    data = self._after_end(data)
                    if not data:
                        return
                # At most one byte past the limit is asked for: enough to know the limit is passed.
                self._add(self.z.decompress(data, self.limit - len(self.out) + 1))
                data = self.z.unused_data if self.z.eof else self.z.unconsumed_tail
        except zlib.error as exc:
            raise ToolError("HTTP_PROTOCOL_ERROR", f"the {self.encoding} body cannot be decoded ({exc})") from None

    def _after_end(self, data: bytes) -> bytes:
        """What to decode of ``data``, which follows the end of the stream: a gzip body may be
        several members (RFC 1952; what ``cat a.gz b.gz`` makes), each decoded in turn into the
        same output (a fresh decoder is started, and ``data`` returned); bytes that start no
        member (padding) are ignored to the end of the body, as ``gzip -d`` ignores them, and so
        is anything after a deflate stream (``b""`` returned)."""
        data, self.pending = self.pending + data, b""
        if self.encoding == "deflate" or self.trailing_ignored:
            return b""
        if len(data) < 2:  # (a member's magic number may come split over two reads)
            self.pending = data
            return b""
        if not data.startswith(b"\x1f\x8b"):
            self.trailing_ignored = True
            return b""
        self.z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return data

    def finish(self) -> bytes:
        if self.encoding and self.fed:  # (an empty body is empty, whatever its declared encoding)
            if self.z is None or not self.z.eof:
                raise ToolError("HTTP_PROTOCOL_ERROR", f"the {self.encoding} body ended before its end marker")
        return bytes(self.out)

    def _add(self, chunk: bytes) -> None:
        if len(self.out) + len(chunk) > self.limit:
            raise ToolError("RESPONSE_TOO_LARGE", f"the response body is larger than {self.limit} bytes "
                                                  f"(after decompression)")
        self.out += chunk


async def connect(url: Url, addresses: Sequence[IPAddress], *,
                  tls: TlsOnDemand | None = None) -> trio.abc.Stream:
    """A connection to the first of ``addresses`` that accepts one (TLS for https, checked
    against ``url.host``)."""
    stream = await _first_connection(addresses, url)
    if url.scheme != "https":
        return stream
    ssl_stream = trio.SSLStream(stream, (tls or TlsOnDemand()).get(), server_hostname=url.host,
                                https_compatible=True)
    try:
        await ssl_stream.do_handshake()
    except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
        await trio.aclose_forcefully(stream)
        cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
        raise ToolError("TLS_FAILED", f"TLS with {url.host} failed ({cause})") from None
    return ssl_stream


async def _first_connection(addresses: Sequence[IPAddress], url: Url) -> trio.SocketStream:
    """A TCP connection to one of ``addresses`` (all checked already): tried in order, the next
    one started when the one before has failed or has not connected within
    :data:`ATTEMPT_DELAY` (Happy Eyeballs, RFC 8305), so an address that swallows packets (a
    broken IPv6 route) costs a quarter second, not the call's time limit. The first to connect
    wins; the others are cancelled (or closed, had they connected too)."""
    winner: list[trio.SocketStream] = []
    errors: list[str] = []
    async with trio.open_nursery() as nursery:
        for ip in addresses:
            failed = trio.Event()

            async def attempt(ip: IPAddress = ip, failed: trio.Event = failed) -> None:
                try:
                    stream = await trio.open_tcp_stream(str(ip), url.port)
                except OSError as exc:
                    errors.append(f"{shown_address(ip)}: {exc.strerror or exc}")
                    failed.set()
                    return
                if winner:
                    await trio.aclose_forcefully(stream)
                    return
                winner.append(stream)
                nursery.cancel_scope.cancel()

            nursery.start_soon(attempt)
            with trio.move_on_after(ATTEMPT_DELAY):
                await failed.wait()
    if not winner:
        raise ToolError("CONNECTION_FAILED", f"cannot connect to {shown_host(url.host)} port {url.port} ("
                                             f"{'; '.join(errors[:4]) or 'no address'})")
    return winner[0]


async def request(url: Url, addresses: Sequence[IPAddress], *, method: str = "GET",
                  headers: Sequence[tuple[str, str]] = (), body: bytes | None = None, max_body: int,
                  tls: TlsOnDemand | None = None, secrets: Secrets | None = None) -> Response:
    """Send one request to ``url`` over a connection to one of ``addresses``; return the
    response with its body decoded and at most ``max_body`` bytes. Raises :class:`ToolError`
    (codes in the module docstring). The connection is closed before this returns.
    ``secrets``: replaced whole in ``url`` before a message cuts it (a redirect's target is
    the server's text)."""
    stream = await connect(url, addresses, tls=tls)
    try:
        return await _exchange(stream, url, method, headers, body, max_body, secrets or Secrets())
    finally:
        await trio.aclose_forcefully(stream)


async def _exchange(stream: trio.abc.Stream, url: Url, method: str, headers: Sequence[tuple[str, str]],
                    body: bytes | None, max_body: int, secrets: Secrets) -> Response:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
    head = [("Host", url.host_header), ("User-Agent", USER_AGENT), ("Accept-Encoding", "gzip, deflate"),
            ("Connection", "close"), *headers]
    if body is not None:
        head.append(("Content-Length", str(len(body))))
    try:
        out = conn.send(h11.Request(method=method, target=url.target, headers=head))
        if body:
            out += conn.send(h11.Data(data=body))
        out += conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError as exc:
        raise ToolError("URL_INVALID", f"{secrets.cut(url.url, 200)!r} cannot be requested ({exc})") from None
    await _send(stream, out)

    response: h11.Response | None = None
    decoder: _Decoder | None = None
    informational = 0
    received = 0  # bytes handed to h11
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise ToolError("HTTP_PROTOCOL_ERROR", f"{url.host} sent a malformed HTTP response ({exc})") from None
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive_some(READ_CHUNK)
            except trio.BrokenResourceError as exc:
                raise ToolError("HTTP_PROTOCOL_ERROR", f"the connection to {url.host} broke ({exc.__cause__ or exc})") from None
            conn.receive_data(data)
            received += len(data)
            continue
        if isinstance(event, h11.InformationalResponse):
            informational += 1  # 100 Continue, 103 Early Hints: the real answer follows
            if informational > MAX_INFORMATIONAL:
                raise ToolError("HTTP_PROTOCOL_ERROR", f"{url.host} sent more than {MAX_INFORMATIONAL} informational "
                                                       f"(1xx) responses and no final response")
            # (what h11 has not parsed yet is the rest: the bytes parsed are the heads so far, exactly)
            heads = received - len(conn.trailing_data[0])
            if heads > MAX_INFORMATIONAL_BYTES:
                raise ToolError("HTTP_PROTOCOL_ERROR", f"{url.host} sent informational (1xx) responses of {heads} "
                                                       f"bytes together, more than {MAX_INFORMATIONAL_BYTES}, and no "
                                                       f"final response")
            continue
        if isinstance(event, h11.Response):
            response = event
            decoder = _Decoder(_header(event.headers, b"content-encoding"), max_body, secrets)
            declared = _header(event.headers, b"content-length")
            if not decoder.encoding and declared.isascii() and declared.isdigit() and int(declared) > max_body:
                # (refused before a byte of it is read)
                raise ToolError("RESPONSE_TOO_LARGE", f"the response body is {declared} bytes, more than {max_body}")
        elif isinstance(event, h11.Data):
            assert decoder is not None
            decoder.feed(event.data)
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None and decoder is not None
            return Response(
                response.status_code, response.reason.decode("latin-1"),
                [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.headers],
                decoder.finish())
        elif isinstance(event, h11.ConnectionClosed):
            raise ToolError("HTTP_PROTOCOL_ERROR", f"{url.host} closed the connection before a complete response")


async def _send(stream: trio.abc.Stream, data: bytes) -> None:
    try:
        await stream.send_all(data)
    except trio.BrokenResourceError as exc:
        # (a server may answer and close before reading a request body; the answer is still read)
        if not isinstance(exc.__cause__, (BrokenPipeError, ConnectionResetError)):
            raise ToolError("HTTP_PROTOCOL_ERROR", f"the request could not be sent ({exc.__cause__ or exc})") from None


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str:
    values = [v.decode("latin-1") for k, v in headers if k.lower() == name]
    return ",".join(values)
