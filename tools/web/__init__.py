"""The web tools (F-TOOL-8): ``web_fetch`` and ``web_search``.

- :mod:`.address`: URL shape and the public-address rule;
- :mod:`.http`: a small HTTP/1.1 client pinned to a chosen address (trio + h11);
- :mod:`.html`: HTML to Markdown / text;
- :mod:`.fetch` and :mod:`.search`: the tools.
"""

from __future__ import annotations

import ipaddress
import ssl
from typing import Sequence

from ..artifacts import ArtifactStore
from ..base import ToolSpec
from .address import SystemResolver
from .fetch import web_fetch_tool
from .search import web_search_tool


def web_tools(artifacts: ArtifactStore, *, allow_private_addresses: bool = False,
              allowed_private_networks: Sequence[str] = (), search_base_url: str | None = None,
              search_api_key_env: str | None = None, tls: ssl.SSLContext | None = None) -> list[ToolSpec]:
    """``web_fetch`` and ``web_search`` as the server config sets them up (``web`` and
    ``webSearch``): ``allow_private_addresses`` gives every fetch full access;
    ``allowed_private_networks`` (CIDR strings, checked by the config) opens only those. The two
    share one resolver, so their DNS lookups together hold a bounded number of threads."""
    networks = [ipaddress.ip_network(n, strict=False) for n in allowed_private_networks]
    resolver = SystemResolver()
    return [web_fetch_tool(artifacts, full_access=allow_private_addresses, networks=networks, tls=tls,
                           resolver=resolver),
            web_search_tool(search_base_url, search_api_key_env, tls=tls, resolver=resolver)]


__all__ = ["web_tools", "web_fetch_tool", "web_search_tool"]
