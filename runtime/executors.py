"""Executors per project: a local child process spawned on first use, or a configured remote one.

Local children run ``lens executor serve --workspace WS --listen 127.0.0.1:0 --token-stdin …`` with a
fresh random token written to their standard input (never on the command line, nor in their
environment: ``LENS_EXECUTOR_TOKEN`` is taken out of it); the pool reads the bound port from
the child's first line, connects, and checks the protocol version. A child that dies is spawned
again on the next call (reconnect after an executor restart). Each executor has an
execution-domain lock: writes (edits, commands, reverts) run one at a time, reads concurrently.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import weakref
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Collection, Sequence

import trio

from events.secrets import Secrets
from proto import executor_pb2 as pb

from tools.executor import ABORT_STOP_ANSWER_WAIT_S
from tools.executor.groups import GroupRegistry

from .errors import LensError
from .executor_client import (ExecutorClient, ExecutorTimeout, ExecutorUnauthenticated, ExecutorUnavailable,
                              ExecutorVersionMismatch, SendOrder, stop_answer)
from .stop_now import StopNow
from .workspaces import WorkspaceInvalid, workspace_dir

log = logging.getLogger("lens.executors")
SPAWN_TIMEOUT_S = 20.0
LOST_GRACE_S = 2.0
# A local child that has run no call or command for this long, with no session waiting for its
# domain lock, is stopped; the project's next call spawns another. A daemon that has touched many
# projects so keeps a process (some 50 MB, a dozen threads) only for those in use.
IDLE_STOP_S = 600.0


async def exit_awaited(proc: trio.Process) -> None:
    """Wait up to :data:`LOST_GRACE_S` for ``proc`` to exit, if it runs: a child a call found
    unreachable, or whose output ended, closes its socket a moment before its exit status can be
    collected."""
    if proc.returncode is None:
        with trio.move_on_after(LOST_GRACE_S):
            await proc.wait()


def ended_how(returncode: int | None) -> str:
    """A child's end as an operator reads it: ``killed by SIGKILL``, ``exit status 1``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


class KilledWhileStarting(ExecutorUnavailable):
    """A local child ended by a signal between its spawn and its hello (killed: SIGKILL, the OOM
    killer), before any call reached it. Raised by ``_spawn``; ``get`` starts one more child."""


class ProjectUnknown(LensError):
    code = "PROJECT_NOT_FOUND"


class DomainBusy(Exception):
    """A read that was asked not to wait found a writer holding or waiting for the domain lock
    (raised by ``DomainLock.read(wait=False)``; its callers fall back on what they read before)."""


class DomainLock:
    """Many readers or one writer; writers are not starved (a waiting writer blocks new readers)."""

    def __init__(self) -> None:
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._changed = trio.Event()

    @property
    def idle(self) -> bool:
        """Nobody holds the lock or waits for it (readers wait only while a writer holds or waits)."""
        return not (self._readers or self._writer or self._writers_waiting)

    def _notify(self) -> None:
        ev, self._changed = self._changed, trio.Event()
        ev.set()

    @asynccontextmanager
    async def read(self, *, wait: bool = True) -> AsyncIterator[None]:
        """Hold the lock for reading; ``wait=False``: raise :class:`DomainBusy` at once instead of
        waiting while a writer holds the lock or waits for it."""
        if not wait and (self._writer or self._writers_waiting):
            raise DomainBusy("a write holds the execution domain")
        while self._writer or self._writers_waiting:
            await self._changed.wait()
        self._readers += 1
        try:
            yield
        finally:
            self._readers -= 1
            self._notify()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[None]:
        self._writers_waiting += 1
        try:
            while self._writer or self._readers:
                await self._changed.wait()
        except BaseException:
            # Given up (cancelled): readers that this wait held back may go in now.
            self._writers_waiting -= 1
            self._notify()
            raise
        self._writers_waiting -= 1
        self._writer = True
        try:
            yield
        finally:
            self._writer = False
            self._notify()


@dataclass
class Executor:
    project_id: str
    workspace: Path
    client: ExecutorClient
    lock: DomainLock = field(default_factory=DomainLock)
    process: trio.Process | None = None
    shared_filesystem: bool = False
    # A local child's: set once the pool has reaped it and ended the command groups it left.
    gone: trio.Event | None = None


@dataclass
class RemoteExecutor:
    address: str
    token: str
    shared_filesystem: bool = False


RELAY_LINE_MAX = 64 * 1024  # a longer line of a child's standard error is relayed in pieces


