"""``anthropic``: the Anthropic Messages API through ``anthropic.AsyncAnthropic`` (streaming).

Compilation (F-MOD-2): the *leading* system prompts (the request's system strings and the system
items before the first conversation item) become ``system`` blocks. A later system instruction
(a skill load, an instruction update) becomes, at its position, a user text block beginning
``Lens instruction update:`` — the API only grants ``user`` authority there. This happens only
here, every time a request is compiled (a retry compiles the same items the same way); the
persisted items keep their role and text. Tool calls are ``tool_use`` blocks, their results
``tool_result`` blocks (text and images, ``is_error``) in the next user message; a call id
outside the API's ``[A-Za-z0-9_-]`` (one another server made, before the session switched model)
is sent under its digest alias (:func:`.names.call_id_for`); consecutive
messages of one role are merged, and the conversation starts with a user message. A call's
``input`` is its arguments object; a call whose arguments were no JSON object goes back with
``{}`` (its result already says what was wrong and quotes what the model sent).

Streaming reads the SDK's raw events (``messages.create(stream=True)``), not its
``messages.stream()`` helper, which parses tool input as it arrives and fails the whole answer
on arguments that are not JSON: here a call's streamed input is joined, unparsed, and recorded
as the model sent it (the tool runner answers it with ``INVALID_ARGUMENT``).

Thinking: ``thinking_level`` low/medium/high → ``thinking: {type: enabled, budget_tokens}``
(``max_tokens`` — the model's ``maxOutputTokens``, else the provider default — grows by the
budget); thinking deltas stream as reasoning. The response's ``thinking`` (with its
``signature``) and ``redacted_thinking`` (with its ``data``) blocks are returned in
``ModelResult.reasoning_blocks`` and sent back, unchanged and first, in that assistant turn's
content on every later request (the API requires them for a turn that used tools while thinking);
blocks recorded under another protocol are left out, and so is a ``thinking`` block recorded
without a signature, which the API would refuse (``diagnostics["unsigned_thinking_blocks"]``).

Refused turns: an answer that ended with ``stop_reason: "refusal"`` (its streaming classifiers
stopped it; ``stop_details`` says why and is kept with the result) is left out of every later
request — its text, thinking, and tool calls with their results — as Anthropic asks ("you must
reset the conversation context by removing or updating the turn that was refused before
continuing"), counted in ``diagnostics["refused_turns"]``. The user input before it stays; the
log and the Full Context keep the answer as it came.
Caching: ``cache_control`` breakpoints by lookback position (see :mod:`.caching`).

A ``baseUrl`` ending in ``/v1`` is used without it (:func:`sdk_base_url`): the SDK adds
``/v1/messages`` itself, and a base URL written as the OpenAI protocols' are
(``http://127.0.0.1:8080/v1``) sent every request to ``/v1/v1/messages``.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

import trio

from events import types as t

from . import caching
from .base import (OUTPUT_LIMIT, Delta, ModelRequest, ModelResult, ProviderError, UsageMeter, at_output_limit,
                   refusal_details)
from .compile import (ANTHROPIC_IMAGES, Compiled, Entry, Image, call_input, instruction_text, native_reasoning, prepare,
                      summary_text)
from .names import describe
from .sdk import (MAX_COUNT, AnswerSize, LensClient, SdkProvider, add_piece, bom_skipped, connection_dropped, reported,
                  usage_dict)

PROTOCOL = "anthropic"
THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}
CONTINUE_TEXT = "(The conversation continues.)"
EPHEMERAL = {"type": "ephemeral"}


def _blocks(entry: Entry) -> list[dict[str, Any]]:
    """The entry's parts as content blocks. Text of white space only is left out: the API
    refuses such a block ("text content blocks must contain non-whitespace text"), and one
    recorded in the context would fail every later request of the session (a model that
    answered "\n\n" before its tool call, a command that printed a blank line). Callers put a
    placeholder where nothing is left."""
    out: list[dict[str, Any]] = []
    for p in entry.parts:
        if isinstance(p, Image):
            out.append({"type": "image", "source": {"type": "base64", "media_type": p.mime, "data": p.data}})
        elif p.text.strip():
            out.append({"type": "text", "text": p.text})
    return out


def _signed(compiled: Compiled, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded reasoning blocks that can go back: a ``thinking`` block without a signature
    (a compatible server that signs nothing; an answer cut while it thought) is left out, counted
    in ``diagnostics["unsigned_thinking_blocks"]``. The API refuses a thinking block whose
    signature is not valid, so sent with ``""`` it failed every later request of the session."""
    out = []
    for block in blocks:
        if block.get("type") == "thinking" and not block.get("signature"):
            compiled.diagnostics["unsigned_thinking_blocks"] = compiled.diagnostics.get("unsigned_thinking_blocks", 0) + 1
        else:
            out.append(block)
    return out


