"""The HTTP API (``/api/v1``) and the dashboard page, on quart-trio; the SSE stream is in stream_api.py.

Handlers are thin: they validate the body (msgspec; malformed JSON 400, wrong shape 422), check
the caller's trust, call the supervisor / projections / store, and shape JSON (camelCase).
Every error leaves as ``{"error": {"code", "message"}}`` with the status of :data:`STATUS`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Awaitable, Callable, Iterable, Literal, Sequence, TypeVar

import msgspec
import trio
from quart import Response, current_app, g, request
from quart.globals import request_ctx
from quart.wrappers.response import DataBody
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from events import types as t
from events.errors import LogError
from events.ids import SHA256_RE, id_rule, is_id
from events.reader import SEQ_MAX
from events.store import Draft, EventStore, StoreWriteFailed
from projections.history import HistoryError
from tools.artifacts import CHUNK_BYTES, HEAD_BYTES, ArtifactError, ArtifactStore, OpenArtifact, reads_as_text
from tools.files.errors import MAX_IMAGE_BYTES
from tools.files.image import sniff as sniff_image

from . import actor as a
from .bus import Bus
from .config import Config
from .configfiles import ConfigFiles
from .connection_races import guard_connection_races
from .errors import ActorUnavailable, LensError, SessionNotFound, short_reason
from .guard import AuthRequired, Guard, HostForbidden, OriginForbidden
from .head_limit import limit_head
from .list_pages import LIST_LIMIT_MAX, PROJECTS, PROJECTS_NEWEST, SESSIONS, ListOrder, split_page
from .pairing import PairFileInvalid, PairFileUnwritable, PairingLimit, PairStore, Principal
from .projection_service import ProjectionService, ProjectionStalled
from .providers.catalog import ProviderCatalog
from .providers.compile import IMAGE_MIMES
from .server_answers import error_json, refuse
from .sse_socket import keep_send
from .supervisor import Supervisor
from .terminal import UNSHOWABLE
from .views import VIEW_AGENTS_MAX, VIEW_ITEMS_MAX, project_view, session_row_view, session_view
from .working_context import ERROR_STATUS as CONTEXT_STATUS
from .workspace_api import CODES as WORKSPACE_STATUS

log = logging.getLogger("lens.http")

STATUS: dict[str, int] = {
    "INVALID_JSON": 400, "INVALID_ARGUMENT": 400, "PAIRING_INVALID": 400, "CONFIG_INVALID": 400,
    "AUTH_REQUIRED": 401, "AUTH_INVALID": 401,
    "FORBIDDEN": 403, "HOST_FORBIDDEN": 403, "ORIGIN_FORBIDDEN": 403,
    "NOT_FOUND": 404, "SESSION_NOT_FOUND": 404, "PROJECT_NOT_FOUND": 404, "CLIENT_NOT_FOUND": 404,
    "QUESTION_NOT_FOUND": 404, "JOB_NOT_FOUND": 404, "JOB_FINISHED": 409, "FORK_TOO_DEEP": 409, "HISTORY_ITEM_NOT_FOUND": 404, "QUERY_TOO_LONG": 400, "CONFIG_FILE_NOT_FOUND": 404, "ARTIFACT_NOT_FOUND": 404, "ARTIFACT_CORRUPT": 500,
    "METHOD_NOT_ALLOWED": 405,
    "ANSWER_INVALID": 422, "SESSION_DELETED": 409, "SESSION_QUARANTINED": 409, "INPUT_NOT_QUEUED": 409, "QUESTION_SETTLED": 409,
    "BODY_TIMEOUT": 408, "BODY_TOO_LARGE": 413, "APPEND_REJECTED": 413, "CONTENT_ENCODING_UNSUPPORTED": 415,
    "VALIDATION_FAILED": 422, "MODEL_UNKNOWN": 422, "PROVIDER_DISABLED": 422, "PROVIDER_KEY_REQUIRED": 422,
    "WORKSPACE_INVALID": 422, "IMAGE_UNSUPPORTED": 422,
    "CONFIG_FILE_UNREADABLE": 422, "CONFIG_FILE_NOT_REGULAR": 422,
    "SKILL_NOT_FOUND": 422, "SKILL_INVALID": 422, "NO_WORKSPACE": 422, "SKILL_UNAVAILABLE": 503,
    "PAIRING_LIMIT": 429, "CONFIG_FILE_CHANGED": 409,
    "SESSION_UNAVAILABLE": 503, "PAIR_FILE_INVALID": 503, "PAIR_FILE_UNWRITABLE": 503, "CONFIG_FILE_UNWRITABLE": 503, "PROJECTION_STALLED": 503, "PROJECTIONS_UNREADABLE": 503, "STORE_CLOSED": 503,
    "STORE_UNAVAILABLE": 503,
    "HEADERS_TOO_LARGE": 431, "TRANSFER_ENCODING_UNSUPPORTED": 501,  # (answered by the server: server_answers)
}
# The route modules of their own name their codes' statuses; a code named above keeps its own.
STATUS = {**WORKSPACE_STATUS, **CONTEXT_STATUS, **STATUS}

MAX_INPUT_IMAGES = 20  # image parts in one input (each up to MAX_IMAGE_BYTES; every request resends them)
MAX_EVENTS_PAGE = 1000
STATIC_DIR = Path(__file__).parent / "static"
# Endpoints whose JSON answer is what the user wrote, given back as written (a copy with a key
# scrubbed would lose it on the next write): the only ones not scrubbed of the daemon's keys.
AS_WRITTEN = frozenset({"read_config"})


class ApiError(LensError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


# --------------------------------------------------------------------------- request bodies


class _B(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    pass


class PairRequestBody(_B, forbid_unknown_fields=False):
    """Other fields (``isVerified``, ``trust``, a device's ``deviceId``…) are ignored: they grant
    nothing (F-API-2) and are never stored; the request is an ordinary pending one."""

    client_id: str
    name: str = ""


class ProjectBody(_B):
    name: str
    workspace: str


class SessionBody(_B):
    project_id: str
    model: str | None = None
    thinking_level: str | None = None
    name: str | None = None


class DefaultModelBody(_B):
    """``PUT /models/default``: the model to save as the default, or null to clear it."""

    model: str | None


class ForkBody(_B):
    """``POST /sessions/{id}/fork``: the event of the source session to start from."""

    seq: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
    name: str | None = None


class SessionPatchBody(_B):
    """``PATCH /sessions/{id}``: what to change; a field left out stays as it is, a field given
    as null goes back to the default: ``model`` (the default model chain), ``thinkingLevel``
    (the provider's default), ``name`` (none), the context settings (the config's, else the
    built-in value) and ``toolPolicy`` (every runtime override dropped: the config's policy)."""

    model: str | None | msgspec.UnsetType = msgspec.UNSET
    thinking_level: str | None | msgspec.UnsetType = msgspec.UNSET
    name: str | None | msgspec.UnsetType = msgspec.UNSET
    # Saved context settings (runtime/working_context.py): they win over the config's.
    auto_compaction: bool | None | msgspec.UnsetType = msgspec.UNSET
    compaction_trigger_percent: int | None | msgspec.UnsetType = msgspec.UNSET
    prune_tool_results: bool | None | msgspec.UnsetType = msgspec.UNSET
    # Runtime overrides of the tool execution policy (tools/catalog.py), by tool name or pattern:
    # an entry replaces that tool's override, null removes it.
    tool_policy: dict[str, Any] | None | msgspec.UnsetType = msgspec.UNSET


# ``session.configured`` ``reset`` key of each ``PATCH /sessions/{id}`` field null sets back to
# its default (the context settings' keys are those of runtime.working_context.SETTINGS).
PATCH_RESETS: tuple[tuple[str, str], ...] = (
    ("model", "model"), ("thinking_level", "thinking_level"), ("name", "name"),
    ("auto_compaction", "auto_compaction"), ("compaction_trigger_percent", "compaction_trigger_percent"),
    ("prune_tool_results", "prune_tool_results"), ("tool_policy", "toolPolicy"),
)


class TextPartIn(msgspec.Struct, tag="text", tag_field="type", forbid_unknown_fields=True):
    text: str


class ImagePartIn(msgspec.Struct, tag="image", tag_field="type", rename="camel", forbid_unknown_fields=True):
    artifact_id: str
    mime: str


class InputBody(_B):
    request_id: str
    content: str | list[TextPartIn | ImagePartIn]
    when_busy: Literal["followUp", "steer"] = "followUp"


class AnswerBody(_B):
    kind: Literal["answer", "skip"]
    option_ids: list[str] | None = None
    text: str | None = None


class EmptyBody(msgspec.Struct, forbid_unknown_fields=False):
    pass


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
                    return b"".join(parts)
                got += len(parts[-1])
                if limit is not None and got > limit:
                    raise ApiError("BODY_TOO_LARGE", f"the body is more than {limit} bytes; the limit is {limit}")
            if stalled.cancelled_caught:
                raise ApiError("BODY_TIMEOUT", f"the request body stopped arriving: no byte for "
                               f"{BODY_STALL_SECONDS:g} s after {got} byte(s)"
                               + (f" of the {request.content_length} announced" if request.content_length else ""))
    raise ApiError("BODY_TIMEOUT", f"the request body took longer than {BODY_SECONDS:g} s to arrive")


UTF8_BOM = b"\xef\xbb\xbf"


async def read_body(kind: type[B]) -> B:
    """The request's JSON body as ``kind``: 400 ``INVALID_JSON`` when it is no JSON (an empty
    body is named as such), 422 ``VALIDATION_FAILED`` when its shape does not match. A body of a
    route that takes none (:class:`EmptyBody`) may be empty. A leading UTF-8 byte order mark is
    skipped (RFC 8259 8.1 lets a parser ignore it; editors and some runtimes write one)."""
    raw = await receive_body()
    if raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM):]
    if not raw.strip():
        if kind is EmptyBody:
            return EmptyBody()  # type: ignore[return-value]
        raise ApiError("INVALID_JSON", "the request body is empty; this route takes a JSON object")
    try:
        msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        reason = str(exc)
        if reason == "Input data was truncated" and _HIGH_SURROGATE_ESCAPE.search(raw):
            reason = "a \\uD800–\\uDBFF escape not followed by its low surrogate"  # msgspec says "truncated"
        reason = _not_utf8(raw) or reason
        raise ApiError("INVALID_JSON", f"the request body is not valid JSON ({reason})") from None
    except RecursionError:  # msgspec's depth limit is the interpreter's recursion limit
        raise ApiError("INVALID_JSON", "the request body is nested too deeply") from None
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise ApiError("VALIDATION_FAILED", f"the request body does not match: {short_reason(exc)}") from None
    except RecursionError:
        raise ApiError("INVALID_JSON", "the request body is nested too deeply") from None


