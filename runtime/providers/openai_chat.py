"""``openai-chat``: OpenAI-compatible Chat Completions (any ``baseUrl``: OpenAI, vLLM, Ollama,
DeepSeek…) through ``openai.AsyncOpenAI``, streaming with ``stream_options.include_usage``.

Compilation keeps message order: system items are ``system`` messages at their position; an
assistant response is one message with its text and ``tool_calls``, followed by one ``tool``
message per call (an id past 40 characters, which OpenAI refuses, under its alias:
:func:`.names.chat_call_id_for`). Chat tool messages carry text only, so images a tool returned
follow the tool messages of that response in one ``user`` message that names the call. Content is sent as a plain
string unless it needs parts (images, a cache breakpoint), which suits the most servers.

The stream is read raw (not through the SDK's ``chat.completions.stream`` helper) so that
compatible servers' variations are tolerated: tool-call fragments are joined by ``index``, and
by the call's id where the index is missing or reused (see :func:`_tool_call_delta`); a
``reasoning_content`` / ``reasoning`` delta field (DeepSeek, vLLM, Ollama) is reasoning.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import trio

from events import types as t

from . import caching
from .base import OUTPUT_LIMIT, REFUSAL, Delta, ModelRequest, ModelResult, ProviderError, UsageMeter, at_output_limit
from .compile import OPENAI_IMAGES, Compiled, Entry, Image, call_arguments, prepare, request_tails, summary_text
from .names import describe
from .sdk import (MALFORMED, OPENAI_BASE_URL, SdkProvider, add_piece, connection_dropped, log, openai_client_class, reported,
                  usage_dict)

REASONING_EFFORTS = {"minimal", "low", "medium", "high"}
OPENAI_HOST = "api.openai.com"


def max_tokens_key(base_url: str | None) -> str:
    """OpenAI's own API wants ``max_completion_tokens`` (its reasoning models refuse
    ``max_tokens``); compatible servers (vLLM, Ollama, llama.cpp, DeepSeek…) know ``max_tokens``."""
    return "max_completion_tokens" if base_url is None or OPENAI_HOST in base_url else "max_tokens"


def _parts(entry: Entry, text: str | None = None) -> list[dict[str, Any]]:
    if text is not None:
        return [{"type": "text", "text": text}]
    out: list[dict[str, Any]] = []
    for p in entry.parts:
        if isinstance(p, Image):
            out.append({"type": "image_url", "image_url": {"url": p.data_url}})
        elif p.text:
            out.append({"type": "text", "text": p.text})
    return out or [{"type": "text", "text": "(empty)"}]


def _simplify(message: dict[str, Any]) -> None:
    """A single unmarked text part travels as a plain string (what every server accepts)."""
    content = message.get("content")
    if isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text" \
            and "prompt_cache_breakpoint" not in content[0]:
        message["content"] = content[0]["text"]


def render(compiled: Compiled, request: ModelRequest, *, explicit_cache: bool, ttl: str,
           max_output_tokens: int | None = None, max_tokens_key: str = "max_tokens") -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``chat.completions.create`` keyword arguments and the cache diagnostics.

    Chat Completions has no field for provider-native reasoning blocks: none are sent back."""
    names = compiled.names
    call_ids = compiled.call_ids(chat=True)
    messages: list[dict[str, Any]] = []
    marks: list[tuple[caching.Candidate, dict[str, Any]]] = []  # (candidate, the part to mark)
    # tool-result images (result entry index, call id, images), sent after the tool messages
    pending_images: list[tuple[int, str, list[Image]]] = []

    def flush_images() -> None:
        if not pending_images:
            return
        content: list[dict[str, Any]] = []
        for _ei, call_id, imgs in pending_images:
            content.append({"type": "text", "text": f"Images returned by tool call {call_id}:"})
            content.extend({"type": "image_url", "image_url": {"url": i.data_url}} for i in imgs)
        messages.append({"role": "user", "content": content})
        # This message comes after the batch's tool messages: its last image is the last input
        # block of that batch (a request's tail, when the batch ends it). Candidates are in block
        # order, so it is chosen over the tool messages' text before it.
        marks.append((caching.Candidate(pending_images[-1][0]), content[-1]))
        pending_images.clear()

    for ei, e in enumerate(compiled.entries):
        if e.kind != "result":
            flush_images()
        if e.kind in ("system", "user", "summary"):
            role = "system" if e.kind == "system" else "user"
            content = _parts(e, summary_text(e) if e.kind == "summary" else (e.text if e.kind == "system" else None))
            messages.append({"role": role, "content": content})
            marks.append((caching.Candidate(ei, e.kind == "system" and e.leading), content[-1]))
        elif e.kind == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": e.text or None}
            if e.calls:
                msg["tool_calls"] = [{"id": call_ids.wire(c.call_id), "type": "function",
                                      "function": {"name": names.native(c.name), "arguments": call_arguments(compiled, c)}}
                                     for c in e.calls]
            messages.append(msg)
        elif e.kind == "result":
            images = [p for p in e.parts if isinstance(p, Image)]
            text = e.text or ("(no output; images follow)" if images else "(no output)")
            content = [{"type": "text", "text": text}]
            messages.append({"role": "tool", "tool_call_id": call_ids.wire(e.call_id), "content": content})
            marks.append((caching.Candidate(ei), content[-1]))
            if images:
                pending_images.append((ei, call_ids.wire(e.call_id), images))
    flush_images()
    diagnostics: dict[str, Any] = {}
    kwargs: dict[str, Any] = {"model": request.model, "messages": messages, "stream": True,
                              "stream_options": {"include_usage": True}}
    if explicit_cache:
        caching.check_openai_ttl(ttl)
        kwargs["prompt_cache_options"] = caching.openai_request_options()
        sent = []
        for ci, reason in caching.openai_breakpoints([c for c, _ in marks], request_tails(compiled.entries)):
            cand, part = marks[ci]
            part["prompt_cache_breakpoint"] = caching.openai_breakpoint(ttl)
            entry = compiled.entries[cand.entry]
            sent.append({"entry": cand.entry, "kind": entry.kind, "item_ids": entry.item_ids, "reason": reason, "ttl": ttl})
        diagnostics = {"scheme": "openai-explicit", "request_ttl": caching.OPENAI_REQUEST_TTL, "breakpoints": sent}
    for m in messages:
        _simplify(m)
    if compiled.tools:
        kwargs["tools"] = [{"type": "function", "function": {
            "name": names.native(tool["name"]), "description": describe(tool, names.native(tool["name"])),
            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}} for tool in compiled.tools]
    if request.thinking_level in REASONING_EFFORTS:
        kwargs["reasoning_effort"] = request.thinking_level
    if max_output_tokens is not None:
        kwargs[max_tokens_key] = max_output_tokens
    return kwargs, diagnostics


