"""The HTTP app (``/api/v1`` and the dashboard page, on quart-trio): :func:`create_app` makes it,
with its app-level hooks (the guard before each request, the answer's last touches after it, the
error handlers, ``OPTIONS``) and the ASGI wrappers around it, and registers the route modules.

Each route module (``*_api.py``, ``dashboard_page.py``) adds its routes with
``add_…_routes(app, svc)``; what they share is in ``http_parts.py`` (the error table, answers,
bodies, checks, query arguments) and ``services.py`` (:class:`Services`). Handlers are thin: they
validate the body (msgspec; malformed JSON 400, wrong shape 422), check the caller's trust, call
the supervisor / projections / store, and shape JSON (camelCase). Every error leaves as
``{"error": {"code", "message"}}`` with the status of :data:`runtime.http_parts.STATUS`.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any, Callable, Iterable

import trio
from quart import Response, current_app, g, request
from quart.globals import request_ctx
from quart.wrappers.response import DataBody
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from events.errors import LogError
from events.secrets import Secrets
from events.store import StoreWriteFailed
from projections.history import HistoryError

from .artifacts_api import add_artifact_routes
from .config_api import CONFIG_FILE_PLACEHOLDER, add_config_routes, refuse_slashed_name
from .connection_races import guard_connection_races
from .context_api import add_context_routes
from .dashboard_page import add_dashboard_routes
from .errors import LensError
from .guard import AuthRequired, Guard, HostForbidden, OriginForbidden
from .head_limit import limit_head
from .history_api import add_history_routes
from .http_parts import BODY_ON_LOOP_BYTES, BODY_SECONDS, STATUS, ApiError, error_response, raw_query_not_utf8
from .jobs_api import add_job_routes
from .models_api import add_model_routes
from .pairing import PairingLimit
from .pairing_api import add_pairing_routes
from .path_words import ENCODED_SLASH, MethodNotTaken, Reading, SlashInPlaceholder, read_words
from .projects_api import add_project_routes
from .route_hints import API_PREFIX, near_route, under_the_api
from .server_answers import refuse
from .services import Services
from .sessions_api import add_session_routes
from .sse_socket import keep_send
from .stream_api import STREAM_PATH, add_stream_routes
from .workspace_api import add_workspace_routes
from .write_stall import bound_writes

log = logging.getLogger("lens.http")

# Endpoints whose JSON answer is what the user wrote, given back as written (a copy with a key
# scrubbed would lose it on the next write): the only ones not scrubbed of the daemon's keys.
AS_WRITTEN = frozenset({"read_config"})


# --------------------------------------------------------------------------- the app


# Every method some route takes: what ``OPTIONS *`` answers (RFC 9110 9.3.7, the server itself).
ALLOWED_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def options_response(allowed: Iterable[str]) -> Response:
    """204 with ``Allow`` and no body, type or length (RFC 9110 8.6: a 204 carries none)."""
    resp = Response(b"", status=204)
    resp.headers["Allow"] = ", ".join(sorted(allowed))
    del resp.headers["Content-Type"]
    del resp.headers["Content-Length"]
    return resp


class _App(QuartTrio):
    async def make_default_options_response(self) -> Response:
        """``OPTIONS`` on a route: 204 with ``Allow`` (Quart's own answer was a 200 with an empty
        ``text/html`` body, a type no route of the API answers)."""
        return options_response(request_ctx.url_adapter.allowed_methods())


def _check_body(limit: int) -> None:
    """A declared ``Content-Length`` past ``server.maxBodyBytes`` is 413 ``BODY_TOO_LARGE`` naming
    both (before the body is read: the connection is closed after the answer); then the body's
    content coding (:func:`_check_content_encoding`). The public routes' bodies as the others'."""
    length = request.content_length
    if length is not None and length > limit:
        raise ApiError("BODY_TOO_LARGE", f"the body is {length} bytes; the limit is {limit}")
    _check_content_encoding()


def _shown_path(path: str) -> str:
    """A request path for a message: quoted (a control character shows escaped) and cut to 120
    characters (a client's long path is not echoed whole)."""
    return repr(path if len(path) <= 120 else path[:120] + "…")


def _method_shown() -> str:
    """The request's method for a message, cut to 20 characters (a client's long one is not echoed whole)."""
    return request.method if len(request.method) <= 20 else request.method[:20] + "…"


def _not_allowed(shown: str, allowed: Iterable[str]) -> tuple[str, dict[str, str]]:
    """405's message naming the methods the route at ``shown`` takes, and its ``Allow`` header
    (RFC 9110 15.5.6: a 405 carries it)."""
    methods = sorted(allowed)
    return (f"{_method_shown()} is not allowed on {shown}; it takes {', '.join(methods)}",
            {"Allow": ", ".join(methods)})


def _no_route(path: str, show: Callable[[str], str]) -> str:
    """404's message naming the method and ``path`` (shown by ``show``), and the route the client
    may have meant when the path only has a trailing slash more, or names a route outside
    :data:`API_PREFIX` or with a word misspelt (runtime/route_hints.py)."""
    message = f"no route {_method_shown()} {show(path)}"
    bare = path.rstrip("/")
    if bare != path and bare:
        try:  # (the same method: `PUT /config/files/` means a file's route with no name, not the list)
            current_app.url_map.bind("lens").match(bare, method=request.method)
        except HTTPException:
            pass
        else:
            message += f"; routes take no trailing slash: {show(bare)}"
    meant = under_the_api(current_app.url_map, bare or path, request.method)
    if meant is not None:
        message += f"; the API is under {API_PREFIX}: {show(meant)}"
    elif (near := near_route(current_app.url_map, bare or path)) is not None:
        message += f"; a route near it: {show(near)}"
    return message


def _route_message(exc: HTTPException) -> tuple[str, dict[str, str]]:
    """The message (and headers) of a request no route takes: 404 (:func:`_no_route`) or 405
    (:func:`_not_allowed`)."""
    if isinstance(exc, MethodNotAllowed):
        return _not_allowed(_shown_path(request.path), exc.valid_methods or ())
    return _no_route(request.path, _shown_path), {}


def _as_written_answer(reading: Reading, raw_path: bytes) -> Response:
    """The answer to a path one of whose words holds an encoded slash (runtime/path_words.py):
    400 ``INVALID_ARGUMENT`` naming the placeholder that holds it and its value (a config file's
    name: 404 ``CONFIG_FILE_NOT_FOUND``, as any name not listed), or the 404 / 405 of the path as
    written (never those of the path the slash would make)."""
    shown = _shown_path(raw_path.decode("latin-1"))
    if isinstance(reading, SlashInPlaceholder):
        if reading.key == CONFIG_FILE_PLACEHOLDER:
            refuse_slashed_name(reading.value, request.method)
        written = ENCODED_SLASH.search(raw_path)
        return error_response("INVALID_ARGUMENT", f"the path's {reading.what} {_shown_path(reading.value)} holds a "
                                                  f"slash ({written.group().decode() if written else '%2F'} in the "
                                                  f"path {shown}); no {reading.what} holds one")
    if isinstance(reading, MethodNotTaken):
        message, headers = _not_allowed(shown, reading.allowed)
        resp = error_response("METHOD_NOT_ALLOWED", message)
        resp.headers.update(headers)
        return resp
    if reading.slash_routes:  # (the encoded slash alone keeps the path from a route)
        return error_response("NOT_FOUND", f"no route {_method_shown()} {shown}: a {reading.written} is a slash "
                                           f"inside a word of the path, and no route has one there")

    def show(path: str) -> str:  # (a path of the words as written: the encoded slash shown as the client wrote it)
        return _shown_path(path.replace(reading.mark, reading.written))

    return error_response("NOT_FOUND", _no_route(reading.words, show))


def create_app(svc: Services) -> QuartTrio:
    app = _App(__name__, static_folder=None)
    # `/sessions//events` is no route (an empty id), not a redirect to `/sessions/events`.
    app.url_map.merge_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = svc.config.server.max_body_bytes
    app.config["RESPONSE_TIMEOUT"] = None  # SSE streams are long; each sets timeout = None too
    app.config["BODY_TIMEOUT"] = BODY_SECONDS  # (read_body bounds the body itself: receive_body)
    # (keep_send outermost: it keeps the server's own send for SSE's direct write path; then the
    # bound on a stalled client's body writes; the connection guards next, before anything in the
    # app can write; then the head's limit; then the Host's check (its 403 comes first), then the
    # target's (an empty path, a raw query that is no UTF-8 text: 400), both before Quart reads them)
    checked = _host_checked(_target_checked(_finish_responses(app.asgi_app)), svc)
    guarded = guard_connection_races(limit_head(checked))
    app.asgi_app = keep_send(bound_writes(guarded, frozenset({STREAM_PATH})))  # type: ignore[method-assign]

    @app.before_request
    async def guard() -> Response | None:
        path = request.path
        svc.guard.check_host(request.headers.get("Host"))
        origins = request.headers.getlist("Origin")
        if len(origins) > 1:  # (the first one counted, as for Authorization below)
            raise OriginForbidden(f"Origin is given {len(origins)} times; a request comes from one page")
        svc.guard.check_origin(origins[0] if origins else None)
        if request.method == "OPTIONS" and request.scope.get("raw_path") == b"*":  # (the asterisk form: no route, no credential)
            return options_response(ALLOWED_METHODS)
        # A word of the path holding an encoded slash is answered by the path as written: outside
        # the API at once (as any path there), under it once the credential is checked.
        raw_path = request.scope.get("raw_path") or b""
        as_written = read_words(current_app.url_map, raw_path, request.method)
        if as_written is not None and not raw_path.startswith(API_PREFIX.encode() + b"/"):
            return _as_written_answer(as_written, raw_path)
        if not path.startswith(API_PREFIX + "/"):
            # (no route is there but the dashboard's `/`: a path outside the API, also one under
            # another `/api/` prefix, is answered 404 naming the route meant, no credential asked)
            return None
        if path in Guard.PUBLIC_PATHS and as_written is None:
            # (any method: a wrong one is 405, not "this route needs a credential" — it does not)
            _check_body(svc.config.server.max_body_bytes)
            return None
        # (the pair file's generation the credential was checked against, read first: a stream
        # re-checks its credential once the file has changed since, even before it starts)
        g.pairs_generation = svc.pairs.generation
        authorizations = request.headers.getlist("Authorization")
        if len(authorizations) > 1:  # (the first one counted: which credential a request carries is no guess)
            raise AuthRequired(f"Authorization is given {len(authorizations)} times; give one credential")
        g.principal = svc.guard.authenticate(authorizations[0] if authorizations else None)
        # The credential first, as for a body that is read: a client without one was told its
        # body was too large (413), and then, once it had made it smaller, that it needs one.
        _check_body(svc.config.server.max_body_bytes)
        if as_written is not None:
            return _as_written_answer(as_written, raw_path)
        return None

    @app.after_request
    async def finish_response(response: Response) -> Response:
        # An error answered before the body was read (over the limit, no credential) leaves the
        # rest of the body on the connection: a client reusing it (httpx, browsers) then waited
        # forever for its next answer. Closing costs that client one reconnect.
        if response.status_code >= 400 and (request.content_length or "transfer-encoding" in request.headers):
            response.headers["Connection"] = "close"
        response.headers["X-Content-Type-Options"] = "nosniff"  # no answer is ever taken for another type
        secrets = svc.store.secrets
        # Every JSON answer leaves without the keys the daemon knows: what it shows is built from
        # the log (views, history, jobs, changes…), and an event stored before its key was known
        # still holds it. Streams (SSE) scrub each frame; a config file is answered as written.
        if secrets and response.mimetype == "application/json" and isinstance(response.response, DataBody):
            clean = None
            if response.status_code >= 500:
                # A server error's message is the daemon's own text (a provider's or the store's
                # error, cut to a limit), which no caller chose: it loses the pieces of a key a
                # cut left too.
                clean = secrets.scrub_message_json(response.response.data)
            elif response.status_code >= 400:
                # A client error quotes what the client sent: whole keys only. A scrub of pieces
                # would answer differently as a guess agreed with a key for longer, telling the
                # client how far it matched. Where a 4xx message quotes the daemon's own text cut
                # to a limit, that text is scrubbed of whole keys before it is cut, so no piece
                # arises (a config file's route included: its errors are no file). The pieces of
                # a key the request holds whole go too (its value cut in a message: `whenBusy
                # 'xxx…sk-proj-E4…'`): that tells the client nothing it did not send.
                clean = secrets.scrub_json(response.response.data)
                sent = await _sent_keys(secrets)
                if sent:
                    clean = sent.scrub_message_json(clean if clean is not None else response.response.data) or clean
            elif request.endpoint not in AS_WRITTEN:
                clean = secrets.scrub_json(response.response.data)
            if clean is not None:
                response.set_data(clean)
        return response

    @app.errorhandler(LensError)
    async def lens_error(exc: LensError) -> Response:
        resp = error_response(exc.code, exc.message)
        if exc.code in ("AUTH_REQUIRED", "AUTH_INVALID"):
            resp.headers["WWW-Authenticate"] = 'Bearer realm="lens"'
        if exc.code == "CONTENT_ENCODING_UNSUPPORTED":
            resp.headers["Accept-Encoding"] = "identity"  # (RFC 9110 15.5.16)
        if isinstance(exc, PairingLimit):
            resp.headers["Retry-After"] = str(exc.retry_after)  # (RFC 6585 4: when a place frees up)
        return resp

    @app.errorhandler(LogError)
    async def log_error(exc: LogError) -> Response:
        if isinstance(exc, StoreWriteFailed) and exc.storage:
            # The file system under the log failed the commit (full, read-only, failing): nothing
            # was recorded, and the same request may well go through later.
            return error_response("STORE_UNAVAILABLE", f"the daemon cannot write its event log right now ({exc}); "
                                                       f"nothing was recorded; retry later")
        # str(): a damaged event is named by its seq ("seq N: …"), as `lens log decode` names it
        return error_response(exc.code, str(exc), STATUS.get(exc.code, 500))

    @app.errorhandler(HistoryError)
    async def history_error(exc: HistoryError) -> Response:
        return error_response(exc.code, exc.message, STATUS.get(exc.code, 400))

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 408: "BODY_TIMEOUT", 413: "BODY_TOO_LARGE",
                400: "INVALID_ARGUMENT"}.get(
            exc.code or 500, "HTTP_ERROR")
        message, headers = exc.description or code, {}
        if exc.code == 413:  # (Quart's own limit: werkzeug's words named no limit)
            limit = svc.config.server.max_body_bytes
            message = f"the body is more than {limit} bytes; the limit is {limit}"
        if isinstance(exc, (NotFound, MethodNotAllowed)) and request.routing_exception is exc:
            message, headers = _route_message(exc)
        resp = error_response(code, message, exc.code)
        resp.headers.update(headers)
        return resp

    @app.errorhandler(Exception)
    async def unexpected(exc: Exception) -> Response:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response("INTERNAL", "an internal error occurred; see the daemon log", 500)

    # (the route modules, in this order: it is the URL map's)
    add_pairing_routes(app, svc)  # health, pairing, whoami
    add_project_routes(app, svc)
    add_session_routes(app, svc)
    add_artifact_routes(app, svc)
    add_model_routes(app, svc)  # models, the default model, the tool inventory
    add_config_routes(app, svc)
    add_history_routes(app, svc)
    add_dashboard_routes(app, svc)
    add_job_routes(app, svc)
    add_context_routes(app, svc)  # (compaction, snip, include)
    add_workspace_routes(app, svc)  # (F-HAR-3: workspace browsing, changes)
    add_stream_routes(app, svc)  # (F-API-5: the SSE stream)
    return app


