"""One vocabulary for scripting the three loopback servers from protocol-generic tests."""

from __future__ import annotations

from typing import Any

from .conftest import FAST_RETRY
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers import openai_responses as orr
from .servers.base import Reply


def reply(protocol: str, *, text: str | list[str] = "", calls: list[tuple[str, str, Any]] = (),
          reasoning: list[str] = (), stall_after: int | None = None, rid: str = "r1",
          signature: str = an.SIGNATURE, encrypted: str | None = None) -> Reply:
    """``signature`` (Anthropic) signs the thinking block; ``encrypted`` (Responses) is the
    reasoning item's ``encrypted_content``. Chat has neither."""
    if protocol == "openai-responses":
        return orr.response_stream(text=text, calls=list(calls), reasoning=list(reasoning), response_id=rid,
                                   encrypted_content=encrypted,
                                   usage=orr.usage(100, 20, cached=40, reasoning=5), stall_after=stall_after)
    if protocol == "openai-chat":
        return oc.chat_stream(text=text, calls=list(calls), reasoning=list(reasoning), chunk_id=rid,
                              usage=oc.usage(100, 20, cached=40), stall_after=stall_after)
    return an.message_stream(text=text, calls=list(calls), thinking=list(reasoning), message_id=rid, signature=signature,
                             usage={"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 40,
                                    "cache_creation_input_tokens": 12},
                             output_tokens=20, stall_after=stall_after)


def error(protocol: str, status: int, message: str, *, kind: str | None = None, code: str | None = None,
          fast: bool = True) -> Reply:
    headers = FAST_RETRY if fast else {}
    if protocol == "anthropic":
        default = {429: "rate_limit_error", 500: "api_error", 401: "authentication_error", 529: "overloaded_error"}
        return an.error(status, message, type=kind or default.get(status, "invalid_request_error"), headers=headers)
    default = {429: "rate_limit_error", 500: "server_error", 401: "invalid_request_error"}
    return orr.error(status, message, type=kind or default.get(status, "invalid_request_error"), code=code, headers=headers)


def context_too_long(protocol: str) -> Reply:
    if protocol == "anthropic":
        return an.error(400, "prompt is too long: 250000 tokens > 200000 maximum")
    return orr.error(400, "This model's maximum context length is 128000 tokens. However, your messages resulted in 250000 tokens.",
                     code="context_length_exceeded")
