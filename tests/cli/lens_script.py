"""The installed ``lens`` console script, run as a real process, a small log for it to open and
how its refusals read: what the command-line tests that run ``lens`` share."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import trio

from events.store import Draft, open_store
from events.types import ProjectCreated
from tools.executor.server import TOKEN_ENV


def lens_script() -> Path:
    """The installed ``lens`` console script next to this interpreter (never one on PATH, which
    may belong to another checkout)."""
    script = Path(sys.executable).parent / "lens"
    assert script.exists(), f"the `lens` console script is not installed next to {sys.executable}"
    return script


def lens(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``lens ARGS`` in ``cwd`` (with ``env`` in place of this process's environment, where
    given); stdout and stderr as text, at most 60 s."""
    return subprocess.run([str(lens_script()), *args], capture_output=True, text=True, cwd=cwd, timeout=60, env=env)


def executor_serve(*args: str, cwd: Path | None = None, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``lens executor serve --exit-with-stdin ARGS`` with a token of its own, in ``cwd`` (None:
    this process's), with ``home`` as HOME and XDG_STATE_HOME under it where given; its input is
    empty, so one that starts serving stops at once. stdout and stderr as text, at most 60 s."""
    env = {**os.environ, TOKEN_ENV: secrets.token_urlsafe(32)}
    if home is not None:
        env |= {"HOME": str(home), "XDG_STATE_HOME": str(home / ".local" / "state")}
    return subprocess.run([str(lens_script()), "executor", "serve", "--exit-with-stdin", *args], cwd=cwd, env=env,
                          input="", capture_output=True, text=True, timeout=60)


def refused(res: subprocess.CompletedProcess[str], code: str) -> str:
    """The one stderr line of a command that could not run (exit 2, nothing on stdout, no
    traceback), after checking it carries ``code``."""
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout[:300], res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"lens: {code}: "), line
    return line


def store_corrupt_said(command: str, data: Path, cwd: Path) -> str:
    """What ``command`` (``serve`` or a ``lens log`` command) says of the damaged log in
    ``data``, after checking it refused it as ``STORE_CORRUPT`` without a traceback: ``serve``
    exits 2 (its stderr), ``verify`` exits 1 naming the problem on stdout (that line), the
    other ``log`` commands exit 2 with one stderr line (:func:`refused`)."""
    if command == "serve":
        res = lens(cwd, "serve", "--data", str(data), "--port", "0")
        assert res.returncode == 2 and "Traceback" not in res.stderr, (res.returncode, res.stderr[-800:])
        return res.stderr
    if command == "verify":
        res = lens(cwd, "log", "verify", "--data", str(data))
        assert res.returncode == 1 and "Traceback" not in res.stderr, (res.stdout, res.stderr)
        problem, summary = res.stdout.splitlines()
        assert problem.startswith("log: STORE_CORRUPT: ") and summary == "FAILED: the log cannot be read", res.stdout
        return problem
    return refused(lens(cwd, "log", command, "--data", str(data)), "STORE_CORRUPT")


def write_log(data: Path) -> None:
    """A log in ``data`` holding one event (a project ``p``)."""
    async def write() -> None:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(ProjectCreated(name="p", workspace="/ws"), project_id="p"))

    trio.run(write)