_UTF8_NAMES = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})


def _not_utf8(raw: bytes) -> str | None:
    """Why a body that failed to decode is no UTF-8, when the request says so: a UTF-16 or UTF-32
    byte order mark, or a ``Content-Type`` charset other than UTF-8 (JSON between systems is
    UTF-8, RFC 8259 8.1). msgspec's reason for those ("invalid character (byte 0)") named no cause."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        return "JSON is sent as UTF-8, and this body starts with a UTF-16 or UTF-32 byte order mark"
    charset = request.mimetype_params.get("charset", "").strip().strip('"')
    if charset and charset.lower() not in _UTF8_NAMES:
        shown = charset if len(charset) <= 40 else charset[:40] + "…"
        return f"JSON is sent as UTF-8, and the Content-Type says charset={shown}"
    return None


# Never a workspace: the whole filesystem, the system's own top-level directories, and anything
# inside the kernel's virtual filesystems (an agent may edit and run commands in its workspace).
SYSTEM_DIRS = frozenset({"/", "/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr",
                         "/var", "/proc", "/sys", "/dev", "/run"})
# Trees no workspace may lie in: the system's programs, libraries and settings, its state, and
# the virtual file systems (``/usr/local/src/x`` too: a project belongs elsewhere).
SYSTEM_TREES = ("/bin/", "/boot/", "/etc/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/sbin/", "/usr/",
                "/proc/", "/sys/", "/dev/", "/run/", "/var/lib/", "/var/log/", "/var/cache/", "/var/spool/",
                "/var/mail/", "/var/backups/")


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):  # no HOME and no passwd entry
        return None


def workspace_dir(raw: str, daemon_dirs: Sequence[tuple[str, Path]] = ()) -> Path:
    """The resolved workspace directory ``raw`` names, or 422 ``WORKSPACE_INVALID`` saying why.

    ``daemon_dirs`` (what, path): directories of the daemon's own (its data, its config) that a
    workspace may neither hold nor lie in — the agent edits files and runs commands there."""
    shown = raw if len(raw) <= 200 else raw[:200] + "…"
    if not raw or "\0" in raw:
        raise ApiError("WORKSPACE_INVALID", "workspace must be a non-empty path without NUL characters")
    try:
        ws = Path(raw).expanduser()
        if not ws.is_absolute():
            raise ApiError("WORKSPACE_INVALID", f"workspace {shown!r} must be an absolute path")
        if not ws.is_dir():
            raise ApiError("WORKSPACE_INVALID", f"workspace {shown!r} is not an existing directory")
        ws = ws.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # too long a name, a symlink loop, no permission…
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ApiError("WORKSPACE_INVALID", f"workspace {shown!r} cannot be used ({reason})") from None
    if str(ws) in SYSTEM_DIRS or (str(ws) + "/").startswith(SYSTEM_TREES):
        raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} is a system directory; choose a project directory")
    own_home = _home()
    homes = [Path("/root")] + ([own_home] if own_home is not None else [])
    if ws == Path("/home") or ws in homes or ws.parent == Path("/home"):
        raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} is a home directory (its keys, credentials and shell "
                                            f"start-up files would be the agent's to edit); choose a project directory")
    for home in homes + ([Path("/home", *ws.parts[2:3])] if ws.is_relative_to("/home") else []):
        if ws.is_relative_to(home) and ws.relative_to(home).parts[0].startswith("."):
            raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} lies in a hidden directory of a home "
                                                f"(~/.ssh, ~/.config…: keys, credentials and settings); choose a project "
                                                f"directory")
    for what, path in daemon_dirs:
        own = path.resolve()
        if own.is_relative_to(ws) or ws.is_relative_to(own):
            raise ApiError("WORKSPACE_INVALID", f"workspace {str(ws)!r} and the daemon's {what} ({own}) overlap: an agent "
                                                f"could read and change it there (credentials, the event log); choose a "
                                                f"directory apart from it, or move the {what} (dataDir, --config)")
    return ws


THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")


def check_name(value: str, what: str) -> str:
    """A display name: 1 to 200 characters, not all blank, no control characters (C0, DEL, C1)
    nor bidirectional overrides, as a pairing name (:data:`runtime.terminal.UNSHOWABLE`)."""
    if not value.strip() or len(value) > 200 or UNSHOWABLE.search(value):
        raise ApiError("VALIDATION_FAILED", f"{what} must be 1 to 200 characters, not all blank, without control "
                                            f"characters or bidirectional overrides")
    return value


def check_session_settings(model: str | None, thinking_level: str | None) -> None:
    """A session's ``model`` and ``thinkingLevel`` as given, checked at the door (whether a
    provider serves the model is the actor's check: ``MODEL_UNKNOWN``)."""
    if thinking_level is not None and thinking_level not in THINKING_LEVELS:
        raise ApiError("VALIDATION_FAILED", f"thinkingLevel must be one of {', '.join(THINKING_LEVELS)}")
    if model is not None and not (0 < len(model) <= 200 and model.strip() == model):
        raise ApiError("MODEL_UNKNOWN", "model must be '<provider>/<model>', at most 200 characters")