def render(compiled: Compiled, request: ModelRequest, *, max_tokens: int, cache: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``messages.create`` keyword arguments for ``compiled`` (``stream=True`` is added when
    sending) and the cache diagnostics."""
    names = compiled.names
    call_ids = compiled.call_ids()
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # one role per turn: merge
        else:
            messages.append({"role": role, "content": list(blocks)})

    for e in compiled.entries:
        if e.refused:  # (Anthropic: a refused turn sent again is refused again)
            if e.kind == "assistant":
                compiled.diagnostics["refused_turns"] = compiled.diagnostics.get("refused_turns", 0) + 1
            continue
        if e.kind == "system" and e.leading:
            if e.text.strip():  # (white space only is refused there too)
                system.append({"type": "text", "text": e.text})
        elif e.kind == "system":
            add("user", [{"type": "text", "text": instruction_text(e)}])
        elif e.kind == "summary":
            add("user", [{"type": "text", "text": summary_text(e)}])
        elif e.kind == "user":
            add("user", _blocks(e) or [{"type": "text", "text": "(empty)"}])
        elif e.kind == "assistant":
            # Signed thinking first, exactly as received (never marked for caching: only input
            # blocks before an assistant turn and the tail are).
            blocks = _signed(compiled, native_reasoning(compiled, e, PROTOCOL)) + _blocks(e)
            blocks += [{"type": "tool_use", "id": call_ids.wire(c.call_id), "name": names.native(c.name),
                        "input": call_input(compiled, c)} for c in e.calls]
            if all(b["type"] in ("thinking", "redacted_thinking") for b in blocks):  # (none, or thinking alone)
                blocks.append({"type": "text", "text": "(empty)"})
            add("assistant", blocks)
        elif e.kind == "result":
            content = _blocks(e) or [{"type": "text", "text": "(no output)"}]
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_ids.wire(e.call_id), "content": content}
            if e.is_error:
                block["is_error"] = True
            add("user", [block])  # right after its call's assistant turn (compile pairs them)
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUE_TEXT}]})
    tools = [{"name": names.native(tool["name"]), "description": describe(tool, names.native(tool["name"])),
              "input_schema": tool.get("input_schema") or {"type": "object", "properties": {}}} for tool in compiled.tools]
    kwargs: dict[str, Any] = {"model": request.model, "messages": messages, "max_tokens": max_tokens}
    budget = THINKING_BUDGETS.get(request.thinking_level or "")
    if budget:
        kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        kwargs["max_tokens"] = max_tokens + budget
    diagnostics: dict[str, Any] = {}
    if cache:
        sent: list[dict[str, Any]] = []
        # The tools, then the system prompt: each prefix its own entry, so a system prompt that
        # changed (an AGENTS.md edited, a skill added) still reads the tools' entry.
        if tools:
            tools[-1]["cache_control"] = dict(EPHEMERAL)
            sent.append({"where": "tools", "block": len(tools) - 1, "reason": "tools"})
        if system:
            system[-1]["cache_control"] = dict(EPHEMERAL)
            sent.append({"where": "system", "block": len(system) - 1, "reason": "system"})
        positions, tails = caching.anthropic_positions(messages)
        for pi, reason in caching.anthropic_breakpoints(len(positions), tails):
            pos = positions[pi]
            messages[pos.message]["content"][pos.block]["cache_control"] = dict(EPHEMERAL)
            sent.append({"where": "messages", "position": pi, "message": pos.message, "block": pos.block, "reason": reason})
        diagnostics = {"scheme": "anthropic", "lookback": caching.ANTHROPIC_LOOKBACK, "positions": len(positions),
                       "breakpoints": sent}
    if system:
        kwargs["system"] = system
    if tools:
        kwargs["tools"] = tools
    return kwargs, diagnostics


class AnthropicProvider(SdkProvider):
    protocol = PROTOCOL

    def _make_client(self) -> Any:
        return self._sdk_client(_client_class(), "https://api.anthropic.com", sdk_base_url(self.base_url))

    async def stream(self, request: ModelRequest, on_delta: Callable[[Delta], None],
                     meter: UsageMeter | None = None) -> ModelResult:
        """Stream one message. Raises :class:`ProviderError`; trio cancellation closes the stream."""
        await self.sdk_import.ready()  # (in a worker thread: the loop runs meanwhile)
        import anthropic

        model = self.model_config(request.model)
        compiled = await prepare(request, load_image=self.load_image, images=model.images, limits=ANTHROPIC_IMAGES)
        kwargs, cache = render(compiled, request, max_tokens=model.max_output_tokens or self.max_output_tokens)
        reader = _StreamReader(on_delta, self.answer_size())
        try:
            async with reader.size.reading(await self.client().messages.create(**kwargs, stream=True)) as stream:
                try:
                    async for ev in stream:
                        reader.feed(ev)
                        if reader.stopped:
                            break  # (what comes after is no part of it, and a server that kept sending held the session)
                except Exception as exc:
                    if reader.stop_reason is None or not connection_dropped(exc):
                        raise  # (dropped after the message_delta that gave its stop_reason, the answer is whole: kept)
            if reader.stop_reason is None and reader.delta_came:  # (it came, saying none)
                raise self.malformed(ValueError("the message_delta's stop_reason is null"))
            if reader.stop_reason is None:  # no message_delta / message_stop: cut short
                raise self.truncated("its stop_reason", reader.size)
            return self.checked(self._result(reader, compiled, cache))
        except trio.Cancelled:  # (an abort, a stop): what was reported by then is the caller's to record
            if meter is not None:
                meter.usage = reader.usage_so_far()
            raise
        except ProviderError as exc:
            raise exc.during(reader.usage_so_far())
        except Exception as exc:  # (see SdkProvider.failed)
            raise self.failed(exc, anthropic.APIError).during(reader.usage_so_far()) from None

    def _result(self, msg: "_StreamReader", compiled: Compiled, cache: dict[str, Any]) -> ModelResult:
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[t.ToolCall] = []
        native: list[dict[str, Any]] = []
        for block in msg.blocks():
            kind = block["type"]
            if kind == "text":
                text.append("".join(block["text"]))
            elif kind == "thinking":
                thinking = "".join(block["thinking"])
                reasoning.append(thinking)
                native.append({"protocol": self.protocol, "block": {
                    "type": "thinking", "thinking": thinking, "signature": block["signature"]}})
            elif kind == "redacted_thinking":
                native.append({"protocol": self.protocol, "block": {"type": "redacted_thinking", "data": block["data"]}})
            elif kind == "tool_use":
                # The arguments exactly as the model streamed them, JSON or not: the tool runner
                # answers arguments that are no JSON object with INVALID_ARGUMENT, and later
                # requests send such a call with an empty input (see compile.call_input).
                args = "".join(block["json"]) or json.dumps(block["input"] if block["input"] is not None else {})
                calls.append(t.ToolCall(block["id"], compiled.names.internal(block["name"]), args))
        usage = _usage(msg.usage)
        diagnostics = self.diagnostics(compiled, cache)
        # (stop_reason tool_use without a tool_use block is kept as it came, as Chat keeps
        # finish_reason tool_calls without a call: an answer without a call, which ends the task)
        stop = OUTPUT_LIMIT if at_output_limit(PROTOCOL, msg.stop_reason) else msg.stop_reason
        # (each block a paragraph: see _StreamReader.paragraph)
        return ModelResult(text=paragraphs(text), reasoning=paragraphs(reasoning), tool_calls=calls,
                           stop_reason=stop, usage=usage, response_id=msg.id,
                           reasoning_blocks=native, diagnostics=diagnostics, stop_details=msg.stop_details)


def _usage(u: dict[str, Any]) -> t.Usage:
    input_tokens = reported(u, "input_tokens")
    cache_read = reported(u, "cache_read_input_tokens")
    cache_write = reported(u, "cache_creation_input_tokens")
    return t.Usage(
        input_tokens=input_tokens,
        output_tokens=reported(u, "output_tokens"),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reported(u, "output_tokens_details", "thinking_tokens"),
        total_input_tokens=_total_input(input_tokens, cache_read, cache_write),
    )


def _total_input(input_tokens: int | None, cache_read: int | None, cache_write: int | None) -> int | None:
    """Every input token of the request, cached or not (Anthropic's ``input_tokens`` excludes
    cache reads and writes): unknown unless all three were reported. The SDK types both cache
    counts as optional (``None`` when not sent) and nothing gives an absent or null one the
    meaning 0, so a missing one leaves the total unknown, as any unreported count is; a sum past
    what a count can be is no count either."""
    if input_tokens is None or cache_read is None or cache_write is None:
        return None
    total = input_tokens + cache_read + cache_write
    return total if total <= MAX_COUNT else None


PARAGRAPH = "\n\n"  # between two text (or thinking) blocks of one answer


def paragraphs(blocks: list[str]) -> str:
    """The texts of an answer's blocks of one kind as one text: after a block that had more than
    white space, a block's first character that is not white space begins a new paragraph (the
    separator goes right before it); a block of white space only is kept as it is, with none (as
    :meth:`_StreamReader.paragraph` streamed it)."""
    out: list[str] = []
    visible = False
    for text in blocks:
        at = _first_shown(text)
        if at is None:
            out.append(text)
            continue
        out.append(text[:at] + PARAGRAPH + text[at:] if visible else text)
        visible = True
    return "".join(out)


def _first_shown(text: str) -> int | None:
    """Where ``text``'s first character that is not white space is (``None``: there is none)."""
    stripped = len(text) - len(text.lstrip())
    return stripped if stripped < len(text) else None


