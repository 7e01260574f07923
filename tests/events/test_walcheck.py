"""``events.walcheck`` on the WAL of a real log, damaged by hand: what SQLite stops reading at a
broken frame is found, what it was never meant to read (a torn last write, an earlier
generation's stale frames, a header it ignores) is not. ``lens log verify`` reporting it is in
``tests/cli/test_log_cli.py``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import trio

from events.errors import WalDamaged
from events.reader import LogReader
from events.store import EventStore
from events.walcheck import hidden_commits

from tests.rawlog import log_with_its_wal

EVENTS = 30


@pytest.fixture
def wal(tmp_path: Path) -> Path:
    """The WAL of a log of ``EVENTS`` events, one commit each, none checkpointed."""
    data = tmp_path / "data"
    trio.run(log_with_its_wal, tmp_path / "writer", data, EVENTS)
    return data / "events.db-wal"


def frames(wal: Path) -> tuple[bytearray, int, int]:
    """The file's bytes, its frame size and how many whole frames it holds."""
    raw = bytearray(wal.read_bytes())
    size = 24 + int.from_bytes(raw[8:12], "big")
    return raw, size, (len(raw) - 32) // size


def at(frame: int, size: int) -> int:
    """The offset of 1-based ``frame``."""
    return 32 + (frame - 1) * size


def is_commit(raw: bytearray, frame: int, size: int) -> int:
    """1 if ``frame`` ends a transaction (its header's database size is set), else 0."""
    return int(int.from_bytes(raw[at(frame, size) + 4:at(frame, size) + 8], "big") != 0)


def visible(data: Path) -> int:
    with LogReader(data) as reader:
        return reader.event_count()


def test_an_intact_wal_hides_nothing(wal: Path) -> None:
    assert hidden_commits(wal) is None
    assert visible(wal.parent) == EVENTS


def test_a_damaged_frame_is_found_with_the_commits_after_it(wal: Path) -> None:
    raw, size, n = frames(wal)
    bad = n // 2
    raw[at(bad, size) + 24 + 7] ^= 0x01
    wal.write_bytes(raw)
    finding = hidden_commits(wal)
    assert finding is not None and finding.bad_frame == bad
    # Every event SQLite no longer shows, but the damaged frame's own (one commit each).
    assert finding.commits_after == EVENTS - visible(wal.parent) - is_commit(raw, bad, size) > 0


def test_a_damaged_salt_is_found_too(wal: Path) -> None:
    raw, size, n = frames(wal)
    raw[at(3, size) + 8] ^= 0x01  # salt-1 of frame 3's header
    wal.write_bytes(raw)
    finding = hidden_commits(wal)
    assert finding is not None and finding.bad_frame == 3


def test_a_torn_last_frame_hides_nothing_acknowledged(wal: Path) -> None:
    # A writer stopped while it wrote its last frame: no commit follows it.
    raw, size, n = frames(wal)
    raw[at(n, size) + 24 + 7] ^= 0x01
    wal.write_bytes(raw)
    assert hidden_commits(wal) is None


def test_stale_frames_of_an_earlier_generation_are_not_damage(wal: Path) -> None:
    # After a checkpoint SQLite writes the WAL again from its start under new salts: the frames
    # past the new ones still carry the old salts and are meant to be ignored.
    raw, size, n = frames(wal)
    for frame in range(n // 2, n + 1):
        raw[at(frame, size) + 8] ^= 0x01
    wal.write_bytes(raw)
    assert hidden_commits(wal) is None


def test_a_header_sqlite_ignores_and_a_missing_file_hide_nothing(wal: Path) -> None:
    raw, _size, _n = frames(wal)
    raw[30] ^= 0x01  # the header's own checksum: SQLite ignores the whole file
    wal.write_bytes(raw)
    assert hidden_commits(wal) is None
    wal.unlink()
    assert hidden_commits(wal) is None


def test_a_wal_that_is_not_a_file_is_not_read(wal: Path) -> None:
    # (the readers refuse it when they open the log; the check itself never blocks on a FIFO)
    wal.unlink()
    os.mkfifo(wal)
    assert hidden_commits(wal) is None
    wal.unlink()
    wal.mkdir()
    assert hidden_commits(wal) is None


def commits(raw: bytearray, size: int, n: int) -> list[int]:
    """The 1-based numbers of the frames that end a transaction."""
    return [frame for frame in range(1, n + 1) if is_commit(raw, frame, size)]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_writer_refuses_a_wal_that_hides_durable_commits_and_changes_nothing(wal: Path) -> None:
    # A frame broken in the middle: the commits after it were synced before the next began
    # (synchronous FULL), so they were durable; opening would drop them and write over them.
    raw, size, n = frames(wal)
    raw[at(n // 2, size) + 24 + 7] ^= 0x01
    wal.write_bytes(raw)
    before = {p.name: digest(p) for p in (wal, wal.parent / "events.db")}
    with pytest.raises(WalDamaged) as caught:
        EventStore.open(wal.parent)
    assert caught.value.code == "WAL_DAMAGED"
    message = str(caught.value)
    assert f"events.db-wal frame {n // 2} is damaged" in message and "restore it from a backup" in message
    assert {p.name: digest(p) for p in (wal, wal.parent / "events.db")} == before
    # Under a weaker synchronous a power cut may tear several transactions: opened as SQLite reads it.
    store = EventStore.open(wal.parent, synchronous="NORMAL")
    store.close()


def test_the_writer_opens_a_wal_whose_last_transaction_alone_is_torn(wal: Path) -> None:
    # The break is inside the last transaction (one commit after it): a power cut while it was
    # written, never acknowledged. The log opens as SQLite reads it, without that transaction.
    raw, size, n = frames(wal)
    ends = commits(raw, size, n)
    last_start = ends[-2] + 1
    assert last_start < ends[-1], "the last transaction must span more than its commit frame"
    raw[at(last_start, size) + 24 + 7] ^= 0x01
    wal.write_bytes(raw)
    assert hidden_commits(wal) is not None  # (lens log verify still reports it)
    store = EventStore.open(wal.parent)
    store.close()
    assert visible(wal.parent) == EVENTS - 1
