"""The SSE stream (F-API-5): ``GET /api/v1/events/stream?session=&project=&after=``.

A stream replays the log after ``after`` (or ``Last-Event-ID``, which wins), then joins the bus
(bus.py) at the position it subscribed at, so a client resuming sees no gap and no duplicate.
Frames are ``id: <seq>`` / ``event: <kind>`` / ``data: <the decoded event as JSON>``; the
stream ends with a ``stream.end`` event (daemon stopping, credential revoked, pair file invalid,
an event the log cannot read) or ``stream.dropped`` (the client fell behind; it resumes with
``Last-Event-ID``). Heartbeats are comments. Live writes may go straight to the socket from the
bus (sse_socket.py).
"""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator

import msgspec
import trio
from quart import Response, g, request
from quart_trio import QuartTrio

from events.errors import CorruptEvent, LogError
from events.reader import SEQ_MAX, StoredEvent
from events.store import EventStore

from .bus import made_frame, sse_message
from .errors import LensError
from .http_parts import ApiError, check_not_past_end, id_filter, one_arg, parse_int
from .pairing import PairFileInvalid
from .services import Services
from .sse_socket import direct_writer
from .write_stall import SCOPE_KEY as WRITE_STALL

log = logging.getLogger("lens.http")

STREAM_PATH = "/api/v1/events/stream"


def add_stream_routes(app: QuartTrio, svc: Services) -> None:
    @app.get(STREAM_PATH)
    async def stream() -> Response:
        session = id_filter("session", "sessionId", "session filter")
        project = id_filter("project", "projectId", "project filter")
        # A browser's EventSource reconnects to the same URL with Last-Event-ID: the header,
        # when present and not blank, wins over ?after= (which must still be well-formed).
        headers = request.headers.getlist("Last-Event-ID")
        if len(headers) > 1:
            raise ApiError("INVALID_ARGUMENT", f"Last-Event-ID is given {len(headers)} times; give it once")
        raw_after = one_arg("after")
        after = None if raw_after is None else parse_int("after", raw_after, 0, SEQ_MAX)
        name = "after"
        if headers and headers[0].strip():
            after, name = parse_int("Last-Event-ID", headers[0].strip(), 0, SEQ_MAX), "Last-Event-ID"
        if after is not None:
            await check_not_past_end(svc, name, after)
        if request.method == "HEAD":
            # The headers a GET would have, and no body: quart would still run the body (it
            # never ends), holding a bus subscription and the kept-alive connection for ever.
            resp = Response(_no_body(), content_type="text/event-stream")
        else:
            token = request.headers.get("Authorization", "")
            resp = Response(_sse(svc, session, project, after, token, g.pairs_generation, request.scope),
                            content_type="text/event-stream")
        # A body write the client takes no byte of for write_stall_seconds resets it, on every
        # path (write_stall.py; the direct socket path bounds its own writes the same way).
        request.scope[WRITE_STALL] = (svc.write_stall_seconds, svc.shutting_down.is_set)
        resp.headers["Cache-Control"] = "no-cache"
        resp.headers["X-Accel-Buffering"] = "no"
        resp.timeout = None  # Quart would cut the stream at RESPONSE_TIMEOUT otherwise
        return resp


async def _no_body() -> AsyncIterator[bytes]:
    """The body of a HEAD of the stream: nothing (an iterable, so no ``Content-Length: 0``)."""
    return
    yield  # (an async generator)


async def _replay_page(store: EventStore, after: int, to: int, session: str | None, project: str | None,
                       ) -> tuple[list[StoredEvent], LogError | None]:
    """The next page of a stream's replay, and the log error that cut it short (``None``: none).
    Only the filters' events are read and decoded (a damaged event of another project does not
    end a project's stream).

    A damaged event fails the whole read; the reader names its seq, so the events before it are
    read again up to it. A stream delivers those, reads again (and gets the error with no event
    before it), and then ends saying which event it could not read.
    """
    try:
        return await store.read_events(after=after, to=to, session_id=session, project_id=project, limit=500), None
    except CorruptEvent as exc:
        if exc.seq is None or exc.seq - 1 <= after:
            return [], exc
        try:
            return await store.read_events(after=after, to=exc.seq - 1, session_id=session, project_id=project,
                                           limit=500), exc
        except LogError as again:
            return [], again
    except LogError as exc:
        return [], exc


