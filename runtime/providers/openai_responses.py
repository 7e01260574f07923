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

from events import types as t

from . import caching
from .base import Delta, ModelRequest, ModelResult, ProviderError
from .compile import Compiled, Entry, Image, call_arguments, native_reasoning, prepare, request_tails, summary_text
from .names import describe
from .sdk import MALFORMED, SdkProvider, add_piece, openai_client_class, reported, usage_dict

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
        return openai_client_class()(api_key=self._key, base_url=self.base_url or "https://api.openai.com/v1",
                                     max_retries=self.max_retries, timeout=self.timeout)

    async def stream(self, request: ModelRequest, on_delta: Callable[[Delta], None]) -> ModelResult:
        """Stream one response. Raises :class:`ProviderError` (see :mod:`.sdk` for codes);
        trio cancellation closes the HTTP stream."""
        import httpx2
        import openai

        model = self.model_config(request.model)
        compiled = await prepare(request, load_image=self.load_image, images=model.images)
        kwargs, cache = render(compiled, request, explicit_cache=model.explicit_cache,
                               ttl=getattr(model, "cache_ttl", None) or self.cache_ttl, max_output_tokens=model.max_output_tokens)
        final: Any = None
        streamed: list[str] = []  # the text deltas, for a final response that leaves its output out
        # What a failure after the response began records: counts unknown, or response.failed's.
        began: t.Usage | None = None
        size = self.answer_size()
        try:
            async with size.reading(self.client().responses.stream(**kwargs)) as stream:
                async for ev in stream:
                    kind = ev.type
                    if final is not None:
                        # (the response is complete: deltas after it went to live viewers as if part of
                        # it, and a server that kept sending them held the session)
                        break
                    if kind in ("response.output_text.delta", "response.refusal.delta"):
                        size.add(ev.delta)
                        add_piece(streamed, ev.delta)
                        on_delta(Delta("text", ev.delta))
                    elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                        if not isinstance(ev.delta, str):  # (the SDK joins text deltas, which checks them; not these)
                            raise TypeError(f"a {kind} that is {type(ev.delta).__name__}, not text")
                        size.add(ev.delta)
                        on_delta(Delta("reasoning", ev.delta))
                    elif kind == "response.function_call_arguments.delta":
                        size.add(ev.delta)
                    elif kind == "error":
                        raise self.map_error(_StreamError(getattr(ev, "code", None), getattr(ev, "message", "")))
                    elif kind == "response.failed":
                        err = getattr(ev.response, "error", None)
                        began = _usage(usage_dict(getattr(ev.response, "usage", None)))
                        raise self.map_error(_StreamError(getattr(err, "code", None), getattr(err, "message", "response failed")))
                    elif kind in ("response.completed", "response.incomplete"):
                        final = ev.response
                    if began is None:  # (set after an event: an error as the first one leaves it None)
                        began = t.Usage()
            if final is None:
                raise self.truncated("its final response")
            result = self._result(final, compiled, cache)  # (reads the SDK's objects too)
        except ProviderError as exc:
            raise exc.during(began)
        except (openai.APIError, httpx2.HTTPError) as exc:
            raise self.map_error(exc).during(began) from None
        except MALFORMED as exc:
            raise self.malformed(exc).during(began) from None
        except Exception as exc:  # (not translated by the SDK: see SdkProvider.unexpected)
            raise self.unexpected(exc).during(began) from None
        if not result.text and not result.tool_calls and streamed:
            # Some servers (proxies) send response.completed with "output": []: the text the
            # viewer saw streaming is the answer, not an empty one.
            result = replace(result, text="".join(streamed))
        return self.checked(result)

    def _result(self, response: Any, compiled: Compiled, cache: dict[str, Any]) -> ModelResult:
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[t.ToolCall] = []
        native: list[dict[str, Any]] = []
        refused = False
        for item in getattr(response, "output", None) or []:
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
            stop = "max_tokens" if reason == "max_output_tokens" else (reason or "incomplete")
        else:
            stop = "tool_use" if calls else "refusal" if refused else "end_turn"
        diagnostics: dict[str, Any] = {"protocol": self.protocol, **compiled.diagnostics}
        if cache:
            diagnostics["cache"] = cache
        if compiled.names.aliased:
            diagnostics["tool_aliases"] = compiled.names.aliased
        return ModelResult(text="".join(text), reasoning="\n\n".join(reasoning), tool_calls=calls, stop_reason=stop,
                           usage=usage, response_id=getattr(response, "id", None), reasoning_blocks=native,
                           diagnostics=diagnostics)


def _usage(u: dict[str, Any] | None) -> t.Usage:
    return t.Usage(
        input_tokens=reported(u, "input_tokens"),
        output_tokens=reported(u, "output_tokens"),
        cache_read_tokens=reported(u, "input_tokens_details", "cached_tokens"),
        cache_write_tokens=reported(u, "input_tokens_details", "cache_write_tokens"),
        reasoning_tokens=reported(u, "output_tokens_details", "reasoning_tokens"),
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
