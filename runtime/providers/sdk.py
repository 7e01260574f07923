"""What the three SDK-backed providers share: settings, the lazily created client, image loading,
and the one place where SDK exceptions become :class:`ProviderError` codes.

Error codes (``retryable`` says whether trying the same request again later can succeed):

=====================  =====================================================  =========
code                   when                                                   retryable
=====================  =====================================================  =========
AUTH_FAILED            401 (the key was rejected)                             no
PERMISSION_DENIED      403                                                    no
MODEL_NOT_FOUND        404                                                    no
CONTEXT_TOO_LONG       the prompt exceeds the model's window                  no
REQUEST_TOO_LARGE      413 (request bytes, e.g. many images)                  no
BAD_REQUEST            other 400 / 422                                        no
QUOTA_EXCEEDED         429 with ``insufficient_quota`` / 402 billing          no
RATE_LIMITED           429                                                    yes
OVERLOADED             529 / ``overloaded_error``                             yes
TIMEOUT                408 or the client's timeout; a stream that sends       yes
                       nothing of the answer for ``timeoutSeconds``
CONNECTION_FAILED      could not reach the server / connection dropped        yes
PROVIDER_ERROR         5xx, an error event in the stream, a malformed stream  5xx: yes
PROVIDER_ERROR         409 (a conflict, which the SDKs also retry)            yes
PROVIDER_ERROR         any other 4xx status                                   no
PROVIDER_ERROR         any other exception of the request (named)             no
RESPONSE_NOT_RECORDED  the answer streamed is past ``log.maxEventBytes``      no
=====================  =====================================================  =========

The SDKs' own retries (``max_retries``, honouring ``retry-after``) run first; a ProviderError is
what is left after them. Messages never contain the API key: it is redacted from provider text,
and authentication failures name only the environment variable.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import logging
import math
import re
import sys
import traceback
from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, Mapping, Sequence
from urllib.parse import urlsplit

import trio

from events.codec import DEFAULT_MAX_EVENT_BYTES
from runtime.config import ModelConfig

from .base import ModelResult, ProviderError
from .redact import redact_key
from .compile import Compiled, ImageLoader, StoreImages

log = logging.getLogger("lens.providers")

# The SDK modules a request of any SDK-backed provider may import (its own SDK, its stream
# parser, and the other SDK's errors, which :meth:`SdkProvider.map_error` reads): imported by
# :func:`sdks_imported` in a worker thread, never on the thread that runs the daemon's loop.
SDK_MODULES = ("httpx2", "openai", "openai._streaming", "anthropic", "anthropic._streaming")


def _imported(name: str) -> bool:
    """Whether module ``name`` is imported and its code has run to its end. A module is in
    ``sys.modules`` from the start of its import, and its ``__spec__._initializing`` is true until
    its code has run: what CPython's own ``import`` reads to know it must wait on the module's
    lock (tests/providers/test_sdk_import.py pins it)."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def _import_all(modules: Sequence[str]) -> None:
    for name in modules:
        importlib.import_module(name)


async def sdks_imported(modules: Sequence[str] = SDK_MODULES) -> None:
    """Import the SDKs (:data:`SDK_MODULES`) in a worker thread, if they are not yet; every
    SDK-backed request awaits it before its first ``import``.

    The SDKs are imported on first use, so that a daemon whose providers never ask one does not
    pay for it. Imported on the loop's thread, as they were, the first request of a process held
    the whole daemon for as long as the import took (2.6 s for ``anthropic`` on an idle 2-core
    machine, more under load): no request answered, no stream written, no other session served,
    and a kept-alive connection that a client had just sent a request on was closed under it
    once its keep-alive timeout (5 s) passed meanwhile (the client read a reset, or no answer).
    In a worker thread the loop runs beside it. Raises what the import raises; cancelled, the
    import goes on in its thread and the next request waits for it, in a thread of its own
    (Python's module locks): a module another thread is still importing is in ``sys.modules``
    already, and only one whose import has ended is taken as imported (:func:`_imported`), else
    the next request went on to import it on the loop's thread, which waited there for the lock."""
    if all(_imported(name) for name in modules):
        return
    await trio.to_thread.run_sync(_import_all, modules, abandon_on_cancel=True)



