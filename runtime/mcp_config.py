"""The ``mcpServers`` section of the config (F-TOOL-5): stdio MCP servers the daemon runs.

The shape other MCP clients use (``command``, ``args``, ``env``), plus what a daemon needs:
``envFrom`` (variables of the daemon's own environment passed on by name: a server sees no other
variable of it besides a small base such as ``PATH`` and ``HOME``), ``cwd``, ``enabled``, the
start-up and per-call timeouts and the restart budget. Validated by :func:`check_mcp_servers`.
"""

from __future__ import annotations

import re

import msgspec

from .credentials import KEY_IN_PLACE_OF_A_NAME, is_key_in_place_of_a_name
from .errors import shortened

SERVER_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")  # whole strings only; "__" and a trailing "_" also refused
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")


class McpServerConfig(msgspec.Struct, rename="camel", kw_only=True):
    command: str
    args: list[str] = []
    env: dict[str, str] = {}  # literal values (never logged or shown by the inventory)
    env_from: list[str] = []  # names of the daemon's environment variables passed on as they are
    cwd: str | None = None  # relative: against the daemon's working directory; None: the daemon's
    enabled: bool = True
    startup_timeout_seconds: float = 30.0  # start + initialize + the first tools/list
    call_timeout_seconds: float = 120.0  # one tools/call
    max_restarts: int = 3  # after a crash, restarts in a row (with backoff) before it stays failed


def check_mcp_servers(servers: dict[str, McpServerConfig], where: str, error: type[Exception]) -> None:
    """Raise ``error`` naming the first server entry that cannot be used."""
    for name, s in servers.items():
        key = f"{where}: mcpServers[{name[:40]!r}]"
        # (a trailing '_' would also make one name of two tools: server "a_" tool "_b" and
        # server "a" tool "__b" are both mcp__a____b)
        if not SERVER_NAME_RE.fullmatch(name) or "__" in name or name.endswith("_"):
            raise error(f"{key}: a server name is 1 to 32 ASCII letters, digits, '_' or '-', without '__' and not "
                        f"ending in '_' (its tools are named mcp__<server>__<tool>)")
        if not s.command or "\0" in s.command:
            raise error(f"{key}: command must be a non-empty program name or path")
        if any("\0" in a for a in s.args):
            raise error(f"{key}: args must not contain NUL characters")
        # (a key pasted in place of a name passed the name's check and was echoed as that name,
        # in the inventory's envFromUnset and the log: refused, never quoted, before that check
        # quotes what is no name)
        for field, names in (("envFrom", s.env_from), ("env", list(s.env))):
            for i, var in enumerate(names):
                if is_key_in_place_of_a_name(var):
                    place = f"envFrom[{i}]" if field == "envFrom" else f"the name of env's entry {i + 1}"
                    raise error(f"{key}: {place} {KEY_IN_PLACE_OF_A_NAME}")
        for var in [*s.env, *s.env_from]:
            if not ENV_NAME_RE.fullmatch(var):
                raise error(f"{key}: {var[:60]!r} is not an environment variable name")
        if any("\0" in v for v in s.env.values()):
            raise error(f"{key}: env values must not contain NUL characters")
        if s.cwd is not None and (not s.cwd or "\0" in s.cwd):
            raise error(f"{key}: cwd must be a non-empty path (or omitted)")
        for field, value, lo, hi in (("startupTimeoutSeconds", s.startup_timeout_seconds, 0.1, 3600),
                                     ("callTimeoutSeconds", s.call_timeout_seconds, 0.1, 86400),
                                     ("maxRestarts", s.max_restarts, 0, 100)):
            if not lo <= value <= hi:  # (also false for NaN)
                raise error(f"{key}: {field} must be {lo:g} to {hi:g}, not {shortened(repr(value))}")
