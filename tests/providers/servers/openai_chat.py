"""OpenAI Chat Completions streaming chunks (``POST /v1/chat/completions``, ``stream: true``)."""

from __future__ import annotations

import json
from typing import Any

from .base import Reply
from .openai_responses import error  # same error body shape

__all__ = ["chat_stream", "error", "usage"]


def chat_stream(*, text: str | list[str] = "", calls: list[tuple[str, str, Any]] = (), reasoning: list[str] = (),
                usage: dict[str, Any] | None = None, finish: str | None = None, chunk_id: str = "chatcmpl-1",
                model: str = "chat-test", stall_after: int | None = None) -> Reply:
    """Chunks: role, reasoning deltas (``reasoning_content``), text deltas, tool-call deltas by
    index (id and name first, arguments in two pieces), the finish chunk, a usage chunk with
    empty ``choices`` (when ``usage`` is given), then ``[DONE]``."""
    events: list[tuple[str | None, Any]] = []

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
        events.append((None, {"id": chunk_id, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                              "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}))

    chunk({"role": "assistant", "content": ""})
    for r in reasoning:
        chunk({"reasoning_content": r})
    for d in ([text] if isinstance(text, str) else text):
        if d:
            chunk({"content": d})
    for i, (call_id, name, args) in enumerate(calls):
        args_text = args if isinstance(args, str) else json.dumps(args)
        half = len(args_text) // 2
        chunk({"tool_calls": [{"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]})
        for piece in (args_text[:half], args_text[half:]):
            if piece:
                chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    chunk({}, finish or ("tool_calls" if calls else "stop"))
    if usage is not None:
        events.append((None, {"id": chunk_id, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                              "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return Reply(events=events, stall_after=stall_after)


def usage(prompt: int, completion: int, *, cached: int | None = None, reasoning: int | None = None) -> dict[str, Any]:
    u: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return u