class SdkImport:
    """The SDKs' import (:data:`SDK_MODULES`) that the SDK-backed providers of one catalog share:
    begun by the daemon as it starts (:meth:`run`, a task of its nursery) when a provider it
    serves uses an SDK, so that its first such request does not wait for it (2 to 3 s on an
    idle 2-core machine), and awaited by every SDK-backed request before its first ``import``
    (:meth:`ready`).

    One import at a time, in a worker thread (:func:`sdks_imported` says why): a request that
    comes while it runs waits for that one, not a thread of its own. :attr:`runs` counts the
    imports begun (one, unless one failed or was cancelled and a later request began another)."""

    def __init__(self, modules: Sequence[str] = SDK_MODULES) -> None:
        self.modules = tuple(modules)
        self.runs = 0
        self._running: trio.Event | None = None

    async def run(self) -> None:
        """The import begun at the daemon's start. An import that fails is logged, not raised
        (the daemon serves on): the first request imports again and fails as that import does."""
        try:
            await self.ready()
        except Exception as exc:  # (an SDK that cannot be imported: each request says so)
            log.warning("the provider SDKs could not be imported at start: %s: %s", type(exc).__name__, exc)

    async def ready(self) -> None:
        """Return once the modules are imported, importing them (in a worker thread) unless an
        import of them is under way already, which is waited for instead. Raises what the
        import raises."""
        while not all(_imported(name) for name in self.modules):
            if self._running is not None:
                await self._running.wait()
                continue
            self._running = done = trio.Event()
            self.runs += 1
            try:
                await sdks_imported(self.modules)
            finally:
                self._running = None
                done.set()


DEFAULT_MAX_RETRIES = 2
DEFAULT_TIMEOUT = 600.0
NO_KEY = "lens-no-key"  # sent when a provider needs no key (local servers); never an env fallback
MAX_MESSAGE = 2000
MAX_TRACE = 20_000  # the characters of an unexpected exception's logged traceback (its end kept)
# What the SDKs' stream parsers (and reading their objects) raise on a stream they cannot make
# sense of: a frame of JSON that is no object (`null`, a list), an object missing a field the SDK
# reads (an Anthropic `message_delta` without `usage`), a field of the wrong type. Each is a
# malformed stream (PROVIDER_ERROR), never an exception out of `stream()`: that crashed the
# session's actor, which asked the model again on restart and, after three, was quarantined.
MALFORMED = (RuntimeError, ValueError, AssertionError, KeyError, IndexError, TypeError, AttributeError)
# A refusal for the model's window, in the words servers use (Anthropic also says "input length
# and `max_tokens` exceed context limit: 197626 + 8192 > 200000": the input and the answer's room
# together past the window).
_CONTEXT_PATTERNS = re.compile(
    r"context[_ ]length|context window|maximum context|prompt is too long|too many tokens|"
    r"input is too long|exceeds? the (?:maximum|context|available context)|context_length_exceeded|"
    r"string_above_max_length|exceeds? (?:the )?context limit",
    re.IGNORECASE,
)
# The error types and codes that say so without words the patterns know (llama.cpp's server:
# "request (9000 tokens) exceeds the available context size, try increasing it").
_CONTEXT_KINDS = frozenset({"context_length_exceeded", "exceed_context_size_error"})


