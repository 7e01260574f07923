"""`lens log decode | verify | rebuild | stats` and `lens serve` driven as the installed script, on
the cases the earlier log CLI passes do not list: an `events.db-wal` holding commits whose
`events.db` is gone, and a `meta.active_dict_id` naming no dictionary the log holds.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest
import trio

from events.errors import StoreCorrupt
from events.store import Draft, EventStore, StoreLocked, open_store
from events.types import ModelResponded, ProjectCreated, SessionCreated

from tests.cli.lens_script import lens_script, refused, store_corrupt_said
from tests.rawlog import edit_log, log_rows

COMMANDS = ("decode", "verify", "stats", "rebuild")


def lens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lens ARGS`` run by the installed script; stdout and stderr as text, at most 60 s."""
    return subprocess.run([str(lens_script()), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


# ------------------------------------------------------------ a WAL with commits, its events.db gone


@pytest.mark.parametrize("command", [*COMMANDS, "serve"])
def test_a_wal_with_commits_beside_no_events_db_is_kept_and_named(wal_of: Callable[[int], bytes], tmp_path: Path,
                                                                   command: str) -> None:
    wal_of_5 = wal_of(5)
    # The readers said DATA_DIR_MISSING ("start the daemon … to create one"), and the daemon did:
    # SQLite deletes the WAL of a database it finds empty, so the new log took the place of the
    # commits still in it, without a word. It is an events.db removed (or moved) from under its
    # WAL, named as an events.db cut to nothing is (STORE_CORRUPT), with the WAL left as it was.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "events.db-wal").write_bytes(wal_of_5)
    os.chmod(data / "events.db-wal", 0o600)
    said = store_corrupt_said(command, data, tmp_path)
    assert (f"data directory {data} holds no events.db, but events.db-wal beside where it belongs holds "
            f"{len(wal_of_5)} bytes of the log's writes") in said, said
    assert "restore events.db" in said and "remove events.db-wal" in said, said
    assert sorted(p.name for p in data.iterdir()) == ["events.db-wal"]
    assert (data / "events.db-wal").read_bytes() == wal_of_5


def test_a_second_writer_on_a_running_log_whose_events_db_was_removed_is_told_it_is_in_use(tmp_path: Path) -> None:
    # A daemon keeps writing the events.db it holds open after the file's name is removed. A second
    # `lens serve` on the directory was told STORE_CORRUPT ("remove events.db-wal and -shm", which
    # would lose the running daemon's writes) before it looked at the lock: it is STORE_LOCKED.
    # The readers cannot tell a running daemon from none, and say so in their advice.
    data = tmp_path / "data"

    async def main() -> tuple[str, subprocess.CompletedProcess[str]]:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(ProjectCreated(name="p", workspace="/ws"), project_id="p"))
            (data / "events.db").unlink()
            assert (data / "events.db-wal").stat().st_size > 0
            with pytest.raises(StoreLocked) as info:
                EventStore.open(data, synchronous="OFF")
            read = await trio.to_thread.run_sync(lambda: lens("log", "decode", "--data", str(data)))
            return str(info.value), read

    said, read = trio.run(main)
    assert said == (f"data directory {data} is in use by another Lens process; stop it or "
                    f"choose another --data directory"), said
    line = refused(read, "STORE_CORRUPT")
    assert "if no Lens daemon is running on this directory, restore events.db" in line, line


def test_a_writer_takes_the_lock_before_it_refuses_a_wal_without_its_log(wal_of: Callable[[int], bytes],
                                                                         tmp_path: Path) -> None:
    wal_of_5 = wal_of(5)
    # With a `lock` file (a daemon ran there), the writer takes the lock first, then refuses: no
    # daemon is running then, and the advice says so without the readers' proviso.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "events.db-wal").write_bytes(wal_of_5)
    (data / "lock").touch(mode=0o600)
    with pytest.raises(StoreCorrupt) as info:
        EventStore.open(data, synchronous="OFF")
    said = str(info.value)
    assert f"holds {len(wal_of_5)} bytes of the log's writes" in said and "restore events.db" in said, said
    assert "if no Lens daemon is running" not in said, said
    assert sorted(p.name for p in data.iterdir()) == ["events.db-wal", "lock"]
    assert (data / "events.db-wal").read_bytes() == wal_of_5


FRAME = 24 + 4096  # (a frame's header and a page of the log's 4096 bytes)


def wal_cut(wal: bytes, frames: list[int]) -> bytes:
    """``wal``'s header followed by its frames numbered ``frames`` (1-based), in that order."""
    return wal[:32] + b"".join(wal[32 + (k - 1) * FRAME:32 + k * FRAME] for k in frames)


def wal_only(tmp_path: Path, wal: bytes) -> Path:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "events.db-wal").write_bytes(wal)
    os.chmod(data / "events.db-wal", 0o600)
    return data