class _StreamReader:
    """Puts one streamed message together from the SDK's raw events
    (``messages.create(stream=True)``), as the SDK's ``messages.stream()`` helper does, except for
    tool input: the helper parses each ``input_json_delta`` as it arrives and fails the whole
    answer on arguments that are not JSON; here the pieces are only joined, and the text is the
    call's arguments as the model sent it. Live text and thinking go to ``on_delta`` as they come.

    A delta for a block that never started is a malformed stream, as it was for the helper;
    events before ``message_start`` are skipped, as the helper skips them, and so are events after
    ``message_stop`` (deltas a server sent after it were added to the answer). A ``message_start`` or
    ``message_delta`` without ``usage`` (which the helper's accumulator could not take) leaves the
    counts it would have given unknown."""

    def __init__(self, on_delta: Callable[[Delta], None], size: AnswerSize) -> None:
        self.on_delta = on_delta
        self.size = size  # (the answer's bytes so far, bounded)
        self.id: str | None = None
        self.started = False
        self.stop_reason: str | None = None
        self.stop_details: dict[str, str] | None = None  # (a refusal's category and explanation)
        self.stopped = False  # message_stop came
        self.delta_came = False  # a message_delta came
        self.usage: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._visible: set[str] = set()  # the kinds ("text", "reasoning") of which more than white space streamed

    def blocks(self) -> list[dict[str, Any]]:
        return [self._blocks[i] for i in sorted(self._blocks)]

    def usage_so_far(self) -> t.Usage | None:
        """What the message had reported when it failed: ``message_start``'s input and cache
        counts (its ``output_tokens`` is a placeholder: unknown until a ``message_delta``);
        ``None`` before ``message_start`` (the request was not answered at all)."""
        if not self.started:
            return None
        if self.stop_reason is None:
            return _usage({**self.usage, **dict.fromkeys(_OUTPUT_COUNTS)})
        return _usage(self.usage)

    def feed(self, ev: Any) -> None:
        kind = ev.type
        if self.stopped:
            return  # (the message is complete: what a server sends after it is no part of it)
        if kind == "message_stop":
            self.stopped = self.started
            return
        if kind == "message_start":
            self.started = True
            self.id = getattr(ev.message, "id", None)
            self.usage = dict(usage_dict(ev.message.usage) or {})
            return
        if kind not in _MESSAGE_EVENTS or not self.started:
            return  # (ping, kinds added later, anything before message_start: skipped, as by the helper)
        if kind == "content_block_start":
            cb = ev.content_block
            block: dict[str, Any] = {"type": cb.type}
            if cb.type == "text":
                block["text"] = [cb.text or ""]
                self.size.add(cb.text)
            elif cb.type == "thinking":
                block["thinking"] = [cb.thinking or ""]
                block["signature"] = cb.signature or ""
                self.size.add(cb.thinking)
            elif cb.type == "redacted_thinking":
                block["data"] = cb.data
                self.size.add(cb.data)
            elif cb.type == "tool_use":
                block.update(id=cb.id, name=cb.name, input=getattr(cb, "input", None), json=[])
            self._blocks[ev.index] = block
        elif kind == "content_block_delta":
            block = self._blocks.get(ev.index)
            if block is None:
                raise IndexError(f"a content_block_delta for block {ev.index}, which never started")
            delta = ev.delta
            # (an empty delta is none: kept or streamed live, a server that sent them for
            # timeoutSeconds gave every viewer a frame for each)
            if delta.type == "text_delta" and block["type"] == "text":
                if _text(delta.text, "text_delta.text"):
                    add_piece(block["text"], delta.text)
                    self.size.add(delta.text)
                    self.on_delta(Delta("text", self.paragraph(block, "text", delta.text)))
            elif delta.type == "thinking_delta" and block["type"] == "thinking":
                if _text(delta.thinking, "thinking_delta.thinking"):
                    add_piece(block["thinking"], delta.thinking)
                    self.size.add(delta.thinking)
                    self.on_delta(Delta("reasoning", self.paragraph(block, "reasoning", delta.thinking)))
            elif delta.type == "signature_delta" and block["type"] == "thinking":
                block["signature"] = _text(delta.signature, "signature_delta.signature")  # (sent back as is)
            elif delta.type == "input_json_delta" and block["type"] == "tool_use":
                if _text(delta.partial_json, "input_json_delta.partial_json"):
                    add_piece(block["json"], delta.partial_json)
                    self.size.add(delta.partial_json)
        elif kind == "message_delta":
            self.delta_came = True
            self.stop_reason = ev.delta.stop_reason
            self.stop_details = refusal_details(getattr(ev.delta, "stop_details", None))
            # Counts on a message_delta are running totals: they replace what message_start said;
            # a count left out keeps its earlier value, except the output counts (message_start's
            # output_tokens and output_tokens_details are placeholders: the API sends the totals
            # here, and one left out is unknown).
            counts = usage_dict(ev.usage) or {}
            for key in _OUTPUT_COUNTS:
                self.usage[key] = counts.get(key)
            for key, value in counts.items():
                if value is not None:
                    self.usage[key] = value

    def paragraph(self, block: dict[str, Any], kind: str, piece: str) -> str:
        """``piece`` of a text or thinking block as it streams live: with a new paragraph right
        before its first character that is not white space, when that is the block's first such
        character and an earlier block of that kind streamed more than white space. An answer's
        text (or thinking) is one string, its blocks joined so (with interleaved thinking, text
        comes in several blocks; text can follow a ``tool_use``); joined with nothing, the last
        word of one block ran into the first of the next. A block of white space only begins no
        paragraph. The separator is no part of a block (a thinking block goes back as signed),
        only of the joined text, live as recorded (:func:`paragraphs`)."""
        at = None if block.get("shown") else _first_shown(piece)
        if at is None:
            return piece
        block["shown"] = True
        if kind not in self._visible:
            self._visible.add(kind)
            return piece
        self.size.add(PARAGRAPH)
        return piece[:at] + PARAGRAPH + piece[at:]


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is {type(value).__name__}, not text")
    return value