def check_id(value: str, what: str) -> str:
    if not is_id(value):
        raise ApiError("INVALID_ARGUMENT", id_rule(what))
    return value


UNSATISFIABLE = (-1, -1)
_BYTE_RANGE = re.compile(r"bytes=([0-9]{0,19})-([0-9]{0,19})")  # one range (ASCII digits, at most 19)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``[begin, end)`` of ``size`` bytes a ``Range`` header asks for (RFC 9110 §14.1.2), or
    :data:`UNSATISFIABLE` (it starts past the end, or asks for none of the last bytes), or None for
    the whole body: no header, or one this does not serve (several ranges, another unit,
    malformed, first past last), which HTTP lets a server ignore."""
    m = _BYTE_RANGE.fullmatch(header.strip()) if header else None
    if m is None or not (m[1] or m[2]):
        return None
    if not m[1]:  # the last N bytes
        n = int(m[2])
        return UNSATISFIABLE if n == 0 or size == 0 else (max(0, size - n), size)
    begin = int(m[1])
    if m[2] and int(m[2]) < begin:
        return None
    if begin >= size:
        return UNSATISFIABLE
    return begin, size if not m[2] else min(size, int(m[2]) + 1)


def check_artifact_id(value: str, what: str) -> str:
    """An artifact is named by the SHA-256 of its bytes: any other name is malformed (400), never
    an artifact that is not stored (404)."""
    if not SHA256_RE.fullmatch(value):
        raise ApiError("INVALID_ARGUMENT", f"{what} must be 64 lowercase hex digits (the SHA-256 of the artifact's bytes)")
    return value


# --------------------------------------------------------------------------- services


@dataclass
class Services:
    config: Config
    data_dir: Path
    store: EventStore
    supervisor: Supervisor
    bus: Bus
    pairs: PairStore
    guard: Guard
    projections: ProjectionService
    catalog: ProviderCatalog
    config_files: ConfigFiles
    new_id: Callable[[str], str]
    shutting_down: trio.Event = field(default_factory=trio.Event)
    streams_watched: bool = False  # watch_streams runs: SSE tasks need no revalidation timer
    version: str = "0.1.0"
    executors: Any = None  # the ExecutorPool (workspace browsing); None in apps built without one
    # The data directory's artifact store, the one the tools write (it remembers which files were
    # checked against their ids); an app built without one makes its own at its first artifact.
    artifacts: ArtifactStore | None = None
    mcp: Any = None  # tools.mcp.McpServers: the MCP servers and their state, for the inventory
    default_model_lock: trio.Lock = field(default_factory=trio.Lock)  # one saved-default change at a time

    async def call(self, session_id: str, command: Any) -> Any:
        """``supervisor.call`` for a request: answered ``SESSION_UNAVAILABLE`` at a stop (see
        :func:`before_stop`)."""
        return await before_stop(self.shutting_down, lambda: self.supervisor.call(session_id, command))


STOPPING = ("the daemon is stopping: the session did not answer before it stopped; what it recorded is kept "
            "(an input is recorded at most once by its requestId): read the session, or send the request again, "
            "once the daemon is back")

# How long a request in progress at a stop may still take before it is answered 503: a session's
# quick answer (an input recorded) still comes as it would; a long wait is cut off.
STOP_SETTLE_SECONDS = 1.0
_T = TypeVar("_T")


async def before_stop(stop: trio.Event, work: Callable[[], Awaitable[_T]]) -> _T:
    """``work()``'s answer, or ``SESSION_UNAVAILABLE`` (503) once the daemon has been stopping for
    :data:`STOP_SETTLE_SECONDS` (a fraction of its grace period).

    A request waiting on a session (a ``/skill:`` input's check behind another session's command,
    a withdraw waiting for that check, a fork reading a long source) held the shutdown for its
    whole grace period, then lost its connection unanswered. Cut off here, the session's command
    still ends as it would (or is cut off with the actors): what it recorded is kept, and a
    repeat after the restart is answered from the log."""
    answered: list[_T] = []
    failed: list[Exception] = []
    async with trio.open_nursery() as nursery:
        async def cut_off() -> None:
            await stop.wait()
            await trio.sleep(STOP_SETTLE_SECONDS)
            nursery.cancel_scope.cancel()

        nursery.start_soon(cut_off)
        try:
            answered.append(await work())
        except Exception as exc:  # (raised as it is below, not inside the nursery's group)
            failed.append(exc)
        nursery.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if not answered:
        raise ActorUnavailable(STOPPING)
    return answered[0]


def default_view(catalog: ProviderCatalog) -> dict[str, Any]:
    """``{effective, source, saved}``: the default model of new sessions, the step of the chain
    it comes from (``cli`` | ``saved`` | ``config`` | ``default``) and the saved default
    (``None``: none saved), which ``--model`` hides from ``effective``."""
    return {"effective": catalog.default_model, "source": catalog.default_source, "saved": catalog.saved_default}


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


# The types an artifact is served as when its ``artifact.stored`` says so and its bytes agree (a
# fetched PDF): each with its file name's extension and the bytes it must begin with. All are
# documents a browser does not run in the page that fetched them, served as an attachment; any
# other stored type (``text/html``, ``image/svg+xml``…) is never served as itself.
STORED_TYPES: dict[str, tuple[str, tuple[bytes, ...]]] = {
    "application/pdf": ("pdf", (b"%PDF-",)),
    "application/zip": ("zip", (b"PK\x03\x04", b"PK\x05\x06")),
    "application/gzip": ("gz", (b"\x1f\x8b",)),
}
# On every artifact answer: were it ever opened as a page (a download's preview, a link pasted
# with a credential some proxy adds), it runs nothing, loads nothing and has no origin of its own
# to act in; and no other site may embed it.
ARTIFACT_GUARD = {"Content-Security-Policy": "sandbox; default-src 'none'",
                  "Cross-Origin-Resource-Policy": "same-origin"}


def stored_type_claimed(head: bytes) -> bool:
    """Whether ``head`` (an artifact's first bytes) begins as one of :data:`STORED_TYPES` does (so
    its stored type is asked)."""
    return any(head.startswith(magic) for _, magics in STORED_TYPES.values() for magic in magics)


def artifact_type(head: bytes, aid: str, stored: str | None = None, *, whole: bool = True) -> dict[str, str]:
    """``Content-Type`` and ``Content-Disposition`` of an artifact, from its first bytes
    (``head``: :data:`tools.artifacts.HEAD_BYTES` of them, all of it when ``whole``; an artifact
    is named by its digest alone) and the type its ``artifact.stored`` gave (``stored``): the four
    image types models take, inline; a type of :data:`STORED_TYPES` the bytes agree with, as an
    attachment; UTF-8 text without NUL in its head (a job's output, a fetched JSON document,
    source; a character cut at the head's end is no reason to doubt it),
    ``text/plain; charset=utf-8`` inline, never HTML, SVG or script whatever it holds; anything
    else bytes, as an attachment. With ``nosniff`` (on every answer) nothing is rendered as
    another type in the dashboard's origin. The type depends on the head alone, so a range of an
    artifact is typed as the whole is, without reading the rest."""
    image = sniff_image(head)
    name = aid[:16]
    if image is not None:
        return {"Content-Type": image, "Content-Disposition": f'inline; filename="{name}.{image.split("/")[1]}"'}
    if stored in STORED_TYPES:
        ext, magics = STORED_TYPES[stored]
        if head.startswith(magics):
            return {"Content-Type": stored, "Content-Disposition": f'attachment; filename="{name}.{ext}"'}
    if reads_as_text(head, whole=whole):
        return {"Content-Type": "text/plain; charset=utf-8", "Content-Disposition": f'inline; filename="{name}.txt"'}
    return {"Content-Type": "application/octet-stream", "Content-Disposition": f'attachment; filename="{name}.bin"'}


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


def _route_message(exc: HTTPException) -> tuple[str, dict[str, str]]:
    """The message (and headers) of a request no route takes: 404 names the method and path,
    and the route the client may have meant when the path only has a trailing slash more; 405
    names the methods the route takes, also in ``Allow`` (RFC 9110 15.5.6: a 405 carries it)."""
    method = request.method if len(request.method) <= 20 else request.method[:20] + "…"
    path = request.path
    if isinstance(exc, MethodNotAllowed):
        allowed = sorted(exc.valid_methods or ())
        return (f"{method} is not allowed on {_shown_path(path)}; it takes {', '.join(allowed)}",
                {"Allow": ", ".join(allowed)})
    message = f"no route {method} {_shown_path(path)}"
    bare = path.rstrip("/")
    if bare != path and bare:
        try:  # (the same method: `PUT /config/files/` means a file's route with no name, not the list)
            current_app.url_map.bind("lens").match(bare, method=request.method)
        except HTTPException:
            pass
        else:
            message += f"; routes take no trailing slash: {_shown_path(bare)}"
    return message, {}


def create_app(svc: Services) -> QuartTrio:
    app = _App(__name__, static_folder=None)
    # `/sessions//events` is no route (an empty id), not a redirect to `/sessions/events`.
    app.url_map.merge_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = svc.config.server.max_body_bytes
    app.config["RESPONSE_TIMEOUT"] = None  # SSE streams are long; each sets timeout = None too
    app.config["BODY_TIMEOUT"] = BODY_SECONDS  # (read_body bounds the body itself: receive_body)
    # (keep_send outermost: it keeps the server's own send for SSE's direct write path; the
    # connection guards next, before anything in the app can write; then the head's limit)
    app.asgi_app = keep_send(guard_connection_races(limit_head(_host_checked(_finish_responses(app.asgi_app), svc))))  # type: ignore[method-assign]

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
        if not path.startswith("/api/"):
            return None
        if path in Guard.PUBLIC_PATHS:
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
            if response.status_code >= 400:
                # An error's message may quote the client's (or the config's) value cut to a
                # limit, and what a cut leaves of a key is no whole key: an error answer loses
                # its pieces too (a config file's route included: its errors are no file).
                clean = secrets.scrub_message_json(response.response.data)
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

    # ------------------------------------------------------------------ health & pairing

    @app.get("/api/v1/health")
    async def health() -> Response:
        return json_response({"status": "ok", "version": svc.version, "lastSeq": svc.store.last_seq})

    @app.post("/api/v1/pair/requests")
    async def pair_request() -> Response:
        body = await read_body(PairRequestBody)
        # The file as it is now (one `stat`), as a credential check looks: a client revoked by
        # `lens pair revoke`, or removed by hand, a moment ago was still "approved" to the daemon
        # until its watcher's next look, and its request was answered "pending" with nothing
        # recorded. (Here, on the event loop, where the credential checks look too.)
        svc.pairs.reload()
        try:
            await trio.to_thread.run_sync(svc.pairs.register, body.client_id, body.name,
                                          svc.config.server.max_pending_pairings)
        except (PairFileInvalid, PairFileUnwritable) as exc:
            # Unauthenticated callers learn that pairing is unavailable, not where the file lives.
            log.warning("pairing request refused: %s", exc.message)
            raise type(exc)("pairing is unavailable: the daemon cannot update its pair file "
                            "(the daemon log says why)") from None
        # Always "pending" (SPEC F-API-2's shape): the caller has no credential, and the status of
        # an approved id told anyone which client ids exist. An approved record is left as it is.
        return json_response({"clientId": body.client_id, "status": "pending"}, 202)

    @app.get("/api/v1/whoami")
    async def whoami() -> Response:
        """The caller's own identity: ``{clientId, trust}`` (``"read"`` | ``"strong"``); never a secret.

        Lets a client (the dashboard) show or hide mutating controls without trying one, and
        know how often the SSE stream sends a heartbeat (``heartbeatSeconds``).
        """
        p = principal()
        return json_response({"clientId": p.client_id, "trust": p.trust,
                              "heartbeatSeconds": svc.config.server.heartbeat_seconds})

    # ------------------------------------------------------------------ projects

    @app.get("/api/v1/projects")
    async def list_projects() -> Response:
        # (oldest first, as the spec's answer; order=newest: the reverse, so the newest come first)
        order = _one_arg("order")
        if order not in (None, "oldest", "newest"):
            raise ApiError("INVALID_ARGUMENT", "order must be oldest (the default) or newest")
        limit, after = _list_page_args("project")
        await svc.projections.caught_up()
        rows, more = await read_list(PROJECTS_NEWEST if order == "newest" else PROJECTS, [], [], limit, after)
        return json_response({"projects": [project_view(r) for r in rows]} | _next_after(rows, more, limit))

    @app.post("/api/v1/projects")
    async def create_project() -> Response:
        require_strong("create projects")
        body = await read_body(ProjectBody)
        check_name(body.name, "name")
        ws = workspace_dir(body.workspace, [("data directory", svc.data_dir),
                                            ("config directory", svc.config_files.dir),
                                            ("pair file's directory", svc.config_files.pair.parent)])
        pid = svc.new_id("prj")
        res = await svc.store.append(Draft(t.ProjectCreated(name=body.name, workspace=str(ws)), project_id=pid))
        try:
            await svc.projections.caught_up(res.seq)  # (so that a list read next shows it)
        except ProjectionStalled:
            # The project is in the log: an error now would be retried, and make a second one.
            # It is listed once the projections catch up (a `lens log rebuild` holds them).
            log.warning("project %s created while projections are behind the log", pid)
        return json_response({"id": pid, "name": body.name, "workspace": str(ws), "seq": res.seq}, 201)

    async def project_exists(pid: str) -> bool:
        await svc.projections.caught_up()
        return bool(await svc.projections.query("SELECT 1 FROM projects WHERE id = ?", (pid,)))

    # ------------------------------------------------------------------ sessions

    @app.get("/api/v1/sessions")
    async def list_sessions() -> Response:
        project = _id_filter("project", "projectId", "project filter")
        flag = _one_arg("includeDeleted")
        if flag not in (None, "", "0", "1", "false", "true"):
            raise ApiError("INVALID_ARGUMENT", "includeDeleted must be true, false, 1 or 0")
        include_deleted = flag in ("1", "true")
        # (newest first, its one order: `order` names it, as the project list's does; another is
        # refused, not ignored, so a client asking the oldest first is not answered the newest)
        if _one_arg("order") not in (None, "newest"):
            raise ApiError("INVALID_ARGUMENT", "the session list is newest first: order must be newest (the default)")
        limit, after = _list_page_args("session")
        await svc.projections.caught_up()
        where, args = [], []
        if project:
            where.append("project_id = ?")
            args.append(project)
        if not include_deleted:
            where.append("deleted = 0")
        rows, more = await read_list(SESSIONS, where, args, limit, after)
        # A session with /skill: inputs being checked reads running, as its view does. Asked once
        # the rows are read: such an input is recorded after each row's lastSeq (or refused).
        checking = svc.supervisor.sessions_checking_inputs()
        return json_response({"sessions": [session_row_view(r, checking=r[0] in checking) for r in rows]}
                             | _next_after(rows, more, limit))

    async def read_list(order: ListOrder, where: list[str], args: list[Any], limit: int | None,
                        after: str | None) -> tuple[list[tuple], bool]:
        """The rows of a list (whole, or the page ``limit`` / ``after`` asks for: see
        :mod:`runtime.list_pages`) and whether more follow. ``after`` naming no row of the list's
        table is 400: a cursor the daemon never gave (a row deleted between pages stays a row)."""
        key = None
        if after is not None:
            found = await svc.projections.query(order.cursor_sql(), (after,))
            if not found:
                raise ApiError("INVALID_ARGUMENT", f"after names no {order.table[:-1]} ({after!r}); "
                               f"give an id a page's nextAfter gave, or leave after out to start at the first")
            key = found[0]
        tail, tail_args = order.page(where, args, key, limit)
        return split_page(await svc.projections.query(order.select + tail, tail_args), limit)

    @app.post("/api/v1/sessions")
    async def create_session() -> Response:
        require_strong("create sessions")
        body = await read_body(SessionBody)
        if body.name is not None:
            check_name(body.name, "name")
        check_session_settings(body.model, body.thinking_level)
        if not await project_exists(check_id(body.project_id, "projectId")):
            raise ApiError("PROJECT_NOT_FOUND", f"no project {body.project_id!r}")
        # Without a model, the effective default now is the session's (F-MOD-5): a default
        # changed later leaves it as it is. Not checked here: a default that cannot serve fails
        # at submit (PROVIDER_DISABLED / PROVIDER_KEY_REQUIRED), as it always did.
        sid = await svc.supervisor.create_session(body.project_id, model=body.model,
                                                  thinking_level=body.thinking_level, name=body.name,
                                                  default_model=svc.catalog.default_model)
        state = await svc.call(sid, a.GetState())
        return json_response(session_view(state, secrets=svc.store.secrets), 201)

    @app.get("/api/v1/sessions/<sid>")
    async def get_session(sid: str) -> Response:
        check_id(sid, "session id")
        return json_response(await svc.call(sid, _view_window()))

    @app.post("/api/v1/sessions/<sid>/fork")
    async def fork_session(sid: str) -> Response:
        """A new session whose contexts are the source's as of its event ``seq`` (F-ACT-7: time
        travel, "try again from here"); it starts idle, with the model and thinking level the
        source had at ``seq``, and its view says ``forkedFrom``. The source is not changed."""
        require_strong("fork sessions")
        check_id(sid, "session id")
        body = await read_body(ForkBody)
        if body.name is not None:
            check_name(body.name, "name")
        new = await before_stop(svc.shutting_down, lambda: svc.supervisor.fork_session(sid, body.seq, name=body.name))
        return json_response(session_view(await svc.call(new, a.GetState()), secrets=svc.store.secrets), 201)

    @app.patch("/api/v1/sessions/<sid>")
    async def configure_session(sid: str) -> Response:
        """Change a session's model, thinking level, name or saved settings (F-ACT-6): each change
        is an event (``session.configured``, ``session.named``); a model or thinking level applies
        from the session's next model request (one already sent keeps what it was sent with). A
        field given as null is set back to its default (``session.configured`` ``reset``)."""
        require_strong("configure sessions")
        check_id(sid, "session id")
        body = await read_body(SessionPatchBody)
        from .context_api import context_settings

        settings = context_settings(body)
        if isinstance(body.tool_policy, dict):
            from tools.catalog import PolicyError, parse_policy_map, policy_json

            try:
                kept = parse_policy_map({k: v for k, v in body.tool_policy.items() if v is not None}, "toolPolicy")
            except PolicyError as exc:
                raise ApiError("VALIDATION_FAILED", str(exc)) from None
            if len(body.tool_policy) > 1000:
                raise ApiError("VALIDATION_FAILED", "toolPolicy has more than 1000 entries")
            if body.tool_policy:
                settings["toolPolicy"] = {k: (policy_json({k: kept[k]})[k] if v is not None else None)
                                          for k, v in body.tool_policy.items()}
        model = body.model if isinstance(body.model, str) else None
        thinking_level = body.thinking_level if isinstance(body.thinking_level, str) else None
        name = body.name if isinstance(body.name, str) else None
        reset = tuple(key for attr, key in PATCH_RESETS
                      if getattr(body, attr) is None)  # (null: back to the default; left out: UNSET)
        if model is None and thinking_level is None and not reset and name is None and not settings:
            raise ApiError("VALIDATION_FAILED", "give at least one of model, thinkingLevel, name, autoCompaction, "
                                                "compactionTriggerPercent, pruneToolResults and toolPolicy")
        check_session_settings(model, thinking_level)
        if name is not None:
            check_name(name, "name")
        if model is not None or thinking_level is not None or reset or settings:
            await svc.call(sid, a.Configure(model=model, thinking_level=thinking_level,
                                                       settings=settings, reset=reset))
        if name is not None:
            await svc.call(sid, a.Rename(name))
        return json_response(await svc.call(sid, a.GetView()))

    @app.delete("/api/v1/sessions/<sid>")
    async def delete_session(sid: str) -> Response:
        """Soft-delete a session (F-ACT-6): its run is aborted, queued inputs withdrawn, and
        ``session.deleted`` recorded; nothing is removed from the log. The view still answers
        (``deleted: true``); the list shows it only with ``includeDeleted``; it takes no more
        inputs, changes or deletes (409 ``SESSION_DELETED``)."""
        require_strong("delete sessions")
        check_id(sid, "session id")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Delete()))

    @app.post("/api/v1/sessions/<sid>/inputs")
    async def submit(sid: str) -> Response:
        require_strong("submit inputs")
        check_id(sid, "session id")
        body = await read_body(InputBody)
        check_id(body.request_id, "requestId")
        if isinstance(body.content, str):
            content: list[t.ContentPart] = [t.TextPart(body.content)]
        else:
            content = [t.TextPart(p.text) if isinstance(p, TextPartIn) else t.ImagePart(p.artifact_id, p.mime)
                       for p in body.content]
            images = sum(isinstance(part, t.ImagePart) for part in content)
            if images > MAX_INPUT_IMAGES:
                raise ApiError("IMAGE_UNSUPPORTED", f"an input holds {images} images; at most {MAX_INPUT_IMAGES}")
            for part in content:
                if isinstance(part, t.ImagePart):
                    await check_image(part)
        result = await svc.call(sid, a.Submit(body.request_id, content, body.when_busy))
        return json_response(result, 202)

    @app.post("/api/v1/sessions/<sid>/inputs/<rid>/withdraw")
    async def withdraw(sid: str, rid: str) -> Response:
        require_strong("withdraw inputs")
        check_id(sid, "session id")
        check_id(rid, "requestId")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Withdraw(rid)))

    @app.post("/api/v1/sessions/<sid>/inputs/<rid>/steer")
    async def steer(sid: str, rid: str) -> Response:
        require_strong("steer inputs")
        check_id(sid, "session id")
        check_id(rid, "requestId")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Steer(rid)))

    @app.post("/api/v1/sessions/<sid>/abort")
    async def abort(sid: str) -> Response:
        require_strong("abort runs")
        check_id(sid, "session id")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Abort("user")))

    @app.get("/api/v1/sessions/<sid>/events")
    async def session_events(sid: str) -> Response:
        check_id(sid, "session id")
        after = _int_arg("after", 0, 0, None)
        limit = _int_arg("limit", 100, 1, MAX_EVENTS_PAGE)
        await _check_not_past_end(svc, "after", after)
        events = await svc.store.read_events(session_id=sid, after=after, limit=limit)
        if not events and (after == 0 or not await svc.store.read_events(session_id=sid, limit=1)):
            # A session is its events: none at all is a session that does not exist (asked of
            # the log, so an unknown id wakes no actor).
            raise SessionNotFound(f"no session {sid!r}")
        return json_response({"events": [e.to_json() for e in events],
                              "nextAfter": events[-1].seq if events else after})

    @app.post("/api/v1/sessions/<sid>/questions/<qid>/answer")
    async def answer(sid: str, qid: str) -> Response:
        require_strong("answer questions")
        check_id(sid, "session id")
        body = await read_body(AnswerBody)
        answer_data: dict[str, Any] = {"kind": body.kind}
        if body.option_ids is not None:
            answer_data["optionIds"] = body.option_ids
        if body.text is not None:
            answer_data["text"] = body.text
        return json_response(await svc.call(sid, a.Answer(check_id(qid, "question id"), answer_data)))

    # ------------------------------------------------------------------ artifacts, tools

    def artifacts() -> ArtifactStore:
        """The store the tools write: the daemon's own (its verdicts are shared)."""
        if svc.artifacts is None:
            svc.artifacts = ArtifactStore(svc.data_dir / "artifacts")
        return svc.artifacts

    async def artifact_io(aid: str, read: Callable[..., _T], *args: Any) -> _T:
        """``read(*args)`` (of the artifact store or an artifact it opened), in a worker thread;
        its errors as the API's."""
        try:
            return await trio.to_thread.run_sync(read, *args)
        except ArtifactError as exc:
            if exc.code == "ARTIFACT_CORRUPT":
                raise ApiError("ARTIFACT_CORRUPT", exc.message) from None
            raise ApiError("ARTIFACT_NOT_FOUND", f"no artifact {aid[:80]!r}") from None

    async def check_image(part: t.ImagePart) -> None:
        """An image input must name a stored, intact artifact of a type models take, as what it
        is: checked before the input enters the log, where a bad part would fail every later
        model request of the session (images are loaded afresh for each)."""
        check_artifact_id(part.artifact_id, "artifactId")  # (malformed is 400, as in GET /artifacts/{id}: not 404)
        if part.mime not in IMAGE_MIMES:
            raise ApiError("IMAGE_UNSUPPORTED", f"an image must be one of {', '.join(sorted(IMAGE_MIMES))}, "
                                                f"not {part.mime[:80]!r}")
        # (its size and type from its head: an artifact of 60 MiB is refused without reading it)
        found = await artifact_io(part.artifact_id, artifacts().head, part.artifact_id)
        if found.size > MAX_IMAGE_BYTES:  # as view_image: an image a model is sent is at most 5 MiB
            raise ApiError("IMAGE_UNSUPPORTED", f"artifact {part.artifact_id} is {found.size} bytes; an image "
                                                f"may be at most {MAX_IMAGE_BYTES}")
        actual = sniff_image(found.head)
        if actual != part.mime:
            raise ApiError("IMAGE_UNSUPPORTED", f"artifact {part.artifact_id} holds "
                                                f"{actual or 'no PNG, JPEG, GIF or WebP'} data, not {part.mime}")
        await artifact_io(part.artifact_id, artifacts().verify, part.artifact_id)  # (damaged: 500, before the log)

    @app.get("/api/v1/artifacts/<aid>")
    async def artifact(aid: str) -> Response:
        check_artifact_id(aid, "artifact id")
        # The file is opened once: its size, its first bytes (its type, a 304, a range), its check
        # against the id and every byte sent come from that one descriptor, so a file swapped in
        # after the check is never what is sent.
        store = artifacts()
        opened = await artifact_io(aid, store.open, aid)
        sending = False  # (once the body is made, it owns the descriptor and closes it)
        try:
            size = opened.size
            head = await trio.to_thread.run_sync(opened.read_at, 0, min(size, HEAD_BYTES))
            # Its bytes never change under its id: a strong ETag (a revalidation is 304, which sends
            # no byte and is not checked), and one byte range (206) for a client resuming or showing
            # part of a large binary.
            if request.if_none_match.contains_weak(aid):
                return not_modified(aid)
            # (the type it was stored with is asked only of bytes that may be one of those served as
            # stored: every other answer is the same whether the projections are up to date or not)
            stored = await svc.projections.artifact_type(aid) if stored_type_claimed(head) else None
            kind = artifact_type(head, aid, stored, whole=size <= len(head))
            headers = {**kind, **ARTIFACT_GUARD, "ETag": f'"{aid}"', "Accept-Ranges": "bytes"}
            if_range = request.headers.get("If-Range")
            wanted = byte_range(request.headers.get("Range"), size) if if_range in (None, f'"{aid}"') else None
            if wanted == UNSATISFIABLE:
                refused = error_response("RANGE_NOT_SATISFIABLE", f"the range {request.headers['Range'][:80]!r} holds "
                                                                  f"none of the artifact's {size} bytes", 416)
                refused.headers["Content-Range"] = f"bytes */{size}"
                return refused
            # Every answer that sends bytes or says they can be had (whole, a range, a HEAD) is
            # checked against the id first: read whole the first time this file is answered, then
            # by the verdict the store remembers for it (damaged: 500, before a byte is sent).
            await artifact_io(aid, store.check, opened)
            if wanted is None:
                begin, end, status = 0, size, 200
            else:
                (begin, end), status = wanted, 206
                headers["Content-Range"] = f"bytes {begin}-{end - 1}/{size}"
            if request.method == "HEAD":  # (the same head, no body to read)
                resp = Response(b"", status, headers)
                resp.headers["Content-Length"] = str(end - begin)
                return resp
            if end <= len(head):  # (all of it in the head already read)
                return Response(head[begin:end], status, headers)
            sending = True
            return Response(artifact_pieces(opened, begin, end), status, {**headers, "Content-Length": str(end - begin)})
        finally:
            if not sending:
                opened.close()

    def not_modified(aid: str) -> Response:
        """A 304: the artifact the client holds is still this one. Its ETag alone: the empty
        body's own ``Content-Type`` (Quart's ``text/html``) and ``Content-Length: 0`` were
        taken by a cache updating its stored answer from a 304 (RFC 9111 4.3.4) for the
        artifact's, and a length other than a 200's is forbidden there (RFC 9110 8.6)."""
        resp = Response(b"", 304, {"ETag": f'"{aid}"'})
        del resp.headers["Content-Type"]
        del resp.headers["Content-Length"]
        return resp

    async def artifact_pieces(opened: OpenArtifact, begin: int, end: int) -> AsyncIterator[bytes]:
        """Bytes ``begin``–``end`` of an open artifact, read in worker threads a piece at a time
        (so an answer of 64 MiB holds 256 KiB at once); the descriptor is closed when the body
        ends (one never started: when the answer is dropped). A file that is shorter than it was
        when the answer began (truncated since) ends the body short: the client sees the length
        it was promised broken, never other bytes. One removed meanwhile is still read whole: the
        descriptor holds it."""
        offset = begin
        try:
            while offset < end:
                try:
                    piece = await trio.to_thread.run_sync(opened.read_at, offset, min(CHUNK_BYTES, end - offset))
                except OSError as exc:  # (the head is sent: no status can say it any more)
                    log.warning("artifact %s: its answer ended at byte %d of %d: %s", opened.id, offset, end,
                                exc.strerror or exc)
                    return
                if not piece:
                    log.warning("artifact %s: its answer ended at byte %d of %d: the file is shorter", opened.id,
                                offset, end)
                    return
                yield piece
                offset += len(piece)
        finally:
            opened.close()

    @app.get("/api/v1/models")
    async def models() -> Response:
        catalog = svc.catalog
        return json_response({"models": [m.to_json() for m in catalog.models()], "default": default_view(catalog)})

    @app.put("/api/v1/models/default")
    async def save_default_model() -> Response:
        """Save (or clear, with null) the default model of new sessions (F-MOD-5): a listed
        model of an enabled provider. Recorded as ``default_model.set``; ``--model`` still wins."""
        require_strong("save the default model")
        body = await read_body(DefaultModelBody)
        catalog = svc.catalog
        if body.model is not None:
            check_session_settings(body.model, None)
            catalog.check_default(body.model)  # MODEL_UNKNOWN / PROVIDER_DISABLED (the key is not checked)
        async with svc.default_model_lock:
            if body.model != catalog.saved_default:  # (the same value again records nothing)
                res = await svc.store.append(Draft(t.DefaultModelSet(model=body.model)))
                catalog.set_saved_default(body.model, res.seq)
        return json_response(default_view(catalog))

    @app.get("/api/v1/tools/inventory")
    async def tools_inventory() -> Response:
        """The tool inventory (F-TOOL-4, runtime/tool_inventory.py); with ``session``, that
        session's main agent's loaded and searchable tools and its policy overrides."""
        from tools.catalog import ToolCatalog

        from .tool_inventory import inventory

        sid = _id_filter("session", "sessionId", "session")
        state = await svc.call(sid, a.GetState()) if sid is not None else None
        deps = svc.supervisor.deps
        catalog = deps.tool_catalog or ToolCatalog(deps.tools)
        servers = svc.mcp.inventory() if svc.mcp is not None else []
        return json_response(inventory(catalog, state, servers))

    # ------------------------------------------------------------------ config files

    @app.get("/api/v1/config/files")
    async def config_files() -> Response:
        require_strong("read raw config")
        return json_response({"files": await trio.to_thread.run_sync(svc.config_files.list)})

    @app.get("/api/v1/config/files/<name>")
    async def read_config(name: str) -> Response:
        require_strong("read raw config")
        return json_response(await trio.to_thread.run_sync(svc.config_files.read, name))

    @app.put("/api/v1/config/files/<name>")
    async def write_config(name: str) -> Response:
        require_strong("write raw config")
        body = await read_body(ConfigWriteBody)
        if isinstance(body.expect_digest, str) and not SHA256_RE.fullmatch(body.expect_digest):
            # (malformed is 400: "changed since it was read" sent the client to read again for nothing)
            raise ApiError("INVALID_ARGUMENT", "expectDigest must be the digest a GET of the file gave (64 lowercase "
                                               "hex digits), or null for a file that did not exist")
        result = await trio.to_thread.run_sync(svc.config_files.write, name, body.text, body.expect_digest)
        try:
            await svc.store.append(Draft(t.ConfigChanged(name=name, digest=result["digest"])))
        except StoreWriteFailed as exc:
            if not exc.storage:
                raise
            # The file is replaced already (whole): say so, rather than "nothing was recorded".
            raise ApiError("STORE_UNAVAILABLE", f"{name} was written (digest {result['digest']}), but the event log "
                                                f"could not record the change ({exc}); the file holds the new text") from None
        return json_response(result)

    # ------------------------------------------------------------------ history

    @app.post("/api/v1/history/search")
    async def history_search() -> Response:
        body = await read_body(HistorySearchBody)
        if not await project_exists(check_id(body.project_id, "projectId")):
            raise ApiError("PROJECT_NOT_FOUND", f"no project {body.project_id!r}")
        for value, what in ((body.session_id, "sessionId"), (body.agent_id, "agentId"), (body.task_id, "taskId"),
                            (body.after_context_item_id, "afterContextItemId")):
            if value is not None:
                check_id(value, what)
        hits, nxt = await svc.projections.history_search(
            body.project_id, body.query, session_id=body.session_id, agent_id=body.agent_id, task_id=body.task_id,
            after_item_id=body.after_context_item_id, limit=body.limit, cursor_name="afterContextItemId")
        return json_response({"results": [h.to_json() for h in hits], "nextAfterContextItemId": nxt})

    @app.get("/api/v1/history/items/<item_id>")
    async def history_item(item_id: str) -> Response:
        check_id(item_id, "context item id")
        offset = _int_arg("offset", 0, 0, None)
        limit = _int_arg("limit", 16384, 1, 1024 * 1024)
        return json_response(await svc.projections.history_read(item_id, offset=offset, limit=limit))

    # ------------------------------------------------------------------ dashboard

    @app.get("/")
    async def dashboard() -> Response:
        page = STATIC_DIR / "index.html"
        if not page.exists():
            raise ApiError("NOT_FOUND", "the dashboard is not installed")
        data = page.read_bytes()
        resp = Response(data, content_type="text/html; charset=utf-8")
        # The page's own inline script runs by its hash; any other inline script (an injection)
        # does not.
        scripts = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(code).digest()).decode()}'"
                           for code in re.findall(rb"<script>(.*?)</script>", data, re.S))
        resp.headers["Content-Security-Policy"] = (
            f"default-src 'self'; script-src 'self' {scripts}; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
            "form-action 'self'")
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Referrer-Policy"] = "no-referrer"
        return resp

    from .jobs_api import add_job_routes  # (it uses this module's helpers)

    add_job_routes(app, svc)
    from .context_api import add_context_routes  # (compaction, snip, include)

    add_context_routes(app, svc)

    from .workspace_api import add_workspace_routes  # (F-HAR-3: workspace browsing, changes)

    add_workspace_routes(app, svc)
    from .stream_api import add_stream_routes  # (F-API-5: the SSE stream)

    add_stream_routes(app, svc)
    return app


