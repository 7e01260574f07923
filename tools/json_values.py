"""Walking decoded JSON values (dicts, lists, strings, numbers) without recursion.

Arguments, schemas and results come from models and servers and may nest as deep as their
parser allowed: every check over them walks with an explicit stack, here, once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def scalars(value: Any) -> Iterator[Any]:
    """Every key and every value of ``value`` that is not a mapping or a list, depth first."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        else:
            yield v


def nesting(value: Any) -> int:
    """How deep ``value`` nests: 0 for a scalar, 1 for a flat mapping or list, and so on."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, Mapping):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((c, level + 1) for c in children)
    return deepest


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone UTF-16 surrogate in ``text`` (from a ``\\ud800`` escape: not
    encodable as UTF-8), or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
"""A key's value when the key is absent (``mapping.get(key, MISSING)``): :func:`json_kind` says
it is missing, not null."""


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words: "an object", "an array", "a string", "a
    number", "a boolean", "null"; "missing" for :data:`MISSING`."""
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
