"""MCP servers over stdio (F-TOOL-5): the client (:mod:`.client`), the daemon's servers and their
tools in the registry (:mod:`.servers`), results mapped to Lens results (:mod:`.results`)."""

from .servers import McpServers, tool_id

__all__ = ["McpServers", "tool_id"]
