"""The suite's check that a test leaves no child process running (``tests/conftest.py``,
``_no_child_left_running``), run on a small suite of its own in a child pytest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.procfs import read_proc

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = "from tests.conftest import _no_child_left_running  # noqa: F401\n"
TESTS = '''
import subprocess

LEFT = []


def test_leaves_a_child():
    LEFT.append(subprocess.Popen(["sleep", "60"]))


def test_ends_its_child():
    proc = subprocess.Popen(["sleep", "60"])
    proc.kill()
    proc.wait()


def test_a_child_that_is_ending_is_waited_for():
    subprocess.Popen(["sh", "-c", "sleep 0.2"])
'''


def _pytest_in(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """A pytest run of the tests written in ``tmp_path``, in a process of its own; its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-W", "ignore::ResourceWarning", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done, done.stdout + done.stderr


def test_a_child_left_running_fails_the_test_that_left_it_naming_it(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_children.py").write_text(TESTS)
    done, out = _pytest_in(tmp_path)
    assert done.returncode == 1, out
    assert "3 passed, 1 error" in out, out  # (the leaking test passes, its teardown fails)
    assert "ERROR at teardown of test_leaves_a_child" in out, out
    found = re.search(r"a child process was left running: pid (\d+): sleep 60", out)
    assert found, out
    left = read_proc(found.group(1))  # ended by the check, so the tests after it start clean
    assert left is None or left.argv[:2] != [b"sleep", b"60"] or left.state in ("Z", "X")


INTERRUPTED_CONFTEST = "from tests.conftest import pytest_runtest_makereport  # noqa: F401\n"
INTERRUPTED_TESTS = '''
import os
import signal

import trio


async def test_interrupted_inside_trio():
    os.kill(os.getpid(), signal.SIGINT)  # (what a Ctrl-C or `timeout -s INT` delivers)
    await trio.sleep_forever()


def test_after_the_interrupt():
    pass
'''


def test_a_ctrl_c_inside_a_trio_test_stops_the_run(tmp_path: Path) -> None:
    # Trio wraps the KeyboardInterrupt in an exception group, which pytest took for a failure of
    # that test and went on with the next ones: a run cut off by `timeout -s INT` ran to its end.
    (tmp_path / "conftest.py").write_text(INTERRUPTED_CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    (tmp_path / "test_interrupted.py").write_text(INTERRUPTED_TESTS)
    done, out = _pytest_in(tmp_path)
    assert "1 failed" in out and "passed" not in out, out
    assert "Interrupted" in out and "KeyboardInterrupt" in out, out
    assert done.returncode == 2, out  # (pytest's exit status of an interrupted run)
