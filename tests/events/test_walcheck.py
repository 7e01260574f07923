"""``events.walcheck`` on the WAL of a real log, damaged by hand: what SQLite stops reading at a
broken frame is found, what it was never meant to read (a torn last write, an earlier
generation's stale frames, a header it ignores) is not. ``lens log verify`` reporting it is in
``tests/cli/test_log_cli.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from events.reader import LogReader
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