def _damage_end(exc: LogError, delivered: int) -> bytes:
    """The ``stream.end`` frame of a replay the log could not be read for."""
    seq = getattr(exc, "seq", None)
    data: dict[str, Any] = {"reason": f"event {seq} cannot be read ({exc.message})" if seq is not None else
                            f"the event log cannot be read ({exc.message})", "code": exc.code}
    if seq is not None:
        data["seq"] = seq
    data["lastEventId"] = delivered
    return sse_message("stream.end", msgspec.json.encode(data))


REVALIDATE_SECONDS = 0.5  # without watch_streams, each stream re-checks on a timer this often
REPLAY_WRITE_BYTES = 64 * 1024  # a stream's log replay is written in pieces of about this size
# A project's replay (no index on project_id) reads the log in stretches of this many seqs, so one
# read stays short (tens of ms) and the stream checks its credential and pings between them.
PROJECT_SCAN_SEQS = 50_000
WATCH_SECONDS = 0.25


async def watch_streams(svc: Services) -> None:
    """Wake every SSE stream when the pair file changes or shutdown begins (run in the daemon).

    One poll for all streams instead of a timer per stream: each stream then waits only for its
    bus wake-up or its next heartbeat, and still ends within ~0.5 s of a revocation.
    """
    gen = svc.pairs.generation
    svc.streams_watched = True
    try:
        while True:
            await trio.sleep(WATCH_SECONDS)
            if svc.pairs.generation != gen or svc.shutting_down.is_set():
                gen = svc.pairs.generation
                svc.bus.poke_all()
    finally:
        svc.streams_watched = False


