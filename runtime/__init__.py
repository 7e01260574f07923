"""The daemon side of Lens: CLI, supervisor and session actors, HTTP/SSE, providers."""
