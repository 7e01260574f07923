"""A loopback HTTP/1.1 server for the web tool tests, written by hand on trio sockets.

Each route is an async handler ``(request, stream)`` that writes the raw response bytes, so a
test can send exactly what it needs: chunked bodies, gzip, redirects, a body that stalls
(``trio.sleep``: virtual time under ``autojump_clock``), a malformed head. With ``tls`` it
serves https. One request per
connection; the server closes it after the handler returns. Every request is recorded.
"""

from __future__ import annotations

import gzip
import json
import ssl
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable

import trio

Handler = Callable[["Request", trio.SocketStream], Awaitable[None]]


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    peer: str  # the client's address

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def json(self) -> Any:
        return json.loads(self.body)


def response(status: int = 200, body: bytes = b"", headers: Iterable[tuple[str, str]] = (), *,
             reason: str = "OK", length: bool = True) -> bytes:
    """A whole response: status line, headers (plus Content-Length unless ``length`` is false), body."""
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers), "Connection: close"]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def png(width: int, height: int) -> bytes:
    """A valid PNG image of ``width`` x ``height`` red pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def chunked(*chunks: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c) + b"0\r\n\r\n"


@dataclass
class WebServer:
    host: str = "127.0.0.1"
    tls: ssl.SSLContext | None = None  # serve https with this (server-side) context
    routes: dict[str, Handler] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    port: int = 0

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    # -- routes

    def route(self, path: str, handler: Handler) -> str:
        self.routes[path] = handler
        return self.url(path)

    def raw(self, path: str, data: bytes) -> str:
        """``path`` answers exactly ``data``."""
        async def handler(req: Request, stream: trio.SocketStream) -> None:
            await stream.send_all(data)
        return self.route(path, handler)

    def reply(self, path: str, body: bytes | str = b"", content_type: str | None = "text/html; charset=utf-8", *,
              status: int = 200, reason: str = "OK", headers: Iterable[tuple[str, str]] = ()) -> str:
        data = body.encode() if isinstance(body, str) else body
        head = [("Content-Type", content_type)] if content_type else []
        return self.raw(path, response(status, data, [*head, *headers], reason=reason))

    def gzip(self, path: str, body: bytes, content_type: str = "text/plain") -> str:
        return self.raw(path, response(200, gzip.compress(body), [("Content-Type", content_type),
                                                                  ("Content-Encoding", "gzip")]))

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        return self.raw(path, response(status, b"moved", [("Location", location)], reason="Found"))

    # -- serving

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.serve_listeners(self._serve, listeners, handler_nursery=nursery)

    async def _serve(self, plain: trio.SocketStream) -> None:
        peer = plain.socket.getpeername()[0]
        stream: Any = trio.SSLStream(plain, self.tls, server_side=True) if self.tls else plain
        async with stream:
            try:
                req = await _read_request(stream, peer)
            except (trio.BrokenResourceError, ValueError):
                return
            if req is None:
                return
            self.requests.append(req)
            handler = self.routes.get(req.path)
            try:
                if handler is None:
                    await stream.send_all(response(404, b"no such page", [("Content-Type", "text/plain")],
                                                   reason="Not Found"))
                else:
                    await handler(req, stream)
            except trio.BrokenResourceError:
                pass  # the client went away (a timeout, a size limit): nothing to answer


async def _read_request(stream: Any, peer: str) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    line, *header_lines = head.decode("latin-1").split("\r\n")
    method, target, _version = line.split(" ", 2)
    headers = {}
    for h in header_lines:
        k, _, v = h.partition(":")
        headers[k.strip().lower()] = v.strip()
    need = int(headers.get("content-length", "0"))
    while len(body) < need:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        body += chunk
    return Request(method, target, headers, body, peer)
