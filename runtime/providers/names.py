"""Native tool names: what a provider sees instead of an internal capability id (F-MOD-3).

All three wire protocols accept tool names matching ``^[A-Za-z0-9_-]{1,64}$``. An internal id
that already matches is sent as is. Any other id (an MCP id such as ``mcp__srv__tool.with.dots``,
non-ASCII, longer than 64 characters) is sent under a *digest alias*::

    <readable part, at most 39 chars> "_" <first 24 hex digits of sha256(id)>

The alias is a pure function of the id, so the same id gets the same alias whatever else is
loaded and in whatever order (history compiled later still matches), and two different ids
collide only if 96 bits of SHA-256 do. An id may still be *named* as another id's alias (an MCP
server listing ``some_tool_<digest>`` beside ``some.tool``): that name stays its own, and the
other id goes under a further alias, from one table over the catalog's ids
(:func:`name_table`, a pure function of the set of ids; a request carries the further aliases
in ``tool_aliases``, for its history's calls as for its tools). A :class:`ToolNames` table
still checks its own entries and refuses a collision instead of mis-routing a call. Streamed
calls are mapped back to the internal id before a :class:`~runtime.providers.base.ModelResult`
leaves the provider; history, events and permissions only ever hold internal ids.

Call ids get the same treatment where a protocol restricts them: Anthropic takes a ``tool_use`` id
only of ``[A-Za-z0-9_-]``, the Responses API a ``call_id`` of at most 64 characters, and a session
that switched model may carry ids another server made (``functions.read_file:0``, or longer ones)
into their requests. :func:`call_id_for` gives an id outside ``[A-Za-z0-9_-]{1,64}`` a digest
alias of that form when the request is compiled; the log keeps the id as recorded. OpenAI's
Chat Completions refuses a ``tool_calls[].id`` past 40 characters (400 "string too long"), and
compatible servers make longer ones (vLLM's ``chatcmpl-tool-`` and 32 hex digits):
:func:`chat_call_id_for` sends such an id under a 40-character alias and any other as it is.
A request's :class:`CallIds` table keeps an alias from being another call's id in that request.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from .base import ProviderError

NATIVE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # whole strings only: fullmatch
CALL_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # call ids Anthropic and Responses take (fullmatch)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
DIGEST_HEX = 24
READABLE_MAX = 64 - 1 - DIGEST_HEX  # 39
CHAT_CALL_ID_MAX = 40  # the longest tool call id OpenAI's Chat Completions takes


def is_native(name: str) -> bool:
    return bool(NATIVE_NAME_RE.fullmatch(name))


def alias_for(internal_id: str) -> str:
    """The name sent to providers for ``internal_id`` (itself when it is already native)."""
    if is_native(internal_id):
        return internal_id
    return _digest_alias(internal_id, "tool")


class NameTable(NamedTuple):
    """:func:`name_table`'s answer: ``offered``, {id: the name providers are sent} for every id;
    ``further``, the few of them not sent under :func:`alias_for` (an id whose alias is another
    id's own name), {id: its further alias}."""
    offered: dict[str, str]
    further: dict[str, str]


def name_table(ids: Iterable[str]) -> NameTable:
    """The names a catalog's tool ids are sent under: a native id is its own name, whatever other
    id's alias it is (an MCP server may list a tool named ``some_tool_<digest>`` beside
    ``some.tool``); any other id goes under :func:`alias_for`, unless that name is another id's,
    then under the first free digest alias of ``"<id>#1"``, ``"<id>#2"``… Aliases are given in
    sorted order, so the table is a pure function of the set of ids (not of the order a server
    lists them in): the same catalog offers the same names after a restart."""
    return NameTable(*_unique(ids, alias_for, "tool", READABLE_MAX))


def call_id_for(call_id: str) -> str:
    """The id a call (and its result) is sent under to Anthropic (``tool_use`` ids of
    ``[A-Za-z0-9_-]`` only) and Responses (``call_id`` of 1 to 64 characters): itself when it is
    ``[A-Za-z0-9_-]{1,64}``, else a digest alias as for tool names. A pure function of the id, so
    a call and its result, and every later request, agree."""
    if CALL_ID_RE.fullmatch(call_id):
        return call_id
    return _digest_alias(call_id, "call")


def chat_call_id_for(call_id: str) -> str:
    """The id a call (and its result) is sent under to Chat Completions: itself up to
    :data:`CHAT_CALL_ID_MAX` characters (compatible servers take ids of their own form, such as
    ``functions.read_file:0``, and may expect them back), else a digest alias of that length.
    A pure function of the id, as :func:`call_id_for`."""
    if len(call_id) <= CHAT_CALL_ID_MAX:
        return call_id
    return _digest_alias(call_id, "call", CHAT_CALL_ID_MAX - 1 - DIGEST_HEX)


class CallIds:
    """The ids one request's calls and results are sent under, unique within the request.

    Each id goes as :func:`chat_call_id_for` (``chat``) or :func:`call_id_for` gives it, unless
    that is a digest alias another id of the request is sent under as it is (a server may make
    ids of any form, an alias's included): that id then takes the first free digest of
    ``"<id>#1"``, ``"<id>#2"``…, with the same readable part and length. Ids sent as they are
    keep themselves and aliases are given in sorted order, so the table is a pure function of
    the request's ids: a call and its result agree, and the same history is sent the same way.
    """

    def __init__(self, call_ids: Iterable[str], *, chat: bool = False) -> None:
        self._first = chat_call_id_for if chat else call_id_for
        readable_max = CHAT_CALL_ID_MAX - 1 - DIGEST_HEX if chat else READABLE_MAX
        self._wire = _unique(call_ids, self._first, "call", readable_max)[0]

    def wire(self, call_id: str) -> str:
        """The id ``call_id`` is sent under (one the table was not built with: its plain form)."""
        found = self._wire.get(call_id)
        return found if found is not None else self._first(call_id)


def _unique(values: Iterable[str], first: Callable[[str], str], fallback: str,
            readable_max: int) -> tuple[dict[str, str], dict[str, str]]:
    """{value: its wire form}, all different: each value ``first`` leaves as it is keeps itself;
    the others, in sorted order, take ``first``'s alias unless it is taken, then the first free
    digest alias of ``"<value>#1"``, ``"<value>#2"``… A pure function of the set of values. With
    it, the values that took such a further alias ({value: wire form}). ``first`` is called once
    a value (a digest each)."""
    firsts = {v: first(v) for v in set(values)}
    wire = {v: f for v, f in firsts.items() if f == v}
    taken = set(wire)
    further: dict[str, str] = {}
    for v in sorted(firsts.keys() - taken):
        alias, attempt = firsts[v], 0
        while alias in taken:
            attempt += 1
            alias = _digest_alias(v, fallback, readable_max, attempt)
        wire[v] = alias
        taken.add(alias)
        if attempt:
            further[v] = alias
    return wire, further


def _digest_alias(value: str, fallback: str, readable_max: int = READABLE_MAX, attempt: int = 0) -> str:
    digested = f"{value}#{attempt}" if attempt else value  # (another alias of the same value and form)
    digest = hashlib.sha256(digested.encode("utf-8")).hexdigest()[:DIGEST_HEX]
    readable = _UNSAFE.sub("_", value).strip("_")[:readable_max].rstrip("_") or fallback
    return f"{readable}_{digest}"


class ToolNames:
    """Both directions for one request: internal id <-> native name.

    Built from the request's tools (:meth:`add`) *and* every tool name in its history
    (:meth:`add_called`: a call to a tool that is no longer offered must still be sent under the
    same alias). Raises ``ProviderError("TOOL_NAME_COLLISION")`` if two offered tools would be
    sent under one name; a history name never fails the request.
    """

    def __init__(self, internal_ids: Iterable[str] = (), offered: Mapping[str, str] | None = None) -> None:
        """``offered``: the names the catalog gives tools whose :func:`alias_for` is another
        tool's (:attr:`NameTable.further`, as a request carries them in ``tool_aliases``), offered
        in this request or only called in its history."""
        self._native: dict[str, str] = {}
        self._internal: dict[str, str] = {}
        self._offered = dict(offered or {})
        for i in internal_ids:
            self.add(i)

    def add(self, internal_id: str) -> str:
        native = self._native.get(internal_id)
        if native is not None:
            return native
        native = self._offered.get(internal_id) or alias_for(internal_id)
        other = self._internal.get(native)
        if other is not None and other != internal_id:
            raise ProviderError("TOOL_NAME_COLLISION", f"tools {other!r} and {internal_id!r} map to the same native name {native!r}")
        self._native[internal_id] = native
        self._internal[native] = internal_id
        return native

    def add_called(self, name: str) -> str:
        """The native name of a tool the history called: as :meth:`add` gives it (the catalog's
        further alias first, so a tool whose alias is another tool's name keeps the name it was
        called under when neither is offered), unless another id of the request holds that name
        already, then the first free digest alias of
        ``"<name>#1"``, ``"<name>#2"``… The log keeps what a model called, and a model may call a
        name it was not offered, an alias among them (``mcp__srv__some_tool_<digest>`` for the
        deferred ``mcp__srv__some.tool``, say): that name beside the tool's own id, or beside the
        tool once offered, made every later request of the session fail. Offered tools are added
        first, so they keep their names; the history is added in order, so a session's earlier
        calls keep theirs from one request to the next."""
        native = self._native.get(name)
        if native is not None:
            return native
        native, attempt = self._offered.get(name) or alias_for(name), 0
        while native in self._internal:
            attempt += 1
            native = _digest_alias(name, "tool", READABLE_MAX, attempt)
        self._native[name] = native
        self._internal[native] = name
        return native

    def native(self, internal_id: str) -> str:
        return self.add(internal_id)

    def internal(self, native_name: str) -> str:
        """The internal id of a name the model called; an unknown name is returned unchanged
        (the tool registry then answers it as an unknown tool)."""
        return self._internal.get(native_name, native_name)

    @property
    def aliased(self) -> dict[str, str]:
        """{native alias: internal id} for the ids that needed an alias (for diagnostics)."""
        return {n: i for i, n in self._native.items() if n != i}


def describe(tool: dict[str, Any], native: str) -> str:
    """A tool's description, naming its capability id when it travels under an alias."""
    desc = str(tool.get("description") or "")
    if native != tool["name"]:
        return f"[capability id: {tool['name']}] {desc}".rstrip()
    return desc
