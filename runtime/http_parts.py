"""The parts every HTTP route module shares: the error table and the answers (JSON, errors), the
request body (read, bounded, decoded into a :class:`Body`), the caller (:func:`principal`,
:func:`require_strong`), the checks of ids and names, and the query's arguments (one value each;
integers, ids, a list's page).

Route modules (``*_api.py``, each with its ``add_…_routes(app, svc)``) import these; the app
(``runtime/api.py``) registers them. Every error leaves as ``{"error": {"code", "message"}}`` with
the status of :data:`STATUS`.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable, TypeVar
from urllib.parse import unquote_to_bytes

import msgspec
import msgspec.inspect as mi
import trio
from quart import Response, current_app, g, request

from events.ids import id_rule, is_id
from events.reader import SEQ_MAX

from . import pieces
from .body_hints import body_hint, first_refused, members
from .byte_order import UTF8_BOM, byte_order_mark
from .config import blank_around
from .errors import LensError, short_reason, shortened
from .guard import Guard
from .list_pages import LIST_LIMIT_MAX, ListOrder, split_page
from .pairing import Principal
from .projection_service import ProjectionService
from .server_answers import error_json
from .services import Services
from .terminal import unshowable_in
from .working_context import ERROR_STATUS as CONTEXT_STATUS

# --------------------------------------------------------------------------- errors and answers

# The codes of the workspace routes (workspace_api.py) and their statuses.
WORKSPACE_STATUS: dict[str, int] = {
    "PATH_NOT_FOUND": 404, "PATH_OUTSIDE_WORKSPACE": 403, "SENSITIVE_FILE": 403,
    "PATH_HIDDEN": 403, "HARD_LINKED": 403, "PERMISSION_DENIED": 403, "NOT_A_FILE": 422, "NOT_A_DIRECTORY": 422,
    "BINARY_FILE": 422, "TOO_MANY_LINKS": 422, "BROWSING_UNSUPPORTED": 501,
    "EXECUTOR_UNAVAILABLE": 503, "EXECUTOR_VERSION_MISMATCH": 503, "EXECUTOR_UNAUTHENTICATED": 503,
    "EXECUTOR_TIMEOUT": 504,
}
STATUS: dict[str, int] = {
    "INVALID_JSON": 400, "INVALID_ARGUMENT": 400, "PAIRING_INVALID": 400, "CONFIG_INVALID": 400,
    "AUTH_REQUIRED": 401, "AUTH_INVALID": 401,
    "FORBIDDEN": 403, "HOST_FORBIDDEN": 403, "ORIGIN_FORBIDDEN": 403,
    "NOT_FOUND": 404, "SESSION_NOT_FOUND": 404, "AGENT_NOT_FOUND": 404, "PROJECT_NOT_FOUND": 404, "CLIENT_NOT_FOUND": 404,
    "QUESTION_NOT_FOUND": 404, "JOB_NOT_FOUND": 404, "JOB_FINISHED": 409, "FORK_TOO_DEEP": 409, "HISTORY_ITEM_NOT_FOUND": 404, "QUERY_TOO_LONG": 400, "CONFIG_FILE_NOT_FOUND": 404, "ARTIFACT_NOT_FOUND": 404, "ARTIFACT_CORRUPT": 500,
    "METHOD_NOT_ALLOWED": 405,
    "ANSWER_INVALID": 422, "SESSION_DELETED": 409, "SESSION_QUARANTINED": 409, "INPUT_NOT_QUEUED": 409, "QUESTION_SETTLED": 409,
    "BODY_TIMEOUT": 408, "BODY_TOO_LARGE": 413, "APPEND_REJECTED": 413, "CONTENT_ENCODING_UNSUPPORTED": 415,
    "VALIDATION_FAILED": 422, "MODEL_UNKNOWN": 422, "PROVIDER_DISABLED": 422, "PROVIDER_KEY_REQUIRED": 422,
    "WORKSPACE_INVALID": 422, "IMAGE_UNSUPPORTED": 422,
    "CONFIG_FILE_UNREADABLE": 422, "CONFIG_FILE_NOT_REGULAR": 422,
    "SKILL_NOT_FOUND": 422, "SKILL_INVALID": 422, "NO_WORKSPACE": 422, "SKILL_UNAVAILABLE": 503,
    "TOOL_DISABLED": 422, "PARAM_NOT_ALLOWED": 422,  # (a /skill: input the tool policy refuses)
    "PAIRING_LIMIT": 429, "CONFIG_FILE_CHANGED": 409,
    "SESSION_UNAVAILABLE": 503, "PAIR_FILE_INVALID": 503, "PAIR_FILE_UNWRITABLE": 503, "CONFIG_FILE_UNWRITABLE": 503, "PROJECTION_STALLED": 503, "PROJECTIONS_UNREADABLE": 503, "STORE_CLOSED": 503,
    "STORE_UNAVAILABLE": 503,
    "HEADERS_TOO_LARGE": 431, "TRANSFER_ENCODING_UNSUPPORTED": 501,  # (answered by the server: server_answers)
}
# With the workspace routes' codes and the Working Context's (working_context.py, its routes in
# context_api.py); a code named above keeps its own status.
STATUS = {**WORKSPACE_STATUS, **CONTEXT_STATUS, **STATUS}


# The 503s a retry can help, and the seconds their ``Retry-After`` asks a client to wait (RFC 9110
# 10.2.3): a session's actor restarting or backing off a failed write, a daemon stopping (back once
# restarted), a log that cannot write (a full or read-only disk: nothing was recorded), projections
# catching up, an executor reconnecting (at most 2 s apart). One value: none of them knows when it
# ends, and 5 s is short beside a person's wait and long beside a busy loop. The 503s that need
# an operator (a pair file that is invalid or unwritable, projections that cannot be read, an
# executor of another version or token) carry none: waiting changes nothing.
RETRY_AFTER_SECONDS = 5
RETRY_AFTER_CODES = frozenset({"SESSION_UNAVAILABLE", "STORE_CLOSED", "STORE_UNAVAILABLE", "PROJECTION_STALLED",
                               "EXECUTOR_UNAVAILABLE", "SKILL_UNAVAILABLE"})


class ApiError(LensError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


def error_response(code: str, message: str, status: int | None = None) -> Response:
    body = error_json(code, message)
    resp = Response(body, status=status or STATUS.get(code, 500), content_type="application/json")
    if code in RETRY_AFTER_CODES:
        resp.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return resp


def json_response(data: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(data), status=status, content_type="application/json")


def principal() -> Principal:
    return g.principal  # set by the before_request guard


def require_strong(what: str) -> None:
    Guard.require_strong(principal(), what)


# --------------------------------------------------------------------------- request bodies


class Body(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """A JSON body of a route: camelCase keys, unknown fields refused (422), keyword fields."""


class EmptyBody(Body):
    """The body of a route that takes none (abort, withdraw, steer, compact, a job's stop, a
    session's delete): empty or ``{}``; any field is 422 ``VALIDATION_FAILED`` naming it, never
    ignored (a client that sends one means something the route would not do)."""


B = TypeVar("B")


_HIGH_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])")


BODY_STALL_SECONDS = 10.0  # a request body from which no byte arrives for this long is refused (408)
BODY_SECONDS = 60.0  # and one that takes longer than this in all (Quart's BODY_TIMEOUT, which it replaces)


async def receive_body() -> bytes:
    """The request's body, as it arrives; 408 ``BODY_TIMEOUT`` when no byte of it arrives for
    :data:`BODY_STALL_SECONDS` (a ``Content-Length`` larger than what is sent), or it all takes
    longer than :data:`BODY_SECONDS`.

    Quart's own bound was the whole body in 60 s, answered as a 408 outside the error table: a
    client whose body stopped arriving held its request, its connection and its task for a
    minute. On loopback a body arrives at once, whatever its size; a client pausing for 10 s in
    the middle of one is broken or hostile, and one that resends loses nothing (nothing was
    done)."""
    parts: list[bytes] = []
    got = 0
    body = request.body
    # (each piece read is taken out of the body, so Quart's own limit sees one piece: counted here)
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    with trio.move_on_after(BODY_SECONDS):
        while True:
            with trio.move_on_after(BODY_STALL_SECONDS) as stalled:
                try:
                    parts.append(await body.__anext__())
                except StopAsyncIteration:
                    g.body_sent = b"".join(parts)  # (what the client sent: see api.finish_response)
                    return g.body_sent
                got += len(parts[-1])
                if limit is not None and got > limit:
                    raise ApiError("BODY_TOO_LARGE", f"the body is more than {limit} bytes; the limit is {limit}")
            if stalled.cancelled_caught:
                raise ApiError("BODY_TIMEOUT", f"the request body stopped arriving: no byte for "
                               f"{BODY_STALL_SECONDS:g} s after {got} byte(s)"
                               + (f" of the {request.content_length} announced" if request.content_length else ""))
    raise ApiError("BODY_TIMEOUT", f"the request body took longer than {BODY_SECONDS:g} s to arrive")


# A body of more bytes than this is decoded in a worker thread, a step at a time (below it, on the
# loop: about a millisecond of ASCII, where the thread's hop costs more than it frees).
BODY_ON_LOOP_BYTES = 256 * 1024
SCAN_SLICE_BYTES = 1024 * 1024  # the worker's scans of the raw body (colons, escapes) go this far a call


async def read_body(kind: type[B]) -> B:
    """The request's JSON body as ``kind``: 400 ``INVALID_JSON`` when it is no JSON (an empty
    body is named as such), 422 ``VALIDATION_FAILED`` when its shape does not match. A body of a
    route that takes none (:class:`EmptyBody`, or another :class:`Body` without fields: any field
    given is refused) may be empty. An optional field that takes no null, sent as null, is that
    field left out (:func:`_null_is_left_out`). A leading UTF-8 byte order mark is
    skipped (RFC 8259 8.1 lets a parser ignore it; editors and some runtimes write one).

    A body of more than :data:`BODY_ON_LOOP_BYTES` is decoded in a worker thread, each step (the
    decode, the repeated-key check, the typed decode) one call apart from the next, the worker
    letting go of the interpreter's lock in between: the same answer, and the same errors."""
    raw = await receive_body()
    if raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM):]
    if not raw.strip():
        if issubclass(kind, Body) and not kind.__struct_fields__:
            return kind()
        raise ApiError("INVALID_JSON", "the request body is empty; this route takes a JSON object")
    outcome = await decoded_body(raw, kind)
    if not isinstance(outcome, Refused):
        return outcome
    if outcome.what == "decode":
        reason = _not_utf8(raw) or outcome.detail
        raise ApiError("INVALID_JSON", f"the request body is not valid JSON ({reason}){_sent_as_form()}")
    if outcome.what == "deep":
        raise ApiError("INVALID_JSON", "the request body is nested too deeply")
    if outcome.what == "repeated":
        repeated = outcome.detail
        shown = repeated if len(repeated) <= 80 else repeated[:80] + "…"
        raise ApiError("INVALID_JSON", f"the request body is not valid JSON (an object holds the key {shown!r} "
                                       f"twice; send each key once)")
    raise ApiError("VALIDATION_FAILED", f"the request body does not match: {short_reason(outcome.error)}"
                                        f"{body_hint(kind, outcome.detail)}")


