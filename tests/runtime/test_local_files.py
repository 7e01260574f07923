"""Files the Core reads or writes on its own host: the user's ~/.agents/AGENTS.md and the
artifact store. Both must stay bounded and must heal, whatever is found there."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from runtime.daemon import read_home_agents_md
from runtime.prompt import READ_LIMIT_BYTES as AGENTS_MD_MAX_BYTES, Cut, Unusable
from tools.artifacts import ArtifactError, ArtifactStore


async def test_a_fifo_as_the_home_agents_md_is_left_out_at_once(tmp_path: Path) -> None:
    # Read with a blocking open, a FIFO held every model request of every project (and the
    # aborts behind them) until something wrote to it.
    fifo = tmp_path / "AGENTS.md"
    os.mkfifo(fifo)
    with trio.fail_after(5):
        assert await trio.to_thread.run_sync(read_home_agents_md, str(fifo)) is None
    (tmp_path / "dir.md").mkdir()
    assert read_home_agents_md(str(tmp_path / "dir.md")) is None
    assert read_home_agents_md(str(tmp_path / "missing.md")) is None


def test_the_home_agents_md_is_read_up_to_its_cap(tmp_path: Path) -> None:
    f = tmp_path / "AGENTS.md"
    f.write_bytes(b"a" * AGENTS_MD_MAX_BYTES)  # exactly the cap: all of it
    assert read_home_agents_md(str(f)) == "a" * AGENTS_MD_MAX_BYTES
    f.write_bytes(b"a" * (AGENTS_MD_MAX_BYTES - 1) + "é".encode() + b"b" * 3_000_000)  # 3 MB: not read whole
    assert read_home_agents_md(str(f)) == Cut("a" * (AGENTS_MD_MAX_BYTES - 1))  # the character cut by the cap goes
    f.write_bytes(b"rules\n\xff more rules\n")
    assert read_home_agents_md(str(f)) == Unusable("it is not UTF-8 text (byte 6)")  # named in the prompt
    f.write_text("Rule one.\n")
    assert read_home_agents_md(str(f)) == "Rule one.\n"


def test_a_damaged_artifact_is_written_again_when_stored_again(tmp_path: Path) -> None:
    # put() trusted any file of the name: a truncated copy stayed, and every later request that
    # named it failed ARTIFACT_CORRUPT, even after the same image was viewed again.
    store = ArtifactStore(tmp_path / "artifacts")
    data = b"\x89PNG\r\n\x1a\n" + b"\x00" * 65
    aid = store.put(data)
    assert aid == hashlib.sha256(data).hexdigest()
    (tmp_path / "artifacts" / aid).write_bytes(data[:-5])
    assert store.put(data) == aid
    assert store.get(aid) == data
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == [aid]  # no temp file left


def test_a_stored_artifact_has_its_directory_synced_before_put_returns(tmp_path: Path, monkeypatch) -> None:
    # put() synced the file but not the directory its rename wrote: after a power cut the name
    # could be gone while the event that refers to it (committed with synchronous=FULL) stayed.
    synced: list[os.stat_result] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store = ArtifactStore(tmp_path / "artifacts")
    aid = store.put(b"stored bytes")
    assert {(st.st_dev, st.st_ino) for st in synced} >= {
        (p.stat().st_dev, p.stat().st_ino) for p in (store.root, store.root / aid)}


def test_an_artifact_that_is_not_a_regular_file_is_refused_and_replaced_by_put(tmp_path: Path) -> None:
    # get() and put()'s check opened whatever had the artifact's name: a FIFO blocked for ever,
    # a directory raised IsADirectoryError, a link to /dev/zero was read without end.
    store = ArtifactStore(tmp_path / "artifacts")
    store.root.mkdir()
    data = b"stored bytes"
    aid = hashlib.sha256(data).hexdigest()
    (store.root / aid).mkdir()
    assert_damaged(store, aid, "a directory, not a regular file")
    (store.root / aid).rmdir()
    os.mkfifo(store.root / aid)
    assert_damaged(store, aid, "a FIFO, not a regular file")
    assert store.put(data) == aid  # the FIFO is replaced by the artifact
    assert store.get(aid) == data
    (store.root / aid).unlink()
    (store.root / aid).symlink_to("/dev/zero")
    assert_damaged(store, aid, "a character device, not a regular file")
    assert store.put(data) == aid and store.get(aid) == data


def test_artifacts_put_together_leave_none_of_a_failed_call_behind_but_what_others_hold(tmp_path: Path) -> None:
    # An edit's "before" was stored and kept when its "after" could not be: a file no event
    # names. (A directory in the "after"'s place makes its rename fail, as a full disk would.)
    store = ArtifactStore(tmp_path / "artifacts")
    store.root.mkdir()
    before, after, shared = b"before\n", b"after\n", b"named by an earlier event\n"
    blocked = store.root / hashlib.sha256(after).hexdigest()
    (blocked / "x").mkdir(parents=True)

    def fails(items: Any) -> None:
        try:
            store.put_together(items)
        except OSError:
            return
        raise AssertionError("put_together stored an artifact over a directory")

    fails([before, after])
    assert sorted(p.name for p in store.root.iterdir()) == [blocked.name]  # no "before", no temp file
    # One that was there already is kept: an earlier event may name it (ids are shared by content).
    kept = store.put(shared)
    fails([shared, after])
    assert store.get(kept) == shared

    class PutMeanwhile(list):  # the "before" returned to another caller while the "after" is stored
        def __iter__(self) -> Iterator[bytes]:
            yield before
            assert store.put(before) == hashlib.sha256(before).hexdigest()
            yield after

    fails(PutMeanwhile())
    assert store.get(hashlib.sha256(before).hexdigest()) == before
    blocked.joinpath("x").rmdir()
    blocked.rmdir()
    assert store.put_together([b"a", after]) == [hashlib.sha256(b"a").hexdigest(), blocked.name]
    assert store.get(blocked.name) == after


def assert_damaged(store: ArtifactStore, aid: str, what: str) -> None:
    """``store.get(aid)`` refuses the artifact as damaged, naming ``what`` is in its place."""
    try:
        store.get(aid)
    except ArtifactError as exc:
        assert exc.code == "ARTIFACT_CORRUPT" and what in exc.message, exc.message
    else:
        raise AssertionError(f"{what!r} was read as an artifact")
