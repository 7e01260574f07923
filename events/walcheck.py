"""Commits in ``events.db-wal`` that SQLite no longer reads.

SQLite reads a WAL file frame by frame while each frame carries the file's current salts and its
running checksum holds; at the first frame that fails, the log ends for it, silently: every
transaction committed after that frame is gone from every reader's view (and the next writer
overwrites it). A flipped byte in one frame so hides every event appended after it until the
next checkpoint. This module finds commit frames of the current salts past that point, which a
writer process that crashed does not leave (SQLite writes the frames in order, each commit's
before the next transaction's): the file was damaged after it was written. Format: https://www.sqlite.org/fileformat.html
(section "Write-Ahead Log File Format").
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import msgspec

WAL_HEADER = 32
# Commits after a break that refuse the log (the writer's open, `lens log rebuild`): with
# `synchronous` FULL every commit is synced before the next transaction begins, so a power cut
# tears the last transaction only; one commit after the break is most likely that one.
REFUSED_COMMITS_AFTER = 2
FRAME_HEADER = 24
_MAGIC = (0x377F0682, 0x377F0683)  # low bit: checksums over big-endian words


class WalFinding(msgspec.Struct, frozen=True):
    """What a damaged WAL hides: the frame where SQLite stops reading and the commits after it."""

    frames_read: int  # frames up to the last commit SQLite still reads
    bad_frame: int  # 1-based number of the first frame SQLite cannot read
    commits_after: int  # commit frames of the current salts after it

    def message(self, wal: Path) -> str:
        return (f"{wal.name} frame {self.bad_frame} is damaged (its checksum or salt is wrong), so SQLite stops "
                f"reading the WAL there: "
                f"{self.commits_after} later commit(s) in it are invisible to every reader (their events are "
                f"missing from this log) and the next writer would overwrite them. Do not start the daemon on "
                f"this directory; restore it from a backup")


def _checksum(data: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes) continued from ``(s0, s1)``."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def hidden_commits(wal: Path, *, reads: int = 3) -> WalFinding | None:
    """What :func:`read_once` finds in ``wal`` at the same frame twice in a row (of at most
    ``reads`` reads), with the later read's count. A writer appending while the file is read can
    show a frame not yet written before frames that are (the read is not atomic); the next read
    finds that frame whole, or the break at another frame. A damaged frame stays where it is."""
    last = read_once(wal)
    for _ in range(reads - 1):
        if last is None:
            return None
        again = read_once(wal)
        if again is not None and again.bad_frame == last.bad_frame:
            return again
        last = again
    return None


def holds_a_commit(wal: Path) -> bool | None:
    """Whether the regular file ``wal`` holds a commit frame of its header's salts (one SQLite
    would read, or one hidden behind a damaged frame); ``None`` when its bytes are no WAL SQLite
    would read at all (shorter than a header, another magic, a page size WAL does not have, or a
    header failing its checksum). A header alone, or frames of other salts (an earlier generation)
    or without a commit, is ``False``: no commit is in it. Raises :class:`OSError` when it cannot
    be read. Reads the frame headers only, up to the first such commit."""
    fd = os.open(wal, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        header = f.read(WAL_HEADER)
        if len(header) < WAL_HEADER:
            return None
        magic, _version, page_size, _ckpt, salt1, salt2, c1, c2 = struct.unpack(">8I", header)
        if magic not in _MAGIC or page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
            return None
        if _checksum(header[:24], bool(magic & 1), 0, 0) != (c1, c2):
            return None
        size = os.fstat(fd).st_size
        at = WAL_HEADER
        while at + FRAME_HEADER + page_size <= size:  # (whole frames only)
            f.seek(at)
            frame = f.read(FRAME_HEADER)
            if len(frame) < FRAME_HEADER:
                break
            _pgno, commit, fs1, fs2, _c1, _c2 = struct.unpack(">6I", frame)
            if commit and (fs1, fs2) == (salt1, salt2):
                return True
            at += FRAME_HEADER + page_size
    return False


READ_BYTES = 16 << 20  # read at a time (whole frames), then checked: a short window for a writer


def read_once(wal: Path) -> WalFinding | None:
    """The commits ``wal`` holds past the first frame SQLite cannot read; None when it has none
    (no file, an empty or foreign header, a valid chain, or only stale frames of an earlier
    generation after the break)."""
    try:
        fd = os.open(wal, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO in its place would block a plain open)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # (the readers refuse such a file when they open the log)
        os.close(fd)
        return None
    with open(fd, "rb") as f:
        header = f.read(WAL_HEADER)
        if len(header) < WAL_HEADER:
            return None
        magic, _version, page_size, _ckpt, salt1, salt2, c1, c2 = struct.unpack(">8I", header)
        if magic not in _MAGIC or page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
            return None  # not a WAL SQLite would read either: nothing hidden by a broken chain
        big_endian = bool(magic & 1)
        if _checksum(header[:24], big_endian, 0, 0) != (c1, c2):
            return None  # SQLite ignores the whole file: every frame is of no generation
        s0, s1 = c1, c2
        frame_size = FRAME_HEADER + page_size
        n = 0
        valid = 0  # frames up to and including the last valid commit
        bad: int | None = None
        commits_after = 0
        while chunk := f.read(max(1, READ_BYTES // frame_size) * frame_size):
            view = memoryview(chunk)
            for at in range(0, len(chunk) - frame_size + 1, frame_size):
                frame = view[at:at + frame_size]
                n += 1
                _pgno, commit, fs1, fs2, fc1, fc2 = struct.unpack(">6I", frame[:FRAME_HEADER])
                if (fs1, fs2) != (salt1, salt2):
                    if bad is None:
                        bad = n  # the chain ends here (stale frames of an earlier generation, most often)
                    continue
                if bad is None:
                    s0, s1 = _checksum(frame[:8], big_endian, s0, s1)
                    s0, s1 = _checksum(frame[FRAME_HEADER:], big_endian, s0, s1)
                    if (s0, s1) == (fc1, fc2):
                        if commit:
                            valid = n
                        continue
                    bad = n
                    continue  # (a commit frame torn as its writer stopped is not one SQLite should read)
                if commit:
                    commits_after += 1
            if len(chunk) % frame_size:
                break  # a frame cut short by the end of the file: SQLite reads no further either
    if bad is None or commits_after == 0:
        return None
    return WalFinding(valid, bad, commits_after)
