"""The process groups of commands in progress, kept on disk so a restarted executor reaps what a
killed one left running.

Each command runs in a process group of its own (:mod:`tools.executor.commands`). An executor
stopped normally kills those groups itself; one killed with SIGKILL cannot, and its commands
would run on unowned. So while a command runs, a small file names its group::

    <state_dir>/commands/<pgid>     "<boot id> <leader start> <executor pid> <executor start>"

and it is removed when the command has ended. An executor starting over the same state
directory kills every group still named there whose executor is gone
(:meth:`GroupRegistry.reap`): SIGKILL to the whole group, since nobody waits for its output any
more. The pool, reaping a local executor that died, also waits (bounded) until no process of
those groups runs (:meth:`GroupRegistry.end_left`). Start times are field 22 of
``/proc/<pid>/stat``. The boot id and the leader's start time make sure a group id the kernel has
since given to another process is left alone: after a reboot nothing is killed, and a live
leader with another start time is someone else. (While any member of a group lives, Linux never
hands its id to a new process, so a group whose leader has exited but whose members live on is
still the command's.) The executor's pid and start time
make sure the commands of an executor still running over the same directory (a second
``lens executor serve`` on the same workspace) are left to it.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Callable

from tools.reaper import live_members, stat

log = logging.getLogger("lens.executor.groups")

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return "unknown"


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks after boot), or ``None`` if no such process."""
    fields = stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs: a zombie (killed, not yet waited for by
    its parent) runs nothing, but keeps the group's id in use."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(live_members((pgid,)))


def wait_ended(pgids: list[int], within: float, stopped: Callable[[], bool] = lambda: False) -> bool:
    """Wait, up to ``within`` seconds, until no process of the groups ``pgids`` runs; False (and
    a warning) if one still ran at the bound, or once ``stopped()`` says to wait no more (the
    daemon's stop now: a thread cannot be cancelled)."""
    until = time.monotonic() + within
    while pgids := [pgid for pgid in pgids if _runs(pgid)]:
        if stopped():
            log.warning("command process group(s) %s still ran when the wait for them was stopped", pgids)
            return False
        if time.monotonic() >= until:
            log.warning("command process group(s) %s still ran %g s after their SIGKILL", pgids, within)
            return False
        time.sleep(0.005)
    return True


def _forget(path: Path) -> None:
    """Remove the record ``path``; one that cannot be removed (a directory in its place, a
    state directory made read-only) is said and left, never keeps an executor from starting."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc.strerror or exc)


class GroupRegistry:
    """Records the groups of running commands under ``state_dir`` (``None``: records nothing)."""

    def __init__(self, state_dir: Path | None) -> None:
        self.directory = state_dir / "commands" if state_dir is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)

    def started(self, pgid: int) -> None:
        if self.directory is None:
            return
        start = _start_time(pgid)
        if start is None:
            return  # already gone: nothing to reap
        me = os.getpid()
        path = self.directory / str(pgid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{_boot_id()} {start} {me} {_start_time(me)}")
        os.replace(tmp, path)

    def ended(self, pgid: int) -> None:
        if self.directory is not None:
            (self.directory / str(pgid)).unlink(missing_ok=True)

    def reap(self) -> list[int]:
        """Kill the groups an earlier executor left named here; return the ids signalled."""
        return self._kill_left()[0]

    def end_left(self, within: float, stopped: Callable[[], bool] = lambda: False) -> bool:
        """Kill the groups an earlier executor left named here (:meth:`reap`) and wait, up to
        ``within`` seconds (or until ``stopped()``), until none of their processes runs (SIGKILL
        is sent, not yet done); True when every group so ended, False when a kill was refused, a
        record could not be read, or a group still ran at the bound or the stop. A process that
        left its group (``setsid``) is not one of them: its command's reaper ends it."""
        killed, failed = self._kill_left()
        return wait_ended(killed, within, stopped) and not failed

    def _kill_left(self) -> tuple[list[int], bool]:
        """The groups signalled by :meth:`reap`, and whether any named here could not be."""
        if self.directory is None:
            return [], False
        boot = _boot_id()
        killed: list[int] = []
        failed = False
        for path in sorted(self.directory.iterdir()):
            keep = False
            try:
                if not path.name.isdigit():
                    continue  # a stray temp file of an interrupted write
                pgid = int(path.name)
                recorded_boot, leader_start, owner, owner_start = path.read_text().split()
                if pgid <= 1 or recorded_boot != boot:
                    continue  # rebooted since: that group is long gone
                if _start_time(int(owner)) == owner_start:
                    keep = True  # its executor still runs: the group is that executor's to end
                    continue
                if _start_time(pgid) not in (None, leader_start):
                    continue  # the id now belongs to another process
                os.killpg(pgid, signal.SIGKILL)
                killed.append(pgid)
            except (ProcessLookupError, ValueError):
                pass  # the group ended by itself (or the record is unreadable)
            except PermissionError:
                failed = True
                log.warning("cannot kill process group %s left by an earlier executor", path.name)
            except OSError as exc:
                failed = True
                log.warning("cannot read %s: %s", path, exc)
            finally:
                if not keep:
                    _forget(path)
        if killed:
            log.warning("killed %d command process group(s) left running by an earlier executor: %s",
                        len(killed), killed)
        return killed, failed
