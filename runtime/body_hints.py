"""What a request body takes at the place msgspec refused it, said after msgspec's reason.

msgspec names what it found (``Object contains unknown field `server```, ``Invalid enum value
'queue' - at `$.whenBusy```) but not what the route takes there: a client that sent a config
file's own text to ``PUT /config/files/{name}`` was told of an unknown field ``server``, and one
that sent ``whenBusy: "queue"`` had to find the two values elsewhere. The hint is read from the
body's type at the error's path: the fields of an object (``{text, expectDigest?}``, ``?`` for
one that may be left out; a tagged part as ``{type: "image", artifactId, mime}``, the shapes of a
union joined by ``or``) or the values of an enum. A place whose type says nothing more (a string,
a number, a free mapping) gets no hint. msgspec names no key of a map (``at `$[...]```):
:func:`first_refused` finds the value refused and names its place with the keys
(``$.toolPolicy['run_command'].enabled``), for a request body and a config file alike.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

import msgspec
import msgspec.inspect as mi

_AT = re.compile(r" - at `(\$[^`]*)`$")
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]")
MAX_HINT = 300  # characters of the hint at most (a body of many fields is cut with …)


def body_hint(kind: type, reason: str) -> str:
    """``; <what the body takes there>`` for msgspec's ``reason`` refusing a body decoded as
    ``kind``, or ``""`` when the place's type says nothing more than the reason."""
    at = _AT.search(reason)
    try:
        node = _walk(mi.type_info(kind), at.group(1) if at else "$")
    except (TypeError, ValueError):  # (a type msgspec.inspect cannot read: the reason alone, as before)
        return ""
    said = _said(node) if node is not None else None
    if said is None:
        return ""
    where = _named(at.group(1)) if at else "the body"
    hint = f"; {where} takes {said}"
    return hint if len(hint) <= MAX_HINT else hint[:MAX_HINT] + "…"


def fields_at(kind: type, path: str) -> list[str]:
    """The field names of the object ``kind`` has at ``path`` (``$.tools.policy['bash']``; of
    each object of a union there), ``[]`` when the place is no object the type describes."""
    try:
        node = _walk(mi.type_info(kind), path)
    except (TypeError, ValueError):
        return []
    return [f.encode_name for m in members(node) if isinstance(m, mi.StructType) for f in m.fields]


def members(node: mi.Type | None) -> tuple[mi.Type, ...]:
    """The types a place of type ``node`` may hold: each of a union's, else ``node`` itself (its
    constraints, ``Annotated[…, Meta(…)]``, looked through); none for a place the type does not
    describe."""
    while isinstance(node, mi.Metadata):
        node = node.type
    if node is None:
        return ()
    return node.types if isinstance(node, mi.UnionType) else (node,)


def first_refused(data: Any, kind: Any, path: str) -> str | None:
    """msgspec's reason for the first value in ``data`` (decoded JSON) that ``kind`` refuses,
    placed at its path with the keys of maps named (``$.mcpServers['docs'].command``,
    ``$.toolPolicy['run_command']``), where msgspec's own reason says ``$[...]``; None if none is
    refused."""
    try:
        msgspec.convert(data, kind)
        return None
    except msgspec.ValidationError as exc:
        reason = str(exc)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType) and data is not None:
        # (`X | None`, a body's `X | None | UNSET`: what is in X; the reason stays the union's)
        rest = [a for a in args if a is not type(None) and a is not msgspec.UnsetType]
        if len(rest) == 1:
            kind = rest[0]
            origin, args = typing.get_origin(kind), typing.get_args(kind)
    children: list[tuple[Any, Any, str]] = []
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct) and isinstance(data, dict):
        children = [(data[f.encode_name], f.type, f"{path}.{f.encode_name}")
                    for f in msgspec.structs.fields(kind) if f.encode_name in data]
    elif origin is dict and isinstance(data, dict):
        children = [(value, args[1], f"{path}[{str(key)[:40]!r}]") for key, value in data.items()]
    elif origin is list and isinstance(data, list):
        children = [(value, args[0], f"{path}[{i}]") for i, value in enumerate(data)]
    for value, sub, sub_path in children:
        found = first_refused(value, sub, sub_path)
        if found is not None:
            return found
    # refused here, not below: msgspec's reason, its path (`$` for this value) made whole
    return reason.replace(" - at `$", f" - at `{path}", 1) if " - at `$" in reason else f"{reason} - at `{path}`"


def _named(path: str) -> str:
    """A path as the client wrote the place: ``content[0]`` for ``$.content[0]``."""
    return path[2:] if path.startswith("$.") else path


def _walk(node: mi.Type | None, path: str) -> mi.Type | None:
    """The type at ``path`` (``$.a[0]['k'].b``) under ``node``; None when the path leaves what
    the type describes."""
    rest = path[1:]
    while rest and node is not None:
        m = _SEGMENT.match(rest)
        if m is None:
            return None
        rest = rest[m.end():]
        node = _step(node, field=m.group(1), index=m.group(2), key=m.group(3))
    return node


def _step(node: mi.Type, *, field: str | None, index: str | None, key: str | None) -> mi.Type | None:
    if isinstance(node, mi.Metadata):
        return _step(node.type, field=field, index=index, key=key)
    if isinstance(node, mi.UnionType):
        members = [m for m in node.types if not isinstance(m, mi.NoneType)]
        structs = [m for m in members if isinstance(m, mi.StructType)]
        if field is not None and structs and all(s.tag_field == field for s in structs):
            return mi.LiteralType(values=tuple(s.tag for s in structs))  # (the tag: which shapes there are)
        found = [t for t in (_step(m, field=field, index=index, key=key) for m in members) if t is not None]
        return found[0] if len(found) == 1 else (mi.UnionType(types=tuple(found)) if found else None)
    if field is not None and isinstance(node, mi.StructType):
        if field == node.tag_field:
            return mi.LiteralType(values=(node.tag,))
        return next((f.type for f in node.fields if f.encode_name == field), None)
    if index is not None and isinstance(node, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return node.item_type
    if index is not None and isinstance(node, mi.TupleType):
        i = int(index)
        return node.item_types[i] if i < len(node.item_types) else None
    if key is not None and isinstance(node, mi.DictType):
        return node.value_type
    return None


def _said(node: mi.Type) -> str | None:
    """The fields of an object, the values of an enum, or the shapes of a union of them."""
    if isinstance(node, mi.Metadata):
        return _said(node.type)
    if isinstance(node, mi.StructType):
        return _fields(node)
    if isinstance(node, mi.LiteralType):
        return " or ".join(repr(v) for v in node.values)
    if isinstance(node, mi.UnionType):
        members = [m for m in node.types if not isinstance(m, mi.NoneType)]
        said = [_said(m) for m in members]
        if said and all(s is not None for s in said):
            return " or ".join(s for s in said if s is not None)
    return None


def _fields(node: mi.StructType) -> str:
    if not node.fields and not node.tag_field:
        return "no field: {} or no body"
    names = [f'{node.tag_field}: "{node.tag}"'] if node.tag_field else []
    names += [f.encode_name if f.required else f"{f.encode_name}?" for f in node.fields]
    return "{" + ", ".join(names) + "}"