async def relay_lines(stream: trio.abc.ReceiveStream, secrets: Secrets) -> None:
    """Copy a child's standard error to ours, a line at a time, each without ``secrets`` (whole
    or in pieces: ``Secrets.scrub_message``), until the child's end closes. A line is held until
    its newline (a key split between two reads is still whole) or :data:`RELAY_LINE_MAX` bytes."""
    held = b""
    try:
        async with stream:
            while chunk := await stream.receive_some(RELAY_LINE_MAX):
                held += chunk
                *lines, held = held.split(b"\n")
                while len(held) >= RELAY_LINE_MAX:
                    lines.append(held[:RELAY_LINE_MAX])
                    held = held[RELAY_LINE_MAX:]
                for line in lines:
                    _write_stderr(secrets.scrub_message(line.decode("utf-8", "replace")) + "\n")
    finally:
        if held:
            _write_stderr(secrets.scrub_message(held.decode("utf-8", "replace")) + "\n")


def _write_stderr(text: str) -> None:
    if sys.stderr is None:
        return
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):  # standard error gone or closed
        pass


class ExecutorPool:
    """Owns executor children (run it in the daemon's nursery); hands out connected executors."""

    def __init__(self, state_root: Path, workspace_of: Callable[[str], Awaitable[Path | None]],
                 remote: RemoteExecutor | None = None, *, local_shared_filesystem: bool = False,
                 hidden_env: Collection[str] = (), daemon_dirs: Sequence[tuple[str, Path]] = (),
                 idle_stop_s: float = IDLE_STOP_S, secrets: Secrets | None = None,
                 stop_now: StopNow | None = None, call_end_wait_s: float = ABORT_STOP_ANSWER_WAIT_S) -> None:
        self.state_root = Path(state_root)
        # The daemon's second stop signal: a child still running after its SIGTERM is killed at
        # once, not 3 s later (its commands' groups are ended all the same, below in _reap).
        self.stop_now = stop_now if stop_now is not None else StopNow()
        # The daemon's keys: a local child's standard error is relayed without them (it is
        # started without any, so it cannot scrub what it prints: a path, a name it quotes).
        self.secrets = secrets if secrets is not None else Secrets()
        self.idle_stop_s = idle_stop_s
        # How long a write whose caller gave up keeps its domain's write lock waiting for the
        # executor to say the call has ended (see call_ended): as long as an abort waits for a
        # command's Stop answer.
        self.call_end_wait_s = call_end_wait_s
        # The order of this Core's sends to its executors, one epoch for all of them: a re-run of
        # a call (ToolRequest.rerun) made after its Stop runs; one given up in its turn, whose Stop
        # overtook it, is refused (see SendOrder).
        self.send_order = SendOrder()
        # (what, path): the daemon's own directories (its data, its config), which no local
        # workspace may hold or lie in — as POST /projects checks, now for the daemon running.
        self.daemon_dirs = tuple(daemon_dirs)
        # Variables a local child (and every command it runs) is started without: credentials.
        self.hidden_env = frozenset(hidden_env)
        self.local_shared_filesystem = local_shared_filesystem
        self.workspace_of = workspace_of
        self.remote = remote
        self._executors: dict[str, Executor] = {}
        # One execution-domain lock per set of files: a remote executor serves one workspace
        # whatever the project, and two projects may name one directory; a child spawned again
        # keeps its domain's lock.
        self._locks: dict[str, DomainLock] = {}
        self._spawning: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None
        # The last refusal of the remote executor's handshake said in the log (another version,
        # a wrong token): said once when it starts, not at every call it refuses.
        self._remote_refusal: str | None = None
        # The children this pool signalled itself (its shutdown, an idle stop, a child refused):
        # their end by a signal is the pool's doing, never a death from outside (see _killed).
        self._ended_by_pool: weakref.WeakSet[trio.Process] = weakref.WeakSet()
        self._starting: set[trio.Process] = set()  # spawned, their ready line not read yet
        # The children whose command groups _reap could not all end (a group that outlived its
        # SIGKILL past call_end_wait_s, a kill refused, their records unreadable): see call_ended.
        self._left_running: weakref.WeakSet[trio.Process] = weakref.WeakSet()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    # Stopping: no child is started from here on, and one starting is ended (no
                    # call reached it; a caller outside the pool waiting for it is told the
                    # executor did not start, and _killed does not take it for a death).
                    self._nursery = None
                    for proc in self._starting:
                        self._ended_by_pool.add(proc)
                        proc.kill()
        finally:
            for ex in self._executors.values():
                ex.client.close()
                if ex.process is not None:
                    self._end(ex.process)

    async def get(self, project_id: str) -> Executor:
        """The project's executor, connected and version-checked (spawning it if needed)."""
        ex = self._executors.get(project_id)
        if ex is not None and ex.process is not None and ex.client.lost and ex.process.returncode is None:
            # A call found the child unreachable: give a dying child a short while before trusting
            # it again.
            await exit_awaited(ex.process)
            ex.client.lost = False
        if ex is not None and (ex.process is None or ex.process.returncode is None):
            ex.client.used = trio.current_time()  # (handed out: about to be used)
            return ex
        lock = self._spawning.setdefault(project_id, trio.Lock())
        async with lock:
            ex = self._executors.get(project_id)
            if ex is not None and (ex.process is None or ex.process.returncode is None):
                return ex
            if ex is not None:
                ex.client.close()
                if ex.gone is not None:
                    # (its reap ends the groups it left, and call_ended reads how that went: the
                    # replacement's own reap at its start would take their records first)
                    with self.stop_now.grace(self.call_end_wait_s):
                        await ex.gone.wait()
            workspace = await self.workspace_of(project_id)
            if workspace is None:
                raise ProjectUnknown(f"no project {project_id!r}")
            if not self.remote:
                self._check_workspace(project_id, workspace)
            if self.remote:
                ex = await self._connect_remote(project_id, workspace)
            else:
                try:
                    ex = await self._spawn(project_id, workspace)
                except KilledWhileStarting as exc:
                    # No call reached it, so asking again is safe for every call: once, never a
                    # loop (a second death ends the call that asked, EXECUTOR_UNAVAILABLE).
                    log.warning("%s; starting another", exc.message)
                    ex = await self._spawn(project_id, workspace)
            self._executors[project_id] = ex
            return ex

    async def respawned(self, ex: Executor) -> Executor | None:
        """The executor spawned in place of ``ex``, a local child that died (a call found it
        unreachable), sharing its execution-domain lock; None when ``ex`` is remote (never
        respawned: grpc reconnects to it), or its child still runs :data:`LOST_GRACE_S` on, or
        another workspace's executor came instead. A caller holding ``ex``'s domain lock
        still holds it for the new child: no other call of the domain ran in between."""
        if ex.process is None or ex.process in self._ended_by_pool:
            return None  # (remote, or stopped by the pool itself: no death to make up for)
        await exit_awaited(ex.process)
        if ex.process.returncode is None:
            return None
        again = await self.get(ex.project_id)
        return again if again is not ex and again.lock is ex.lock else None

    async def call_ended(self, ex: Executor, call_id: str, what: str = "") -> pb.ToolReply | None:
        """Return once the editing call ``call_id``, whose caller gave up (its gRPC call is
        cancelled), has ended on ``ex``: the executor's ``Stop`` by the call's id answers when it
        has (``found`` false: it ended, or it starts with its caller gone and writes nothing).
        ``call_id`` may be a command's run id as well (``run_command``'s stream left before its
        exit): ``Stop`` answers once the command's group has ended. ``what`` names it in the
        warning (default ``call <call_id>``).
        A local child that died (exited, or unreachable as a dying child is: its ``Stop`` then
        fails) cannot end its commands: the wait is for the pool to have reaped it and ended the
        groups it left (:meth:`_reap`: killed, and waited for until none of their processes runs),
        so that none of them runs on beside the domain's next write; a child known dead is not
        asked. Past :attr:`call_end_wait_s`, or when the executor cannot be asked (any other
        failure of the ``Stop``: gone, built before it, a closed channel; a live child is then
        not waited for), or when the reap could not end the groups, or at the daemon's stop now, a
        warning is logged and the wait ends: the executor is never stopped for it (a slow write, a
        large file on a slow disk, would lose its executor, its temp file and every background
        job of the workspace), so the domain's next write may then run beside the call, as it did
        before. Call it shielded, holding the domain's write lock; it bounds itself.

        Returns the reply of the editing call when it ended having completed (the ``Stop``
        answer's ``call``, from the executor's call journal: it wrote, its caller gone), for the
        caller to record what it changed; None otherwise (it wrote nothing, it was not confirmed
        ended, an executor built before ``call`` was sent)."""
        why = f"did not say it ended within {self.call_end_wait_s:g} s"
        dead = unreachable = False
        with self.stop_now.grace(self.call_end_wait_s) as waiting:  # (the daemon's stop now ends it at once)
            try:
                if ex.process is None or ex.process.returncode is None:  # (a child known dead is not asked)
                    reply = await stop_answer(ex.client, call_id, self.call_end_wait_s)
                    if not reply.found or reply.ended:
                        return reply.call if reply.HasField("call") else None
            except ExecutorTimeout:
                pass  # (the Stop's deadline is the bound: not answered within it)
            except ExecutorUnavailable as exc:  # (not confirmed, whatever failed: a closed channel's too)
                why = f"could not be asked whether it ended ({exc.message})"
                unreachable = exc.status == "UNAVAILABLE"
            if await self._dead(ex, unreachable):
                dead = True
                assert ex.process is not None and ex.gone is not None
                why = f"died under it, and the commands it left were not ended within {self.call_end_wait_s:g} s"
                if not ex.gone.is_set():  # (set: a checkpoint would be cut by a stop now, the commands ended)
                    await ex.gone.wait()
                if ex.process in self._left_running:  # (the reap failed, or a group outlived its SIGKILL)
                    why = "died under it, and the commands it left could not all be ended"
                else:
                    log.info("%s was given up as the executor of project %s died (pid %d, %s): the process groups "
                             "of the commands it left were ended before the workspace's next write (a process "
                             "that left its group runs on until its command's reaper ends it)",
                             what or f"call {call_id}", ex.project_id, ex.process.pid,
                             ended_how(ex.process.returncode))
                    return None
        if waiting.cancelled_caught and self.stop_now.is_set() and trio.current_time() < waiting.deadline:
            why = ("died under it, and the daemon's stop ended the wait for the commands it left to be ended"
                   if dead else "had not said it ended when the daemon's stop ended the wait for it")
        log.warning("%s was given up, and the executor of project %s %s: the workspace's next write may run "
                    "beside it", what or f"call {call_id}", ex.project_id, why)
        return None

    async def _dead(self, ex: Executor, unreachable: bool) -> bool:
        """Whether ``ex`` is a local child that has exited, waited for (:func:`exit_awaited`) when
        its ``Stop`` found it ``unreachable``: a child whose ``Stop`` failed otherwise (a closed
        channel) is not, whatever an earlier call found."""
        if ex.process is None or ex.gone is None:
            return False
        if unreachable:
            await exit_awaited(ex.process)
        return ex.process.returncode is not None

    def _check_workspace(self, project_id: str, workspace: Path) -> None:
        """:class:`WorkspaceInvalid` naming the project if a local executor may not serve its
        stored ``workspace``: the checks of a local ``POST /projects`` (:func:`workspace_dir`),
        asked again here. A project made while a remote executor served had its path judged by
        its words alone (it may be missing here, a link, …), and one made by another daemon was
        kept apart only from that daemon's directories: a daemon started later with ``--config``
        or ``--data`` inside its workspace let its agent read and change the pair file and the
        config."""
        try:
            workspace_dir(str(workspace), self.daemon_dirs)
        except WorkspaceInvalid as exc:
            raise WorkspaceInvalid(f"project {project_id}'s workspace {str(workspace)[:200]!r} is not served by a local "
                                   f"executor: {exc.message}") from None

    async def _connect_remote(self, project_id: str, workspace: Path) -> Executor:
        assert self.remote is not None
        client = ExecutorClient(self.remote.address, self.remote.token, order=self.send_order)
        try:
            await client.hello()
        except (ExecutorVersionMismatch, ExecutorUnauthenticated) as exc:
            client.close()  # (not left to the garbage collector: its connection stays open until then)
            # What a client sees in its error, the operator reads in the log: which executor
            # refused and why (the calls' own warnings carry the code alone).
            said = f"{exc.code}: {exc}"
            if said != self._remote_refusal:
                self._remote_refusal = said
                log.warning("the remote executor at %s refused the connection: %s", self.remote.address, said)
            raise
        except BaseException:
            client.close()
            raise
        self._remote_refusal = None
        return Executor(project_id, workspace, client, lock=self._lock(None),
                        shared_filesystem=self.remote.shared_filesystem)

    async def _spawn(self, project_id: str, workspace: Path) -> Executor:
        if self._nursery is None:
            raise ExecutorUnavailable("the executor pool is not running")
        token = secrets.token_urlsafe(32)
        state = self.state_root / hashlib.sha256(project_id.encode()).hexdigest()[:16]
        state.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in self.hidden_env and k != "LENS_EXECUTOR_TOKEN"}
        cmd = [sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(workspace),
               "--listen", "127.0.0.1:0", "--state", str(state), "--token-stdin", "--exit-with-stdin"]
        proc = await trio.lowlevel.open_process(cmd, env=env, stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                                                stderr=subprocess.PIPE, start_new_session=True)
        assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
        self._starting.add(proc)
        relayed = False
        try:
            if self._nursery is None:
                # The pool stopped while the child was being started (open_process forks in a
                # thread, and a cancel does not interrupt it): ended below, never left running.
                raise ExecutorUnavailable(f"the executor for project {project_id} did not start: the executor pool "
                                          f"is stopping")
            # (relayed from the first byte: a child that fails to start says why there)
            self._nursery.start_soon(relay_lines, proc.stderr, self.secrets)
            relayed = True
            # The token goes on standard input, never in the child's environment or argv. The pipe
            # stays open while we live: its end (however this process dies) stops the child.
            await proc.stdin.send_all(token.encode() + b"\n")
            line = b""
            with trio.move_on_after(SPAWN_TIMEOUT_S):
                while not line.endswith(b"\n"):
                    chunk = await proc.stdout.receive_some(1)
                    if not chunk:
                        break
                    line += chunk
            text = line.decode(errors="replace").strip()
            if "listening on" not in text:
                why = f"the executor for project {project_id} did not start ({text or 'no output'})"
                if proc in self._ended_by_pool:
                    why += ": the executor pool is stopping"
                if not line.endswith(b"\n") and await self._killed(proc):  # (its output ended: it died)
                    raise KilledWhileStarting(f"{why}: killed (signal {-(proc.returncode or 0)}, pid {proc.pid})")
                raise ExecutorUnavailable(why)
            port = int(text.rsplit(":", 1)[1])
            if self._nursery is None:  # (the pool stopped while the child started)
                raise ExecutorUnavailable(f"the executor for project {project_id} did not start: the executor pool "
                                          f"is stopping")
            gone = trio.Event()  # (set by _reap once the child is reaped)
            self._nursery.start_soon(self._reap, proc, project_id, state, gone)  # from here on, _reap owns the child
        except BaseException:
            # Not started, or we were cancelled while it started: never leave the child behind.
            with trio.CancelScope(shield=True):
                self._ended_by_pool.add(proc)
                proc.kill()
                await proc.wait()
                await proc.stdout.aclose()
                await proc.stdin.aclose()
                if not relayed:
                    await proc.stderr.aclose()
            raise
        finally:
            self._starting.discard(proc)
        client = ExecutorClient(f"127.0.0.1:{port}", token, order=self.send_order)
        try:
            await client.hello()
        except ExecutorUnavailable as exc:
            client.close()
            if not isinstance(exc, ExecutorTimeout) and await self._killed(proc):
                raise KilledWhileStarting(f"the executor for project {project_id} did not start: killed (signal "
                                          f"{-(proc.returncode or 0)}, pid {proc.pid}) before its hello "
                                          f"({self.secrets.cut(exc.message, 200)})") from None
            stopping = proc in self._ended_by_pool
            self._end(proc)
            if stopping:
                raise ExecutorUnavailable(f"the executor for project {project_id} did not start: the executor pool "
                                          f"is stopping ({self.secrets.cut(exc.message, 200)})") from None
            raise
        except BaseException:
            client.close()
            self._end(proc)
            raise
        if self._nursery is None:  # (the pool stopped during the hello: its _reap is ending the child)
            client.close()
            self._end(proc)
            raise ExecutorUnavailable(f"the executor for project {project_id} did not start: the executor pool is "
                                      f"stopping")
        log.info("executor for project %s on port %d (pid %d)", project_id, port, proc.pid)
        ex = Executor(project_id, workspace, client, lock=self._lock(workspace), process=proc,
                      shared_filesystem=self.local_shared_filesystem, gone=gone)
        self._nursery.start_soon(self._stop_when_idle, ex, gone)
        return ex

    async def _killed(self, proc: trio.Process) -> bool:
        """Whether ``proc``, whose output or connection just ended, was ended by a signal the pool
        did not send (waited for up to :data:`LOST_GRACE_S`: its socket closes a moment before its
        exit status can be collected). A child that exits with a status failed by itself, and one
        the pool stopped (its shutdown: the SIGTERM, and the SIGKILL when that did not end it), was
        not killed: neither is started again."""
        await exit_awaited(proc)
        return proc.returncode is not None and proc.returncode < 0 and proc not in self._ended_by_pool

    def _end(self, proc: trio.Process) -> None:
        """SIGTERM ``proc`` (if it runs), remembered as the pool's own doing (see :meth:`_killed`)."""
        self._ended_by_pool.add(proc)
        if proc.returncode is None:
            proc.terminate()

    async def _stop_when_idle(self, ex: Executor, gone: trio.Event) -> None:
        """Stop ``ex``'s child once nothing has used it for :attr:`idle_stop_s` (see
        :data:`IDLE_STOP_S`); ends when the child is gone or replaced. Checked at the deadline,
        without an await between the check and the stop: a call cannot slip in."""
        assert ex.process is not None
        client, since = ex.client, trio.current_time()
        while ex.process.returncode is None and self._executors.get(ex.project_id, ex) is ex:
            now = trio.current_time()
            last = since if client.used is None else max(since, client.used)
            if client.calls or not ex.lock.idle:
                deadline = now + self.idle_stop_s
            elif now - last < self.idle_stop_s:
                deadline = last + self.idle_stop_s
            else:
                if self._executors.get(ex.project_id) is ex:
                    del self._executors[ex.project_id]  # (the next get() spawns another)
                log.info("executor for project %s unused for %g s: stopping it (pid %d)", ex.project_id,
                         self.idle_stop_s, ex.process.pid)
                client.close()
                self._end(ex.process)  # (_reap waits for it and ends what it left)
                return
            with trio.move_on_at(deadline):
                await gone.wait()

    def _lock(self, workspace: Path | None) -> DomainLock:
        """The execution-domain lock of a local workspace (None: the remote executor's)."""
        key = "remote" if workspace is None else "local:" + os.path.realpath(workspace)
        return self._locks.setdefault(key, DomainLock())

    async def _reap(self, proc: trio.Process, project_id: str, state: Path, gone: trio.Event) -> None:
        try:
            assert proc.stdout is not None
            while await proc.stdout.receive_some(4096):
                pass  # drain so the child never blocks on a full pipe
            await proc.wait()
            if proc not in self._ended_by_pool:
                # Killed from outside (kill -9, the OOM killer) or failed by itself: the operator
                # reads it here, once, not only as the EXECUTOR_UNAVAILABLE of the calls it cut.
                log.warning("executor for project %s (pid %d) ended without Lens stopping it (%s); the project's next call "
                            "starts another", project_id, proc.pid, ended_how(proc.returncode))
        finally:
            # Shielded: this runs when the pool is cancelled, and an unshielded wait would raise
            # Cancelled at once, leaving the child running (and never reaped).
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    self._ended_by_pool.add(proc)  # (stopped by the pool: not killed from outside)
                if proc.stdin is not None:
                    await proc.stdin.aclose()  # the child's lifeline: it stops on its own
                if proc.returncode is None:
                    self._end(proc)
                    with self.stop_now.grace(3):
                        await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    with trio.move_on_after(3):
                        await proc.wait()
                if proc.stdout is not None:
                    await proc.stdout.aclose()
                if proc.returncode is not None:
                    # A child that did not end its commands itself (killed outright, or still
                    # waiting out their SIGTERM grace when we had to kill it) left their groups
                    # named in its state: end them now, not when a later executor starts there, and
                    # wait (within call_end_wait_s) until they have gone.
                    try:
                        # (the thread cannot be cancelled: the daemon's stop now ends its wait by the flag)
                        if not await trio.to_thread.run_sync(GroupRegistry(state).end_left, self.call_end_wait_s,
                                                             self.stop_now.is_set):
                            self._left_running.add(proc)
                    except OSError as exc:
                        self._left_running.add(proc)
                        log.warning("cannot end the commands executor %d left running: %s", proc.pid, exc)
                gone.set()

    async def probe_shared(self, ex: Executor) -> bool:
        """``sharedFilesystem`` check: a random short-lived file Core writes must be seen by the executor."""
        name = f".lens-probe-{secrets.token_hex(8)}"
        data = secrets.token_bytes(32)
        path = ex.workspace / name
        try:
            await trio.to_thread.run_sync(path.write_bytes, data)
            return await ex.client.probe(name, hashlib.sha256(data).hexdigest())
        except (OSError, LensError):
            return False
        finally:
            path.unlink(missing_ok=True)