class ConfigWriteBody(_B):
    text: str
    # the `digest` of the GET the edit started from (null: the file did not exist); omitted: an
    # unconditional write. A file that changed meanwhile is 409 CONFIG_FILE_CHANGED.
    expect_digest: str | None | msgspec.UnsetType = msgspec.UNSET


class HistorySearchBody(_B):
    project_id: str
    query: str
    session_id: str | None = None
    agent_id: str | None = None
    task_id: str | None = None
    after_context_item_id: str | None = None
    limit: int = 20


_DECIMAL = re.compile(r"-?[0-9]+")  # ASCII digits only (int() also takes '1_000', '٣', ' 5')
MAX_DIGITS = 20  # more significant digits than this are past any bound (SQLite's are 19)


def _parse_int(name: str, raw: str, lo: int, hi: int) -> int:
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


def _one_arg(name: str) -> str | None:
    """The query parameter ``name`` (``None`` when absent); given twice it is 400."""
    values = request.args.getlist(name)
    if len(values) > 1:
        raise ApiError("INVALID_ARGUMENT", f"{name} is given {len(values)} times; give it once")
    return values[0] if values else None


def _id_arg(name: str, what: str) -> str | None:
    """An id filter: absent is ``None``; present it must be a well-formed id (an empty one would
    silently filter nothing, or match nothing)."""
    value = _one_arg(name)
    return None if value is None else check_id(value, what)


