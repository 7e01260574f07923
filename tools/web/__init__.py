"""The web tools (F-TOOL-8).

- :mod:`.address`: URL shape and the public-address rule;
- :mod:`.http`: a small HTTP/1.1 client pinned to a chosen address (trio + h11);
- :mod:`.html`: HTML to Markdown / text;
- :mod:`.fetch`: the ``web_fetch`` tool.
"""

from __future__ import annotations

from .fetch import web_fetch_tool

__all__ = ["web_fetch_tool"]
