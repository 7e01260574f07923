"""Races of hypercorn's HTTP/1.1 connections (0.18, trio worker): two ended the whole server, one cut answers.

On one connection hypercorn has two tasks that write: the one reading the socket (it answers a
request h11 finds malformed itself) and the app's. Bytes after a request the server did not
expect — anything after ``Connection: close``, or data after a WebSocket handshake that has not
been answered — make h11 fail while the app is answering, and then:

- **A close beside a write.** The connection is closed with ``send_eof``, which holds the
  socket's send side across a checkpoint without taking the send lock every write takes; the
  other task's write then raised ``trio.BusyResourceError`` (hypercorn issue 203).
- **Two answers to one WebSocket handshake.** The reading task answers the early data with a
  400 while the app rejects the handshake (Lens serves no WebSocket route): h11 refuses the
  second answer, and the ``LocalProtocolError`` was re-raised (hypercorn issue 225). The
  server's own answer then left the connection open for as long as the client kept it
  (:func:`end_refused_handshake`).

Either exception left the connection's task and ended the server: one request from any client
(no credential needed) stopped the daemon.

- **A close between an answer's head and its body.** A request answered ``connection: close``
  before its body was read (401, 405, 413) with another request pipelined behind it makes h11
  fail on those bytes once the answer's head is written; the reading task then closed the
  connection and the app's body was dropped: a head whose ``content-length`` promised bytes that
  never came (:class:`Answer`).

:func:`guard_connection_races` sets, on the connection's own objects when a request reaches the
app (before the app or the server can write or close), a close that takes the send lock and
waits for a sized answer begun, and a single answer per handshake. It does nothing where the
server's objects are not the ones expected (another server, TLS, a hypercorn whose internals
differ).
"""

from __future__ import annotations

from typing import Any

import trio

from .sse_socket import connection_of

CLOSE_WAIT_SECONDS = 5.0  # a connection's close waits this long for a write in progress to end


def guard_connection_races(asgi_app: Any) -> Any:
    """Wrap an ASGI app (inside :func:`runtime.sse_socket.keep_send`) with the guards above."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            answer = close_under_send_lock(scope)
            if answer is not None:
                try:
                    await asgi_app(scope, receive, answer.tracked(send))
                finally:
                    answer.done.set()
                return
        elif scope.get("type") == "websocket":
            guarded = one_answer_per_handshake(send)
            try:
                await asgi_app(scope, receive, guarded)
            finally:
                await end_refused_handshake(send)
            return
        await asgi_app(scope, receive, send)

    return app


class Answer:
    """The app's answer to one request, as its ``send`` passes it: whether it is sized (its head
    has a ``content-length``), which tasks are inside ``send``, and when its last part was sent."""

    def __init__(self) -> None:
        self.sized = False
        self.senders: set[trio.lowlevel.Task] = set()
        self.done = trio.Event()

    def tracked(self, send: Any) -> Any:
        async def tracked_send(message: dict[str, Any]) -> None:
            task = trio.lowlevel.current_task()
            kind = message.get("type")
            if kind == "http.response.start":
                self.sized = any(bytes(k).lower() == b"content-length" for k, _ in message.get("headers") or ())
            self.senders.add(task)
            try:
                await send(message)
            finally:
                self.senders.discard(task)
                if kind == "http.response.body" and not message.get("more_body", False):
                    self.done.set()

        return tracked_send

    async def finish(self) -> None:
        """Wait for a sized answer already begun to be sent whole, unless the caller is the task
        sending it. Unbounded: :func:`close_in_turn` bounds it together with the send lock's wait."""
        if self.sized and not self.done.is_set() and trio.lowlevel.current_task() not in self.senders:
            await self.done.wait()


def close_under_send_lock(scope: dict[str, Any]) -> Answer | None:
    """Make the connection serving ``scope`` close only while no write is on it: the answer being
    written goes out first. A write that holds the lock for :data:`CLOSE_WAIT_SECONDS` (blocked
    on a client that stopped reading) is ended by closing the socket, as ``send_eof`` failing
    busy ended it at once before.

    A close the reading task asks for between the parts of a sized answer (h11 failing on bytes
    pipelined behind a request answered ``connection: close``, its head written, its body not yet)
    first waits for the answer's last part, within the same bound: the client gets the whole answer, never a head
    whose body is cut off. The answer of the request now served over HTTP/1.1 is returned, for
    the app's ``send`` to report to (``None`` over HTTP/2, or where the server's internals are not
    the ones expected)."""
    try:
        found = connection_of(scope)
    except Exception:  # noqa: BLE001 - the server's internals differ: leave it as it is
        return None
    if found is None:
        return None
    from hypercorn.protocol.h11 import H11Protocol

    proto, server = found
    # (HTTP/1.1 alone: an HTTP/2 connection's streams are answered side by side, and its close is
    # no answer's to wait for)
    answer = Answer() if type(proto) is H11Protocol else None
    vars(server)["_lens_answer"] = answer
    if "_close" in vars(server):
        return answer
    close, lock, stream = server._close, server.send_lock, server.stream

    async def locked_close() -> None:
        await close_in_turn(vars(server).get("_lens_answer"), lock, close, stream)

    server._close = locked_close
    return answer


