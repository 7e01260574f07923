"""The answers hypercorn (0.18) gives itself, before a request reaches the app, in the API's shape.

Some requests never reach the Quart app: h11 cannot parse them (a bad request line, no ``Host``
or two, a byte a header may not hold, a bad ``Content-Length``, a bad chunk: 400; a head past
``h11_max_incomplete_size``: 431; a transfer coding other than chunked: 501), or hypercorn refuses
a WebSocket handshake itself (no ``Sec-WebSocket-Key``, a version other than 13, HTTP/1.0; data
sent before the handshake's answer; a ``Connection``, ``Sec-WebSocket-Extensions`` or
``Sec-WebSocket-Protocol`` holding a byte past ASCII, which hypercorn failed to read, ending the
whole server: :func:`_ws_handle`). Hypercorn answered those with a status and an empty body.
Here they carry ``{"error": {"code", "message"}}`` (``Content-Type: application/json``) with a
code of the API's table and ``connection: close``, as any error of the app does.

Connections were left with no timer running: a WebSocket handshake refused before the app
(hypercorn ends such a stream only through the app, which never ran) is now ended after its
answer, which closes an HTTP/1.1 connection and restarts an HTTP/2 connection's keep-alive timer
(:func:`_h2_events`); an HTTP/2 connection opened with the preface alone (the upgrade stopped the
keep-alive timer; the HTTP/2 side starts it only when a stream ends) now starts that timer, so it
is closed at the keep-alive bound like an idle HTTP/1.1 connection. An HTTP/2 stream answered
before the client ended its request (a 401 to a POST whose body is still coming) is reset
(:func:`_reset_if_answered`): data the client sent on it afterwards made hypercorn fail, which
ended the whole server.

Heads at their edges: h11's bound on an unfinished head holds however the bytes are split
(:func:`_h11_handle`). An HTTP/2 header list past h2's bound, or with a value in surrounding
whitespace, ended the whole connection; the first is now answered 431 on its stream by the
head's limit (runtime.head_limit), the second read as h11 reads it (:class:`_H2Decoder`). Other
malformed HTTP/2 fields (RFC 9113 8.2, 8.3), which h2 made a connection error too, are answered
400 on their stream (:class:`MalformedFields`, :func:`_fields_answered`), and so is a
``content-length`` h2 cannot read, and what h2 lets through but hypercorn cannot read, which
ended the whole server (:func:`unreadable_request`): a request without ``:path`` (a CONNECT
tunnel), a ``:method`` that is no token, a ``:path`` holding a byte outside 0x21-0x7E in its path
or a control byte, space or DEL in its query (as h11 refuses them over HTTP/1.1), a WebSocket
handshake whose list field holds a byte past ASCII; a body longer or shorter than its ``content-length`` resets its
stream (:func:`_body_length_checked`, :func:`_ended_short`). A request refused before it became
an ASGI request goes to the access log all the same (:func:`refused_scope`).

The seam: :func:`install` replaces the methods of hypercorn's protocol classes (and h2's check
of received fields) listed in :data:`SEAMS`, and ``H2Protocol.initiate`` gives the connection the
daemon's HPACK decoder (which extends hpack's methods of :data:`DECODER_SEAMS`) and its handler
of HEADERS frames. Each replacement acts only for a server whose
config is a :class:`ServerConfig` (the daemon's) and is hypercorn's own method for any other
server in the process. The protocol objects are made by hypercorn before any request reaches the
app, so no per-connection wrapper (as in :mod:`runtime.connection_races`) can reach them. Where
a method is not the one expected, it is not replaced (hypercorn's own behaviour stays) and
:func:`install` names it; ``tests/daemon/test_server_answers.py`` pins each one and the call
sites that make it the seam.
"""

from __future__ import annotations

import inspect
import re
import sys
from itertools import chain
from time import time
from typing import Any, Callable

import h2.errors
import h2.events
import h2.exceptions
import h2.utilities
import h11
import hpack
import msgspec
from hypercorn.config import Config
from hypercorn.events import RawData, Updated
from hypercorn.protocol.events import Body, EndBody, Request, Response, StreamClosed
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H2CProtocolRequiredError, H2ProtocolAssumedError, H11Protocol
from hypercorn.protocol.ws_stream import Handshake, WSStream
from h2.stream import H2Stream
from hpack.table import table_entry_size
from hyperframe.frame import DataFrame, HeadersFrame

# Codes of the API's error table (runtime.http_parts.STATUS) for the statuses hypercorn answers itself.
CODES = {400: "INVALID_ARGUMENT", 403: "FORBIDDEN", 404: "NOT_FOUND", 431: "HEADERS_TOO_LARGE",
         500: "INTERNAL", 501: "TRANSFER_ENCODING_UNSUPPORTED"}
