"""OpenAI Responses API streaming events (``POST /v1/responses``, ``stream: true``)."""

from __future__ import annotations

import json
from typing import Any

from .base import Reply


def response_stream(*, text: str | list[str] = "", calls: list[tuple[str, str, Any]] = (), reasoning: list[str] = (),
                    encrypted_content: str | None = None,
                    usage: dict[str, Any] | None = None, response_id: str = "resp_1", model: str = "gpt-test",
                    status: str = "completed", stall_after: int | None = None) -> Reply:
    """A streamed response: optional reasoning item (its summary; ``encrypted_content`` on the
    item when given, as the API adds it for ``include: ["reasoning.encrypted_content"]``), a text
    message (``text`` as one delta or a list of deltas), then function calls
    ``(call_id, name, arguments)`` (arguments dict or JSON text, streamed in two halves).
    ``status="incomplete"`` ends with ``response.incomplete``."""
    seq = 0
    events: list[tuple[str | None, Any]] = []

    def ev(kind: str, **data: Any) -> None:
        nonlocal seq
        events.append((kind, {"type": kind, "sequence_number": seq, **data}))
        seq += 1

    base = {"id": response_id, "object": "response", "created_at": 1700000000, "model": model,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None}
    ev("response.created", response={**base, "status": "in_progress", "output": []})
    ev("response.in_progress", response={**base, "status": "in_progress", "output": []})
    output: list[dict[str, Any]] = []
    idx = 0
    if reasoning:
        rid = f"rs_{response_id}"
        enc = {} if encrypted_content is None else {"encrypted_content": encrypted_content}
        ev("response.output_item.added", output_index=idx, item={"id": rid, "type": "reasoning", "summary": [], **enc})
        summary = []
        for si, chunk in enumerate(reasoning):
            ev("response.reasoning_summary_part.added", item_id=rid, output_index=idx, summary_index=si,
               part={"type": "summary_text", "text": ""})
            ev("response.reasoning_summary_text.delta", item_id=rid, output_index=idx, summary_index=si, delta=chunk)
            ev("response.reasoning_summary_text.done", item_id=rid, output_index=idx, summary_index=si, text=chunk)
            ev("response.reasoning_summary_part.done", item_id=rid, output_index=idx, summary_index=si,
               part={"type": "summary_text", "text": chunk})
            summary.append({"type": "summary_text", "text": chunk})
        item = {"id": rid, "type": "reasoning", "summary": summary, **enc}
        ev("response.output_item.done", output_index=idx, item=item)
        output.append(item)
        idx += 1
    deltas = [text] if isinstance(text, str) else list(text)
    full = "".join(deltas)
    if full:
        mid = f"msg_{response_id}"
        ev("response.output_item.added", output_index=idx,
           item={"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []})
        ev("response.content_part.added", item_id=mid, output_index=idx, content_index=0,
           part={"type": "output_text", "text": "", "annotations": []})
        for d in deltas:
            ev("response.output_text.delta", item_id=mid, output_index=idx, content_index=0, delta=d, logprobs=[])
        ev("response.output_text.done", item_id=mid, output_index=idx, content_index=0, text=full, logprobs=[])
        part = {"type": "output_text", "text": full, "annotations": []}
        ev("response.content_part.done", item_id=mid, output_index=idx, content_index=0, part=part)
        item = {"id": mid, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        ev("response.output_item.done", output_index=idx, item=item)
        output.append(item)
        idx += 1
    for call_id, name, args in calls:
        fid = f"fc_{call_id}"
        args_text = args if isinstance(args, str) else json.dumps(args)
        ev("response.output_item.added", output_index=idx,
           item={"id": fid, "type": "function_call", "status": "in_progress", "call_id": call_id, "name": name, "arguments": ""})
        half = len(args_text) // 2
        for piece in (args_text[:half], args_text[half:]):
            if piece:
                ev("response.function_call_arguments.delta", item_id=fid, output_index=idx, delta=piece)
        ev("response.function_call_arguments.done", item_id=fid, output_index=idx, arguments=args_text, name=name)
        item = {"id": fid, "type": "function_call", "status": "completed", "call_id": call_id, "name": name, "arguments": args_text}
        ev("response.output_item.done", output_index=idx, item=item)
        output.append(item)
        idx += 1
    final = {**base, "status": status, "output": output}
    if usage is not None:
        final["usage"] = usage
    if status == "incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
        ev("response.incomplete", response=final)
    else:
        ev("response.completed", response=final)
    return Reply(events=events, stall_after=stall_after)


def usage(input_tokens: int, output_tokens: int, *, cached: int = 0, cache_write: int | None = None,
          reasoning: int = 0) -> dict[str, Any]:
    details: dict[str, Any] = {"cached_tokens": cached}
    if cache_write is not None:
        details["cache_write_tokens"] = cache_write
    return {"input_tokens": input_tokens, "input_tokens_details": details, "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning}, "total_tokens": input_tokens + output_tokens}


def error(status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None,
          headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"error": {"message": message, "type": type, "param": None, "code": code}},
                 headers=dict(headers or {}))