class OpenAIChatProvider(SdkProvider):
    protocol = "openai-chat"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The models (ids as sent) whose server refused ``stream_options`` once: their requests
        # go without them. One provider (a gateway) may front many models, each refusing on its own.
        self._stream_options_refused: set[str] = set()
        # The models whose server refused a turn right after tool results once: their requests bridge it.
        self._bridges_tool_turns: set[str] = set()

    def _make_client(self) -> Any:
        return self._sdk_client(openai_client_class(chat=True), OPENAI_BASE_URL)

    async def _create(self, kwargs: dict[str, Any]) -> Any:
        """The stream of ``kwargs``' request, as this provider's server takes it. Two refusals
        of compatible servers are answered by asking the same request again at once, changed, and
        every later request of that model (the ``model`` sent: one provider may front many, each
        refusing on its own) is sent so, once the changed request was not refused again (each
        is said once in the log):

        - ``stream_options`` refused (Mistral's API answers 422 ``extra_forbidden`` naming them):
          sent without them; the usage the server sends all the same is read, and a count it
          does not send stays unknown (F-CTX-5).
        - A turn right after tool results refused (Mistral's "Unexpected role 'user' after role
          'tool'"): a short assistant turn is put between the results and a ``user`` or
          ``system`` message that follows them (:func:`_bridged`); what is recorded is unchanged.

        Each change is made at most once a request (a changed request refused for the other
        reason gets the other change too). A changed request refused otherwise raises that
        refusal and marks the model for neither change: the first refusal named the field, or
        the order, only in words it echoed. Any other refusal is raised as it came."""
        import openai

        model = kwargs["model"]
        without_options = model in self._stream_options_refused
        bridged = model in self._bridges_tool_turns  # (this request's: another request may mark the model meanwhile)
        while True:
            sent = kwargs
            if without_options:
                sent = {k: v for k, v in sent.items() if k != "stream_options"}
            if bridged:
                sent = {**sent, "messages": _bridged(sent["messages"])}
            try:
                stream = await self.client().chat.completions.create(**sent)
            except openai.APIStatusError as exc:
                if exc.status_code not in (400, 422):
                    raise
                said = _Refusal(exc)
                if "stream_options" in sent and said.names("stream_options"):
                    without_options = True
                elif not bridged and said.says(_AFTER_TOOL) and _bridged(sent["messages"]) is not sent["messages"]:
                    bridged = True
                else:
                    raise
                continue
            # (marked only now: a change whose retry was refused all the same was no answer to the refusal)
            if without_options and model not in self._stream_options_refused:
                self._stream_options_refused.add(model)
                log.info("provider %r refused stream_options for model %r; its requests go without them "
                         "from now on", self.id, model)
            if bridged and model not in self._bridges_tool_turns:
                self._bridges_tool_turns.add(model)
                log.info("provider %r refused a turn right after tool results for model %r; its requests "
                         "put an assistant turn there from now on", self.id, model)
            return stream

    async def stream(self, request: ModelRequest, on_delta: Callable[[Delta], None],
                     meter: UsageMeter | None = None) -> ModelResult:
        """Stream one completion. Raises :class:`ProviderError`; trio cancellation closes the stream."""
        await self.sdk_import.ready()  # (in a worker thread: the loop runs meanwhile)
        import openai

        model = self.model_config(request.model)
        compiled = await prepare(request, load_image=self.load_image, images=model.images, limits=OPENAI_IMAGES)
        kwargs, cache = render(compiled, request, explicit_cache=model.explicit_cache,
                               ttl=getattr(model, "cache_ttl", None) or self.cache_ttl,
                               max_output_tokens=model.max_output_tokens, max_tokens_key=max_tokens_key(self.base_url))
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        by_index: dict[int, int] = {}  # the server's tool-call index -> its call in ``calls``
        by_id: dict[str, int] = {}  # a call's id -> its call in ``calls``
        finish: str | None = None
        refused = False
        usage_raw: dict[str, Any] | None = None
        response_id: str | None = None
        began = False  # a chunk came: a failure from here on records what usage was reported (or unknown)
        size = self.answer_size()
        try:
            stream = await self._create(kwargs)
            async with size.reading(stream):
                try:
                    async for chunk in stream:
                        began = True
                        response_id = response_id or getattr(chunk, "id", None)
                        if getattr(chunk, "usage", None) is not None:
                            usage_raw = usage_dict(chunk.usage)
                        for choice in chunk.choices or []:
                            if choice.index not in (0, None):
                                continue
                            delta = choice.delta
                            if delta is not None:
                                extra = getattr(delta, "model_extra", None) or {}
                                think = extra.get("reasoning_content") or extra.get("reasoning")
                                if isinstance(think, str) and think:
                                    size.add(think)
                                    add_piece(reasoning, think)
                                    on_delta(Delta("reasoning", think))
                                for kind, piece in _content_pieces(delta.content):
                                    size.add(piece)
                                    add_piece(text if kind == "text" else reasoning, piece)
                                    on_delta(Delta(kind, piece))
                                refusal = getattr(delta, "refusal", None)
                                if isinstance(refusal, str) and refusal:  # the model declined: its words are the answer
                                    refused = True
                                    size.add(refusal)
                                    add_piece(text, refusal)
                                    on_delta(Delta("text", refusal))
                                for tc in delta.tool_calls or []:
                                    arguments = _arguments_text(tc)
                                    size.add(arguments)
                                    _tool_call_delta(calls, by_index, by_id, tc, arguments)
                            if choice.finish_reason:
                                finish = choice.finish_reason
                except Exception as exc:
                    if finish is None or not connection_dropped(exc):
                        raise  # (dropped after its finish_reason, the answer is whole: kept)
        except trio.Cancelled:  # (an abort, a stop): what was reported by then is the caller's to record
            if meter is not None:
                meter.usage = _usage(usage_raw) if began else None
            raise
        except ProviderError as exc:
            raise exc.during(_usage(usage_raw) if began else None)
        except Exception as exc:  # (see SdkProvider.failed)
            raise self.failed(exc, openai.APIError).during(_usage(usage_raw) if began else None) from None
        if finish is None:  # (what came may be cut anywhere: a call's arguments, a sentence)
            raise self.truncated("its finish_reason", size).during(_usage(usage_raw) if began else None)
        if any(not slot["name"] for slot in calls):
            raise self.malformed(ValueError("a tool call without a name")).during(_usage(usage_raw))
        try:
            tool_calls = [
                t.ToolCall(slot["id"] or f"call_{response_id or 'x'}_{index}", compiled.names.internal(slot["name"]),
                           "".join(slot["arguments"]) or "{}")
                for index, slot in enumerate(calls)
            ]
        except MALFORMED as exc:  # an id, a name or arguments that were no text
            raise self.malformed(exc).during(_usage(usage_raw)) from None
        stop = OUTPUT_LIMIT if at_output_limit(self.protocol, finish) else _STOPS.get(finish, finish)
        if tool_calls and stop == "end_turn":
            stop = "tool_use"
        elif refused and stop == "end_turn":
            stop = REFUSAL
        usage = _usage(usage_raw)
        diagnostics = self.diagnostics(compiled, cache)
        return self.checked(ModelResult(text="".join(text), reasoning="".join(reasoning), tool_calls=tool_calls,
                                        stop_reason=stop, usage=usage, response_id=response_id, diagnostics=diagnostics))


