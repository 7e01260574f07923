"""The directory of a pair file that is a plain file: judged before every write, as a link's
directories are, and made private when it is not there.

A directory another user can change (writable by the group or by others, a sticky one too, or
owned by another user) lets that user remove the pair file, rename another of the daemon user's
pair files over it (an old copy, with credentials revoked since) or take its lock file; every
write is refused there (``PAIR_FILE_UNWRITABLE``, naming the directory and what is wrong with
it; ``CONFIG_INVALID`` through the config-file API, as for the main config), before anything is
made in it, and the file is left as it was. Reading it goes on (its own
mode and owner judged, as before). A directory that is not there is made by the first write,
mode 0700 under any umask, as the data directory is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.pairing import PairFileUnwritable, PairStore

from .conftest import DaemonFactory, error_of, file_mode, run_lens, write_pair_file


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o750, 0o705], ids=oct)
def test_a_directory_only_its_owner_can_write_is_written(tmp_path: Path, mode: int):
    pair = tmp_path / "config" / "pair.json"
    write_pair_file(pair, "c0")
    pair.parent.chmod(mode)
    assert PairStore(pair).approve("c0", strong=False).startswith("lens_")
    assert PairStore(pair).find("c0").status == "approved"  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o720, 0o702, 0o777, 0o1777], ids=oct)
def test_a_directory_others_can_write_is_refused_before_anything_is_made_in_it(tmp_path: Path, mode: int):
    pair = tmp_path / "config" / "pair.json"
    write_pair_file(pair, "c0")
    pair.parent.chmod(mode)
    before = pair.read_bytes()
    shown = f"{mode & 0o777:04o}" if mode < 0o1000 else f"{mode:04o}"
    for write in (lambda s: s.approve("c0", strong=True), lambda s: s.revoke("c0"),
                  lambda s: s.register("c1", "", 10)):
        with pytest.raises(PairFileUnwritable) as caught:
            write(PairStore(pair))
        assert caught.value.code == "PAIR_FILE_UNWRITABLE"
        assert caught.value.message == (
            f"the pair file {pair} cannot be updated: the directory {pair.parent}, which holds it, is writable by "
            f"other users (mode {shown}), who could put a pair file of theirs in its place; check what it holds, "
            f"then chmod go-w {pair.parent}; nothing was written")
        assert pair.read_bytes() == before
        assert sorted(os.listdir(pair.parent)) == ["pair.json"]  # (no lock file, no temporary file)
    assert PairStore(pair).valid and PairStore(pair).find("c0").status == "pending"  # type: ignore[union-attr]


def test_a_directory_of_another_user_is_refused(tmp_path: Path):
    pair = tmp_path / "config" / "pair.json"
    write_pair_file(pair, "c0")
    os.chown(pair.parent, 4321, -1)
    try:
        with pytest.raises(PairFileUnwritable, match=rf"the directory {pair.parent}, which holds it, is owned by "
                                                     r"another user \(uid 4321\), .*then give it to the daemon's "
                                                     r"user \(chown\); nothing was written$"):
            PairStore(pair).approve("c0", strong=True)
    finally:
        os.chown(pair.parent, os.geteuid(), -1)
    assert PairStore(pair).find("c0").status == "pending"  # type: ignore[union-attr]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000], ids=oct)
def test_a_missing_directory_is_made_private_by_the_first_request(tmp_path: Path, umask: int):
    pair = tmp_path / "home" / "lens" / "config" / "pair.json"
    store = PairStore(pair)
    assert store.valid and store.clients() == []  # (no directory: no client asked yet)
    old = os.umask(umask)
    try:
        assert store.register("c1", "laptop", 10) == "pending"
    finally:
        os.umask(old)
    assert file_mode(pair.parent) == 0o700 and file_mode(pair) == 0o600
    assert PairStore(pair).find("c1").status == "pending"  # type: ignore[union-attr]


async def test_lens_pair_names_the_directory_and_exits_2(tmp_path: Path):
    pair = tmp_path / "config" / "pair.json"
    write_pair_file(pair, "c0")
    pair.parent.chmod(0o775)
    before = pair.read_bytes()
    for command in (["approve", "--client", "c0"], ["revoke", "--client", "c0"]):
        out = await run_lens(tmp_path, "pair", *command, check=False)
        assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr, (command, out)
        assert out.stderr.startswith("lens: PAIR_FILE_UNWRITABLE: the pair file config/pair.json cannot be updated: "
                                     "the directory config, which holds it, is writable by other users (mode 0775)"), out
        assert pair.read_bytes() == before


async def test_the_daemon_refuses_pairing_requests_while_the_directory_is_loose(daemon_factory: DaemonFactory,
                                                                               caplog: pytest.LogCaptureFixture):
    d = await daemon_factory()
    token = await d.pair("admin")
    d.pair_path.parent.chmod(0o777)
    before = d.pair_path.read_bytes()
    r = await d.post("/pair/requests", body={"clientId": "newcomer", "name": ""})
    assert r.status_code == 503 and error_of(r) == "PAIR_FILE_UNWRITABLE", r.text
    assert str(d.pair_path.parent) not in r.text  # (the route is public: the place is in the log only)
    assert f"the directory {d.pair_path.parent}, which holds it, is writable by other users (mode 0777)" in caplog.text
    assert d.pair_path.read_bytes() == before
    assert (await d.get("/whoami", token)).status_code == 200  # (the file is still read)
    d.pair_path.parent.chmod(0o755)
    r = await d.post("/pair/requests", body={"clientId": "newcomer", "name": ""})
    assert r.status_code == 202, r.text
    assert d.pairs().find("newcomer") is not None


async def test_a_pair_file_write_through_the_config_api_is_refused_there_too(daemon_factory: DaemonFactory):
    d = await daemon_factory()
    strong = await d.pair("admin", strong=True)
    text = d.pair_path.read_text()
    d.pair_path.parent.chmod(0o775)
    r = await d.put("/config/files/pair.json", strong, {"text": text})
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
    message = r.json()["error"]["message"]
    assert message.startswith("pair.json: its directory is writable by other users (mode 0775), who could put a "
                              "pair file of theirs in its place"), message
    assert "chmod go-w" in message and message.endswith("nothing was changed") and str(d.root) not in message
    assert d.pair_path.read_text() == text
    d.pair_path.parent.chmod(0o755)
    r = await d.put("/config/files/pair.json", strong, {"text": text})
    assert r.status_code == 200, r.text
