"""The daemon's environment is closed to commands of the same user (``lens serve`` calls
``make_undumpable`` first). Shown for real: a process of an unprivileged user starts a shell
that reads its parent's ``/proc/<pid>/environ``, before and after the call."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import ctypes, os, subprocess
    from runtime.undumpable import make_undumpable
    os.chdir("/")
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    # a change of user makes a process undumpable by itself: be as one that never was root
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)

    def child_reads() -> str:
        r = subprocess.run(["/bin/sh", "-c", "cat /proc/$PPID/environ"], capture_output=True, env={})
        return "read" if b"LENS_TEST_KEY=sk-secret" in r.stdout else "refused"

    before = child_reads()
    made = make_undumpable()
    print(before, made, child_reads())
""")


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                    reason="needs Linux and root (to run the check as an unprivileged user)")
def test_a_child_of_the_same_user_cannot_read_an_undumpable_parents_environment():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"PATH": "/usr/bin:/bin", "LENS_TEST_KEY": "sk-secret", "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["read", "True", "refused"]

