"""A data directory another local user can change is refused by every command that opens it
(``lens serve``, ``lens log …``), as the config and the pair file are: ``DATA_DIR_NOT_PRIVATE``,
exit 2, naming the directory, why and the fix, before anything is read or made in it. Such a
user could put a log of theirs in place of ``events.db``, or artifacts and projections Lens
serves as its own. The installed ``lens`` script, run in a temp working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.lens_script import lens, write_log

NOBODY = 65534


@pytest.mark.parametrize("mode", [0o770, 0o702, 0o777, 0o1777, 0o720])
def test_serve_refuses_a_data_dir_others_can_write(tmp_path: Path, mode: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(mode)
    res = lens(tmp_path, "serve", "--port", "0", "--data", "data")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"lens: DATA_DIR_NOT_PRIVATE: data directory data is writable by other users (mode {mode:04o})" \
        in res.stderr and "chmod go-w data" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert list(data.iterdir()) == []  # nothing made in it


@pytest.mark.parametrize("command", ["verify", "decode", "stats", "rebuild"])
def test_log_refuses_a_data_dir_others_can_write(tmp_path: Path, command: str) -> None:
    data = tmp_path / "data"
    write_log(data)
    before = sorted(p.name for p in data.iterdir())
    data.chmod(0o775)
    res = lens(tmp_path, "log", command, "--data", "data")
    assert res.returncode == 2 and res.stdout == "", (res.stdout, res.stderr)
    assert "DATA_DIR_NOT_PRIVATE: data directory data is writable by other users (mode 0775)" in res.stderr \
        and "chmod go-w data" in res.stderr, res.stderr
    assert sorted(p.name for p in data.iterdir()) == before  # (rebuild wrote no projections.db)
    data.chmod(0o755)  # readable by others is not refused
    assert lens(tmp_path, "log", command, "--data", "data").returncode == 0


def test_a_link_is_judged_by_the_directory_it_leads_to(tmp_path: Path) -> None:
    data = tmp_path / "real"
    write_log(data)
    (tmp_path / "data").symlink_to(data)
    data.chmod(0o777)
    res = lens(tmp_path, "log", "verify", "--data", "data")
    assert res.returncode == 2 and "DATA_DIR_NOT_PRIVATE" in res.stderr, res.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_data_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_log(data)
    os.chown(data, NOBODY, -1)
    res = lens(tmp_path, "log", "verify", "--data", "data")
    assert res.returncode == 2 and f"owned by another user (uid {NOBODY})" in res.stderr and "chown" in res.stderr, \
        res.stderr


def test_the_data_dir_lens_makes_is_taken(tmp_path: Path) -> None:
    """What Lens makes itself (0700) passes; a fresh --data is made, not refused."""
    data = tmp_path / "fresh"
    write_log(data)
    assert data.stat().st_mode & 0o777 == 0o700
    res = lens(tmp_path, "log", "verify", "--data", "fresh")
    assert (res.returncode, res.stdout) == (0, "ok: 1 event(s) verified\n"), res.stderr
