"""The pair file as a symbolic link: to nothing (a volume not yet mounted, say), to a file, or
in a loop.

A link to nothing is refused as an invalid pair file (as the main config is refused), naming the
link and its target, by ``lens pair list|approve|revoke``, by credential checks and by the
pairing route; nothing writes a file in the link's place. A link to a regular file is read and
written through: the write lands beside the target, atomically, and the link stays a link."""

from __future__ import annotations

import os
from pathlib import Path

from runtime.pairing import PairStore

from .conftest import DaemonFactory, error_of, run_lens, wait_until


def _dangling(pair: Path, root: Path) -> Path:
    """Make ``pair`` a link to a file on a directory not there (an unmounted volume); returns the target."""
    target = root / "volume" / "pair.json"
    pair.parent.mkdir(parents=True, exist_ok=True)
    pair.unlink(missing_ok=True)
    pair.symlink_to(target)
    return target


async def test_a_link_to_nothing_is_refused_by_every_pair_command_and_left_a_link(tmp_path: Path):
    pair = tmp_path / "config" / "pair.json"
    target = _dangling(pair, tmp_path)
    for command in (["list"], ["approve", "--client", "c1"], ["revoke", "--client", "c1"]):
        out = await run_lens(tmp_path, "pair", *command, check=False)
        assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == "", (command, out)
        assert out.stderr.startswith("lens: PAIR_FILE_INVALID: pair file config/pair.json is a symbolic link to "
                                     f"{target}, which does not exist"), (command, out.stderr)
        assert pair.is_symlink() and os.readlink(pair) == str(target) and not target.parent.exists()


async def test_a_link_to_nothing_refuses_credentials_and_pairing_and_is_never_replaced(daemon_factory: DaemonFactory):
    d = await daemon_factory()
    token = await d.pair("admin", strong=True)
    target = _dangling(d.pair_path, d.root)

    async def refused():
        r = await d.get("/projects", token)
        return r if r.status_code == 503 else None

    r = await wait_until(refused, what="the credential refused")
    assert error_of(r) == "PAIR_FILE_INVALID", r.text
    r = await d.post("/pair/requests", body={"clientId": "newcomer", "name": ""})
    assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID", r.text
    assert str(target) not in r.text  # (the route is public: the file's place is in the log only)
    assert d.pair_path.is_symlink() and os.readlink(d.pair_path) == str(target)
    assert not target.parent.exists()
    # The volume mounted: the daemon honours the file where the link points, without a restart.
    target.parent.mkdir()
    store = PairStore(target)
    store.register("later", "", max_pending=32)
    later = store.approve("later", strong=False)
    r = await wait_until(lambda: _status(d, later, 200), what="the link's target honoured")
    assert d.pair_path.is_symlink()


async def _status(d, token: str, status: int):
    r = await d.get("/projects", token)
    return r if r.status_code == status else None


async def test_a_daemon_started_on_a_link_to_nothing_serves_and_refuses_pairing(daemon_factory: DaemonFactory,
                                                                                  tmp_path: Path):
    target = _dangling(tmp_path / "config" / "pair.json", tmp_path)
    d = await daemon_factory()
    assert (await d.get("/health")).status_code == 200
    r = await d.post("/pair/requests", body={"clientId": "c1", "name": ""})
    assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID", r.text
    assert d.pair_path.is_symlink() and not target.parent.exists()


def test_writes_through_a_link_land_beside_its_target_and_keep_the_link(tmp_path: Path):
    target = tmp_path / "volume" / "pair.json"
    target.parent.mkdir()
    target.write_text('{"version": 1, "clients": [{"clientId": "c0", "status": "pending"}]}')
    target.chmod(0o600)
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to(target)
    store = PairStore(pair)
    store.register("c1", "", max_pending=32)
    token = store.approve("c1", strong=True)
    assert store.revoke("c0")
    assert pair.is_symlink() and os.readlink(pair) == str(target)
    assert PairStore(target).authenticate(token).client_id == "c1"
    assert PairStore(target).find("c0").status == "revoked"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in target.parent.iterdir()) == ["pair.json"]  # (no temporary file left)
    assert sorted(p.name for p in pair.parent.iterdir()) == ["pair.json", "pair.json.lock"]


async def test_a_link_loop_is_an_invalid_pair_file_to_every_command(tmp_path: Path):
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to(pair)
    for command in (["list"], ["approve", "--client", "c1"], ["revoke", "--client", "c1"]):
        out = await run_lens(tmp_path, "pair", *command, check=False)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (command, out)
        assert out.stderr.startswith("lens: PAIR_FILE_INVALID: pair file config/pair.json cannot be read "
                                     "(Too many levels of symbolic links)"), (command, out.stderr)
        assert pair.is_symlink()
