"""The names a catalog's tools are offered under (F-MOD-3): each tool id's name for providers
(its own, a digest alias or a further alias), and the ids the names a model gives map back to."""

from __future__ import annotations

from typing import Protocol, Sequence

from runtime.providers.names import NameTable, name_table  # (imports nothing of tools: no cycle)

from .base import ToolRegistry


class ListedTools(Protocol):
    """The tools the MCP servers listed last, those of servers that are down now included
    (:class:`tools.mcp.McpServers`)."""

    def listed_tools(self) -> list[str]: ...

    def listed_tool_count(self) -> int: ...

    def listed_version(self) -> int:
        """A number that changes whenever :meth:`listed_tools` may have changed."""
        ...


class CatalogNames:
    """The names table over one registry and the MCP servers' last listings."""

    def __init__(self, registry: ToolRegistry, mcp_listed: ListedTools | None = None) -> None:
        self.registry = registry
        self.mcp_listed = mcp_listed
        self._names: tuple[set[str], NameTable, dict[str, str]] | None = None  # (_name_table's answer)
        self._names_of: tuple[int, int] | None = None  # (the versions it was last found current at)

    def known_names(self) -> set[str]:
        """The registry's tools and the MCP tools of servers that are down now (as last listed):
        the ids a digest alias a model gives is mapped back to (F-MOD-3: the log holds ids)."""
        names = {s.name for s in self.registry.all()}
        return names | set(self.mcp_listed.listed_tools()) if self.mcp_listed is not None else names

    def offered_names(self) -> dict[str, str]:
        """{id: the name providers are sent} for :meth:`known_names` (F-MOD-3): a tool's own name
        when it is native, even when it is another tool's digest alias; that other tool then goes
        under a further alias (:func:`runtime.providers.names.name_table`). Not to be changed."""
        return self._name_table()[0].offered

    def further_aliases(self) -> dict[str, str]:
        """{id: its further alias} for the few :meth:`known_names` whose digest alias is another
        tool's own name, those of a server that is down included: what a model request carries
        (``ModelRequest.tool_aliases``), so its history's calls keep their names. Not to be changed."""
        return self._name_table()[0].further

    def ids_for(self, names: Sequence[str]) -> list[str]:
        """``names`` (tool names a model gave) as tool ids: a name one of :meth:`known_names` is
        offered under (its digest or further alias) as that id, any other name unchanged. A model
        may give one where no request's table maps it back: a call of a tool it was not offered,
        a subagent's ``tools`` list, a program's ``call_tool``."""
        if all(self.registry.get(n) is not None for n in names):
            return list(names)  # (the common case: ids, and no table to look at)
        ids = self._name_table()[1]
        return [ids.get(n, n) for n in names]

    def _name_table(self) -> tuple[NameTable, dict[str, str]]:
        """:meth:`known_names`' :func:`name_table`, and {offered name: id} where the two differ,
        made again only when those names change (a digest per id: tens of milliseconds for ten
        thousand MCP tools, on every request and every name a program calls a tool by). Whether
        they may have changed is read from the registry's and the listings' versions, not from
        the names (a set of every tool, built on each call and each name a model gives)."""
        versions = (self.registry.version, self.mcp_listed.listed_version() if self.mcp_listed is not None else 0)
        if self._names is None or self._names_of != versions:
            known = self.known_names()
            if self._names is None or self._names[0] != known:
                table = name_table(known)
                self._names = (known, table, {n: i for i, n in table.offered.items() if n != i})
            self._names_of = versions
        return self._names[1], self._names[2]
