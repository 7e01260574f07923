"""The request head's limit: at most :data:`HEAD_LIMIT` bytes, however the bytes arrive.

What counts is the head as HTTP/1.1 writes it: the request line (``METHOD SP target SP
HTTP/version CRLF``), each header line as ``name: value CRLF``, and the blank line's CRLF. An
HTTP/1.1 request written that way is counted byte for byte; whitespace beyond the one space
after a colon is not counted (h11 drops it). An HTTP/2 request is counted as the same head
(its ``:authority`` as the ``Host`` line; ``:scheme`` and the other pseudo-headers are no line
of it), and so is a WebSocket handshake over either. A head past the limit is answered 431
``HEADERS_TOO_LARGE`` in the error shape before anything of the app runs.

The check is made once, on the ASGI scope, where the whole head is known whichever way it was
read. h11's own bound (``h11_max_incomplete_size``) counts the part of a head still unfinished
(runtime.server_answers makes it hold however the bytes are split): it is set to
:data:`UNFINISHED_HEAD_BYTES` (hypercorn's read size), a bound on the memory a head that never
ends can hold, above this limit so that it never decides at its edge. It counts the head as
written, whitespace around values too.
HTTP/2's bound on the decoded header list (``SETTINGS_MAX_HEADER_LIST_SIZE``, 65,536 as
hypercorn advertises) stays above it for the same reason. Past that bound the fields are not kept
(runtime.server_answers' decoder): they reach here as one field, ``DROPPED_FIELDS``, whose value
is their bytes as header lines, and the request is refused on its stream, the connection going on.
"""

from __future__ import annotations

from typing import Any

from .server_answers import DROPPED_FIELDS, refuse

HEAD_LIMIT = 16 * 1024  # bytes of a request head (see above for what counts)
UNFINISHED_HEAD_BYTES = 64 * 1024  # h11's bound on a head still unfinished after a read


def head_size(scope: dict[str, Any]) -> int:
    """The size of the request head of ``scope`` (an ASGI http or websocket scope), as above."""
    version = scope.get("http_version", "1.1")
    method = scope.get("method") or ("CONNECT" if version == "2" else "GET")  # (a websocket scope has none)
    query = scope.get("query_string") or b""
    target = len(scope["raw_path"]) + (len(query) + 1 if query else 0)
    line = len(method) + 1 + target + len(" HTTP/") + len(version) + 2
    return line + sum(len(name) + 2 + len(value) + 2 if (dropped := _dropped(scope, name, value)) is None else dropped
                      for name, value in scope.get("headers", [])) + 2


def _dropped(scope: dict[str, Any], name: bytes, value: bytes) -> int | None:
    """The bytes of the fields runtime.server_answers' decoder dropped, when ``(name, value)`` is
    the field it adds for them: an HTTP/2 request's, digits. A client's own field of that name
    (over HTTP/1.1, or in an h2c upgrade's head, which h11 reads) is an ordinary field: its value
    is no count, whatever it holds."""
    if name == DROPPED_FIELDS and scope.get("http_version") == "2" and value.isdigit():
        return int(value)
    return None


def limit_head(asgi_app: Any, limit: int = HEAD_LIMIT) -> Any:
    """Wrap an ASGI app so a request (or WebSocket handshake) whose head is past ``limit`` bytes
    is answered 431 ``HEADERS_TOO_LARGE``, with ``connection: close``, and never reaches it."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            return await asgi_app(scope, receive, send)
        size = head_size(scope)
        if size > limit:
            message = (f"the request head is {size} bytes; at most {limit} are read "
                       f"(the request line and the header lines, with their line ends)")
        elif any(_dropped(scope, name, value) is not None for name, value in scope["headers"]):  # (many small fields)
            message = ("the request's header list is larger than the SETTINGS_MAX_HEADER_LIST_SIZE "
                       "this server sent (counted as HPACK counts it: name, value and 32 bytes a field)")
        else:
            return await asgi_app(scope, receive, send)
        await refuse(scope, send, 431, "HEADERS_TOO_LARGE", message)

    return app
