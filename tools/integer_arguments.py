"""A tool's integer arguments sent as whole floats (``5.0``), taken as the ``int`` where the tool's
JSON schema says the place is an integer.

JSON Schema counts ``5.0`` as an integer (draft 2019-09 on) and models often send one; a tool
(or MCP server) that reads it as a float breaks on it. The schema is followed to the place of
each number: an object's ``properties`` (``additionalProperties`` for the keys they do not
name), an array's ``items`` (``prefixItems``, or ``items`` as a list with ``additionalItems``),
a local ``$ref`` (``#``, ``#/$defs/…``, ``#/definitions/…``, any JSON pointer into the schema),
and ``allOf``, ``anyOf`` and ``oneOf``.

What a place admits is worked out on three levels, *no number* < *integers only* < *any number*:
a schema's own ``type`` gives one (no ``type`` or one it does not know: any number); the
schemas that all apply (the schema itself, its ``$ref``, each ``allOf`` branch) give the lowest
of theirs; an ``anyOf`` or ``oneOf`` gives the highest of its branches'. A whole float is
converted where the place comes out *integers only*: typed ``integer`` somewhere that must hold,
and no branch that may hold allows ``5.5`` there. Everything else is left as sent, for the
tool's own check: ``5.5``, booleans, strings, infinities, whole floats past 64 bits, a place a
non-local ``$ref`` decides, and ``patternProperties``, ``if``/``then``/``else``, ``not``,
``$dynamicRef`` (not followed: they count as allowing any number).

Both walks keep their own stacks (arguments and schemas nest past the interpreter's recursion
limit). A schema that comes back to itself through ``$ref`` adds nothing the second time; a
place whose schema takes more than :data:`PLACE_STEPS` steps or :data:`ALTERNATIVES`
alternatives to work out, or any place once the call has spent :data:`CALL_STEPS`, counts as
allowing anything (nothing under it is converted)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

NONE, INTEGER, NUMBER = 0, 1, 2  # what a place admits of numbers, in order
PLACE_STEPS = 2_000  # schemas looked at to work out one place
ALTERNATIVES = 64  # ways (anyOf/oneOf branches multiplied out) one place may be matched
CALL_STEPS = 200_000  # schemas looked at for one call's arguments, in all

# A place's schema, as the walk carries it: a schema of the tool's (a mapping or a boolean) or,
# below composed schemas, the ways the place may be matched: a tuple of ways, each a tuple of
# schemas that must all hold.
_Ways = tuple[tuple[Any, ...], ...]
_Place = tuple[Any, "str | int"]  # (the place holding it or None, its key there)

# An array index in a JSON pointer (RFC 6901): ASCII digits, no leading zero; 18 digits at most, past
# any list (and int() of thousands of digits raises).
_INDEX = re.compile(r"0|[1-9][0-9]{0,17}")


def integers_as_int(schema: Mapping[str, Any], args: Mapping[str, Any]) -> Mapping[str, Any]:
    """``args`` with each whole float at a place the schema admits only integers at taken as that
    ``int`` (see the module). ``args`` is not changed: the objects and arrays holding a converted
    number are copies, the rest is shared."""
    ways = _Resolver(schema)
    found: list[tuple[_Place, int]] = []
    stack: list[tuple[_Place | None, Any, Any]] = [(None, schema, args)]
    while stack:
        place, sub, value = stack.pop()
        if type(value) is float:
            if place and value.is_integer() and -(2.0 ** 63) <= value < 2.0 ** 63 and ways.numbers(sub) == INTEGER:
                found.append((place, int(value)))
        elif isinstance(value, Mapping):
            held = ways.of(sub, "object")
            if held is not None:
                stack.extend(((place, key), _child(held, _property, key), v) for key, v in value.items())
        elif isinstance(value, list):
            held = ways.of(sub, "array")
            if held is not None:
                stack.extend(((place, i), _child(held, _item, i), v) for i, v in enumerate(value))
    return _replaced(args, found) if found else args


def _child(ways: _Ways, step: Any, key: Any) -> Any:
    """The schema of the place ``key`` below a place matched in one of ``ways``."""
    if len(ways) == 1 and len(ways[0]) == 1:
        return step(ways[0][0], key)
    return tuple(tuple(step(s, key) for s in way) for way in ways)


def _property(schema: Mapping[str, Any], key: str) -> Any:
    props = schema.get("properties")
    if isinstance(props, Mapping) and key in props:
        return props[key]
    rest = schema.get("additionalProperties")
    return True if rest is None else rest


def _item(schema: Mapping[str, Any], i: int) -> Any:
    items = schema.get("items")
    prefix = schema.get("prefixItems", items if isinstance(items, list) else [])
    prefix = prefix if isinstance(prefix, list) else []
    if i < len(prefix):
        return prefix[i]
    after = items if isinstance(items, Mapping) else schema.get("additionalItems") if isinstance(items, list) else None
    return True if after is None else after


def _composed(schema: Mapping[str, Any]) -> bool:
    return "$ref" in schema or "allOf" in schema or "anyOf" in schema or "oneOf" in schema


def _admits(schema: Mapping[str, Any], kind: str) -> bool:
    """Whether ``schema``'s own ``type`` lets a value of JSON type ``kind`` through."""
    typ = schema.get("type")
    if isinstance(typ, str):
        return typ == kind
    if isinstance(typ, list):
        return kind in typ
    return True