class SdkProvider(ABC):
    """Common state of an SDK-backed provider. Subclasses implement ``stream``.

    The key is held privately, read once from the environment by the catalog; it is never part of
    ``repr``, logs or error messages. The SDK client is created on first use (inside trio) and
    closed by :meth:`aclose`.
    """

    protocol = ""

    def __init__(
        self,
        id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        models: Mapping[str, ModelConfig] | None = None,
        load_image: ImageLoader | None = None,
        cache_ttl: str = "30m",
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_tokens: int = 8192,  # Anthropic's max_tokens when the model sets no maxOutputTokens
        max_answer_bytes: int = DEFAULT_MAX_EVENT_BYTES,  # log.maxEventBytes: see AnswerSize
        sdk_import: SdkImport | None = None,  # (the catalog's, shared; else one of its own)
    ) -> None:
        self.id = id
        self.base_url = base_url
        self.__key = api_key
        self.api_key_env = api_key_env
        self.models = dict(models or {})
        self.load_image = load_image
        self.cache_ttl = cache_ttl
        self.max_retries = max_retries
        self.timeout = timeout
        self.max_output_tokens = max_output_tokens
        self.max_answer_bytes = max_answer_bytes
        self.sdk_import = sdk_import if sdk_import is not None else SdkImport()
        self._client: Any = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r} {self.protocol} base_url={self.base_url!r}>"

    @property
    def _key(self) -> str:
        return self.__key or NO_KEY

    def model_config(self, model_id: str) -> ModelConfig:
        """The configured model, or defaults (no images, no explicit caching) for an unlisted one."""
        return self.models.get(model_id) or ModelConfig(id=model_id)

    def client(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    @abstractmethod
    def _make_client(self) -> Any:
        """The SDK's async client for this provider (openai.AsyncOpenAI / anthropic.AsyncAnthropic)."""

    def _sdk_client(self, client_class: type, default_base_url: str, base_url: str | None = None) -> Any:
        """An SDK client of ``client_class`` with this provider's settings: its key, its base URL
        (``base_url`` when given, else the configured one, else ``default_base_url``), retries and
        timeout. Every SDK provider builds its client here, so a setting reaches each SDK alike."""
        return client_class(api_key=self._key, base_url=base_url or self.base_url or default_base_url,
                            max_retries=self.max_retries, timeout=self.timeout)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with trio.CancelScope(shield=True):
                await client.close()

    # ------------------------------------------------------------------ errors

    def redact(self, text: str, limit: int) -> str:
        """``text`` redacted (:func:`redact_key`), then cut to ``limit`` characters. Only the
        first ``4 * limit`` are read: a proxy's error page can be megabytes, and judging every
        word of it held the event loop for seconds. A word cut there is judged as far as it goes.
        The password a ``baseUrl`` carries is redacted as the key is (a second guard: the config
        refuses such a ``baseUrl``)."""
        text = redact_key(text[:4 * limit], self.__key)
        try:
            password = urlsplit(self.base_url).password if self.base_url else None
        except ValueError:  # (config refuses such a URL)
            password = None
        return redact_key(text, password)[:limit]

    def malformed(self, exc: BaseException) -> ProviderError:
        """A stream the SDK could not make sense of (what it says is redacted: it can quote
        the model's own output)."""
        detail = self.redact(f"{type(exc).__name__}: {str(exc)}", 500)  # (redacted, then cut: never part of a key)
        return ProviderError("PROVIDER_ERROR", f"provider {self.id!r}: malformed stream: {detail}", retryable=True)

    def unexpected(self, exc: Exception) -> ProviderError:
        """Any other exception of a request: one the SDKs let through untranslated (``httpx2``'s
        ``InvalidURL`` for a base URL it cannot parse is no ``HTTPError``), or a slip of ours.
        Out of ``stream()`` it crashed the session's actor, which asked the model again on restart
        and, after three, was quarantined. Not retryable: nothing says the same request would
        fare better. (``trio.Cancelled`` and ``KeyboardInterrupt`` are no ``Exception``.)

        Logged with its traceback (an error: it may be a defect, and the event names only its
        type and message), redacted as the message is, whatever handler formats it: the daemon's
        also scrubs every key it knows. The traceback's end is kept, redacted before the cut."""
        detail = self.redact(f"{type(exc).__name__}: {str(exc)}", 500)
        trace = "".join(traceback.format_exception(exc))[-4 * MAX_TRACE:]
        log.error("provider %r: a request failed with an exception no provider error names "
                  "(recorded as PROVIDER_ERROR):\n%s", self.id, self.redact(trace, len(trace))[-MAX_TRACE:])
        return ProviderError("PROVIDER_ERROR", f"provider {self.id!r}: the request failed: {detail}")

    def failed(self, exc: Exception, sdk_error: type[Exception]) -> ProviderError:
        """What an exception out of a request or its stream records, other than a
        :class:`ProviderError` (recorded as it is): the SDK's own errors (``sdk_error``, after its
        retries) and transport errors as :meth:`map_error` says, a stream the SDK could not read
        (:data:`MALFORMED`) as :meth:`malformed`, anything else as :meth:`unexpected`."""
        import httpx2

        if isinstance(exc, (sdk_error, httpx2.HTTPError)):
            return self.map_error(exc)
        if isinstance(exc, MALFORMED):
            return self.malformed(exc)
        return self.unexpected(exc)

    def checked(self, result: ModelResult) -> ModelResult:
        """``result`` if every field the log records as text is text. The SDKs pass a field of
        another type through as sent (a tool call's id that is a number, a name that is
        ``null``): recorded, it crashed the session's actor (or was refused by the log as
        ``RESPONSE_NOT_RECORDED``, which names no provider); it is a malformed stream instead."""
        problem = _mistyped(result)
        if problem is not None:
            raise self.malformed(TypeError(problem)).during(result.usage)
        return result

    def diagnostics(self, compiled: Compiled, cache: dict[str, Any]) -> dict[str, Any]:
        """A result's diagnostics: the protocol, the compiler's own, the cache breakpoints sent
        (``cache``, when there are any) and the tool names that needed an alias (when any did)."""
        diagnostics: dict[str, Any] = {"protocol": self.protocol, **compiled.diagnostics}
        if cache:
            diagnostics["cache"] = cache
        if compiled.names.aliased:
            diagnostics["tool_aliases"] = compiled.names.aliased
        return diagnostics

    def answer_size(self) -> "AnswerSize":
        """A running count of one answer's bytes, bounded by :attr:`max_answer_bytes`; a read
        through it that adds nothing for :attr:`timeout` seconds ends (``TIMEOUT``)."""
        return AnswerSize(self.id, self.max_answer_bytes, self.timeout)

    def truncated(self, what: str, size: "AnswerSize | None" = None) -> ProviderError:
        """A stream that ended before the response did (a dropped proxy, a server restart), or,
        when ``size`` read a body that was no event stream (a server that ignores ``"stream":
        true`` and answers one JSON document), an error that says so: that server will never
        stream, so it is not retryable."""
        media = (size.content_type if size is not None else None) or ""
        kind = media.partition(",")[0].partition(";")[0].strip().lower()  # (a header sent twice is joined by ", ")
        if kind and kind != "text/event-stream":
            shown = self.redact(kind, 100)
            return ProviderError("PROVIDER_ERROR", f"provider {self.id!r}: the server answered with {shown}, not an "
                                 f"event stream (text/event-stream): Lens asks for a streamed answer (\"stream\": "
                                 f"true) and reads only that; use a server or endpoint that streams")
        return ProviderError("PROVIDER_ERROR", f"provider {self.id!r}: the stream ended before {what}", retryable=True)

    def map_error(self, exc: BaseException) -> ProviderError:
        """Translate an openai/anthropic SDK exception (after the SDK's own retries), or a
        transport error the SDK let through while a stream was being read."""
        import anthropic
        import httpx2
        import openai

        where = f"provider {self.id!r}"
        if isinstance(exc, (openai.APITimeoutError, anthropic.APITimeoutError, httpx2.TimeoutException)):
            return ProviderError("TIMEOUT", f"{where}: the request timed out: the server sent no answer within "
                                 f"{self.timeout:g} s (timeoutSeconds)", retryable=True)
        if isinstance(exc, (openai.APIConnectionError, anthropic.APIConnectionError)):
            return ProviderError("CONNECTION_FAILED", f"{where}: connection failed ({type(exc.__cause__ or exc).__name__})", retryable=True)
        if isinstance(exc, httpx2.HTTPError):
            return ProviderError("CONNECTION_FAILED", f"{where}: connection failed ({type(exc).__name__})", retryable=True)
        status = getattr(exc, "status_code", None)
        body = getattr(exc, "body", None)
        err = body.get("error", body) if isinstance(body, dict) else None
        err = err if isinstance(err, dict) else {}
        etype = str(err.get("type") or "")
        ecode = str(err.get("code") or "")
        detail = self.redact(_error_text(exc, body, err), MAX_MESSAGE)
        in_stream = status == 200 or status is None  # an error event inside the stream
        # An error event inside a 200 stream has no HTTP status, whatever code it maps to: the
        # status its type stands for picks the code, and nothing is recorded as ``status`` (a
        # model.failed said 529, 429 or 401 for a status no server sent). Its label names what the
        # server sent (a Responses event's ``code``, else the error's ``type``).
        recorded = None if in_stream else status
        if in_stream:
            status = {"overloaded_error": 529, "rate_limit_error": 429, "authentication_error": 401,
                      "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                      "invalid_request_error": 400, "api_error": 500}.get(etype, status)
        said = str(getattr(exc, "server_code", None) or etype)
        label = ("stream error" + (f" ({said})" if said else "")) if in_stream else f"HTTP {status}"
        if recorded == 404 and (asked := _asked_address(exc)):  # (a baseUrl missing its /v1 answers 404 to all)
            label += f" at {self.redact(asked, 300)}"
        if status == 401 or etype == "authentication_error":
            env = f" from {self.api_key_env}" if self.api_key_env else ""
            return ProviderError("AUTH_FAILED", f"{where} rejected the API key{env} ({label})", status=recorded)
        if _CONTEXT_PATTERNS.search(detail) or ecode in _CONTEXT_KINDS or etype in _CONTEXT_KINDS:
            return ProviderError("CONTEXT_TOO_LONG", f"{where}: the request exceeds the model's context window "
                                                     f"({label}): {detail}", status=recorded)
        code, retryable = _by_status(status, etype, ecode)
        return ProviderError(code, f"{where}: {label}: {detail}", retryable=retryable, status=recorded)


def connection_dropped(exc: BaseException) -> bool:
    """Whether ``exc``, out of reading a stream, is its connection dropping (a proxy or server
    that went away), not a timeout nor anything the server said. A stream whose answer had
    already said it was done (Chat's ``finish_reason``, Anthropic's ``stop_reason``) keeps that
    answer when it is cut so before its terminator (``[DONE]``, ``message_stop``): the answer is
    whole, and failing it as ``CONNECTION_FAILED`` lost what the user had seen."""
    import anthropic
    import httpx2
    import openai

    if isinstance(exc, (openai.APITimeoutError, anthropic.APITimeoutError, httpx2.TimeoutException)):
        return False
    return isinstance(exc, (openai.APIConnectionError, anthropic.APIConnectionError, httpx2.TransportError))


class AnswerSize:
    """The bytes of an answer streamed so far, as UTF-8: its text, reasoning and tool-call
    arguments (and Anthropic's redacted thinking), the parts that grow with it. The recorded
    ``model.responded`` holds each of those bytes at least once, so an answer past ``limit``
    (``log.maxEventBytes``) can never be recorded: :meth:`add` then raises the error recording it
    would give (``RESPONSE_NOT_RECORDED``), and the caller's read ends, closing the stream. A
    server that keeps sending deltas and never its final event (``timeoutSeconds`` bounds only a
    silence) held the session, and the growing answer in memory, until it stopped or the user
    aborted. Ids, names and signatures are not counted (a few bytes a call, replaced rather than
    grown), nor what the event holds besides (reasoning blocks repeat reasoning, diagnostics): an
    answer under the limit is read whole, and whether its event fits is decided when it is
    recorded, as before. Counting costs one length a delta (ASCII, the usual case) or one encode of
    that delta, never of the answer.

    A stream read through :meth:`reading` must also grow: ``stall`` seconds (the provider's
    ``timeoutSeconds``) without a byte added end it with ``TIMEOUT``. A server that sends only
    keep-alives, pings or empty deltas is never silent, so the SDK's read timeout never fired,
    and it held the session until the user aborted."""

    def __init__(self, provider_id: str, limit: int, stall: float = math.inf) -> None:
        self.provider_id = provider_id
        self.limit = limit
        self.stall = stall
        self.bytes = 0
        self.content_type: str | None = None  # the Content-Type of the body read (None: not known)
        self._read: trio.CancelScope | None = None  # (the open read's, whose deadline a byte added moves)

    @contextlib.asynccontextmanager
    async def reading(self, stream: Any) -> AsyncIterator[Any]:
        """``stream`` (an SDK stream, or the manager that opens one) entered; its body is
        cancelled once ``stall`` seconds pass without :meth:`add` counting a byte, and then
        ``TIMEOUT`` (retryable) is raised, after the stream is closed. The request itself (and the
        SDK's retries of it) is bounded by the SDK's own timeout, before the body begins."""
        async with stream as opened:
            headers = getattr(getattr(opened, "response", None), "headers", None)
            if headers is not None:
                self.content_type = headers.get("content-type")
            with trio.CancelScope(deadline=trio.current_time() + self.stall) as scope:
                self._read = scope
                try:
                    yield opened
                finally:
                    self._read = None
        if scope.cancelled_caught:
            raise ProviderError("TIMEOUT", f"provider {self.provider_id!r}: the request timed out: the stream sent "
                                f"nothing of the answer for {self.stall:g} s", retryable=True)

    def add(self, piece: Any) -> None:
        if not isinstance(piece, str):
            return  # (no text: the reader's own checks say so)
        if piece and self._read is not None:
            self._read.deadline = trio.current_time() + self.stall
        self.bytes += len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))
        if self.bytes > self.limit:
            raise ProviderError("RESPONSE_NOT_RECORDED", f"provider {self.provider_id!r}: the model's answer could "
                                f"not be recorded (the answer streamed was past the maximum event size of "
                                f"{self.limit} bytes)")