async def decoded_body(raw: bytes, kind: type[B], *, on_loop_bytes: int = BODY_ON_LOOP_BYTES) -> B | Refused:
    """``raw`` (a body, not blank) decoded as ``kind``, or why not: on the loop up to
    ``on_loop_bytes``, in a worker thread past it (a step at a time, giving way in between)."""
    if len(raw) <= on_loop_bytes:
        return _decode_body(raw, kind, _stay)
    # (the give-way looked up at each call: the benches' --variant replaces it)
    return await trio.to_thread.run_sync(_decode_body, raw, kind, pieces.give_way)


class Refused(msgspec.Struct, frozen=True):
    """Why :func:`_decode_body` refused a body: ``what`` is ``decode`` (msgspec's reason in
    ``detail``), ``deep``, ``repeated`` (the key) or ``shape`` (the validation error)."""

    what: str
    detail: str = ""
    error: Exception | None = None


def _stay() -> None:
    return None


def _decode_body(raw: bytes, kind: type[B], between: Callable[[], None]) -> B | Refused:
    """``raw`` decoded as ``kind``, or why not; ``between`` runs between two steps (in a worker
    thread, :func:`runtime.pieces.give_way`). Touches nothing of the request: the caller words the refusal."""
    try:
        decoded = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        reason = str(exc)
        if reason == "Input data was truncated" and _high_surrogate_escape(raw, between):
            reason = "a \\uD800–\\uDBFF escape not followed by its low surrogate"  # msgspec says "truncated"
        return Refused("decode", reason)
    except RecursionError:  # msgspec's depth limit is the interpreter's recursion limit
        return Refused("deep")
    between()
    try:
        repeated = _repeated_key(raw, decoded, between)
    except RecursionError:
        return Refused("deep")
    if repeated is not None:
        return Refused("repeated", repeated)
    between()
    nulls = _null_is_left_out(kind)
    if nulls and isinstance(decoded, dict) and any(name in decoded and decoded[name] is None for name in nulls):
        decoded = {k: v for k, v in decoded.items() if not (v is None and k in nulls)}
        raw = msgspec.json.encode(decoded)
        between()
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        if "[...]" in str(exc):  # (msgspec names no key of a map: which tool's entry of toolPolicy?)
            exc = msgspec.ValidationError(first_refused(decoded, kind, "$") or str(exc))
        return Refused("shape", str(exc), exc)
    except RecursionError:
        return Refused("deep")