def _numbers(schema: Mapping[str, Any]) -> int:
    """What ``schema``'s own ``type`` admits of numbers."""
    typ = schema.get("type")
    kinds = [typ] if isinstance(typ, str) else typ if isinstance(typ, list) else ["number"]
    return NUMBER if "number" in kinds else INTEGER if "integer" in kinds else NONE


class _Resolver:
    """The ways each place's schema may be matched, multiplied out of ``$ref``, ``allOf``,
    ``anyOf`` and ``oneOf`` within one call's schema (``root``), remembered per schema."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.budget = CALL_STEPS
        self.seen: dict[Any, _Ways | None] = {}

    def numbers(self, sub: Any) -> int:
        if isinstance(sub, Mapping) and not _composed(sub):
            return _numbers(sub)
        ways = self.expand(sub)
        if ways is None:
            return NUMBER
        # (each way: the lowest of its schemas'; the place: the highest of its ways')
        return max((min((_numbers(s) for s in way), default=NUMBER) for way in ways), default=NONE)

    def of(self, sub: Any, kind: str) -> _Ways | None:
        """The ways a value of JSON type ``kind`` may match at the place, each reduced to the
        mappings that give its children's schemas; None: none known (nothing below converted)."""
        ways = self.expand(sub)
        if ways is None:
            return None
        held = tuple(way for way in ways if all(_admits(s, kind) for s in way))
        return held or None

    def expand(self, sub: Any) -> _Ways | None:
        """``sub`` as the ways it may be matched, each a tuple of mappings without composition
        left to follow (a way no value matches, as from ``false``, is dropped); None when
        it could not be worked out within the bounds."""
        if isinstance(sub, Mapping) and not _composed(sub):
            return ((sub,),)
        if sub is True:
            return ((),)
        if not isinstance(sub, (Mapping, tuple)):
            return () if sub is False else ((),)
        key = id(sub) if isinstance(sub, Mapping) else tuple(tuple(map(id, way)) for way in sub)
        if key in self.seen:
            return self.seen[key]
        ways = self.seen[key] = self._expand(sub)
        return ways

    def _expand(self, sub: Any) -> _Ways | None:
        # A partial way: the mappings it holds, the ids of those expanded, what is left to follow.
        # (A tuple of ways in ``pending`` is a choice: the way splits, one copy per way.)
        ways = sub if isinstance(sub, tuple) else ((sub,),)
        partial: list[tuple[tuple[Any, ...], frozenset[int], list[Any]]] = [((), frozenset(), list(w)) for w in ways]
        done: list[tuple[Any, ...]] = []
        steps = 0
        while partial:
            held, expanded, pending = partial.pop()
            if not pending:
                done.append(held)
                if len(done) > ALTERNATIVES:
                    return None
                continue
            steps += 1
            self.budget -= 1
            if steps > PLACE_STEPS or self.budget < 0 or len(partial) > ALTERNATIVES:
                return None
            s, rest = pending[-1], pending[:-1]
            if s is False:
                continue  # matches nothing: the way is dropped
            if isinstance(s, tuple):  # a choice of ways
                partial.extend((held, expanded, rest + list(way)) for way in s)
                continue
            if not isinstance(s, Mapping) or id(s) in expanded:
                partial.append((held, expanded, rest))  # true, or a schema already holding here
                continue
            expanded = expanded | {id(s)}
            rest = rest + list(self._all_of(s))
            ref = s.get("$ref")
            if isinstance(ref, str):
                target = self._target(ref)
                if target is not None:
                    rest.append(target)
            choices = [c for c in (s.get("anyOf"), s.get("oneOf")) if isinstance(c, list)]
            for choice in choices:
                rest.append(tuple((branch,) for branch in choice))
            partial.append((held + (s,), expanded, rest))
        return tuple(done)

    @staticmethod
    def _all_of(s: Mapping[str, Any]) -> list[Any]:
        branches = s.get("allOf")
        return list(branches) if isinstance(branches, list) else []

    def _target(self, ref: str) -> Any:
        """The schema a local ``$ref`` (a JSON pointer after ``#``) names; None for another
        document, an anchor, or a pointer to nothing."""
        if not ref.startswith("#"):
            return None
        pointer = unquote(ref[1:])
        if pointer == "":
            return self.root
        if not pointer.startswith("/"):
            return None
        node: Any = self.root
        for token in pointer[1:].split("/"):
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and token in node:
                node = node[token]
            elif isinstance(node, list) and _INDEX.fullmatch(token) and int(token) < len(node):
                node = node[int(token)]
            else:
                return None
        return node if isinstance(node, (Mapping, bool)) else None


def _replaced(args: Mapping[str, Any], found: list[tuple[_Place, int]]) -> dict[str, Any]:
    """``args`` with the value at each place of ``found`` replaced; each object or array on the
    way to one is copied once, the rest shared."""
    out = dict(args)
    copies: dict[int, Any] = {}  # id of a place (kept alive by ``found``) -> the copy there
    for place, number in found:
        way = []
        link: _Place | None = place[0]
        while link is not None:
            way.append(link)
            link = link[0]
        node, original = out, args
        for link in reversed(way):
            original = original[link[1]]  # type: ignore[index]
            copy = copies.get(id(link))
            if copy is None:
                copy = copies[id(link)] = dict(original) if isinstance(original, Mapping) else list(original)
                node[link[1]] = copy
            node = copy
        node[place[1]] = number
    return out
