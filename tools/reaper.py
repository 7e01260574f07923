"""The parent of one MCP server or one executor command:
``python -I -S reaper.py STATUS_FD HAD_LC_CTYPE GROUP ARGV...`` (Linux).

:func:`tools.mcp.client.open_connection` and :func:`tools.executor.commands.run_command` start
this script in place of the server or the command's shell, as the leader of a session and process
group of its own. It makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a
process the child's tree leaves behind when its parent exits — a double fork (fork, ``setsid``,
fork, exit), a ``setsid`` process whose parent ended or was killed — is re-parented to it rather
than to init. It starts ``ARGV`` with its standard streams, and then holds none of them (they
become ``/dev/null``), so the caller sees the child's stdout end when the child's processes close
it. ``GROUP`` says where the child runs:

- ``same:PARENT_PID``: in this process's group (an MCP server: the daemon signals this group;
  ``PARENT_PID`` is the daemon's, the process watched);
- ``own:LINGER_S``: in a process group of its own, which the caller signals and records (an
  executor command: the shell leads its group, as ``$$`` tells the command). The child's pid is
  written to ``STATUS_FD`` (``pid N``). Once the child has exited, what is left of its tree may
  run on for ``LINGER_S`` seconds (output still arriving) before it is ended.

While the child runs it reaps whatever is re-parented to it and ends. A SIGTERM or SIGINT it gets
(the daemon signals the whole group) is passed on to every child of its own, the adopted ones
included, which may have left the group. With ``same`` (an MCP server), so is the end of its
own parent, the daemon, however that ended (a kill -9 included), also before this process got
to watch it: a thread waits on ``PARENT_PID``'s pidfd and then has the main thread pass a
SIGTERM on, and SIGKILL the children still there after :data:`LEFTOVER_GRACE_S`
(:func:`_watch_parent`). (A server that reads its standard input sees the daemon's end there;
one that reads nothing at that moment ran on for good, re-parented to init.) An executor's
commands are not watched so: they are left to the executor's own record of their groups, and
the next executor on the same state directory ends those a killed one left
(:mod:`tools.executor.groups`); a remote executor killed and never started again leaves them
running, the item "An executor killed with SIGKILL" that docs/decisions.md's "Audit, once more:
tools and the executor end to end" left. Once the child has exited, it ends what is left of
the child's processes — its own children and the members of its group and of the child's group
— with SIGTERM, then SIGKILL after :data:`LEFTOVER_GRACE_S`, and exits as the child did (the
same status, or killed by the same signal).

Arguments not of that form are refused with the usage on standard error (status 2).
``STATUS_FD`` is the write end of a pipe the caller reads: closed once the child runs (after its
pid, with ``own``), or given the ``errno`` (in decimal) of why it could not be started.
``HAD_LC_CTYPE`` is ``1`` when the child's environment holds ``LC_CTYPE``: else one that Python's
start added (PEP 538's locale coercion) is removed, so the child gets the environment it was
given. Where the subreaper cannot be set, the child is run in place of this process, as it was
before (``exec``; with ``own`` this process's pid, the group's, is written first).
Standard library only; imports nothing of Lens, so it starts in well under a tenth of a second
with ``-I -S``. One runs beside every server for as long as the server does, so it imports as
little as it can: :mod:`_signal`, not :mod:`signal` (whose enums bring in ``enum``,
``functools`` and ``collections``: 0.65 MB of the 4.1 MB of private memory this process had).
"""

from __future__ import annotations

import _signal as signal  # (the same functions and numbers as signal's, without its enums)
import os
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE_S = 2.0
KILL_WAIT_S = 5.0  # after SIGKILL: how long what is left is waited for before this exits anyway


def _subreaper() -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (the state) on, or ``None`` if no such
    process: the one reader of that file, here and for the executor (:mod:`tools.executor.groups`,
    :mod:`tools.executor.commands`) and the MCP client (:mod:`tools.mcp.escaped`)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything: split after its last ")".
    return raw[raw.rfind(b")") + 2:].decode("ascii", "replace").split()


def procs() -> list[tuple[int, int, int, str]]:
    """``(pid, ppid, pgrp, state)`` of every process, from ``/proc/<pid>/stat``."""
    found = []
    for entry in os.listdir("/proc"):
        fields = stat(entry) if entry.isdigit() else None
        if fields is not None and len(fields) > 2:
            found.append((int(entry), int(fields[1]), int(fields[2]), fields[0]))
    return found


def running(state: str) -> bool:
    """Whether a process in ``state`` runs: a zombie (Z: exited, not yet waited for) or one
    dead (X) does not."""
    return state not in ("Z", "X")


def live_members(groups: tuple[int, ...]) -> list[int]:
    """The processes of ``groups`` that still run."""
    return [pid for pid, _, pgrp, state in procs() if pgrp in groups and running(state)]


def _leftovers(me: int, groups: tuple[int, ...]) -> list[int]:
    """Live processes that are this one's children or members of ``groups`` (itself left out)."""
    return [pid for pid, ppid, pgrp, state in procs()
            if pid != me and (ppid == me or pgrp in groups) and running(state)]


def _reap_ended() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_leftovers(me: int, groups: tuple[int, ...], linger_s: float = 0.0) -> None:
    linger_until = time.monotonic() + linger_s
    term_until = linger_until + LEFTOVER_GRACE_S
    kill_until = term_until + KILL_WAIT_S
    while True:
        _reap_ended()
        left = _leftovers(me, groups)
        now = time.monotonic()
        if not left or now > kill_until:
            return
        if now < linger_until:
            time.sleep(0.02)
            continue
        sig = signal.SIGTERM if now < term_until else signal.SIGKILL
        for pid in left:
            try:
                os.kill(pid, sig)
                if sig == signal.SIGTERM:  # (a stopped process acts on it once continued)
                    os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)  # (a process killed now is re-parented, or reaped, the next time round)