@functools.cache
def _null_is_left_out(kind: type) -> frozenset[str]:
    """The JSON names of the optional fields of the body ``kind`` that take no null: a null there
    is the field left out, its default (a client that writes every field it does not set as null
    means nothing else). A field that takes null gives it its own meaning (``PATCH
    /sessions/{id}``: back to the default; ``expectDigest``: no file); a required one is still
    refused naming it. Kept per body type, so every body type is a module's own: one defined in
    a function that adds routes would be a new type, and a new entry, for each daemon."""
    try:
        info = mi.type_info(kind)
    except (TypeError, ValueError):
        return frozenset()
    if not isinstance(info, mi.StructType):
        return frozenset()
    return frozenset(f.encode_name for f in info.fields if not f.required
                     and not any(isinstance(m, (mi.NoneType, mi.AnyType)) for m in members(f.type)))


def _high_surrogate_escape(raw: bytes, between: Callable[[], None]) -> bool:
    """Whether ``raw`` holds a ``\\uD800``–``\\uDBFF`` escape with no low surrogate's escape after
    it: a search per :data:`SCAN_SLICE_BYTES` (with ``between`` in between) when ``between`` is a
    worker's give-way, one search otherwise. A match and what it looks ahead at span at most 12
    bytes, so each search reaches 12 bytes past its slice and takes a match that starts in it."""
    if between is _stay or len(raw) <= SCAN_SLICE_BYTES:
        return _HIGH_SURROGATE_ESCAPE.search(raw) is not None
    for pos in range(0, len(raw), SCAN_SLICE_BYTES):
        end = pos + SCAN_SLICE_BYTES
        m = _HIGH_SURROGATE_ESCAPE.search(raw, pos, min(end + 12, len(raw)))
        if m is not None and (m.start() < end or end + 12 >= len(raw)):
            return True
        between()
    return False


