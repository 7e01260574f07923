"""The files and directories inside a (private) data directory that the group or others may
write — made by hand, copied or restored under another umask — are made theirs no longer
(``chmod go-w``, the other bits kept) by every command that opens it, and each is named in one
line on stderr; Lens made them and owns them. One owned by another user is refused
(``DATA_DIR_NOT_PRIVATE``, ``chown`` named): its owner can write it whatever its mode. The
installed ``lens`` script, in a temp working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from tests.cli.test_data_dir_trust import NOBODY, lens, write_log
from tests.daemon.conftest import serving


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    write_log(data)
    assert lens(tmp_path, "log", "rebuild", "--data", "data").returncode == 0  # (projections.db too)
    (data / "artifacts" / "ab").mkdir(parents=True, mode=0o700)
    (data / "artifacts" / "ab" / ("ab" + "0" * 62)).write_bytes(b"an artifact")
    for path in data.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    return data


# (what, the mode found, the mode it is made): exactly the write bits of the group and others go
CASES = [*[("events.db", found, made) for found, made in [(0o666, 0o644), (0o620, 0o600), (0o602, 0o600),
                                                          (0o622, 0o600), (0o777, 0o755)]],
         ("projections.db", 0o666, 0o644), ("artifacts/ab", 0o777, 0o755), ("artifacts", 0o770, 0o750)]


@pytest.mark.parametrize(("name", "found", "made"), CASES, ids=lambda v: oct(v) if isinstance(v, int) else v)
def test_a_file_inside_others_can_write_is_made_private_and_said(tmp_path: Path, name: str, found: int,
                                                                 made: int) -> None:
    data = _data(tmp_path)
    (data / name).chmod(found)
    res = lens(tmp_path, "log", "verify", "--data", "data")
    assert (res.returncode, res.stdout) == (0, "ok: 1 event(s) verified\n"), res.stderr
    assert res.stderr.splitlines() == [f"lens: data/{name} was writable by other users (mode {found:04o}); made "
                                       f"{made:04o} (chmod go-w), as Lens makes it"], res.stderr
    assert (data / name).stat().st_mode & 0o7777 == made


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o604, 0o640, 0o755], ids=oct)
def test_a_file_inside_only_its_owner_can_write_is_left_as_it_is(tmp_path: Path, mode: int) -> None:
    data = _data(tmp_path)
    (data / "events.db").chmod(mode)
    res = lens(tmp_path, "log", "verify", "--data", "data")
    assert (res.returncode, res.stderr) == (0, ""), res.stderr
    assert (data / "events.db").stat().st_mode & 0o7777 == mode


def test_the_wal_files_and_a_deep_artifact_are_judged_too(tmp_path: Path) -> None:
    data = _data(tmp_path)
    artifact = next((data / "artifacts" / "ab").iterdir())
    for path in (data / "events.db-wal", data / "events.db-shm", artifact):
        path.touch()
        path.chmod(0o646)
    res = lens(tmp_path, "log", "stats", "--data", "data")
    assert res.returncode == 0, res.stderr
    assert sorted(line.split(" was ")[0] for line in res.stderr.splitlines()) == \
        sorted(f"lens: data/{p.relative_to(data)}" for p in (data / "events.db-wal", data / "events.db-shm", artifact))
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in (artifact,))


def test_a_link_inside_is_judged_by_what_it_leads_to(tmp_path: Path) -> None:
    data = _data(tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(b"x")
    outside.chmod(0o666)
    (data / "artifacts" / "link").symlink_to(outside)
    (data / "artifacts" / "dangling").symlink_to(tmp_path / "nothing")
    res = lens(tmp_path, "log", "verify", "--data", "data")
    assert res.returncode == 0 and "data/artifacts/link was writable by other users (mode 0666)" in res.stderr, \
        res.stderr
    assert outside.stat().st_mode & 0o777 == 0o644 and "dangling" not in res.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("name", ["events.db", "artifacts/ab"])
def test_a_file_inside_of_another_user_is_refused(tmp_path: Path, name: str) -> None:
    data = _data(tmp_path)
    os.chown(data / name, NOBODY, -1)
    for command in (("log", "verify", "--data", "data"), ("serve", "--port", "0", "--data", "data")):
        res = lens(tmp_path, *command)
        assert res.returncode == 2 and res.stdout == "", (command, res.stdout, res.stderr)
        assert f"lens: DATA_DIR_NOT_PRIVATE: data/{name} in the data directory is owned by another user " \
               f"(uid {NOBODY})" in res.stderr and "chown" in res.stderr, res.stderr
    assert (data / name).stat().st_uid == NOBODY


async def test_serve_makes_them_private_and_says_so(tmp_path: Path) -> None:
    data = await trio.to_thread.run_sync(_data, tmp_path)  # (write_log runs trio itself)
    (data / "events.db").chmod(0o666)
    async with serving(tmp_path) as (serve, d):
        assert (await d.get("/health")).status_code == 200
        assert await serve.terminate() == 0
    assert "lens: data/events.db was writable by other users (mode 0666); made 0644 (chmod go-w), as Lens makes it" \
        in serve.lines, serve.lines
    assert (data / "events.db").stat().st_mode & 0o777 == 0o644
