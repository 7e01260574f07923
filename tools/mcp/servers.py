"""The daemon's MCP servers (F-TOOL-5): started with it, supervised, stopped with it; their tools
enter the session tool registry as ``mcp__<server>__<tool>``.

:class:`McpServers` runs every enabled server in its own task of one nursery. ``run`` reports
ready once each server has had its first start (running, or failed within its start-up timeout),
so the tools of the servers that came up are in the registry before the daemon says it listens.

A server's life: start the process, ``initialize``, ``tools/list`` (all pages), register its
tools; on ``notifications/tools/list_changed`` list again and replace them; when it exits or
breaks the protocol, withdraw its tools, record the error and its stderr tail, and start it
again after a backoff (1 s, doubling, at most 30 s), up to ``maxRestarts`` times in a row (a
run that lasted :data:`STABLE_SECONDS` resets the count); then it stays ``failed``. A call to a
tool of a server that is not running answers ``MCP_SERVER_UNAVAILABLE``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec
import trio

from events.secrets import Secrets
from runtime.config import no_home_said
from runtime.mcp_config import McpServerConfig
from runtime.stop_now import StopNow  # (imports nothing of the daemon: no cycle)
from tools.artifacts import ArtifactStore
from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec
from tools.json_values import MISSING, json_kind, lone_surrogate, nesting, scalars
from tools.schema_shape import schema_problem

from .client import Connection, Launch, McpError, RequestFailed, StderrTail, open_connection
from .results import _clean, to_tool_result

log = logging.getLogger("lens.mcp")

PREFIX = "mcp__"
BASE_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
MAX_TOOLS = 1000  # per server; more are left out (and counted)
MAX_PAGES = 100  # pages of tools/list read per listing; a list going on past them is cut (and said so)
MAX_SKIPPED = 1000  # tools left out that skippedTools names one by one; the rest are counted in one entry
MAX_TOOL_NAME = 128  # MCP's own limit on a tool name
MAX_REASON = 500  # characters of the reason a tool was left out (an invalid schema's names its place)
MAX_DESCRIPTION = 8192  # characters of a tool's description offered to the model
# (JSON written deeper than about 990 levels is refused by the JSON encoders of the SDKs: a tool
# of a schema near that failed every model request of every session offering it)
MAX_SCHEMA_DEPTH = 100  # levels of objects and lists of an input schema
# (the description is cut at MAX_DESCRIPTION, but text inside the schema was not: megabytes of it
# went with every model request of every session, and with every inventory)
MAX_SCHEMA_BYTES = 256 * 1024  # an input schema, as compact JSON
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0
# (a server announcing a change after every listing was listed again at once, without end: the
# daemon busy with it, and a log line per listing, thousands a second)
RELIST_INTERVAL = 1.0  # seconds: at least this long from one tools/list to the next one after list_changed
STABLE_SECONDS = 60.0


def tool_id(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


@dataclass
class ServerState:
    """What the inventory reports of one server."""

    name: str
    config: McpServerConfig
    status: str = "starting"  # starting | running | restarting | failed | stopped | disabled
    error: str | None = None
    stderr_tail: str = ""
    restarts: int = 0  # restarts in a row since the last stable run
    pid: int | None = None
    protocol_version: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)  # the registered ids, in the server's order
    # The ids its last listing registered, kept while it is down: tools.mcpDeferAbove counts them
    # (another server's tools do not turn eager while this one restarts or failed), and a call of
    # one's digest alias is named by its id (F-MOD-3) while the tool is out of the registry
    listed: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # tools left out, with the reason
    # The names its envFrom gives that the daemon's environment does not set (names only, never a
    # value): the server starts without them, and the inventory says which they are
    env_from_unset: list[str] = field(default_factory=list)
    list_cut: str | None = None  # why the last tools/list was not read to its end (None: it was)
    conn: Connection | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "error": self.error,
                "stderrTail": self.stderr_tail if self.status in ("failed", "restarting") else "",
                "restarts": self.restarts, "pid": self.pid, "protocolVersion": self.protocol_version,
                "serverInfo": self.server_info, "toolCount": len(self.tools), "tools": list(self.tools),
                "skippedTools": list(self.skipped), "listCut": self.list_cut, "enabled": self.config.enabled,
                "envFromUnset": list(self.env_from_unset)}


def server_env(cfg: McpServerConfig, environ: Callable[[str], str | None] = os.environ.get) -> dict[str, str]:
    """A server's whole environment: the base variables, those ``envFrom`` names (when set in the
    daemon's environment: see :func:`env_from_unset`), then ``env``'s literal values."""
    env = {k: v for k in BASE_ENV if (v := environ(k)) is not None}
    env.update({name: value for name in cfg.env_from if (value := environ(name)) is not None})
    env.update(cfg.env)
    return env


def env_from_unset(cfg: McpServerConfig, environ: Callable[[str], str | None] = os.environ.get) -> list[str]:
    """The names ``envFrom`` gives that the daemon's environment does not set, in their order
    (a name ``env`` sets too is not missing: the server has it)."""
    return [name for name in dict.fromkeys(cfg.env_from) if environ(name) is None and name not in cfg.env]


class McpServers:
    def __init__(self, configs: dict[str, McpServerConfig], registry: ToolRegistry, artifacts: ArtifactStore, *,
                 max_pages: int = MAX_PAGES, max_tools: int = MAX_TOOLS, secrets: Secrets | None = None,
                 stop_now: StopNow | None = None) -> None:
        """``secrets``: the keys the daemon knows; a tool's description and input schema (text
        a server reports, which a server given a key through ``envFrom`` can quote) are
        scrubbed of them before the tool joins the registry, whence it reaches every model
        request and every answer that lists tools."""
        self.registry = registry
        self.secrets = secrets or Secrets()
        # The daemon's second stop signal: a server still running at it is killed at once.
        self.stop_now = stop_now if stop_now is not None else StopNow()
        self.artifacts = artifacts
        self.max_pages, self.max_tools = max_pages, max_tools
        self.servers = {name: ServerState(name, c, status="starting" if c.enabled else "disabled",
                                          env_from_unset=env_from_unset(c))
                        for name, c in configs.items()}
        self._listings = 0  # (see :meth:`listed_version`)
        registry.on_unknown = self._unknown_tool

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run every enabled server until cancelled; ready after each one's first start."""
        enabled = [s for s in self.servers.values() if s.config.enabled]
        for s in enabled:  # (once: the daemon's environment does not change while it runs)
            if s.env_from_unset:
                log.warning("MCP server %s: envFrom names %s, not set in the daemon's environment; the server "
                            "starts without %s", s.name, ", ".join(s.env_from_unset),
                            "it" if len(s.env_from_unset) == 1 else "them")
        try:
            async with trio.open_nursery() as nursery:
                first = [trio.Event() for _ in enabled]
                for server, ready in zip(enabled, first):
                    nursery.start_soon(self._supervise, server, ready)
                for ready in first:
                    await ready.wait()
                task_status.started()
                await trio.sleep_forever()  # (servers that gave up stay reported as failed)
        finally:
            for s in enabled:
                self._withdraw(s)
                s.status, s.pid, s.conn = "stopped", None, None

    async def _supervise(self, s: ServerState, first: trio.Event) -> None:
        delay = BACKOFF_FIRST
        while True:
            started_at = trio.current_time()
            await self._run_once(s, first)
            first.set()
            if trio.current_time() - started_at >= STABLE_SECONDS:
                s.restarts, delay = 0, BACKOFF_FIRST
            if s.restarts >= s.config.max_restarts:
                s.status = "failed"
                log.warning("MCP server %s failed and is not restarted (%d restart(s) used): %s",
                            s.name, s.restarts, s.error)
                return
            s.status = "restarting"
            log.warning("MCP server %s failed (%s); restarting in %.0f s", s.name, s.error, delay)
            await trio.sleep(delay)
            s.restarts += 1
            delay = min(delay * 2, BACKOFF_MAX)

    async def _run_once(self, s: ServerState, first: trio.Event) -> None:
        """One life of the server, from start to exit; records why it ended in ``s.error``."""
        cfg = s.config
        stderr = StderrTail(self.secrets)
        refresh_box = [trio.Event()]  # (replaced after each refresh)

        def on_notification(method: str, params: Any) -> None:
            if method == "notifications/tools/list_changed":
                refresh_box[0].set()

        # (only a ``~`` that begins the path as written is a home directory: pathlib's expanduser
        # drops a leading ``./`` first, and raised out of this task for a ``~user`` with no home)
        cwd = os.path.expanduser(cfg.cwd) if cfg.cwd else None
        launch = Launch([cfg.command, *cfg.args], server_env(cfg), cwd)
        s.status, s.error = ("starting" if not first.is_set() else "restarting"), None
        deadline = trio.current_time() + cfg.startup_timeout_seconds
        try:
            if cwd is not None and cwd.startswith("~"):
                raise McpError("MCP_START_FAILED", f"working directory {cfg.cwd!r}: {no_home_said(cfg.cwd)}")
            async with open_connection(launch, startup_timeout=cfg.startup_timeout_seconds,
                                       on_notification=on_notification, stderr=stderr,
                                       secrets=self.secrets, stop_now=self.stop_now) as conn:
                s.conn, s.pid = conn, conn.proc.pid
                s.protocol_version, s.server_info = conn.protocol_version, _short_info(conn.server_info, self.secrets)
                try:
                    with trio.fail_at(deadline):  # (one start-up timeout for initialize and tools/list)
                        tools = await self._list_tools(s, conn)
                except trio.TooSlowError:
                    raise McpError("MCP_START_FAILED", "tools/list not answered within the start-up timeout "
                                   f"({cfg.startup_timeout_seconds:g} s)") from None
                listed_at = trio.current_time()
                self._register(s, tools)
                s.status, s.stderr_tail = "running", ""
                log.info("MCP server %s running: %d tool(s)", s.name, len(s.tools))
                first.set()
                while True:
                    async with trio.open_nursery() as wait:
                        async def closed() -> None:
                            await conn.closed.wait()
                            wait.cancel_scope.cancel()

                        async def changed() -> None:
                            await refresh_box[0].wait()
                            wait.cancel_scope.cancel()
                        wait.start_soon(closed)
                        wait.start_soon(changed)
                    if conn.closed.is_set():
                        raise McpError("MCP_SERVER_UNAVAILABLE", conn.close_reason)
                    with trio.move_on_at(listed_at + RELIST_INTERVAL):  # (changes meanwhile: one listing)
                        await conn.closed.wait()
                    if conn.closed.is_set():
                        raise McpError("MCP_SERVER_UNAVAILABLE", conn.close_reason)
                    refresh_box[0] = trio.Event()
                    listed_at = trio.current_time()
                    try:
                        with trio.fail_after(cfg.call_timeout_seconds):
                            tools = await self._list_tools(s, conn)
                    except trio.TooSlowError:
                        raise McpError("MCP_SERVER_UNAVAILABLE", "tools/list (after list_changed) not answered "
                                       f"within {cfg.call_timeout_seconds:g} s") from None
                    except RequestFailed as exc:
                        # (an answer, not a broken connection: a cursor gone stale as the list
                        # changed between two pages is refused so, and the server announces the
                        # change again. Stopping it would end every call in flight and spend a
                        # restart; its tools stay as last listed until a listing succeeds.)
                        s.error = (f"tools/list after list_changed failed: {self.secrets.cut(exc.message, 500)}; the tools "
                                   "listed before are kept")
                        log.warning("MCP server %s: %s", s.name, s.error)
                        continue
                    self._withdraw(s)
                    self._register(s, tools)
                    s.error = None
                    log.info("MCP server %s changed its tools: %d tool(s)", s.name, len(s.tools))
        except* McpError as group:  # (raised inside the connection's nursery: grouped)
            s.error = _first(group).message
        except* Exception as group:  # a defect: this server fails, the daemon goes on
            log.error("MCP server %s: unexpected failure", s.name, exc_info=_first(group))
            s.error = f"internal error ({type(_first(group)).__name__}); see the daemon's log"
        finally:
            self._withdraw(s)
            s.conn, s.pid, s.list_cut = None, None, None
            s.stderr_tail = stderr.text()

    async def _list_tools(self, s: ServerState, conn: Connection) -> list[Any]:
        """Every page of the server's tool list, at most :attr:`max_pages` of them and none after
        the one that reached :attr:`max_tools` tools. A list cut there is said in ``s.list_cut``
        (the inventory's ``listCut``) and logged when the cut starts or changes: the tools on the
        unread pages are unknown, so ``skippedTools`` cannot name them.

        A page whose ``nextCursor`` is empty ends the list, as one without it does (servers write
        ``""`` for "no more pages", and a client's ``while (cursor)`` reads it so). A cursor the
        server gave already ends it too, said in ``s.list_cut``: asked for again, it would answer
        the pages read already, round and round until the page limit, every tool "listed twice"."""
        tools: list[Any] = []
        cursor: Any = None
        given: list[Any] = []  # the cursors the server gave (a list: a cursor that is no string may be unhashable)
        pages = 0
        while True:
            try:
                page = await conn.request("tools/list", {"cursor": cursor} if cursor is not None else {})
            except RequestFailed:
                if cursor is None and "tools" not in conn.capabilities:
                    _say_cut(s, None)
                    return []  # (a server that offers no tools, and says so: up, with none)
                raise
            if not isinstance(page, dict) or not isinstance(page.get("tools"), list):
                raise McpError("MCP_START_FAILED", "tools/list answered without a list of tools")
            tools += page["tools"]
            pages += 1
            cursor = page.get("nextCursor")
            if cursor is None or cursor == "":
                _say_cut(s, None)
                return tools
            if cursor in given:
                # (worded as the cut at a limit is; the cursor quoted as JSON, a number being no
                # string, or, an array or an object, named: one nested deep would not be written)
                said = self.secrets.cut(_clean(json.dumps(cursor, ensure_ascii=False) if isinstance(
                    cursor, (str, int, float)) else json_kind(cursor)), 100, "…")
                _say_cut(s, f"tools/list was read up to a cursor the server gave again, {said} ({pages} page(s), "
                            f"{len(tools)} tool(s)); asked for, it would list the pages read again: their tools "
                            f"are available")
                return tools
            given.append(cursor)
            if len(tools) >= self.max_tools or pages >= self.max_pages:
                break
        limit = f"{self.max_tools} tools" if len(tools) >= self.max_tools else f"{self.max_pages} pages"
        _say_cut(s, f"tools/list was read up to {limit} ({pages} page(s), {len(tools)} tool(s)); the server "
                    f"offered more pages, which were not read: their tools are not available")
        return tools

    # ------------------------------------------------------------------ the registry

    def _register(self, s: ServerState, tools: list[Any]) -> None:
        """Enter the server's usable tools into the registry; the others go to ``skippedTools``
        with the reason. A tool named as another tool's digest alias (F-MOD-3) is entered too: its
        name is its own, and the other tool is offered under a further alias
        (:meth:`tools.catalog_names.CatalogNames.offered_names`)."""
        s.tools, s.skipped = [], []
        seen: set[str] = set()
        untold = 0  # tools left out past MAX_SKIPPED (a page of a million tools made an inventory of as many)

        def skip(label: str, reason: str) -> None:
            nonlocal untold
            if len(s.skipped) < MAX_SKIPPED:
                s.skipped.append({"name": self.secrets.cut(_clean(label), MAX_TOOL_NAME),
                                  "reason": self.secrets.cut(_clean(reason), MAX_REASON)})
            else:
                untold += 1
        for i, raw in enumerate(tools):
            if len(s.tools) >= self.max_tools and len(s.skipped) >= MAX_SKIPPED:
                untold += len(tools) - i  # (all past the tool limit: not looked at one by one)
                break
            name = raw.get("name", MISSING) if isinstance(raw, dict) else None
            label = name if isinstance(name, str) else f"#{i}"
            reason = _unusable(raw, name, seen)
            schema: Any = None
            if reason is None:
                # Scrubbed before it is checked: the reason names a place in it as a JSON pointer,
                # which writes a key's `/` and `~` escaped, where no scrub finds the key again.
                # (After the nesting check: the scrub recurses.)
                schema = self.secrets.scrub(raw["inputSchema"]) if self.secrets else raw["inputSchema"]
                reason = _schema_unusable(schema)
            if reason is None and len(s.tools) >= self.max_tools:
                reason = f"more than {self.max_tools} tools"
            if reason is not None:
                skip(label, reason)
                continue
            seen.add(name)
            annotations = raw.get("annotations") if isinstance(raw.get("annotations"), dict) else {}
            text = [v for v in (raw.get("description"), raw.get("title")) if isinstance(v, str) and v]
            # (text a provider and the inventory send as JSON: a lone surrogate made every model
            # request of every session fail, and GET /tools/inventory answer 500)
            # (scrubbed before the cut: a key the cut would split is replaced whole)
            description = self.secrets.cut(_clean((text or [f"{name} (MCP server {s.name})"])[0]), MAX_DESCRIPTION)
            spec = ToolSpec(
                name=tool_id(s.name, name),
                description=description,
                input_schema=schema, run=self._runner(s.name, name),
                replay_safe=False, read_only=annotations.get("readOnlyHint") is True, source="mcp")
            if self.registry.get(spec.name) is not None:
                skip(name, f"{spec.name} is already a tool")
                continue
            self.registry.add(spec)
            s.tools.append(spec.name)
        s.listed = list(s.tools)
        self._listings += 1
        if untold:
            s.skipped.append({"name": f"({untold} more)", "reason": f"{untold} more tools were left out; "
                              f"skippedTools names at most {MAX_SKIPPED}"})

    def _withdraw(self, s: ServerState) -> None:
        for name in s.tools:
            self.registry.remove(name)
        s.tools = []

    def _runner(self, server: str, tool: str) -> Callable[[dict[str, Any], ToolContext], Any]:
        async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return await self.call(server, tool, args)
        return run

    def _unknown_tool(self, name: str) -> ToolResult | None:
        """A call to an ``mcp__<server>__…`` name the registry does not hold."""
        for s in self.servers.values():
            if name.startswith(tool_id(s.name, "")) and s.status != "running":
                return _unavailable(s, name)
        return None

    # ------------------------------------------------------------------ calls

    async def call(self, server: str, tool: str, args: dict[str, Any]) -> ToolResult:
        s = self.servers[server]
        conn = s.conn
        if conn is None or s.status != "running":
            return _unavailable(s, tool_id(server, tool))
        timeout = s.config.call_timeout_seconds
        try:
            with trio.fail_after(timeout):
                result = await conn.request("tools/call", {"name": tool, "arguments": args})
        except trio.TooSlowError:
            return ToolResult.error("MCP_TIMEOUT", f"{tool_id(server, tool)} did not answer within {timeout:g} s "
                                    f"(the call was cancelled)")
        except McpError as exc:
            if exc.code == "MCP_SERVER_UNAVAILABLE":
                return ToolResult.error(exc.code, f"{tool_id(server, tool)}: MCP server {server!r} stopped during the "
                                        f"call ({exc.message})")
            return ToolResult.error(exc.code, f"MCP server {server!r} answered {tool!r} with an error: {exc.message}")
        return await to_tool_result(result, self.artifacts, tool_id(server, tool), self.secrets)

    def inventory(self) -> list[dict[str, Any]]:
        return [s.to_json() for s in self.servers.values()]

    def listings(self) -> dict[str, list[str]]:
        """Each server's :meth:`listed_tools` by its name (empty: it never listed a tool)."""
        return {name: list(s.listed) for name, s in self.servers.items()}

    def listed_tools(self) -> list[str]:
        """The ids of the tools the servers registered at their last listings, those of servers
        that are down now included (``tools.mcpDeferAbove`` is compared with their number)."""
        return [name for s in self.servers.values() for name in s.listed]

    def listed_tool_count(self) -> int:
        """The number of :meth:`listed_tools`, counted without building the list (each model
        request's tool list asks for it)."""
        return sum(len(s.listed) for s in self.servers.values())

    def listed_version(self) -> int:
        """A number that changes whenever a server's listing is entered: :meth:`listed_tools` may
        have changed (a server that restarts listing none changes them and not the registry)."""
        return self._listings


