"""A direct write path for SSE bodies: HTTP/1.1 chunks written straight to the connection's socket.

Why: with hundreds of subscribers, each body write through quart → hypercorn → h11 → trio's
``SocketStream`` costs tens of microseconds of Python (the ASGI event dict, h11's state machine,
hypercorn's send lock and shielded cancel scope, trio's conflict detector, error translation and
two scheduler checkpoints) around one ``send`` system call. Profiled at 500 subscribers that path
was ~2/3 of the daemon's event-loop thread. Here one body write is one ``writev`` of
``<hex size>\\r\\n`` + the (shared, pre-joined) frame bytes + ``\\r\\n``: byte for byte what h11's
``ChunkedWriter`` would have written, and the response still starts (status, headers, first chunk)
and ends (``0\\r\\n\\r\\n``) through hypercorn, so h11's state stays consistent.

It is used only when it is certainly safe: plain-TCP HTTP/1.1 on hypercorn's trio worker with a
chunked response (h11's writer is its ``ChunkedWriter``); anything else (TLS, HTTP/2, HTTP/1.0,
another server, a hypercorn whose internals differ) gets ``None`` and the stream is written the
ordinary way. While a stream is open nothing else writes to its connection (HTTP/1.1 serves one
request at a time), and a write never interleaves with the quart path because both happen in
the stream's own task, one after the other.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any, Callable

import trio

SCOPE_KEY = "lens.asgi_send"  # the ASGI ``send`` callable, put into the scope by :func:`keep_send`
STOP_POLL_SECONDS = 0.25  # a blocked write looks at its stop condition this often


def keep_send(asgi_app: Any) -> Any:
    """Wrap an ASGI app so each HTTP scope carries its ``send`` callable (for :func:`direct_writer`)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            scope[SCOPE_KEY] = send
        await asgi_app(scope, receive, send)

    return app


