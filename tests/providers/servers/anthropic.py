"""Anthropic Messages streaming events (``POST /v1/messages``, ``stream: true``)."""

from __future__ import annotations

import json
from typing import Any

from .base import Reply


SIGNATURE = "c2lnbmF0dXJl"


def message_stream(*, text: str | list[str] = "", calls: list[tuple[str, str, Any]] = (), thinking: list[str] = (),
                   signature: str = SIGNATURE, redacted: list[str] = (),
                   usage: dict[str, Any] | None = None, output_tokens: int = 7, stop_reason: str | None = None,
                   message_id: str = "msg_1", model: str = "claude-test", stall_after: int | None = None) -> Reply:
    """message_start (with ``usage``), an optional thinking block (thinking deltas, then its
    ``signature`` in one signature delta), ``redacted_thinking`` blocks (their opaque ``data`` in
    the block start, as the API sends them), a text block, tool_use blocks with
    ``input_json_delta`` pieces, message_delta (stop reason, output tokens), message_stop. A
    ``ping`` comes after message_start, as the API sends one."""
    events: list[tuple[str | None, Any]] = []

    def ev(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, **data}))

    start_usage = usage if usage is not None else {"input_tokens": 10, "output_tokens": 1}
    ev("message_start", message={"id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
                                 "stop_reason": None, "stop_sequence": None, "usage": start_usage})
    ev("ping")
    index = 0
    if thinking:
        ev("content_block_start", index=index, content_block={"type": "thinking", "thinking": "", "signature": ""})
        for piece in thinking:
            ev("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": piece})
        ev("content_block_delta", index=index, delta={"type": "signature_delta", "signature": signature})
        ev("content_block_stop", index=index)
        index += 1
    for data in redacted:
        ev("content_block_start", index=index, content_block={"type": "redacted_thinking", "data": data})
        ev("content_block_stop", index=index)
        index += 1
    deltas = [text] if isinstance(text, str) else list(text)
    if "".join(deltas):
        ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        for d in deltas:
            ev("content_block_delta", index=index, delta={"type": "text_delta", "text": d})
        ev("content_block_stop", index=index)
        index += 1
    for call_id, name, args in calls:
        args_text = args if isinstance(args, str) else json.dumps(args)
        ev("content_block_start", index=index, content_block={"type": "tool_use", "id": call_id, "name": name, "input": {}})
        half = len(args_text) // 2
        for piece in (args_text[:half], args_text[half:]):
            ev("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
        ev("content_block_stop", index=index)
        index += 1
    ev("message_delta", delta={"stop_reason": stop_reason or ("tool_use" if calls else "end_turn"), "stop_sequence": None},
       usage={"output_tokens": output_tokens})
    ev("message_stop")
    return Reply(events=events, stall_after=stall_after)


def error(status: int, message: str, *, type: str = "invalid_request_error", headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": type, "message": message}}, headers=dict(headers or {}))