def _say_cut(s: ServerState, cut: str | None) -> None:
    """Set the server's ``list_cut``, logging when a cut starts or changes and when a listing is
    no longer cut (a server that keeps announcing changes does not repeat the same warning)."""
    if cut is not None and cut != s.list_cut:
        log.warning("MCP server %s: %s", s.name, cut)
    elif cut is None and s.list_cut is not None:
        log.info("MCP server %s: tools/list was read to its end: no longer cut", s.name)
    s.list_cut = cut


def _unavailable(s: ServerState, tool: str) -> ToolResult:
    """``tool``: the id called (``mcp__<server>__<tool>``), named first in the message."""
    why = {"disabled": "is disabled in the config", "stopped": "is stopped",
           "starting": "is starting", "restarting": "is restarting"}.get(s.status, "failed")
    detail = f": {s.error}" if s.error and s.status != "disabled" else ""
    return ToolResult.error("MCP_SERVER_UNAVAILABLE", f"{tool}: MCP server {s.name!r} {why}{detail}")


def _unusable(raw: Any, name: Any, seen: set[str]) -> str | None:
    if not isinstance(raw, dict):
        return "not an object"
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_TOOL_NAME:
        # (the name a skipped entry shows is cut to the limit: the length says why it was refused)
        has = (f"this one is {json_kind(name)}" if not isinstance(name, str)
               else f"this one has {len(name)}" if name else "this one is empty")
        return f"a tool name is a string of 1 to {MAX_TOOL_NAME} characters; {has}"
    if any(ch.isspace() or not ch.isprintable() for ch in name):
        return "the name holds spaces or control characters"
    if name in seen:
        return "listed twice"
    schema = raw.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "inputSchema is not a JSON object schema (type: object)"
    if nesting(schema) > MAX_SCHEMA_DEPTH:
        return f"inputSchema nests more than {MAX_SCHEMA_DEPTH} levels deep"
    return None