def _scan(raw: bytes, needle: bytes, between: Callable[[], None]) -> tuple[int, bool]:
    """How many ``:`` ``raw`` holds, and whether it holds ``needle``: a call per
    :data:`SCAN_SLICE_BYTES` when ``between`` is a worker's give-way, one call each otherwise."""
    if between is _stay or len(raw) <= SCAN_SLICE_BYTES:
        return raw.count(b":"), needle in raw
    colons, found = 0, False
    for at in range(0, len(raw), SCAN_SLICE_BYTES):
        colons += raw.count(b":", at, at + SCAN_SLICE_BYTES)
        # (a needle across the slice's end is found from this slice's start)
        found = found or raw.find(needle, at, at + SCAN_SLICE_BYTES + len(needle) - 1) >= 0
        between()
    return colons, found


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _each_key_once(pairs: list[tuple[str, Any]]) -> None:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen.add(key)


def _repeated_key(raw: bytes, decoded: Any, between: Callable[[], None] = _stay) -> str | None:
    """The first key an object of ``raw`` (JSON msgspec has read as ``decoded``) holds twice,
    compared as decoded (``"a"`` and ``"\\u0061"`` are one key); None when each object's keys
    are distinct. msgspec keeps the last value of a repeated key without a word; RFC 8259 leaves
    its meaning to the reader, so another reader of the same body (a proxy, a log) may act on the
    first.

    Each key written is followed by one ``:``, and every other ``:`` of ``raw`` is in a string,
    written as itself unless escaped (``\\u003a``); ``decoded`` encoded again writes each key it
    holds once, each followed by one ``:``, and the ``:`` of its strings as themselves. A body
    without such an escape with as many ``:`` as ``decoded`` encoded again repeats no key (a
    repetition drops a key and its value, ``:`` and all): only another body (one that repeats a
    key, or escapes a ``:``) is read again, pair by pair, to name the first repeated key."""
    colons, escaped = _scan(raw, b"\\u003", between)
    if not escaped:
        again = msgspec.json.encode(decoded)
        between()
        if colons == _scan(again, b":", between)[0]:
            return None
    try:
        json.loads(raw, object_pairs_hook=_each_key_once, parse_int=_nothing, parse_float=_nothing)
    except _RepeatedKey as exc:
        return exc.key
    return None


