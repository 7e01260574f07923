"""Reading the processes of this machine from ``/proc`` (Linux), for tests that must find or
wait for a process they did not start themselves, and for the suite's check that a test left no
child of its own running (``children``)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Proc(NamedTuple):
    pid: int
    state: str  # R, S, Z…
    ppid: int
    pgrp: int
    argv: list[bytes]
    started: float  # seconds since boot (CLOCK_BOOTTIME), to a clock tick


def read_proc(pid: int | str) -> Proc | None:
    """The process ``pid``, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # (the command name may hold spaces and ")")
    return Proc(int(pid), fields[0], int(fields[1]), int(fields[2]), argv, int(fields[19]) / CLOCK_TICKS)


def alive(pid: int) -> bool:
    """Whether ``pid`` is there and has not ended (an ended process not yet waited for is a
    zombie, ``Z``): a process may end, and be reaped, between any two reads of ``/proc``."""
    p = read_proc(pid)
    return p is not None and p.state not in ("Z", "X")


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state ``T`` or ``t``): a SIGSTOP takes effect
    at each thread's next return to user space, not when ``kill`` returns."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # (a thread that ended meanwhile)
        if stat[stat.rindex(")") + 2] not in "Tt":
            return False
    return True


def thread_names(pid: int) -> Counter[str]:
    """The process's threads by kernel name (``/proc/<pid>/task/*/comm``; a thread that ends
    meanwhile is left out, and so is every thread once the process is gone)."""
    names: Counter[str] = Counter()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return names
    for tid in tasks:
        try:
            names[Path(f"/proc/{pid}/task/{tid}/comm").read_text().rstrip("\n")] += 1
        except OSError:
            continue
    return names


def processes() -> Iterator[Proc]:
    """Every process still there when its turn comes (one that ends meanwhile is skipped)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (p := read_proc(entry)) is not None:
            yield p


def executor_of(pid: int) -> int | None:
    """The executor child (``lens executor serve``) of the daemon ``pid``, if it has one."""
    for p in processes():
        if p.ppid == pid and b"executor" in p.argv and b"serve" in p.argv and p.state != "Z":
            return p.pid
    return None


def running_in(directory: Path) -> list[Proc]:
    """The live processes whose working directory is ``directory`` or under it (a process of
    another user, whose directory cannot be read, is not one)."""
    root = os.path.realpath(directory)
    found = []
    for p in processes():
        if p.state == "Z":
            continue
        try:
            cwd = os.readlink(f"/proc/{p.pid}/cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            found.append(p)
    return found


def children(*, zombies: bool = False) -> dict[int, Proc]:
    """This process's children still running (and, with ``zombies``, those ended but not yet
    waited for), from every thread's ``/proc/self/task/<tid>/children`` (a child is listed under
    the thread that forked it)."""
    pids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:  # (os.open and one os.read: half the time of a Path.read_text, per thread)
            fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY)
        except OSError:
            continue  # (the thread ended meanwhile)
        try:
            pids.update(map(int, os.read(fd, 1 << 20).split()))
        except OSError:
            continue
        finally:
            os.close(fd)
    return {pid: p for pid in pids if (p := read_proc(pid)) is not None and (zombies or p.state not in ("Z", "X"))}


def command_line(p: Proc) -> str:
    return " ".join(a.decode(errors="replace") for a in p.argv if a) or f"pid {p.pid}"


def blocked_writing_a_pipe(pid: int) -> bool:
    """Whether ``pid`` sleeps in a write to a full pipe (its kernel wait channel: ``pipe_write``,
    ``anon_pipe_write`` on newer kernels). Reading another process's wait channel needs ptrace
    access to it (the suite's user, or root for a process that is not dumpable, as `lens serve` is)."""
    try:
        return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def listening_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` holds a listening socket on (IPv4 and IPv6), from its descriptors
    and ``/proc/<pid>/net/tcp*``."""
    inodes: set[str] = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and cols[9] in inodes:  # (state LISTEN)
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports
