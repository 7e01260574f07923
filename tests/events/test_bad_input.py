"""Bad input never crashes, never hides, never changes data (F-LOG-5, F-LOG-6).

Each case checks: a typed error with its stable ``code``, a message naming the problem (and the
``seq`` for a row), no chained driver traceback, and the data left as it was. Damaged rows are
written straight into events.db with apsw, as a disk error or another program would leave them.
"""

from __future__ import annotations

import gc
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import tracemalloc
from pathlib import Path
from typing import Any, Iterator

import apsw
import msgspec
import pytest
import zstandard

from events.codec import DEFAULT_MAX_EVENT_BYTES, PAGE_DECOMPRESS_BUDGET, Codec, train_dictionary
from events.errors import (
    AppendRejected,
    CorruptEvent,
    DataDirMissing,
    DataDirNotWritable,
    EventTooLarge,
    ForeignStore,
    LogError,
    StoreOpenError,
    UnknownDictionary,
    UnsupportedFormat,
)
from events.reader import PIPELINE_MIN_ROWS, LogReader
from events.store import Draft, EventStore, StoreWriteFailed, open_store
from events.types import InstructionAppended, Opaque, SessionNamed, ToolFinished
from tests.rawlog import body_of_row, edit_log
from tests.unwritable import unwritable

MiB = 1024 * 1024


# ---------------------------------------------------------------------- helpers


def note(i: int) -> Draft:
    return Draft(InstructionAppended(text=f"event {i} " + "words " * 20), session_id="s1")


async def make_log(data_dir: Path, n: int = 5) -> None:
    async with open_store(data_dir) as s:
        await s.append(*[note(i) for i in range(1, n + 1)])


def snapshot(data_dir: Path) -> dict[str, Any]:
    """What must not change: the bytes of events.db, and which entries the directory holds
    (a read-only reader may leave SQLite's -wal/-shm side files behind)."""
    side = {"events.db-wal", "events.db-shm"}
    db = data_dir / "events.db"
    return {
        "entries": sorted(p.name for p in data_dir.iterdir() if p.name not in side),
        "events.db": hashlib.sha256(db.read_bytes()).hexdigest() if db.exists() else None,
    }


def set_row(data_dir: Path, seq: int, **columns: Any) -> None:
    sets = ", ".join(f"{k} = ?" for k in columns)
    edit_log(data_dir, f"UPDATE events SET {sets} WHERE seq = ?", (*columns.values(), seq))


def assert_clean(err: LogError, code: str, *words: str) -> None:
    assert err.code == code, (err.code, str(err))
    for word in words:
        assert word in str(err), (word, str(err))
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__


def read_fails_at(data_dir: Path, seq: int, error: type[CorruptEvent], code: str, *words: str,
                  **reader_options: Any) -> CorruptEvent:
    """Reading the whole log stops at ``seq`` with ``error``; other rows still read."""
    with LogReader(data_dir, **reader_options) as reader:
        rows = list(reader.rows())  # listing rows never decodes them
        seen = []
        with pytest.raises(error) as info:
            for event in reader.events():
                seen.append(event.seq)
        assert seen == list(range(1, seq))
        assert info.value.seq == seq
        assert_clean(info.value, code, f"seq {seq}:", *words)
        # every other row still decodes
        others = [reader.decode(r).seq for r in rows if r.seq != seq]
        assert others == [r.seq for r in rows if r.seq != seq]
        return info.value