@pytest.mark.parametrize("shape", ["header only", "frames without a commit"])
def test_a_wal_without_a_commit_beside_no_events_db_is_no_log_yet(wal_of: Callable[[int], bytes], tmp_path: Path,
                                                                    shape: str) -> None:
    wal_of_5 = wal_of(5)
    # Refused before as holding "N bytes of the log's writes": a WAL whose frames hold no commit
    # holds nothing SQLite would read, like an empty one.
    wal = wal_of_5[:32] if shape == "header only" else wal_cut(wal_of_5, [1, 2, 3, 4, 5])
    data = wal_only(tmp_path, wal)
    refused(lens("log", "decode", "--data", str(data)), "DATA_DIR_MISSING")

    async def open_and_close() -> int:
        async with open_store(data, synchronous="OFF") as store:
            return store.last_seq

    assert trio.run(open_and_close) == 0


def test_a_wal_of_one_commit_frame_beside_no_events_db_is_kept_and_named(wal_of: Callable[[int], bytes],
                                                                         tmp_path: Path) -> None:
    wal_of_5 = wal_of(5)
    wal = wal_cut(wal_of_5, [6])  # (the first commit frame alone: its salts are the header's)
    data = wal_only(tmp_path, wal)
    said = refused(lens("log", "decode", "--data", str(data)), "STORE_CORRUPT")
    assert f"holds {len(wal)} bytes of the log's writes" in said, said
    with pytest.raises(StoreCorrupt):
        EventStore.open(data, synchronous="OFF")
    assert sorted(p.name for p in data.iterdir()) == ["events.db-wal"]


@pytest.mark.parametrize("shape", ["five bytes", "another magic"])
def test_bytes_that_are_no_wal_beside_no_events_db_are_named_so(wal_of: Callable[[int], bytes], tmp_path: Path,
                                                                shape: str) -> None:
    wal_of_5 = wal_of(5)
    # Bytes SQLite would not read as a WAL hold none of the log's writes, yet opening a new log
    # would delete them: refused still, saying what they are (not "the log's writes").
    wal = b"hello" if shape == "five bytes" else b"\0\0\0\0" + wal_of_5[4:]
    data = wal_only(tmp_path, wal)
    said = refused(lens("log", "decode", "--data", str(data)), "STORE_CORRUPT")
    assert (f"data directory {data} holds no events.db, but events.db-wal beside where it belongs holds "
            f"{len(wal)} bytes that are no SQLite WAL") in said, said
    assert "of the log's writes" not in said and "remove events.db-wal" in said, said
    with pytest.raises(StoreCorrupt) as info:
        EventStore.open(data, synchronous="OFF")
    assert "bytes that are no SQLite WAL" in str(info.value)
    assert (data / "events.db-wal").read_bytes() == wal and sorted(p.name for p in data.iterdir()) == ["events.db-wal"]


def test_an_empty_wal_beside_no_events_db_is_no_log_yet(tmp_path: Path) -> None:
    # An empty WAL holds no commit: readers still say there is no log, and the writer makes one.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "events.db-wal").touch(mode=0o600)
    refused(lens("log", "decode", "--data", str(data)), "DATA_DIR_MISSING")

    async def open_and_close() -> int:
        async with open_store(data, synchronous="OFF") as store:
            return store.last_seq

    assert trio.run(open_and_close) == 0
    res = lens("log", "verify", "--data", str(data))
    assert (res.returncode, res.stdout) == (0, "ok: 0 event(s) verified\n"), res.stderr


# ------------------------------------------------------------ meta.active_dict_id naming no dictionary


def write_log_with_a_dictionary(data: Path) -> int:
    """A log of 60 events, then a trained dictionary made the active one; returns its id (no row
    uses it yet)."""
    async def write() -> int:
        async with open_store(data, synchronous="OFF", auto_dictionary_after=None) as store:
            await store.append(Draft(ProjectCreated(name="p", workspace="/ws"), project_id="p"))
            await store.append(Draft(SessionCreated(model="a/b"), project_id="p", session_id="s1"))
            for i in range(58):
                await store.append(Draft(ModelResponded(text=f"answer {i}: the same words again"),
                                         project_id="p", session_id="s1"))
            return await trio.to_thread.run_sync(store.train_dictionary)

    return trio.run(write)


