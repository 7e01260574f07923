""":func:`tools.schema_shape.schema_problem`: the keywords whose shape every draft a provider
reads fixes are checked, and a schema it refuses is refused by JSON Schema's meta-schema too
(checked against ``jsonschema``'s drafts 7 and 2020-12 when the package is installed)."""

from __future__ import annotations

from typing import Any

import pytest

from tools.schema_shape import schema_problem

try:
    import jsonschema
except ImportError:  # (the meta-schema half is skipped)
    jsonschema = None


def meta_refuses(schema: Any) -> list[str]:
    """The drafts whose meta-schema refuses ``schema``."""
    refused = []
    for draft in (jsonschema.Draft7Validator, jsonschema.Draft202012Validator):
        try:
            draft.check_schema(schema)
        except jsonschema.SchemaError:
            refused.append(draft.__name__)
    return refused


REFUSED = [
    ({"required": ["a", 5]}, "#/required: a list of property names, not a list holding a number"),
    ({"required": ["a", "a"]}, "#/required: a list of property names, not one naming 'a' twice"),
    ({"type": ["string", "string"]}, "#/type: a list of JSON types, not one naming 'string' twice"),
    ({"items": []}, "#/items: a schema or a non-empty list of schemas, not an empty list"),
    ({"$ref": 5}, "#/$ref: a reference is a string, not a number"),
    ({"properties": {"a": {"$ref": ["#"]}}}, "#/properties/a/$ref: a reference is a string, not an array"),
    ({"dependencies": {"a": 5}}, "#/dependencies/a: a schema or a list of property names, not a number"),
    ({"dependencies": {"a": ["b", "b"]}}, "#/dependencies/a: a list of property names, not one naming 'b' twice"),
    ({"dependencies": []}, "#/dependencies: an object, not an array"),
    ({"minItems": "2"}, "#/minItems: a count (an integer of 0 or more), not a string"),
    ({"maxLength": -1}, "#/maxLength: a count (an integer of 0 or more), not a number"),
    ({"minProperties": 1.5}, "#/minProperties: a count (an integer of 0 or more), not a number"),
    ({"maxItems": True}, "#/maxItems: a count (an integer of 0 or more), not a boolean"),
    ({"items": {"minLength": None}}, "#/items/minLength: a count (an integer of 0 or more), not null"),
]
ALLOWED = [
    {"required": []}, {"required": ["a", "b"]}, {"type": ["string", "null"]}, {"items": {}},
    {"$ref": "#/$defs/a"}, {"dependencies": {"a": ["b"], "c": {"required": ["d"]}, "e": True}},
    {"minItems": 0, "maxItems": 2.0, "minLength": 3, "maxProperties": 10 ** 20},
]


@pytest.mark.parametrize(("schema", "problem"), REFUSED)
def test_a_shape_every_draft_refuses_is_named(schema: dict[str, Any], problem: str) -> None:
    found = schema_problem(schema)
    assert found is not None and found.startswith(problem), found
    if jsonschema is not None:
        assert meta_refuses(schema) == ["Draft7Validator", "Draft202012Validator"]


@pytest.mark.parametrize("schema", ALLOWED)
def test_the_neighbouring_shapes_the_drafts_allow_pass(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None
    if jsonschema is not None:
        assert meta_refuses(schema) == []