# The usage keys whose message_start values are placeholders until a message_delta reports them.
_OUTPUT_COUNTS = ("output_tokens", "output_tokens_details")

_MESSAGE_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                             "message_stop"})


# The longest Retry-After the client waits for before retrying; a longer one ends the request
# (RATE_LIMITED, retryable) instead. The Anthropic SDK honours any value (up to ~50 days), which
# held a session "running" for as long; the OpenAI SDK stops past two minutes, as this does.
MAX_RETRY_AFTER = 120.0


def named_by_type(sse: Any) -> Any:
    """An SSE frame without an event name (none, or the standard's default ``message``) named by
    its data's ``type``, which every event of the Messages stream carries. The SDK reads an
    event's kind from its ``event:`` line alone and skips a frame without one; proxies that pass
    the stream on with its ``data:`` lines only had every frame skipped, and the answer failed
    as cut short ("the stream ended before its stop_reason"). A frame named ``message`` the SDK
    yields by its data, but raises the stream's error only for a frame named ``error``: renamed,
    an ``error`` event so sent fails the answer with its own code. Any other frame is as it came."""
    if sse is None or sse.event not in (None, "", "message") or not sse.data:
        return sse
    try:
        data = json.loads(sse.data)
    except ValueError:
        return sse
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str) or not kind:
        return sse
    kept = {"raw": sse.raw} if hasattr(sse, "raw") else {}  # (the lines it was read from, where the SDK keeps them)
    return type(sse)(event=kind, data=sse.data, id=sse.id, retry=sse.retry, **kept)


