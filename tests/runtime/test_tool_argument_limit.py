"""The bound on a call's arguments as the model's JSON text (``ToolRegistry.MAX_ARGUMENT_BYTES``,
tools/base.py), at the bound and one byte past, through the registry every call passes."""

from __future__ import annotations

from typing import Any

import pytest

from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec

CTX = ToolContext("p1", "ses_1", "main", "task_1", "call_1", True)


def echo_registry(seen: list[dict[str, Any]]) -> ToolRegistry:
    async def echo(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        seen.append(args)
        return ToolResult.text("ok")
    return ToolRegistry([ToolSpec("echo", "", {"type": "object", "properties": {"s": {"type": "string"}}}, echo)])


@pytest.mark.parametrize("past", [0, 1])
async def test_arguments_are_taken_up_to_their_byte_limit_and_refused_one_byte_past(past: int):
    # The bound is on the model's JSON text as sent (ToolRegistry.MAX_ARGUMENT_BYTES, 64 MiB): a
    # `{"s": "…"}` of exactly that many bytes reaches the tool; one byte more is refused with its
    # code before it is parsed, naming the tool and the bound.
    seen: list[dict[str, Any]] = []
    limit = ToolRegistry.MAX_ARGUMENT_BYTES
    assert limit == 64 * 1024 * 1024
    arguments = '{"s": "' + "a" * (limit - len('{"s": ""}') + past) + '"}'
    assert len(arguments.encode()) == limit + past
    result = await echo_registry(seen).run("echo", arguments, CTX)
    if past:
        assert result.error_code == "TOOL_ARGUMENTS_TOO_LARGE" and seen == []
        assert result.error_message == f"echo arguments exceed {limit} bytes"
    else:
        assert not result.is_error and len(seen[0]["s"]) == limit - len('{"s": ""}')