BOM = "\ufeff"


def bom_skipped(decoder: type) -> type:
    """An SDK's SSE decoder class (one instance reads one stream, line by line) that ignores a
    byte-order mark at the stream's start, as the SSE standard says to. The SDKs read it as part
    of the first line's field name, so that line was dropped: Anthropic lost ``message_start``
    (and failed the answer as cut short), Chat lost its first chunk (the answer's first words,
    where a server sends them with the role)."""

    class BomSkipped(decoder):  # type: ignore[misc, valid-type]
        _begun = False

        def decode(self, line: str) -> Any:
            if not self._begun:
                self._begun = True
                line = line.removeprefix(BOM)
            return super().decode(line)

    return BomSkipped


def add_piece(parts: list[Any], piece: Any) -> None:
    """Append ``piece`` (a delta of an answer's text, reasoning or arguments) to ``parts``,
    joining as it goes: each part is kept under half the one before it (the last two are merged
    otherwise), so an answer of n deltas is held as O(log n) strings and each character is copied
    O(log n) times. A list of the deltas held a list slot and (but for ASCII and Latin-1
    characters, which CPython shares) a string object per delta until the answer ended: an answer
    of one-character deltas took 8 (ASCII) to 28 (CJK) times its bytes.
    A piece that is no text is kept as it is (the reader's join or checks say so)."""
    parts.append(piece)
    while (len(parts) > 1 and isinstance(piece, str) and isinstance(parts[-2], str)
           and 2 * len(parts[-1]) >= len(parts[-2])):
        last = parts.pop()
        parts[-1] += last


