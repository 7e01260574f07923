"""The installed ``lens`` console script, run as a real process, and a small log for it to open:
what the command-line tests that run ``lens`` in a temp working directory share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trio

from events.store import Draft, open_store
from events.types import ProjectCreated


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


def write_log(data: Path) -> None:
    """A log in ``data`` holding one event (a project ``p``)."""
    async def write() -> None:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(ProjectCreated(name="p", workspace="/ws"), project_id="p"))

    trio.run(write)
