"""``openai-responses``: the OpenAI Responses API through ``openai.AsyncOpenAI`` (streaming).

Compilation keeps message order: the leading system prompt and every later system item are
``developer`` messages at their position; an assistant response is its text message followed by
its ``function_call`` items, each followed by its ``function_call_output`` (text and images); a
call id outside ``[A-Za-z0-9_-]{1,64}`` (another server's, before the session switched model: the
API refuses one past 64 characters) goes under its digest alias (:func:`.names.call_id_for`).
Requests are sent with ``store: false`` (Lens's log is the record). Reasoning (``thinking_level``
set) asks for ``reasoning.effort`` with an automatic summary, streamed as reasoning deltas, and
``include: ["reasoning.encrypted_content"]``: the response's ``reasoning`` items (``id``,
``summary``, ``encrypted_content``) are returned in ``ModelResult.reasoning_blocks`` and sent back
as input items right before that response's output items on every later request. With
``store: false`` the server cannot look an item up by id, so an item without
``encrypted_content`` is not sent back (``diagnostics["unsendable_reasoning_items"]``); items
recorded under another protocol are left out. The model's ``maxOutputTokens`` is sent as
``max_output_tokens`` (unset: the server's default).
Prompt caching: see :mod:`runtime.providers.caching`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import trio

from events import types as t

from . import caching
from .base import (INCOMPLETE, OUTPUT_LIMIT, REFUSAL, Delta, ModelRequest, ModelResult, ProviderError, UsageMeter, at_output_limit,
                   cuts_answer)
from .compile import (OPENAI_IMAGES, Compiled, Entry, Image, call_arguments, native_reasoning, prepare, request_tails,
                      summary_text)
from .names import describe
from .sdk import (OPENAI_BASE_URL, AnswerSize, SdkProvider, add_piece, openai_client_class, reported,
                  usage_dict)

PROTOCOL = "openai-responses"
REASONING_EFFORTS = {"minimal", "low", "medium", "high", "xhigh"}
ENCRYPTED_REASONING = "reasoning.encrypted_content"
# The fields a reasoning input item takes (ResponseReasoningItemParam); others are not sent back.
REASONING_ITEM_KEYS = ("type", "id", "summary", "content", "encrypted_content", "status")


def _input_parts(entry: Entry) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in entry.parts:
        if isinstance(p, Image):
            out.append({"type": "input_image", "image_url": p.data_url, "detail": "auto"})
        elif p.text:
            out.append({"type": "input_text", "text": p.text})
    return out or [{"type": "input_text", "text": "(empty)"}]


def _reasoning_items(compiled: Compiled, entry: Entry) -> list[dict[str, Any]]:
    """The entry's recorded reasoning items that can go back under ``store: false``."""
    out: list[dict[str, Any]] = []
    for block in native_reasoning(compiled, entry, PROTOCOL):
        if block.get("type") != "reasoning" or not block.get("encrypted_content"):
            compiled.diagnostics["unsendable_reasoning_items"] = compiled.diagnostics.get("unsendable_reasoning_items", 0) + 1
            continue
        out.append({k: block[k] for k in REASONING_ITEM_KEYS if block.get(k) is not None})
    return out