# What the SDK clients take from the environment when they are built, besides what Lens passes:
# credentials and identities that would be sent as headers (the custom headers of
# ``OPENAI_CUSTOM_HEADERS`` / ``ANTHROPIC_CUSTOM_HEADERS`` first among them), each reset to
# "none". The base URL and the key are always passed, so the SDKs read no variable for them.
_ENVIRONMENT_FIELDS = ("organization", "project", "admin_api_key", "webhook_secret", "webhook_key", "auth_token")


def environment_dropped(client: Any) -> Any:
    """``client`` (an SDK client just built with Lens's arguments) without what the SDK read from
    environment variables of its own (F-MOD-6: a provider sends the key its config names, from
    the variable it names, and nothing else). The SDKs send the headers of
    ``OPENAI_CUSTOM_HEADERS`` and ``ANTHROPIC_CUSTOM_HEADERS`` on every request, after the key:
    an ``Authorization`` or ``x-api-key`` there replaced the configured key, and reached a
    provider that needs none (a local server) too; ``OPENAI_ORG_ID`` and ``OPENAI_PROJECT_ID``
    went to every OpenAI-protocol server, whatever its base URL. Lens passes no custom headers,
    so every one the client holds came from the environment. A value no scrub knew could then
    also come back in an error body and be stored."""
    client._custom_headers = {}
    for name in _ENVIRONMENT_FIELDS:
        if getattr(client, name, None) is not None:
            setattr(client, name, None)
    if getattr(client, "_ambient_authorizations", None):
        client._ambient_authorizations = frozenset()
    return client


