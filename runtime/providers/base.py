"""The provider interface the session actor drives.

``stream(request, on_delta)`` streams one model response: it calls ``on_delta`` for each piece
of text or reasoning as it arrives (for live viewers; nothing is persisted from deltas) and
returns the complete :class:`ModelResult`, which the actor records as ``model.responded``.
Failures raise :class:`ProviderError` with a stable code; the actor records ``model.failed``.
Cancellation (abort) is trio cancellation of the call; a :class:`UsageMeter` passed along is
then left holding what the provider had reported, for the caller to record.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, Mapping, Protocol

import msgspec

from events import types as t
from projections.session_state import REFUSED_STOP, Item


# The stop reason a result records for an answer cut at the model's output limit, and each
# protocol's own words for that stop: Anthropic's ``stop_reason`` (``max_tokens``, and
# ``model_context_window_exceeded``: the context window, filled by the answer, cut it the same
# way), Chat's ``finish_reason``, the Responses ``incomplete_details.reason`` of an ``incomplete``
# response. Such an answer's last tool call may have been cut while it was written (see
# runtime.decide.cut_by_provider).
OUTPUT_LIMIT = "max_tokens"
OUTPUT_LIMIT_REASONS: dict[str, frozenset[str]] = {
    "anthropic": frozenset({"max_tokens", "model_context_window_exceeded"}),
    "openai-chat": frozenset({"length", "model_length"}),  # (Mistral: the window filled as it wrote)
    "openai-responses": frozenset({"max_output_tokens"}),
}


def at_output_limit(protocol: str, reason: Any) -> bool:
    """Whether ``reason``, a stop reason as ``protocol``'s server sent it, is the output limit's
    (anything that is no text is not: a malformed stream says so where it is checked)."""
    return isinstance(reason, str) and reason in OUTPUT_LIMIT_REASONS[protocol]


# The stop reasons a result records for an answer the provider's content filter stopped where it
# was: Chat's ``finish_reason`` and a Responses ``incomplete`` response's
# ``incomplete_details.reason`` ``content_filter``, and Anthropic's ``refusal`` (its streaming
# classifiers cut the answer off mid-stream). Each is recorded as the provider said it (the
# ``refusal`` Chat and Responses record for the model's own refusal text comes without calls).
# Such an answer's last tool call may have been cut while it was written, as at the output limit.
CONTENT_FILTER = "content_filter"
REFUSAL = REFUSED_STOP  # (the projection marks such an answer's items refused)
CONTENT_FILTER_REASONS: dict[str, frozenset[str]] = {
    "anthropic": frozenset({REFUSAL}),
    "openai-chat": frozenset({CONTENT_FILTER}),
    "openai-responses": frozenset({CONTENT_FILTER}),
}


# The stop reason a result records for a Responses ``incomplete`` response whose
# ``incomplete_details.reason`` is ``max_messages``: the SDK lists it (beside
# ``max_output_tokens`` and ``content_filter``) and documents nothing of where it stops the
# answer, so nothing says the call being written when it stopped was whole: its last tool call
# is taken as cut, as at the output limit. (``steered``, the other value the SDK lists, is
# documented as a stop "at a safe output boundary" after a WebSocket ``response.steer``: the
# answer's calls are whole, and run.)
MESSAGE_LIMIT = "max_messages"
MESSAGE_LIMIT_REASONS: dict[str, frozenset[str]] = {
    "anthropic": frozenset(),
    "openai-chat": frozenset(),
    "openai-responses": frozenset({MESSAGE_LIMIT}),
}


# The stop reason a result records for a Responses ``incomplete`` response that gives no reason
# (``incomplete_details`` null, empty or left out, as a proxy may send it): like ``max_messages``
# it says nothing of where the answer stopped, so its last tool call is taken as cut.
INCOMPLETE = "incomplete"


def unsaid_incomplete(protocol: str, reason: Any) -> bool:
    """Whether ``reason`` is that of a Responses ``incomplete`` response that gave none."""
    return protocol == "openai-responses" and (reason is None or reason == "")


def cuts_answer(protocol: str, reason: Any) -> bool:
    """Whether ``reason``, a stop reason as ``protocol``'s server sent it, says the provider cut
    the answer where it was: at the output limit, by its content filter, or at its limit on
    messages (:data:`MESSAGE_LIMIT_REASONS`); for an ``incomplete`` response (Responses, the only
    protocol that reads this for one), also no reason at all (:data:`INCOMPLETE`)."""
    return at_output_limit(protocol, reason) or unsaid_incomplete(protocol, reason) or (isinstance(reason, str) and (
        reason in CONTENT_FILTER_REASONS[protocol] or reason in MESSAGE_LIMIT_REASONS[protocol]))


# The most of a refusal's ``stop_details`` a result keeps: each field's characters (the
# explanation is a sentence or two; a server that sent more has the rest cut, marked).
STOP_DETAIL_CHARS = {"type": 64, "category": 64, "explanation": 2000}


def refusal_details(details: Any) -> dict[str, str] | None:
    """What a result keeps of ``details``, a ``stop_details`` as the SDK read it (an object with
    ``type``, ``category``, ``explanation``, any of them null or missing): the fields that are
    text, each cut to :data:`STOP_DETAIL_CHARS` (an ellipsis marks a cut); ``None`` when none is."""
    if details is None:
        return None
    out: dict[str, str] = {}
    for key, limit in STOP_DETAIL_CHARS.items():
        value = details.get(key) if isinstance(details, dict) else getattr(details, key, None)
        if isinstance(value, str) and value:
            out[key] = value if len(value) <= limit else value[:limit - 1] + "\u2026"
    return out or None


@dataclass(frozen=True)
class ModelRequest:
    model: str  # the model id within its provider
    system: list[str]
    items: list[Item]  # the Working Context, in order
    tools: list[dict[str, Any]]  # {name, description, input_schema}
    thinking_level: str | None = None
    agent_id: str = "main"
    # {tool id: its further alias} for the catalog's few ids whose digest alias is another tool's
    # own name (runtime.providers.names.name_table), offered or not: a call in the history goes
    # under the name it was offered under even when neither tool is offered now (F-MOD-3).
    tool_aliases: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delta:
    kind: Literal["text", "reasoning"]
    text: str


@dataclass(frozen=True)
class ModelResult:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[t.ToolCall] = field(default_factory=list)
    stop_reason: str | None = None
    usage: t.Usage = field(default_factory=t.Usage)
    response_id: str | None = None
    # The provider's own opaque reasoning output, exactly as received, for sending back on later
    # turns: ``{"protocol": <provider protocol>, "block": <native block>}`` each — Anthropic
    # ``thinking`` (with ``signature``) / ``redacted_thinking`` (with ``data``) blocks, OpenAI
    # Responses ``reasoning`` items (``id``, ``summary``, ``encrypted_content``). Compilation sends
    # a block back only to the protocol it came from.
    reasoning_blocks: list[dict[str, Any]] = field(default_factory=list)
    # What was actually sent, for the record (``model.responded``): cache breakpoints placed,
    # tool-name aliases, synthetic results, images. Never request content or key material.
    diagnostics: dict[str, Any] = field(default_factory=dict)
    # Why the provider stopped the answer, when it says more than the stop reason: Anthropic's
    # ``stop_details`` of a ``refusal`` (``{"type", "category", "explanation"}``, each text, the
    # ones sent; see :func:`refusal_details`). ``None``: nothing more was said.
    stop_details: dict[str, str] | None = None

    def well_formed(self) -> "ModelResult":
        """This result with every lone surrogate (which no UTF-8 log or JSON stream can hold)
        replaced by U+FFFD; itself when there is none (the usual case, checked at C speed)."""
        try:
            _PROBE.encode((self.text, self.reasoning, self.tool_calls, self.reasoning_blocks, self.diagnostics,
                           self.stop_reason, self.response_id, self.stop_details))
            return self
        except UnicodeEncodeError:
            pass
        return replace(self, text=well_formed(self.text), reasoning=well_formed(self.reasoning),
                       tool_calls=well_formed(self.tool_calls), reasoning_blocks=well_formed(self.reasoning_blocks),
                       diagnostics=well_formed(self.diagnostics), stop_reason=well_formed(self.stop_reason),
                       response_id=well_formed(self.response_id), stop_details=well_formed(self.stop_details))


_PROBE = msgspec.msgpack.Encoder()


def well_formed(value: Any) -> Any:
    """``value`` (text, or lists, dicts and tool calls of it) with lone surrogates replaced by
    U+FFFD. A server can stream them (a JSON ``\\ud800`` escape, or a pair split across two
    deltas); recorded as they are, the event could not be encoded and the session crashed."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:  # a pair written as two escapes joins; a lone one is U+FFFD
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [well_formed(v) for v in value]
    if isinstance(value, dict):
        return {well_formed(k): well_formed(v) for k, v in value.items()}
    if isinstance(value, t.ToolCall):
        return t.ToolCall(well_formed(value.call_id), well_formed(value.name), well_formed(value.arguments))
    return value


