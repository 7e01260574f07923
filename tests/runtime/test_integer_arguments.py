"""A tool's integer arguments given as numbers with a zero fraction (``5.0``), through the tool
registry every call passes (tools/base.py): JSON Schema counts ``5.0`` as an integer, so the
tool receives the ``int``, at any depth the schema says so; anything else is the tool's to
refuse, as it was."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec, integers_as_int

CTX = ToolContext("p1", "ses_1", "main", "task_1", "call_1", True)
SCHEMA = {"type": "object", "properties": {
    "n": {"type": "integer", "minimum": 0}, "maybe": {"type": ["integer", "null"]},
    "x": {"type": "number"}, "s": {"type": "string"}, "items": {"type": "array", "items": {"type": "integer"}},
    "box": {"type": "object", "properties": {"w": {"type": "integer"}, "r": {"type": "number"}},
            "additionalProperties": {"type": "integer"}},
    "open": {"type": "object", "properties": {"w": {"type": "integer"}}},
    "rows": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "number"}], "items": {"type": "integer"}},
    "old_pair": {"type": "array", "items": [{"type": "number"}, {"type": "integer"}], "additionalItems": {"type": "integer"}},
    "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}


def echo_registry(seen: list[dict[str, Any]]) -> ToolRegistry:
    async def echo(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        seen.append(args)
        return ToolResult.text("ok")
    return ToolRegistry([ToolSpec("echo", "", SCHEMA, echo)])


@pytest.mark.parametrize("arguments, expected", [
    ('{"n": 5.0}', {"n": 5}), ('{"n": -0.0}', {"n": 0}), ('{"n": 1e3}', {"n": 1000}),
    ('{"maybe": 7.0}', {"maybe": 7}), ('{"maybe": null}', {"maybe": None}),
    ('{"n": -9.223372036854775808e18}', {"n": -2**63}),
    # nested where the schema says integer: in an array, an object, arrays of arrays and of objects,
    # a tuple (2020-12's prefixItems, and items as a list with additionalItems before it)
    ('{"items": [5.0, 1e3, -0.0]}', {"items": [5, 1000, 0]}),
    ('{"box": {"w": 3.0, "r": 2.0, "other": 4.0}}', {"box": {"w": 3, "r": 2.0, "other": 4}}),
    ('{"rows": [[1.0], [], [2.0, 3.0]]}', {"rows": [[1], [], [2, 3]]}),
    ('{"points": [{"x": 1.0, "y": 2.0}, {"x": 3.0}]}', {"points": [{"x": 1, "y": 2.0}, {"x": 3}]}),
    ('{"pair": [1.0, 2.0, 3.0, 4.0]}', {"pair": [1, 2.0, 3, 4]}),
    ('{"old_pair": [1.0, 2.0, 3.0]}', {"old_pair": [1.0, 2, 3]}),
    # nested but not a whole number, or not typed "integer" there: left as sent, for the tool to refuse
    ('{"items": [5.5, 2.0, true, "3.0", null, 1e999]}', {"items": [5.5, 2, True, "3.0", None, math.inf]}),
    ('{"open": {"w": 1.0, "other": 2.0}}', {"open": {"w": 1, "other": 2.0}}),
    ('{"box": [1.0]}', {"box": [1.0]}), ('{"items": {"0": 1.0}}', {"items": {"0": 1.0}}),
    ('{"either": 1.0}', {"either": 1.0}), ('{"other": [1.0]}', {"other": [1.0]}),
    # not typed "integer" there, or not a whole number: left as sent
    ('{"x": 5.0}', {"x": 5.0}), ('{"s": "5.0"}', {"s": "5.0"}),
    ('{"n": 5.5}', {"n": 5.5}), ('{"n": true}', {"n": True}), ('{"other": 5.0}', {"other": 5.0}),
    ('{"n": 9.223372036854775808e18}', {"n": 2.0**63}), ('{"n": 1e999}', {"n": math.inf}),
])
async def test_a_whole_float_reaches_the_tool_as_an_int_only_where_the_schema_says_integer(arguments, expected):
    seen: list[dict[str, Any]] = []
    res = await echo_registry(seen).run("echo", arguments, CTX)
    assert not res.is_error, res.content
    # (compared as JSON text, where 5 and 5.0 differ at every depth, as they do for the tool)
    assert [json.dumps(v, sort_keys=True) for v in seen] == [json.dumps(expected, sort_keys=True)]


def test_the_arguments_given_are_not_changed_and_what_is_unchanged_is_shared():
    args = {"box": {"w": 1.0}, "rows": [[2.0], [3.5]], "s": ["kept"]}
    out = integers_as_int(SCHEMA, args)
    assert args == {"box": {"w": 1.0}, "rows": [[2.0], [3.5]], "s": ["kept"]}
    assert type(args["box"]["w"]) is float and type(args["rows"][0][0]) is float
    assert json.dumps(out) == '{"box": {"w": 1}, "rows": [[2], [3.5]], "s": ["kept"]}'
    assert out["s"] is args["s"] and out["rows"][1] is args["rows"][1]
    same = {"x": 1.0, "items": [2.5]}
    assert integers_as_int(SCHEMA, same) is same  # nothing to convert: the very arguments


def test_arguments_nested_past_the_recursion_limit_are_converted_without_recursion():
    depth = 20_000
    schema: dict[str, Any] = {"type": "integer"}
    args: Any = 7.0
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
        args = {"x": args}
    out = integers_as_int(schema, args)
    for _ in range(depth):
        out, args = out["x"], args["x"]
    assert type(out) is int and out == 7 and type(args) is float