OPENAI_BASE_URL = "https://api.openai.com/v1"  # (both OpenAI protocols, where no baseUrl is configured)


@functools.cache
def openai_client_class(chat: bool = False) -> type:
    """``openai.AsyncOpenAI`` whose stream reader skips SSE frames without data. The SDK hands
    every frame to its JSON parser, so a frame holding only ``retry:``, ``id:`` or a comment
    after an ``id:`` (a keep-alive, once the stream has given an id), or an empty ``data:``,
    failed the whole answer as a malformed stream; the SSE standard dispatches no event for the
    first kinds, and the Anthropic SDK skips all of them. A byte-order mark at the start is
    ignored (:func:`bom_skipped`). What the SDK reads from environment variables of its own is
    dropped (:func:`environment_dropped`). ``chat``: a Chat Completions stream's ``error`` events
    are read as its errors (:func:`chat_error_event`)."""
    import openai
    from openai._streaming import SSEDecoder

    class Decoder(bom_skipped(SSEDecoder)):  # type: ignore[misc]
        def decode(self, line: str) -> Any:
            sse = super().decode(line)
            if sse is None or not sse.data:
                return None
            return chat_error_event(sse) if chat and sse.event == "error" else sse

    class Client(LensClient, openai.AsyncOpenAI):
        decoder = Decoder

    return Client


