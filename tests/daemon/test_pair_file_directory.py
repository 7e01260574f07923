"""The directory of a pair file that is a plain file: judged before every write, as a link's
directories are, and made private when it is not there.

A directory another user can change (writable by the group or by others, a sticky one too, or
owned by another user) lets that user remove the pair file, rename another of the daemon user's
pair files over it (an old copy, with credentials revoked since) or take its lock file; every
write is refused there (``PAIR_FILE_UNWRITABLE``, naming the directory and what is wrong with
it; ``CONFIG_INVALID`` through the config-file API, as for the main config), before anything is
made in it, and the file is left as it was; so is one under a directory such a user can change
that is not sticky, as for the main config, and a link's own directory is judged before its lock
file is opened, which is never followed as a link. Reading it goes on (its own mode and owner
judged, as before). Directories that are not there are made by the first write, mode 0700 under
any umask, as the data directory is."""

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


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
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
    made = [tmp_path / "home", tmp_path / "home" / "lens", pair.parent]
    assert [oct(file_mode(folder)) for folder in made] == [oct(0o700)] * 3 and file_mode(pair) == 0o600
    assert PairStore(pair).find("c1").status == "pending"  # type: ignore[union-attr]


@pytest.mark.parametrize("missing", [False, True], ids=["there", "missing"])
def test_a_directory_under_one_others_can_write_is_refused_and_nothing_is_made(tmp_path: Path, missing: bool):
    loose = tmp_path / "shared"
    pair = loose / "lens" / "config" / "pair.json"
    if not missing:
        write_pair_file(pair, "c0")
        pair.parent.chmod(0o700)
        pair.parent.parent.chmod(0o700)
        before = pair.read_bytes()
    else:
        loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(PairFileUnwritable) as caught:
        PairStore(pair).register("c1", "", 10)
    assert caught.value.code == "PAIR_FILE_UNWRITABLE"
    assert caught.value.message == (
        f"the pair file {pair} cannot be updated: the directory {loose}, above the directory {pair.parent} holding "
        f"it, is writable by other users (mode 0777), who could put a directory of theirs, and a pair file in it, "
        f"in its place; check what it holds, then chmod go-w {loose} (or chmod +t {loose}: a sticky bit); nothing "
        f"was written")
    if missing:
        assert os.listdir(loose) == []
    else:
        assert pair.read_bytes() == before and sorted(os.listdir(pair.parent)) == ["pair.json"]
    loose.chmod(0o1777)  # (a sticky one above passes, as above the main config)
    assert PairStore(pair).register("c1", "", 10) == "pending"
    assert file_mode(pair.parent) == 0o700


def test_a_link_in_a_loose_directory_is_refused_before_its_lock_file_is_opened(tmp_path: Path):
    private = tmp_path / "private" / "pair.json"
    write_pair_file(private, "c0")
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "pair.json").symlink_to(private)
    victim = tmp_path / "victim"
    (loose / "pair.json.lock").symlink_to(victim)
    loose.chmod(0o777)
    before = private.read_bytes()
    for write in (lambda s: s.approve("c0", strong=True), lambda s: s.revoke("c0"),
                  lambda s: s.register("c1", "", 10)):
        with pytest.raises(PairFileUnwritable, match=rf"^the pair file {loose}/pair.json cannot be updated: the "
                                                     rf"directory {loose}, which holds it or its link's target, is "
                                                     r"writable by other users \(mode 0777\)"):
            write(PairStore(loose / "pair.json"))
        assert not os.path.lexists(victim)
        assert private.read_bytes() == before and sorted(os.listdir(private.parent)) == ["pair.json"]