def _children_of(me: int) -> list[int]:
    return [pid for pid, ppid, _, state in procs() if ppid == me and running(state)]


def _watch_parent(parent: int, gone: list[bool]) -> None:
    """Once ``parent`` (the daemon's pid, as the caller gave it) has ended: SIGTERM to this
    process's main thread (its handler passes it on to the children), then, after
    :data:`LEFTOVER_GRACE_S`, SIGUSR1 to it with ``gone`` set (its handler SIGKILLs the children
    still there). The main thread does the signalling, as it is the one that reaps (``waitpid``):
    a pid it read is not reaped and reused meanwhile. If this process's parent is not ``parent``
    already (the daemon ended between this process's start and now: it was re-parented), or no
    longer once the pidfd is open (``parent``'s pid was reused), that is acted on at once. Nothing
    is watched where pidfds are missing (Linux before 5.3): the parent's end is then seen as
    before, by a child that reads its standard input."""
    fd = -1
    if os.getppid() == parent:
        try:
            fd = os.pidfd_open(parent)
        except ProcessLookupError:  # (ended since)
            fd = -1
        except (AttributeError, OSError):
            return
        if fd >= 0 and os.getppid() != parent:  # (the pidfd is another process's: the pid was reused)
            os.close(fd)
            fd = -1
    import _thread

    main_thread = _thread.get_ident()

    def watch() -> None:
        if fd >= 0:
            import select

            poller = select.poll()
            poller.register(fd, select.POLLIN)  # (readable once the process has ended)
            while not poller.poll():
                pass
        signal.pthread_kill(main_thread, signal.SIGTERM)
        time.sleep(LEFTOVER_GRACE_S)
        gone.append(True)
        signal.pthread_kill(main_thread, signal.SIGUSR1)

    _thread.start_new_thread(watch, ())


def _exit_as(status: int) -> int:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # (the server's crash, not ours)
        except (ImportError, ValueError, OSError):
            pass
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # (SIGKILL and SIGSTOP have no handler to reset)
            pass
        os.kill(os.getpid(), sig)
        return 128 + sig  # (a signal that does not end a process)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


USAGE = ("usage: reaper.py STATUS_FD HAD_LC_CTYPE GROUP ARGV...\n"
         "  STATUS_FD: a file descriptor (a decimal number); HAD_LC_CTYPE: 0 or 1;\n"
         "  GROUP: same:PARENT_PID (an MCP server; PARENT_PID, the daemon's) or own:LINGER_S\n"
         "  (an executor command; seconds, 0 or more); ARGV: the command, at least its name\n")


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _arguments(argv: list[str]) -> tuple[int, bool, int, float, list[str]] | None:
    """``(status_fd, had_lc_ctype, parent, linger_s, command)`` (``parent`` 0 with ``own``), or
    ``None`` when ``argv`` is not as :data:`USAGE` says."""
    if len(argv) < 4 or not _decimal(argv[0]) or argv[1] not in ("0", "1"):
        return None
    kind, _, value = argv[2].partition(":")
    if kind == "same" and _decimal(value) and int(value) > 0:
        return int(argv[0]), argv[1] == "1", int(value), 0.0, argv[3:]
    if kind == "own":
        try:
            linger_s = float(value)
        except ValueError:
            return None
        if 0.0 <= linger_s < float("inf"):  # (not NaN, not negative)
            return int(argv[0]), argv[1] == "1", 0, linger_s, argv[3:]
    return None


def main(argv: list[str]) -> int:
    parsed = _arguments(argv)
    if parsed is None:
        sys.stderr.write(USAGE)
        return 2
    status_fd, had_lc_ctype, parent, linger_s, command = parsed
    own_group = parent == 0
    os.set_inheritable(status_fd, False)  # (the child does not get it: it closes at its exec)
    if not had_lc_ctype:  # (Python's start may have set it: PEP 538's locale coercion)
        os.environ.pop("LC_CTYPE", None)
    if not _subreaper():
        if own_group:
            os.write(status_fd, b"pid %d\n" % os.getpid())  # (the command is this process, its group's leader)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(status_fd, b"%d\n" % (exc.errno or 0))
            return 127
    try:
        # (Python ignores SIGPIPE and SIGXFSZ; the child starts with their defaults, as subprocess does)
        server = os.posix_spawnp(command[0], command, os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                                 **({"setpgroup": 0} if own_group else {}))
    except OSError as exc:
        os.write(status_fd, b"%d\n" % (exc.errno or 0))
        return 127
    if own_group:
        os.write(status_fd, b"pid %d\n" % server)
    os.close(status_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    me = os.getpid()

    def pass_on(sig: int, _frame: object) -> None:
        for pid in _children_of(me):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    gone: list[bool] = []  # (set by the parent's watch, once it is time to SIGKILL)

    def kill_children(_sig: int, _frame: object) -> None:
        if gone:  # (a SIGUSR1 from elsewhere is not the watch's)
            pass_on(signal.SIGKILL, None)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, pass_on)
    if not own_group:
        signal.signal(signal.SIGUSR1, kill_children)
        _watch_parent(parent, gone)
    status = 0
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == server:
            status = st
            break
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # (the daemon's group signals now reach what is left)
    _end_leftovers(me, (me, server), linger_s)
    return _exit_as(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
