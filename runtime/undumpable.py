"""Close the daemon's environment and memory to the commands its agents run.

The daemon holds the provider keys (read from its environment) and the paired clients' state.
The commands agents run descend from it (daemon → executor → shell) and run as the same user,
and Linux lets a process read ``/proc/<pid>/environ`` (the environment the daemon was *started*
with, whatever ``os.environ`` holds now), ``mem``, ``maps`` and the open files of any process
of its user that is dumpable. Scrubbing the executors' environment is not enough: a command
reads the grandparent's. A process that is not dumpable (``prctl(PR_SET_DUMPABLE, 0)``, as
``ssh-agent`` does) is closed to every process without ``CAP_SYS_PTRACE``, and writes no core
dump. ``execve`` makes a new program dumpable again, so the executors and their commands are
unaffected. A daemon run as root gains nothing here: root reads every process anyway.
"""

from __future__ import annotations

import ctypes
import sys

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """Mark this process not dumpable; returns whether it is now (False off Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return False
    prctl.restype = ctypes.c_int
    args = (ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if prctl(ctypes.c_int(_PR_SET_DUMPABLE), ctypes.c_ulong(0), *args) != 0:
        return False
    return prctl(ctypes.c_int(_PR_GET_DUMPABLE), ctypes.c_ulong(0), *args) == 0