def render(compiled: Compiled, request: ModelRequest, *, explicit_cache: bool, ttl: str,
           max_output_tokens: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``responses.create`` keyword arguments for ``compiled`` and the cache diagnostics."""
    names = compiled.names
    call_ids = compiled.call_ids()
    items: list[dict[str, Any]] = []
    # Sendable input blocks that may carry a cache breakpoint: (candidate, how to mark it).
    marks: list[tuple[caching.Candidate, Callable[[dict[str, Any]], None]]] = []
    for ei, e in enumerate(compiled.entries):
        if e.kind in ("system", "user", "summary"):
            role = "developer" if e.kind == "system" else "user"
            parts = _input_parts(e)
            if e.kind == "summary":
                parts = [{"type": "input_text", "text": summary_text(e)}]
            items.append({"role": role, "content": parts})
            marks.append((caching.Candidate(ei, e.kind == "system" and e.leading), lambda bp, part=parts[-1]: part.__setitem__("prompt_cache_breakpoint", bp)))
        elif e.kind == "assistant":
            items.extend(_reasoning_items(compiled, e))  # as received, before the output they led to
            if e.text:
                items.append({"role": "assistant", "content": e.text})
            for call in e.calls:
                items.append({"type": "function_call", "call_id": call_ids.wire(call.call_id), "name": names.native(call.name),
                              "arguments": call_arguments(compiled, call)})
        elif e.kind == "result":
            has_image = any(isinstance(p, Image) for p in e.parts)
            item: dict[str, Any] = {"type": "function_call_output", "call_id": call_ids.wire(e.call_id)}
            if has_image:
                item["output"] = _input_parts(e)
            else:
                item["output"] = e.text or "(no output)"
            items.append(item)

            def mark(bp: dict[str, Any], item: dict[str, Any] = item) -> None:
                if isinstance(item["output"], str):  # a breakpoint needs the block form
                    item["output"] = [{"type": "input_text", "text": item["output"]}]
                item["output"][-1]["prompt_cache_breakpoint"] = bp

            marks.append((caching.Candidate(ei), mark))
    kwargs: dict[str, Any] = {"model": request.model, "input": items, "store": False}
    if compiled.tools:
        kwargs["tools"] = [{"type": "function", "name": names.native(tool["name"]),
                            "description": describe(tool, names.native(tool["name"])),
                            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
                            "strict": False} for tool in compiled.tools]
    if request.thinking_level in REASONING_EFFORTS:
        kwargs["reasoning"] = {"effort": request.thinking_level, "summary": "auto"}
        kwargs["include"] = [ENCRYPTED_REASONING]
    if max_output_tokens is not None:
        kwargs["max_output_tokens"] = max_output_tokens
    diagnostics: dict[str, Any] = {}
    if explicit_cache:
        caching.check_openai_ttl(ttl)
        kwargs["prompt_cache_options"] = caching.openai_request_options()
        chosen = caching.openai_breakpoints([c for c, _ in marks], request_tails(compiled.entries))
        sent = []
        for ci, reason in chosen:
            cand, mark = marks[ci]
            mark(caching.openai_breakpoint(ttl))
            entry = compiled.entries[cand.entry]
            sent.append({"entry": cand.entry, "kind": entry.kind, "item_ids": entry.item_ids, "reason": reason, "ttl": ttl})
        diagnostics = {"scheme": "openai-explicit", "request_ttl": caching.OPENAI_REQUEST_TTL, "breakpoints": sent}
    return kwargs, diagnostics


class OpenAIResponsesProvider(SdkProvider):
    protocol = PROTOCOL

    def _make_client(self) -> Any:
        return self._sdk_client(openai_client_class(), OPENAI_BASE_URL)

    async def stream(self, request: ModelRequest, on_delta: Callable[[Delta], None],
                     meter: UsageMeter | None = None) -> ModelResult:
        """Stream one response. Raises :class:`ProviderError` (see :mod:`.sdk` for codes);
        trio cancellation closes the HTTP stream."""
        await self.sdk_import.ready()  # (in a worker thread: the loop runs meanwhile)
        import openai

        model = self.model_config(request.model)
        compiled = await prepare(request, load_image=self.load_image, images=model.images, limits=OPENAI_IMAGES)
        kwargs, cache = render(compiled, request, explicit_cache=model.explicit_cache,
                               ttl=getattr(model, "cache_ttl", None) or self.cache_ttl, max_output_tokens=model.max_output_tokens)
        reader = _StreamReader(on_delta, self.answer_size())
        try:
            opened = await self.client().responses.create(**kwargs, stream=True)
            async with reader.size.reading(opened) as stream:
                async for ev in stream:
                    if reader.final is not None:
                        # (the response is complete: deltas after it went to live viewers as if part of
                        # it, and a server that kept sending them held the session)
                        break
                    reader.feed(ev)
                    if ev.type == "error":
                        raise self.map_error(_StreamError(getattr(ev, "code", None), getattr(ev, "message", "")))
                    if ev.type == "response.failed":
                        err = getattr(ev.response, "error", None)
                        reader.began = _usage(usage_dict(getattr(ev.response, "usage", None)))
                        raise self.map_error(_StreamError(getattr(err, "code", None), getattr(err, "message", "response failed")))
                    if reader.began is None:  # (set after an event: an error as the first one leaves it None)
                        reader.began = t.Usage()
            if reader.final is None:
                raise self.truncated("its final response", reader.size)
            result = self._result(reader.final, reader.output(), compiled, cache)  # (reads the SDK's objects too)
            if not result.text and not result.tool_calls:
                # A final response without output after text deltas for no item the stream
                # added (a proxy's): the text the viewer saw streaming is the answer, not an
                # empty one.
                result = replace(result, text=reader.streamed_text())
        except trio.Cancelled:  # (an abort, a stop): what was reported by then is the caller's to record
            if meter is not None:
                meter.usage = reader.began
            raise
        except ProviderError as exc:
            raise exc.during(reader.began)
        except Exception as exc:  # (see SdkProvider.failed)
            raise self.failed(exc, openai.APIError).during(reader.began) from None
        return self.checked(result)

    def _result(self, response: Any, output: list[Any], compiled: Compiled, cache: dict[str, Any]) -> ModelResult:
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[t.ToolCall] = []
        native: list[dict[str, Any]] = []
        refused = False
        for item in output:
            if item.type == "message":
                for c in item.content:
                    kind = getattr(c, "type", "")
                    if kind == "output_text":
                        text.append(c.text)
                    elif kind == "refusal":  # the model declined: its words are the answer
                        text.append(c.refusal)
                        refused = True
            elif item.type == "function_call":
                calls.append(t.ToolCall(item.call_id, compiled.names.internal(item.name), item.arguments or "{}"))
            elif item.type == "reasoning":
                parts = [s.text for s in (getattr(item, "summary", None) or [])]
                parts += [c.text for c in (getattr(item, "content", None) or []) if getattr(c, "text", None)]
                reasoning.extend(parts)
                native.append({"protocol": self.protocol, "block": _as_received(item)})
        usage = _usage(usage_dict(getattr(response, "usage", None)))
        status = getattr(response, "status", None)
        if status == "incomplete":
            reason = getattr(getattr(response, "incomplete_details", None), "reason", None)
            stop = OUTPUT_LIMIT if at_output_limit(PROTOCOL, reason) else (reason or INCOMPLETE)
        else:
            stop = "tool_use" if calls else REFUSAL if refused else "end_turn"
        diagnostics = self.diagnostics(compiled, cache)
        return ModelResult(text="".join(text), reasoning="\n\n".join(reasoning), tool_calls=calls, stop_reason=stop,
                           usage=usage, response_id=getattr(response, "id", None), reasoning_blocks=native,
                           diagnostics=diagnostics)


class _StreamReader:
    """Puts one streamed response together from the SDK's raw events
    (``responses.create(stream=True)``). The SDK's ``responses.stream()`` helper, read before,
    joined each text and arguments delta to its snapshot with ``+=``, copying the text so far for
    every delta: time quadratic in the answer's deltas, on the event loop (200,000 one-character
    deltas held it for 2.7 s, a million for about a minute). Here the pieces are joined as they
    come (:func:`.sdk.add_piece`), and live text and reasoning go to ``on_delta``.

    The answer is the final event's response (``response.completed`` / ``response.incomplete``),
    as before. Where that response leaves ``output`` out (or null), the output is the stream's, as
    the helper made it: each item as its ``response.output_item.done`` sent it, else as it was
    added, with its content parts and the text, refusal or arguments streamed into it (a response
    cut short by ``max_output_tokens`` or by the content filter keeps what was streamed); where
    such a cut response lists items but leaves out a call the stream added and never ended, that
    call is added after them (:meth:`_calls_left_out`). The helper's consistency checks
    (a ``response.created`` first, the response's id unchanged, a delta only for an item and part
    added before) failed answers whose final event was whole; they are not made: a delta for an
    item or part never added is streamed live and kept for a final response without output.

    What is held grows only with the answer's bytes and with the items and parts the server adds:
    an empty delta, a keep-alive, a frame without data and an event of another kind hold nothing,
    and are not streamed live."""

    def __init__(self, on_delta: Callable[[Delta], None], size: AnswerSize) -> None:
        self.on_delta = on_delta
        self.size = size  # (the answer's bytes so far, bounded; a stall ends the read)
        self.final: Any = None  # the final event's response
        # What a failure after the response began records: counts unknown, or response.failed's.
        self.began: t.Usage | None = None
        self._added: dict[Any, Any] = {}  # output index -> the item as response.output_item.added sent it
        self._done: dict[Any, Any] = {}  # output index -> the item as response.output_item.done sent it
        # (output index, content index) -> the text or refusal streamed into that part, in pieces;
        # None: what was streamed for no part added (in the order streamed)
        self._text: dict[tuple[Any, Any] | None, list[str]] = {}
        self._arguments: dict[Any, list[str]] = {}  # output index -> a call's arguments, in pieces

    def feed(self, ev: Any) -> None:
        kind = ev.type
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            piece = _text(ev.delta, kind)
            if piece:
                self.size.add(piece)
                part = (ev.output_index, ev.content_index)
                add_piece(self._text.setdefault(part if self._part(part) is not None else None, []), piece)
                self.on_delta(Delta("text", piece))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            piece = _text(ev.delta, kind)  # (only streamed live: the reasoning is the final event's)
            if piece:
                self.size.add(piece)
                self.on_delta(Delta("reasoning", piece))
        elif kind == "response.function_call_arguments.delta":
            piece = _text(ev.delta, kind)
            if piece:
                self.size.add(piece)
                item = self._added.get(ev.output_index)
                if getattr(item, "type", None) == "function_call":
                    add_piece(self._arguments.setdefault(ev.output_index, []), piece)
        elif kind == "response.output_item.added":
            if getattr(ev, "item", None) is not None:
                self._added[ev.output_index] = ev.item
        elif kind == "response.content_part.added":
            item = self._added.get(ev.output_index)
            if getattr(item, "type", None) == "message":
                item.content.append(ev.part)
        elif kind == "response.output_item.done":
            self._done[ev.output_index] = ev.item
        elif kind in ("response.completed", "response.incomplete"):
            self.final = ev.response

    def _part(self, part: tuple[Any, Any]) -> Any:
        """The content part added at ``part`` (output index, content index), or ``None``."""
        item = self._added.get(part[0])
        content = getattr(item, "content", None) if getattr(item, "type", None) == "message" else None
        index = part[1]
        if isinstance(content, list) and isinstance(index, int) and 0 <= index < len(content):
            return content[index]
        return None

    def output(self) -> list[Any]:
        """The final response's output items, or the stream's where it has none: its ``output``
        left out, null, or empty (proxies send ``"output": []`` after streaming every item; read
        as the answer, the calls the model made were lost and the turn ended without them)."""
        given = getattr(self.final, "output", None)
        if given:
            return list(given) + self._calls_left_out(given)
        out = []
        for index in sorted(self._added.keys() | self._done.keys()):
            item = self._done.get(index)
            if item is None:
                item = self._as_streamed(index)
            elif getattr(item, "type", None) == "function_call":
                self._call_completed(index, item)
            out.append(item)
        return out

    def _as_streamed(self, index: Any) -> Any:
        """The item added at ``index``, with the text, refusal or arguments streamed into it."""
        item = self._added[index]
        if item.type == "function_call" and index in self._arguments:
            item.arguments = (item.arguments or "") + "".join(self._arguments[index])
        elif item.type == "message":
            for ci, part in enumerate(item.content):
                pieces = self._text.get((index, ci))
                if pieces and part.type == "output_text":
                    part.text = (part.text or "") + "".join(pieces)
                elif pieces and part.type == "refusal":
                    part.refusal = (part.refusal or "") + "".join(pieces)
        return item

    def _calls_left_out(self, given: Any) -> list[Any]:
        """The calls an ``incomplete`` response cut at the output limit or by the content filter
        left out of its ``output`` although the stream added them and never ended them (no
        ``output_item.done``), as streamed: the model was writing the last of them when it
        stopped. Left out, that call was lost (neither run nor shown to the model); kept, it is
        the answer's last call, which is answered as cut (runtime.decide.cut_by_provider) and
        never run."""
        final = self.final
        if getattr(final, "status", None) != "incomplete" or not cuts_answer(
                PROTOCOL, getattr(getattr(final, "incomplete_details", None), "reason", None)):
            return []
        listed = {key for item in given for key in (getattr(item, "id", None), getattr(item, "call_id", None)) if key}
        out = []
        for index in sorted(self._added.keys() - self._done.keys()):
            item = self._added[index]
            if getattr(item, "type", None) == "function_call" and not {getattr(item, "id", None),
                                                                        getattr(item, "call_id", None)} & listed:
                out.append(self._as_streamed(index))
        return out

    def _call_completed(self, index: Any, item: Any) -> None:
        """A call's ``response.output_item.done`` item, with what it leaves blank (its name,
        its call id, its arguments) as the stream gave it before: a proxy blanked the name
        there, which ``response.output_item.added`` had, and the call was of the tool ``''``."""
        added = self._added.get(index)
        if getattr(added, "type", None) == "function_call":
            for name in ("name", "call_id"):
                if not getattr(item, name, None) and getattr(added, name, None):
                    setattr(item, name, getattr(added, name))
        if not getattr(item, "arguments", None) and index in self._arguments:
            item.arguments = "".join(self._arguments[index])

    def streamed_text(self) -> str:
        """The text and refusals streamed, part by part (in the order each part began)."""
        return "".join("".join(pieces) for pieces in self._text.values())


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a {what} that is {type(value).__name__}, not text")
    return value


def _usage(u: dict[str, Any] | None) -> t.Usage:
    return t.Usage(
        input_tokens=reported(u, "input_tokens"),
        output_tokens=reported(u, "output_tokens"),
        cache_read_tokens=reported(u, "input_tokens_details", "cached_tokens"),
        cache_write_tokens=reported(u, "input_tokens_details", "cache_write_tokens"),
        reasoning_tokens=reported(u, "output_tokens_details", "reasoning_tokens"),
        total_input_tokens=reported(u, "input_tokens"),  # (includes the cached: the total as sent)
    )


def _as_received(item: Any) -> dict[str, Any]:
    """An output item as the server sent it (the SDK model's set fields, JSON-shaped)."""
    to_dict = getattr(item, "to_dict", None)
    if to_dict is not None:
        return to_dict(warnings=False)  # (a field of another type stays as sent, unannounced on stderr)
    return dict(item) if isinstance(item, dict) else {}


class _StreamError(Exception):
    """An ``error`` / ``response.failed`` event, shaped for :meth:`SdkProvider.map_error`."""

    def __init__(self, code: Any, message: Any) -> None:
        super().__init__(str(message))
        self.status_code = None
        self.server_code = code if isinstance(code, str) else None  # (named in the message; the type is ours)
        self.message = str(message or "stream error")
        self.body = {"error": {"code": code, "message": self.message, "type": _type_of(code)}}


def _type_of(code: Any) -> str:
    code = str(code or "")
    if code in ("rate_limit_exceeded",):
        return "rate_limit_error"
    if code in ("server_error", "internal_error"):
        return "api_error"
    if code in ("context_length_exceeded", "invalid_prompt", "invalid_request_error"):
        return "invalid_request_error"
    return ""