def _nothing(_: str) -> None:
    return None


_FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def _sent_as_form() -> str:
    """What to do, for a body that is no JSON and came as a form: ``curl -d 'clientId=me'`` (or
    ``-F``) sends one, and msgspec's reason ("invalid character (byte 0)") said nothing of it. A
    JSON body under a form's type is read as JSON all the same (the type is not judged)."""
    if request.mimetype not in _FORM_TYPES:
        return ""
    return f"; it came as a form ({request.mimetype}), and this route takes a JSON object, as {{\"key\": \"value\"}}"


_UTF8_NAMES = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})


def _not_utf8(raw: bytes) -> str | None:
    """Why a body that failed to decode is no UTF-8, when the request says so: a UTF-16 or UTF-32
    byte order mark, or a ``Content-Type`` charset other than UTF-8 (JSON between systems is
    UTF-8, RFC 8259 8.1). msgspec's reason for those ("invalid character (byte 0)") named no cause."""
    if byte_order_mark(raw) in ("UTF-16", "UTF-32"):
        return "JSON is sent as UTF-8, and this body starts with a UTF-16 or UTF-32 byte order mark"
    charset = request.mimetype_params.get("charset", "").strip().strip('"')
    if charset and charset.lower() not in _UTF8_NAMES:
        shown = charset if len(charset) <= 40 else charset[:40] + "…"
        return f"JSON is sent as UTF-8, and the Content-Type says charset={shown}"
    return None


# --------------------------------------------------------------------------- ids and names


THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")


def check_name(value: str, what: str) -> str:
    """A display name: 1 to 200 characters, not all blank, no control characters (C0, DEL, C1),
    line or paragraph separators (U+2028, U+2029) nor invisible format characters (zero-width
    ones, bidirectional controls: Unicode's Cf), as a pairing name
    (:data:`runtime.terminal.UNSHOWABLE`): it is shown on one line, as it looks. The error names
    the first such character."""
    found = unshowable_in(value)
    if not value.strip() or len(value) > 200 or found is not None:
        raise ApiError("VALIDATION_FAILED", f"{what} must be 1 to 200 characters, not all blank, without control "
                                            f"characters, line separators or invisible format characters (zero-width "
                                            f"characters, bidirectional controls)"
                                            + ("" if found is None else f"; it holds {found}"))
    return value


def check_session_settings(model: str | None, thinking_level: str | None) -> None:
    """A session's ``model`` and ``thinkingLevel`` as given, checked at the door (whether a
    provider serves the model is the actor's check: ``MODEL_UNKNOWN``)."""
    if thinking_level is not None and thinking_level not in THINKING_LEVELS:
        raise ApiError("VALIDATION_FAILED", f"thinkingLevel must be one of {', '.join(THINKING_LEVELS)}")
    if model is not None and not (0 < len(model) <= 200 and model.strip() == model):
        raise ApiError("MODEL_UNKNOWN", "model must be '<provider>/<model>', at most 200 characters, with no "
                                        f"blank around it: {_model_fault(model)}")


