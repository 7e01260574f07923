"""The processes a server started that left its process group, found through ``/proc`` (Linux).

A server leads a process group of its own, signalled whole when it is stopped. A child that calls
``setsid`` (a daemonising helper; Node's ``detached: true``, Python's ``start_new_session``) or
moves to another group escapes that signal. While the server lives such a child is still its
descendant: :meth:`Escaped.add_from` walks the server's descendants (through every ``/proc/<pid>/stat``)
and opens a *pidfd* for each one outside the group, so the process can be signalled later without
mistaking another for it once it has exited and its pid is reused. What the server's descendants
start after the walk, and a child whose parent exited before it (re-parented to init), are not
found. Where pidfds or ``/proc`` are not available nothing is found, and only the group is
signalled, as before.

The walk reads every ``/proc/<pid>/stat`` (about 2 ms over some 100 processes, more on a host
running thousands), so it runs in a worker thread, not on the event loop. While it runs the server
must stay unreaped, or its pid could pass to another process whose children the walk would take
for the server's: a pidfd of the server, opened before the walk, tells afterwards whether it was
reaped meanwhile (``waitid`` with ``WNOWAIT`` reaps nothing), and if it was, the walk's findings
are dropped.
"""

from __future__ import annotations

import os
import signal

import trio

from tools.reaper import stat


class Escaped:
    """Open pidfds of a server's descendants outside its group; :meth:`close` when done."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}  # pid -> pidfd

    def __len__(self) -> int:
        return len(self._fds)

    async def add_from(self, leader: int) -> None:
        """Add the descendants of ``leader`` outside its group that are not held yet.

        ``leader`` is a child of this process not yet reaped: call this with no await between
        that check and the call. Cancelling it is safe: the walk holds nothing, and an abandoned
        one ends by itself."""
        try:
            leader_fd = os.pidfd_open(leader)
        except (OSError, AttributeError):  # gone, or no pidfds here: none could be held either
            return
        try:
            found = await trio.to_thread.run_sync(_outside_group, leader, abandon_on_cancel=True)
            if _unreaped(leader_fd):
                self._hold(found)
        finally:
            os.close(leader_fd)

    def _hold(self, found: list[tuple[int, str]]) -> None:
        for pid, start in found:
            if pid in self._fds:
                continue
            try:
                fd = os.pidfd_open(pid)
            except (OSError, AttributeError):  # gone, or no pidfds here (Linux < 5.3)
                continue
            if _start_time(pid) != start:  # (the pid was reused between the walk and the open)
                os.close(fd)
                continue
            self._fds[pid] = fd

    def signal(self, sig: int) -> None:
        for fd in self._fds.values():
            try:
                signal.pidfd_send_signal(fd, sig)
            except (ProcessLookupError, PermissionError, OSError):
                pass

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _unreaped(pidfd: int) -> bool:
    """Whether the child ``pidfd`` names has not been reaped (it may have exited: a zombie keeps its
    pid, so nothing else has it yet). Reaps nothing."""
    try:
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, OSError, AttributeError):  # reaped (or no P_PIDFD: cannot tell)
        return False
    return True


def _stat(pid: str) -> tuple[int, int, str] | None:
    """``(ppid, pgrp, start time)`` of a process, from ``/proc/<pid>/stat``; ``None`` if gone."""
    fields = stat(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[1]), int(fields[2]), fields[19]


def _start_time(pid: int) -> str | None:
    st = _stat(str(pid))
    return st[2] if st is not None else None


def _outside_group(leader: int) -> list[tuple[int, str]]:
    """``(pid, start time)`` of every descendant of ``leader`` whose group is not ``leader``'s."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, str]] = {}
    for entry in entries:
        st = _stat(entry)
        if st is None:
            continue
        ppid, pgrp, start = st
        pid = int(entry)
        children.setdefault(ppid, []).append(pid)
        info[pid] = (pgrp, start)
    found: list[tuple[int, str]] = []
    todo = list(children.get(leader, ()))
    while todo:
        pid = todo.pop()
        pgrp, start = info[pid]
        if pgrp != leader:
            found.append((pid, start))
        todo.extend(children.get(pid, ()))
    return found