def zeros_frame(size: int, *, content_size: bool) -> bytes:
    """A checksummed frame of ``size`` zero bytes, made without holding them all at once."""
    cobj = zstandard.ZstdCompressor(
        level=1, write_checksum=True, write_content_size=content_size
    ).compressobj(size=size if content_size else -1)
    chunk = bytes(MiB)
    parts = [cobj.compress(chunk) for _ in range(size // MiB)]
    return b"".join(parts) + cobj.flush()


# ---------------------------------------------------------------------- damaged rows


async def test_corrupted_body_is_reported_with_its_seq(data_dir: Path) -> None:
    await make_log(data_dir)
    body = bytearray(body_of_row(data_dir, 3))
    body[len(body) // 2] ^= 0xFF
    set_row(data_dir, 3, body=bytes(body))
    before = snapshot(data_dir)
    read_fails_at(data_dir, 3, CorruptEvent, "EVENT_CORRUPT", "decompress")
    assert snapshot(data_dir) == before
    # the live store reports it the same way and keeps appending
    async with open_store(data_dir) as s:
        with pytest.raises(CorruptEvent) as info:
            await s.read_events()
        assert info.value.seq == 3
        assert (await s.append(note(6))).seq == 6
        assert [e.seq for e in await s.read_events(after=3)] == [4, 5, 6]


async def test_truncated_body(data_dir: Path) -> None:
    await make_log(data_dir)
    set_row(data_dir, 2, body=body_of_row(data_dir, 2)[:-6])
    before = snapshot(data_dir)
    read_fails_at(data_dir, 2, CorruptEvent, "EVENT_CORRUPT", "does not decompress")
    set_row(data_dir, 2, body=body_of_row(data_dir, 2)[:4])
    read_fails_at(data_dir, 2, CorruptEvent, "EVENT_CORRUPT", "not a zstd frame")
    assert snapshot(data_dir)["entries"] == before["entries"]


async def test_zstd_bomb_declaring_hundreds_of_mib_is_refused_before_allocation(data_dir: Path) -> None:
    await make_log(data_dir)
    bomb = zeros_frame(300 * MiB, content_size=True)
    assert len(bomb) < 64 * 1024
    assert zstandard.get_frame_parameters(bomb).content_size == 300 * MiB
    set_row(data_dir, 4, body=bomb)
    before = snapshot(data_dir)
    tracemalloc.start()
    try:
        read_fails_at(data_dir, 4, EventTooLarge, "EVENT_TOO_LARGE", str(300 * MiB), str(32 * MiB))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MiB, peak  # nothing near 300 MiB (nor 32 MiB) was allocated
    assert snapshot(data_dir) == before


async def test_frame_of_unknown_size_stops_at_the_limit(data_dir: Path) -> None:
    await make_log(data_dir)
    bomb = zeros_frame(64 * MiB, content_size=False)
    assert zstandard.get_frame_parameters(bomb).content_size == zstandard.CONTENTSIZE_UNKNOWN
    set_row(data_dir, 2, body=bomb)

    def peak_while_reading(limit: int) -> int:
        tracemalloc.start()
        try:
            read_fails_at(data_dir, 2, EventTooLarge, "EVENT_TOO_LARGE", "unknown size", str(limit),
                          max_event_bytes=limit)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, larger = peak_while_reading(1 * MiB), peak_while_reading(8 * MiB)
    assert larger > 8 * MiB  # the measurement sees the decompressed bytes...
    assert small < 1 * MiB + 4 * MiB, small  # ...and they stay near the limit, not 64 MiB


async def test_second_frame_or_trailing_bytes(data_dir: Path) -> None:
    await make_log(data_dir)
    body = body_of_row(data_dir, 5)
    second = Codec().encode(SessionNamed(name="smuggled")).body
    for bad in (body + second, body + b"\x00\x01garbage"):
        set_row(data_dir, 5, body=bad)
        before = snapshot(data_dir)
        read_fails_at(data_dir, 5, CorruptEvent, "EVENT_CORRUPT", "trailing")
        assert snapshot(data_dir) == before


async def test_frame_needing_an_unknown_dictionary(data_dir: Path) -> None:
    await make_log(data_dir)
    samples = [Codec().pack(note(i).event) for i in range(100)]
    dict_id, data = train_dictionary(samples, size=2048)
    foreign = Codec(dictionaries={dict_id: data}, active_dict_id=dict_id).encode(note(99).event)
    set_row(data_dir, 3, body=foreign.body, dict_id=dict_id)
    before = snapshot(data_dir)
    read_fails_at(data_dir, 3, UnknownDictionary, "EVENT_UNKNOWN_DICTIONARY", str(dict_id))
    # a row claiming no dictionary for a frame that needs one is corrupt, and says which
    set_row(data_dir, 3, dict_id=0)
    read_fails_at(data_dir, 3, UnknownDictionary, "EVENT_UNKNOWN_DICTIONARY", str(dict_id))
    assert snapshot(data_dir)["entries"] == before["entries"]


async def test_row_kind_that_disagrees_with_its_body(data_dir: Path) -> None:
    await make_log(data_dir)
    set_row(data_dir, 1, kind="session.named")
    read_fails_at(data_dir, 1, CorruptEvent, "EVENT_CORRUPT", "session.named", "instruction.appended")


async def test_unknown_event_kind_decodes_as_opaque(data_dir: Path) -> None:
    await make_log(data_dir, 2)
    raw = msgspec.msgpack.encode({"kind": "robot.dreamed", "dream": "sheep", "count": 3})
    body = zstandard.ZstdCompressor(write_checksum=True).compress(raw)
    edit_log(
        data_dir,
        "INSERT INTO events(seq, ts, session_id, session_seq, kind, dict_id, raw_size, body) "
        "VALUES (3, 1, 's1', 3, 'robot.dreamed', 0, ?, ?)",
        (len(raw), body),
    )
    with LogReader(data_dir) as reader:
        events = list(reader.events())
    assert [e.seq for e in events] == [1, 2, 3]
    assert events[2].event == Opaque("robot.dreamed", {"kind": "robot.dreamed", "dream": "sheep", "count": 3})
    assert events[2].to_json()["kind"] == "robot.dreamed"
    assert events[2].to_json()["body"] == {"dream": "sheep", "count": 3}
    # the store keeps appending after a row it does not understand
    async with open_store(data_dir) as s:
        assert (await s.append(note(4))).session_seqs == (4,)


@pytest.mark.parametrize("body, words", [
    ({"kind": "instruction.appended", "text": "hi"}, ("robot.dreamed", "instruction.appended")),  # a known body
    ({"kind": 5, "dream": "sheep"}, ("robot.dreamed", "5")),
    ({"dream": "sheep"}, ("robot.dreamed", "no kind tag")),
    (42, ("robot.dreamed", "not a MessagePack map", "int")),
    (["kind", "robot.dreamed"], ("not a MessagePack map", "list")),
])
async def test_a_row_of_unknown_kind_must_hold_a_body_tagged_with_it(data_dir: Path, body: Any,
                                                                  words: tuple[str, ...]) -> None:
    """The tag check applied to known kinds only: an input.submitted row relabelled with a kind
    this build does not know decoded as an opaque event, and a body that is no map at all too."""
    await make_log(data_dir, 2)
    raw = msgspec.msgpack.encode(body)
    edit_log(
        data_dir,
        "INSERT INTO events(seq, ts, session_id, session_seq, kind, dict_id, raw_size, body) "
        "VALUES (3, 1, 's1', 3, 'robot.dreamed', 0, ?, ?)",
        (len(raw), zstandard.ZstdCompressor(write_checksum=True).compress(raw)),
    )
    read_fails_at(data_dir, 3, CorruptEvent, "EVENT_CORRUPT", *words)


@pytest.mark.parametrize("kind", ["robot.dreamed\nid: 9", "robot.dreamed\r", "robot dreamed", "", ".robot",
                                  "robot.dreamed\x00", "r" * 129])
async def test_a_row_of_unknown_kind_must_be_named_as_a_kind_is(data_dir: Path, kind: str) -> None:
    """A kind is written out as it is (the SSE ``event:`` line): one no Lens can write (a line
    break, a space, a control character, empty, too long) is damage, not an event of the future."""
    await make_log(data_dir, 2)
    raw = msgspec.msgpack.encode({"kind": kind, "dream": "sheep"})
    edit_log(
        data_dir,
        "INSERT INTO events(seq, ts, session_id, session_seq, kind, dict_id, raw_size, body) "
        "VALUES (3, 1, 's1', 3, ?, 0, ?, ?)",
        (kind, len(raw), zstandard.ZstdCompressor(write_checksum=True).compress(raw)),
    )
    read_fails_at(data_dir, 3, CorruptEvent, "EVENT_CORRUPT", "is no event kind")


async def test_the_longest_kind_name_of_the_future_still_decodes(data_dir: Path) -> None:
    await make_log(data_dir, 2)
    kind = "r" * 127 + "."
    raw = msgspec.msgpack.encode({"kind": kind, "dream": "sheep"})
    edit_log(
        data_dir,
        "INSERT INTO events(seq, ts, session_id, session_seq, kind, dict_id, raw_size, body) "
        "VALUES (3, 1, 's1', 3, ?, 0, ?, ?)",
        (kind, len(raw), zstandard.ZstdCompressor(write_checksum=True).compress(raw)),
    )
    with LogReader(data_dir) as reader:
        assert [e.event for e in reader.events()][2] == Opaque(kind, {"kind": kind, "dream": "sheep"})


# ---------------------------------------------------------------------- foreign or missing stores


def foreign_sqlite(path: Path) -> None:
    conn = apsw.Connection(str(path))
    with conn:
        conn.execute("CREATE TABLE recipes(name TEXT); INSERT INTO recipes VALUES ('soup')")
    conn.close()


def test_foreign_sqlite_file_as_events_db(data_dir: Path) -> None:
    data_dir.mkdir()
    foreign_sqlite(data_dir / "events.db")
    before = snapshot(data_dir)
    with pytest.raises(ForeignStore) as info:
        EventStore.open(data_dir)
    assert_clean(info.value, "STORE_FOREIGN", "recipes", "not a Lens event log", "--data")
    with pytest.raises(ForeignStore) as info:
        LogReader(data_dir)
    assert_clean(info.value, "STORE_FOREIGN", "recipes")
    after = snapshot(data_dir)
    assert after["events.db"] == before["events.db"]
    assert set(after["entries"]) - {"lock"} == set(before["entries"])


def test_non_sqlite_file_as_events_db(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "events.db").write_bytes(b"this is a text file, not a database\n" * 200)
    before = snapshot(data_dir)
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(ForeignStore) as info:
            open_(data_dir)
        # the writer's refusal says what was found and what to do, as the readers' does
        assert_clean(info.value, "STORE_FOREIGN", "not a SQLite database", "format found: unknown bytes",
                     "not a Lens event log", "--data NEW_DIR")
    assert snapshot(data_dir)["events.db"] == before["events.db"]


def test_older_layout_is_refused_and_nothing_is_created(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "sessions").mkdir()
    (data_dir / "sessions" / "abc.jsonl").write_text('{"role": "user"}\n')
    (data_dir / "config.json").write_text("{}")
    listing = sorted(p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*"))
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(ForeignStore) as info:
            open_(data_dir)
        assert_clean(info.value, "STORE_FOREIGN", "config.json", "sessions", "no events.db", "--data")
    assert sorted(p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*")) == listing


async def test_other_format_version_or_marker(data_dir: Path) -> None:
    await make_log(data_dir)
    edit_log(data_dir, "UPDATE meta SET value = '2' WHERE key = 'format_version'")
    before = snapshot(data_dir)
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(UnsupportedFormat) as info:
            open_(data_dir)
        assert_clean(info.value, "STORE_FORMAT_UNSUPPORTED", "version 2", "reads version 1")
    assert snapshot(data_dir) == before
    edit_log(data_dir, "UPDATE meta SET value = 'other-log' WHERE key = 'format'")
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(ForeignStore) as info:
            open_(data_dir)
        assert_clean(info.value, "STORE_FOREIGN", "'other-log'")
    # a marker row missing is named as missing (the messages said "format version None" and
    # "storage format None")
    edit_log(data_dir, "UPDATE meta SET value = 'lens-events' WHERE key = 'format'")
    edit_log(data_dir, "DELETE FROM meta WHERE key = 'format_version'")
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(UnsupportedFormat) as info:
            open_(data_dir)
        assert_clean(info.value, "STORE_FORMAT_UNSUPPORTED", "records no format version", "reads version 1")
        assert "None" not in str(info.value)
    edit_log(data_dir, "DELETE FROM meta WHERE key = 'format'")
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(ForeignStore) as info:
            open_(data_dir)
        assert_clean(info.value, "STORE_FOREIGN", "records no storage format", "not a Lens event log")
        assert "None" not in str(info.value)


FOREIGN_LOGS = {
    "another program's database": ("STORE_FOREIGN", lambda d: foreign_sqlite(d / "events.db")),
    "not a database": ("STORE_FOREIGN", lambda d: (d / "events.db").write_bytes(b"not a database\n" * 300)),
    "another format version": ("STORE_FORMAT_UNSUPPORTED",
                               lambda d: edit_log(d, "UPDATE meta SET value = '0' WHERE key = 'format_version'")),
    "another format marker": ("STORE_FOREIGN",
                              lambda d: edit_log(d, "UPDATE meta SET value = 'other-log' WHERE key = 'format'")),
}


@pytest.mark.parametrize("what", FOREIGN_LOGS)
async def test_the_writer_refusing_a_log_leaves_no_lock_file_beside_it(data_dir: Path, tmp_path: Path,
                                                                      what: str) -> None:
    """A directory holding only an events.db the writer refuses is left holding only it: the
    refusal came after the writer had made its ``lock`` file there (and, for a database in WAL
    mode, SQLite's ``-wal`` and ``-shm``), in a directory that may be another program's."""
    code, make = FOREIGN_LOGS[what]
    made = tmp_path / "made"
    await make_log(made, 2)
    data_dir.mkdir(mode=0o700)
    if "format" in what:
        shutil.copyfile(made / "events.db", data_dir / "events.db")  # (a Lens log, in WAL mode)
    make(data_dir)
    before = hashlib.sha256((data_dir / "events.db").read_bytes()).hexdigest()
    with pytest.raises(StoreOpenError) as info:
        EventStore.open(data_dir)
    assert info.value.code == code, str(info.value)
    assert sorted(p.name for p in data_dir.iterdir()) == ["events.db"]
    assert hashlib.sha256((data_dir / "events.db").read_bytes()).hexdigest() == before


async def test_a_read_only_events_db_in_a_writable_directory_is_refused_by_the_writer(data_dir: Path) -> None:
    """SQLite opens a file it may not write read-only, without a word: the writer opened such a
    log, and every append then failed (`lens serve` started, and answered each write 503)."""
    await make_log(data_dir, 2)
    (data_dir / "lock").unlink()
    before = snapshot(data_dir)
    with unwritable(data_dir / "events.db"):
        with pytest.raises(DataDirNotWritable) as info:
            EventStore.open(data_dir)
        assert_clean(info.value, "DATA_DIR_NOT_WRITABLE", str(data_dir / "events.db"), "not writable")
        assert snapshot(data_dir) == before  # (no lock file either)
        with LogReader(data_dir) as reader:  # readers still read it
            assert [r.seq for r in reader.rows()] == [1, 2]


async def test_a_data_dir_that_is_a_file(data_dir: Path, tmp_path: Path) -> None:
    """A file is no data directory; the log itself given as one (``--data .lens/events.db``, a
    slip) is answered with the directory to pass instead."""
    await make_log(data_dir)
    before = snapshot(data_dir)
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(StoreOpenError) as info:
            open_(data_dir / "events.db")
        assert_clean(info.value, "STORE_OPEN_FAILED", f"{data_dir / 'events.db'} is not a directory",
                     f"it is the event log itself: pass --data {data_dir}")
    assert snapshot(data_dir) == before
    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(StoreOpenError) as info:
        LogReader(other)
    assert_clean(info.value, "STORE_OPEN_FAILED", f"data directory {other} is not a directory")
    assert "event log itself" not in str(info.value)


def test_missing_data_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DataDirMissing) as info:
        LogReader(missing)
    assert_clean(info.value, "DATA_DIR_MISSING", str(missing), "does not exist")
    assert not missing.exists()
    missing.mkdir()
    with pytest.raises(DataDirMissing) as info:
        LogReader(missing)
    assert_clean(info.value, "DATA_DIR_MISSING", "no event log")
    assert list(missing.iterdir()) == []
    # the writer creates what is missing, parents included
    nested = tmp_path / "a" / "b" / "data"
    store = EventStore.open(nested)
    try:
        assert (nested / "events.db").exists() and store.last_seq == 0
    finally:
        store.close()
    with LogReader(nested) as reader:
        assert reader.event_count() == 0 and reader.meta()["format"] == "lens-events"


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    for open_ in (EventStore.open, LogReader):
        with pytest.raises(StoreOpenError) as info:
            open_(path)
        assert_clean(info.value, "STORE_OPEN_FAILED", "not a directory")
    assert path.read_text() == "x"


# ---------------------------------------------------------------------- other processes


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (tmp_path's parents are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="lens-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(path)


def run_child(body: str, *args: str, drop_root: bool = False) -> dict[str, Any]:
    """Run ``body`` in a fresh interpreter; it prints one JSON object as its last line.

    ``drop_root``: when running as root (permission bits do not stop root), the child becomes
    uid/gid 65534 after its imports. It cannot be done in preexec_fn: this interpreter may live
    where that user cannot read it.
    """
    drop = (
        "if os.geteuid() == 0:\n    os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        if drop_root
        else ""
    )
    script = (
        "import json, os, sys\n"
        "import trio\n"
        "from events.errors import LogError\n"
        "from events.reader import LogReader\n"
        "from events.store import EventStore\n" + drop + textwrap.dedent(body)
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


CHILD_READS_AND_TRIES_TO_WRITE = """
    out = {"uid": os.getuid()}
    with LogReader(sys.argv[1]) as r:
        out["bodies"] = [e.to_json()["body"]["text"] for e in r.events()]
    try:
        EventStore.open(sys.argv[1]).close()
        out["open"] = "opened"
    except LogError as e:
        out["open"] = {"code": e.code, "message": str(e)}
    print(json.dumps(out))
"""


KILLED_WRITER = """
    async def main():
        from events.store import Draft
        from events.types import InstructionAppended
        s = EventStore.open(sys.argv[1])
        async with trio.open_nursery() as n:
            await n.start(s.run)
            for i in range(int(sys.argv[2]), int(sys.argv[3])):
                await s.append(Draft(InstructionAppended(text=f"wal {i}"), session_id="s1"))
            print(json.dumps({}), flush=True)
            os._exit(0)  # no checkpoint, no cleanup
    trio.run(main)
"""


def make_read_only(data_dir: Path) -> None:
    for p in data_dir.iterdir():
        p.chmod(0o444)
    data_dir.chmod(0o555)


async def test_read_only_data_dir(shared_dir: Path) -> None:
    data_dir = shared_dir / "data"
    await make_log(data_dir, 3)
    make_read_only(data_dir)
    before = snapshot(data_dir)
    out = run_child(CHILD_READS_AND_TRIES_TO_WRITE, str(data_dir), drop_root=True)
    assert out["uid"] != 0
    assert out["bodies"] == [note(i).event.text for i in (1, 2, 3)]
    assert out["open"]["code"] == "DATA_DIR_NOT_WRITABLE"
    assert str(data_dir) in out["open"]["message"] and "not writable" in out["open"]["message"]
    assert snapshot(data_dir) == before


async def test_read_only_data_dir_left_by_a_killed_writer(shared_dir: Path) -> None:
    """Committed events still in the WAL (the writer died) are read from a read-only dir too."""
    data_dir = shared_dir / "data"
    run_child(KILLED_WRITER, str(data_dir), "0", "3")
    assert (data_dir / "events.db-wal").stat().st_size > 0
    make_read_only(data_dir)
    out = run_child(CHILD_READS_AND_TRIES_TO_WRITE, str(data_dir), drop_root=True)
    assert out["bodies"] == ["wal 0", "wal 1", "wal 2"]
    assert out["open"]["code"] == "DATA_DIR_NOT_WRITABLE"


async def test_read_only_data_dir_whose_wal_lost_its_shm(shared_dir: Path) -> None:
    """Committed events only in events.db-wal, no -shm (a copied data dir), read-only directory:
    the reader must show them all or refuse clearly, never silently show an older log."""
    data_dir = shared_dir / "data"
    await make_log(data_dir, 2)  # checkpointed into events.db on close
    run_child(KILLED_WRITER, str(data_dir), "2", "5")  # three more, only in the WAL
    (data_dir / "events.db-shm").unlink()
    make_read_only(data_dir)
    out = run_child(
        """
        try:
            with LogReader(sys.argv[1]) as r:
                print(json.dumps({"count": r.event_count()}))
        except LogError as e:
            print(json.dumps({"code": e.code, "message": str(e)}))
        """,
        str(data_dir),
        drop_root=True,
    )
    assert out == {"count": 5} or (out.get("code") not in (None, "STORE_FOREIGN")), out


async def test_second_writer_process_is_refused(data_dir: Path) -> None:
    await make_log(data_dir, 2)
    try_open = """
        try:
            s = EventStore.open(sys.argv[1])
            s.close()
            print(json.dumps({"open": "opened"}))
        except LogError as e:
            print(json.dumps({"code": e.code, "message": str(e)}))
    """
    async with open_store(data_dir) as s:
        out = run_child(try_open, str(data_dir))
        assert out["code"] == "STORE_LOCKED"
        assert "in use by another Lens process" in out["message"] and str(data_dir) in out["message"]
        # in this process too, a second writer is refused, and the first keeps working
        with pytest.raises(StoreOpenError) as info:
            EventStore.open(data_dir)
        assert_clean(info.value, "STORE_LOCKED", "in use")
        assert (await s.append(note(3))).seq == 3
    # the lock is released with the store
    assert run_child(try_open, str(data_dir)) == {"open": "opened"}
    with LogReader(data_dir) as reader:
        assert reader.event_count() == 3


async def test_a_second_writer_through_a_symlinked_log_is_refused(data_dir: Path, tmp_path: Path) -> None:
    # The lock file guards its directory only: a data directory whose events.db is a link to a
    # log another daemon writes opened, and both wrote it (seqs planned from two caches).
    await make_log(data_dir, 2)
    other = tmp_path / "other"
    other.mkdir()
    (other / "events.db").symlink_to(data_dir / "events.db")
    async with open_store(data_dir) as s:
        with pytest.raises(StoreOpenError) as info:
            EventStore.open(other)
        assert_clean(info.value, "STORE_LOCKED", "in use by another Lens process")
        assert f"a link to {data_dir / 'events.db'}" in str(info.value)
        assert (await s.append(note(3))).seq == 3
    s2 = EventStore.open(other)  # once the first lets go, the link may be written through
    s2.close()
    with LogReader(data_dir) as reader:
        assert reader.event_count() == 3


# ---------------------------------------------------------------------- size limit on append


def sized(n: int) -> InstructionAppended:
    short = 300 if n <= 65_000 else 70_000  # (MessagePack's string header grows past 65,535 bytes)
    overhead = len(Codec().pack(InstructionAppended(text="x" * short))) - short
    event = InstructionAppended(text="x" * (n - overhead))
    assert len(Codec().pack(event)) == n
    return event


async def test_event_of_exactly_max_event_bytes_is_stored_one_more_byte_is_rejected(data_dir: Path) -> None:
    async with open_store(data_dir, max_event_bytes=2048) as s:
        ok = await s.append(Draft(sized(2048), session_id="s1"))
        with pytest.raises(AppendRejected) as info:
            await s.append(Draft(sized(2049), session_id="s1"))
        assert_clean(info.value, "APPEND_REJECTED", "2049", "2048", "maximum event size")
        with pytest.raises(AppendRejected):  # atomic: the valid event in the same append is not written
            await s.append(Draft(sized(400), session_id="s1"), Draft(sized(4000), session_id="s1"))
        assert s.last_seq == ok.seq == 1
        (stored,) = await s.read_events()
        assert stored.event == sized(2048)
        assert (await s.append(Draft(sized(400), session_id="s1"))).session_seqs == (2,)
    with LogReader(data_dir, max_event_bytes=2048) as reader:
        assert [r.raw_size for r in reader.rows()] == [2048, 400]
    # a reader with a smaller limit refuses the row instead of decoding it
    read_fails_at(data_dir, 1, EventTooLarge, "EVENT_TOO_LARGE", "2048", max_event_bytes=2047)


def meta_of(data_dir: Path) -> dict[str, Any]:
    conn = apsw.Connection(str(data_dir / "events.db"))
    try:
        return dict(conn.execute("SELECT key, value FROM meta"))
    finally:
        conn.close()


async def test_a_lowered_maximum_still_reads_what_the_log_holds(data_dir: Path) -> None:
    # log.maxEventBytes lowered after events larger than the new value were stored: they are the
    # log's content and must stay readable (replay, projections); only new events are held to it.
    async with open_store(data_dir) as s:
        await s.append(Draft(sized(200_000), session_id="s1"))
    async with open_store(data_dir, max_event_bytes=64 * 1024) as s:
        (stored,) = await s.read_events()
        assert stored.event == sized(200_000)
        with pytest.raises(AppendRejected) as info:
            await s.append(Draft(sized(70_000), session_id="s1"))
        assert_clean(info.value, "APPEND_REJECTED", "70000", "65536", "maximum event size")
        assert (await s.append(Draft(sized(60_000), session_id="s1"))).seq == 2
    assert "max_event_bytes" not in meta_of(data_dir)  # never above the default: nothing recorded
    with LogReader(data_dir) as reader:
        assert [e.seq for e in reader.events()] == [1, 2]


async def test_a_repeat_of_a_request_id_is_a_duplicate_though_its_event_is_past_a_lowered_maximum(
        data_dir: Path) -> None:
    # F-LOG-4 before the size: the repeat was refused (APPEND_REJECTED) because the maximum had
    # been lowered since its first append; the client took an event the log holds for refused.
    async with open_store(data_dir) as s:
        first = await s.append(Draft(sized(200_000), session_id="s1", request_id="r1"))
    async with open_store(data_dir, max_event_bytes=64 * 1024) as s:
        again = await s.append(Draft(sized(200_000), session_id="s1", request_id="r1"))
        assert again == msgspec.structs.replace(first, duplicate=True)
        for draft in [Draft(sized(70_000), session_id="s2", request_id="r1"),  # (another session's id)
                      Draft(sized(70_000), session_id="s1", request_id="r2"),
                      Draft(sized(70_000), session_id="s1")]:
            with pytest.raises(AppendRejected):
                await s.append(draft)
        with pytest.raises(AppendRejected):  # an append that breaks the envelope rules is refused as before
            await s.append(Draft(sized(1000), session_id="s1", request_id="r1"),
                           Draft(sized(1000), session_id="s1", request_id="r3"))
        assert s.last_seq == 1


async def test_a_raised_maximum_is_recorded_so_every_reader_reads_those_events(data_dir: Path) -> None:
    # An event past the default 32 MiB, stored under a raised log.maxEventBytes, is read by a
    # reader that has no config (`lens log`, the projections) and by a store with the default.
    big = sized(DEFAULT_MAX_EVENT_BYTES + 1024)
    async with open_store(data_dir, max_event_bytes=DEFAULT_MAX_EVENT_BYTES + MiB) as s:
        assert (await s.append(Draft(big, session_id="s1"))).seq == 1
    assert meta_of(data_dir)["max_event_bytes"] == str(DEFAULT_MAX_EVENT_BYTES + MiB)
    with LogReader(data_dir) as reader:
        (event,) = reader.events()
        assert event.event == big
    async with open_store(data_dir) as s:  # lowered back to the default: the record stays
        (stored,) = await s.read_events()
        assert stored.event == big
        with pytest.raises(AppendRejected):
            await s.append(Draft(big, session_id="s1"))
    assert meta_of(data_dir)["max_event_bytes"] == str(DEFAULT_MAX_EVENT_BYTES + MiB)
    # a reader given its own limit keeps it (what a zstd bomb may make it allocate)
    read_fails_at(data_dir, 1, EventTooLarge, "EVENT_TOO_LARGE", max_event_bytes=DEFAULT_MAX_EVENT_BYTES)


@pytest.mark.parametrize(("stored", "limit"), [
    ("not a number", DEFAULT_MAX_EVENT_BYTES),
    ("-5", DEFAULT_MAX_EVENT_BYTES),
    ("0", DEFAULT_MAX_EVENT_BYTES),  # writers record only maximums above the default
    ("9" * 5000, 1024**3),  # an edited record cannot make a read allocate past the config's highest
    (str(1024**3 + 1), 1024**3),
    (str(48 * MiB), 48 * MiB),
])
async def test_an_edited_maximum_record_is_held_to_what_the_config_allows(
    data_dir: Path, stored: str, limit: int
) -> None:
    await make_log(data_dir)
    edit_log(data_dir, "INSERT INTO meta(key, value) VALUES ('max_event_bytes', ?)", (stored,))
    with LogReader(data_dir) as reader:
        assert reader.codec.max_event_bytes == limit
        assert len(list(reader.events())) == 5



# ---------------------------------------------------------------------- bad drafts


async def test_expected_session_seq_without_a_session_is_rejected(data_dir: Path) -> None:
    """It used to trip an assert in the writer thread, which killed the store and its nursery."""
    async with open_store(data_dir) as s:
        with pytest.raises(AppendRejected) as info:
            await s.append(Draft(SessionNamed(name="a")), expected_session_seq=0)
        assert_clean(info.value, "APPEND_REJECTED", "expected_session_seq", "session")
        with pytest.raises(AppendRejected):  # one draft in a session, one in none
            await s.append(note(1), Draft(SessionNamed(name="b")), expected_session_seq=0)
        assert (await s.append(note(1))).seq == 1  # the writer is still alive
    with LogReader(data_dir) as reader:
        assert reader.event_count() == 1


@pytest.mark.parametrize("field", ["project_id", "session_id", "agent_id", "task_id", "request_id"])
@pytest.mark.parametrize("value", ["sur\udcff", 7, b"bytes"])
async def test_an_envelope_id_sqlite_cannot_store_as_text_is_rejected(data_dir: Path, field: str, value: Any) -> None:
    """A lone surrogate in a session id used to fail the writer thread for good (STORE_CLOSED after)."""
    async with open_store(data_dir) as s:
        envelope = {"session_id": "s1", field: value}
        for drafts in [(Draft(SessionNamed(name="a"), **envelope),),
                       (note(1), Draft(SessionNamed(name="a"), **envelope))]:  # alone, and with a valid one
            with pytest.raises(AppendRejected) as info:
                await s.append(*drafts)
            assert_clean(info.value, "APPEND_REJECTED", field)
        assert (await s.append(note(1))).seq == 1  # the writer is still alive
    with LogReader(data_dir) as reader:
        assert reader.event_count() == 1


UNENCODABLE = [
    pytest.param({"n": 2**70}, id="int-over-64-bits"),
    pytest.param({"x": object()}, id="unsupported-type"),
]


@pytest.mark.parametrize("value", UNENCODABLE)
async def test_unencodable_value_is_append_rejected(data_dir: Path, value: Any) -> None:
    event = ToolFinished(call_id="c", name="n", structured_content=value)
    async with open_store(data_dir) as s:
        with pytest.raises(AppendRejected) as info:
            await s.append(Draft(event, session_id="s1"))
        assert_clean(info.value, "APPEND_REJECTED", "tool.finished", "cannot be encoded")
        assert s.last_seq == 0
        assert (await s.append(note(1))).seq == 1


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(SessionNamed(name=123), id="int-for-str"),  # type: ignore[arg-type]
        pytest.param(InstructionAppended(text=None), id="none-for-str"),  # type: ignore[arg-type]
    ],
)
async def test_event_that_does_not_match_its_schema_is_not_stored(data_dir: Path, event: Any) -> None:
    """msgspec does not type-check at construction: a mistyped body stored now could never be
    decoded again, so the append is refused instead."""
    async with open_store(data_dir) as s:
        with pytest.raises(AppendRejected) as info:
            await s.append(Draft(event, session_id="s1"))
        assert_clean(info.value, "APPEND_REJECTED", "schema")
        assert await s.read_events() == []
        assert (await s.append(note(1))).seq == 1


# A log long enough that LogReader.events() decompresses pages on its helper thread.
PIPELINED = 2 * PIPELINE_MIN_ROWS + 500


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda body: body + b"\x00\x01garbage", id="trailing bytes"),
        pytest.param(lambda body: body + body, id="second frame"),
        pytest.param(lambda body: body[:-3], id="truncated"),
        pytest.param(lambda body: body[:-4] + bytes(4), id="bad checksum"),
    ],
)
async def test_damaged_row_in_a_later_page_of_a_long_read(data_dir: Path, damage: Any) -> None:
    await make_log(data_dir, PIPELINED)
    bad = PIPELINE_MIN_ROWS + 700  # in the second page, decompressed ahead on the helper
    set_row(data_dir, bad, body=damage(body_of_row(data_dir, bad)))
    before = snapshot(data_dir)
    err = read_fails_at(data_dir, bad, CorruptEvent, "EVENT_CORRUPT")
    assert snapshot(data_dir) == before
    assert err.seq == bad


async def test_long_read_matches_row_by_row_decoding_and_can_stop_early(data_dir: Path) -> None:
    await make_log(data_dir, PIPELINED)
    with LogReader(data_dir) as reader:
        paged = list(reader.events())
        one_by_one = [reader.decode(row) for row in reader.rows()]
        assert paged == one_by_one and len(paged) == PIPELINED
        def helpers() -> list[threading.Thread]:
            return [t for t in threading.enumerate() if t.name.startswith("lens-log-reader")]

        assert helpers() == []
        for i, _event in enumerate(reader.events()):
            if i == 10:
                assert helpers()  # a long read decompresses ahead on its helper thread
                break  # the generator is closed here: its helper thread must end with it
        gc.collect()
        assert helpers() == []


async def test_forged_raw_sizes_do_not_change_a_long_read(data_dir: Path) -> None:
    # Every row claims the maximum event size. The page plan sizes zstd's buffers from raw_size
    # (capped per page by PAGE_DECOMPRESS_BUDGET); the frames then fail that size and every row
    # takes the checked path, which trusts only the frame: same events, bounded traced memory.
    await make_log(data_dir, PIPELINED)
    edit_log(data_dir, "UPDATE events SET raw_size = ?", (DEFAULT_MAX_EVENT_BYTES,))
    with LogReader(data_dir) as reader:
        expected = [reader.decode(row) for row in reader.rows()]  # raw_size is never trusted
        tracemalloc.start()
        try:
            events = list(reader.events())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert events == expected
    # Two pages in flight (the helper reads ahead), each within its budget.
    assert peak < 2 * PAGE_DECOMPRESS_BUDGET + 32 * MiB, peak


@pytest.mark.parametrize("trailing_first", [True, False], ids=["trailing bytes first", "cut frame first"])
async def test_damage_that_keeps_the_page_byte_count_is_still_found(data_dir: Path, trailing_first: bool) -> None:
    # A page's frames are checked for "exactly one frame" by comparing the sum of the frames'
    # lengths with the sum of the bodies' lengths. Here two rows of one page are damaged so that
    # the bodies' total stays the same: two bytes after one frame, two bytes cut off another.
    await make_log(data_dir, PIPELINED)
    first, second = PIPELINE_MIN_ROWS + 100, PIPELINE_MIN_ROWS + 300
    longer, shorter = (first, second) if trailing_first else (second, first)
    set_row(data_dir, longer, body=body_of_row(data_dir, longer) + b"\x00\x00")
    set_row(data_dir, shorter, body=body_of_row(data_dir, shorter)[:-2])
    with LogReader(data_dir) as reader:
        with pytest.raises(CorruptEvent) as paged:
            list(reader.events())
        rows = {row.seq: row for row in reader.rows(after=first - 1, to=first)}
        with pytest.raises(CorruptEvent) as alone:
            reader.decode(rows[first])
    assert paged.value.seq == first
    assert str(paged.value) == str(alone.value)  # the same error as decoding that row by itself


# The events table is not STRICT: a hand-edited row can hold text where a blob or an integer
# belongs. Such a row is a corrupt row like any other: named, with its seq, never a traceback.
MISTYPED = [
    pytest.param("body", "garbage written as text", "the body is stored as text", id="text body"),
    pytest.param("body", 12345, "the body is stored as an integer", id="integer body"),
    pytest.param("dict_id", "x", "column dict_id holds 'x', which is not an integer", id="text dict_id"),
    pytest.param("raw_size", "abc", "column raw_size holds 'abc'", id="text raw_size"),
    pytest.param("raw_size", 1.5, "column raw_size holds 1.5", id="real raw_size"),
    pytest.param("kind", b"A", "column kind holds b'A', which is not text", id="blob kind"),
]


@pytest.mark.parametrize("column, value, words", MISTYPED)
async def test_mistyped_column_is_a_corrupt_row(data_dir: Path, column: str, value: Any, words: str) -> None:
    await make_log(data_dir, PIPELINED)
    bad = PIPELINE_MIN_ROWS + 5  # in a page decoded ahead on the helper thread
    set_row(data_dir, bad, **{column: value})
    before = snapshot(data_dir)
    err = read_fails_at(data_dir, bad, CorruptEvent, "EVENT_CORRUPT", words)
    with LogReader(data_dir) as reader:
        (row,) = reader.rows(after=bad - 1, to=bad)
        with pytest.raises(CorruptEvent) as alone:
            reader.decode(row)
    assert str(alone.value) == str(err)  # the row alone fails the same way as in a long read
    assert snapshot(data_dir) == before


async def test_a_byte_bounded_read_never_fetches_the_rows_past_its_budget(data_dir: Path) -> None:
    # Forty events of 1 MiB of text that barely compresses (as a session of big random command
    # outputs would hold): a read bounded to 2 MiB holds two events, and the rows past the
    # budget are not fetched at all (before, a page of 2,000 rows was fetched, then cut).
    import base64
    import os

    async with open_store(data_dir, synchronous="OFF") as store:
        for _ in range(40):
            text = base64.b64encode(os.urandom(786_432)).decode()  # 1 MiB of text
            await store.append(Draft(InstructionAppended(text=text), session_id="s1"))
    with LogReader(data_dir) as reader:
        sizes = [row.raw_size for row in reader.rows(limit=2)]
        assert all(MiB < size < MiB + 64 for size in sizes)
        tracemalloc.start()
        try:
            events = list(reader.events(session_id="s1", max_bytes=sum(sizes)))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert [e.seq for e in events] == [1, 2]
    # two compressed rows (~0.8 MiB each) and two decoded texts (1 MiB each), not forty rows
    assert peak < 8 * MiB, peak


async def test_long_reads_of_large_events_hold_a_page_at_a_time(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What `lens log verify/decode/stats/rebuild` read: every row, page after page. Pages were
    # 2,000 rows whatever their size (a log of 31 MiB events took gigabytes); now a page ends at
    # `page_bytes`, and the projector takes at most BATCH_BYTES of rows at a time.
    import base64
    import os

    import projections.projector as projector_mod
    from projections.projector import Projector, open_projections_db
    from projections.stats import KindStats

    async with open_store(data_dir, synchronous="OFF") as store:
        for _ in range(40):
            text = base64.b64encode(os.urandom(786_432)).decode()  # 1 MiB of text
            await store.append(Draft(InstructionAppended(text=text), session_id="s1"))
    monkeypatch.setattr(projector_mod, "BATCH_BYTES", 2 * MiB)
    with LogReader(data_dir) as reader:
        tracemalloc.start()
        try:
            seqs = [row.seq for row in reader.rows(page_bytes=2 * MiB)]
            rows_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            projector = Projector(reader, open_projections_db(data_dir), [KindStats()])
            try:
                assert projector.catch_up() == 40
                (kind, n, _stored, raw) = KindStats.read(projector.conn)[0]
            finally:
                projector.close()
            projector_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert seqs == list(range(1, 41)) and (kind, n) == ("instruction.appended", 40) and raw > 40 * MiB
    assert rows_peak < 8 * MiB, rows_peak  # a page or two of ~0.8 MiB rows, not forty
    assert projector_peak < 8 * MiB, projector_peak


# ---------------------------------------------------------------------- numbers an edited log ends at


BIGGEST = 2**63 - 1


@pytest.mark.parametrize("edit", ["seq", "session_seq", "text session_seq", "text ts"])
async def test_an_edited_log_at_the_end_of_its_numbers_refuses_appends_and_the_writer_lives(
    data_dir: Path, edit: str
) -> None:
    """A last seq or session_seq of 2^63-1 (or a text value) in an edited log: the writer thread
    died on it (OverflowError binding the next number), and with it the daemon."""
    async with open_store(data_dir) as s:
        await s.append(Draft(InstructionAppended(text="a"), session_id="s1"))
        await s.append(Draft(InstructionAppended(text="b"), session_id="s2"))
    if edit == "seq":
        edit_log(data_dir, "UPDATE events SET seq = ? WHERE seq = 2", (BIGGEST,))
    elif edit == "session_seq":
        edit_log(data_dir, "UPDATE events SET session_seq = ? WHERE seq = 1", (BIGGEST,))
    elif edit == "text session_seq":
        edit_log(data_dir, "UPDATE events SET session_seq = 'x' WHERE seq = 1")
    else:
        edit_log(data_dir, "UPDATE events SET ts = 'late' WHERE seq = 2")
    async with open_store(data_dir) as s:
        for attempt in range(2):  # the same answer every time: the writer is still there
            if edit == "text ts":  # (a ts is never the end of anything: appends go on)
                result = await s.append(Draft(InstructionAppended(text="c"), session_id="s1"))
                assert result.seq == 3 + attempt
                continue
            with pytest.raises(StoreWriteFailed) as info:
                await s.append(Draft(InstructionAppended(text="c"), session_id="s1"))
            assert info.value.code == "STORE_WRITE_FAILED" and not info.value.storage
            message = str(info.value)
            assert "the log was edited" in message
            assert (str(BIGGEST) in message) if edit != "text session_seq" else "'x'" in message
        if edit != "seq":  # another session is not touched
            result = await s.append(Draft(InstructionAppended(text="d"), session_id="s2"))
            assert result.session_seqs == (2,)