def meta_problems(data: Path) -> list[str]:
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 1 and "Traceback" not in res.stderr, (res.returncode, res.stdout, res.stderr)
    *problems, summary = res.stdout.splitlines()
    assert summary == "FAILED: 1 problem(s) in 60 event(s)", res.stdout
    return problems


def test_an_active_dictionary_the_log_does_not_hold_is_reported(tmp_path: Path) -> None:
    # The writer records the dictionary and makes it the active one in one transaction, and
    # dictionaries are never deleted: a meta naming one the log does not hold is damage (a row
    # of `dictionaries` deleted), which `verify` passed as "ok" while the writer went on without.
    data = tmp_path / "data"
    dict_id = write_log_with_a_dictionary(data)
    edit_log(data, "DELETE FROM dictionaries")
    assert meta_problems(data) == [
        f"log: META_INVALID: meta active_dict_id is '{dict_id}', but the log holds no dictionary {dict_id}; "
        f"new bodies are written without a dictionary"]


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", " 7", "seven"])
def test_an_active_dictionary_id_that_is_no_ascii_number_is_reported_and_the_writer_opens(
        tmp_path: Path, value: str) -> None:
    # '²' passes str.isdigit but not int(): the writer's open failed with ValueError (`lens
    # serve`: "INTERNAL", a traceback). No writer records any of these, and `verify` said "ok".
    data = tmp_path / "data"
    write_log_with_a_dictionary(data)
    edit_log(data, "UPDATE meta SET value = ? WHERE key = 'active_dict_id'", (value,))
    assert meta_problems(data) == [
        f"log: META_INVALID: meta active_dict_id is {value!r}, not a dictionary id a writer records; "
        f"new bodies are written without a dictionary"]

    async def append_one() -> int:
        async with open_store(data, synchronous="OFF", auto_dictionary_after=None) as store:
            result = await store.append(Draft(ModelResponded(text="after"), project_id="p", session_id="s1"))
            return result.seqs[0]

    seq = trio.run(append_one)
    assert log_rows(data, "SELECT dict_id FROM events WHERE seq = ?", (seq,)) == [(0,)]


@pytest.mark.parametrize("shape", ["leading zeros", "zero"])
def test_an_active_dictionary_id_a_writer_never_records_is_reported_and_the_writer_opens(
        tmp_path: Path, shape: str) -> None:
    # A writer records a trained dictionary's id as str(id): never "0" (the codec's "no
    # dictionary") nor with leading zeros. Both were read as the id they spell, so "0" beside a
    # dictionaries row 0 (or "007" beside a row 7) passed `verify` as ok.
    data = tmp_path / "data"
    dict_id = write_log_with_a_dictionary(data)
    other_id, value = (0, "0") if shape == "zero" else (7, "007")
    [(stored,)] = log_rows(data, "SELECT data FROM dictionaries WHERE dict_id = ?", (dict_id,))
    # (the same dictionary under that id, its header's id rewritten to match: a row that loads)
    edit_log(data, "INSERT INTO dictionaries(dict_id, data, created_ts, sample_count) VALUES (?, ?, 0, 1)",
             (other_id, stored[:4] + other_id.to_bytes(4, "little") + stored[8:]))
    edit_log(data, "UPDATE meta SET value = ? WHERE key = 'active_dict_id'", (value,))
    problems = meta_problems_any(data)
    assert problems[-1] == "FAILED: 1 problem(s) in 60 event(s)", problems
    assert (f"log: META_INVALID: meta active_dict_id is {value!r}, not a dictionary id a writer records; "
            f"new bodies are written without a dictionary") in problems, problems

    async def append_one() -> int:
        async with open_store(data, synchronous="OFF", auto_dictionary_after=None) as store:
            result = await store.append(Draft(ModelResponded(text="after"), project_id="p", session_id="s1"))
            return result.seqs[0]

    seq = trio.run(append_one)
    assert log_rows(data, "SELECT dict_id FROM events WHERE seq = ?", (seq,)) == [(0,)]


def meta_problems_any(data: Path) -> list[str]:
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 1 and "Traceback" not in res.stderr, (res.returncode, res.stdout, res.stderr)
    return res.stdout.splitlines()
