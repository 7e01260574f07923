"""F-EXE-7 as a stranger tries it: run_command through the real pool and executor process.

What a model sees when a command exits by itself, is killed by a signal or times out (the
signal named, not only ``exit -9``); a command that reads its standard input (it gets an empty
one at once, never a hang); bytes that are not UTF-8; a command that closes its output and runs
on until its timeout; and the default output cap (1 MiB) exactly at it and one byte past.
F-EXE-1: ``lens executor serve --workspace ""`` is refused, not read as the current directory.
F-EXE-8: a read goes in beside a read through the real tools and pool, a command waits for it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tools.executor.server import TOKEN_ENV
from tools.workspace_tools import DEFAULT_COMMAND_OUTPUT, signal_name

from .conftest import ExecutorProcess
from .test_tools import CoreTools, core, core_tools, sub  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command, code, note, signal", [
    ("exit 3", 3, "[exit 3]", None),
    ("kill -9 $$", -9, "[killed by signal 9 (SIGKILL)]", "SIGKILL"),
    ("kill -TERM $$", -15, "[killed by signal 15 (SIGTERM)]", "SIGTERM"),
])
async def test_an_exit_code_and_a_killing_signal_are_told_apart(core: CoreTools, sub: str, command: str, code: int,
                                                                 note: str, signal: str | None) -> None:
    _, res = await core.run("run_command", {"command": command, "cwd": sub})
    assert res.is_error and res.error_code == "COMMAND_FAILED"
    assert res.content[0].text.endswith("\n" + note), res.content
    assert res.structured_content["exit_code"] == code and res.structured_content["signal"] == signal


async def test_a_command_ended_by_its_timeout_says_the_signal_and_the_timeout(core: CoreTools, sub: str) -> None:
    with trio.fail_after(30):
        _, res = await core.run("run_command", {"command": "echo started; sleep 60", "timeout_ms": 300, "cwd": sub})
    assert res.is_error and res.error_code == "COMMAND_TIMED_OUT"
    assert res.content[0].text == "started\n\n[killed by signal 15 (SIGTERM), timed out]", res.content
    assert res.structured_content["signal"] == "SIGTERM" and res.structured_content["timed_out"] is True


async def test_a_command_that_closed_its_output_and_runs_on_ends_at_its_timeout(core: CoreTools, sub: str) -> None:
    with trio.fail_after(30):
        _, res = await core.run("run_command", {"command": "echo bye; exec >&- 2>&-; sleep 60", "timeout_ms": 500,
                                                "cwd": sub})
    assert res.error_code == "COMMAND_TIMED_OUT" and res.content[0].text.startswith("bye\n")
    assert 500 <= res.structured_content["duration_ms"] < 10_000


async def test_a_command_reading_its_input_gets_an_empty_one_at_once(core: CoreTools, sub: str) -> None:
    with trio.fail_after(30):  # (the command's own timeout is a minute: a wait on stdin would show as a failure here)
        _, res = await core.run("run_command", {"command": "cat; read line; echo \"read:[$line] $?\"",
                                                "timeout_ms": 60_000, "cwd": sub})
    assert not res.is_error, res.content
    assert res.content[0].text == "read:[] 1\n\n[exit 0]"


async def test_output_that_is_not_utf8_comes_back_as_text_with_replacement_characters(core: CoreTools,
                                                                                       sub: str) -> None:
    _, res = await core.run("run_command", {"command": r"printf 'a\000b\377\376c\n'", "cwd": sub})
    assert not res.is_error, res.content
    assert res.content[0].text == "a\x00b\ufffd\ufffdc\n\n[exit 0]"


@pytest.mark.parametrize("extra", [0, 1])
async def test_the_default_output_cap_exactly_and_one_byte_past(core: CoreTools, sub: str, extra: int) -> None:
    size = DEFAULT_COMMAND_OUTPUT + extra
    _, res = await core.run("run_command", {"command": f"head -c {size} /dev/zero | tr '\\0' a", "cwd": sub})
    assert not res.is_error, res.content[0].text[-80:]
    text = res.content[0].text
    assert text.startswith("a" * DEFAULT_COMMAND_OUTPUT) and not text.startswith("a" * (DEFAULT_COMMAND_OUTPUT + 1))
    assert res.structured_content["truncated"] is bool(extra)
    assert text.endswith("[exit 0, output truncated]" if extra else "\n[exit 0]")


def test_signal_names_for_numbers_with_and_without_a_name() -> None:
    assert signal_name(0) is None and signal_name(1) is None and signal_name(-2) == "SIGINT"
    assert signal_name(-200) == "SIG200"


# ---------------------------------------------------------------------------- F-EXE-1 the command line


def test_an_empty_workspace_argument_is_refused_not_taken_for_the_current_directory(tmp_path: Path) -> None:
    # Before: `--workspace ""` (a `--workspace "$WS"` with WS unset) served the directory the
    # executor was started in; with --state beside it, it listened on the port.
    (tmp_path / "cwd").mkdir()
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", "",
                           "--listen", "127.0.0.1:0", "--state", str(tmp_path / "state"), "--exit-with-stdin"],
                          cwd=tmp_path / "cwd", env={**os.environ, TOKEN_ENV: secrets.token_urlsafe(32),
                                                     "PYTHONPATH": str(ROOT)},
                          input="", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "listening on" not in proc.stdout
    assert proc.stderr == "lens executor: WORKSPACE_INVALID: workspace is empty: --workspace needs a directory\n"


# ---------------------------------------------------------------------------- F-EXE-8 the domain lock


async def test_a_read_goes_in_beside_a_read_and_a_command_waits_for_both(executor: ExecutorProcess, tmp_path: Path,
                                                                         sub: str) -> None:
    """Through the real tools and the pool's own lock: with a read holding the execution domain,
    read_file still runs (reads are concurrent), run_command waits until the read ends (a
    command is a write), then runs."""
    (executor.workspace / sub / "f.txt").write_text("x\n")
    async with core_tools(executor, tmp_path) as (tools, pool):
        ex = await pool.get("p1")
        marker = executor.workspace / sub / "ran"
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                async with ex.lock.read():
                    _, res = await tools.run("read_file", {"path": f"{sub}/f.txt"})
                    assert not res.is_error and "x" in res.content[0].text  # beside the held read
                    done = trio.Event()

                    async def command() -> None:
                        _, ran = await tools.run("run_command", {"command": "touch ran", "cwd": sub})
                        assert not ran.is_error, ran.content
                        done.set()

                    nursery.start_soon(command)
                    while ex.lock._writers_waiting == 0:  # (the command is at the lock, waiting)
                        await trio.sleep(0.01)
                    assert not marker.exists() and not done.is_set()
                await done.wait()
        assert marker.exists()


@pytest.mark.parametrize("args, says", [
    ({"command": "echo hi", "bogus": 1}, "run_command does not take 'bogus'"),
    ({}, "run_command needs 'command'"),
    ({"command": 5}, "command must be a string, got 5"),
    ({"command": ""}, "command is empty"),
    ({"command": "  \n"}, "command is empty"),
])
async def test_bad_arguments_of_a_command_are_named_in_the_refusal(core: CoreTools, args: dict, says: str) -> None:
    _, res = await core.run("run_command", args)
    assert res.is_error and res.error_code == "INVALID_ARGUMENT"
    text = res.content[0].text
    assert says in text, text
    assert "{command, timeout_ms?, max_output_bytes?, cwd?}" in text, text  # (what it takes, still said)
