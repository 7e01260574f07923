"""The command runner (in the executor process) reads the shell's process group from its reaper's
status pipe before the command is released. A read that fails there leaves a command that did not
start: its reaper is ended and waited for, and the caller gets ``CommandNotStarted``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tests.procfs import children
from tools.executor.commands import CommandNotStarted, run_command


def test_a_failed_read_of_the_status_pipe_ends_and_waits_for_the_reaper(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real_pipe, real_read = os.pipe, os.read
    pipes: list[tuple[int, int]] = []

    def pipe() -> tuple[int, int]:
        fds = real_pipe()
        pipes.append(fds)
        return fds

    def read(fd: int, n: int) -> bytes:
        if len(pipes) >= 2 and fd == pipes[1][0]:  # run_command's second pipe: the status pipe
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_read(fd, n)

    before = set(children(zombies=True))
    monkeypatch.setattr(os, "pipe", pipe)
    monkeypatch.setattr(os, "read", read)
    try:
        with pytest.raises(CommandNotStarted) as caught:
            list(run_command("touch ran", tmp_path, timeout_ms=10_000, max_output=1024, cancelled=lambda: False))
    finally:
        monkeypatch.undo()
    assert caught.value.error.errno == errno.EIO
    # Ended and waited for by the time the error is raised: not running, not even a zombie.
    assert {pid: p.argv for pid, p in children(zombies=True).items() if pid not in before} == {}
    assert not (tmp_path / "ran").exists()  # the gated shell ran nothing
