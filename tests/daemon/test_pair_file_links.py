"""The pair file as a symbolic link: to nothing (a volume not yet mounted, say), to a file, or
in a loop.

A link to nothing is refused as an invalid pair file (as the main config is refused), naming the
link and its target, by ``lens pair list|approve|revoke``, by credential checks and by the
pairing route; nothing writes a file in the link's place. A link to a regular file is read and
written through: the write lands beside the target, atomically, and the link stays a link; the
file written is the one read (a link moved, or a file replaced, in between is refused), under the
lock a store configured with the target takes too."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from runtime.pairing import PairFileInvalid, PairFileUnwritable, PairStore

from .conftest import DaemonFactory, error_of, run_lens, wait_until, write_pair_file


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
    target.chmod(0o644)  # (the write makes it private)
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
    # (no temporary file left; the lock beside the target, which a store configured with it takes too)
    assert sorted(p.name for p in target.parent.iterdir()) == ["pair.json", "pair.json.lock"]
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


class _MovedAfterRead(PairStore):
    """A store whose link is pointed at ``then`` right after the locked read (as another
    process's ``ln -sfn`` would, between that read and the write)."""

    then: Path | None = None

    def _read(self, *args, **kwargs):
        read = super()._read(*args, **kwargs)
        if self.then is not None:
            then, self.then = self.then, None
            os.unlink(self.path)
            self.path.symlink_to(then)
        return read


def _moved_store(tmp_path: Path, then: Path) -> tuple[_MovedAfterRead, Path]:
    first = tmp_path / "a" / "pair.json"
    write_pair_file(first, "kept-a")
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to(first)
    store = _MovedAfterRead(pair, log_problems=False)
    store.then = then
    return store, first


def test_a_link_moved_to_another_pair_file_between_read_and_write_is_refused(tmp_path: Path):
    other = tmp_path / "b" / "pair.json"
    write_pair_file(other, "kept-b")
    store, first = _moved_store(tmp_path, other)
    before = first.read_bytes(), other.read_bytes()
    with pytest.raises(PairFileUnwritable, match="changed while it was being updated"):
        store.register("c1", "", max_pending=32)
    assert (first.read_bytes(), other.read_bytes()) == before  # (neither file's records replaced)


def test_a_link_moved_to_an_unrelated_file_between_read_and_write_leaves_it_alone(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("not a pair file\n")
    store, _ = _moved_store(tmp_path, victim)
    with pytest.raises(PairFileUnwritable, match="changed while it was being updated"):
        store.register("c1", "", max_pending=32)
    assert victim.read_text() == "not a pair file\n"


def test_a_link_left_dangling_between_read_and_write_makes_no_directory(tmp_path: Path):
    gone = tmp_path / "volume" / "pair.json"
    store, _ = _moved_store(tmp_path, gone)
    with pytest.raises(PairFileUnwritable, match="changed while it was being updated"):
        store.register("c1", "", max_pending=32)
    assert not gone.parent.exists()


def test_a_target_replaced_between_read_and_write_is_refused(tmp_path: Path):
    first = tmp_path / "a" / "pair.json"
    write_pair_file(first, "kept-a")
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to(first)

    class Replaced(PairStore):
        armed = False

        def _read(self, *args, **kwargs):
            read = super()._read(*args, **kwargs)
            if self.armed:
                self.armed = False
                write_pair_file(first.with_name("new.json"), "swapped-in")
                os.replace(first.with_name("new.json"), first)
            return read

    store = Replaced(pair)
    store.armed = True
    with pytest.raises(PairFileUnwritable, match="changed while it was being updated"):
        store.register("c1", "", max_pending=32)
    assert [c.client_id for c in PairStore(first).clients()] == ["swapped-in"]


def test_a_link_and_its_target_configured_in_two_stores_share_one_lock(tmp_path: Path):
    target = tmp_path / "volume" / "pair.json"
    write_pair_file(target, "c0")
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to(target)
    through_link, direct = PairStore(pair), PairStore(target)

    class Interleaved(PairStore):
        armed = False

        def _read(self, *args, **kwargs):
            read = super()._read(*args, **kwargs)
            if not self.armed:
                return read
            self.armed = False
            # (the lock this write holds: the other store's write must wait for it, so it
            # cannot be taken here without blocking)
            fd = os.open(str(target) + ".lock", os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
            return read

    interleaved = Interleaved(pair)
    interleaved.armed = True
    interleaved.register("c1", "", max_pending=32)
    direct.register("c2", "", max_pending=32)
    assert {c.client_id for c in PairStore(target).clients()} == {"c0", "c1", "c2"}
    assert through_link.find("c0") is not None


async def test_a_link_through_a_regular_file_is_a_link_to_nothing(tmp_path: Path):
    (tmp_path / "notdir").write_text("a file\n")
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to("../notdir/pair.json")
    target = tmp_path / "notdir" / "pair.json"
    for command in (["list"], ["approve", "--client", "c1"], ["revoke", "--client", "c1"]):
        out = await run_lens(tmp_path, "pair", *command, check=False)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (command, out)
        assert out.stderr.startswith("lens: PAIR_FILE_INVALID: pair file config/pair.json is a symbolic link to "
                                     f"{target}, which does not exist"), (command, out.stderr)


def test_a_chain_of_links_to_nothing_names_the_last_target(tmp_path: Path):
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    (tmp_path / "config" / "a").symlink_to("../nothere.json")
    pair.symlink_to("a")
    with pytest.raises(PairFileInvalid, match=f"is a symbolic link to {tmp_path / 'nothere.json'}, which does not exist"):
        PairStore(pair, log_problems=False).approve("c1", strong=False)
    assert PairStore(pair, log_problems=False).problem.startswith(
        f"pair file {pair} is a symbolic link to {tmp_path / 'nothere.json'}, which does not exist")


def test_writes_through_a_relative_link_and_a_chain_land_in_the_last_target(tmp_path: Path):
    target = tmp_path / "volume" / "pair.json"
    write_pair_file(target, "c0")
    target.chmod(0o644)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "middle").symlink_to("../volume/pair.json")
    pair = tmp_path / "config" / "pair.json"
    pair.symlink_to("middle")
    token = PairStore(pair).register("c1", "", max_pending=32) and PairStore(pair).approve("c1", strong=False)
    assert PairStore(target).authenticate(token).client_id == "c1"
    assert os.readlink(pair) == "middle" and os.readlink(tmp_path / "config" / "middle") == "../volume/pair.json"
    assert oct(target.stat().st_mode & 0o777) == "0o600"


async def test_a_link_to_a_directory_is_an_invalid_pair_file_and_left_alone(tmp_path: Path):
    (tmp_path / "volume").mkdir()
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to(tmp_path / "volume")
    for command in (["list"], ["approve", "--client", "c1"], ["revoke", "--client", "c1"]):
        out = await run_lens(tmp_path, "pair", *command, check=False)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (command, out)
        assert out.stderr.startswith("lens: PAIR_FILE_INVALID: pair file config/pair.json "), (command, out.stderr)
        assert "is a directory" in out.stderr, (command, out.stderr)
    assert pair.is_symlink() and list((tmp_path / "volume").iterdir()) == []


def test_a_link_target_in_a_directory_others_can_write_is_not_written(tmp_path: Path):
    target = tmp_path / "shared" / "pair.json"
    write_pair_file(target, "c0")
    target.parent.chmod(0o777)
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.symlink_to(target)
    before = target.read_bytes()
    with pytest.raises(PairFileUnwritable, match=r"the directory \S*shared, which holds it or its link's target, is writable by other users \(mode 0777\)"):
        PairStore(pair).approve("c0", strong=True)
    assert target.read_bytes() == before