async def close_in_turn(answer: Answer | None, lock: trio.Lock, close: Any, stream: Any) -> None:
    """A connection's close as :func:`close_under_send_lock` sets it: ``close`` (the server's
    own) once ``answer``'s last part is sent (when it is a sized answer begun) and ``lock`` (the
    send lock) is free, all within one :data:`CLOSE_WAIT_SECONDS`; past that, ``stream`` is closed
    (``aclose``), which ends a write blocked on a client that stopped reading."""
    if lock.statistics().owner is trio.lowlevel.current_task():
        await stream.aclose()  # (closing from inside a failed write: nothing else writes)
        return
    with trio.move_on_after(CLOSE_WAIT_SECONDS):  # (one deadline for both waits, not one each)
        if answer is not None:
            await answer.finish()
        async with lock:
            await close()
            return
    await stream.aclose()


def one_answer_per_handshake(send: Any) -> Any:
    """``send`` for the app of a WebSocket scope, such that the handshake gets one answer: the
    app's or the server's own error answer, whichever began first; the other is dropped.
    ``send`` itself when it is not hypercorn's ``WSStream.app_send`` over HTTP/1.1.

    "Began" is h11's state (an answer's head is handed to h11 before its bytes are written):
    the server's answer may have begun before this is set, when the early data is read before
    the app's task first runs."""
    try:
        import h11
        from hypercorn.protocol.h11 import H11Protocol
        from hypercorn.protocol.ws_stream import ASGIWebsocketState, WSStream
    except Exception:  # noqa: BLE001 - another server
        return send
    stream = getattr(send, "__self__", None)
    if type(stream) is not WSStream or getattr(send, "__func__", None) is not WSStream.app_send:
        return send
    proto = getattr(stream.send, "__self__", None)
    if type(proto) is not H11Protocol or "_send_error_response" in vars(stream):
        return send
    lock = trio.Lock()
    error_response = stream._send_error_response

    def answer_begun() -> bool:
        conn = getattr(proto.connection, "h11_connection", proto.connection)
        return getattr(conn, "our_state", None) is not h11.SEND_RESPONSE

    async def server_error_response(status_code: int) -> None:
        if lock.statistics().owner is trio.lowlevel.current_task():  # (the app's close, through app_send)
            if not answer_begun():
                await error_response(status_code)
            return
        async with lock:
            if not answer_begun():
                await error_response(status_code)

    async def app_send(message: dict[str, Any] | None) -> None:
        async with lock:
            if (stream.state is ASGIWebsocketState.HANDSHAKE and message is not None
                    and message.get("type") != "websocket.http.response.start" and answer_begun()):
                return  # (the server answered the handshake: the app's answer goes nowhere)
            await send(message)

    stream._send_error_response = server_error_response
    return app_send


async def end_refused_handshake(send: Any) -> None:
    """End the connection of a WebSocket handshake the server itself refused (its 400 to data
    sent before the answer), once the app is done with it.

    The server answers ``connection: close`` but ends the stream only through the app's last
    message, which it drops once it has answered: the connection stayed open until the client
    closed it (an idle socket and task each, no timer running). Ending the stream here is what
    the server does after an answer of the app's: the connection is closed. Nothing where
    ``send`` is not hypercorn's ``WSStream.app_send`` over HTTP/1.1, or the stream is not the
    one refused."""
    try:
        from hypercorn.protocol.events import StreamClosed
        from hypercorn.protocol.h11 import H11Protocol
        from hypercorn.protocol.ws_stream import WSStream
    except Exception:  # noqa: BLE001 - another server
        return
    stream = getattr(send, "__self__", None)
    if type(stream) is not WSStream or getattr(send, "__func__", None) is not WSStream.app_send:
        return
    proto = getattr(stream.send, "__self__", None)
    if type(proto) is not H11Protocol or proto.stream is not stream or not stream.closed:
        return
    with trio.CancelScope(shield=True):  # (the app's task may be ending by cancellation)
        with trio.move_on_after(CLOSE_WAIT_SECONDS):
            await stream.send(StreamClosed(stream_id=stream.stream_id))
