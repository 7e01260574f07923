"""A bound on the server's own writes of a response body: a client that takes no byte of it for
the stall time is reset, as SSE's direct socket path does (``sse_socket.ChunkedSocketWriter``).

A route opts in by putting ``(seconds, stop)`` into its ASGI scope under :data:`SCOPE_KEY` (the SSE
stream does, before its first body write). :func:`bound_writes` wraps the ASGI ``send``: it counts
the response's body bytes and, at its first body write, starts a watch for the response. While
bytes of the response wait for the client, the watch looks every :data:`POLL_SECONDS` at whether
it took any since (HTTP/1.x: the bytes its TCP acknowledged, read from ``TCP_INFO``; HTTP/2: the
bytes handed to the stream's buffer less what it still holds); once nothing moved for ``seconds``
(while ``stop()`` is true, the daemon stopping: for one look) the client is reset:

- HTTP/1.x: the connection (linger 0, shut down both ways). Hypercorn writes a connection's bytes
  in a shielded scope, so the write cannot be cancelled; the reset makes it fail, hypercorn closes
  the connection and the app is told the client went away.
- HTTP/2: that stream alone (``RST_STREAM`` with ``CANCEL``), as hypercorn handles a stream the
  client resets; a write waiting on it is cancelled, the connection's other streams go on. Should
  the reset itself not go out within ``seconds`` (the client reads nothing of the connection
  either), the connection is reset.

After a reset the response's later writes are dropped (the app is told of the disconnect and ends).
The server's objects are reached as SSE's direct path reaches them (``sse_socket.connection_of``);
with a server whose internals differ nothing is reset and a write waits as it did.
"""

from __future__ import annotations

import socket
import struct
from typing import Any, Awaitable, Callable

import trio

from .sse_socket import SCOPE_KEY as SEND_KEY
from .sse_socket import ChunkedSocketWriter, connection_of

SCOPE_KEY = "lens.write_stall"  # (seconds, stop): set by a route whose body writes are bounded
WRITE_STALL_SECONDS = 30.0  # the default bound (Services.write_stall_seconds)
POLL_SECONDS = 0.25  # a waiting write's watch looks at the client's progress this often

# struct tcp_info (linux/tcp.h): tcpi_bytes_acked, a u64 at this offset (Linux 4.1 and later)
_TCPI_BYTES_ACKED = 120