FINISH_SECONDS = 5.0  # the last body message of a response is sent shielded for at most this long


def _finish_responses(asgi_app: Any) -> Any:
    """Wrap an ASGI app so the last body message of each response is sent shielded.

    Hypercorn recycles a kept-alive connection inside that send and starts its keep-alive timer
    there; the request's task is being cancelled as its handler returns, and the timer's start
    was cancelled with it. So an idle kept-alive connection was never closed (still open after
    minutes; hypercorn's ``keep_alive_timeout`` never ran). Hypercorn writes the bytes
    themselves shielded already; this only lets the recycling finish.

    HTTP/2 too: its connection's idle timer starts in that send when the last stream ends, and
    an HTTP/2 connection stayed open for ever after its requests. There the send waits for the
    client's flow-control window, so the shield is bounded (a client granting none held
    shutdown for ever when it was not).
    """

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("http_version") not in ("1.0", "1.1", "2"):
            return await asgi_app(scope, receive, send)

        async def finish(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                with trio.move_on_after(FINISH_SECONDS) as scope_:  # shielded, but not for ever
                    scope_.shield = True
                    await send(message)
            else:
                await send(message)

        return await asgi_app(scope, receive, finish)

    return app


def _host_checked(asgi_app: Any, svc: Services) -> Any:
    """Wrap an ASGI app so a request whose ``Host`` is refused is answered before the app sees it.

    Quart binds its URL adapter to the host while it makes the request's context, before any
    handler or ``before_request`` runs, and werkzeug IDNA-encodes it there: a host with a label
    past 63 characters (or an empty one) raised ``BadHost`` outside every error handler, an empty
    500 and a traceback in the log. The guard's own check answers such a request first, with the
    error shape (the ``before_request`` guard checks it again for anything else that reaches it).
    """

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            return await asgi_app(scope, receive, send)
        host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"host"), None)
        try:
            svc.guard.check_host(host)
        except HostForbidden as exc:
            return await refuse(scope, send, STATUS[exc.code], exc.code, exc.message)
        return await asgi_app(scope, receive, send)

    return app


