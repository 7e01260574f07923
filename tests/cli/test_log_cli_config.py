"""``lens log …`` finds the data directory as ``lens serve`` does: ``--data``, else the config's
``dataDir`` (``--config``, else ``config/lens.jsonc`` when present), else ``.lens``. Each test
runs the installed ``lens`` console script in a temp working directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from events.store import Draft, open_store
from events.types import ProjectCreated
from events.schema import PROJECTIONS_DB
from tests.cli.lens_script import lens


def write_log(data: Path, events: int) -> None:
    async def main() -> None:
        async with open_store(data, synchronous="OFF") as store:
            for i in range(events):
                await store.append(Draft(ProjectCreated(name=f"p{i}", workspace="/ws"), project_id=f"p{i}"))

    trio.run(main)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two logs told apart by their size: 3 events (the configured one), 1 event."""
    root = tmp_path_factory.mktemp("logs")
    write_log(root / "three", 3)
    write_log(root / "one", 1)
    return root / "three", root / "one"


def place(tmp_path: Path, log: Path, name: str) -> None:
    shutil.copytree(log, tmp_path / name)


def config(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_default_configs_data_dir_is_read(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    place(tmp_path, logs[0], "store")
    place(tmp_path, logs[1], ".lens")  # (what was read before: the wrong log)
    config(tmp_path / "config" / "lens.jsonc", '{"dataDir": "store"} // as lens serve reads it')
    res = lens(tmp_path, "log", "verify")
    # the directory taken from the config is named on stderr, one line; stdout is the report alone
    assert (res.returncode, res.stdout, res.stderr) == (
        0, "ok: 3 event(s) verified\n", "lens: data directory store (the dataDir of config/lens.jsonc)\n")
    res = lens(tmp_path, "log", "decode")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 3, res.stderr


@pytest.mark.parametrize("before", [True, False])
def test_an_explicit_config_is_read_before_or_after_the_subcommand(
    tmp_path: Path, logs: tuple[Path, Path], before: bool
) -> None:
    place(tmp_path, logs[0], "elsewhere")
    place(tmp_path, logs[1], ".lens")
    cfg = config(tmp_path / "etc" / "prod.jsonc", '{"dataDir": "elsewhere"}')
    args = ["log", "--config", str(cfg), "verify"] if before else ["log", "verify", "--config", str(cfg)]
    res = lens(tmp_path, *args)
    assert (res.returncode, res.stdout) == (0, "ok: 3 event(s) verified\n"), res.stderr
    assert res.stderr == f"lens: data directory elsewhere (the dataDir of {cfg})\n"


def test_rebuild_writes_the_projections_of_the_configured_dir(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    place(tmp_path, logs[0], "store")
    config(tmp_path / "config" / "lens.jsonc", '{"dataDir": "store"}')
    res = lens(tmp_path, "log", "rebuild")
    assert res.returncode == 0, res.stderr
    assert "from 3 event(s)" in res.stdout
    assert (tmp_path / "store" / PROJECTIONS_DB).exists()
    assert not (tmp_path / ".lens").exists()


def test_a_tilde_in_data_dir_is_the_home_directory(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    home = tmp_path / "home"
    place(home, logs[0], "lensdata")
    config(tmp_path / "config" / "lens.jsonc", '{"dataDir": "~/lensdata"}')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    res = lens(tmp_path, "log", "stats", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stderr == f"lens: data directory {home / 'lensdata'} (the dataDir of config/lens.jsonc)\n"
    assert res.stdout.startswith("{")  # (the JSON alone on stdout)
    assert '"events":3' in res.stdout.replace(" ", "").split('"total"')[1]
    res = lens(tmp_path, "log", "verify", "--data", "~/lensdata", env=env)  # --data as lens serve's
    assert (res.returncode, res.stdout) == (0, "ok: 3 event(s) verified\n"), res.stderr


def test_data_wins_over_the_config(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    place(tmp_path, logs[0], "store")
    place(tmp_path, logs[1], "other")
    config(tmp_path / "config" / "lens.jsonc", '{"dataDir": "store"}')
    res = lens(tmp_path, "log", "verify", "--data", "other")
    assert (res.returncode, res.stdout, res.stderr) == (0, "ok: 1 event(s) verified\n", "")  # (no line: --data)


def test_without_a_config_the_default_is_dot_lens(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    place(tmp_path, logs[1], ".lens")
    res = lens(tmp_path, "log", "verify")
    assert (res.returncode, res.stdout, res.stderr) == (0, "ok: 1 event(s) verified\n", "")  # (no config: no line)


def test_a_default_config_that_cannot_be_read_is_named_with_the_way_around_it(
    tmp_path: Path, logs: tuple[Path, Path]
) -> None:
    place(tmp_path, logs[1], ".lens")
    config(tmp_path / "config" / "lens.jsonc", '{"dataDir": 3}')
    res = lens(tmp_path, "log", "verify")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("lens: CONFIG_INVALID: config/lens.jsonc: ")
    assert "dataDir" in res.stderr and "pass --data DIR" in res.stderr and "Traceback" not in res.stderr
    res = lens(tmp_path, "log", "verify", "--data", ".lens")  # the way around it
    assert (res.returncode, res.stdout) == (0, "ok: 1 event(s) verified\n"), res.stderr


def test_an_explicit_config_that_does_not_exist_is_refused(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    place(tmp_path, logs[1], ".lens")
    for args in (["log", "verify", "--config", "nope.jsonc"], ["log", "verify", "--config", "nope.jsonc", "--data", ".lens"]):
        res = lens(tmp_path, *args)
        assert (res.returncode, res.stdout) == (2, "")
        assert res.stderr == "lens: CONFIG_INVALID: config file nope.jsonc does not exist\n"


def test_an_empty_config_path_is_a_usage_error(tmp_path: Path) -> None:
    res = lens(tmp_path, "log", "verify", "--config", "")
    assert res.returncode == 2
    assert "USAGE_ERROR: argument --config: an empty path names no config file" in res.stderr


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("made", [False, True])
def test_a_missing_data_dir_named_by_a_config_says_which_config(tmp_path: Path, explicit: bool, made: bool) -> None:
    # The directory comes from a file the user may not have in mind (the default config/lens.jsonc
    # is read without being named): the refusal names that file, so the user knows where "d2" came
    # from and that --data reads another.
    cfg = config(tmp_path / "config" / "lens.jsonc", '{"dataDir": "d2"}')
    if made:
        (tmp_path / "d2").mkdir()  # (there, but holding no events.db)
    args = ["log", "verify", "--config", str(cfg)] if explicit else ["log", "verify"]
    res = lens(tmp_path, *args)
    assert res.returncode == 2 and res.stdout == "", res
    assert res.stderr.startswith("lens: DATA_DIR_MISSING: data directory d2 "), res.stderr
    assert res.stderr.endswith(f"; d2 is the dataDir of {cfg if explicit else 'config/lens.jsonc'}\n"), res.stderr
    assert len(res.stderr.splitlines()) == 1, res.stderr


def test_a_missing_data_dir_given_with_data_names_no_config(tmp_path: Path) -> None:
    config(tmp_path / "config" / "lens.jsonc", '{"dataDir": "d2"}')
    res = lens(tmp_path, "log", "verify", "--data", "other")
    assert res.returncode == 2 and "data directory other does not exist" in res.stderr, res.stderr
    assert "dataDir" not in res.stderr, res.stderr
    res = lens(tmp_path / "config", "log", "verify")  # (no config here: the built-in .lens)
    assert res.returncode == 2 and "data directory .lens does not exist" in res.stderr, res.stderr
    assert "dataDir" not in res.stderr, res.stderr
