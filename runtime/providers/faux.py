"""``faux``: a scripted, deterministic provider for tests and demos.

Which scripted turn answers a request is a pure function of the request: the first turn whose
``when`` text occurs in the last user/tool message, else the turn at index = the number of
assistant responses already in the agent's context. So a session replayed after a crash gets
the same answers. With no matching turn the default is deterministic too: a message starting
``/tool NAME {json}`` calls that tool once; anything else is answered by a short echo.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Annotated, Any, Callable, Literal

import msgspec
import trio

from events import types as t

from ..key_hints import refused_key_hint
from .base import Delta, ModelRequest, ModelResult, ProviderError, UsageMeter, refusal_details

REQUESTS_KEPT = 1000  # FauxProvider.requests keeps the latest this many
MAX_DELAY_MS = 86_400_000  # a scripted delay: at most a day
WORD_SLICE = 64 * 1024  # characters split at a time when the request's words are counted
# A request (or a scripted answer) of at most this many characters has its words counted on the
# loop (a millisecond or two; a worker thread would let a test's autojump clock move meanwhile), a
# larger one in a thread.
WORDS_ON_LOOP_CHARS = 256 * 1024


class FauxToolCall(msgspec.Struct, frozen=True, rename="camel"):
    name: str
    arguments: Any = {}
    # The provider's id for the call (default: unique per response). Scripts set one to play a
    # provider that numbers its calls afresh in every response (`call_0`).
    call_id: str | None = None


# The codes a provider's failure has (docs/providers.md, docs/errors.md): a scripted failure is
# one of them, so every model.failed carries a code a client knows (ABORTED is the user's, not a
# provider's).
FauxErrorCode = Literal["AUTH_FAILED", "PERMISSION_DENIED", "MODEL_NOT_FOUND", "CONTEXT_TOO_LONG",
                        "REQUEST_TOO_LARGE", "BAD_REQUEST", "QUOTA_EXCEEDED", "RATE_LIMITED", "OVERLOADED",
                        "TIMEOUT", "CONNECTION_FAILED", "PROVIDER_ERROR", "RESPONSE_NOT_RECORDED",
                        "ARTIFACT_CORRUPT", "ARTIFACT_NOT_FOUND", "CACHE_TTL_UNSUPPORTED", "TOOL_NAME_COLLISION"]


class FauxError(msgspec.Struct, frozen=True, rename="camel"):
    code: FauxErrorCode = "PROVIDER_ERROR"
    message: str = "scripted failure"
    retryable: bool = False


class FauxStopDetails(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    type: str | None = None
    category: str | None = None
    explanation: str | None = None


class FauxTurn(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """One scripted response; ``chunks`` (if given) are streamed one delta each. ``error``: the
    request fails with it — at once, or, when the turn has text (``text`` or ``chunks``), after
    that text streamed (a stream that fails part-way)."""

    when: str | None = None
    text: str = ""
    chunks: list[str] | None = None
    reasoning: str = ""
    tool_calls: list[FauxToolCall] = []
    error: FauxError | None = None
    # The answer stops as a provider that cut it says (at the output limit, by its content filter,
    # at a Responses limit on messages; its last call is then not run); left out: ``tool_use``
    # with calls, else ``end_turn``.
    stop_reason: Literal["max_tokens", "content_filter", "refusal", "max_messages"] | None = None
    # Why a ``refusal`` was refused, as Anthropic's ``stop_details`` says it (``type``,
    # ``category``, ``explanation``; kept as a provider's are: text fields only, bounded).
    stop_details: FauxStopDetails | None = None
    delay_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_DELAY_MS)] = 0  # before the first delta
    chunk_delay_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_DELAY_MS)] = 0  # between deltas
    # Left out: the answer reports word counts (of the request's items, of the answer's text);
    # null: it reports none, as a provider that leaves a count out (F-CTX-5: it stays unknown).
    input_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None | msgspec.UnsetType = msgspec.UNSET
    output_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None | msgspec.UnsetType = msgspec.UNSET
    # Reported only when scripted (None: the answer does not report the count).
    cache_read_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    cache_write_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    reasoning_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    # Every input token, cached or not. Left out: the input count (the faux counts the words of
    # the whole request, so its input count is already the total, as OpenAI's is; scripted cache
    # counts are free numbers, not a part it measured, and are not added); null: it reports none.
    # Not checked against the other counts (a script may give any, as a test needs).
    total_input_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.stop_details is not None and self.stop_reason != "refusal":
            said = f"stopReason {self.stop_reason!r}" if self.stop_reason is not None else "no stopReason"
            raise ValueError(f"stopDetails says why a refusal was refused, and this turn has {said}: "
                             "give stopReason 'refusal' with it, or leave stopDetails out")


def _last_message(request: ModelRequest) -> str:
    for it in reversed(request.items):
        if it.role in ("user", "tool_result"):
            return it.text
    return ""


class FauxProvider:
    def __init__(self, id: str = "faux", script: list[FauxTurn] | None = None, *,
                 keep_requests: int = REQUESTS_KEPT) -> None:
        self.id = id
        self.script = list(script or [])
        # What was asked, for tests: the latest ``keep_requests`` only (indexable, len, iterable,
        # ``clear()``). The daemon's faux providers keep none (see build_catalog): a request holds
        # its agent's whole Working Context, so kept requests pinned the items of every session
        # long after its actor passivated — a copy per wake-up.
        self.requests: deque[ModelRequest] = deque(maxlen=keep_requests)

    @classmethod
    def from_config(cls, id: str, script: Any, *, keep_requests: int = REQUESTS_KEPT) -> "FauxProvider":
        """From config JSON (camelCase keys: ``toolCalls``, ``delayMs`` …). Raises
        :class:`ValueError` naming what in ``script`` is wrong."""
        try:
            return cls(id, msgspec.convert(script or [], list[FauxTurn]), keep_requests=keep_requests)
        except msgspec.ValidationError as exc:
            hint = refused_key_hint(list[FauxTurn], str(exc))
            raise ValueError(f"provider {id!r}: script: {str(exc).replace('$', 'script', 1)}{hint}") from None

    def pick(self, request: ModelRequest) -> FauxTurn:
        last = _last_message(request)
        for turn in self.script:
            if turn.when is not None and turn.when in last:
                return turn
        ordered = [turn for turn in self.script if turn.when is None]
        index = _responses_so_far(request)
        if index < len(ordered):
            return ordered[index]
        return self._default(request)

    @staticmethod
    def _default(request: ModelRequest) -> FauxTurn:
        last = request.items[-1] if request.items else None
        if last is not None and last.role == "user" and last.text.startswith("/tool "):
            name, _, rest = last.text[len("/tool "):].partition(" ")
            try:
                args = json.loads(rest) if rest.strip() else {}
            except json.JSONDecodeError:
                args = rest
            return FauxTurn(tool_calls=[FauxToolCall(name, args)])
        if last is not None and last.role == "tool_result":
            return FauxTurn(text=f"The tool answered: {last.text[:500]}")
        prompt = last.text if last is not None else ""
        return FauxTurn(text=f"(faux) You said: {prompt[:500]}")

    async def stream(self, request: ModelRequest, on_delta: Callable[[Delta], None],
                     meter: UsageMeter | None = None) -> ModelResult:
        self.requests.append(request)
        turn = self.pick(request)
        if turn.delay_ms:
            await trio.sleep(turn.delay_ms / 1000)
        chunks = turn.chunks if turn.chunks is not None else ([turn.text] if turn.text else [])
        if turn.error is not None and not chunks:
            raise ProviderError(turn.error.code, turn.error.message, retryable=turn.error.retryable)
        input_tokens = turn.input_tokens
        if input_tokens is msgspec.UNSET:
            input_tokens = await counted_words([it.text for it in request.items])
        # It has begun answering: the input counts are known from here on, the output's at the
        # end (as an Anthropic ``message_start`` reports them); an answer cut off between its
        # chunks, or failing after them, leaves these.
        total_input = input_tokens if turn.total_input_tokens is msgspec.UNSET else turn.total_input_tokens
        begun = t.Usage(input_tokens=input_tokens, cache_read_tokens=turn.cache_read_tokens,
                        cache_write_tokens=turn.cache_write_tokens, total_input_tokens=total_input)
        if meter is not None:
            meter.usage = begun
        if turn.reasoning:
            on_delta(Delta("reasoning", turn.reasoning))
        for i, chunk in enumerate(chunks):
            if i and turn.chunk_delay_ms:
                await trio.sleep(turn.chunk_delay_ms / 1000)
            elif i:
                # The loop runs between two chunks, as it does while a real provider awaits the
                # network (a script of thousands held it for the whole answer). No cancellation
                # lands here: a scripted answer without delays streams whole, as it always did.
                await trio.lowlevel.cancel_shielded_checkpoint()
            on_delta(Delta("text", chunk))
        if turn.error is not None:  # (a stream that fails part-way: its text streamed, then the error)
            raise ProviderError(turn.error.code, turn.error.message, retryable=turn.error.retryable, usage=begun)
        n = _responses_so_far(request)
        calls = [
            t.ToolCall(
                c.call_id or f"call_{request.agent_id}_{n}_{i}",
                c.name,
                c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
            )
            for i, c in enumerate(turn.tool_calls)
        ]
        text = "".join(chunks)
        output_tokens = turn.output_tokens
        if output_tokens is msgspec.UNSET:
            output_tokens = await counted_words([text])
        return ModelResult(
            text=text,
            reasoning=turn.reasoning,
            tool_calls=calls,
            stop_reason=turn.stop_reason or ("tool_use" if calls else "end_turn"),
            stop_details=refusal_details(turn.stop_details) if turn.stop_reason == "refusal" else None,
            usage=t.Usage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=turn.cache_read_tokens,
                cache_write_tokens=turn.cache_write_tokens,
                reasoning_tokens=turn.reasoning_tokens,
                total_input_tokens=total_input,
            ),
        )


def words(text: str, slice_chars: int = WORD_SLICE) -> int:
    """``len(text.split())``, split ``slice_chars`` characters at a time: a word cut by a
    slice's end is counted once."""
    n = 0
    open_word = False  # (the slice before ended inside a word)
    for at in range(0, len(text), slice_chars):
        part = text[at:at + slice_chars]
        n += len(part.split()) - (open_word and not part[0].isspace())
        open_word = not part[-1].isspace()
    return n


async def counted_words(texts: list[str]) -> int:
    """The words of ``texts`` (a request's items: the faux usage's input tokens; an answer: its
    output tokens). Up to :data:`WORDS_ON_LOOP_CHARS` characters on the loop; more in a worker
    thread, a slice at a time: one ``split`` holds the interpreter's lock for the whole of its
    string (the words of an 8 MB input took 0.7 s, and each later request of the session counts
    them again), so the event loop runs between two slices. Shielded: an answer that streamed
    whole is not cut here."""
    if sum(map(len, texts)) <= WORDS_ON_LOOP_CHARS:
        return sum(words(text) for text in texts)
    with trio.CancelScope(shield=True):
        return await trio.to_thread.run_sync(lambda: sum(words(text) for text in texts))


def _responses_so_far(request: ModelRequest) -> int:
    """How many model responses the agent's context already holds (one per event seq)."""
    return len({it.seq for it in request.items if it.role in ("assistant", "tool_call")})