_STOPS = {"stop": "end_turn", "eos_token": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use"}  # (eos_token: TGI)


def _usage(usage_raw: dict[str, Any] | None) -> t.Usage:
    cache_read = reported(usage_raw, "prompt_tokens_details", "cached_tokens")
    if cache_read is None:  # DeepSeek reports its cache hits at the top level
        cache_read = reported(usage_raw, "prompt_cache_hit_tokens")
    return t.Usage(
        input_tokens=reported(usage_raw, "prompt_tokens"),
        output_tokens=reported(usage_raw, "completion_tokens"),
        cache_read_tokens=cache_read,
        cache_write_tokens=reported(usage_raw, "prompt_tokens_details", "cache_write_tokens"),
        reasoning_tokens=reported(usage_raw, "completion_tokens_details", "reasoning_tokens"),
        total_input_tokens=reported(usage_raw, "prompt_tokens"),  # (includes the cached: the total as sent)
    )


class _Refusal:
    """What a 400/422 refusal says of itself: the text of its ``message``, ``msg``, ``type`` and
    ``param`` fields (at the top, in ``error``, ``detail`` or ``errors`` entries, or in a
    ``message`` that is itself such a body; OpenAI's own refusal names the field in ``param``),
    and the names in its entries' ``loc`` paths. Never the values it echoes apart (a FastAPI
    server's ``detail[*].input`` holds what was refused, which may be a user's words): they say
    nothing of why. A ``message`` that is text is read whole, and some servers (vLLM's, pydantic's
    text) echo the refused value inside it: what it names is a guess that the retry settles
    (:meth:`OpenAIChatProvider._create`). Without a body, the SDK's message is the text."""

    _SAID = ("message", "msg", "type", "param")
    _NESTED = ("error", "errors", "detail")

    def __init__(self, exc: Any) -> None:
        self.texts: list[str] = []
        self.locs: list[str] = []
        body = getattr(exc, "body", None)
        if body is None:
            self.texts.append(str(getattr(exc, "message", "")))
        else:
            self._read(body, 0)

    def _read(self, node: Any, depth: int) -> None:
        if depth > 8:
            return
        if isinstance(node, str):
            self.texts.append(node)
        elif isinstance(node, list):
            for item in node:
                self._read(item, depth + 1)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in self._SAID or key in self._NESTED:
                    self._read(value, depth + 1)
                elif key == "loc" and isinstance(value, list):
                    self.locs += [part for part in value if isinstance(part, str)]

    def names(self, field: str) -> bool:
        """The refusal names ``field``: a ``loc`` holds it, or its own words do."""
        return field in self.locs or any(field in text for text in self.texts)

    def says(self, pattern: re.Pattern[str]) -> bool:
        return any(pattern.search(text) for text in self.texts)


# Mistral's refusal of a message right after tool results ("Unexpected role 'user' after role 'tool'").
_AFTER_TOOL = re.compile(r"Unexpected role '(?:user|system)' after role 'tool'", re.IGNORECASE)
# What the assistant turn put between tool results and the message after them says.
BRIDGE_TEXT = "(tool results received)"


def _bridged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with an assistant turn of :data:`BRIDGE_TEXT` between each ``tool`` message
    and a ``user`` or ``system`` message right after it (``messages`` itself when there is none)."""
    out: list[dict[str, Any]] = []
    for m, after in zip(messages, [*messages[1:], None]):
        out.append(m)
        if m.get("role") == "tool" and after is not None and after.get("role") in ("user", "system"):
            out.append({"role": "assistant", "content": BRIDGE_TEXT})
    return out if len(out) != len(messages) else messages


def _content_pieces(content: Any) -> list[tuple[str, str]]:
    """A delta's ``content`` as ``(kind, text)`` pieces, ``kind`` ``"text"`` or ``"reasoning"``.
    The protocol streams it as text. Mistral's reasoning models (Magistral) stream a list of
    content chunks instead: ``{"type": "text", "text": …}``, and ``{"type": "thinking",
    "thinking": [text chunks]}`` for the reasoning; chunks of other types (``reference``…), there
    or inside a ``thinking``, hold no text. Anything else (a number, a list of what is no chunk,
    a chunk's text that is none) is a malformed stream, raised as ``TypeError`` naming
    ``delta.content``. Empty text is none."""
    if content is None or isinstance(content, str):
        return [("text", content)] if content else []
    if not isinstance(content, list):
        raise TypeError(f"delta.content is {type(content).__name__}, not text")
    pieces: list[tuple[str, str]] = []
    for chunk in content:
        if not isinstance(chunk, dict):
            raise TypeError(f"delta.content holds a {type(chunk).__name__}, not a content chunk")
        if chunk.get("type") == "text":
            pieces.append(("text", _chunk_text(chunk)))
        elif chunk.get("type") == "thinking":
            inner = chunk.get("thinking")
            if not isinstance(inner, (str, list)):
                raise TypeError(f"delta.content's thinking is {type(inner).__name__}, not text chunks")
            for part in [inner] if isinstance(inner, str) else inner:
                if isinstance(part, str):
                    pieces.append(("reasoning", part))
                elif isinstance(part, dict):
                    if part.get("type") == "text":
                        pieces.append(("reasoning", _chunk_text(part)))
                else:
                    raise TypeError(f"delta.content's thinking holds a {type(part).__name__}, not a text chunk")
    return [(kind, piece) for kind, piece in pieces if piece]


def _chunk_text(chunk: dict[str, Any]) -> str:
    value = chunk.get("text")
    if not isinstance(value, str):
        raise TypeError(f"delta.content holds a text chunk whose text is {type(value).__name__}, not text")
    return value


def _arguments_text(tc: Any) -> str | None:
    """A streamed tool-call fragment's arguments as text. The protocol sends them as a JSON text;
    some compatible servers (TGI, llama.cpp's server in one mode) send the JSON value itself, an
    object. Such a value is taken as the JSON text it stands for, as if the server had sent it
    encoded (the SDK passes it through as sent; joined as text it failed every tool call of the
    answer as a malformed stream). ``None``: the fragment carries no arguments."""
    fn = tc.function
    arguments = fn.arguments if fn is not None else None
    if arguments is None or isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _tool_call_delta(calls: list[dict[str, Any]], by_index: dict[int, int], by_id: dict[str, int], tc: Any,
                     arguments: str | None) -> None:
    """Add one streamed tool-call fragment to ``calls``. Fragments of a call share its ``index``;
    without one, a fragment goes on the call whose id it repeats, else on the last call. It
    starts a new call where there is none to go on, and where it names a tool under another id
    than that call's (some servers number every call 0; without an index, a call of another
    tool under the same id). A fragment that names no tool goes on its call whatever id it
    carries (some servers give each fragment after a call's first an id of its own, and the
    call keeps its first), or on the call that has that id (calls numbered alike, interleaved)."""
    fn = tc.function
    name = fn.name if fn is not None else None
    known = by_id.get(tc.id) if tc.id else None  # the call that has this fragment's id
    if tc.index is not None:
        pos = by_index.get(tc.index)
        if pos is not None and tc.id and calls[pos]["id"] and tc.id != calls[pos]["id"]:
            pos = None if name else (known if known is not None else pos)
    elif known is not None:
        pos = None if name and calls[known]["name"] and name != calls[known]["name"] else known
    else:
        pos = len(calls) - 1 if calls and not name else None
    if pos is None:
        calls.append({"id": None, "name": "", "arguments": []})
        pos = len(calls) - 1
        if tc.index is not None:
            by_index[tc.index] = pos
    slot = calls[pos]
    if tc.id and not slot["id"]:
        slot["id"] = tc.id
        by_id.setdefault(tc.id, pos)
    if name and not slot["name"]:
        slot["name"] = name
    if arguments:
        add_piece(slot["arguments"], arguments)
