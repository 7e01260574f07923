"""A main config written through the config-file API (``PUT /config/files/lens.jsonc``) is judged
as the next start judges it: its own directory and every directory above it, up to ``/``, as
named and as its links lead (``place_problem``, the one rule of the start's
``check_private_config``). A directory above that another user can change and that is not sticky,
or that another user owns, is refused (``CONFIG_INVALID``) before anything is written, naming the
file and "a directory above its directory", never a path; a sticky one of root's or the daemon
user's passes, as at start. The start's verdict on the same tree is checked with ``lens serve``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import Daemon, DaemonFactory, ServeProcess, error_of, file_mode, run_lens, served_once

TEXT = '{ "dataDir": "data2" }\n'  # (the data directory of the `lens serve` that checks the start)

REFUSED_ABOVE = (
    "lens.jsonc: a directory above its directory is {why}, who could put a directory of theirs, and a config in "
    "it, in its place, and the next start would refuse it; check what that directory holds, then {fix}; nothing "
    "was changed")
LOOSE_FIX = "take the group's and others' write permission from it (chmod go-w), or make it sticky (chmod +t)"
OWNER_FIX = "give it to root or the daemon's user (chown)"


async def _started(daemon_factory: DaemonFactory, root: Path) -> tuple[Daemon, str]:
    d = await daemon_factory(root=root)
    return d, await d.pair("admin", strong=True)


def _entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("exists", [False, True], ids=["new", "replaced"])
async def test_a_main_config_write_under_a_directory_others_can_write_is_refused_as_the_start_refuses_it(
        daemon_factory: DaemonFactory, tmp_path: Path, exists: bool) -> None:
    # The write judged the config's own directory only: under a 0777 directory that is not
    # sticky it answered 200 `nextStart`, and that next start refused the directory above.
    above = tmp_path / "shared"
    d, strong = await _started(daemon_factory, above / "home")
    if exists:
        d.config_path.write_text("{}\n")
        d.config_path.chmod(0o600)
    before = _entries(d.config_dir)
    above.chmod(0o777)
    try:
        r = await d.put("/config/files/lens.jsonc", strong, {"text": TEXT})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        message = r.json()["error"]["message"]
        assert message == REFUSED_ABOVE.format(why="writable by other users (mode 0777)", fix=LOOSE_FIX), message
        assert str(tmp_path) not in message
        assert _entries(d.config_dir) == before  # (no temporary file either)
        assert (d.config_path.read_text() == "{}\n") if exists else not d.config_path.exists()
        if exists:  # the start refuses the same tree (a daemon with no config file judges no directory)
            out = await run_lens(d.root, "serve", "--port", "0", "--data", "data2", check=False)
            assert out.returncode == 2 and (f"CONFIG_INVALID: the directory {above} above the config directory "
                                            f"config is writable by other users (mode 0777)") in out.stderr, out.stderr
        # another file of the directory is read by nothing: still written
        (d.config_dir / "notes.json").write_text("{}\n")
        r = await d.put("/config/files/notes.json", strong, {"text": '{"a": 1}\n'})
        assert r.status_code == 200 and r.json()["appliesAt"] == "notRead", r.text
    finally:
        above.chmod(0o755)
    r = await d.put("/config/files/lens.jsonc", strong, {"text": TEXT})
    assert r.status_code == 200 and r.json()["appliesAt"] == "nextStart", r.text


async def test_a_main_config_write_under_a_sticky_directory_is_taken_and_so_is_the_next_start(
        daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    # A sticky directory of root's or the daemon user's (the temporary directory's 1777) passes
    # above, at start and so for the write: no other user can rename the directory below it.
    above = tmp_path / "shared"
    d, strong = await _started(daemon_factory, above / "home")
    above.chmod(0o1777)
    try:
        r = await d.put("/config/files/lens.jsonc", strong, {"text": TEXT})
        assert r.status_code == 200 and r.json()["appliesAt"] == "nextStart", r.text
        assert d.config_path.read_text() == TEXT and file_mode(d.config_path) == 0o600
        serve = ServeProcess(d.root, "--data", "data2")
        async with served_once(serve):
            pass
        assert (d.root / "data2").is_dir()  # (the written config's dataDir: the start read it)
    finally:
        above.chmod(0o755)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
async def test_a_main_config_write_under_another_users_directory_is_refused_sticky_or_not(
        daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    above = tmp_path / "shared"
    d, strong = await _started(daemon_factory, above / "home")
    os.chown(above, 4321, -1)
    try:
        for mode in (0o755, 0o1777):
            above.chmod(mode)
            r = await d.put("/config/files/lens.jsonc", strong, {"text": TEXT})
            assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
            assert r.json()["error"]["message"] == REFUSED_ABOVE.format(why="owned by another user (uid 4321)",
                                                                        fix=OWNER_FIX), r.text
            assert not d.config_path.exists()
    finally:
        os.chown(above, os.geteuid(), -1)
        above.chmod(0o755)


async def test_a_main_config_write_through_a_linked_directory_is_judged_above_where_it_leads(
        daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    # `config` a link to a private directory under a loose one: the start judges the directories
    # above the link's target too, and so does the write.
    shared = tmp_path / "shared"
    real = shared / "deep" / "config"
    real.mkdir(parents=True)
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "config").symlink_to(real)
    d, strong = await _started(daemon_factory, tmp_path / "project")
    before = _entries(real)
    shared.chmod(0o777)
    try:
        r = await d.put("/config/files/lens.jsonc", strong, {"text": TEXT})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        assert r.json()["error"]["message"] == REFUSED_ABOVE.format(why="writable by other users (mode 0777)",
                                                                    fix=LOOSE_FIX), r.text
        assert _entries(real) == before
    finally:
        shared.chmod(0o755)
    r = await d.put("/config/files/lens.jsonc", strong, {"text": TEXT})
    assert r.status_code == 200, r.text
    assert (real / "lens.jsonc").read_text() == TEXT