def test_a_lock_file_that_is_a_link_is_never_followed(tmp_path: Path):
    pair = tmp_path / "config" / "pair.json"
    write_pair_file(pair, "c0")
    victim = tmp_path / "victim"
    (pair.parent / "pair.json.lock").symlink_to(victim)
    before = pair.read_bytes()
    with pytest.raises(PairFileUnwritable) as caught:
        PairStore(pair).approve("c0", strong=True)
    assert caught.value.message == (
        f"the pair file {pair} cannot be updated (its lock file pair.json.lock is a symbolic link, which is never "
        f"followed; check where it leads, then remove it)")
    assert not os.path.lexists(victim) and pair.read_bytes() == before
    (pair.parent / "pair.json.lock").unlink()
    assert PairStore(pair).approve("c0", strong=True).startswith("lens_")


async def test_lens_pair_revoke_that_changes_nothing_is_answered_in_a_loose_directory(tmp_path: Path):
    pair = tmp_path / "config" / "pair.json"
    write_pair_file(pair, "c0")
    pair.write_text('{"version": 1, "clients": [{"clientId": "c0", "status": "revoked", "revokedAt": 5}]}')
    pair.parent.chmod(0o775)
    before = pair.read_bytes()
    out = await run_lens(tmp_path, "pair", "revoke", "--client", "c0")
    assert out.stdout == "client c0 is revoked already; nothing was changed\n", out
    for command in (["revoke", "--client", "nobody"], ["approve", "--client", "nobody"]):
        out = await run_lens(tmp_path, "pair", *command, check=False)
        assert out.returncode == 2 and out.stderr.startswith("lens: CLIENT_NOT_FOUND: "), (command, out)
    assert pair.read_bytes() == before and sorted(os.listdir(pair.parent)) == ["pair.json"]


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


async def test_the_config_api_judges_a_linked_pair_files_directory_and_never_follows_a_lock_link(
        daemon_factory: DaemonFactory, tmp_path: Path):
    d = await daemon_factory()
    strong = await d.pair("admin", strong=True)
    text = d.pair_path.read_text()
    lock = d.pair_path.parent / "pair.json.lock"
    victim = tmp_path / "victim"
    lock.unlink()
    lock.symlink_to(victim)
    r = await d.put("/config/files/pair.json", strong, {"text": text})
    assert r.status_code == 503 and error_of(r) == "CONFIG_FILE_UNWRITABLE", r.text
    assert r.json()["error"]["message"] == (
        "pair.json cannot be written (its lock file pair.json.lock is a symbolic link, which is never followed; "
        "check where it leads, then remove it); nothing was changed")
    assert not os.path.lexists(victim) and d.pair_path.read_text() == text
    # A pair file that is a link, in a directory others can write: refused for the directory
    # before any lock file is opened there.
    private = tmp_path / "private" / "pair.json"
    write_pair_file(private)
    os.replace(d.pair_path, private)
    d.pair_path.symlink_to(private)
    d.pair_path.parent.chmod(0o777)
    r = await d.put("/config/files/pair.json", strong, {"text": text})
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
    assert r.json()["error"]["message"].startswith("pair.json: its directory is writable by other users (mode "
                                                   "0777)"), r.text
    assert not os.path.lexists(victim) and private.read_text() == text
    assert sorted(os.listdir(private.parent)) == ["pair.json"]


async def test_the_config_api_refuses_a_pair_file_under_a_directory_others_can_write(daemon_factory: DaemonFactory):
    d = await daemon_factory()
    strong = await d.pair("admin", strong=True)
    text = d.pair_path.read_text()
    above = d.pair_path.parent.parent
    mode = file_mode(above)
    above.chmod(0o777)
    try:
        r = await d.put("/config/files/pair.json", strong, {"text": text})
    finally:
        above.chmod(mode)
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
    assert r.json()["error"]["message"] == (
        "pair.json: a directory above its directory is writable by other users (mode 0777), who could put a directory "
        "of theirs, and a pair file in it, in its place, and pairing requests and `lens pair` refuse to write it; "
        "check what that directory holds, then take the group's and others' write permission from it (chmod go-w), "
        "or make it sticky (chmod +t); nothing was changed")
    assert d.pair_path.read_text() == text
