"""Agent tools: the catalog, policy planes, tool implementations and the executor server."""
