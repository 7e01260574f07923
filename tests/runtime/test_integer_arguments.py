"""A tool's integer arguments given as numbers with a zero fraction (``5.0``), through the tool
registry every call passes (tools/base.py): JSON Schema counts ``5.0`` as an integer, so the
tool receives the ``int``; anything else is the tool's to refuse, as it was."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec

CTX = ToolContext("p1", "ses_1", "main", "task_1", "call_1", True)
SCHEMA = {"type": "object", "properties": {
    "n": {"type": "integer", "minimum": 0}, "maybe": {"type": ["integer", "null"]},
    "x": {"type": "number"}, "s": {"type": "string"}, "items": {"type": "array", "items": {"type": "integer"}}}}


def echo_registry(seen: list[dict[str, Any]]) -> ToolRegistry:
    async def echo(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        seen.append(args)
        return ToolResult.text("ok")
    return ToolRegistry([ToolSpec("echo", "", SCHEMA, echo)])


@pytest.mark.parametrize("arguments, expected", [
    ('{"n": 5.0}', {"n": 5}), ('{"n": -0.0}', {"n": 0}), ('{"n": 1e3}', {"n": 1000}),
    ('{"maybe": 7.0}', {"maybe": 7}), ('{"maybe": null}', {"maybe": None}),
    ('{"n": -9.223372036854775808e18}', {"n": -2**63}),
    # not typed "integer" there, or not a whole number: left as sent
    ('{"x": 5.0}', {"x": 5.0}), ('{"s": "5.0"}', {"s": "5.0"}), ('{"items": [5.0]}', {"items": [5.0]}),
    ('{"n": 5.5}', {"n": 5.5}), ('{"n": true}', {"n": True}), ('{"other": 5.0}', {"other": 5.0}),
    ('{"n": 9.223372036854775808e18}', {"n": 2.0**63}), ('{"n": 1e999}', {"n": math.inf}),
])
async def test_a_whole_float_reaches_the_tool_as_an_int_only_where_the_schema_says_integer(arguments, expected):
    seen: list[dict[str, Any]] = []
    res = await echo_registry(seen).run("echo", arguments, CTX)
    assert not res.is_error, res.content
    assert seen == [expected]
    assert [type(v) for v in seen[0].values()] == [type(v) for v in expected.values()]

