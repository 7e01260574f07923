"""The installed ``lens`` script driven as a user at a shell drives it, on the cases the earlier
command-line passes do not list: ``lens executor serve``'s ``--state`` and ``--workspace`` written
empty or with a leading ``~``."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tools.executor.server import TOKEN_ENV

from tests.cli.lens_script import lens_script


def executor_serve(cwd: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``lens executor serve --listen 127.0.0.1:0 --exit-with-stdin ARGS`` in ``cwd`` with ``home``
    as HOME and XDG_STATE_HOME under it; one that starts serving stops at its input's end."""
    env = {**os.environ, TOKEN_ENV: secrets.token_urlsafe(32), "HOME": str(home),
           "XDG_STATE_HOME": str(home / ".local" / "state")}
    return subprocess.run([str(lens_script()), "executor", "serve", "--listen", "127.0.0.1:0", "--exit-with-stdin",
                           *args], cwd=cwd, env=env, input="", capture_output=True, text=True, timeout=60)


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A working directory, a home directory and a workspace (``~/ws``), each empty."""
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    (home / "ws").mkdir(parents=True)
    return cwd, home, home / "ws"


def test_an_empty_state_directory_is_refused_not_taken_for_the_default(places: tuple[Path, Path, Path]) -> None:
    # `--state ""` (as `--state "$STATE"` with STATE unset writes it) served with the default
    # state directory, as if --state were left out, where `--workspace ""` and `lens serve --data ""`
    # are refused.
    cwd, home, workspace = places
    res = executor_serve(cwd, "--workspace", str(workspace), "--state", "", home=home)
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr == "lens executor: STATE_DIR_INVALID: the command line: --state must be a non-empty path " \
                         "without NUL characters\n", res.stderr
    assert not (home / ".local").exists() and list(cwd.iterdir()) == []


def test_a_tilde_in_state_and_workspace_is_the_home_directory(places: tuple[Path, Path, Path]) -> None:
    # `--state ~/state` (quoted, or written `--state=~/state`, which the shell leaves alone) made a
    # directory named `~` in the working directory, and `--workspace ~/ws` was "not a directory",
    # where `~` in `lens serve --data`, `dataDir` and `pairFile` is the home directory.
    cwd, home, _workspace = places
    res = executor_serve(cwd, "--workspace", "~/ws", "--state=~/state", home=home)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    assert res.stdout.startswith("lens executor: listening on 127.0.0.1:"), res.stdout
    assert list(cwd.iterdir()) == []  # no directory named `~` here
    assert sorted(p.name for p in (home / "state").iterdir()) == ["blobs", "calls", "commands"]


@pytest.mark.parametrize("option", ["--workspace", "--state"])
def test_a_tilde_naming_no_home_directory_is_named(places: tuple[Path, Path, Path], option: str) -> None:
    cwd, home, workspace = places
    args = {"--workspace": ["--workspace", "~nosuchuser-lens/ws"],
            "--state": ["--workspace", str(workspace), "--state", "~nosuchuser-lens/state"]}[option]
    res = executor_serve(cwd, *args, home=home)
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    code = "WORKSPACE_INVALID" if option == "--workspace" else "STATE_DIR_INVALID"
    value = args[-1]
    assert res.stderr == f"lens executor: {code}: the command line: {option} {value!r}: there is no home " \
                         f"directory of user 'nosuchuser-lens'\n", res.stderr
    assert list(cwd.iterdir()) == [] and not (home / ".local").exists()
