"""A scripted HTTP server (raw ASGI on hypercorn's trio worker) that records what it receives."""

from __future__ import annotations

import json
import logging
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import trio
import trio.testing
from hypercorn.config import Config as HyperConfig
from hypercorn.trio import serve


@dataclass
class Reply:
    """One scripted answer.

    ``events`` set: a ``text/event-stream`` of ``(event name or None, data)`` frames (``data`` a
    dict is sent as JSON, a str as is). ``stall_after`` (with ``events``): after that many frames,
    send nothing more and wait for the client to disconnect. ``chunks`` set: the body is these
    bytes, each sent on its own and read by a client in the same trio run before the next is sent
    (the server waits until every task of the run is blocked), so a test decides where the
    client's reads end;
    ``content_type`` is then the response's. ``close_early`` (with ``chunks``): after the last
    chunk the connection is dropped without ending the body (a server or proxy that died
    mid-answer). ``endless`` (with ``events``): after them, this frame again and again, each read
    by a client in the same trio run before the next is sent, until the client goes away (the
    server counts the bytes of the body it sent, in ``ScriptedServer.sent``); ``bytes`` are sent
    as they are (a keep-alive comment, say). ``gate`` (with any of them): nothing is sent until it
    is set, and nothing at all when the client goes away first (an answer held until a test
    releases it, or until the client is stopped). Otherwise:
    ``status`` + ``body`` (JSON). ``headers`` go on any of them (e.g. ``retry-after-ms`` to keep
    SDK retries fast).
    """

    status: int = 200
    body: Any = None
    events: list[tuple[str | None, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    stall_after: int | None = None
    chunks: list[bytes] | None = None
    content_type: str = "text/event-stream"
    close_early: bool = False
    endless: tuple[str | None, Any] | bytes | None = None
    gate: trio.Event | None = None


class _DropConnection(Exception):
    """Raised by the app to make hypercorn drop a connection mid-body."""


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON (or the raw text if it was not JSON)
    raw: bytes = b""  # the body as sent, byte for byte


def sse(events: list[tuple[str | None, Any]]) -> list[bytes]:
    frames = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if name else ""
        frames.append(f"{head}data: {text}\n\n".encode())
    return frames


class ScriptedServer:
    def __init__(self, answer: Callable[[Received], Reply] | None = None) -> None:
        self.answer = answer  # set: each request's reply is made by it, not taken from ``replies``
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.disconnected = trio.Event()  # a stalled stream saw its client go away
        self.sent = 0  # bytes of streamed bodies sent (frames of ``events`` and ``endless``)
        self.url = ""

    # ------------------------------------------------------------------ scripting

    def push(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    # ------------------------------------------------------------------ serving

    async def start(self, nursery: trio.Nursery) -> str:
        cfg = HyperConfig()
        cfg.bind = ["127.0.0.1:0"]
        cfg.accesslog = None
        cfg.errorlog = logging.getLogger("tests.loopback")
        cfg.graceful_timeout = 0.1
        binds = await nursery.start(partial(serve, self, cfg, shutdown_trigger=trio.sleep_forever))  # type: ignore[arg-type]
        self.url = binds[0]
        return self.url

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            raw += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        received = Received(scope["method"], scope["path"], headers, body, raw)
        self.requests.append(received)
        if self.answer is not None:
            reply = self.answer(received)
        else:
            reply = self.replies.popleft() if self.replies else Reply(500, {"error": {"message": "no scripted reply left", "type": "server_error"}})
        if reply.gate is not None and not await self._opened(reply.gate, receive):
            return
        extra = [(k.encode(), v.encode()) for k, v in reply.headers.items()]
        if reply.chunks is not None:
            await send({"type": "http.response.start", "status": reply.status,
                        "headers": [(b"content-type", reply.content_type.encode()), *extra]})
            for chunk in reply.chunks:
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await trio.testing.wait_all_tasks_blocked()  # the client has read it and waits for more
            if reply.close_early:
                raise _DropConnection("the scripted reply drops the connection here")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if reply.events is None:
            data = json.dumps(reply.body if reply.body is not None else {}).encode()
            await send({"type": "http.response.start", "status": reply.status,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *extra]})
            await send({"type": "http.response.body", "body": data})
            return
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), *extra]})
        for i, frame in enumerate(sse(reply.events)):
            if reply.stall_after is not None and i >= reply.stall_after:
                break
            self.sent += len(frame)
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        if reply.endless is not None:
            frame = reply.endless if isinstance(reply.endless, bytes) else sse([reply.endless])[0]
            await self._endless(frame, send, receive)
            return
        if reply.stall_after is not None:
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
            finally:
                self.disconnected.set()
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _opened(self, gate: trio.Event, receive: Any) -> bool:
        """Wait until ``gate`` is set (True) or the client disconnects first (False)."""
        opened: list[bool] = []
        async with trio.open_nursery() as nursery:
            async def until_set() -> None:
                await gate.wait()
                opened.append(True)
                nursery.cancel_scope.cancel()

            async def until_disconnected() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_set)
            nursery.start_soon(until_disconnected)
        return bool(opened)

    async def _endless(self, frame: bytes, send: Any, receive: Any) -> None:
        """``frame`` sent until the client disconnects, each read before the next is sent."""
        async with trio.open_nursery() as nursery:
            async def until_disconnected() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                self.disconnected.set()
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_disconnected)
            while True:
                self.sent += len(frame)
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                await trio.testing.wait_all_tasks_blocked()
