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
    ('{"either": 1.0}', {"either": 1}), ('{"other": [1.0]}', {"other": [1.0]}),
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



# Composed schemas, the shapes generators write: Pydantic's Optional[int] and Optional[Model]
# (anyOf with null), $defs and draft-7 definitions, a recursive model, allOf with a constraint.
DEFS = {"$defs": {
    "Count": {"type": "integer"}, "Ratio": {"type": "number"}, "Alias": {"$ref": "#/$defs/Count"},
    "Point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "number"}}},
    "Node": {"type": "object", "properties": {"v": {"$ref": "#/$defs/Count"},
                                               "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}},
    "Loop": {"$ref": "#/$defs/Loop2"}, "Loop2": {"$ref": "#/$defs/Loop"},
    "Self": {"anyOf": [{"$ref": "#/$defs/Self"}, {"type": "integer"}]},
    "a/b~c": {"type": "integer"}},
    "definitions": {"Old": {"type": "integer"}},
    "type": "object", "properties": {
        "count": {"$ref": "#/$defs/Count"}, "alias": {"$ref": "#/$defs/Alias"}, "old": {"$ref": "#/definitions/Old"},
        "escaped": {"$ref": "#/$defs/a~1b~0c"}, "encoded": {"$ref": "#/$defs/a~1b~0c".replace("~0", "%7E0")},
        "ratio": {"$ref": "#/$defs/Ratio"},
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "choice": {"oneOf": [{"$ref": "#/$defs/Count"}, {"type": "string"}]},
        "loose": {"anyOf": [{"type": "integer"}, {"type": "number"}]},
        "untyped": {"anyOf": [{"type": "integer"}, {"minimum": 0}]},
        "listed": {"type": ["integer", "number"]},
        "nested_any": {"anyOf": [{"anyOf": [{"type": "integer"}, {"type": "null"}]}, {"type": "boolean"}]},
        "both": {"allOf": [{"type": "number"}, {"type": "integer", "minimum": 0}]},
        "bounded": {"allOf": [{"$ref": "#/$defs/Ratio"}, {"maximum": 10}]},
        "at": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]},
        "shape": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "array", "items": {"type": "number"}}]},
        "either_point": {"anyOf": [{"$ref": "#/$defs/Point"},
                                   {"type": "object", "properties": {"x": {"type": "number"}}}]},
        "points": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]}},
        "tree": {"$ref": "#/$defs/Node"}, "ref_and_type": {"$ref": "https://example.com/x.json", "type": "integer"},
        "far": {"$ref": "https://example.com/count.json"}, "anchor": {"$ref": "#count"},
        "missing": {"$ref": "#/$defs/Nothing"}, "loop": {"$ref": "#/$defs/Loop"}, "self": {"$ref": "#/$defs/Self"},
        "never": {"anyOf": [{"type": "integer"}, False]}, "root": {"$ref": "#"}}}


