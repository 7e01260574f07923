"""Every command that reads the config judges it as ``lens serve`` does (one rule,
``runtime.config.check_private_config``): a config file, or the directory holding it, that
another local user can change is refused with ``CONFIG_INVALID`` (exit 2), naming the path and
the fix, before the command does anything. ``lens pair …`` takes the pair file's place from it
and ``lens log …`` the data directory's, so such a user could otherwise point either at files of
theirs. The installed ``lens`` script, run in a temp working directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runtime.pairing import PairStore
from tests.cli.lens_script import lens, write_log

NOBODY = 65534


def setup(root: Path) -> Path:
    """A config naming a data directory that holds a log, and a pair file with one client."""
    write_log(root / "store")
    config = root / "config" / "lens.jsonc"
    config.parent.mkdir()
    config.write_text(json.dumps({"dataDir": "store"}))
    config.chmod(0o600)
    config.parent.chmod(0o700)
    store = PairStore(config.parent / "pair.json")
    store.register("c1", "client one", max_pending=32)
    store.register("c2", "client two", max_pending=32)
    assert lens(root, "pair", "approve", "--client", "c1").returncode == 0
    return config


COMMANDS = [
    ("pair", "list"),
    ("pair", "approve", "--client", "c2"),
    ("pair", "revoke", "--client", "c1"),
    ("log", "verify"),
    ("log", "decode"),
    ("log", "stats"),
    ("log", "rebuild"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("what", ["file", "dir"])
def test_a_config_others_can_write_is_refused(tmp_path: Path, command: tuple[str, ...], what: str) -> None:
    config = setup(tmp_path)
    pairs_before = (config.parent / "pair.json").read_bytes()
    target = config if what == "file" else config.parent
    target.chmod(0o620 if what == "file" else 0o770)
    for args in (command, (*command, "--config", "config/lens.jsonc")):
        res = lens(tmp_path, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        named = ("config file config/lens.jsonc is writable by other users (mode 0620)" if what == "file"
                 else "the config directory config is writable by other users (mode 0770)")
        fix = f"chmod go-w {'config/lens.jsonc' if what == 'file' else 'config'}"
        assert "CONFIG_INVALID" in res.stderr and named in res.stderr and fix in res.stderr, res.stderr
        assert "Traceback" not in res.stderr and res.stdout == ""
    target.chmod(0o600 if what == "file" else 0o700)
    assert (config.parent / "pair.json").read_bytes() == pairs_before  # nothing was changed
    assert not (tmp_path / "store" / "projections.db").exists() or command[1] != "rebuild"
    assert lens(tmp_path, *command).returncode == 0  # and with the mode put right it runs


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("command", [("pair", "list"), ("log", "verify")], ids=lambda c: " ".join(c))
def test_a_config_of_another_user_is_refused(tmp_path: Path, command: tuple[str, ...]) -> None:
    config = setup(tmp_path)
    os.chown(config, NOBODY, -1)
    res = lens(tmp_path, *command)
    assert res.returncode == 2 and f"owned by another user (uid {NOBODY})" in res.stderr and "chown" in res.stderr, \
        res.stderr


def test_a_config_others_may_read_is_taken(tmp_path: Path) -> None:
    config = setup(tmp_path)
    config.chmod(0o644)
    config.parent.chmod(0o755)
    for command in COMMANDS[:1] + COMMANDS[3:4]:
        res = lens(tmp_path, *command)
        assert res.returncode == 0, (command, res.stderr)


def test_log_with_data_does_not_read_the_default_config(tmp_path: Path) -> None:
    """``--data DIR`` without ``--config`` reads no config (an operator repairing a broken setup
    still reaches the log), so a loose default config does not stand in its way."""
    config = setup(tmp_path)
    config.chmod(0o666)
    res = lens(tmp_path, "log", "verify", "--data", "store")
    assert res.returncode == 0 and res.stdout == "ok: 1 event(s) verified\n", res.stderr
