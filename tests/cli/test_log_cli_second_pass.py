"""`lens log decode | verify | rebuild | stats` driven as the installed script, on the cases the
other log CLI tests do not list: a data directory reached through a link (a loop of links, a
path through a file), committed events still in the WAL, a data directory that cannot be
written, `projections.db` or its side files that are no file, zstd bombs measured from outside,
`--raw` with every filter, and an empty log through each command.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import apsw
import pytest
import trio
import zstandard

from events.store import Draft, open_store
from events.types import InputSubmitted, ProjectCreated, SessionCreated, TextPart

from tests.cli.lens_script import lens_script, refused, store_corrupt_said
from tests.rawlog import log_rows, log_with_its_wal
from tests.unwritable import unwritable

COMMANDS = ("decode", "verify", "stats", "rebuild")


def lens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lens ARGS`` run by the installed script; stdout and stderr as text, at most 60 s."""
    return subprocess.run([str(lens_script()), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def digests(data: Path) -> dict[str, str]:
    """SHA-256 of ``events.db`` and of an ``events.db-wal`` with content (a reader may leave an empty
    one behind; ``-shm`` is SQLite's index, not data: docs/storage-format.md)."""
    return {name: hashlib.sha256((data / name).read_bytes()).hexdigest()
            for name in ("events.db", "events.db-wal") if (data / name).exists() and (data / name).stat().st_size}


def write_small_log(data: Path) -> None:
    """A project, two sessions, one input of session ``s1`` (seq 1 … 4)."""
    async def write() -> None:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(ProjectCreated(name="p", workspace="/ws"), project_id="p"))
            await store.append(Draft(SessionCreated(model="a/b"), project_id="p", session_id="s1"))
            await store.append(Draft(InputSubmitted(content=[TextPart("hi")]), project_id="p", session_id="s1",
                                     request_id="r1"))
            await store.append(Draft(SessionCreated(model="a/b"), project_id="p", session_id="s2"))

    trio.run(write)


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("small") / "data"
    write_small_log(data)
    return data


# ------------------------------------------------------------ data directories that are no directory


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_dir_link_in_a_loop_is_named_not_called_unprivate(tmp_path: Path, command: str) -> None:
    # A loop of links was refused as DATA_DIR_NOT_PRIVATE ("cannot check the data directory …:
    # Too many levels of symbolic links"), a code whose fix is chmod; storage-format.md names a
    # data directory that is a link to nothing STORE_OPEN_FAILED, naming the target.
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    line = refused(lens("log", command, "--data", str(tmp_path / "a")), "STORE_OPEN_FAILED")
    assert f"data directory {tmp_path / 'a'} is a symbolic link to {tmp_path / 'b'}" in line
    assert "loop of links" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_path_through_a_file_is_named(tmp_path: Path, command: str) -> None:
    # `--data FILE/sub` was DATA_DIR_NOT_PRIVATE ("cannot check the data directory FILE/sub: Not a
    # directory"); it names no directory, as `--data FILE` does (STORE_OPEN_FAILED).
    (tmp_path / "file").write_bytes(b"x")
    line = refused(lens("log", command, "--data", str(tmp_path / "file" / "sub")), "STORE_OPEN_FAILED")
    assert f"data directory {tmp_path / 'file' / 'sub'} is not a directory" in line
    assert f"{tmp_path / 'file'} is a file" in line
    assert (tmp_path / "file").read_bytes() == b"x"


def test_a_data_path_below_a_loop_of_links_is_named(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    line = refused(lens("log", "decode", "--data", str(tmp_path / "a" / "sub")), "STORE_OPEN_FAILED")
    assert f"data directory {tmp_path / 'a' / 'sub'} is not a directory: a symbolic link on its path is in a loop" in line


@pytest.mark.parametrize("how", ["loop", "through a file"])
def test_the_writer_names_such_a_data_dir_too(tmp_path: Path, how: str) -> None:
    if how == "loop":
        (tmp_path / "a").symlink_to(tmp_path / "b")
        (tmp_path / "b").symlink_to(tmp_path / "a")
        data = tmp_path / "a"
    else:
        (tmp_path / "file").write_bytes(b"x")
        data = tmp_path / "file" / "sub"
    before = sorted(p.name for p in tmp_path.iterdir())
    res = lens("serve", "--data", str(data), "--port", "0", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, (res.returncode, res.stderr[-800:])
    assert f"lens: STORE_OPEN_FAILED: data directory {data} " in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made


def test_a_link_to_a_data_dir_is_read_as_that_directory(small_log: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(small_log)
    res = lens("log", "verify", "--data", str(link))
    assert (res.returncode, res.stdout, res.stderr) == (0, "ok: 4 event(s) verified\n", "")
    res = lens("log", "decode", "--data", str(link), "--session", "s1")
    assert [json.loads(line)["seq"] for line in res.stdout.splitlines()] == [2, 3], res.stderr


# ------------------------------------------------------------ committed events still in the WAL


def test_events_still_in_the_wal_are_read_and_left_where_they_are(tmp_path: Path) -> None:
    # A log copied while its writer ran: 30 commits sit in events.db-wal, none checkpointed.
    # Every command sees all of them, and none checkpoints them into events.db or changes a byte.
    data = tmp_path / "data"
    trio.run(log_with_its_wal, tmp_path / "writer", data, 30)
    assert (data / "events.db-wal").stat().st_size > 0
    before = digests(data)
    assert set(before) == {"events.db", "events.db-wal"}

    res = lens("log", "decode", "--data", str(data))
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["seq"] for line in res.stdout.splitlines()] == list(range(1, 31))
    res = lens("log", "decode", "--data", str(data), "--raw", "--from", "30")
    (last,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert base64.b64decode(last["body"]) == log_rows(tmp_path / "writer", "SELECT body FROM events WHERE seq = 30")[0][0]
    res = lens("log", "verify", "--data", str(data))
    assert (res.returncode, res.stdout) == (0, "ok: 30 event(s) verified\n"), res.stderr
    res = lens("log", "stats", "--data", str(data), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["total"]["events"] == 30, res.stderr
    res = lens("log", "rebuild", "--data", str(data))
    assert res.returncode == 0 and res.stdout.endswith(" from 30 event(s)\n"), res.stderr
    assert digests(data) == before


# ------------------------------------------------------------ filters


def test_raw_takes_every_filter(small_log: Path) -> None:
    stored = dict(log_rows(small_log, "SELECT seq, body FROM events"))
    res = lens("log", "decode", "--data", str(small_log), "--raw", "--session", "s1", "--kind", "input.submitted",
               "--from", "2", "--to", "3")
    assert res.returncode == 0, res.stderr
    (line,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert (line["seq"], line["kind"], line["request_id"], line["body_encoding"]) == (
        3, "input.submitted", "r1", "zstd+msgpack;base64")
    assert base64.b64decode(line["body"]) == stored[3]
    res = lens("log", "decode", "--data", str(small_log), "--raw", "--kind", "session.created", "--to", "3")
    assert [json.loads(line)["seq"] for line in res.stdout.splitlines()] == [2]


def test_a_session_the_log_does_not_hold_prints_nothing(small_log: Path) -> None:
    res = lens("log", "decode", "--data", str(small_log), "--session", "nosuch")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")


# ------------------------------------------------------------ an empty log


def test_an_empty_log_through_each_command(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def create() -> None:
        async with open_store(data, synchronous="OFF"):
            pass

    trio.run(create)
    before = digests(data)
    assert lens("log", "decode", "--data", str(data)).stdout == ""
    res = lens("log", "verify", "--data", str(data))
    assert (res.returncode, res.stdout) == (0, "ok: 0 event(s) verified\n"), res.stderr
    res = lens("log", "rebuild", "--data", str(data), "--projection", "sessions")
    assert (res.returncode, res.stdout) == (0, "rebuilt sessions from 0 event(s)\n"), res.stderr
    assert digests(data) == before


# ------------------------------------------------------------ a data directory that cannot be written


def test_a_log_in_a_directory_that_cannot_be_written_is_read_in_place(small_log: Path, tmp_path: Path) -> None:
    # Readers open such a log as an immutable file: decode and verify read it, stats computes in
    # memory and says so, rebuild (which writes projections.db) is refused; nothing is made there.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(small_log / "events.db", data / "events.db")
    before = digests(data)
    with unwritable(data):
        res = lens("log", "decode", "--data", str(data))
        assert (res.returncode, len(res.stdout.splitlines()), res.stderr) == (0, 4, "")
        res = lens("log", "verify", "--data", str(data))
        assert (res.returncode, res.stdout) == (0, "ok: 4 event(s) verified\n"), res.stderr
        res = lens("log", "stats", "--data", str(data), "--json")
        assert res.returncode == 0 and json.loads(res.stdout)["total"]["events"] == 4, res.stderr
        assert "computed in memory" in res.stderr, res.stderr
        line = refused(lens("log", "rebuild", "--data", str(data)), "DATA_DIR_NOT_WRITABLE")
        assert f"{data / 'projections.db'}" in line
    assert sorted(p.name for p in data.iterdir()) == ["events.db"]
    assert digests(data) == before


def test_committed_events_in_the_wal_of_a_directory_that_cannot_be_written_are_named(tmp_path: Path) -> None:
    # Reading them needs a -shm file beside the log: each command says so (STORE_WAL_UNREADABLE,
    # with what to do) instead of printing the log without its last commits.
    data = tmp_path / "data"
    trio.run(log_with_its_wal, tmp_path / "writer", data, 5)
    before = digests(data)
    with unwritable(data):
        for command in COMMANDS:
            line = refused(lens("log", command, "--data", str(data)), "STORE_WAL_UNREADABLE")
            assert "committed events are still in events.db-wal" in line and "copy the data directory" in line
    assert sorted(p.name for p in data.iterdir()) == ["events.db", "events.db-wal"]
    assert digests(data) == before


# ------------------------------------------------------------ projections.db a link to nothing


@pytest.mark.parametrize("command", ["stats", "rebuild", "serve"])
def test_a_projections_db_link_to_nothing_is_named_not_followed(small_log: Path, tmp_path: Path,
                                                                command: str) -> None:
    # SQLite followed the link and made its target 0644 (the history index, every conversation's
    # text, readable by all), where Lens makes projections.db 0600; a link to nothing is a
    # projections.db that is not a file, as a directory in its place is (PROJECTIONS_DAMAGED).
    data = tmp_path / "data"
    shutil.copytree(small_log, data)
    (data / "projections.db").symlink_to("elsewhere.db")
    before = sorted(p.name for p in data.iterdir() if p.name not in ("events.db-wal", "events.db-shm"))
    args = ["serve", "--data", str(data), "--port", "0"] if command == "serve" else ["log", command, "--data", str(data)]
    res = lens(*args, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, (res.returncode, res.stderr[-800:])
    assert (f"lens: PROJECTIONS_DAMAGED: {data / 'projections.db'} does not match the projections of this Lens "
            f"(it is a symbolic link to elsewhere.db, which does not lead to a file)") in res.stderr, res.stderr
    assert res.stdout == "" or command == "serve"
    assert not (data / "elsewhere.db").exists()
    after = sorted(p.name for p in data.iterdir() if p.name not in ("events.db-wal", "events.db-shm"))
    assert after == before  # (a reader of the log may leave its -shm and an empty -wal behind)


@pytest.mark.parametrize("side", ["-wal a link to nothing", "-shm a FIFO", "-journal a directory"])
@pytest.mark.parametrize("command", ["stats", "rebuild"])
def test_a_projections_side_file_that_is_not_a_file_is_named(small_log: Path, tmp_path: Path, command: str,
                                                              side: str) -> None:
    # A dangling link as projections.db-wal was "DATA_DIR_NOT_WRITABLE: … projections need a
    # writable data directory" from rebuild (stats: "not writable here", in memory) of a directory
    # it could write, and left a new projections.db behind; a FIFO as its -shm was "deleted while
    # another process (a running `lens serve`) still has it open". events.db's side files are
    # named for what they are (STORE_OPEN_FAILED); so are projections.db's now.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(small_log / "events.db", data / "events.db")
    suffix = side.split()[0]
    path = data / f"projections.db{suffix}"
    if "link" in side:
        path.symlink_to("elsewhere")
    elif "FIFO" in side:
        os.mkfifo(path, 0o600)
    else:
        path.mkdir(mode=0o700)
    line = refused(lens("log", command, "--data", str(data)), "STORE_OPEN_FAILED")
    assert f"{path} is not a regular file, so SQLite cannot use it beside projections.db" in line
    assert not (data / "projections.db").exists() and not (data / "elsewhere").exists()


# ------------------------------------------------------------ zstd bombs, measured from outside


def zeros_frame(size: int, content_size: bool) -> bytes:
    """One checksummed zstd frame of ``size`` zero bytes (a few KiB per hundred MiB)."""
    if content_size:
        return zstandard.ZstdCompressor(write_checksum=True).compress(bytes(size))
    stream = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compressobj()
    chunk = bytes(1 << 20)
    return b"".join([*(stream.compress(chunk) for _ in range(size >> 20)), stream.flush()])


def peak_rss_of(*args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``lens ARGS`` run from a fresh interpreter that reports its child's peak resident set
    (bytes): this process's own children would share one high-water mark."""
    probe = ("import resource, subprocess, sys; "
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60); "
             "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n' + r.stdout); "
             "sys.stderr.write(r.stderr); sys.exit(r.returncode)")
    res = subprocess.run([sys.executable, "-c", probe, str(lens_script()), *args], capture_output=True, text=True,
                         timeout=90)
    peak, _, stdout = res.stdout.partition("\n")
    return subprocess.CompletedProcess(res.args, res.returncode, stdout, res.stderr), int(peak) * 1024


def test_zstd_bombs_are_refused_by_every_command_in_bounded_memory(small_log: Path, tmp_path: Path) -> None:
    # A 1 GiB frame that declares no size (seq 3) and one declaring 900 MiB (seq 4), each a few
    # KiB stored: decode, verify and rebuild name the rows and exit 1 (stats reads no body), and
    # each process stays far below either size (the maximum event size is 32 MiB); nothing changes.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(small_log / "events.db", data / "events.db")
    edit = apsw.Connection(str(data / "events.db"))
    edit.execute("UPDATE events SET body = ? WHERE seq = 3", (zeros_frame(1 << 30, content_size=False),))
    edit.execute("UPDATE events SET body = ? WHERE seq = 4", (zeros_frame(900 << 20, content_size=True),))
    edit.close()
    before = digests(data)
    limit = 200 << 20
    res, peak = peak_rss_of("log", "verify", "--data", str(data))
    assert res.returncode == 1 and peak < limit, (peak, res.stdout, res.stderr)
    assert res.stdout.splitlines() == [
        "seq 3: EVENT_TOO_LARGE: frame of unknown size decompresses past the maximum event size of 33554432 bytes",
        "seq 4: EVENT_TOO_LARGE: frame declares 943718400 bytes, over the maximum event size of 33554432 bytes",
        "FAILED: 2 problem(s) in 4 event(s)"]
    res, peak = peak_rss_of("log", "decode", "--data", str(data))
    assert res.returncode == 1 and peak < limit, (peak, res.stderr)
    assert [json.loads(line)["seq"] for line in res.stdout.splitlines()] == [1, 2]
    assert [line.split(": ")[1:3] for line in res.stderr.splitlines()] == [
        ["EVENT_TOO_LARGE", "seq 3"], ["EVENT_TOO_LARGE", "seq 4"]]
    res, peak = peak_rss_of("log", "rebuild", "--data", str(data))
    assert res.returncode == 1 and res.stdout == "" and peak < limit, (peak, res.stderr)
    assert res.stderr.startswith("lens: EVENT_TOO_LARGE: seq 3: ") and "changed nothing" in res.stderr, res.stderr
    res, peak = peak_rss_of("log", "stats", "--data", str(data), "--json")  # (counts the stored columns only)
    assert res.returncode == 0 and json.loads(res.stdout)["total"]["events"] == 4 and peak < limit, res.stderr
    assert digests(data) == before


# ------------------------------------------------------------ stats


def test_a_ratio_that_rounds_to_zero_is_printed_not_shown_as_missing(small_log: Path, tmp_path: Path) -> None:
    # The table wrote `-` (no stored bytes to divide by) for a ratio of 0.0, which --json gives as
    # 0.0: a row whose stored body is thousands of times its raw size (edited, or a bomb).
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(small_log / "events.db", data / "events.db")
    edit = apsw.Connection(str(data / "events.db"))
    edit.execute("UPDATE events SET body = ?, raw_size = 1 WHERE seq = 1", (os.urandom(4096),))
    edit.close()
    res = lens("log", "stats", "--data", str(data), "--json")
    (created,) = [k for k in json.loads(res.stdout)["kinds"] if k["kind"] == "project.created"]
    assert (created["raw_bytes"], created["stored_bytes"], created["compression_ratio"]) == (1, 4096, 0.0)
    res = lens("log", "stats", "--data", str(data))
    (line,) = [line for line in res.stdout.splitlines() if line.startswith("project.created ")]
    assert line.split() == ["project.created", "1", "4096", "1", "0.000"], line


# ------------------------------------------------------------ an empty events.db beside a WAL


@pytest.mark.parametrize("command", [*COMMANDS, "serve"])
def test_an_empty_events_db_beside_a_wal_with_commits_keeps_the_wal(wal_of: Callable[[int], bytes], tmp_path: Path,
                                                                     command: str) -> None:
    # SQLite deletes the WAL of a database file of 0 bytes when it opens it, read-only or not:
    # every `lens log` command deleted the 30 commits beside an events.db cut to nothing (then
    # said STORE_FOREIGN, "tables found: none"), and `lens serve` started a new log in their
    # place. The file is damage to name, as a log cut short is (STORE_CORRUPT), with both files
    # left as they were.
    wal_of_30 = wal_of(30)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "events.db").touch(mode=0o600)
    (data / "events.db-wal").write_bytes(wal_of_30)
    os.chmod(data / "events.db-wal", 0o600)
    said = store_corrupt_said(command, data, tmp_path)
    assert f"{data / 'events.db'} is empty, but events.db-wal beside it holds {len(wal_of_30)} bytes" in said, said
    assert (data / "events.db-wal").read_bytes() == wal_of_30
    assert (data / "events.db").stat().st_size == 0


# ------------------------------------------------------------ another program's database as projections.db


def foreign_projections(data: Path, *, in_wal: bool = False) -> None:
    """``data/projections.db``: a SQLite database of another program (tables ``notes`` and
    ``tags``, a row in ``notes``); with ``in_wal``, a WAL database whose tables are still in its
    ``-wal`` only (copied while its writer had it open)."""
    made = data.parent / "other.db"
    conn = apsw.Connection(str(made))
    if in_wal:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.wal_autocheckpoint(0)
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT); CREATE TABLE tags(name TEXT);"
                 "INSERT INTO notes(text) VALUES ('keep me')")
    shutil.copyfile(made, data / "projections.db")
    if in_wal:
        shutil.copyfile(f"{made}-wal", data / "projections.db-wal")
    conn.close()


def projections_digests(data: Path) -> dict[str, str]:
    return {name: hashlib.sha256((data / name).read_bytes()).hexdigest()
            for name in ("projections.db", "projections.db-wal") if (data / name).exists()}


@pytest.mark.parametrize("command", ["stats", "rebuild", "serve"])
def test_another_programs_database_as_projections_db_is_refused_unchanged(small_log: Path, tmp_path: Path,
                                                                          command: str) -> None:
    # `stats`, `rebuild` and the daemon added their tables (positions, inputs, stats_kinds …) beside
    # another program's and switched its file to WAL: a foreign events.db is refused (STORE_FOREIGN),
    # a foreign projections.db was written into.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(small_log / "events.db", data / "events.db")
    foreign_projections(data)
    before = projections_digests(data)
    args = ["serve", "--data", str(data), "--port", "0"] if command == "serve" else ["log", command, "--data", str(data)]
    res = lens(*args, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, (res.returncode, res.stderr[-800:])
    assert (f"lens: PROJECTIONS_DAMAGED: {data / 'projections.db'} is not a projections file of Lens: it is a "
            f"SQLite database with 2 table(s) of another program (notes, tags) and no positions table") in res.stderr
    assert "it was left unchanged. Move it out of the data directory" in res.stderr
    assert "`lens log rebuild`, which makes a new one" in res.stderr and "delete it" not in res.stderr
    assert res.stdout == "" or command == "serve"
    assert projections_digests(data) == before
    assert not (data / "projections.db-wal").exists() and not (data / "projections.db-shm").exists()
    # Moved away as told, the command makes its own file, and the other program's is as it was.
    (data / "projections.db").rename(tmp_path / "moved.db")
    if command != "serve":
        res = lens("log", command, "--data", str(data))
        assert res.returncode == 0, res.stderr
        assert "positions" in {name for name, in apsw.Connection(str(data / "projections.db")).execute(
            "SELECT name FROM sqlite_schema")}
    assert list(apsw.Connection(str(tmp_path / "moved.db")).execute("SELECT text FROM notes")) == [("keep me",)]


def test_another_programs_database_with_its_tables_in_its_wal_is_refused_unchanged(small_log: Path,
                                                                                  tmp_path: Path) -> None:
    # The tables of a WAL database not yet checkpointed are in its -wal only: the main file alone
    # reads as an empty database, which would be taken as a new projections.db.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(small_log / "events.db", data / "events.db")
    foreign_projections(data, in_wal=True)
    before = projections_digests(data)
    assert set(before) == {"projections.db", "projections.db-wal"}
    for command in ("stats", "rebuild"):
        line = refused(lens("log", command, "--data", str(data)), "PROJECTIONS_DAMAGED")
        assert "SQLite database with 2 table(s) of another program (notes, tags)" in line, line
        assert projections_digests(data) == before


def test_an_empty_or_oldest_layout_projections_db_is_still_used(small_log: Path, tmp_path: Path) -> None:
    # An empty file (no tables) is a new projections.db; a file with only the positions table (as
    # the first Lens made it, before inputs and source) is Lens's, and its projections are built.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    shutil.copyfile(small_log / "events.db", data / "events.db")
    (data / "projections.db").touch(mode=0o600)
    res = lens("log", "stats", "--data", str(data), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["total"]["events"] == 4, res.stderr
    (data / "projections.db").unlink()
    (data / "projections.db-wal").unlink(missing_ok=True)
    (data / "projections.db-shm").unlink(missing_ok=True)
    old = apsw.Connection(str(data / "projections.db"))
    old.execute("CREATE TABLE positions(name TEXT PRIMARY KEY, version INTEGER NOT NULL, seq INTEGER NOT NULL) "
                "WITHOUT ROWID")
    old.close()
    res = lens("log", "rebuild", "--data", str(data), "--projection", "stats")
    assert (res.returncode, res.stdout) == (0, "rebuilt stats from 4 event(s)\n"), res.stderr
    res = lens("log", "stats", "--data", str(data), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["total"]["events"] == 4, res.stderr


# ------------------------------------------------------------ an empty item in a comma-separated list


@pytest.mark.parametrize(("args", "option", "shown"), [
    (("decode", "--kind", "input.submitted,,session.created"), "--kind", "'input.submitted,,session.created' has an "
     "empty item (item 2 of 3)"),
    (("decode", "--kind", "input.submitted,"), "--kind", "'input.submitted,' has an empty item (item 2 of 2)"),
    (("decode", "--kind", "session.created", "--kind", ", input.submitted, ,"), "--kind",
     "', input.submitted, ,' has an empty item (items 1, 3, 4 of 4)"),
    (("rebuild", "--projection", "stats,,history"), "--projection", "'stats,,history' has an empty item (item 2 of 3)"),
    (("rebuild", "--projection", ",stats"), "--projection", "',stats' has an empty item (item 1 of 2)"),
    # (a long value is echoed cut to 120 characters, as a long request path is)
    (("decode", "--kind", "k" * 300 + ",,x"), "--kind", "'" + "k" * 120 + "…' has an empty item (item 2 of 3)"),
])
def test_an_empty_item_in_a_list_is_a_usage_error(small_log: Path, tmp_path: Path, args: tuple[str, ...],
                                                   option: str, shown: str) -> None:
    # `--kind a,,b` and `--projection stats,,history` skipped the empty item silently (rebuild went on
    # to rebuild stats and history), while `,,` alone was a usage error.
    data = tmp_path / "data"
    shutil.copytree(small_log, data)
    before = sorted(p.name for p in data.iterdir())
    res = lens("log", *args, "--data", str(data))
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and f"usage: lens log {args[0]}" in res.stderr, res.stderr
    assert f"lens log {args[0]}: USAGE_ERROR: argument {option}: {shown}; each comma-separated " in res.stderr, res.stderr
    assert sorted(p.name for p in data.iterdir()) == before  # (rebuild made no projections.db)


# ------------------------------------------------------------ the stats table's ratio


def test_the_stats_table_shows_the_ratio_json_gives(small_log: Path, tmp_path: Path) -> None:
    # The table rounded the ratio to two places, --json (and the docs) to three.
    data = tmp_path / "data"
    shutil.copytree(small_log, data)
    figures = json.loads(lens("log", "stats", "--data", str(data), "--json").stdout)
    table = lens("log", "stats", "--data", str(data)).stdout.splitlines()[2:]
    expected = [[k["kind"], str(k["events"]), str(k["stored_bytes"]), str(k["raw_bytes"]),
                 f"{k['compression_ratio']:.3f}"] for k in [*figures["kinds"], dict(figures["total"], kind="TOTAL")]]
    assert [line.split() for line in table] == expected
    assert all(len(row[4].split(".")[1]) == 3 for row in expected)