@pytest.mark.parametrize("arguments, expected", [
    # converted: the place admits integers only, through $ref, anyOf/oneOf with no branch of any number, allOf
    ('{"count": 5.0, "alias": 6.0, "old": 7.0}', {"count": 5, "alias": 6, "old": 7}),
    ('{"escaped": 1.0, "encoded": 2.0}', {"escaped": 1, "encoded": 2}),
    ('{"maybe": 5.0}', {"maybe": 5}), ('{"maybe": null}', {"maybe": None}),
    ('{"choice": 3.0, "nested_any": 4.0, "never": 8.0}', {"choice": 3, "nested_any": 4, "never": 8}),
    ('{"both": 9.0}', {"both": 9}),
    ('{"at": {"x": 1.0, "y": 2.0}}', {"at": {"x": 1, "y": 2.0}}),
    ('{"shape": {"x": 1.0}}', {"shape": {"x": 1}}), ('{"shape": [1.0]}', {"shape": [1.0]}),
    ('{"points": [{"x": 1.0}, null, {"x": 2.0, "y": 3.0}]}', {"points": [{"x": 1}, None, {"x": 2, "y": 3.0}]}),
    ('{"tree": {"v": 1.0, "kids": [{"v": 2.0, "kids": [{"v": 3.0}]}]}}',
     {"tree": {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}}),
    ('{"ref_and_type": 4.0}', {"ref_and_type": 4}), ('{"root": {"count": 5.0}}', {"root": {"count": 5}}),
    # left as sent: a branch that allows any number, or untyped; a non-local, anchored or missing
    # $ref; a cycle; not a whole number
    ('{"ratio": 1.0, "loose": 2.0, "untyped": 3.0, "listed": 4.0}', {"ratio": 1.0, "loose": 2.0, "untyped": 3.0, "listed": 4.0}),
    ('{"bounded": 5.0, "either_point": {"x": 6.0}}', {"bounded": 5.0, "either_point": {"x": 6.0}}),
    ('{"far": 1.0, "anchor": 2.0, "missing": 3.0}', {"far": 1.0, "anchor": 2.0, "missing": 3.0}),
    ('{"loop": 1.0, "self": 2.0}', {"loop": 1.0, "self": 2.0}),
    ('{"count": 5.5, "maybe": 2.5, "both": true, "choice": "3.0"}', {"count": 5.5, "maybe": 2.5, "both": True, "choice": "3.0"}),
])
async def test_a_whole_float_is_an_int_through_ref_all_of_and_branches_that_allow_only_integers(arguments, expected):
    seen: list[dict[str, Any]] = []

    async def echo(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        seen.append(args)
        return ToolResult.text("ok")

    res = await ToolRegistry([ToolSpec("echo", "", DEFS, echo)]).run("echo", arguments, CTX)
    assert not res.is_error, res.content
    assert [json.dumps(v, sort_keys=True) for v in seen] == [json.dumps(expected, sort_keys=True)]


def test_a_ref_chain_and_composition_past_the_recursion_limit_are_followed_without_recursion():
    depth = 1_500  # (past the interpreter's 1000, within the 2000 steps a place may take)
    defs: dict[str, Any] = {"d0": {"type": "integer"}}
    for i in range(1, depth):
        defs[f"d{i}"] = {"$ref": f"#/$defs/d{i - 1}"}
    schema = {"$defs": defs, "type": "object", "properties": {"n": {"$ref": f"#/$defs/d{depth - 1}"}}}
    assert json.dumps(integers_as_int(schema, {"n": 5.0})) == '{"n": 5}'
    inner: Any = {"type": "integer"}
    for _ in range(depth):
        inner = {"allOf": [inner]}
    assert json.dumps(integers_as_int({"properties": {"n": inner}}, {"n": 5.0})) == '{"n": 5}'


def test_a_schema_too_costly_to_work_out_converts_nothing_there_and_ends():
    # 2**40 ways (forty anyOf of two branches, all applying): past the bound, left as sent
    branches = [{"anyOf": [{"type": "integer"}, {"type": "integer", "minimum": 0}]} for _ in range(40)]
    schema = {"properties": {"n": {"allOf": branches}, "m": {"type": "integer"}}}
    assert json.dumps(integers_as_int(schema, {"n": 5.0, "m": 6.0})) == '{"n": 5.0, "m": 6}'
    # a cycle through every branch of a choice
    loops = {"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/B"}, {"$ref": "#/$defs/A"}]},
                       "B": {"oneOf": [{"$ref": "#/$defs/A"}, {"allOf": [{"$ref": "#/$defs/B"}]}]}},
             "properties": {"n": {"$ref": "#/$defs/A"}}}
    assert json.dumps(integers_as_int(loops, {"n": 5.0})) == '{"n": 5.0}'


@pytest.mark.parametrize("token", ["²", "٣", "1²", "9" * 5000, "00", "01"])
def test_a_pointer_token_of_digits_that_are_not_ascii_names_nothing(token: str) -> None:
    """A `$ref` pointer's array index is ASCII digits without a leading zero (RFC 6901): a token
    like '²' (a digit to `str.isdigit`, not to `int`) or of 5,000 digits (past `int`'s limit on
    digits) raised ValueError from the conversion of a tool call's arguments; '00' named item 0.
    Each names no item now, so the value is left as sent."""
    schema = {"type": "object", "properties": {"a": {"$ref": f"#/$defs/L/{token}"}, "b": {"$ref": "#/$defs/L/0"}},
              "$defs": {"L": [{"type": "integer"}, {"type": "integer"}]}}
    assert integers_as_int(schema, {"a": 1.0, "b": 2.0}) == {"a": 1.0, "b": 2}
