"""Whether a tool's input schema has the shape JSON Schema's meta-schema gives its keywords.

An MCP server's tool schema is passed to the providers as the server wrote it, and the
providers check it against the meta-schema before they run anything: one tool whose
``properties`` is a list, whose ``required`` is a string or whose ``type`` names no JSON type
fails every model request that offers it, in every session. :func:`schema_problem` finds the
first such keyword, walking the places that hold schemas (``properties``, ``items``, ``$defs``,
``allOf``, ``not``, …) with an explicit stack, as every walk over a server's JSON does.

Only the keywords whose values have one fixed JSON shape in every draft a provider reads
(draft 4 to 2020-12) are checked: the places of subschemas, ``type`` and ``required`` (lists of
distinct names), ``enum``, ``$ref`` (a string), ``dependencies`` (each a schema or a list of
distinct names) and the counts (``minItems``, ``maxLength``, …: an integer of 0 or more; ``2.0``
counts as one, as drafts 6 on read it). Other numbers, patterns and formats are left to the
providers (drafts differ on them: draft 4's ``exclusiveMinimum`` is a boolean, later ones a
number)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.json_values import json_kind

TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
# keywords whose value is one schema
ONE = ("additionalProperties", "additionalItems", "contains", "not", "if", "then", "else",
       "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contentSchema")
# keywords whose value is an object of schemas
MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# keywords whose value is a non-empty list of schemas
LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
# keywords whose value is a count: an integer of 0 or more
COUNTS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties",
          "maxContains", "minContains")


def _is_schema(value: Any) -> bool:
    return isinstance(value, (Mapping, bool))


def schema_problem(schema: Any) -> str | None:
    """The first keyword of ``schema`` (or of a schema inside it) whose value has a shape JSON
    Schema does not allow, as ``<JSON pointer>: <what is wrong>``; None when there is none."""
    stack: list[tuple[str, Any]] = [("#", schema)]
    while stack:
        at, sub = stack.pop()
        if isinstance(sub, bool):
            continue
        if not isinstance(sub, Mapping):
            return f"{at}: a schema is an object or a boolean, not {json_kind(sub)}"
        typ = sub.get("type")
        if "type" in sub and not (typ in TYPES if isinstance(typ, str) else isinstance(typ, list) and typ
                                  and all(isinstance(t, str) and t in TYPES for t in typ)):
            return f"{at}/type: not one of the JSON types {sorted(TYPES)} or a list of them"
        if isinstance(typ, list) and (problem := _names_problem(typ)) is not None:
            return f"{at}/type: a list of JSON types, not {problem}"
        if "required" in sub and (problem := _names_problem(sub["required"])) is not None:
            return f"{at}/required: a list of property names, not {problem}"
        if "enum" in sub and not isinstance(sub["enum"], list):
            return f"{at}/enum: a list of values, not {json_kind(sub['enum'])}"
        if "$ref" in sub and not isinstance(sub["$ref"], str):
            return f"{at}/$ref: a reference is a string, not {json_kind(sub['$ref'])}"
        for key in COUNTS:
            if key in sub and not _count(sub[key]):
                return f"{at}/{key}: a count (an integer of 0 or more), not {json_kind(sub[key])}"
        found: list[tuple[str, Any]] = []
        if "dependencies" in sub:  # (each a schema, or the names the property needs)
            value = sub["dependencies"]
            if not isinstance(value, Mapping):
                return f"{at}/dependencies: an object, not {json_kind(value)}"
            for name, v in value.items():
                place = f"{at}/dependencies/{_escaped(name)}"
                if isinstance(v, list):
                    if (problem := _names_problem(v)) is not None:
                        return f"{place}: a list of property names, not {problem}"
                elif _is_schema(v):
                    found.append((place, v))
                else:
                    return f"{place}: a schema or a list of property names, not {json_kind(v)}"
        for key in ONE:
            if key in sub:
                found.append((f"{at}/{key}", sub[key]))
        for key in MAP:
            if key in sub:
                value = sub[key]
                if not isinstance(value, Mapping):
                    return f"{at}/{key}: an object of schemas, not {json_kind(value)}"
                found.extend((f"{at}/{key}/{_escaped(name)}", v) for name, v in value.items())
        for key in LIST:
            if key in sub:
                value = sub[key]
                if not isinstance(value, list) or not value:
                    shape = "an empty list" if value == [] else json_kind(value)
                    return f"{at}/{key}: a non-empty list of schemas, not {shape}"
                found.extend((f"{at}/{key}/{i}", v) for i, v in enumerate(value))
        if "items" in sub:  # (one schema, or a non-empty list of them before 2020-12)
            items = sub["items"]
            if items == []:
                return f"{at}/items: a schema or a non-empty list of schemas, not an empty list"
            found.extend([(f"{at}/items/{i}", v) for i, v in enumerate(items)] if isinstance(items, list)
                         else [(f"{at}/items", items)])
        for place, value in found:
            if not _is_schema(value):
                return f"{place}: a schema is an object or a boolean, not {json_kind(value)}"
        stack.extend(reversed(found))
    return None


def _escaped(name: Any) -> str:
    """A property name as a JSON pointer step (RFC 6901)."""
    return str(name).replace("~", "~0").replace("/", "~1")


def _names_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a list of distinct names (``required``, a property's
    ``dependencies``); None when nothing does."""
    if not isinstance(value, list):
        return json_kind(value)
    seen: set[str] = set()
    for v in value:
        if not isinstance(v, str):
            return f"a list holding {json_kind(v)}"
        if v in seen:
            return f"one naming {v[:80]!r} twice"
        seen.add(v)
    return None


def _count(value: Any) -> bool:
    """Whether ``value`` is an integer of 0 or more (``2.0`` too, as drafts 6 on read it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value >= 0 and (isinstance(value, int) or value.is_integer())