# Where h11's message quotes the offending bytes: cut there (a credential may be among them).
_ECHO = re.compile(r":? (?:bytearray\()?b['\"]")
# The field an HTTP/2 request's header list carries when fields past h2's bound were dropped
# (:class:`_H2Decoder`): its value is their bytes as HTTP/1.1 header lines. No client can send it.
DROPPED_FIELDS = b"lens-dropped-field-bytes"
# A method the access log may show for a refused request (anything else is "-").
_METHOD = re.compile(r"[A-Z]{1,20}")
# The listening socket's backlog (:class:`ServerConfig`).
LISTEN_BACKLOG = 4096


class ServerConfig(Config):
    """Hypercorn's config for the daemon's server: the server whose own answers get the error body."""

    # The listening socket's queue of connections not accepted yet. Hypercorn's 100 reset
    # connections of a burst past it (SYN cookies stood in for the full queue, and a connection
    # the loop did not accept in time was reset): 300 clients posting at once lost some. The
    # kernel caps the value at ``net.core.somaxconn`` (4096 on Linux since 5.4).
    backlog = LISTEN_BACKLOG


def body_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of an error body the server answers itself (:func:`error_body`'s shape)."""
    return [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
            (b"x-content-type-options", b"nosniff")]


def error_body(status: int, message: str) -> bytes:
    return error_json(CODES.get(status, "INVALID_ARGUMENT"), message)


def error_json(code: str, message: str) -> bytes:
    """``{"error": {"code", "message"}}``, the one shape of every error the daemon answers (the
    server's own refusals here, the app's in ``runtime.http_parts.error_response``)."""
    return msgspec.json.encode({"error": {"code": code, "message": message}})


def refused_scope(proto: Any, http_version: str, method: str = "-") -> dict[str, Any]:
    """The scope the access log (``config.log.access``) gets for a request refused before it
    became an ASGI request, on the connection of ``proto`` (a hypercorn protocol): its client,
    scheme and protocol, the method when it is a plain token, and never a field's bytes (no
    path, no headers: the refused field may be among them)."""
    return {"type": "http", "http_version": http_version, "method": method if _METHOD.fullmatch(method) else "-",
            "scheme": "https" if proto.ssl else "http", "path": "-", "query_string": b"", "headers": [],
            "client": proto.client}


async def refuse(scope: dict[str, Any], send: Any, status: int, code: str, message: str) -> None:
    """Answer the request of ``scope`` (an ASGI http or websocket scope) before the app sees it:
    ``status`` with ``{"error": {code, message}}``, and ``connection: close`` over HTTP/1.x
    (HTTP/2 has no connection header)."""
    body = error_json(code, message)
    headers = body_headers(body)
    if scope.get("http_version", "1.1") < "2":
        headers.append((b"connection", b"close"))
    prefix = "websocket.http.response" if scope.get("type") == "websocket" else "http.response"
    await send({"type": f"{prefix}.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}.body", "body": body})


def h11_refusal(status: int, error: BaseException | None, head_limit: int) -> str:
    """The message for h11's refusal of a request (``error``, h11's exception, names the problem;
    the bytes it quotes are left out)."""
    if status == 431:
        return f"the request head is too large: more than {head_limit} bytes arrived before its end"
    reason = _ECHO.split(str(error), maxsplit=1)[0].strip().rstrip(".") if isinstance(error, h11.ProtocolError) else ""
    if status == 501:
        return f"the request's Transfer-Encoding is not supported ({reason or 'only chunked is'})"
    return f"the request is not valid HTTP/1.1: {reason or 'it could not be parsed'}"


def handshake_refusal(status: int, stream: Any) -> str:
    """The message for hypercorn's refusal of a WebSocket handshake on ``stream`` (a WSStream)."""
    if status != 400:
        return {403: "the WebSocket handshake was refused", 404: "no such WebSocket route"}.get(
            status, "the WebSocket handshake could not be answered")
    handshake = stream.handshake
    if stream.app_put is not None:  # (the app has the handshake: data came before its answer)
        return "data arrived before the WebSocket handshake was answered"
    if handshake.http_version < "1.1":
        what = f"it is HTTP/{handshake.http_version}; a WebSocket handshake needs HTTP/1.1"
    elif handshake.http_version == "1.1" and handshake.key is None:
        what = "Sec-WebSocket-Key is missing"
    elif handshake.version != b"13":
        what = "Sec-WebSocket-Version must be 13"
    else:
        what = "Connection must name upgrade and Upgrade must be websocket"
    return f"the WebSocket handshake is not valid: {what}; the daemon serves no WebSocket route"


def _h11_error_response(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _send_error_response(self: Any, status_code: int) -> None:
        if not isinstance(self.config, ServerConfig) or type(self.connection) is not h11.Connection:
            return await original(self, status_code)
        # (called from inside hypercorn's ``except h11.RemoteProtocolError``: that is the reason)
        body = error_body(status_code, h11_refusal(status_code, sys.exc_info()[1], self.config.h11_max_incomplete_size))
        headers = list(chain(body_headers(body), [(b"connection", b"close")], self.config.response_headers("h11")))
        data = b""
        # One write of the whole answer: no other writer's bytes can fall between its parts.
        for event in (h11.Response(status_code=status_code, headers=headers), h11.Data(data=body),
                      h11.EndOfMessage()):
            try:
                data += self.connection.send(event) or b""
            except h11.LocalProtocolError:  # (an answer already begun, or a HEAD: as hypercorn's own)
                if self.connection.their_state != h11.ERROR:
                    raise
        if data:
            await self.send(RawData(data=data))
        await self.config.log.access(refused_scope(self, "1.1"), {"status": status_code, "headers": []}, 0.0)

    return _send_error_response


def _h11_handle(original: Callable[..., Any]) -> Callable[..., Any]:
    """``H11Protocol.handle``: h11 refuses a head of which more than its bound
    (``h11_max_incomplete_size``) is unfinished, but looks only when a read leaves the head
    unfinished, so a head finished by the read that took it past the bound was read: 70,000
    bytes in one write were read, the same bytes dribbled refused (a head padded with
    whitespace, which the head's limit does not count). A read that would take a request's
    head past the bound is fed to h11 in two parts, cut where h11 holds one byte more than the
    bound: h11 then refuses every head longer than that as written, however its bytes arrive."""
    async def handle(self: Any, event: Any) -> None:
        if (not isinstance(self.config, ServerConfig) or not isinstance(event, RawData)
                or type(self.connection) is not h11.Connection or self.connection.their_state is not h11.IDLE):
            return await original(self, event)
        cut = self.config.h11_max_incomplete_size + 1 - len(self.connection._receive_buffer)
        if not 0 < cut < len(event.data):
            return await original(self, event)
        try:
            await original(self, RawData(data=event.data[:cut]))
        except (H2ProtocolAssumedError, H2CProtocolRequiredError) as switch:  # (HTTP/2 takes the rest)
            switch.data += event.data[cut:]
            raise
        if self.connection.their_state is not h11.ERROR:  # (refused: the connection is closing)
            await original(self, RawData(data=event.data[cut:]))

    return handle


def _ws_error_response(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _send_error_response(self: Any, status_code: int) -> None:
        if not isinstance(self.config, ServerConfig):
            return await original(self, status_code)
        await _ws_refuse(self, status_code, handshake_refusal(status_code, self))

    return _send_error_response


async def _ws_refuse(stream: Any, status_code: int, message: str) -> None:
    """Answer the WebSocket handshake of ``stream`` (a WSStream) ``status_code`` with ``message``
    in the error shape, log it, and end the stream when the app never had it."""
    body = error_body(status_code, message)
    headers = body_headers(body)
    if stream.handshake.http_version < "2":  # (HTTP/2 has no connection header)
        headers.append((b"connection", b"close"))
    await stream.send(Response(stream_id=stream.stream_id, status_code=status_code, headers=headers))
    await stream.send(Body(stream_id=stream.stream_id, data=body))
    await stream.send(EndBody(stream_id=stream.stream_id))
    await stream.config.log.access(stream.scope, {"status": status_code, "headers": []}, time() - stream.start_time)
    if stream.app_put is None:
        # Refused before the app: nothing else would ever end the stream. Over HTTP/1.1 ending
        # it closes the connection; over HTTP/2 the stream is dropped (and reset, the client's
        # side being open: _reset_if_answered) and the connection's timer restarted once the
        # frames that opened it are handled (_h2_events).
        await stream.send(StreamClosed(stream_id=stream.stream_id))


def _ws_handle(original: Callable[..., Any]) -> Callable[..., Any]:
    """``WSStream.handle``: hypercorn reads a WebSocket handshake's ``Connection``,
    ``Sec-WebSocket-Extensions`` and ``Sec-WebSocket-Protocol`` (:data:`HANDSHAKE_LISTS`) as
    lists of ASCII tokens as it takes the request, and a byte past ASCII in one (h11 lets such
    bytes through in a field value) failed there, which ended the whole server. Such a handshake
    is answered 400 before hypercorn reads it (over HTTP/2 :func:`unreadable_request` refuses it
    first; this holds for any stream). The stream gets a handshake of its other fields (its
    HTTP version for the answer) and a scope of no field's bytes for the access log."""
    async def handle(self: Any, event: Any) -> None:
        if not isinstance(self.config, ServerConfig) or self.closed or not isinstance(event, Request):
            return await original(self, event)
        what = next((w for name, value in event.headers if bytes(name).lower() in HANDSHAKE_LISTS
                     and (w := handshake_not_ascii(bytes(name).lower(), value)) is not None), None)
        if what is None:
            return await original(self, event)
        self.start_time = time()
        self.handshake = Handshake([(n, v) for n, v in event.headers if bytes(n).lower() not in HANDSHAKE_LISTS],
                                   event.http_version)
        self.scope = {"type": "http", "http_version": event.http_version, "method": "GET",
                      "scheme": "https" if self.scheme == "wss" else "http", "path": "-", "query_string": b"",
                      "headers": [], "client": self.client}  # (refused_scope's shape)
        await _ws_refuse(self, 400, f"the WebSocket handshake is not valid: {what}; "
                                    "the daemon serves no WebSocket route")
        self.closed = True

    return handle


def _reset_if_answered(proto: Any, stream_id: int) -> bool:
    """Whether the stream ``stream_id`` of ``proto`` (an H2Protocol) is to be reset: its answer is
    sent whole (END_STREAM: hypercorn's buffer for it is gone) and hypercorn has dropped it, but
    the client's side is still open (an answer before the whole request, as RFC 9113 8.1
    allows). Data the client still sent on such a stream made hypercorn fail (a ``KeyError``
    reading it), which ended the whole server; RST_STREAM NO_ERROR asks the client to stop, and
    h2 ignores what was already on its way."""
    if not isinstance(proto.config, ServerConfig) or proto.closed:
        return False
    if stream_id in proto.streams or stream_id in proto.stream_buffers:
        return False  # (the other of the two ends will look again)
    h2_stream = proto.connection.streams.get(stream_id)
    if h2_stream is None or h2_stream.closed:
        return False
    try:
        proto.connection.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.NO_ERROR)
    except h2.exceptions.ProtocolError:
        return False
    return True


def _h2_after(original: Callable[..., Any]) -> Callable[..., Any]:
    """``H2Protocol._close_stream`` (hypercorn drops the stream) or ``_send_data`` (the send task
    ends it), each followed by the reset of :func:`_reset_if_answered` when it is the second."""
    async def after(self: Any, stream_id: int) -> None:
        await original(self, stream_id)
        if _reset_if_answered(self, stream_id):
            await self._flush()

    return after


class _H2Decoder(hpack.Decoder):
    """The HPACK decoder of the daemon's HTTP/2 connections.

    h2's own decoder ends the whole connection (GOAWAY ``ENHANCE_YOUR_CALM``) at a header list
    past its bound (``SETTINGS_MAX_HEADER_LIST_SIZE``, counted as RFC 7541 counts: name, value
    and 32 per field), and at a value with surrounding whitespace (``PROTOCOL_ERROR``, from h2's
    check of the decoded fields). This one decodes every field of the block, so the compression
    state stays the client's (RFC 9113 10.5.1: the block must be processed if the connection is
    to go on), but keeps fields only up to that bound: the first of each pseudo-header always,
    the others while the list kept is within it. What it drops is counted as the bytes of its
    HTTP/1.1 header lines in one field, :data:`DROPPED_FIELDS`, and the request reaches the
    head's limit (runtime.head_limit), which answers 431 on its stream. A value's surrounding
    spaces and tabs are dropped, as h11 drops them over HTTP/1.1: the same head is read the same
    way over either. A field named :data:`DROPPED_FIELDS` sent by the client is dropped.
    """

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size)
        self.kept = self.dropped = 0
        self.pseudo: set[bytes] = set()

    # (h2 sets the bound here from the settings it advertises; hpack's own check never fires)
    @property
    def max_header_list_size(self) -> int:
        return sys.maxsize

    @max_header_list_size.setter
    def max_header_list_size(self, value: int) -> None:
        self.bound = value

    def decode(self, data: bytes, raw: bool = False) -> Any:
        self.kept = self.dropped = 0
        self.pseudo = set()
        headers = super().decode(data, raw)
        if self.dropped:
            headers.append((DROPPED_FIELDS, b"%d" % self.dropped))
        return headers

    def _decode_indexed(self, data: bytes | memoryview) -> Any:
        return self._keep(*super()._decode_indexed(data))

    def _decode_literal(self, data: bytes | memoryview, should_index: bool) -> Any:
        return self._keep(*super()._decode_literal(data, should_index))

    def _keep(self, header: Any, consumed: int) -> tuple[Any, int]:
        """``header`` as the list gets it (``None``: dropped, which hpack's loop skips)."""
        name, value = header
        if value[:1] in (b" ", b"\t") or value[-1:] in (b" ", b"\t"):
            value = value.strip(b" \t")
            header = type(header)(name, value)
        size = table_entry_size(name, value)
        first_pseudo = name[:1] == b":" and name not in self.pseudo
        if name != DROPPED_FIELDS and (first_pseudo or self.kept + size <= self.bound):
            if first_pseudo:
                self.pseudo.add(name)
            self.kept += size
            return header, consumed
        if name != DROPPED_FIELDS:
            self.dropped += len(name) + 2 + len(value) + 2
        return None, consumed


# (hpack's methods _H2Decoder extends, with their parameters: without them h2's decoder stays)
DECODER_SEAMS = [(hpack.Decoder, "_decode_indexed", ("self", "data")),
                 (hpack.Decoder, "_decode_literal", ("self", "data", "should_index"))]
_DECODER_FITS = all(name in vars(cls) and tuple(inspect.signature(vars(cls)[name]).parameters) == params
                    for cls, name, params in DECODER_SEAMS)


def _h2_initiate(original: Callable[..., Any]) -> Callable[..., Any]:
    async def initiate(self: Any, headers: Any = None, settings: Any = None) -> None:
        if isinstance(self.config, ServerConfig) and _DECODER_FITS:  # (no header block is read yet)
            self.connection.decoder = _H2Decoder(self.connection.decoder.max_header_list_size)
        table = getattr(self.connection, "_frame_dispatch_table", None)
        if (isinstance(self.config, ServerConfig) and isinstance(table, dict) and HeadersFrame in table
                and DataFrame in table):
            self._lens_refused = []  # (requests answered by h2's handlers below: logged after the read)
            table[HeadersFrame] = _fields_answered(self, table[HeadersFrame])
            table[DataFrame] = _body_length_checked(self, table[DataFrame])
        await original(self, headers, settings)
        if isinstance(self.config, ServerConfig) and headers is None and not self.streams:
            await self.send(Updated(idle=True))  # (the keep-alive timer, stopped by the preface's "request")

    return initiate


def _h2_events(original: Callable[..., Any]) -> Callable[..., Any]:
    """``H2Protocol._handle_events``: hypercorn marks the connection busy after a request's first
    handling, which ended the stream already when it was refused before the app; a connection
    left with no stream then had no timer. It is marked idle again (its keep-alive timer)."""
    async def handle_events(self: Any, events: list[Any]) -> None:
        # Data for a stream already answered and dropped (a 413 before the whole body, RFC 9113
        # 8.1) that arrived with the data before it, in one read: hypercorn's lookup of the stream
        # failed (a KeyError) and ended the whole connection, every other stream on it unanswered.
        # Such data is dropped, its window given back, and the stream reset once it is answered.
        # (what comes before each piece of data is handled first: that may be what answered it)
        run: list[Any] = []
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                if run:
                    await original(self, run)
                    run = []
                if event.stream_id not in self.streams and not self.closed:
                    self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    _reset_if_answered(self, event.stream_id)
                    continue
            run.append(event)
        await original(self, run)
        refused = getattr(self, "_lens_refused", None)
        if refused:
            self._lens_refused = []
        for method, status in refused or ():  # (the access log of requests refused before the app: _fields_answered)
            await self.config.log.access(refused_scope(self, "2", method), {"status": status, "headers": []}, 0.0)
        if (isinstance(self.config, ServerConfig) and not self.closed and not self.streams
                and any(isinstance(ev, h2.events.RequestReceived) for ev in events)):
            await self.send(Updated(idle=True))

    return handle_events


# --------------------------------------------------------------------------- malformed HTTP/2 fields


class MalformedFields(h2.exceptions.ProtocolError):
    """h2's refusal of a header block's fields (RFC 9113 8.2 and 8.3: an uppercase name, a
    connection-specific field, ``te`` other than ``trailers``, a NUL, CR or LF in a value,
    pseudo-headers out of order, twice, unknown or missing …), raised where h2 checks them
    (``H2Stream._process_received_headers``) in its ProtocolError's place. To any other user of
    h2 it is that ProtocolError (a connection error, PROTOCOL_ERROR); a daemon's connection
    answers it on its stream (:func:`_fields_answered`). ``str()`` is :attr:`what`, in the
    daemon's words: h2's own message quotes the field's bytes (a credential may be among them)."""

    def __init__(self, what: str, method: bytes | None, whole: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.whole = whole  # (``what`` is the whole message: :func:`unreadable_request`'s)
        self.method = (method or b"-").decode("latin-1")  # (for the access log: refused_scope keeps a token only)
        self.head = method == b"HEAD"  # (a HEAD request: its answer has no body)


# (the start of h2's message and a part it holds, and the problem in the daemon's words; the
# message's rest quotes the field, which is never repeated)
_MALFORMED_WORDS = [
    ("Received uppercase header name", "", "a field name holds an uppercase letter"),
    ("Illegal character ':' in header name", "", "a field name other than a pseudo-header's holds a colon"),
    ("Illegal character", "in header name", "a field name holds a control character, a space or a byte past 0x7e"),
    ("Illegal character", "in header value", "a field value holds a NUL, CR or LF"),
    ("Received header value surrounded by whitespace", "", "a field value begins or ends with whitespace"),
    ("Received header name with zero length", "", "a field name is empty"),
    ("Invalid value for TE header", "", "te may only be \"trailers\""),
    ("Connection-specific header field present", "",
     "a connection-specific field (connection, keep-alive, proxy-connection, transfer-encoding, upgrade) "
     "has no place in HTTP/2"),
    ("Received duplicate pseudo-header field", "", "a pseudo-header field appears twice"),
    ("Received pseudo-header field out of sequence", "", "a pseudo-header field follows a regular field"),
    ("Received custom pseudo-header field", "", "a pseudo-header field is not one HTTP/2 defines"),
    ("Header block missing mandatory b':method'", "", "the :method pseudo-header field is missing"),
    ("Header block missing mandatory b':scheme'", "", "the :scheme pseudo-header field is missing"),
    ("Header block missing mandatory b':path'", "", "the :path pseudo-header field is missing"),
    ("Ordinary CONNECT MUST NOT include", "", "a CONNECT request has :scheme or :path"),
    ("Encountered response-only headers", "", "a request has :status"),
    ("Encountered connect-request-only headers", "", "a request other than CONNECT has :protocol"),
    ("Request header block has multiple Host headers", "", "host appears twice"),
    ("Request header block does not have an :authority or Host", "", "the request has neither :authority nor host"),
    ("Request header block has mismatched :authority and Host", "", ":authority and host differ"),
    ("An empty :path header is forbidden", "", ":path is empty"),
    ("Received pseudo-header in trailer", "", "the trailers hold a pseudo-header field"),
    ("Invalid content-length header", "", "content-length is not a number of bytes (digits only)"),
    ("Conflicting content-length headers", "", "content-length is given twice with different values"),
]


def malformed_words(h2_message: str) -> str:
    """The problem h2's message (of its check of a header block's fields) names, in the daemon's
    words, without the bytes it quotes."""
    for start, part, words in _MALFORMED_WORDS:
        if h2_message.startswith(start) and part in h2_message:
            return words
    return "a field is malformed"


def malformed_message(what: str) -> str:
    return f"the request's HTTP/2 fields are malformed (RFC 9113 8.2): {what}; the request was not read"


def _h2_fields(original: Callable[..., Any]) -> Callable[..., Any]:
    """``H2Stream._process_received_headers`` (h2's checks of a received header block's fields)
    and ``H2Stream._initialize_content_length`` (its reading of ``content-length``, done before
    those checks): their ProtocolError becomes :class:`MalformedFields`. A request's fields h2
    takes are then checked for what hypercorn cannot read (:func:`unreadable_request`).

    Unlike the other seams these are replaced for every h2 connection of the process, not only
    the daemon's server's (an H2Stream knows no config). No HTTP/2 client runs in the daemon (its
    HTTP clients are made without HTTP/2), so only the server's streams meet them; to any other
    user of h2 the refusal is h2's own ProtocolError, a connection error as before, and a
    response's fields are never checked here."""
    def checked(self: Any, headers: Any, *rest: Any) -> Any:
        try:
            fields = original(self, headers, *rest)
        except MalformedFields:
            raise
        except h2.exceptions.ProtocolError as error:
            raise MalformedFields(malformed_words(str(error)), h2.utilities.extract_method_header(headers)) from None
        if isinstance(fields, list) and (message := unreadable_request(fields)) is not None:
            raise MalformedFields(message, h2.utilities.extract_method_header(fields), whole=True)
        return fields

    return checked


# A method is a token (RFC 9110 9.1, 5.6.2), as h11 reads one over HTTP/1.1.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# The fields of a WebSocket handshake hypercorn reads as comma-separated lists of ASCII tokens
# (wsproto's ``split_comma_header``): a byte past ASCII in one ended the whole server.
HANDSHAKE_LISTS = (b"connection", b"sec-websocket-extensions", b"sec-websocket-protocol")


def unreadable_request(fields: list[Any]) -> str | None:
    """The message, in the daemon's words, when a request's fields (h2 took them) are what
    hypercorn cannot read or what HTTP/1.1 never lets through, else None:

    - no ``:path`` (a CONNECT tunnel, RFC 9113 8.5, the only request h2 lets go without one):
      hypercorn made its stream with no path and failed, which ended the whole server;
    - a ``:method`` that is no token, or a ``:path`` whose path (before ``?``) holds a byte
      outside 0x21-0x7E: hypercorn decodes both as ASCII as it makes the stream, and that
      failure ended the whole server too; a control byte, a space or DEL reached the app;
    - a query (after ``?``) holding a control byte, a space or DEL (h2 refuses NUL, CR and LF
      only). Bytes past ASCII in the query are the app's to judge: raw UTF-8 text is read, bytes
      that are no UTF-8 text are refused there (``http_parts.raw_query_not_utf8``);
    - a CONNECT (a WebSocket handshake, RFC 8441) whose field of :data:`HANDSHAKE_LISTS` holds a
      byte past ASCII: hypercorn decodes those as ASCII when it reads the handshake.

    HTTP/1.1 refuses the same request line in h11 (its target must be bytes 0x21-0x7E), and the
    same handshake in :func:`_ws_handle`."""
    if not any(name == b":method" for name, _value in fields):  # (a response's or trailers' fields)
        return None
    method = next(bytes(value) for name, value in fields if name == b":method")
    if not any(name == b":path" for name, _value in fields):
        return ("a request without :path (a CONNECT tunnel) is not served: the daemon is no proxy; "
                "the request was not read")
    for name, value in fields:
        if name == b":method" and not _TOKEN.fullmatch(value):
            return unreadable_message("the :method is not a token (RFC 9110 9.1: letters, digits and !#$%&'*+-.^_`|~)")
        if name == b":path":
            path, mark, query = bytes(value).partition(b"?")
            at = next((i for i, byte in enumerate(path) if not 0x21 <= byte <= 0x7E), None)
            if at is not None:
                return unreadable_message(f"the :path holds the byte 0x{path[at]:02X} at offset {at}, in its path, "
                                          f"which is {_kind(path[at])}; percent-encode it (%{path[at]:02X})")
            at = next((i for i, byte in enumerate(query) if byte < 0x21 or byte == 0x7F), None)
            if at is not None:
                return unreadable_message(f"the :path holds the byte 0x{query[at]:02X} at offset "
                                          f"{len(path) + len(mark) + at}, in its query, which is {_kind(query[at])}; "
                                          f"percent-encode it (%{query[at]:02X})")
    if method == b"CONNECT":
        for name, value in fields:
            if name in HANDSHAKE_LISTS and (what := handshake_not_ascii(name, value)) is not None:
                return f"the WebSocket handshake is not valid: {what}; the request was not read"
    return None


def unreadable_message(what: str) -> str:
    return f"the request's HTTP/2 fields are malformed (RFC 9113 8.3.1): {what}; the request was not read"


def _kind(byte: int) -> str:
    return ("a space" if byte == 0x20 else "DEL" if byte == 0x7F else "a control byte" if byte < 0x20
            else "not ASCII")


def handshake_not_ascii(name: bytes, value: bytes) -> str | None:
    """What is wrong, when ``value`` (of the handshake's field ``name``) holds a byte past ASCII."""
    at = next((i for i, byte in enumerate(value) if byte > 0x7F), None)
    if at is None:
        return None
    shown = "-".join(part.capitalize() for part in name.decode("latin-1").split("-")).replace("Websocket", "WebSocket")
    return f"{shown} holds the byte 0x{value[at]:02X} at offset {at}, which is not ASCII (a list of tokens)"


def _stream_error(answer: Callable[[], tuple[list[Any], list[Any]]]) -> tuple[list[Any], list[Any]]:
    """``answer()`` (the daemon's answer to a frame h2 refused: h2's frames and events), any
    failure of it other than h2's ProtocolError turned into the connection error h2 gave before,
    rather than left to end the connection's task (and, as runtime.connection_races records,
    possibly the server)."""
    try:
        return answer()
    except h2.exceptions.ProtocolError:
        raise
    except Exception as failure:
        raise h2.exceptions.ProtocolError("the answer to a malformed request failed") from failure


def _fields_answered(proto: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """The daemon's connection's handler of a HEADERS frame (h2's ``_receive_headers_frame``, in
    its ``_frame_dispatch_table``): a block whose fields h2 refuses (:class:`MalformedFields`)
    ended the whole connection (GOAWAY PROTOCOL_ERROR, every other stream with it); RFC 9113
    8.1.1 makes it an error of its stream. The block was decoded whole (the HPACK table stays
    the client's) and the stream opened; hypercorn never hears of a request's stream. It is
    answered 400 ``INVALID_ARGUMENT`` in the error shape and ended (then reset NO_ERROR if the
    client's side is still open, as an answer before the whole request is); where the answer
    cannot go (the client's flow-control window is smaller than it) the stream is reset
    PROTOCOL_ERROR. Malformed trailers reset their stream PROTOCOL_ERROR, and hypercorn hears
    of it as of a reset: the request is the app's already. A block that ends its request short
    of its content-length (:func:`_ended_short`) is refused the same way. A refused request is
    given to the access log (``proto._lens_refused``, logged once the read's events are handled)."""
    connection = proto.connection

    def receive_headers_frame(frame: Any) -> tuple[list[Any], list[Any]]:
        stream = connection.streams.get(frame.stream_id)
        trailers = stream is not None
        declared = getattr(stream, "_expected_content_length", None)  # (the request's, before its trailers)
        try:
            frames, events = original(frame)
        except MalformedFields as error:
            return _stream_error(lambda: refused(frame, error, trailers))
        short = _ended_short(connection, frame, declared)
        if short is None:
            return frames, events
        method = next((h2.utilities.extract_method_header(ev.headers) for ev in events
                       if isinstance(ev, h2.events.RequestReceived)), None)
        return _stream_error(lambda: refused(frame, MalformedFields(short, method), trailers))

    def refused(frame: Any, error: MalformedFields, trailers: bool) -> tuple[list[Any], list[Any]]:
        if trailers:
            return [], _reset_malformed(connection, frame.stream_id, known=True)
        status = _answer_malformed(connection, frame.stream_id, error, proto.config)
        proto._lens_refused.append((error.method, status))
        return [], []

    return receive_headers_frame


def _ended_short(connection: Any, frame: Any, declared: int | None) -> str | None:
    """The problem, when the HEADERS ``frame`` (h2 has taken it) ended its request short of its
    content-length (``declared`` by the request's head, when ``frame`` holds its trailers): a
    request whose head ends it with content-length above 0, or trailers ending a shorter body.
    h2 checks a body's length on DATA only, so such a request reached the app with its body cut
    (RFC 9113 8.1.1: malformed)."""
    if "END_STREAM" not in frame.flags:
        return None
    stream = connection.streams.get(frame.stream_id)
    expected = declared if declared is not None else getattr(stream, "_expected_content_length", None)
    received = getattr(stream, "_actual_content_length", 0)
    if expected is None or expected == received:
        return None
    return f"the request ended after {received} bytes of body, short of its content-length"


def _body_length_checked(proto: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """The daemon's connection's handler of a DATA frame (h2's ``_receive_data_frame``): a body
    longer or shorter than its ``content-length`` (DATA past it, or END_STREAM before it) ended
    the whole connection (h2's InvalidBodyLengthError, GOAWAY PROTOCOL_ERROR); RFC 9113 8.1.1
    makes it an error of its stream. The request is the app's already (its HEADERS came before),
    so no answer can be put in the app's place: the stream is reset PROTOCOL_ERROR and hypercorn
    hears of it as of a client's reset (the app's request is cancelled). The frame's bytes, which
    no one will read, are handed back to the connection's flow-control window."""
    connection = proto.connection

    def receive_data_frame(frame: Any) -> tuple[list[Any], list[Any]]:
        try:
            return original(frame)
        except h2.exceptions.InvalidBodyLengthError:
            return _stream_error(lambda: cut(frame))

    def cut(frame: Any) -> tuple[list[Any], list[Any]]:
        events = _reset_malformed(connection, frame.stream_id, known=True)
        connection.acknowledge_received_data(frame.flow_controlled_length, frame.stream_id)
        return [], events

    return receive_data_frame


def _answer_malformed(connection: Any, stream_id: int, error: MalformedFields, config: Config) -> int:
    """Answer ``stream_id`` 400 (or reset it PROTOCOL_ERROR where the answer cannot go). Returns
    the status the access log gets: 400, the refusal, whether its answer went or a reset did."""
    body = error_body(400, error.what if error.whole else malformed_message(error.what))
    headers = [(b":status", b"400"), *body_headers(body), *config.response_headers("h2")]
    fits = error.head or len(body) <= min(connection.local_flow_control_window(stream_id),
                                          connection.max_outbound_frame_size)
    if not fits:
        _reset_malformed(connection, stream_id, known=False)
        return 400
    try:
        connection.send_headers(stream_id, headers, end_stream=error.head)
        if not error.head:
            connection.send_data(stream_id, body, end_stream=True)
    except h2.exceptions.ProtocolError:  # (the connection is closing: a GOAWAY was sent)
        _reset_malformed(connection, stream_id, known=False)
        return 400
    stream = connection.streams.get(stream_id)
    if stream is not None and not stream.closed:  # (the client's side is open: its request goes on)
        connection.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.NO_ERROR)
    return 400


def _reset_malformed(connection: Any, stream_id: int, known: bool) -> list[Any]:
    """Reset ``stream_id`` PROTOCOL_ERROR; the event that tells hypercorn, for a stream it has (``known``)."""
    connection.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR)
    if not known:
        return []
    return [h2.events.StreamReset(stream_id=stream_id, error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR,
                                  remote_reset=False)]


# (class, method, its parameters as hypercorn 0.18 and h2 4.4 have them, the replacement's maker)
SEAMS: list[tuple[type, str, tuple[str, ...], Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
    (H11Protocol, "_send_error_response", ("self", "status_code"), _h11_error_response),
    (H11Protocol, "handle", ("self", "event"), _h11_handle),
    (WSStream, "_send_error_response", ("self", "status_code"), _ws_error_response),
    (WSStream, "handle", ("self", "event"), _ws_handle),
    (H2Protocol, "initiate", ("self", "headers", "settings"), _h2_initiate),
    (H2Protocol, "_close_stream", ("self", "stream_id"), _h2_after),
    (H2Protocol, "_send_data", ("self", "stream_id"), _h2_after),
    (H2Protocol, "_handle_events", ("self", "events"), _h2_events),
    (H2Stream, "_process_received_headers", ("self", "headers", "header_validation_flags", "header_encoding"),
     _h2_fields),
    (H2Stream, "_initialize_content_length", ("self", "headers"), _h2_fields),
]


def install() -> list[str]:
    """Replace the methods of :data:`SEAMS` (once per process; later calls change nothing).
    Returns the seams not found as expected (each left as hypercorn has it): empty when all hold."""
    missing = []
    for cls, name, params, make in SEAMS:
        current = vars(cls).get(name)
        if getattr(current, "_lens_original", None) is not None:
            continue  # (installed before)
        replacement = make(current) if inspect.isfunction(current) else None
        if (replacement is None or tuple(inspect.signature(current).parameters) != params
                or inspect.iscoroutinefunction(current) != inspect.iscoroutinefunction(replacement)):
            missing.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
            continue
        replacement._lens_original = current  # type: ignore[attr-defined]
        setattr(cls, name, replacement)
    if not _DECODER_FITS:
        missing += [f"{cls.__module__}.{cls.__qualname__}.{name}" for cls, name, _ in DECODER_SEAMS]
    return missing
