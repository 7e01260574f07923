"""The one walk over decoded JSON values that the argument, schema and result checks share."""

from __future__ import annotations

import json

from tools.json_values import MISSING, json_kind, lone_surrogate, scalars


def test_every_key_and_leaf_is_visited_without_recursion():
    deep: object = "leaf"
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    assert list(scalars(deep)) == ["leaf"]
    value = json.loads('{"a": [1, 2.5, {"b": null}], "c": true}')
    assert sorted(map(repr, scalars(value))) == sorted(map(repr, ["a", "b", "c", 1, 2.5, None, True]))


def test_a_lone_surrogate_is_found_where_it_stands():
    assert lone_surrogate("plain é 😀") is None
    text = json.loads('"ab\\ud800c"')
    assert lone_surrogate(text) == 2
    assert lone_surrogate(json.loads('"\\ud83d\\ude00"')) is None  # a pair is one character


def test_a_values_kind_is_said_in_jsons_words():
    values = json.loads('[{}, [], "", 0, 1.5, true, false, null]')
    assert [json_kind(v) for v in values] == ["an object", "an array", "a string", "a number", "a number",
                                              "a boolean", "a boolean", "null"]
    assert json_kind({"a": 1}.get("name", MISSING)) == "missing"