def _target_checked(asgi_app: Any) -> Any:
    """Wrap an ASGI app so a request whose target the app cannot read is answered 400
    ``INVALID_ARGUMENT`` before the app sees it:

    - an empty path before the query (``GET ?x=1`` over HTTP/1.1, ``:path ?x=1`` over HTTP/2):
      Quart reads the path's first character as it makes the request, before any handler, and an
      empty one raised there (an empty 500, a traceback in the log);
    - a query whose raw bytes are no UTF-8 text (:func:`http_parts.raw_query_not_utf8`): over
      HTTP/2 a query is sent as the bytes of ``:path``, and hypercorn hands them to the app as they
      came; Quart decodes them as UTF-8 while it binds the request's URL adapter: ``?x=\\xff``
      raised outside every error handler, an empty 500 on every route (``/health`` too). HTTP/1.1
      refuses a byte past ASCII in h11. The percent-encoded form (``%ff``) is the routes' to judge
      (``http_parts.one_arg``), in the same words.

    Any other target (``*``, the absolute form, a path without its leading slash) is read as
    before: Quart reads it, and routing answers it.
    """

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            if not scope.get("raw_path"):  # (Quart reads its first character)
                message = ("the request's target has an empty path before its query; a path starts with /"
                           if scope.get("query_string") else "the request's target has an empty path")
            else:
                message = raw_query_not_utf8(scope.get("query_string") or b"")
            if message is not None:
                return await refuse(scope, send, STATUS["INVALID_ARGUMENT"], "INVALID_ARGUMENT", message)
        return await asgi_app(scope, receive, send)

    return app