class ProviderError(Exception):
    """A failed model request: ``code`` is stable (e.g. RATE_LIMITED, CONTEXT_TOO_LONG).

    ``usage``: when the provider had begun answering before the failure (a stream cut or failed
    part-way), what it had reported by then, counts it had not reported unknown; ``None`` when it
    never began (a refused request: nothing to count)."""

    def __init__(self, code: str, message: str, *, retryable: bool = False, status: int | None = None,
                 usage: t.Usage | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.status = status
        self.usage = usage

    def during(self, usage: t.Usage | None) -> "ProviderError":
        """This error with ``usage`` (what the answer begun had reported), unless it has one."""
        if self.usage is None:
            self.usage = usage
        return self


class UsageMeter:
    """What a request's provider had reported when the request was cut off by trio cancellation
    (an abort, a stop): ``usage`` stays ``None`` until the provider began answering, then holds
    the counts reported by then (the others unknown). A request the provider answered was paid
    for, cut off or not: the caller records this usage (F-CTX-5)."""

    __slots__ = ("usage",)

    def __init__(self) -> None:
        self.usage: t.Usage | None = None


class Provider(Protocol):
    id: str

    async def stream(self, request: ModelRequest, on_delta: Callable[[Delta], None],
                     meter: UsageMeter | None = None) -> ModelResult:
        ...