def chat_error_event(sse: Any) -> Any:
    """An SSE ``error`` event of a Chat Completions stream as the convention the SDK reads
    (``data: {"error": {…}}``, which it raises as the stream's error). Servers that send the
    error object itself under ``event: error`` (llama.cpp's server did), or its text, had it
    read as a chunk without choices: the answer failed as "the stream ended before its
    finish_reason", and what the server said was lost."""
    try:
        data = json.loads(sse.data)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("error"):
        return sse
    error = data if isinstance(data, dict) and data else {"message": sse.data}
    return type(sse)(event=None, data=json.dumps({"error": error}), id=sse.id, retry=sse.retry)


class LensClient:
    """What Lens changes in both SDKs' async clients (mixed in before the SDK's class): the SSE
    decoder (:attr:`decoder`, built per stream) and, once built, none of what the SDK read from
    environment variables of its own (:func:`environment_dropped`)."""

    decoder: type

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[call-arg]
        environment_dropped(self)

    def _make_sse_decoder(self) -> Any:
        return self.decoder()


class HideUrlCredentials(logging.Filter):
    """Takes the user name and password out of the URLs the SDKs' HTTP client logs. httpx2 logs
    every request's URL at INFO; a ``baseUrl`` carrying ``user:password@`` would have its password
    printed on every request. A second guard (the config refuses such a ``baseUrl``). Installed on
    the ``httpx2`` logger by ``lens serve``."""

    def filter(self, record: logging.LogRecord) -> bool:
        import httpx2

        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, httpx2.URL) and a.userinfo for a in args):
            record.args = tuple(a.copy_with(userinfo=b"") if isinstance(a, httpx2.URL) else a for a in args)
        return True