async def _sent_keys(secrets: Secrets) -> Secrets:
    """The keys the client sent whole (``Secrets.sent_whole_in``): in the request's path and
    query (as sent and decoded), its header values and, once a route has read it, its body. The
    body is searched as bytes, in a worker thread past ``BODY_ON_LOOP_BYTES`` (a body may be up to
    ``server.maxBodyBytes``: a search of it on the loop would hold every other request)."""
    texts = (request.path, request.query_string.decode("latin-1"),
             urllib.parse.unquote(request.query_string.decode("latin-1")),
             *(value for _name, value in request.headers.items()))
    body = g.get("body_sent") or b""
    if len(body) > BODY_ON_LOOP_BYTES:
        return await trio.to_thread.run_sync(secrets.sent_whole_in, texts, body)
    return secrets.sent_whole_in(texts, body)


def _check_content_encoding() -> None:
    """A request body in a content coding (``Content-Encoding: gzip``…) is 415
    ``CONTENT_ENCODING_UNSUPPORTED``: the daemon decodes none (a small gzip body can inflate past
    any limit), and read as JSON it was "not valid JSON (invalid character)", which names no
    cause. ``identity`` is no coding; a request without a body is not concerned."""
    codings = [c.strip() for value in request.headers.getlist("Content-Encoding") for c in value.split(",")]
    coded = [c for c in codings if c and c.lower() != "identity"]
    if coded and (request.content_length or "transfer-encoding" in request.headers):
        shown = ", ".join(coded)
        shown = shown if len(shown) <= 80 else shown[:80] + "…"
        raise ApiError("CONTENT_ENCODING_UNSUPPORTED", f"the request body is sent with Content-Encoding {shown!r}; "
                                                       f"send it unencoded (the daemon decodes no content coding)")
