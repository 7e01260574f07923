"""Fixtures of the executor suite: a real ``lens executor serve`` process on a loopback port.

``executor`` is one process per test module (spawning costs a few hundred milliseconds), serving
``workspace`` (a tmp directory; tests use their own file names in it). Its stdout and stderr go
to files so tests can check what it printed (never the token). ``client`` is an
:class:`ExecutorClient` connected to it for one test. A test that needs an executor of its own
(its own state directory, limits, a kill) takes :func:`running_executor`: the process and a
client that said hello, both ended with the block; :func:`executor_held_at`, one that holds its
first call reaching a point of its code (``TEST_HOLD_ENV``), with a file to edit
(:func:`cut_off_when_held` cuts that call off and lets it go once Core sent its ``Stop``).
``pool_factory`` runs the real :class:`ExecutorPool` (spawning its own children) inside the
test's nursery; :func:`remote_pool` runs it over an executor process as a project's remote
executor.

Nothing here sleeps for ordering: waits are bounded polls of an observable condition.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator

import pytest
import trio

from events.store import EventStore, open_store
from runtime.executor_client import ExecutorClient
from runtime.executors import ExecutorPool, RemoteExecutor
from runtime.providers.catalog import ProviderCatalog
from runtime.providers.faux import FauxProvider, FauxTurn
from runtime.supervisor import Supervisor
from tests.executor_hold import held_at
from tests.idgen import IdGen
from tests.procfs import processes
from tests.services import started, supervised
from tools.artifacts import ArtifactStore
from tools.base import ToolContext, ToolSpec
from tools.executor.server import TEST_HOOKS_ENV, TOKEN_ENV
from tools.registry import builtin_tools
from tools.workspace_tools import workspace_tools

if TYPE_CHECKING:  # (the relay module takes its waits from here)
    from .relay import Relay

START_TIMEOUT_S = 20.0


@dataclass
class ExecutorProcess:
    proc: subprocess.Popen[bytes]
    address: str
    token: str
    workspace: Path
    state: Path
    stdout: Path
    stderr: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.stdout.read_text(errors="replace") + self.stderr.read_text(errors="replace")


# An executor process of another protocol version: the same code with its version changed.
OTHER_VERSION_EXECUTOR = """
import sys
import tools.executor, tools.executor.server as server
tools.executor.PROTOCOL_VERSION = server.PROTOCOL_VERSION = int(sys.argv[1])
sys.exit(server.main(sys.argv[2], sys.argv[3], sys.argv[4], exit_with_stdin=True))
"""


def start_executor(root: Path, *, token: str | None = None, test_hooks: bool = True,
                   listen: str = "127.0.0.1:0", state: Path | None = None,
                   protocol_version: int | None = None) -> ExecutorProcess:
    """``lens executor serve`` over ``root / "workspace"``, once it says it listens;
    ``protocol_version``: the same code speaking that version instead of its own.

    The process runs with ``--exit-with-stdin``, its standard input a pipe whose other end only
    this process holds (``proc.lifeline``, closed by :func:`stop_process` or with ``proc``): it
    is in a session of its own (a signal to the test run's group does not reach it), so a test
    run ended without its teardown (``timeout -s TERM``, a SIGKILL, an interrupt while it starts)
    still takes it along, as a killed daemon takes its executors, instead of leaving it serving
    under init."""
    workspace = root / "workspace"
    state = state if state is not None else root / "state"
    workspace.mkdir(parents=True, exist_ok=True)
    token = token or secrets.token_urlsafe(32)
    env = {**os.environ, TOKEN_ENV: token}
    if test_hooks:
        env[TEST_HOOKS_ENV] = "1"
    out, err = root / "executor.stdout", root / "executor.stderr"
    child_end, lifeline = os.pipe()  # (read end, write end; neither inherited by other children: both close-on-exec)
    with out.open("wb") as fo, err.open("wb") as fe:
        serve = (["-m", "runtime.cli", "executor", "serve", "--workspace", str(workspace), "--listen", listen,
                  "--state", str(state), "--exit-with-stdin"] if protocol_version is None
                 else ["-c", OTHER_VERSION_EXECUTOR, str(protocol_version), str(workspace), listen, str(state)])
        try:
            proc = subprocess.Popen(
                [sys.executable, *serve],
                env=env, stdin=child_end, stdout=fo, stderr=fe, start_new_session=True)
        except BaseException:
            os.close(lifeline)
            raise
        finally:
            os.close(child_end)
    proc.lifeline = _Lifeline(lifeline)  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            text = out.read_text(errors="replace")
            if "listening on" in text and text.endswith("\n"):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"executor did not start: {text!r} {err.read_text(errors='replace')!r}")
            time.sleep(0.02)  # bounded poll for the readiness line
    except BaseException:  # (a Ctrl-C while it starts included: never left running)
        stop_process(proc)
        raise
    port = int(text.strip().splitlines()[0].rsplit(":", 1)[1])
    return ExecutorProcess(proc, f"127.0.0.1:{port}", token, workspace, state, out, err)


@contextmanager
def other_version_executor(root: Path, version: int) -> Iterator[ExecutorProcess]:
    """A real executor process over ``root`` speaking ``version`` (:func:`start_executor`, test
    hooks off), stopped when the block ends."""
    ex = start_executor(root, test_hooks=False, protocol_version=version)
    try:
        yield ex
    finally:
        stop_process(ex.proc)


@asynccontextmanager
async def said_hello(ex: ExecutorProcess) -> AsyncIterator[ExecutorClient]:
    """An :class:`ExecutorClient` of ``ex`` that has said hello (the handshake, bounded by its own
    timeout); closed when the block ends."""
    client = ExecutorClient(ex.address, ex.token)
    try:
        await client.hello()
        yield client
    finally:
        client.close()


@asynccontextmanager
async def running_executor(root: Path, *, token: str | None = None, listen: str = "127.0.0.1:0",
                           state: Path | None = None) -> AsyncIterator[tuple[ExecutorProcess, ExecutorClient]]:
    """An executor of its own started over ``root`` (:func:`start_executor`, test hooks on) and a
    client that has said hello to it (:func:`said_hello`); the client is closed and the process
    stopped when the block ends, whatever happened."""
    ex = start_executor(root, token=token, listen=listen, state=state)
    try:
        async with said_hello(ex) as client:
            yield ex, client
    finally:
        stop_process(ex.proc)


@contextmanager
def executor_held_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                     point: str = "before_publish") -> Iterator[tuple[ExecutorProcess, Path]]:
    """An executor of its own over ``tmp_path / "remote"`` (:func:`start_executor`) whose first
    call reaching ``point`` holds there (:func:`tests.executor_hold.held_at`; :func:`release_held`
    lets it go on), with ``f.txt`` reading ``a\\n`` in its workspace: the process, and the file
    naming the process that holds (it appears once one does). The process is stopped when the
    block ends, whatever happened."""
    held = held_at(monkeypatch, tmp_path, point)
    ex = start_executor(tmp_path / "remote")
    try:
        (ex.workspace / "f.txt").write_text("a\n")
        yield ex, held
    finally:
        stop_process(ex.proc)


def release_held(tmp_path: Path) -> None:
    """Let the call an executor of :func:`executor_held_at` over ``tmp_path`` holds go on."""
    Path(f"{tmp_path / 'hold'}.release").write_text("")


async def cut_off_when_held(relay: Relay, held: Path, stop_id: str, cut: Callable[[], Any] | None = None, *,
                            timeout: float = 20.0, answered: bool = False) -> None:
    """Once the executor of :func:`executor_held_at` holds the call (``held`` appears), ``cut()``
    it off (a cancel scope's ``cancel``, a clock's jump past its time limit, an abort started;
    None: something else cuts it, its deadline or the daemon's stop), wait until Core has sent
    its ``Stop`` by ``stop_id`` through ``relay`` (``answered``: until the executor has answered
    it, so a call let go finds its caller gone rather than the relay still waiting on it), and let
    the held call go on (:func:`release_held`). Each wait is bounded by ``timeout``
    (``trio.TooSlowError``)."""
    await wait_path(held, timeout)
    if cut is not None:
        cut()
    await until(lambda: stop_id in (relay.stops_answered if answered else relay.stops), timeout)
    release_held(held.parent)


def processes_marked(mark_env: str, mark: str, *, skip_pid: int | None = None,
                     argv0: bytes | None = None) -> list[int]:
    """Live processes whose environment carries ``mark_env=mark`` (the commands an executor started
    under that environment, and whatever they started), but ``skip_pid`` and, given ``argv0``,
    only those running that program."""
    found = []
    needle = f"{mark_env}={mark}".encode()
    for p in processes():
        if p.pid == skip_pid or p.state in ("Z", "X") or (argv0 is not None and p.argv[:1] != [argv0]):
            continue
        try:
            env = Path(f"/proc/{p.pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(p.pid)
    return found


def poll_until(condition: Callable[[], Any], timeout: float) -> bool:
    """Bounded poll of an observable condition: whether it held within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    finally:  # (also when the wait failed or was interrupted: the executor then goes with it)
        lifeline = getattr(proc, "lifeline", None)  # (an executor's, see start_executor)
        if lifeline is not None:
            lifeline.close()


class _Lifeline:
    """The write end of the pipe a test's executor watches (:func:`start_executor`): closed by
    :meth:`close`, or when it is collected with its process object (a test that ended the process
    itself), without a ResourceWarning."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    __del__ = close


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecutorProcess]:
    ex = start_executor(tmp_path_factory.mktemp("executor"))
    try:
        yield ex
    finally:
        stop_process(ex.proc)


@pytest.fixture
def workspace(executor: ExecutorProcess) -> Path:
    return executor.workspace


@pytest.fixture
async def client(executor: ExecutorProcess) -> AsyncIterator[ExecutorClient]:
    async with said_hello(executor) as c:
        yield c


@asynccontextmanager
async def running_pool(state_root: Path, workspaces: dict[str, Path], *,
                       remote: RemoteExecutor | None = None, shared: bool = False,
                       hidden_env: tuple[str, ...] | frozenset[str] = (),
                       idle_stop_s: float | None = None,
                       call_end_wait_s: float | None = None) -> AsyncIterator[ExecutorPool]:
    """The real pool in its own nursery; its children are stopped when the block ends."""

    async def workspace_of(project_id: str) -> Path | None:
        return workspaces.get(project_id)

    pool = ExecutorPool(state_root, workspace_of, remote, local_shared_filesystem=shared, hidden_env=hidden_env,
                        **({} if idle_stop_s is None else {"idle_stop_s": idle_stop_s}),
                        **({} if call_end_wait_s is None else {"call_end_wait_s": call_end_wait_s}))
    async with started(pool.run):
        yield pool


@asynccontextmanager
async def remote_pool(executor: ExecutorProcess, state_root: Path, *, address: str | None = None,
                      project: str = "p", workspaces: dict[str, Path] | None = None,
                      shared_filesystem: bool = False, **kw: Any) -> AsyncIterator[ExecutorPool]:
    """The real pool (:func:`running_pool`, ``kw`` passed on) whose project ``project`` is served
    by ``executor`` as its remote executor, reached at ``address`` (a relay in front of it) or
    its own address. ``workspaces``: the projects and their workspaces as Core knows them, in
    place of ``project`` on the executor's own; ``shared_filesystem``: the configuration's claim
    that Core sees the executor's files."""
    remote = RemoteExecutor(address or executor.address, executor.token, shared_filesystem=shared_filesystem)
    async with running_pool(state_root, workspaces if workspaces is not None else {project: executor.workspace},
                            remote=remote, **kw) as pool:
        yield pool


def tools_by_name(pool: ExecutorPool, store_dir: Path) -> dict[str, ToolSpec]:
    """The workspace tools over ``pool`` by name, as a test runs them by hand; their artifacts in
    one store over ``store_dir``."""
    return {s.name: s for s in workspace_tools(pool, ArtifactStore(store_dir))}


def tool_ctx(session_id: str, call_id: str, project: str = "p", **more: Any) -> ToolContext:
    """A call's context as a test runs a tool of ``project`` by hand: the ids and ``more`` of
    :class:`ToolContext`'s fields (none: no cut output kept, no edits known)."""
    return ToolContext(project, session_id, "main", None, call_id, True, **more)


@asynccontextmanager
async def agent_runtime(tmp_path: Path, ws: Path, script: list[FauxTurn], *,
                        more_tools: Callable[[ExecutorPool], list[ToolSpec]] = lambda pool: [],
                        ids: IdGen | None = None, snapshot_every: int = 500, context: Any = None,
                        max_event_bytes: int | None = None, call_end_wait_s: float | None = None,
                        remote: RemoteExecutor | None = None, artifacts: ArtifactStore | None = None,
                        stopping: trio.Event | None = None
                        ) -> AsyncIterator[tuple[Supervisor, EventStore, FauxProvider, ExecutorPool]]:
    """A real supervisor over a log in ``tmp_path / "data"``, its faux model following ``script``,
    with the workspace tools (artifacts in ``data/artifacts``) and ``more_tools(pool)`` run by
    the real pool serving ``ws`` as project ``proj``. All of it stops when the block ends, which
    must come within 60 s. ``max_event_bytes``: the log's bound on one event (its default if None);
    ``call_end_wait_s``: the pool's wait for a given-up write's end (its default if None);
    ``remote``: the project's executor, serving ``ws`` (None: the pool's own child);
    ``artifacts``: the store of the tools and of the actors' leases, as the daemon's (None: one
    in ``data/artifacts`` for the tools alone, no leases); ``stopping``: the daemon's stop event
    (set, the block's end stops the actors as the daemon's stop does)."""
    data_dir = tmp_path / "data"
    faux = FauxProvider("faux", script)
    with trio.fail_after(60):
        async with open_store(data_dir, **({} if max_event_bytes is None else {"max_event_bytes": max_event_bytes})
                              ) as store:
            async with running_pool(tmp_path / "executors", {"proj": ws}, call_end_wait_s=call_end_wait_s,
                                    remote=remote) as pool:
                tools = builtin_tools([*workspace_tools(pool, artifacts or ArtifactStore(data_dir / "artifacts")),
                                       *more_tools(pool)])
                async with supervised(store, ProviderCatalog({"faux": faux}), tools,
                                      ids if ids is not None else IdGen(), snapshot_every=snapshot_every,
                                      context=context, artifacts=artifacts, stopping=stopping) as sup:
                    yield sup, store, faux, pool


@pytest.fixture
def pool_factory(tmp_path: Path) -> Callable[..., object]:
    def make(workspaces: dict[str, Path], **kw: object) -> object:
        return running_pool(tmp_path / "executors", workspaces, **kw)  # type: ignore[arg-type]

    return make


# ---------------------------------------------------------------------------- process helpers


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    return [p.pid for p in processes() if p.pgrp == pgid and p.state not in ("Z", "X")]


def wait_group_gone(pgid: int, timeout: float = 10.0) -> list[int]:
    """Poll (bounded) until no live process is left in ``pgid``; returns what is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = group_members(pgid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@contextmanager
def reaping() -> Iterator[list[int]]:
    """Collects process group ids; kills what is left of them afterwards, whatever happened."""
    groups: list[int] = []
    try:
        yield groups
    finally:
        for g in groups:
            kill_group(g)


async def until(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Bounded poll (trio) of an observable condition; ``trio.TooSlowError`` past ``timeout``."""
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


async def wait_path(path: Path, timeout: float = 10.0) -> None:
    """Bounded wait for a file another process creates."""
    await until(path.exists, timeout)


def temp_files(ws: Path) -> list[str]:
    """The names of the temp files an edit leaves in ``ws`` (none once every write ended)."""
    return [p.name for p in ws.iterdir() if ".lens-" in p.name]


async def until_ended(client: Any, call_id: str) -> None:
    """Bounded poll until no call runs under ``call_id`` on the executor (``Stop`` finds none)."""
    with trio.fail_after(10):
        while (await client.stop(call_id, 2)).found:
            await trio.sleep(0.01)


async def run_to_idle(sup: Any, sid: str, request_id: str, message: str) -> Any:
    """Submit ``message`` to session ``sid`` of a Supervisor, wait until it is idle, return its state."""
    from events import types as t
    from runtime.actor import GetState, Submit, WaitIdle

    await sup.call(sid, Submit(request_id, [t.TextPart(message)], "followUp"))
    await sup.call(sid, WaitIdle())
    return await sup.call(sid, GetState())
