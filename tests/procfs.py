"""Reading the processes of this machine from ``/proc`` (Linux), for tests that must find or
wait for a process they did not start themselves."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple


class Proc(NamedTuple):
    pid: int
    state: str  # R, S, Z…
    ppid: int
    pgrp: int
    argv: list[bytes]


def processes() -> Iterator[Proc]:
    """Every process still there when its turn comes (one that ends meanwhile is skipped)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # (the command name may hold spaces and ")")
        yield Proc(int(entry), fields[0], int(fields[1]), int(fields[2]), argv)


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