@functools.cache
def _client_class() -> type:
    import anthropic
    from anthropic._streaming import SSEDecoder

    class Decoder(bom_skipped(SSEDecoder)):  # type: ignore[misc]
        def decode(self, line: str) -> Any:
            return named_by_type(super().decode(line))

    class Client(LensClient, anthropic.AsyncAnthropic):
        decoder = Decoder

        def _parse_retry_after_header(self, response_headers: Any = None) -> float | None:
            # A date no clock can hold (a year of twenty digits) made the SDK raise
            # OverflowError out of the request: a 429 failed as an exception no error names
            # (PROVIDER_ERROR, not retryable). Unreadable, it is no Retry-After, as the OpenAI
            # SDK reads it: the client's own backoff applies.
            try:
                return super()._parse_retry_after_header(response_headers)
            except (TypeError, ValueError, OverflowError, OSError):
                return None

        def _should_retry(self, response: Any) -> bool:
            wait = self._parse_retry_after_header(response.headers)
            if wait is not None and wait > MAX_RETRY_AFTER:
                return False
            return bool(super()._should_retry(response))

    return Client


def sdk_base_url(base_url: str | None) -> str | None:
    """``base_url`` without a last path segment ``v1`` (and its slash), as the Anthropic SDK
    wants it: it appends ``/v1/messages``. ``None`` stays ``None`` (the public API)."""
    if base_url is None:
        return None
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path != "/v1" and not path.endswith("/v1"):
        return base_url
    return urlunsplit(parts._replace(path=path[:-3]))
