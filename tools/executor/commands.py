"""Shell commands in the workspace: timeout, output cap, cancellation that kills the group.

Runs synchronously in a server thread. Output is yielded in chunks as it arrives; when the
caller goes away (``cancelled()`` turns true) or the timeout passes, the whole process group
gets SIGTERM, then SIGKILL after a grace period. When the shell itself exits, what is left of
its group (background jobs) is killed after :data:`DRAIN_GRACE_S`: the command is over, and its
exit code is the shell's.

The shell's parent is :mod:`tools.reaper` (a child subreaper, in a session of its own): a process
that left the shell's group — ``setsid``, a double fork — is re-parented to it, not to init, and
ended with the rest once the shell has exited, so it never runs on unowned past the command.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal

from tools.reaper import stat

from .groups import GroupRegistry
from .runs import StopLatch

log = logging.getLogger("lens.executor.commands")

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 3_600_000
DEFAULT_MAX_OUTPUT = 1024 * 1024
MAX_OUTPUT = 16 * 1024 * 1024
KILL_GRACE_S = 2.0
# After the shell exits, output still arriving (from its background jobs) is read this long.
DRAIN_GRACE_S = 0.5
# A shell that exited by itself before its timeout is not timed out by what it left behind
# (``server &``): past the timeout, they are given this long to be ended by the reaper (its
# DRAIN_GRACE_S, then SIGTERM and SIGKILL after its 2 s) before the group is ended from here.
LEFTOVERS_END_S = DRAIN_GRACE_S + KILL_GRACE_S + 0.5
# At most this many rounds of reads (of up to 64 KiB a pipe) of what a command wrote while its
# timeout or a stop ended it.
RESTS_READ = 64
# The command's shell first waits for a line on its standard input (a pipe from the executor),
# then runs the command as ``/bin/sh -c COMMAND`` in the same process (same pid and group) with
# /dev/null as its standard input. The executor sends the line once the group is recorded (see
# .groups): an executor killed between starting the shell and recording its group closes the pipe
# unsent, and the shell exits without running the command, instead of running it unowned where no
# reap can find it.
GATED_SHELL = 'read -r _ && exec </dev/null && exec /bin/sh -c "$0"'
REAPER = str(Path(__file__).resolve().parent.parent / "reaper.py")


@dataclass(frozen=True)
class Chunk:
    stream: Literal["stdout", "stderr"]
    data: bytes


@dataclass(frozen=True)
class Exit:
    exit_code: int
    timed_out: bool
    truncated: bool
    duration_ms: int
    stopped: bool = False  # ended by ``Stop`` (see .runs); False: it had exited by itself


def _continue_reaper(proc: subprocess.Popen[bytes]) -> None:
    """SIGCONT to the shell's parent, the reaper (in a group of its own): a command can stop it
    (``kill -STOP $PPID``), and a stopped reaper neither reaps the shell nor reports its end.
    (``send_signal`` sends nothing once the reaper has been waited for: its pid may be reused.)"""
    proc.send_signal(signal.SIGCONT)


def _kill_group(proc: subprocess.Popen[bytes], pgid: int) -> None:
    """SIGTERM, then SIGKILL, to the shell's group ``pgid``, until ``proc`` (its reaper, which ends
    what left the group once the shell is gone) has exited; the reaper is killed last if it has not."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
            if sig == signal.SIGTERM:
                # A stopped process (SIGSTOP, SIGTSTP) holds the SIGTERM pending until it is
                # continued: continued now, it ends by it (its trap run), not by the SIGKILL.
                os.killpg(pgid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # (the group is gone; the reaper may still be ending what left it)
        _continue_reaper(proc)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait()


def _end_leftovers(pgid: int) -> None:
    """Kill what is left of a command's group once its shell has exited: background jobs
    (``server &``) end with the command that started them, never run on unowned."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left


def _shell_alive(pid: int, reaper: int) -> bool:
    """Whether the command's shell (``pid``, its group's leader) still runs: a process ``pid``
    that is no zombie and whose parent is the shell's, the reaper (pid ``reaper``), which reaps
    it as soon as it exits. (Once the shell is reaped and its group empty — ``setsid … & exit
    0`` — its pid may be reused by any other process: one not the reaper's child is not it.)"""
    fields = stat(pid)
    return fields is not None and len(fields) > 1 and fields[0] != "Z" and fields[1] == str(reaper)


class CommandNotStarted(Exception):
    """The shell could not be started; ``error`` is the OSError (its text may hold host paths)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or "cannot start")
        self.error = error


def _shell_group(proc: subprocess.Popen[bytes], status_read: int) -> int:
    """The shell's process group (its pid), as the reaper tells it on its status pipe (which this
    closes). Raises :class:`CommandNotStarted` when the shell could not be started, or its status
    could not be read; the reaper is then ended and waited for, and its pipes closed."""
    said = b""
    try:
        while chunk := os.read(status_read, 64):
            said += chunk
    except OSError as exc:
        _end_unstarted(proc, terminate=True)
        raise CommandNotStarted(exc) from None
    except BaseException:
        _end_unstarted(proc, terminate=True)
        raise
    finally:
        os.close(status_read)
    words = said.split()
    if len(words) == 2 and words[0] == b"pid" and words[1].isdigit():
        return int(words[1])
    _end_unstarted(proc, terminate=False)
    code = int(words[0]) if len(words) == 1 and words[0].isdigit() else 0
    raise CommandNotStarted(OSError(code, os.strerror(code) if code else f"the shell's parent exited ({proc.returncode})"))


def _end_unstarted(proc: subprocess.Popen[bytes], *, terminate: bool) -> None:
    """End the reaper of a command that did not start, wait for it and close its pipes.
    ``terminate``: it is sent SIGTERM first (it passes it on to the gated shell, which has run
    nothing yet); otherwise it is on its way out and only waited for. SIGKILL after 5 s."""
    if terminate:
        try:
            proc.terminate()
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _where(cwd: Path | int) -> Path | str:
    """The path the child changes into: an fd as ``/proc/self/fd/<fd>``, which the kernel
    resolves to the directory the fd holds. (The child changes directory before it closes the
    fds it does not keep, so the fd need not be passed on: the command never sees it.)"""
    return f"/proc/self/fd/{cwd}" if isinstance(cwd, int) else cwd


class _Capped:
    """A command's output sent so far, against its cap (stdout and stderr together)."""

    def __init__(self, max_output: int) -> None:
        self.max_output = max_output
        self.sent = 0
        self.truncated = False

    def take(self, data: bytes) -> bytes:
        """What of ``data`` is within the cap (empty past it: the pipe is read on all the same,
        so the process is not blocked on a full pipe)."""
        room = max(0, self.max_output - self.sent)
        if len(data) > room:
            data, self.truncated = data[:room], True
        self.sent += len(data)
        return data