def _mistyped(result: ModelResult) -> str | None:
    """What in ``result`` is not of the type its event field has, or ``None``."""
    fields: list[tuple[str, Any, bool]] = [("text", result.text, False), ("reasoning", result.reasoning, False),
                                           ("stop reason", result.stop_reason, True),
                                           ("response id", result.response_id, True)]
    for n, call in enumerate(result.tool_calls, 1):
        fields += [(f"id of tool call {n}", call.call_id, False), (f"name of tool call {n}", call.name, False),
                   (f"arguments of tool call {n}", call.arguments, False)]
    for what, value, optional in fields:
        if not isinstance(value, str) and not (optional and value is None):
            return f"the {what} {'are' if what.startswith('arguments') else 'is'} {type(value).__name__}, not text"
    return None


def _asked_address(exc: BaseException) -> str | None:
    """The address the refused request went to (scheme, host, port, path; no user part nor
    query), or None when the exception carries no request."""
    try:
        url = str(exc.response.request.url)  # type: ignore[attr-defined]
        parts = urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port is not None else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"
    except (AttributeError, RuntimeError, ValueError):
        return None


def _error_text(exc: BaseException, body: Any, err: dict[str, Any]) -> str:
    """What the server said about its error: the JSON error's message, else the body's own text
    (an HTML page from a proxy, plain text, ``{"error": "…"}``, any other JSON such as FastAPI's
    ``{"detail": …}``), whitespace collapsed; the OpenAI SDK's message for such bodies is only
    "Error code: 503"."""
    if isinstance(err.get("message"), str):
        return err["message"]
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    if isinstance(body, str) and body.strip():
        return " ".join(body.split())
    if isinstance(body, list) or (isinstance(body, dict) and body):  # (FastAPI's {"detail": …}, an error without a message)
        # (as the JSON it was, not as Python prints the parsed value: {'detail': …}, True, None)
        return " ".join(json.dumps(body, ensure_ascii=False, default=str).split())
    return str(getattr(exc, "message", exc))


Code = str  # an error code of docs/errors.md (a function returning one says so: the docs' test reads it)


def _by_status(status: int | None, etype: str, ecode: str) -> tuple[Code, bool]:
    if ecode == "insufficient_quota" or status == 402:
        return "QUOTA_EXCEEDED", False
    if status == 429 or etype == "rate_limit_error":
        return "RATE_LIMITED", True
    if status == 529 or etype == "overloaded_error":
        return "OVERLOADED", True
    if status == 403:
        return "PERMISSION_DENIED", False
    if status == 404:
        return "MODEL_NOT_FOUND", False
    if status == 408:
        return "TIMEOUT", True
    if status == 413:
        return "REQUEST_TOO_LARGE", False
    if status in (400, 422):
        return "BAD_REQUEST", False
    if status is not None and status >= 500:
        return "PROVIDER_ERROR", True
    return "PROVIDER_ERROR", status is None or status == 409





def reported(data: Mapping[str, Any] | None, *path: str) -> int | None:
    """A count at ``path`` in a usage dict as the provider sent it; ``None`` when absent or not a
    count (negative, or past 2**63 - 1: such a number cannot be recorded, and is not a count)."""
    cur: Any = data
    for p in path:
        if not isinstance(cur, Mapping) or p not in cur:
            return None
        cur = cur[p]
    if isinstance(cur, int) and not isinstance(cur, bool) and 0 <= cur <= MAX_COUNT:
        return cur
    return None


MAX_COUNT = 2**63 - 1


def usage_dict(obj: Any) -> dict[str, Any] | None:
    """An SDK usage model as the fields the provider actually sent (unset fields left out)."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return dict(obj)
    to_dict = getattr(obj, "to_dict", None)
    if to_dict is not None:
        # exclude_unset: only what came over the wire. A count of another type (`"12"`, a list)
        # is left as sent (`reported` makes it unknown) without pydantic's serializer warning,
        # which printed the server's values on stderr (and failed the answer where warnings raise).
        return to_dict(warnings=False)
    return None


def store_loader(store: Any) -> StoreImages:
    """An image loader over an :class:`~tools.artifacts.ArtifactStore` (file read off the loop,
    checked by the store: see :class:`~runtime.providers.compile.StoreImages`)."""
    return StoreImages(store)
