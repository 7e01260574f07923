"""An executor a test starts (:func:`tests.executor.conftest.start_executor`, behind the module's
``executor`` fixture and :func:`running_executor`) ends with the test process, however that
process ends: a run cut off by ``timeout -s TERM`` (Python's default SIGTERM ends the process
without running any fixture's teardown) or killed outright left it serving, re-parented to init,
in a session of its own that the signal to the run's process group never reached.

A real child Python process starts the executor as the fixture does, says its pid, and waits; it
is then ended by the signal, and the executor must follow (a bounded poll of ``/proc``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.executor.conftest import poll_until
from tests.procfs import alive

ROOT = Path(__file__).resolve().parents[2]

STARTER = """
import sys
from pathlib import Path
from tests.executor.conftest import start_executor
ex = start_executor(Path(sys.argv[1]))
print(ex.pid, flush=True)
sys.stdin.read()  # (held until the test ends this process)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_an_executor_a_test_started_ends_when_the_test_process_is_ended(tmp_path: Path, sig: signal.Signals) -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path / "executor5")], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    executor_pid = None
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline()  # (bounded: start_executor gives up after its own timeout)
        assert line.strip().isdigit(), (line, starter.stderr.read() if starter.stderr else b"")
        executor_pid = int(line)
        assert alive(executor_pid)
        starter.send_signal(sig)
        starter.wait(timeout=20)
        assert poll_until(lambda: not alive(executor_pid), 20), \
            f"the executor (pid {executor_pid}) outlived the test process that started it ({sig.name})"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        for stream in (starter.stdin, starter.stdout, starter.stderr):
            if stream is not None:
                stream.close()
        if executor_pid is not None and alive(executor_pid):
            os.kill(executor_pid, signal.SIGKILL)  # (not ours to wait for: init reaps it)