def _read_rest(sel: selectors.BaseSelector, out: _Capped) -> Iterator[Chunk]:
    """What the group wrote while it ended (a trap's last words), in the pipes once it was
    killed, the writers gone: read without waiting, at most :data:`RESTS_READ` rounds, so a
    writer that escaped the group and writes on does not hold the exit."""
    for _ in range(RESTS_READ):
        ready = [key for key, _ in sel.select(timeout=0) if key.data != "stop"]
        if not ready:
            return
        for key in ready:
            data = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
            if not data:
                sel.unregister(key.fileobj)
                continue
            data = out.take(data)
            if data:
                yield Chunk(key.data, data)


def run_command(command: str, cwd: Path | int, *, timeout_ms: int, max_output: int,
                cancelled: Callable[[], bool], groups: GroupRegistry | None = None,
                stop: StopLatch | None = None) -> Iterator[Chunk | Exit]:
    """Run ``command`` with ``sh -c`` in ``cwd``; yields output chunks, then one :class:`Exit`.

    ``cwd``: a directory, or an open fd of one (the caller keeps and closes it): the shell then
    starts in that very directory, whatever its path names by then. ``groups`` records the command's process group while it runs (see :mod:`.groups`).
    ``stop``, once set, ends the group as a cancel does, but the output read by then and the
    :class:`Exit` (``stopped``, with the status the group ended with) are still yielded. Raises
    :class:`CommandNotStarted` when the shell cannot be started (before anything is yielded).
    Yields nothing, and runs nothing, when ``cancelled()`` is true before the command's start."""
    if cancelled():
        # The caller went away before the shell was spawned (a Run that waited for a server thread
        # past its caller's give-up, whose Stop the executor no longer remembers): nothing is run,
        # and no one is there to be told.
        return
    start = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LENS_EXECUTOR_")}
    gate, release = os.pipe()
    try:
        status_read, status_write = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", REAPER, str(status_write), "1" if "LC_CTYPE" in env else "0",
                 f"own:{DRAIN_GRACE_S}", "/bin/sh", "-c", GATED_SHELL, command],
                cwd=_where(cwd), stdin=gate, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                env=env, pass_fds=(status_write,))
        except OSError as exc:
            # The cwd is checked by the confined walk, one component at a time, but the kernel gets
            # it whole: a host path past PATH_MAX (ENAMETOOLONG), or one removed since the check.
            os.close(status_read)
            raise CommandNotStarted(exc) from None
        finally:
            os.close(gate)
            os.close(status_write)
        pgid = _shell_group(proc, status_read)
        if groups is not None:
            try:
                groups.started(pgid)
            except OSError as exc:  # the command runs all the same; only a later reap would miss it
                log.warning("cannot record command process group %s: %s", pgid, exc)
        try:
            if not cancelled():  # (gone while it was spawned: the gate stays shut, the command never runs)
                os.write(release, b"\n")
        except BrokenPipeError:
            pass  # the shell is gone already (killed from outside): its exit is read below
    finally:
        os.close(release)
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
    sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
    if stop is not None:
        sel.register(stop, selectors.EVENT_READ, "stop")
    pipes = 2
    deadline = start + timeout_ms / 1000
    shell_ended = False  # (the shell had exited by itself when the deadline came)

    def at_deadline() -> bool:
        """The deadline has come: whether to end the group now, the shell still running (a
        timeout), or past the time its leftovers were given. A shell that had exited by itself
        is not timed out: what it left (holding its pipes, or the reaper waiting for it) is given
        :data:`LEFTOVERS_END_S`, as it would have been had the timeout been longer."""
        nonlocal deadline, shell_ended
        if shell_ended or _shell_alive(pgid, proc.pid):
            return True
        shell_ended = True
        _continue_reaper(proc)  # (to reap the shell and end what it left, if it was stopped)
        deadline = time.monotonic() + LEFTOVERS_END_S
        return False

    # The deadline holds even while this generator is suspended (a caller that stops reading
    # leaves it parked in a send): a timer thread ends the group then, whatever the reader does
    # (unless the shell has exited by itself: the reaper ends what it left).
    expired = threading.Event()

    def expire() -> None:
        if _shell_alive(pgid, proc.pid):
            expired.set()
            _kill_group(proc, pgid)
            return
        # The shell has exited by itself: what it left is the reaper's to end (continued, if the
        # command stopped it), within LEFTOVERS_END_S as at_deadline gives it, then the group's.
        _continue_reaper(proc)
        try:
            proc.wait(timeout=LEFTOVERS_END_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc, pgid)

    watchdog = threading.Timer(timeout_ms / 1000, expire)
    watchdog.daemon = True
    watchdog.start()
    out = _Capped(max_output)
    timed_out = stopped = False
    shell_done_at: float | None = None
    try:
        while pipes:
            if cancelled():
                _kill_group(proc, pgid)
                break
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                if not at_deadline():
                    continue
                timed_out = not shell_ended
                _kill_group(proc, pgid)
                break
            if shell_done_at is None and proc.poll() is not None:
                shell_done_at = now
            if shell_done_at is not None and now - shell_done_at > DRAIN_GRACE_S:
                break  # the shell is done; background jobs still hold its pipes (ended below)
            _continue_reaper(proc)  # (a reaper the command stopped goes on: one syscall a round)
            ready = sel.select(timeout=min(remaining, 0.1))
            if stop is not None and stop.is_set():
                # (a command whose shell had exited by itself is not said stopped, even when its
                # leftovers are ended now: its exit is its own)
                stopped = _shell_alive(pgid, proc.pid)
                _kill_group(proc, pgid)
                yield from _read_rest(sel, out)  # (what the group wrote while it ended)
                break
            for key, _ in ready:
                if key.data == "stop":
                    continue
                data = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                if not data:
                    sel.unregister(key.fileobj)
                    pipes -= 1
                    continue
                data = out.take(data)
                if data:
                    yield Chunk(key.data, data)
        if timed_out and pipes > 0:
            yield from _read_rest(sel, out)  # (as a stop's)
        # Both pipes closed while the shell runs on (``exec >/dev/null 2>&1; sleep 600``): wait
        # for it as the read loop does, a tenth of a second at a time, so a cancel (or the
        # executor stopping) still ends it at once.
        while proc.poll() is None:
            if cancelled() or (stop is not None and stop.is_set()):
                stopped = not cancelled() and _shell_alive(pgid, proc.pid)
                _kill_group(proc, pgid)
                break
            if timed_out or (deadline <= time.monotonic() and at_deadline()):
                timed_out = timed_out or not shell_ended
                _kill_group(proc, pgid)
                break
            _continue_reaper(proc)
            try:
                proc.wait(timeout=min(max(deadline - time.monotonic(), 0.01), 0.1))
            except subprocess.TimeoutExpired:
                pass
        timed_out = timed_out or expired.is_set()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            _kill_group(proc, pgid)
        else:
            _end_leftovers(pgid)
        if groups is not None:
            groups.ended(pgid)
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    code = proc.returncode if proc.returncode is not None else -9
    yield Exit(code, timed_out, out.truncated, int((time.monotonic() - start) * 1000), stopped)