def _schema_unusable(schema: dict[str, Any]) -> str | None:
    """What makes a tool's input schema (one :func:`_unusable` passed, scrubbed of the keys)
    unusable; None when nothing does."""
    if not _json_text(schema):
        return ("inputSchema holds a lone surrogate or a number that is not finite (NaN, Infinity, 1e400): "
                "not sendable as JSON")
    if len(msgspec.json.encode(schema)) > MAX_SCHEMA_BYTES:
        return f"inputSchema is larger than {MAX_SCHEMA_BYTES} bytes of JSON"
    problem = schema_problem(schema)  # (bounded: the schema is within the limits above)
    if problem is not None:
        return f"inputSchema is not a valid JSON Schema, which providers refuse: {problem}"
    return None


def _json_text(value: Any) -> bool:
    """Whether ``value`` (as Python's JSON parser read it) can be written back as strict JSON:
    no lone UTF-16 surrogate (from a ``\\ud800`` escape) and no NaN or infinite number, which
    the SDKs' encoders refuse (every model request offering the tool would fail)."""
    for v in scalars(value):
        if isinstance(v, str) and lone_surrogate(v) is not None:
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
    return True


def _first(group: BaseExceptionGroup) -> Any:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first


def _short_info(info: dict[str, Any], secrets: Secrets) -> dict[str, Any]:
    """The server's name, title and version, each scrubbed and then cut to 200 characters."""
    return {k: secrets.cut(_clean(info[k]), 200) for k in ("name", "title", "version") if k in info}