def bound_writes(asgi_app: Any, paths: frozenset[str]) -> Any:
    """Wrap an ASGI app (inside ``sse_socket.keep_send``) so the body writes of a response to one
    of ``paths`` whose scope holds :data:`SCOPE_KEY` are bounded as the module says (other
    requests pass as they are: no nursery, no counting)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") not in paths:
            return await asgi_app(scope, receive, send)
        async with trio.open_nursery() as nursery:  # (the response's watch, once it writes a body)
            await asgi_app(scope, receive, _BoundedSend(scope, send, nursery))
            nursery.cancel_scope.cancel()

    return app


class _BoundedSend:
    """The ASGI ``send`` of one response: counts its body bytes, and starts the watch at its first
    bounded body write."""

    __slots__ = ("scope", "inner", "nursery", "watched", "writing", "sent", "wrote", "reset")

    def __init__(self, scope: dict[str, Any], inner: Callable[[Any], Awaitable[None]], nursery: trio.Nursery) -> None:
        self.scope = scope
        self.inner = inner
        self.nursery = nursery
        self.watched = False
        self.writing: trio.CancelScope | None = None  # the body write in progress
        self.sent = 0  # body bytes handed to the server
        self.wrote = trio.Event()  # set when a body write starts
        self.reset = False  # the client was reset: later writes go nowhere

    async def __call__(self, message: dict[str, Any]) -> None:
        if self.reset:
            return
        bound = self.scope.get(SCOPE_KEY)
        if bound is None or message.get("type") != "http.response.body":
            return await self.inner(message)
        if not self.watched:
            self.watched = True
            self.nursery.start_soon(self._watch, *bound)
        # (no checkpoint from here until the server holds the bytes: see _probes)
        self.sent += len(message.get("body", b""))
        self.wrote.set()
        with trio.CancelScope() as self.writing:
            await self.inner(message)
        self.writing = None

    async def _watch(self, seconds: float, stop: Callable[[], bool]) -> None:
        pending, progress = _probes(self)
        while True:
            if not pending():
                self.wrote = trio.Event()
                await self.wrote.wait()
                continue
            best = progress()
            deadline = trio.current_time() + seconds
            while pending() and trio.current_time() < deadline:
                await trio.sleep(min(POLL_SECONDS, max(0.0, deadline - trio.current_time())))
                now = progress()
                if now is not None and (best is None or now > best):
                    best, deadline = now, trio.current_time() + seconds
                if stop():  # stopping: a write must move at every look (the stream is ending)
                    deadline = min(deadline, trio.current_time() + POLL_SECONDS)
            if pending():
                break
        with trio.CancelScope(shield=True):  # (the write may end meanwhile: the reset goes on)
            self.reset = await _reset(self.scope, self.writing, seconds)


Reading = Callable[[], "int | None"]


def _probes(bounded: _BoundedSend) -> tuple[Callable[[], bool], Reading]:
    """Whether bytes of the response wait for the client, and a count of the bytes it has taken
    (``None`` when that cannot be read: then only a write's end counts).

    HTTP/1.x: a write waits while hypercorn's ``send`` does; the client's TCP acknowledgements
    count. HTTP/2: hypercorn's send returns once the bytes are in the stream's buffer (which grows
    without bound), so the bytes wait while that buffer holds any; the bytes handed to it less
    what it still holds count (no checkpoint falls between counting a write and the buffer
    holding it)."""
    writing: Callable[[], bool] = lambda: bounded.writing is not None  # noqa: E731
    try:
        found = connection_of(bounded.scope)
        if found is None:
            return writing, lambda: None
        proto, server = found
        from hypercorn.protocol.h2 import H2Protocol
        if type(proto) is H2Protocol:
            stream_id = bounded.scope[SEND_KEY].__self__.stream_id

            def left() -> int:
                buffer = proto.stream_buffers.get(stream_id)
                return 0 if buffer is None else len(buffer.buffer)
            return (lambda: bounded.writing is not None or left() > 0), (lambda: bounded.sent - left())
        sock = server.stream.socket
        if _bytes_acked(sock) is None:
            return writing, lambda: None
        return writing, lambda: _bytes_acked(sock)
    except Exception:  # noqa: BLE001 - the server's internals differ: no progress to read
        return writing, lambda: None


def _bytes_acked(sock: Any) -> int | None:
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except (OSError, AttributeError):
        return None
    if len(info) < _TCPI_BYTES_ACKED + 8:
        return None
    return struct.unpack_from("Q", info, _TCPI_BYTES_ACKED)[0]


async def _reset(scope: dict[str, Any], writing: trio.CancelScope | None, seconds: float) -> bool:
    """End the stalled write (see the module); ``False`` when its connection cannot be found."""
    try:
        found = connection_of(scope)
    except Exception:  # noqa: BLE001 - the server's internals differ
        found = None
    if found is None:
        return False
    proto, server = found
    from hypercorn.protocol.h2 import H2Protocol
    if type(proto) is not H2Protocol:
        ChunkedSocketWriter(server.stream.socket).abort()
        return True
    if writing is not None:
        writing.cancel()
    try:
        import h2.errors
        stream_id = scope[SEND_KEY].__self__.stream_id
        # As hypercorn handles a client's RST_STREAM: the stream is closed (the app is told of the
        # disconnect) and its sender drops its buffer; then the frame goes out.
        proto.connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        await proto._close_stream(stream_id)
        await proto._window_updated(stream_id)
    except Exception:  # noqa: BLE001 - the stream is gone already, or the internals differ
        ChunkedSocketWriter(server.stream.socket).abort()
        return True
    async with trio.open_nursery() as nursery:
        async def flush() -> None:
            await proto._flush()
            nursery.cancel_scope.cancel()

        nursery.start_soon(flush)
        await trio.sleep(seconds)
        # the reset did not go out: the client reads nothing of the connection either
        ChunkedSocketWriter(server.stream.socket).abort()
    return True
