"""``lens serve``: the daemon's root nursery and its services.

Start order: event store writer → projector → the sweep of ``artifacts/`` (files no event names,
see :mod:`runtime.artifact_sweep`) → supervisor (which wakes sessions with unfinished work) → SSE
bus → pair-file watcher → HTTP. On SIGINT/SIGTERM/SIGHUP: SSE streams end themselves
(``stream.end``), HTTP stops, actors are cancelled (an interrupted tool call is recorded on the
next wake; a running background job's end is recorded now, bounded, see :mod:`runtime.jobs`), and
the store drains every accepted append before closing; the projections then fold what it committed
after their updater stopped (waiting at most 2 s from the signal for a ``projections.db`` another
process holds, then left behind the log with a line on stderr: :meth:`ProjectionService.stopping`).
Nothing acknowledged is lost. A signal before the daemon serves ends its start-up the same way (the
projections' first catch-up at the end of the chunk it is folding). A second one, at any point of
the stop until the store has drained, stops now (:mod:`runtime.stop_now`): the stop's bounded waits
end at once (requests in progress are reset, executors and MCP servers killed, a job's last record
given up, the projections' last catch-up ended after its chunk), the store still writes what it
accepted, and the exit status is 128 + the signal's number. A third one is answered with a line
and changes nothing (SIGQUIT and SIGKILL end the daemon outright). Projections left behind because
another process holds ``projections.db`` are said on stderr after any of these stops, with how far.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import trio
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from events import types as t
from events.secrets import Secrets
from events.schema import ts_ahead
from events.store import AUTO_DICTIONARY_AFTER, EventStore
from projections.snapshots import SnapshotStore
from tools.artifacts import ArtifactStore
from tools.executor import token_fault
from tools.history import history_tools
from tools.jobs import job_tool
from tools.mcp import McpServers
from tools.web import web_tools
from tools.skills import SkillSizes, prompt_skills, skill_tool
from tools.workspace_tools import workspace_tools
from tools.registry import builtin_tools
from tools.capability_search import capability_search_tool
from tools.catalog import ToolCatalog
from tools.ptc.tool import ptc_tool

from .actor import ActorDeps
from .artifact_sweep import ArtifactSweeper, sweep_artifacts
from .api import create_app
from .stream_api import watch_streams
from .bus import Bus
from .atomicfile import why_not_written
from .config import Config, ConfigError, pair_file_path
from .credentials import config_secrets, executor_hidden_env
from .errors import LensError, ModelUnavailable
from .executors import DomainBusy, ExecutorPool, RemoteExecutor
from .gcpolicy import FreezeSurvivors
from .configfiles import ConfigFiles
from .guard import Guard
from .terminal import ScrubbedLines
from .logcli import silence_stdout
from .pairing import PairStore
from .projection_service import ProjectionService
from . import server_answers
from .head_limit import UNFINISHED_HEAD_BYTES
from .providers.base import Delta
from .prompt import (READ_LIMIT_BYTES, WORKSPACE_BUSY, Cut, NotRead, PromptCache, SkillMeta, SystemPrompt, Unusable,
                     build_system_prompts, read_text_of)
from .providers.catalog import ProviderCatalog, build_catalog
from .providers.sdk import HideUrlCredentials
from .services import Services
from .sse_socket import reset_connection
from .write_stall import WRITE_STALL_SECONDS
from .stop_now import StopNow
from .supervisor import Supervisor
from .terminal import shown, to_stderr

log = logging.getLogger("lens.daemon")
KEEP_ALIVE_SECONDS = 5.0  # an idle kept-alive HTTP connection is closed after this long


def _default_why(catalog: ProviderCatalog, config_path: Path) -> str:
    """Where the effective default model comes from, for the start-up line (F-MOD-5's chain)."""
    return {"cli": "from --model", "saved": "the saved default (PUT /api/v1/models/default)",
            "config": f"defaultModel of {config_path}"}.get(catalog.default_source, catalog.builtin_reason)


def new_id(prefix: str) -> str:
    """Opaque ids: a kind prefix and 96 random bits (ids are made here, never in reducers)."""
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclass
class ServeOptions:
    config: Config
    config_path: Path
    data_dir: Path
    host: str
    port: int
    model: str | None = None
    notes: tuple[str, ...] = ()
    # The keys to keep out of everything the daemon stores, shows and says, its start-up errors
    # and log lines included; None: those of the config's credential variables in os.environ.
    secrets: Secrets | None = None
    # The stop signals taken before the daemon's receiver opens (see HeldSignals); None: none are.
    held: "HeldSignals | None" = None
    # An SSE body write the client takes no byte of for this long resets it (write_stall.py).
    write_stall_seconds: float = WRITE_STALL_SECONDS

    def known_secrets(self) -> Secrets:
        return self.secrets if self.secrets is not None else config_secrets(self.config, os.environ)


async def serve(opts: ServeOptions, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
                stop: trio.Event | None = None, announce: Callable[[str], None] | None = None) -> int:
    """Run the daemon until ``stop`` is set (or SIGINT/SIGTERM/SIGHUP); ``task_status`` gets the bound URLs.

    Returns the exit status: 0 after a graceful stop, ``128 + N`` when a second stop signal ``N``
    made it a stop now (:func:`_signals`)."""
    cfg = opts.config
    started_ns = time.time_ns()  # (the start-up sweep of artifacts/ looks only at files older than this)
    stop = stop if stop is not None else trio.Event()  # trio.Event has no truth value
    stop_now = StopNow()  # a second stop signal: the graceful stop's waits end at once
    second: list[int] = []  # (the signal that set it)
    out = announce or _print_line
    keys = opts.known_secrets()

    def say(line: str) -> None:  # (config notes name keys of a file a client may write, and quote values)
        out(shown(keys.scrub_message(line)))
    for note in opts.notes:
        say(f"lens: {note}")
    # What the flags and the environment must hold is checked before anything is made on disk:
    # a refused start (a --model typo, an executor token not set) left an initialised data
    # directory behind, wherever a mistyped --data pointed.
    artifacts = ArtifactStore(opts.data_dir / "artifacts")  # (makes nothing until an artifact is put)
    catalog = build_catalog(cfg, cli_model=opts.model, artifacts=artifacts)
    listener: socket.socket | None = None
    try:
        try:
            catalog.check(None)
        except ModelUnavailable as exc:
            if exc.code == "MODEL_UNKNOWN" and opts.model is not None:
                raise  # a --model no provider serves: most likely a typo, refused before serving
            say(f"lens: note: the default model cannot serve ({exc.code}: {exc.message}); "
                f"sessions need a model that can")
        if opts.model is not None:
            unchecked = catalog.check_listed(opts.model)  # (MODEL_UNKNOWN: a model its provider does not list)
            if unchecked:
                say(f"lens: note: {unchecked}")
        remote = None
        if cfg.executor.address:
            token = os.environ.get(cfg.executor.token_env or "", "")
            if not token:
                raise ConfigError(f"executor.tokenEnv {cfg.executor.token_env} is not set in the environment")
            fault = token_fault(token)
            if fault is not None:
                raise ConfigError(f"executor.tokenEnv {cfg.executor.token_env} {fault}")
            remote = RemoteExecutor(cfg.executor.address, token, cfg.executor.shared_filesystem)
        hc = server_answers.ServerConfig()
        # (in a worker thread: a name is resolved)
        listener = await trio.to_thread.run_sync(listen_socket, opts.host, opts.port, opts.data_dir, hc.backlog)
        store = EventStore.open(opts.data_dir, synchronous=cfg.log.synchronous,
                                max_event_bytes=cfg.log.max_event_bytes, compression_level=cfg.log.compression_level,
                                auto_dictionary_after=AUTO_DICTIONARY_AFTER if cfg.log.auto_dictionary else None,
                                secrets=keys)
    except BaseException:
        if listener is not None:
            listener.close()
        await catalog.aclose()
        raise
    if listener is None:  # the port was held, the data directory not (any more): the bind's own error
        store.close()
        await catalog.aclose()
        raise ListenFailed(f"cannot listen on {opts.host}:{opts.port} (Address already in use)")
    listening: socket.socket = listener  # (the server's, from here on)
    if (ahead := ts_ahead(store.opened_last_ts, store.opened_clock, store.ts_ahead_seq)) is not None:  # (never rewritten)
        say(f"lens: warning: {ahead}")
    projections: ProjectionService | None = None
    snapshots: SnapshotStore | None = None
    try:
        projections = ProjectionService(opts.data_dir, store)
        snapshots = SnapshotStore.open(opts.data_dir)
        pairs = PairStore(pair_file_path(cfg, opts.config_path))
        guard = Guard(pairs, opts.host)
        bus = Bus(store, buffer=cfg.server.sse_buffer_events)

        def on_delta(session_id: str, agent_id: str, delta: Delta) -> None:
            bus.publish_delta(session_id, agent_id, delta.kind, delta.text)

        # A project's workspace is fixed by its project.created event: once read, it is kept, so
        # that a session's model requests (whose system prompt is rebuilt every few seconds) and
        # its commands do not depend on projections.db staying readable.
        workspaces: dict[str, Path] = {}

        async def workspace_of(project_id: str) -> Path | None:
            known = workspaces.get(project_id)
            if known is not None:
                return known
            rows = await projections.query("SELECT workspace FROM projects WHERE id = ?", (project_id,))
            if not rows:
                await projections.caught_up()
                rows = await projections.query("SELECT workspace FROM projects WHERE id = ?", (project_id,))
            if not rows:
                return None
            workspaces[project_id] = ws = Path(rows[0][0])
            return ws

        executors = ExecutorPool(opts.data_dir / "executors", workspace_of, remote,
                                 local_shared_filesystem=cfg.executor.shared_filesystem,
                                 hidden_env=executor_hidden_env(cfg, os.environ), secrets=keys, stop_now=stop_now,
                                 daemon_dirs=[("data directory", opts.data_dir),
                                              ("config directory", opts.config_path.parent),
                                              ("pair file's directory", pairs.path.parent)])
        skill_sizes = SkillSizes()  # (the skills' size verdicts: the skill tool's and the system prompt's)
        tools = builtin_tools([*history_tools(projections), *workspace_tools(executors, artifacts),
                               job_tool(executors), skill_tool(executors, skill_sizes, secrets=keys),
                               *web_tools(artifacts, allow_private_addresses=cfg.web.allow_private_addresses,
                                          allowed_private_networks=cfg.web.allowed_private_networks,
                                          search_base_url=cfg.web_search.base_url,
                                          search_api_key_env=cfg.web_search.api_key_env)])
        mcp = McpServers(cfg.mcp_servers, tools, artifacts,  # (their tools join `tools` as they start)
                         secrets=store.secrets, stop_now=stop_now)
        # (the planes over the registry, F-TOOL-1..3)
        tool_catalog = ToolCatalog(tools, cfg.tools, cfg.local_ptc, mcp_listed=mcp)
        tools.add(capability_search_tool(tool_catalog))
        if tool_catalog.ptc is not None:
            tools.add(ptc_tool(tool_catalog))
        home = os.path.expanduser("~")

        async def build_prompt(project_id: str | None, wait: bool = True, busy: bool = False) -> SystemPrompt:
            """``busy``: the workspace's files are not read (a command holds them): a note stands in
            for its AGENTS.md, and its skills are left out."""
            ws = await workspace_of(project_id) if project_id else None
            workspace_file = str(ws / "AGENTS.md") if ws else None

            async def read_text(path: str) -> str | Cut | Unusable | NotRead | None:
                if project_id is not None and path == workspace_file:
                    if busy:
                        return NotRead(WORKSPACE_BUSY)
                    return await read_workspace_agents_md(executors, project_id, wait=wait)
                return await trio.to_thread.run_sync(read_home_agents_md, path)

            skills = ([SkillMeta(*meta) for meta in await prompt_skills(executors, project_id, wait=wait,
                                                                       recordable=store.codec.pack_checked,
                                                                       sizes=skill_sizes, secrets=keys)]
                      if project_id and ws and not busy else [])
            return await build_system_prompts(read_text, workspace=str(ws) if ws else None, home=home, skills=skills,
                                              secrets=store.secrets)

        async def build_prompt_now(project_id: str | None) -> SystemPrompt | None:
            # A command of any session holding the project's workspace must not hold every other
            # session's model requests for as long as it runs: the prompt built before it serves.
            try:
                return await build_prompt(project_id, wait=False)
            except DomainBusy:
                return None

        async def build_prompt_busy(project_id: str | None) -> SystemPrompt:
            # A project's first prompt while a command holds its workspace (another project's, when
            # they share the domain): nothing built before can serve, and waiting held the request
            # for as long as the command ran. The files are never read in the middle of a write.
            return await build_prompt(project_id, busy=True)

        system_prompt_for = PromptCache(build_prompt, build_now=build_prompt_now, build_busy=build_prompt_busy).get

        deps = ActorDeps(store, snapshots, catalog, tools, new_id, system_prompt_for=system_prompt_for,
                         snapshot_every=cfg.sessions.snapshot_every, idle_seconds=cfg.sessions.idle_seconds,
                         on_delta=on_delta, context=cfg.context, tool_catalog=tool_catalog, stopping=stop,
                         stop_now=stop_now, artifacts=artifacts)
        supervisor = Supervisor(deps, max_restarts=cfg.sessions.max_restarts,
                                pending=projections.sessions_with_pending_work)
        svc = Services(cfg, opts.data_dir, store, supervisor, bus, pairs, guard, projections, catalog,
                       ConfigFiles(opts.config_path, pairs.path, cfg.server.max_body_bytes, store.secrets), new_id, mcp=mcp,
                       artifacts=artifacts, write_stall_seconds=opts.write_stall_seconds)
        svc.executors = executors  # (workspace browsing, F-HAR-3)
        app = create_app(svc)
        missing = server_answers.install()  # (hypercorn's own answers in the error shape)
        if missing:
            log.warning("hypercorn's own error answers keep their empty body: %s not as expected",
                        ", ".join(missing))
        hc.graceful_timeout = 5.0
        hc.keep_alive_timeout = KEEP_ALIVE_SECONDS
        hc.h11_max_incomplete_size = UNFINISHED_HEAD_BYTES  # (the head's limit is the app's: head_limit)
        hc.accesslog = None  # request lines could carry ids; credentials never appear (headers not logged)
        hc.errorlog = logging.getLogger("lens.http.server")

        def stop_at_once(signum: int) -> None:
            second.append(signum)
            say(f"lens: {signal.Signals(signum).name} again: stopping now; requests, tool calls and model "
                f"requests in progress are cut, executors and MCP servers killed; the event log still writes "
                f"what it accepted (exit {128 + signum})")
            stop_now.set()
            projections.stop()  # (its last catch-up ends after its chunk: the next start goes on)

        def already_stopping_now(signum: int) -> None:
            # What is left of a stop now is the event log writing what it accepted (and a few
            # short bounded waits); a signal does not cut that commit, SIGQUIT and SIGKILL do.
            say(f"lens: {signal.Signals(signum).name} again: already stopping now; the event log is writing what "
                f"it accepted. SIGQUIT (Ctrl-\\) or SIGKILL ends the daemon outright (nothing acknowledged is "
                f"lost; the next start records what was cut)")

        # SIGINT and SIGTERM are the daemon's from the start: a stop before it serves (the
        # projections' first catch-up refolds the whole log after an upgrade: a minute for
        # 800,000 events) ends it as a stop while serving does. It was a traceback (SIGINT, once
        # that catch-up was done) or a kill (SIGTERM). The receiver is not one of the services:
        # it stays while they stop (an MCP server slow to exit is waited for), while the store
        # drains and the projections fold what it wrote last; a second signal meanwhile is a stop
        # now (it was recorded and ignored once the services had ended).
        async with trio.open_nursery() as receiving:
            signals: trio.CancelScope = await receiving.start(_signals, stop, stop_at_once, already_stopping_now,
                                                              opts.held)
            try:
                async with trio.open_nursery() as root:
                    await root.start(store.run)  # outlives the services: drains their last appends
                    async with trio.open_nursery() as services:
                        starting = trio.CancelScope()  # (cancelled once the daemon serves)
                        services.start_soon(_stop_starting, stop, starting, services.cancel_scope, projections)
                        await services.start(projections.run)
                        # Artifacts no event names (a kill between a file's store and its event), swept
                        # before any session wakes or request comes: nothing of ours can be storing one.
                        swept = await sweep_artifacts(artifacts, projections, store.last_seq, started_ns)
                        for line in swept.lines(str(artifacts.root)):
                            say(line)
                        # ... and again while serving: on a schedule and after a result that was not
                        # recorded, keeping every artifact whose event is still to come.
                        await services.start(ArtifactSweeper(artifacts, projections, lambda: store.last_seq, say).run)
                        # The saved default model (F-MOD-5), before sessions wake and HTTP answers.
                        saved, saved_seq = await read_saved_default(projections, store)
                        catalog.set_saved_default(saved, saved_seq)
                        if catalog.default_source == "saved":
                            try:
                                catalog.check(None)
                            except ModelUnavailable as exc:
                                say(f"lens: note: the saved default model cannot serve ({exc.code}: {exc.message}); "
                                    f"sessions need a model that can")
                        say(f"lens: default model {catalog.default_model} ({_default_why(catalog, opts.config_path)})")
                        await services.start(executors.run)
                        await services.start(mcp.run)  # (each server's first start: tools in before sessions wake)
                        await services.start(supervisor.run)
                        await services.start(bus.run)
                        services.start_soon(pairs.watch, bus.poke_all)  # (a revocation ends open streams at once)
                        services.start_soon(watch_streams, svc)
                        http_done = trio.Event()
                        http_scope = trio.CancelScope()
                        inflight = _InFlight(app)

                        async def run_http(*, task_status: trio.TaskStatus[list[str]]) -> None:
                            try:
                                with http_scope:
                                    # Serving the socket bound above (listen_socket): hypercorn's `serve`
                                    # binds its own from `bind`, and the one it is built on takes sockets.
                                    await worker_serve(wrap_app(inflight, hc.wsgi_max_body_size, "asgi"), hc,
                                                       sockets=Sockets([], [listening], []),
                                                       shutdown_trigger=stop.wait, task_status=task_status)
                            finally:
                                listening.close()  # (closed by the server's listener already, unless it never ran)
                                http_done.set()

                        binds: list[str] = await services.start(run_http)
                        guard.port = _port_of(binds[0]) if binds else opts.port
                        say(f"lens: event log at {opts.data_dir}; {store.last_seq} event(s)")
                        for b in binds:
                            say(f"lens: listening on {b}")
                        task_status.started(binds)
                        starting.cancel()  # (from here a stop is the graceful shutdown below)
                        # The provider SDKs' import, begun once the daemon serves (not waited for: a
                        # request that comes first waits for it). Begun earlier, it held the start
                        # up: both are Python of one process, which takes turns on the interpreter.
                        if catalog.sdk_import is not None:
                            services.start_soon(catalog.sdk_import.run)
                        await stop.wait()
                        projections.stopping()  # (a projections.db another process holds: waited for briefly)
                        svc.shutting_down.set()  # SSE generators end themselves
                        bus.poke_all()
                        # Requests in progress get up to graceful_timeout. Idle keep-alive connections would
                        # hold hypercorn's own shutdown for all of it (measured: 5 s for one idle client), so
                        # once nothing is in progress HTTP is stopped outright.
                        # A second stop signal cuts that wait short ("stop now").
                        began = trio.current_time()
                        with stop_now.grace(hc.graceful_timeout):
                            while inflight.active:
                                await inflight.drained.wait()
                        if inflight.active:
                            reset = inflight.reset_all()
                            log.warning("%d request(s) still in progress after %.0f s of shutdown; "
                                        "%d connection(s) reset", inflight.active, trio.current_time() - began, reset)
                        http_scope.cancel()
                        with stop_now.grace(1):
                            await http_done.wait()
                        services.cancel_scope.cancel()
                    store.close_writer()
                # (the store has drained: what the stop wrote, too)
                if (behind := await projections.last_catch_up()) is not None:
                    to_stderr(behind, keys)
                await catalog.aclose()
            finally:
                signals.cancel()
        say("lens: stopped")
        return 128 + second[0] if second else 0
    finally:
        listening.close()  # (a start that failed before the server took it; else closed already)
        if projections is not None:
            projections.close()
        if snapshots is not None:
            snapshots.close()
        store.close()


class _InFlight:
    """ASGI wrapper counting HTTP requests in progress (an SSE stream counts until it ends)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.scopes: dict[int, dict[str, Any]] = {}  # the requests in progress, by id(scope)
        self.drained = trio.Event()
        self.drained.set()

    @property
    def active(self) -> int:
        return len(self.scopes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        if not self.scopes:
            self.drained = trio.Event()
        self.scopes[id(scope)] = scope
        try:
            return await self.app(scope, receive, send)
        finally:
            del self.scopes[id(scope)]
            if not self.scopes:
                self.drained.set()

    def reset_all(self) -> int:
        """Reset the connection of every request still in progress; returns how many.

        Hypercorn writes response bytes in a shielded scope: a client that stopped reading a
        large response held that write, and so the daemon's shutdown, for as long as it lived."""
        return sum(reset_connection(scope) for scope in list(self.scopes.values()))


async def read_saved_default(projections: ProjectionService, store: EventStore) -> tuple[str | None, int]:
    """The saved default model and the seq that set it (``(None, 0)``: none): from the settings
    projection and the log past it; a scan of the log's ``default_model.set`` rows only when
    projections are stalled or unreadable."""
    got = await projections.saved_default_model()
    if got is not None:
        return got
    saved: tuple[str | None, int] = (None, 0)
    after = 0
    while page := await store.read_events(after=after, kinds=["default_model.set"], limit=1000):
        last = page[-1]
        if isinstance(last.event, t.DefaultModelSet):
            saved = (last.event.model, last.seq)
        after = last.seq
    return saved


def read_home_agents_md(path: str) -> str | Cut | Unusable | None:
    """``~/.agents/AGENTS.md`` (the Core user's own file): a regular file's text, or :class:`Cut`,
    its first :data:`READ_LIMIT_BYTES`, when it goes on past them; ``None`` when it is missing or
    not a regular file; :class:`Unusable` (the prompt names the reason in the file's place) when it
    cannot be opened or read or is not UTF-8.

    Opened without blocking and checked before reading: a FIFO there held every model request
    of every project (and the aborts waiting behind them), and a 300 MB file was read whole on
    each refresh."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):  # (no such file, or no such directory)
        return None
    except OSError as exc:
        log.warning("%s cannot be opened (%s); left out of the system prompt", path, exc.strerror)
        return Unusable(f"it cannot be opened ({exc.strerror or 'error ' + str(exc.errno)})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            log.warning("%s is not a regular file; left out of the system prompt", path)
            return None
        data = b""
        while len(data) < READ_LIMIT_BYTES:
            chunk = os.read(fd, READ_LIMIT_BYTES - len(data))
            if not chunk:
                break
            data += chunk
        # (no byte past the limit is read: its size says whether the file goes on)
        more = len(data) == READ_LIMIT_BYTES and os.fstat(fd).st_size > READ_LIMIT_BYTES
    except OSError as exc:
        log.warning("%s cannot be read (%s); left out of the system prompt", path, exc.strerror)
        return Unusable(f"it cannot be read ({exc.strerror or 'error ' + str(exc.errno)})")
    finally:
        os.close(fd)
    text = read_text_of(data, more)
    if isinstance(text, Unusable):
        log.warning("%s: %s; left out of the system prompt", path, text.reason)
    return text


# What the executor answers for an ``AGENTS.md`` that is there but that it will not read: the
# file's own doing (a link out of the workspace or a loop of links, its permissions, a failing
# disk), named in the prompt in its place. Other failures (the executor not reached) leave the
# section out, logged.
AGENTS_MD_REFUSALS = frozenset({"PATH_OUTSIDE_WORKSPACE", "TOO_MANY_LINKS", "PERMISSION_DENIED", "IO_ERROR"})


async def read_workspace_agents_md(executors: ExecutorPool, project_id: str, *,
                                   wait: bool = True) -> str | Cut | Unusable | None:
    """``<workspace>/AGENTS.md`` read through the project's executor (the workspace may be remote):
    its text, or :class:`Cut`, its first :data:`READ_LIMIT_BYTES`, when it goes on past them (the
    executor's ``read_head`` reads those bytes exactly, judged here as the user's own file is).
    ``wait=False``: :class:`DomainBusy` instead of waiting while a command holds the workspace.

    Missing file: ``None``; so is an ``AGENTS.md`` that is no regular file (a directory's listing
    is no instructions). A file that is not UTF-8, or that the executor refuses
    (:data:`AGENTS_MD_REFUSALS`: a link out of the workspace, …), is :class:`Unusable` (the prompt
    says so in its place). An executor that cannot be reached leaves the section out (logged); the
    model request goes ahead without it rather than failing.
    """
    try:
        ex = await executors.get(project_id)
        async with ex.lock.read(wait=wait):
            out = await ex.client.call("read_head", {"path": "AGENTS.md", "limit": READ_LIMIT_BYTES})
    except LensError as exc:
        if exc.code not in ("NOT_FOUND", "NOT_A_FILE"):
            log.warning("project %s: AGENTS.md not read through the executor (%s)", project_id, exc.code)
        if exc.code in AGENTS_MD_REFUSALS:
            return Unusable(f"the executor does not read it ({exc.code}: {exc.message})")
        return None
    text = read_text_of(out.data, out.result.get("more") is True)
    if isinstance(text, Unusable):
        log.warning("project %s: AGENTS.md: %s; left out of the system prompt", project_id, text.reason)
    return text


def _print_line(line: str) -> None:
    """Print one of the daemon's lines (notes, where it listens, that it stopped).

    A reader of standard output that went away (``lens serve | head -n 1``) stopped the daemon at
    its next line, with exit 0 and nothing said (the CLI takes a broken pipe as the reader's
    choice). The lines report on the daemon, they are not its work: from then on they go nowhere,
    and a warning on standard error says so. So for a standard output redirected to a file on a
    full disk: its last line ("lens: stopped") failed with ENOSPC and the daemon exited 1 (and
    what stayed in the buffer would fail again at exit, which Python reports with exit 120)."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        silence_stdout()
        log.warning("the reader of standard output went away; the daemon's lines go nowhere from now on")
    except OSError as exc:
        silence_stdout()
        log.warning("standard output cannot be written (%s); the daemon's lines go nowhere from now on",
                    why_not_written(exc))


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


async def _stop_starting(stop: trio.Event, starting: trio.CancelScope, services: trio.CancelScope,
                         projections: ProjectionService) -> None:
    """A stop before the daemon serves cancels the services it is starting (``starting`` is
    cancelled once it serves: the graceful shutdown takes over)."""
    with starting:
        await stop.wait()
        projections.stop()  # (its catch-up runs in a worker thread, which no cancellation reaches)
        services.cancel()


# The signals that stop the daemon gracefully. SIGHUP is among them: it is what a closed terminal
# (or an ssh session that ended) sends, and by default it killed the daemon outright, as a kill -9
# does (a running job recorded `lost` at the next start, the projections behind the log). Lens has
# nothing to reload on it: the pair file is watched, the config is read at start. A SIGHUP the
# daemon was started ignoring (`nohup lens serve`) stays ignored: that is what was asked for.
# SIGQUIT keeps its default (quit at once, like a kill -9; no core: the process is not dumpable).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_signals() -> tuple[int, ...]:
    """:data:`STOP_SIGNALS` but SIGHUP when this process was started ignoring it."""
    return tuple(s for s in STOP_SIGNALS if s != signal.SIGHUP or signal.getsignal(s) is not signal.SIG_IGN)


async def _signals(stop: trio.Event, stop_at_once: Callable[[int], None], already: Callable[[int], None],
                   held: "HeldSignals | None", *,
                   task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED) -> None:
    """The first of :func:`stop_signals` sets ``stop`` (a graceful stop); the second calls
    ``stop_at_once`` with its number (a second Ctrl-C: stop now, see :mod:`runtime.stop_now`);
    each later one calls ``already`` with its number, which says so and changes nothing (a third
    Ctrl-C was dropped without a word: what a stop now waits for then is mostly the store's
    commit). The receiver stays open until the store has drained and the projections have folded
    what it wrote (the caller cancels the scope it is started with then): a second signal was a
    traceback (SIGINT) or a kill (SIGTERM) once it had closed. A signal ``held`` took before the
    receiver opened counts as the first, as soon as it is open (a second one held too counts as
    the second, a third as a later one)."""
    with trio.CancelScope() as scope, trio.open_signal_receiver(*stop_signals()) as signals:
        task_status.started(scope)  # (before the daemon says it listens: a SIGTERM right after is ours)
        at_once = False

        def take(signum: int) -> None:
            nonlocal at_once
            if not stop.is_set():
                stop.set()
            elif not at_once:
                at_once = True
                stop_at_once(signum)
            else:
                already(signum)

        for signum in list(held.received) if held is not None else ():  # (came while the daemon started)
            take(signum)
        async for signum in signals:
            take(signum)


class HeldSignals:
    """The daemon's stop signals, taken from the moment ``lens serve`` begins (a context manager:
    the handlers it found are put back on exit).

    The receiver of :func:`_signals` opens once the store is open; before it, a SIGTERM or SIGHUP
    killed the process outright (a large log being opened, a slow name to resolve) and a SIGINT
    was a ``KeyboardInterrupt`` traceback wherever it fell. Held here, a signal is recorded and
    the receiver, once open, takes it for a stop: the start-up is ended as a stop while it starts
    is (exit 0, ``lens: stopped``, the store closed); a second one held as well is a stop now.
    After the receiver closes (the store has drained, the projections have folded what it wrote,
    the providers are closed) one is recorded and changes nothing: the daemon is ending.
    The handler only appends to a list: it may run between any two bytecodes of the main thread,
    inside trio's run loop too (and trio leaves SIGINT alone when a handler of ours is set).
    A signal before ``lens serve``'s code runs at all (the interpreter's start, its imports) keeps
    the system's default."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "HeldSignals":
        for sig in stop_signals():  # (before any is replaced: a SIGHUP ignored under nohup stays so)
            self._previous[sig] = signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, frame: Any) -> None:
        self.received.append(signum)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class ListenFailed(LensError):
    code = "LISTEN_FAILED"


def listen_socket(host: str, port: int, data_dir: Path, backlog: int) -> socket.socket | None:
    """The HTTP server's listening socket, bound to ``host:port`` as hypercorn binds (an IPv6
    socket for a host with a colon, ``SO_REUSEADDR``, ``TCP_NODELAY``) and listening: the one bind
    the daemon makes, before the data directory is made or opened. A port in use, an address this
    machine does not have, a name that does not resolve are ``LISTEN_FAILED`` from that bind (a
    refused start left an initialised data directory behind; with a check that let its socket go
    and a second bind by the server, a port taken in between failed after the store was open).
    When the bind fails and another process holds ``data_dir`` (a second `lens serve` of the same
    daemon, which holds the port too), ``None`` is returned: the store's ``STORE_LOCKED`` names
    that cause. The caller owns the socket (the server closes it when it stops serving)."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    sock = socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((bare, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if _held_by_another(data_dir):
            return None
        raise ListenFailed(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    except BaseException:
        sock.close()
        raise
    return sock


def _held_by_another(data_dir: Path) -> bool:
    """Whether another process holds the ``flock`` of ``data_dir``'s lock file (opened read-only:
    nothing is made; a lock taken here is let go with the descriptor)."""
    try:
        fd = os.open(data_dir / "lock", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def run(opts: ServeOptions) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    for handler in logging.getLogger().handlers:  # (basicConfig's, or one the process had)
        handler.setFormatter(ScrubbedLines("%(levelname)s %(name)s: %(message)s", opts.known_secrets()))
    logging.getLogger("httpx2").addFilter(HideUrlCredentials())  # (URLs logged without user:password@)
    with FreezeSurvivors():  # full collections walk only what is new (see runtime.gcpolicy)
        try:
            status: int = trio.run(serve, opts)
        except BaseExceptionGroup as group:
            # A failure of ours with a stable code, alone in the nurseries' groups, is reported as
            # itself (the CLI prints `lens: CODE: message`), not as a traceback of nested groups.
            leaves = _leaves(group)
            if len(leaves) == 1 and isinstance(leaves[0], LensError):
                raise leaves[0] from None
            raise
    return status


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