async def _sse(svc: Services, session: str | None, project: str | None, after: int | None,
               authorization: str, checked_generation: int,
               scope: dict[str, Any] | None = None) -> AsyncIterator[bytes]:
    """Replay from the log after ``after`` (if given), then live, joined at the bus position.

    ``checked_generation``: the pair file's generation when ``authorization`` was checked. The
    body runs some time after that check; a pair file changed meanwhile (a revocation) is
    checked again before the first event, not missed.

    Live frames come from the bus in chunks (one per bus tick, shared by every subscriber with the
    same filter). When :func:`direct_writer` allows it (see ``sse_socket``), the stream hands its
    socket to the bus while it waits: the bus writes each tick's chunk itself, without waking
    this task; this task only finishes writes the socket could not take at once, and writes the
    opening comment, the log replay, heartbeats and the final event (through quart).
    """
    bus = svc.bus
    sub = bus.subscribe(session, project)
    gen_seen = checked_generation
    last = sub.start if after is None else after

    def end_frame(delivered: int) -> bytes | None:
        """The ``stream.end`` frame if the daemon is stopping, the credential was revoked (with
        the code a request with it now gets, so a client knows not to resume with it), or the
        pair file became invalid (no credential can be checked: the stream ends as ordinary
        requests are refused, but as the daemon's fault, which a client retries)."""
        nonlocal gen_seen
        if svc.shutting_down.is_set():
            return sse_message("stream.end", msgspec.json.encode({"reason": "shutdown", "lastEventId": delivered}))
        if svc.pairs.generation != gen_seen:
            gen_seen = svc.pairs.generation
            try:
                svc.guard.authenticate(authorization)
            except PairFileInvalid:
                return sse_message("stream.end", msgspec.json.encode(
                    {"reason": "pair file invalid", "code": PairFileInvalid.code, "lastEventId": delivered}))
            except LensError as exc:  # the code a request with it now gets (AUTH_INVALID)
                return sse_message("stream.end", msgspec.json.encode(
                    {"reason": "credential revoked", "code": exc.code, "lastEventId": delivered}))
        return None

    try:
        yield b": lens stream\n\n"
        writer = direct_writer(scope) if scope is not None else None  # the headers are out by now
        # 1. the log, from `after` up to where live delivery starts, in writes of at most
        # REPLAY_WRITE_BYTES (or one event): a slow reader of a long replay still sees its
        # credential revoked, or the daemon stopping, between two writes.
        delivered = last
        heartbeat = svc.config.server.heartbeat_seconds
        wrote_at = trio.current_time()  # of this task's last write
        while last < sub.start:
            if (end := end_frame(delivered)) is not None:
                yield end
                return
            if trio.current_time() - wrote_at >= heartbeat:
                # A filter's replay may read long stretches of the log that it does not match
                # (a project's events among many others'): the stream still keeps talking.
                wrote_at = trio.current_time()
                yield b": ping\n\n"
            upto = sub.start if project is None else min(sub.start, last + PROJECT_SCAN_SEQS)
            page, damage = await _replay_page(svc.store, last, upto, session, project)
            if damage is not None and not page:
                # nothing readable before it: end here, saying why (not a cut connection)
                log.warning("an SSE stream's replay ends where the log cannot be read: %s (%s)", damage, damage.code)
                damaged = getattr(damage, "seq", None)
                if isinstance(damaged, int):  # every event of the filter before it is out
                    delivered = max(delivered, damaged - 1)
                yield _damage_end(damage, delivered)
                return
            if not page:
                if upto >= sub.start:
                    break
                last = delivered = upto  # nothing of the project in this stretch
                continue
            parts: list[bytes] = []
            size = 0
            for se in page:
                last = se.seq
                frame = (await made_frame(se, svc.store.secrets)).data  # (a large one in a worker thread)
                if parts and size + len(frame) > REPLAY_WRITE_BYTES:
                    yield b"".join(parts)
                    wrote_at = trio.current_time()
                    parts, size = [], 0
                    if (end := end_frame(delivered)) is not None:
                        yield end
                        return
                parts.append(frame)
                size += len(frame)
                delivered = se.seq
            if parts:
                yield b"".join(parts)
                wrote_at = trio.current_time()
            delivered = last
        if last > sub.start:
            sub.skip_through = last  # resumed past what is committed: skip up to there
        sub.last = max(last, sub.start)
        if sub.partial:  # what the open answers had streamed when the stream joined (streamed.py)
            partial, sub.partial = sub.partial, b""
            yield partial
            wrote_at = trio.current_time()
        sub.writer = writer
        # 2. live
        while True:
            if sub.rest is not None:  # a write the bus started: finish it before anything else
                rest, sub.rest = sub.rest, None
                try:
                    await writer.write_rest(rest, stall_seconds=svc.write_stall_seconds,  # type: ignore[union-attr]
                                            stop=svc.shutting_down.is_set)
                except OSError:
                    return
            if sub.gone:
                return  # the client is gone (hypercorn notices too and ends the request)
            if (end := end_frame(sub.last)) is not None:
                yield end
                return
            if sub.dropped:
                yield sse_message("stream.dropped", msgspec.json.encode(
                    {"reason": sub.drop_reason, "lastEventId": sub.last}))
                return
            data = sub.take()
            if data is None:
                quiet_since = max(wrote_at, sub.written_at)
                if trio.current_time() - quiet_since >= heartbeat:
                    wrote_at = trio.current_time()
                    yield b": ping\n\n"
                    continue
                wait = quiet_since + heartbeat - trio.current_time()
                if not svc.streams_watched:
                    wait = min(wait, REVALIDATE_SECONDS)
                # park: from here until the task runs again the bus may write for it
                sub.wake = trio.Event()
                sub.parked = True
                try:
                    with trio.move_on_after(wait):
                        await sub.wake.wait()
                finally:
                    sub.parked = False
                continue
            if not data:
                continue
            wrote_at = trio.current_time()
            if writer is None:
                yield data  # the same bytes object for every subscriber of the group
                continue
            try:
                await writer.write(data, stall_seconds=svc.write_stall_seconds, stop=svc.shutting_down.is_set)
            except OSError:
                return
    finally:
        sub.parked = False
        bus.unsubscribe(sub)
