"""`lens log decode | verify | rebuild | stats` driven as the installed script, on the cases the
other log CLI tests do not list: a data directory path that names no directory (a loop of links,
a path through a file).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli.lens_script import lens_script

COMMANDS = ("decode", "verify", "stats", "rebuild")


def lens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lens ARGS`` run by the installed script; stdout and stderr as text, at most 60 s."""
    return subprocess.run([str(lens_script()), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def refused(res: subprocess.CompletedProcess[str], code: str) -> str:
    """The one stderr line of a command that could not run (exit 2, nothing on stdout, no
    traceback), after checking it carries ``code``."""
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout[:300], res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"lens: {code}: "), line
    return line


# ------------------------------------------------------------ data directories that are no directory


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_dir_link_in_a_loop_is_named_not_called_unprivate(tmp_path: Path, command: str) -> None:
    # A loop of links was refused as DATA_DIR_NOT_PRIVATE ("cannot check the data directory …:
    # Too many levels of symbolic links"), a code whose fix is chmod; storage-format.md names a
    # data directory that is a link to nothing STORE_OPEN_FAILED, naming the target.
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    line = refused(lens("log", command, "--data", str(tmp_path / "a")), "STORE_OPEN_FAILED")
    assert f"data directory {tmp_path / 'a'} is a symbolic link to {tmp_path / 'b'}" in line
    assert "loop of links" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_path_through_a_file_is_named(tmp_path: Path, command: str) -> None:
    # `--data FILE/sub` was DATA_DIR_NOT_PRIVATE ("cannot check the data directory FILE/sub: Not a
    # directory"); it names no directory, as `--data FILE` does (STORE_OPEN_FAILED).
    (tmp_path / "file").write_bytes(b"x")
    line = refused(lens("log", command, "--data", str(tmp_path / "file" / "sub")), "STORE_OPEN_FAILED")
    assert f"data directory {tmp_path / 'file' / 'sub'} is not a directory" in line
    assert f"{tmp_path / 'file'} is a file" in line
    assert (tmp_path / "file").read_bytes() == b"x"


@pytest.mark.parametrize("how", ["loop", "through a file"])
def test_the_writer_names_such_a_data_dir_too(tmp_path: Path, how: str) -> None:
    if how == "loop":
        (tmp_path / "a").symlink_to(tmp_path / "b")
        (tmp_path / "b").symlink_to(tmp_path / "a")
        data = tmp_path / "a"
    else:
        (tmp_path / "file").write_bytes(b"x")
        data = tmp_path / "file" / "sub"
    before = sorted(p.name for p in tmp_path.iterdir())
    res = lens("serve", "--data", str(data), "--port", "0", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, (res.returncode, res.stderr[-800:])
    assert f"lens: STORE_OPEN_FAILED: data directory {data} " in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made