def _model_fault(model: str) -> str:
    """What is wrong with a model reference :func:`check_session_settings` refuses at the door
    (a blank around it, copied with the reference, is the likeliest and was left unnamed)."""
    if not model:
        return "it is empty"
    return blank_around(model) or f"it has {len(model)} characters"


def check_id(value: str, what: str) -> str:
    if not is_id(value):
        raise ApiError("INVALID_ARGUMENT", id_rule(what))
    return value


# --------------------------------------------------------------------------- query arguments


_DECIMAL = re.compile(r"-?[0-9]+")  # ASCII digits only (int() also takes '1_000', '٣', ' 5')
MAX_DIGITS = 20  # more significant digits than this are past any bound (SQLite's are 19)


def parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    """``raw`` as an integer from ``lo`` to ``hi``; anything else is 400 saying which rule it
    breaks (a number of many digits is out of range, not "not an integer"). ``-0`` is 0."""
    if not _DECIMAL.fullmatch(raw):
        raise ApiError("INVALID_ARGUMENT", f"{name} must be an integer (decimal digits)")
    digits = raw.lstrip("-").lstrip("0") or "0"
    if len(digits) > MAX_DIGITS:  # (never int() of thousands of digits: slow, then refused)
        raise ApiError("INVALID_ARGUMENT", f"{name} must be from {lo} to {hi}")
    v = -int(digits) if raw.startswith("-") else int(digits)
    if not lo <= v <= hi:
        raise ApiError("INVALID_ARGUMENT", f"{name} must be from {lo} to {hi}")
    return v


def one_arg(name: str) -> str | None:
    """The query parameter ``name`` (``None`` when absent); given twice it is 400, and so is a
    value whose percent-encoded bytes are no UTF-8 text (:func:`_query_not_utf8`)."""
    values = request.args.getlist(name)
    if len(values) > 1:
        raise ApiError("INVALID_ARGUMENT", f"{name} is given {len(values)} times; give it once")
    if values and "%" in values[0] and (written := _query_not_utf8(name)) is not None:
        raise ApiError("INVALID_ARGUMENT", f"{name} is not UTF-8: {shortened(written)!r} encodes bytes that are no "
                                           "UTF-8 text; percent-encode the value's UTF-8 bytes")
    return values[0] if values else None


def raw_query_not_utf8(query: bytes) -> str | None:
    """The message, when the raw bytes of a request's query (as sent, not percent-decoded: only
    HTTP/2 lets such bytes through, h11 refuses them in the request line) are no UTF-8 text: the
    first such byte and its offset in the query; else None. (:func:`_query_not_utf8` judges a
    parameter's percent-encoded bytes, once the query is read.)"""
    try:
        query.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = query[exc.start]
        return (f"the query is not UTF-8: the byte 0x{byte:02X} at offset {exc.start} of the query is no UTF-8 "
                f"text; percent-encode the value's UTF-8 bytes")
    return None


def _query_not_utf8(name: str) -> str | None:
    """The value of the query parameter ``name`` as written, when its percent-encoded bytes are no
    UTF-8 text; else None. The query's parser keeps such bytes percent-encoded (werkzeug 2.3 on),
    so ``path=%ff`` read as the three characters ``%FF``: a name other than the one sent (a file
    named ``%FF`` was served for it)."""
    for part in request.query_string.split(b"&"):
        key, _, value = part.partition(b"=")
        if unquote_to_bytes(key.replace(b"+", b" ")) != name.encode():
            continue
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("latin-1")
    return None


def bool_arg(name: str) -> bool:
    """The query flag ``name``: absent, empty, ``0`` or ``false`` is false; ``1`` or ``true`` is
    true; any other value is 400."""
    raw = one_arg(name)
    if raw not in (None, "", "0", "1", "false", "true"):
        raise ApiError("INVALID_ARGUMENT", f"{name} must be true, false, 1 or 0")
    return raw in ("1", "true")