def _id_filter(name: str, alias: str, what: str) -> str | None:
    """An id filter written ``name`` (as the spec writes it) or ``alias`` (the camelCase of the
    JSON bodies: ``?sessionId=`` used to be ignored, and a stream meant for one session carried
    every session's events); both naming different ids is 400."""
    value, other = _id_arg(name, what), _id_arg(alias, what)
    if value is not None and other is not None and value != other:
        raise ApiError("INVALID_ARGUMENT", f"{name} and {alias} name different ids; give one")
    return value if value is not None else other


def _int_arg(name: str, default: int, lo: int, hi: int | None) -> int:
    """An integer query parameter: absent is ``default``; empty, twice or malformed is 400."""
    raw = _one_arg(name)
    if raw is None:
        return default
    return _parse_int(name, raw, lo, SEQ_MAX if hi is None else hi)


def _view_window() -> a.GetView:
    """The view with the window of items a client asked for: ``itemsLimit`` items (1 to
    ``VIEW_ITEMS_MAX``, that many when absent) ending before the item index ``itemsBefore``
    (the end when absent; past the session's items it is 400, answered by the view). With
    ``agentsStart``, its agents are a page of all of them in the order they started:
    ``agentsLimit`` (1 to ``VIEW_AGENTS_MAX``, that many when absent) from that index (past
    ``agentsTotal`` it is 400, answered by the view); ``agentsLimit`` alone is 400."""
    limit = _int_arg("itemsLimit", VIEW_ITEMS_MAX, 1, VIEW_ITEMS_MAX)
    raw = _one_arg("itemsBefore")
    agents_start = _optional_int("agentsStart", "agentsLimit")
    return a.GetView(items_limit=limit, items_before=None if raw is None else _parse_int("itemsBefore", raw, 0, SEQ_MAX),
                     agents_start=agents_start, agents_limit=_int_arg("agentsLimit", VIEW_AGENTS_MAX, 1, VIEW_AGENTS_MAX))


