"""A directory above the config's or the data directory, up to ``/``, that another user can
change lets that user swap what is below it: it is refused as the directory itself is
(``CONFIG_INVALID`` for the config's, ``DATA_DIR_NOT_PRIVATE`` for the data directory's, exit 2)
by ``lens serve``, ``lens pair`` and ``lens log``, naming the directory and the ``chmod``. A
sticky directory owned by root or this user (the temporary directory, ``1777``) passes: in it no one renames
or removes a name another owns. The installed ``lens`` script, in a temp working directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.test_data_dir_trust import NOBODY, lens, write_log

# The modes of a directory above: refused (group or others may write, no sticky bit) and the
# nearest that pass (no write bit for them, or the sticky bit).
REFUSED = [0o775, 0o777, 0o770, 0o707, 0o720, 0o702]
TAKEN = [0o755, 0o1777, 0o1770, 0o1702, 0o700]


def _config(folder: Path) -> Path:
    """``folder/config/lens.jsonc`` (0600 in a 0700 directory): a config with nothing loose itself."""
    config = folder / "config" / "lens.jsonc"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"dataDir": "store"}))
    config.chmod(0o600)
    config.parent.chmod(0o700)
    return config


@pytest.mark.parametrize("mode", REFUSED, ids=oct)
def test_serve_refuses_a_data_dir_below_a_loose_directory(tmp_path: Path, mode: int) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a").chmod(mode)
    res = lens(tmp_path, "serve", "--port", "0", "--data", "a/b/data")
    assert res.returncode == 2, (res.stdout, res.stderr)
    above = tmp_path / "a"
    assert (f"lens: DATA_DIR_NOT_PRIVATE: the directory {above} above the data directory a/b/data is writable "
            f"by other users (mode {mode:04o})") in res.stderr and f"chmod go-w {above}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "a" / "b" / "data").exists()  # nothing made


@pytest.mark.parametrize("mode", TAKEN, ids=oct)
def test_log_takes_a_data_dir_below_a_directory_others_cannot_swap_it_in(tmp_path: Path, mode: int) -> None:
    write_log(tmp_path / "a" / "b" / "data")
    (tmp_path / "a").chmod(mode)
    res = lens(tmp_path, "log", "verify", "--data", "a/b/data")
    assert (res.returncode, res.stdout) == (0, "ok: 1 event(s) verified\n"), res.stderr


@pytest.mark.parametrize("command", ["verify", "decode", "stats", "rebuild"])
def test_log_refuses_a_data_dir_two_levels_below_a_loose_directory(tmp_path: Path, command: str) -> None:
    data = tmp_path / "a" / "b" / "data"
    write_log(data)
    before = sorted(p.name for p in data.iterdir())
    (tmp_path / "a").chmod(0o775)
    res = lens(tmp_path, "log", command, "--data", "a/b/data")
    assert res.returncode == 2 and res.stdout == "", (res.stdout, res.stderr)
    assert f"DATA_DIR_NOT_PRIVATE: the directory {tmp_path / 'a'} above the data directory" in res.stderr, res.stderr
    assert sorted(p.name for p in data.iterdir()) == before  # (rebuild wrote no projections.db)


def test_a_data_dir_named_through_a_link_in_a_loose_directory_is_refused(tmp_path: Path) -> None:
    """The directory holding the link is on the way too, though the link leads somewhere private."""
    write_log(tmp_path / "private" / "data")
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "data").symlink_to(tmp_path / "private" / "data")
    loose.chmod(0o777)
    res = lens(tmp_path, "log", "verify", "--data", "loose/data")
    assert res.returncode == 2 and f"the directory {loose} above the data directory loose/data" in res.stderr, \
        res.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_above_of_another_user_is_refused_sticky_or_not(tmp_path: Path) -> None:
    write_log(tmp_path / "a" / "data")
    os.chown(tmp_path / "a", NOBODY, -1)
    for mode in (0o755, 0o1777):
        (tmp_path / "a").chmod(mode)
        res = lens(tmp_path, "log", "verify", "--data", "a/data")
        assert res.returncode == 2 and f"is owned by another user (uid {NOBODY})" in res.stderr \
            and "give it to root or this user (chown)" in res.stderr, res.stderr


@pytest.mark.parametrize("mode", [0o775, 0o1775, 0o755], ids=oct)
def test_every_command_reading_the_config_judges_the_directories_above_it(tmp_path: Path, mode: int) -> None:
    """``lens pair``, ``lens log`` (the dataDir from the config) and ``lens serve``: 0775 refused,
    1775 (sticky) and 0755 taken."""
    project = tmp_path / "x" / "project"
    config = _config(project)
    write_log(project / "store")
    (tmp_path / "x").chmod(mode)
    runs = {"pair": lens(project, "pair", "list"), "log": lens(project, "log", "verify"),
            "serve": lens(project, "serve", "--port", "0", "--host", "127.0.0.1", "--model", "")}
    if mode == 0o775:
        for command, res in runs.items():
            assert res.returncode == 2 and res.stdout == "", (command, res.stderr)
            assert (f"lens: CONFIG_INVALID: the directory {tmp_path / 'x'} above the config directory config is "
                    f"writable by other users (mode 0775)") in res.stderr and \
                f"chmod go-w {tmp_path / 'x'}" in res.stderr, (command, res.stderr)
        assert not (config.parent / "pair.json").exists()
    else:
        assert runs["pair"].returncode == 0, runs["pair"].stderr
        assert runs["log"].returncode == 0, runs["log"].stderr
        # (taken past the trust checks: refused for the empty --model, which is checked after them)
        assert runs["serve"].returncode == 2 and "--model" in runs["serve"].stderr, runs["serve"].stderr


def test_a_config_reached_through_a_link_is_judged_above_where_it_leads(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    real = _config(shared / "deep")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "config").symlink_to(real.parent)
    shared.chmod(0o777)
    res = lens(tmp_path / "project", "pair", "list")
    assert res.returncode == 2 and f"the directory {shared} above the config directory config is" \
        in res.stderr, res.stderr
    shared.chmod(0o755)
    assert lens(tmp_path / "project", "pair", "list").returncode == 0