def camel_keys(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with its snake_case keys in camelCase, as the HTTP answers spell them."""
    return {k.split("_")[0] + "".join(w.title() for w in k.split("_")[1:]): v for k, v in d.items()}


def id_arg(name: str, what: str) -> str | None:
    """An id filter: absent is ``None``; present it must be a well-formed id (an empty one would
    silently filter nothing, or match nothing)."""
    value = one_arg(name)
    return None if value is None else check_id(value, what)


def id_filter(name: str, alias: str, what: str) -> str | None:
    """An id filter written ``name`` (as the spec writes it) or ``alias`` (the camelCase of the
    JSON bodies: ``?sessionId=`` used to be ignored, and a stream meant for one session carried
    every session's events); both given is 400, as the filter given twice is (even naming the
    same id: one filter, written once)."""
    value, other = id_arg(name, what), id_arg(alias, what)
    if value is not None and other is not None:
        raise ApiError("INVALID_ARGUMENT", f"{name} and {alias} are the same filter, given twice; give one of them")
    return value if value is not None else other


def int_arg(name: str, default: int, lo: int, hi: int | None) -> int:
    """An integer query parameter: absent is ``default``; empty, twice or malformed is 400."""
    raw = one_arg(name)
    if raw is None:
        return default
    return parse_int(name, raw, lo, SEQ_MAX if hi is None else hi)


def optional_int(name: str, needs_it: str) -> int | None:
    """The integer ``name`` (0 to ``SEQ_MAX``), or ``None`` when absent; ``needs_it`` (a
    parameter that means something only beside ``name``) given without it is 400."""
    raw = one_arg(name)
    if raw is None:
        if one_arg(needs_it) is not None:
            raise ApiError("INVALID_ARGUMENT", f"{needs_it} sizes a page that {name} begins; give {name} too")
        return None
    return parse_int(name, raw, 0, SEQ_MAX)


def list_page_args(what: str) -> tuple[int | None, str | None]:
    """A list's ``limit`` (1 to ``LIST_LIMIT_MAX``; absent: the whole list, as the spec's
    answer) and ``after`` (a ``what`` id: the page begins after it); ``after`` alone is 400."""
    raw = one_arg("limit")
    after = id_arg("after", f"after ({what} id)")
    if raw is None:
        if after is not None:
            raise ApiError("INVALID_ARGUMENT", "after continues a page that limit sizes; give limit too")
        return None, None
    return parse_int("limit", raw, 1, LIST_LIMIT_MAX), after


def next_after(rows: list[tuple], more: bool, limit: int | None) -> dict[str, Any]:
    """``nextAfter`` of a paged list (the last row's id while more follow, else ``None``); a
    list asked for whole answers without it, as before."""
    if limit is None:
        return {}
    return {"nextAfter": rows[-1][0] if more else None}


async def read_list(projections: ProjectionService, order: ListOrder, where: list[str], args: list[Any],
                    limit: int | None, after: str | None) -> tuple[list[tuple], bool]:
    """The rows of a list (whole, or the page ``limit`` / ``after`` asks for: see
    :mod:`runtime.list_pages`) and whether more follow. ``after`` naming no row of the list's
    table is 400: a cursor the daemon never gave (a row deleted between pages stays a row)."""
    key = None
    if after is not None:
        found = await projections.query(order.cursor_sql(), (after,))
        if not found:
            raise ApiError("INVALID_ARGUMENT", f"after names no {order.table[:-1]} ({after!r}); "
                           f"give an id a page's nextAfter gave, or leave after out to start at the first")
        key = found[0]
    tail, tail_args = order.page(where, args, key, limit)
    return split_page(await projections.query(order.select + tail, tail_args), limit)


async def check_not_past_end(svc: Services, name: str, after: int) -> None:
    """A position past the log's last event was never one a client saw (every seq it saw is
    committed): reading "after" it would silently skip the events up to it once they exist.

    The writer records ``last_seq`` just after its commit returns, and a reader may already have
    read (and a client been given) that commit's events: a position past ``last_seq`` is asked
    of the log itself before it is refused."""
    if after > svc.store.last_seq and not await svc.store.read_rows(after=after - 1, limit=1):
        raise ApiError("INVALID_ARGUMENT", f"{name} {after} is past the last event of this log "
                       f"({svc.store.last_seq}); start again without it")