def _optional_int(name: str, needs_it: str) -> int | None:
    """The integer ``name`` (0 to ``SEQ_MAX``), or ``None`` when absent; ``needs_it`` (a
    parameter that means something only beside ``name``) given without it is 400."""
    raw = _one_arg(name)
    if raw is None:
        if _one_arg(needs_it) is not None:
            raise ApiError("INVALID_ARGUMENT", f"{needs_it} sizes a page that {name} begins; give {name} too")
        return None
    return _parse_int(name, raw, 0, SEQ_MAX)


def _list_page_args(what: str) -> tuple[int | None, str | None]:
    """A list's ``limit`` (1 to ``LIST_LIMIT_MAX``; absent: the whole list, as the spec's
    answer) and ``after`` (a ``what`` id: the page begins after it); ``after`` alone is 400."""
    raw = _one_arg("limit")
    after = _id_arg("after", f"after ({what} id)")
    if raw is None:
        if after is not None:
            raise ApiError("INVALID_ARGUMENT", "after continues a page that limit sizes; give limit too")
        return None, None
    return _parse_int("limit", raw, 1, LIST_LIMIT_MAX), after


def _next_after(rows: list[tuple], more: bool, limit: int | None) -> dict[str, Any]:
    """``nextAfter`` of a paged list (the last row's id while more follow, else ``None``); a
    list asked for whole answers without it, as before."""
    if limit is None:
        return {}
    return {"nextAfter": rows[-1][0] if more else None}


async def _check_not_past_end(svc: Services, name: str, after: int) -> None:
    """A position past the log's last event was never one a client saw (every seq it saw is
    committed): reading "after" it would silently skip the events up to it once they exist.

    The writer records ``last_seq`` just after its commit returns, and a reader may already have
    read (and a client been given) that commit's events: a position past ``last_seq`` is asked
    of the log itself before it is refused."""
    if after > svc.store.last_seq and not await svc.store.read_rows(after=after - 1, limit=1):
        raise ApiError("INVALID_ARGUMENT", f"{name} {after} is past the last event of this log "
                       f"({svc.store.last_seq}); start again without it")