class ChunkedSocketWriter:
    """Writes HTTP/1.1 chunks to a connection's non-blocking socket; waits (cancellably) when full.

    The bus calls :meth:`write_nowait` from its tick for parked streams (no task wake-up); the
    stream's own task finishes a partial write with :meth:`write_rest`. The socket's descriptor
    is read at every write, never kept: once hypercorn closes the connection it reads as -1 and
    the write fails as a gone client, so bytes can never reach a later connection that reuses
    the number (every write happens on the event-loop thread, between two checks of the socket).
    """

    __slots__ = ("sock",)

    def __init__(self, sock: Any) -> None:
        self.sock = sock  # the trio socket under hypercorn's SocketStream

    def write_nowait(self, data: bytes) -> memoryview | None:
        """Write ``data`` as one chunk as far as the socket takes it now; return the rest, if any.

        Raises ``OSError`` (e.g. ``BrokenPipeError``) if the connection is gone.
        """
        if not data:
            return None
        fd = self.sock.fileno()
        if fd < 0:
            raise BrokenPipeError("the connection is closed")
        head = b"%x\r\n" % len(data)
        total = len(head) + len(data) + 2
        try:
            n = os.writev(fd, (head, data, b"\r\n"))
        except BlockingIOError:
            n = 0
        if n == total:
            return None
        return memoryview(head + data + b"\r\n")[n:]

    async def write_rest(self, rest: memoryview, *, stall_seconds: float | None = None,
                         stop: Callable[[], bool] | None = None) -> None:
        """Finish a chunk :meth:`write_nowait` started, waiting (cancellably) for the socket.

        A client that takes no byte for ``stall_seconds``, or ``stop()`` turning true (the
        daemon stopping), ends the wait: the connection is reset (:meth:`abort`) and
        ``BrokenPipeError`` raised. Without that, a client that stopped reading held its
        connection, its task and a copy of the chunk for as long as it lived.
        """
        deadline = None if stall_seconds is None else trio.current_time() + stall_seconds
        while rest:
            if (stop is not None and stop()) or (deadline is not None and trio.current_time() >= deadline):
                self.abort()
                raise BrokenPipeError("the client stopped reading; the connection was reset")
            with trio.move_on_after(STOP_POLL_SECONDS) as waited:
                try:
                    await trio.lowlevel.wait_writable(self.sock)
                except trio.ClosedResourceError:
                    raise BrokenPipeError("the connection is closed") from None
            if waited.cancelled_caught:
                continue
            fd = self.sock.fileno()
            if fd < 0:
                raise BrokenPipeError("the connection is closed")
            try:
                n = os.write(fd, rest)
            except BlockingIOError:
                continue
            rest = rest[n:]
            if n and stall_seconds is not None:
                deadline = trio.current_time() + stall_seconds

    async def write(self, data: bytes, *, stall_seconds: float | None = None,
                    stop: Callable[[], bool] | None = None) -> None:
        rest = self.write_nowait(data)
        if rest is not None:
            await self.write_rest(rest, stall_seconds=stall_seconds, stop=stop)

    def abort(self) -> None:
        """Reset the connection: linger 0, then shut it down both ways. Hypercorn's next write
        (the end of the response) fails and it closes the socket, which sends a RST and drops
        what the client never read, instead of keeping it queued."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def direct_writer(scope: dict[str, Any]) -> ChunkedSocketWriter | None:
    """The direct writer for this response, or ``None`` if the ordinary path must be used.

    Call it only after the response's headers and first body chunk went out through the server
    (i.e. after the body generator's first ``yield`` returned).
    """
    if scope.get("http_version") != "1.1" or scope.get("scheme") != "http":
        return None
    try:
        import h11
        from h11._writers import ChunkedWriter
        from hypercorn.protocol.h11 import H11Protocol

        found = _server_of(scope)
        if found is None:
            return None
        proto, sock = found
        if type(proto) is not H11Protocol:
            return None
        conn = proto.connection
        if type(conn) is not h11.Connection or conn.our_state is not h11.SEND_BODY:
            return None
        if not isinstance(getattr(conn, "_writer", None), ChunkedWriter):
            return None
        return ChunkedSocketWriter(sock)
    except Exception:  # noqa: BLE001 - any surprise in the server's internals: use the ordinary path
        return None


def reset_connection(scope: dict[str, Any]) -> bool:
    """Reset the connection serving ``scope`` (plain TCP on hypercorn's trio worker, HTTP/1.x or
    HTTP/2); ``False`` when it cannot be found. A write blocked on a client that stopped reading
    then fails, which hypercorn's own (shielded) writes cannot otherwise be made to do."""
    try:
        found = _server_of(scope)
    except Exception:  # noqa: BLE001 - the server's internals differ: nothing to reset
        return False
    if found is None:
        return False
    ChunkedSocketWriter(found[1]).abort()
    return True


def _server_of(scope: dict[str, Any]) -> tuple[Any, Any] | None:
    """The protocol object (hypercorn's H11Protocol or H2Protocol) and the trio socket serving
    ``scope``, reached from the ASGI ``send`` that :func:`keep_send` put into it; ``None`` when
    any link is not the one expected."""
    found = connection_of(scope)
    return None if found is None else (found[0], found[1].stream.socket)


def connection_of(scope: dict[str, Any]) -> tuple[Any, Any] | None:
    """(protocol object, TCPServer) serving ``scope``; see :func:`_server_of`."""
    from hypercorn.protocol.h2 import H2Protocol
    from hypercorn.protocol.h11 import H11Protocol
    from hypercorn.protocol.http_stream import HTTPStream
    from hypercorn.trio.tcp_server import TCPServer

    send = scope.get(SCOPE_KEY)
    if send is None or scope.get("scheme") != "http":
        return None
    stream = getattr(send, "__self__", None)
    if type(stream) is not HTTPStream or send.__func__ is not HTTPStream.app_send:
        return None
    proto = getattr(stream.send, "__self__", None)
    if type(proto) is H11Protocol:
        if proto.stream is not stream:
            return None
    elif type(proto) is not H2Protocol:
        return None
    server = getattr(proto.send, "__self__", None)
    if type(server) is not TCPServer or not isinstance(server.stream, trio.SocketStream):
        return None
    return proto, server
