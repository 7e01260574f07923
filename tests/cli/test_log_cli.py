"""`lens log decode | verify | rebuild | stats` run as real subprocesses against real logs.

A log is written once per module with the real store (under trio); each test that changes
anything works on its own copy. Rows are damaged directly with apsw, the way a bad disk or a
stray tool would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import apsw
import msgspec
import pytest
import trio
import zstandard

from events.errors import CorruptEvent, StoreOpenError
from events.reader import LogReader
from events.store import Draft, EventStore, open_store
from events.types import (
    InputSubmitted,
    ModelRequested,
    ModelResponded,
    ProjectCreated,
    SessionCreated,
    TextPart,
    TodoItem,
    TodoUpdated,
    ToolFinished,
    ToolStarted,
)
from projections.projector import Projector, open_projections_db
from projections.registry import all_projections

from tests.cli.ctrl_c import DROPPED_ONCE, INTERRUPTED, ctrl_c_sweep, handlers_after_main, interrupted_where
from tests.cli.lens_script import lens_script
from tests.rawlog import body_of_row, edit_log, log_rows, log_with_its_wal
from tests.unwritable import unwritable

DECODE_KEYS = {
    "seq", "ts", "project_id", "session_id", "session_seq", "agent_id", "task_id", "kind",
    "request_id", "body",
}
SESSIONS = ("s1", "s2", "s3")
TURNS = 16  # per session: enough output (> 150 KB of JSON) to overflow a pipe buffer


# ---------------------------------------------------------------------------- helpers


def lens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a real process (``python -m runtime.cli``)."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def build_drafts() -> list[list[Draft]]:
    """Appends (each a list of drafts) for a small but varied project."""
    appends: list[list[Draft]] = [[Draft(ProjectCreated(name="demo", workspace="/ws"), project_id="p1")]]
    for s in SESSIONS:
        appends.append([Draft(SessionCreated(model="local/qwen3"), project_id="p1", session_id=s)])
    for turn in range(TURNS):
        for s in SESSIONS:
            env = dict(project_id="p1", session_id=s, agent_id=f"{s}-main", task_id=f"{s}-t{turn}")
            appends.append(
                [Draft(InputSubmitted(content=[TextPart(f"question {turn} for {s} " * 20)]),
                       request_id=f"{s}-req-{turn}", **env)]
            )
            appends.append(
                [
                    Draft(ModelRequested(provider="local", model="qwen3", context_item_ids=[f"i{turn}"]), **env),
                    Draft(ModelResponded(text=f"answer {turn} " * 40, stop_reason="tool_use"), **env),
                    Draft(ToolStarted(call_id=f"c{turn}", name="read_file", arguments='{"path": "a.py"}'), **env),
                    Draft(ToolFinished(call_id=f"c{turn}", name="read_file",
                                       content=[TextPart("print('hi')\n" * 80)]), **env),
                ]
            )
        if turn % 4 == 0:
            appends.append(
                [Draft(TodoUpdated(items=[TodoItem(id="1", text="write tests")]), project_id="p1",
                       session_id="s1", agent_id="s1-main")]
            )
    return appends


def write_log(data_dir: Path, appends: list[list[Draft]]) -> None:
    async def main() -> None:
        async with open_store(data_dir, synchronous="OFF") as store:
            for drafts in appends:
                await store.append(*drafts)

    trio.run(main)


def decoded(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def zstd_msgpack(obj: object) -> tuple[bytes, int]:
    raw = msgspec.msgpack.encode(obj)
    body = zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(raw)
    return body, len(raw)


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("pristine") / "data"
    write_log(data, build_drafts())
    return data


@pytest.fixture
def log_dir(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the module's log."""
    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    return data


@pytest.fixture(scope="module")
def expected(pristine: Path) -> list[tuple]:
    """(seq, ts, project_id, session_id, session_seq, agent_id, task_id, kind, request_id) per row."""
    return log_rows(
        pristine,
        "SELECT seq, ts, project_id, session_id, session_seq, agent_id, task_id, kind, request_id "
        "FROM events ORDER BY seq",
    )


# ---------------------------------------------------------------------------- decode


def test_decode_prints_every_event_with_the_contract_keys(log_dir: Path, expected: list[tuple]) -> None:
    res = lens("log", "decode", "--data", str(log_dir))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    events = decoded(res.stdout)
    assert len(events) == len(expected) > 100
    for ev, row in zip(events, expected):
        assert set(ev) == DECODE_KEYS
        envelope = (ev["seq"], ev["ts"], ev["project_id"], ev["session_id"], ev["session_seq"],
                    ev["agent_id"], ev["task_id"], ev["kind"], ev["request_id"])
        assert envelope == row
        assert isinstance(ev["body"], dict) and "kind" not in ev["body"]
    # Bodies carry every field, defaults included; project-level events have no session.
    first = events[0]
    assert first["kind"] == "project.created" and first["session_id"] is None
    assert first["body"] == {"name": "demo", "workspace": "/ws", "executor": {}}
    submitted = next(e for e in events if e["kind"] == "input.submitted")
    assert submitted["request_id"] == "s1-req-0"
    assert submitted["body"] == {
        "content": [{"type": "text", "text": "question 0 for s1 " * 20}],
        "when_busy": "followUp",
    }
    assert [e["seq"] for e in events] == list(range(1, len(expected) + 1))


def test_decode_filters_by_session(log_dir: Path, expected: list[tuple]) -> None:
    res = lens("log", "decode", "--data", str(log_dir), "--session", "s2")
    assert res.returncode == 0, res.stderr
    events = decoded(res.stdout)
    assert [e["seq"] for e in events] == [r[0] for r in expected if r[3] == "s2"]
    assert [e["session_seq"] for e in events] == list(range(1, len(events) + 1))


def test_decode_filters_by_kind_repeatable_and_comma_separated(log_dir: Path, expected: list[tuple]) -> None:
    want = [r[0] for r in expected if r[7] in ("tool.started", "todo.updated", "project.created")]
    for args in (
        ["--kind", "tool.started", "--kind", "todo.updated", "--kind", "project.created"],
        ["--kind", "tool.started,todo.updated,project.created"],
        ["--kind", "tool.started, todo.updated", "--kind", "project.created"],
    ):
        res = lens("log", "decode", "--data", str(log_dir), *args)
        assert res.returncode == 0, res.stderr
        assert [e["seq"] for e in decoded(res.stdout)] == want, args


def test_decode_seq_range_is_inclusive(log_dir: Path, expected: list[tuple]) -> None:
    last = expected[-1][0]
    cases = {
        ("--from", "5", "--to", "9"): [5, 6, 7, 8, 9],
        ("--from", "7", "--to", "7"): [7],
        ("--from", str(last - 2)): [last - 2, last - 1, last],
        ("--to", "3"): [1, 2, 3],
        ("--from", "9", "--to", "5"): [],
        ("--from", str(last + 1)): [],
    }
    for args, want in cases.items():
        res = lens("log", "decode", "--data", str(log_dir), *args)
        assert res.returncode == 0, res.stderr
        assert [e["seq"] for e in decoded(res.stdout)] == want, args


def test_decode_combined_filters(log_dir: Path, expected: list[tuple]) -> None:
    lo, hi = 20, 90
    res = lens(
        "log", "decode", "--data", str(log_dir), "--session", "s3",
        "--kind", "model.responded,input.submitted", "--from", str(lo), "--to", str(hi),
    )
    assert res.returncode == 0, res.stderr
    want = [
        r[0] for r in expected
        if r[3] == "s3" and r[7] in ("model.responded", "input.submitted") and lo <= r[0] <= hi
    ]
    assert len(want) >= 4
    events = decoded(res.stdout)
    assert [e["seq"] for e in events] == want
    assert {e["session_id"] for e in events} == {"s3"}


def test_decode_raw_prints_the_stored_bytes(log_dir: Path, expected: list[tuple]) -> None:
    res = lens("log", "decode", "--data", str(log_dir), "--raw", "--from", "1", "--to", "12")
    assert res.returncode == 0, res.stderr
    lines = decoded(res.stdout)
    assert [ev["seq"] for ev in lines] == list(range(1, 13))
    stored = {
        seq: (dict_id, raw_size, body)
        for seq, dict_id, raw_size, body in log_rows(
            log_dir, "SELECT seq, dict_id, raw_size, body FROM events WHERE seq <= 12"
        )
    }
    for ev in lines:
        assert set(ev) == DECODE_KEYS | {"dict_id", "raw_size", "body_encoding"}
        assert ev["body_encoding"] == "zstd+msgpack;base64"
        dict_id, raw_size, body = stored[ev["seq"]]
        assert base64.b64decode(ev["body"], validate=True) == body
        assert (ev["dict_id"], ev["raw_size"]) == (dict_id, raw_size)
        assert ev["kind"] == expected[ev["seq"] - 1][7]


def test_decode_raw_prints_corrupt_rows_as_stored(log_dir: Path) -> None:
    edit_log(log_dir, "UPDATE events SET body = ? WHERE seq = 4", (b"\x00not zstd",))
    res = lens("log", "decode", "--data", str(log_dir), "--raw", "--from", "4", "--to", "4")
    assert res.returncode == 0, res.stderr
    assert base64.b64decode(decoded(res.stdout)[0]["body"]) == b"\x00not zstd"


def test_decode_reports_a_corrupt_row_and_prints_the_others(log_dir: Path, expected: list[tuple]) -> None:
    edit_log(log_dir, "UPDATE events SET body = ? WHERE seq = 7", (b"garbage, not a zstd frame",))
    res = lens("log", "decode", "--data", str(log_dir))
    assert res.returncode == 1
    seqs = [e["seq"] for e in decoded(res.stdout)]
    assert seqs == [r[0] for r in expected if r[0] != 7]
    assert res.stderr.startswith("lens: EVENT_CORRUPT: seq 7: ")
    assert len(res.stderr.splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_decode_shows_an_unknown_kind_as_opaque(log_dir: Path, expected: list[tuple]) -> None:
    seq = expected[-1][0] + 1
    body, raw_size = zstd_msgpack({"kind": "future.kind", "shape": [1, 2], "note": "from a newer Lens"})
    edit_log(
        log_dir,
        "INSERT INTO events(seq, ts, project_id, kind, raw_size, body) VALUES (?, ?, 'p1', 'future.kind', ?, ?)",
        (seq, expected[-1][1], raw_size, body),
    )
    res = lens("log", "decode", "--data", str(log_dir), "--kind", "future.kind")
    assert res.returncode == 0, res.stderr
    (ev,) = decoded(res.stdout)
    assert set(ev) == DECODE_KEYS
    assert (ev["seq"], ev["kind"], ev["session_id"]) == (seq, "future.kind", None)
    assert ev["body"] == {"shape": [1, 2], "note": "from a newer Lens"}


@pytest.mark.parametrize("command", ["decode", "verify", "stats", "rebuild"])
def test_missing_data_dir_exits_2_without_traceback(tmp_path: Path, command: str) -> None:
    res = lens("log", command, "--data", str(tmp_path / "nowhere"))
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.startswith("lens: DATA_DIR_MISSING: ")
    assert "nowhere" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "nowhere").exists()


def test_empty_data_dir_is_not_a_log(tmp_path: Path) -> None:
    res = lens("log", "decode", "--data", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.startswith("lens: DATA_DIR_MISSING: ")
    assert list(tmp_path.iterdir()) == []


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    conn = apsw.Connection(str(data / "events.db"))
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
    conn.close()
    before = sha256(data / "events.db")
    for command in ("decode", "verify", "stats"):
        res = lens("log", command, "--data", str(data))
        assert res.returncode == 2, command
        assert res.stderr.startswith("lens: STORE_FOREIGN: "), res.stderr
        assert "notes" in res.stderr and "--data NEW_DIR" in res.stderr
        assert "Traceback" not in res.stderr
    assert sha256(data / "events.db") == before


def test_a_foreign_wal_database_is_refused_without_files_made_beside_it(tmp_path: Path) -> None:
    # Opening a foreign SQLite file in WAL mode made SQLite create its empty -wal and -shm files
    # before the format check refused it: the refusal left two files in the user's directory.
    data = tmp_path / "data"
    data.mkdir()
    conn = apsw.Connection(str(data / "events.db"))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
    conn.close()  # (the last connection checkpoints and removes its -wal and -shm)
    assert sorted(p.name for p in data.iterdir()) == ["events.db"]
    before = sha256(data / "events.db")
    for command in ("decode", "verify", "stats", "rebuild"):
        res = lens("log", command, "--data", str(data))
        assert res.returncode == 2, (command, res.stderr)
        assert res.stderr.startswith("lens: STORE_FOREIGN: "), res.stderr
    assert sorted(p.name for p in data.iterdir()) == ["events.db"]
    with pytest.raises(StoreOpenError) as caught:
        EventStore.open(data)  # (refused before the writer makes its lock file)
    assert caught.value.code == "STORE_FOREIGN"
    assert sorted(p.name for p in data.iterdir()) == ["events.db"]
    assert sha256(data / "events.db") == before


def test_non_sqlite_events_db_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "events.db").write_bytes(b"this is not a database\n" * 300)
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 2
    assert res.stderr.startswith("lens: STORE_FOREIGN: ")
    assert "not a SQLite database" in res.stderr


def test_directory_of_another_layout_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "sessions.json").write_text("{}")
    res = lens("log", "decode", "--data", str(data))
    assert res.returncode == 2
    assert res.stderr.startswith("lens: STORE_FOREIGN: ")
    assert "sessions.json" in res.stderr
    assert sorted(p.name for p in data.iterdir()) == ["sessions.json"]


def test_other_format_and_other_version_are_refused(log_dir: Path) -> None:
    edit_log(log_dir, "UPDATE meta SET value = '2' WHERE key = 'format_version'")
    res = lens("log", "decode", "--data", str(log_dir))
    assert res.returncode == 2
    assert res.stderr.startswith("lens: STORE_FORMAT_UNSUPPORTED: ")
    assert "version 2" in res.stderr and "--data NEW_DIR" in res.stderr

    edit_log(log_dir, "UPDATE meta SET value = 'other-events' WHERE key = 'format'")
    res = lens("log", "decode", "--data", str(log_dir))
    assert res.returncode == 2
    assert res.stderr.startswith("lens: STORE_FOREIGN: ")
    assert "'other-events'" in res.stderr


def test_decode_into_a_closed_pipe_does_not_traceback(log_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "log", "decode", "--data", str(log_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # like `| head -1`: read a line, then go away
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    rc = proc.wait(timeout=60)
    assert json.loads(first)["seq"] == 1
    assert err == b""
    assert rc == 0


def test_console_script_and_default_data_dir(pristine: Path, tmp_path: Path) -> None:
    # `lens log ...` without --data reads `.lens/` under the working directory.
    shutil.copytree(pristine, tmp_path / ".lens")
    res = subprocess.run(
        [str(lens_script()), "log", "verify"], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert res.returncode == 0, res.stderr
    count = log_rows(pristine, "SELECT count(*) FROM events")[0][0]
    assert res.stdout == f"ok: {count} event(s) verified\n"


# ---------------------------------------------------------------------------- verify


def test_verify_ok(log_dir: Path, expected: list[tuple]) -> None:
    before = sha256(log_dir / "events.db")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout == f"ok: {len(expected)} event(s) verified\n"
    assert res.stderr == ""
    assert sha256(log_dir / "events.db") == before


def _flip_checksum(body: bytes) -> bytes:
    return body[:-1] + bytes([body[-1] ^ 0xFF])


CORRUPTIONS = {
    # name: (how to damage the body, words the reason must contain)
    "garbage": (lambda b: b"\xde\xad\xbe\xef" * 8, "not a zstd frame"),
    "truncated": (lambda b: b[: len(b) // 2], "does not decompress"),
    "trailing bytes": (lambda b: b + b"\x00junk", "trailing bytes"),
    "second frame": (lambda b: b + b, "trailing bytes"),
    "checksum": (_flip_checksum, "does not decompress"),
    "empty": (lambda b: b"", "not a zstd frame"),
    # A skippable frame (magic 0x184D2A50..5F, four bytes of length, its bytes) before the data
    # frame was reported as "zstd frame carries no content checksum", of a frame that has one.
    "skippable frame first": (lambda b: b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd" + b,
                              "starts with a zstd skippable frame (magic 0x184D2A50), not a data frame"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_verify_reports_a_damaged_body(log_dir: Path, expected: list[tuple], name: str) -> None:
    damage, words = CORRUPTIONS[name]
    seq = 11
    edit_log(log_dir, "UPDATE events SET body = ? WHERE seq = ?", (damage(body_of_row(log_dir, seq)), seq))
    before = sha256(log_dir / "events.db")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert len(lines) == 2, res.stdout
    assert lines[0].startswith(f"seq {seq}: EVENT_CORRUPT: ")
    assert words in lines[0]
    assert lines[1] == f"FAILED: 1 problem(s) in {len(expected)} event(s)"
    assert sha256(log_dir / "events.db") == before


def test_verify_reports_a_body_of_another_kind(log_dir: Path, expected: list[tuple]) -> None:
    # A valid frame, but holding a session.created body under an input.submitted row.
    target = next(r[0] for r in expected if r[7] == "input.submitted")
    other = next(r[0] for r in expected if r[7] == "session.created")
    edit_log(log_dir, "UPDATE events SET body = ? WHERE seq = ?", (body_of_row(log_dir, other), target))
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == (
        f"seq {target}: EVENT_CORRUPT: row kind 'input.submitted' but body holds 'session.created'"
    )


def test_verify_reports_every_problem_with_its_seq(log_dir: Path, expected: list[tuple]) -> None:
    for seq in (3, 30, 60):
        edit_log(log_dir, "UPDATE events SET body = x'00' WHERE seq = ?", (seq,))
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["seq 3", "seq 30", "seq 60"]
    assert lines[-1] == f"FAILED: 3 problem(s) in {len(expected)} event(s)"


def test_verify_reports_a_seq_gap(log_dir: Path, expected: list[tuple]) -> None:
    # seq 1 is project-level, so removing it leaves every session's session_seq intact.
    edit_log(log_dir, "DELETE FROM events WHERE seq = 1")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines() == [
        "seq 2: SEQ_GAP: seq gap: expected 1, found 2",
        f"FAILED: 1 problem(s) in {len(expected) - 1} event(s)",
    ]


@pytest.mark.parametrize("value", ["abc", "0", str(2**40), "9" * 5000])
def test_verify_reports_an_edited_maximum_event_size_record(log_dir: Path, expected: list[tuple], value: str) -> None:
    # Writers record only maximums from 32 MiB to 1 GiB; readers take another value as the nearest
    # they allow, which verify says rather than hiding the edit.
    edit_log(log_dir, "INSERT INTO meta(key, value) VALUES ('max_event_bytes', ?)", (value,))
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1, res.stdout + res.stderr
    (problem, summary) = res.stdout.splitlines()
    assert problem.startswith("log: META_INVALID: meta max_event_bytes is ") and "reads take it as" in problem
    assert summary == f"FAILED: 1 problem(s) in {len(expected)} event(s)"
    edit_log(log_dir, "UPDATE meta SET value = ? WHERE key = 'max_event_bytes'", (str(48 * 1024 * 1024),))
    assert lens("log", "verify", "--data", str(log_dir)).returncode == 0


def test_verify_reports_a_gap_inside_a_session(log_dir: Path, expected: list[tuple]) -> None:
    victim = next(r for r in expected if r[3] == "s2" and r[4] == 3)
    edit_log(log_dir, "DELETE FROM events WHERE seq = ?", (victim[0],))
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    out = res.stdout
    assert f"seq {victim[0] + 1}: SEQ_GAP: seq gap: expected {victim[0]}, found {victim[0] + 1}" in out
    assert "SESSION_SEQ_OUT_OF_ORDER: session s2: session_seq 4, expected 3" in out


def test_verify_reports_an_unknown_kind(log_dir: Path, expected: list[tuple]) -> None:
    seq = expected[-1][0] + 1
    body, raw_size = zstd_msgpack({"kind": "future.kind", "value": 1})
    edit_log(
        log_dir,
        "INSERT INTO events(seq, ts, project_id, kind, raw_size, body) VALUES (?, ?, 'p1', 'future.kind', ?, ?)",
        (seq, expected[-1][1], raw_size, body),
    )
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"seq {seq}: EVENT_KIND_UNKNOWN: unknown event kind 'future.kind'")
    assert lines[1] == f"FAILED: 1 problem(s) in {seq} event(s)"
    # decode prints the very same row as an opaque event, without failing.
    res = lens("log", "decode", "--data", str(log_dir), "--from", str(seq))
    assert res.returncode == 0
    assert decoded(res.stdout)[0]["body"] == {"value": 1}


def test_verify_reports_a_row_naming_the_wrong_dictionary(log_dir: Path) -> None:
    edit_log(log_dir, "UPDATE events SET dict_id = 12345 WHERE seq = 9")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == (
        "seq 9: EVENT_CORRUPT: frame names dictionary 0 but the row records 12345"
    )


def test_verify_reports_time_going_backwards(log_dir: Path, expected: list[tuple]) -> None:
    edit_log(log_dir, "UPDATE events SET ts = 1000 WHERE seq = 10")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == (
        f"seq 10: TS_OUT_OF_ORDER: ts 1000 is earlier than the previous event's {expected[8][1]}"
    )
    # a first event stamped before 1970 is not compared with a previous event it does not have
    # (it read "earlier than the previous event's 0"); a negative stamp later on is named the same
    edit_log(log_dir, "UPDATE events SET ts = 5000 WHERE seq = 10")
    edit_log(log_dir, "UPDATE events SET ts = -5 WHERE seq IN (1, 3)")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines()[:3] == [
        "seq 1: TS_NEGATIVE: ts -5 is negative (UTC milliseconds count from 1970)",
        "seq 3: TS_NEGATIVE: ts -5 is negative (UTC milliseconds count from 1970)",
        f"seq 10: TS_OUT_OF_ORDER: ts 5000 is earlier than the previous event's {expected[8][1]}",
    ]


async def append_one(data_dir: Path, draft: Draft, *, train: bool = False) -> tuple[int, int]:
    """Open the real store on ``data_dir`` (training a dictionary first if ``train``), append
    ``draft``, close; return its seq and the store's active dictionary id."""
    store = EventStore.open(data_dir, synchronous="OFF")
    try:
        if train:
            store.train_dictionary()
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            result = await store.append(draft)
            store.close_writer()
        return result.seq, store.codec.active_dict_id
    finally:
        store.close()


async def test_rows_written_with_a_trained_dictionary_decode_and_verify(log_dir: Path) -> None:
    seq, dict_id = await append_one(
        log_dir, Draft(ModelResponded(text="answer 99 " * 40), project_id="p1", session_id="s1"), train=True
    )
    res = await trio.to_thread.run_sync(lens, "log", "decode", "--data", str(log_dir), "--raw", "--from", str(seq - 1))
    old, new = decoded(res.stdout)
    assert (old["dict_id"], new["dict_id"]) == (0, dict_id) and dict_id != 0
    body = base64.b64decode(new["body"])
    assert zstandard.get_frame_parameters(body).dict_id == dict_id
    # The bytes printed decompress elsewhere with the dictionary the row names, read from the
    # `dictionaries` table (storage-format.md says how); without it they do not.
    [(data,)] = log_rows(log_dir, "SELECT data FROM dictionaries WHERE dict_id = ?", (dict_id,))
    raw = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(data)).decompress(body)
    assert len(raw) == new["raw_size"] and msgspec.msgpack.decode(raw)["text"] == "answer 99 " * 40
    with pytest.raises(zstandard.ZstdError):
        zstandard.ZstdDecompressor().decompress(body)
    res = await trio.to_thread.run_sync(lens, "log", "decode", "--data", str(log_dir), "--from", str(seq))
    assert res.returncode == 0, res.stderr
    assert decoded(res.stdout)[0]["body"]["text"] == "answer 99 " * 40
    res = await trio.to_thread.run_sync(lens, "log", "verify", "--data", str(log_dir))
    assert (res.returncode, res.stdout) == (0, f"ok: {seq} event(s) verified\n")


async def test_verify_reports_commits_a_damaged_wal_frame_hides(tmp_path: Path) -> None:
    # SQLite reads a WAL only up to its first frame whose checksum fails: one flipped byte there
    # hid every later commit from every reader, and verify said "ok" over the shorter log.
    data = tmp_path / "data"
    await log_with_its_wal(tmp_path / "writer", data, 30)
    res = await trio.to_thread.run_sync(lens, "log", "verify", "--data", str(data))
    assert (res.returncode, res.stdout, res.stderr) == (0, "ok: 30 event(s) verified\n", "")
    frames = wal_frames(data)
    assert frames >= 30  # (a commit each: at least one frame each)
    bad = frames // 2
    wal = damage_wal_frame(data, bad)
    damaged = sha256(data / "events.db-wal")
    res = await trio.to_thread.run_sync(lens, "log", "verify", "--data", str(data))
    assert res.returncode == 1, res.stdout + res.stderr
    *problems, summary = res.stdout.splitlines()
    assert len(problems) == 1 and problems[0].startswith(
        f"log: WAL_DAMAGED: events.db-wal frame {bad} is damaged (its checksum or salt is wrong), so SQLite stops "
        f"reading the WAL there: "), res.stdout
    visible = len(decoded((await trio.to_thread.run_sync(lens, "log", "decode", "--data", str(data))).stdout))
    assert visible < 30
    # Every commit after the damaged frame is counted (one event each here).
    own = is_commit_frame(wal, bad)
    assert f": {30 - visible - own} later commit(s) in it are invisible" in problems[0]
    assert summary == f"FAILED: 1 problem(s) in {visible} event(s)"
    assert "Traceback" not in res.stderr
    assert sha256(data / "events.db-wal") == damaged  # verify never changes it


def wal_frames(data: Path) -> int:
    wal = (data / "events.db-wal").read_bytes()
    return (len(wal) - 32) // (24 + int.from_bytes(wal[8:12], "big"))


def damage_wal_frame(data: Path, n: int) -> bytes:
    """Flip a byte of the page in ``events.db-wal``'s frame ``n`` (1-based); the damaged file's bytes."""
    wal = bytearray((data / "events.db-wal").read_bytes())
    page_size = int.from_bytes(wal[8:12], "big")
    wal[32 + (n - 1) * (24 + page_size) + 24 + 100] ^= 0x55
    (data / "events.db-wal").write_bytes(wal)
    return bytes(wal)


def is_commit_frame(wal: bytes, n: int) -> bool:
    page_size = int.from_bytes(wal[8:12], "big")
    return int.from_bytes(wal[32 + (n - 1) * (24 + page_size) + 4:][:4], "big") != 0


async def test_decode_stats_and_rebuild_say_what_a_damaged_wal_frame_hides(tmp_path: Path) -> None:
    # Only verify looked at the WAL: decode printed a shortened log, stats counted it and rebuild
    # rebuilt the projections from it, each exit 0 and without a word.
    data = tmp_path / "data"
    await log_with_its_wal(tmp_path / "writer", data, 30)
    bad = wal_frames(data) // 2
    wal = damage_wal_frame(data, bad)
    hidden = sum(is_commit_frame(wal, n) for n in range(bad + 1, wal_frames(data) + 1))
    assert hidden >= 2
    line = f"lens: WAL_DAMAGED: events.db-wal frame {bad} is damaged (its checksum or salt is wrong), so SQLite stops "

    res = await trio.to_thread.run_sync(lens, "log", "decode", "--data", str(data))
    visible = decoded(res.stdout)
    assert res.returncode == 1 and 0 < len(visible) < 30
    [said] = res.stderr.splitlines()
    assert said.startswith(line) and f"{hidden} later commit(s)" in said
    assert said.endswith("(the events printed end before that frame; `lens log verify` reports it)")

    res = await trio.to_thread.run_sync(lens, "log", "stats", "--data", str(data), "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["total"]["events"] == len(visible)
    [said] = res.stderr.splitlines()
    assert said.startswith(line) and said.endswith("(the figures count the events before that frame only; "
                                                   "`lens log verify` reports it)")

    before = {p.name: sha256(p) for p in data.iterdir() if p.name.startswith("projections.db")}
    res = await trio.to_thread.run_sync(lens, "log", "rebuild", "--data", str(data))
    assert (res.returncode, res.stdout) == (1, "")
    said, refused = res.stderr.splitlines()
    assert said.startswith(line)
    assert refused == "lens: the rebuild changed nothing (the projections are as they were); restore the log, then rebuild again"
    assert {p.name: sha256(p) for p in data.iterdir() if p.name.startswith("projections.db")} == before
    assert "Traceback" not in res.stderr


async def test_rebuild_goes_on_past_a_wal_break_with_one_commit_after_it(tmp_path: Path) -> None:
    # One commit after the break is most likely the last transaction, torn by a power cut and never
    # acknowledged: the daemon opens such a log as SQLite reads it, so rebuild does too, and says so.
    data = tmp_path / "data"
    await log_with_its_wal(tmp_path / "writer", data, 30)
    frames = wal_frames(data)
    wal = (data / "events.db-wal").read_bytes()
    bad = max(n for n in range(1, frames) if is_commit_frame(wal, n))  # the commit before the last one
    wal = damage_wal_frame(data, bad)
    assert [n for n in range(bad + 1, frames + 1) if is_commit_frame(wal, n)] == [frames]
    res = await trio.to_thread.run_sync(lens, "log", "rebuild", "--data", str(data))
    assert res.returncode == 0, res.stderr
    [said] = res.stderr.splitlines()
    assert said.startswith(f"lens: WAL_DAMAGED: events.db-wal frame {bad} is damaged") and "1 later commit(s)" in said
    assert said.endswith("(the projections would be rebuilt without the events after it; `lens log verify` reports it)")
    visible = len(decoded((await trio.to_thread.run_sync(lens, "log", "decode", "--data", str(data))).stdout))
    assert res.stdout.endswith(f" from {visible} event(s)\n") and visible == 28


def test_bad_arguments_exit_2(log_dir: Path) -> None:
    for args in (["decode", "--from", "abc"], ["decode", "--bogus"], ["nonsense"]):
        res = lens("log", *args, "--data", str(log_dir))
        assert res.returncode == 2, args
        assert "usage:" in res.stderr and "Traceback" not in res.stderr
        # the message carries a stable code where argparse wrote "error:"
        assert res.stderr.splitlines()[-1].startswith(("lens log: USAGE_ERROR: ", "lens log decode: USAGE_ERROR: ")), res.stderr
    # an argument the command does not take is reported with that command's usage and name
    # (it was the top-level "usage: lens [-h] COMMAND ..." and "lens: error: …")
    for args, usage in ((["stats", "--raw"], "usage: lens log stats "), (["decode", "extra"], "usage: lens log decode "),
                        (["verify", "--json"], "usage: lens log verify ")):
        res = lens("log", *args, "--data", str(log_dir))
        assert res.returncode == 2 and res.stdout == "", args
        assert res.stderr.startswith(usage), (args, res.stderr)
        assert res.stderr.endswith(f"\nlens log {args[0]}: USAGE_ERROR: unrecognized arguments: {args[1]}\n"), res.stderr
    for command in ("decode", "verify", "stats", "rebuild"):  # (an empty --data meant the working directory)
        res = lens("log", command, "--data", "", cwd=log_dir)
        assert res.returncode == 2 and "an empty path names no directory" in res.stderr, (command, res.stderr)


def log_file_digests(data_dir: Path) -> dict[str, str]:
    """sha256 of events.db and its WAL (the -shm index is SQLite's scratch memory)."""
    return {
        p.name: sha256(p)
        for p in data_dir.iterdir()
        if p.name.startswith("events.db") and p.name != "events.db-shm"
    }


def test_verify_never_changes_the_database(log_dir: Path) -> None:
    edit_log(log_dir, "UPDATE events SET body = x'28b52ffd' WHERE seq = 5")
    before = log_file_digests(log_dir)
    rows = log_rows(log_dir, "SELECT * FROM events ORDER BY seq")
    for _ in range(2):
        res = lens("log", "verify", "--data", str(log_dir))
        assert res.returncode == 1
        assert res.stdout.startswith("seq 5: EVENT_CORRUPT: ")
    after = log_file_digests(log_dir)
    for name, digest in before.items():
        assert after[name] == digest, name
    # A reader may leave an empty WAL behind, never one with content.
    assert after.get("events.db-wal") in (None, hashlib.sha256(b"").hexdigest())
    assert log_rows(log_dir, "SELECT * FROM events ORDER BY seq") == rows
    assert not (log_dir / "projections.db").exists()


def test_a_log_written_under_a_raised_maximum_event_size_is_read_whole(tmp_path: Path) -> None:
    # log.maxEventBytes may be raised to 1 GiB; `lens log` reads no config, and took an event
    # past its default 32 MiB for damage ("restore the log") in every command.
    data = tmp_path / "data"
    text = "source line\n" * (3 * 1024 * 1024)  # 36 MiB, compresses to little

    async def main() -> None:
        async with open_store(data, synchronous="OFF", max_event_bytes=64 * 1024 * 1024) as store:
            await store.append(Draft(ToolFinished(call_id="c1", name="read_file", content=[TextPart(text)]),
                                     project_id="p1", session_id="s1", agent_id="a"))

    trio.run(main)
    res = lens("log", "verify", "--data", str(data))
    assert (res.returncode, res.stdout.strip()) == (0, "ok: 1 event(s) verified"), res.stdout + res.stderr
    res = lens("log", "decode", "--data", str(data))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert decoded(res.stdout)[0]["body"]["content"] == [{"type": "text", "text": text}]
    res = lens("log", "stats", "--json", "--data", str(data))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert json.loads(res.stdout)["total"]["events"] == 1
    res = lens("log", "rebuild", "--data", str(data))
    assert (res.returncode, res.stdout.strip()) == (0, "rebuilt artifact_names, artifact_types, history, projects, sessions, settings, stats from 1 event(s)"), \
        res.stdout + res.stderr


# ---------------------------------------------------------------------------- rebuild


def registry_names() -> list[str]:
    """The projections `lens log rebuild` knows, sorted as it prints them."""
    return sorted(p.name for p in all_projections())


def projection_tables(data_dir: Path) -> dict[str, list[tuple]]:
    """Every table of projections.db, rows in a canonical order."""
    conn = apsw.Connection(str(data_dir / "projections.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}"), key=repr) for t in sorted(names)}
    finally:
        conn.close()


def positions(data_dir: Path) -> dict[str, tuple[int, int]]:
    return {name: (version, seq) for name, version, seq in projection_tables(data_dir)["positions"]}


def direct_stats(data_dir: Path) -> list[tuple]:
    """(kind, events, stored bytes, raw bytes) computed from events.db itself."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    dctx = zstandard.ZstdDecompressor()
    for kind, body in log_rows(data_dir, "SELECT kind, body FROM events"):
        a = acc[kind]
        a[0] += 1
        a[1] += len(body)
        a[2] += len(dctx.decompress(body))
    return [(k, *v) for k, v in sorted(acc.items())]


def test_rebuild_all_is_quiet_and_correct(log_dir: Path, expected: list[tuple]) -> None:
    names = registry_names()
    assert "stats" in names
    res = lens("log", "rebuild", "--data", str(log_dir))
    assert res.returncode == 0, res.stderr
    # stdout is a pipe, not a terminal: no progress bar, just the summary line.
    assert res.stdout == f"rebuilt {', '.join(names)} from {len(expected)} event(s)\n"
    assert res.stderr == ""
    versions = {p.name: p.version for p in all_projections()}
    assert positions(log_dir) == {name: (versions[name], len(expected)) for name in names}
    assert projection_tables(log_dir)["stats_kinds"] == direct_stats(log_dir)


def test_rebuild_one_projection(log_dir: Path, expected: list[tuple]) -> None:
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"rebuilt stats from {len(expected)} event(s)\n"
    assert projection_tables(log_dir)["stats_kinds"] == direct_stats(log_dir)
    # Only the named projection was folded; the others exist, still at position 0.
    assert {name: seq for name, (_, seq) in positions(log_dir).items()} == {
        name: (len(expected) if name == "stats" else 0) for name in registry_names()
    }


def test_rebuild_takes_a_comma_separated_list_of_projections(log_dir: Path, expected: list[tuple]) -> None:
    """Like decode's ``--kind``: repeated, comma-separated or both, each named once."""
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats, history", "--projection", "stats")
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == f"rebuilt stats, history from {len(expected)} event(s)\n"
    assert {name: seq for name, (_, seq) in positions(log_dir).items()} == {
        name: (len(expected) if name in ("stats", "history") else 0) for name in registry_names()
    }
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats,nope")
    assert res.returncode == 2 and "PROJECTION_UNKNOWN: no projection named 'nope'" in res.stderr
    for empty in ("", " , "):
        res = lens("log", "rebuild", "--data", str(log_dir), "--projection", empty)
        assert res.returncode == 2 and "usage: lens log rebuild" in res.stderr and "names no projection" in res.stderr


def test_rebuild_unknown_projection_names_the_known_ones(log_dir: Path) -> None:
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "nope")
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr == (
        f"lens: PROJECTION_UNKNOWN: no projection named 'nope'; known: {', '.join(registry_names())}\n"
    )


def test_rebuild_is_idempotent_and_equals_incremental(tmp_path: Path) -> None:
    # `stats` catches its projection up incrementally (log written in two halves, caught up
    # after each); rebuilding from zero must give exactly that, and rebuilding twice the same.
    data = tmp_path / "data"
    appends = build_drafts()
    half = len(appends) // 2
    write_log(data, appends[:half])
    assert lens("log", "stats", "--data", str(data)).returncode == 0
    write_log(data, appends[half:])
    assert lens("log", "stats", "--data", str(data)).returncode == 0
    incremental = projection_tables(data)["stats_kinds"]
    assert incremental == direct_stats(data)
    dumps = []
    for _ in range(2):
        res = lens("log", "rebuild", "--data", str(data))
        assert res.returncode == 0, res.stderr
        dumps.append(projection_tables(data))
    assert dumps[0] == dumps[1]
    assert dumps[0]["stats_kinds"] == incremental
    assert set(dumps[0]) >= {"positions", "stats_kinds"}


def test_rebuild_of_columns_only_ignores_a_damaged_body(log_dir: Path, expected: list[tuple]) -> None:
    # stats works from stored columns only; a damaged body still counts its stored size.
    edit_log(log_dir, "UPDATE events SET body = x'00' WHERE seq = 2")
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats")
    assert res.returncode == 0, res.stderr
    stats = projection_tables(log_dir)["stats_kinds"]
    assert sum(n for _, n, _, _ in stats) == len(expected)
    assert positions(log_dir)["stats"][1] == len(expected)


def test_rebuild_reports_a_corrupt_row_a_projection_needs(log_dir: Path) -> None:
    if not any(p.needs_body for p in all_projections()):
        pytest.skip("no registered projection reads bodies")
    assert lens("log", "rebuild", "--data", str(log_dir)).returncode == 0
    before = projection_tables(log_dir), positions(log_dir)
    edit_log(log_dir, "UPDATE events SET body = x'00' WHERE seq = 2")
    res = lens("log", "rebuild", "--data", str(log_dir))
    assert res.stderr.startswith("lens: EVENT_CORRUPT: seq 2: ")
    assert "the rebuild stopped at this row and changed nothing" in res.stderr
    assert "Traceback" not in res.stderr
    assert res.returncode == 1
    assert (projection_tables(log_dir), positions(log_dir)) == before  # one transaction, rolled back


def test_a_body_integer_sqlite_cannot_hold_is_a_corrupt_row_for_projections(log_dir: Path) -> None:
    # MessagePack (and the schema's `int`) go up to 2**64 - 1; SQLite stops at 2**63 - 1. A
    # session.created forking from such a "seq" decodes, but no projection can store it: the
    # rebuild died with a traceback (OverflowError) and the daemon's catch-up without a seq.
    assert lens("log", "rebuild", "--data", str(log_dir)).returncode == 0
    before = projection_tables(log_dir), positions(log_dir)
    assert log_rows(log_dir, "SELECT kind, session_id FROM events WHERE seq = 2") == [("session.created", "s1")]
    body, size = zstd_msgpack({"kind": "session.created", "model": "m", "forked_from_session": "s0",
                               "forked_from_seq": 2**64 - 1})
    edit_log(log_dir, "UPDATE events SET body = ?, raw_size = ? WHERE seq = 2", (body, size))
    res = lens("log", "rebuild", "--data", str(log_dir))
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith("lens: EVENT_CORRUPT: seq 2: "), res.stderr
    assert "18446744073709551615" in res.stderr.splitlines()[0]
    assert (projection_tables(log_dir), positions(log_dir)) == before  # one transaction, rolled back
    # The daemon's catch-up (a fresh projections.db) names the row too, and folds nothing past it.
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (log_dir / name).unlink(missing_ok=True)
    with LogReader(log_dir) as reader:
        projector = Projector(reader, open_projections_db(log_dir), all_projections())
        try:
            with pytest.raises(CorruptEvent, match=r"^seq 2: "):
                projector.catch_up()
            assert projector.position("sessions") < 2
        finally:
            projector.close()


# ---------------------------------------------------------------------------- stats


def test_stats_json_matches_the_events_table(log_dir: Path, expected: list[tuple]) -> None:
    res = lens("log", "stats", "--data", str(log_dir), "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    out = json.loads(res.stdout)
    direct = direct_stats(log_dir)
    # raw_size as recorded agrees with the decompressed size of each body.
    recorded = log_rows(
        log_dir,
        "SELECT kind, count(*), sum(length(body)), sum(raw_size) FROM events GROUP BY kind ORDER BY kind",
    )
    assert [tuple(r) for r in recorded] == direct
    assert [(k["kind"], k["events"], k["stored_bytes"], k["raw_bytes"]) for k in out["kinds"]] == direct
    for k in out["kinds"]:
        assert k["compression_ratio"] == round(k["raw_bytes"] / k["stored_bytes"], 3)
    total = out["total"]
    assert total["events"] == len(expected)
    assert total["stored_bytes"] == sum(r[2] for r in direct)
    assert total["raw_bytes"] == sum(r[3] for r in direct)
    assert total["compression_ratio"] == round(total["raw_bytes"] / total["stored_bytes"], 3)
    # Repetitive text compresses: the log as a whole is smaller than its raw MessagePack.
    assert total["compression_ratio"] > 1


def test_stats_table(log_dir: Path) -> None:
    res = lens("log", "stats", "--data", str(log_dir))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["kind", "events", "stored", "bytes", "raw", "bytes", "ratio"]
    assert set(lines[1]) == {"-"}
    direct = direct_stats(log_dir)
    body = [line.split() for line in lines[2:]]
    assert [row[0] for row in body] == [d[0] for d in direct] + ["TOTAL"]
    for row, (kind, n, stored, raw) in zip(body, direct):
        assert (int(row[1]), int(row[2]), int(row[3])) == (n, stored, raw), kind
        assert float(row[4]) == pytest.approx(raw / stored, abs=0.006)
    total = body[-1]
    assert int(total[1]) == sum(d[1] for d in direct)
    assert int(total[2]) == sum(d[2] for d in direct)
    assert int(total[3]) == sum(d[3] for d in direct)


def test_stats_follows_new_events(log_dir: Path) -> None:
    assert lens("log", "stats", "--data", str(log_dir), "--json").returncode == 0
    write_log(
        log_dir,
        [[Draft(SessionCreated(), project_id="p1", session_id="s9")],
         [Draft(ToolStarted(call_id="x", name="job", arguments="{}"), project_id="p1", session_id="s9")]],
    )
    res = lens("log", "stats", "--data", str(log_dir), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert [(k["kind"], k["events"], k["stored_bytes"], k["raw_bytes"]) for k in out["kinds"]] == direct_stats(log_dir)


# ---------------------------------------------------------------------------- mistyped columns


def test_mistyped_columns_are_reported_by_every_command(log_dir: Path, expected: list[tuple]) -> None:
    # Hand edits with the sqlite3 shell can store text where a blob or an integer belongs (the
    # table is not STRICT). Each command names the row and the column; none tracebacks.
    edit_log(log_dir, "UPDATE events SET body = 'not a blob' WHERE seq = 3")
    edit_log(log_dir, "UPDATE events SET raw_size = 'big' WHERE seq = 5")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stdout.splitlines() == [
        "seq 3: EVENT_CORRUPT: the body is stored as text, not as a blob",
        "seq 5: EVENT_CORRUPT: column raw_size holds 'big', which is not an integer",
        f"FAILED: 2 problem(s) in {len(expected)} event(s)",
    ]  # and no made-up session_seq gap after the skipped rows
    for raw in ([], ["--raw"]):
        res = lens("log", "decode", "--data", str(log_dir), *raw)
        assert res.returncode == 1 and "Traceback" not in res.stderr
        assert res.stderr.splitlines() == [
            "lens: EVENT_CORRUPT: seq 3: the body is stored as text, not as a blob",
            "lens: EVENT_CORRUPT: seq 5: column raw_size holds 'big', which is not an integer",
        ]
        assert [e["seq"] for e in decoded(res.stdout)] == [r[0] for r in expected if r[0] not in (3, 5)]
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("lens: EVENT_CORRUPT: seq 3: the body is stored as text")


def test_text_that_is_not_utf8_is_reported_by_every_command(log_dir: Path, expected: list[tuple]) -> None:
    # SQLite stores TEXT bytes as given: a flipped byte, or a hand edit, can leave a value that is
    # not UTF-8 — which failed every command with a UnicodeDecodeError traceback.
    edit_log(log_dir, "UPDATE events SET task_id = CAST(x'ff41' AS TEXT) WHERE seq = 3")
    edit_log(log_dir, "UPDATE events SET body = CAST(x'28b52ffd' || x'ff' AS TEXT) WHERE seq = 5")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stdout.splitlines() == [
        "seq 3: EVENT_CORRUPT: column task_id holds text that is not valid UTF-8 (b'\\xffA')",
        "seq 5: EVENT_CORRUPT: column body holds text that is not valid UTF-8 (b'(\\xb5/\\xfd\\xff')",
        f"FAILED: 2 problem(s) in {len(expected)} event(s)",
    ]
    for raw in ([], ["--raw"]):
        res = lens("log", "decode", "--data", str(log_dir), *raw)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert [line.split(":")[:2] for line in res.stderr.splitlines()] == [
            ["lens", " EVENT_CORRUPT"], ["lens", " EVENT_CORRUPT"]]
        assert "seq 3: column task_id" in res.stderr and "seq 5: column body" in res.stderr
        assert [e["seq"] for e in decoded(res.stdout)] == [r[0] for r in expected if r[0] not in (3, 5)]
    for command in (["rebuild"], ["stats"]):
        res = lens("log", *command, "--data", str(log_dir))
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.startswith("lens: EVENT_CORRUPT: seq 3: column task_id holds text that is not valid UTF-8")
    with LogReader(log_dir) as reader:  # the replay path (session wake-up, the events route)
        with pytest.raises(CorruptEvent) as info:
            list(reader.events())
        assert info.value.seq == 3 and "not valid UTF-8" in info.value.message
        assert [e.seq for e in reader.events(to=2)] == [1, 2]


def test_verify_reports_session_fields_on_an_event_without_a_session(log_dir: Path, expected: list[tuple]) -> None:
    (seq,) = [r[0] for r in expected if r[3] is not None][:1]
    edit_log(log_dir, "UPDATE events SET session_id = NULL, request_id = 'req_x' WHERE seq = ?", (seq,))
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    sseq = [r[4] for r in expected if r[0] == seq][0]
    assert f"seq {seq}: ENVELOPE_INVALID: session_seq {sseq} on an event that belongs to no session" in lines
    assert f"seq {seq}: ENVELOPE_INVALID: request_id 'req_x' on an event that belongs to no session" in lines


def test_verify_reports_a_raw_size_that_is_not_the_frames(log_dir: Path) -> None:
    (size,) = log_rows(log_dir, "SELECT raw_size FROM events WHERE seq = 2")[0]
    edit_log(log_dir, "UPDATE events SET raw_size = ? WHERE seq = 2", (size + 1000,))
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == f"seq 2: RAW_SIZE_INVALID: raw_size {size + 1000}, but the frame holds {size} bytes"


def test_verify_reports_a_raw_size_that_is_not_what_a_frame_of_unknown_size_holds(log_dir: Path) -> None:
    # A frame that declares no content size (Lens never writes one, but reads it) still holds a
    # size: the one it decompresses to. A raw_size beside it that lies was passed as fine.
    raw = zstandard.ZstdDecompressor().decompress(body_of_row(log_dir, 2))
    body = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compress(raw)
    assert zstandard.frame_content_size(body) == -1
    edit_log(log_dir, "UPDATE events SET body = ?, raw_size = ? WHERE seq = 2", (body, len(raw) + 1000))
    edit_log(log_dir, "UPDATE events SET body = ? WHERE seq = 3", (
        zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compress(
            zstandard.ZstdDecompressor().decompress(body_of_row(log_dir, 3))),))
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1, res.stdout
    assert res.stdout.splitlines() == [
        f"seq 2: RAW_SIZE_INVALID: raw_size {len(raw) + 1000}, but the frame holds {len(raw)} bytes",  # seq 3 is right
        f"FAILED: 1 problem(s) in {len(log_rows(log_dir, 'SELECT seq FROM events'))} event(s)",
    ]


# ---------------------------------------------------------------------------- hostile input


def lens_bytes(*args: str | bytes, **kw: object) -> subprocess.CompletedProcess[str]:
    """:func:`lens` with raw byte arguments allowed (e.g. not UTF-8)."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", *args], capture_output=True, text=True, timeout=60, **kw
    )


def assert_clean_failure(res: subprocess.CompletedProcess[str], rc: int, code: str) -> None:
    assert res.returncode == rc, (res.returncode, res.stdout[-500:], res.stderr[-500:])
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    assert f"{code}:" in res.stderr + res.stdout, res.stderr


SEQ_MAX = 2**63 - 1


def test_seq_arguments_are_bounded_at_sqlites_integer_range(log_dir: Path) -> None:
    for value in (SEQ_MAX, -SEQ_MAX - 1):  # exactly at the limits: run, print nothing past them
        res = lens("log", "decode", "--data", str(log_dir), "--from", str(value), "--to", str(value))
        assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    for flag, value in (("--from", SEQ_MAX + 1), ("--to", -SEQ_MAX - 2), ("--from", 10**30)):
        res = lens("log", "decode", "--data", str(log_dir), flag, str(value))
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert f"argument {flag}: {value} is outside the range of a seq" in res.stderr


def test_seq_arguments_are_ascii_decimal_integers(log_dir: Path) -> None:
    """``--from``/``--to`` take what the HTTP routes take for a seq (plus a sign): Python's int()
    also read "1_0" as 10, "\u0663" (an Arabic-Indic three) as 3 and " 5" as 5."""
    for value in ("1_0", "\u0663", " 5", "5 ", "0x10", "1e3", "", "-", "+"):
        res = lens("log", "decode", "--data", str(log_dir), "--from", value)
        assert res.returncode == 2 and "Traceback" not in res.stderr, value
        assert f"argument --from: {value!r} is not a whole number" in res.stderr, (value, res.stderr)
    res = lens("log", "decode", "--data", str(log_dir), "--from", "+2", "--to", "-0")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")  # an empty range, not an error
    res = lens("log", "decode", "--data", str(log_dir), "--from=-5", "--to", "+1")
    assert res.returncode == 0 and [json.loads(line)["seq"] for line in res.stdout.splitlines()] == [1]


def test_arguments_that_are_not_utf8_are_usage_errors(log_dir: Path) -> None:
    for flag in ("--session", "--kind", "--data"):
        args: list[str | bytes] = ["log", "decode", "--data", str(log_dir), flag, b"s\xff"]
        res = lens_bytes(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert f"argument {flag}: b's\\xff' is not valid UTF-8" in res.stderr


async def test_a_data_dir_that_is_not_utf8_is_refused_by_the_writer_before_anything_is_made(tmp_path: Path) -> None:
    # `lens log` refuses such a --data as a usage error; the writer (`lens serve`, the benchmark)
    # made the directory, then apsw could not encode the name: a UnicodeEncodeError traceback.
    data = Path(os.fsdecode(os.fsencode(tmp_path) + b"/data\xff"))
    with pytest.raises(StoreOpenError, match=r"is not valid UTF-8 \(SQLite opens files by UTF-8 names\)"):
        async with open_store(data):
            pass
    assert list(tmp_path.iterdir()) == []
    res = lens_bytes("log", "verify", "--data", os.fsencode(data))
    assert_clean_failure(res, 2, "USAGE_ERROR")
    assert "is not valid UTF-8 (SQLite opens files by UTF-8 names)" in res.stderr


def test_an_empty_kind_is_a_usage_error(log_dir: Path) -> None:
    for kind in ("", ",,", " "):
        res = lens("log", "decode", "--data", str(log_dir), "--kind", kind)
        assert res.returncode == 2 and "an empty kind matches nothing" in res.stderr


@pytest.mark.parametrize("flags", [
    ("--session", "s1", "--session", "s2"),
    ("--from", "1", "--from", "3"),
    ("--to", "2", "--to=9"),
    ("--session", "", "--session", ""),
], ids=["session", "from", "to", "session-empty"])
def test_a_single_valued_filter_given_twice_is_a_usage_error(pristine: Path, flags: tuple[str, ...]) -> None:
    # `--session s1 --session s2` printed s2's events alone (the last one won, silently), where a
    # reader of `--kind`'s repeats expects both sessions; the HTTP routes refuse a repeat with 400.
    res = lens("log", "decode", "--data", str(pristine), *flags)
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout[:300])
    assert res.stderr.startswith("usage: lens log decode ") and "Traceback" not in res.stderr
    assert f"lens log decode: USAGE_ERROR: argument {flags[0]}: given more than once (it takes one value)" in res.stderr


def _unprivileged() -> list[str]:
    """A prefix that runs a command without root's power to ignore file permissions."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all", "--"]


@pytest.mark.parametrize("command", ["decode", "verify", "stats", "rebuild"])
def test_unreadable_data_dir_and_log_are_named(log_dir: Path, command: str) -> None:
    prefix = _unprivileged()
    cmd = [*prefix, sys.executable, "-m", "runtime.cli", "log", command, "--data", str(log_dir)]
    try:
        (log_dir / "events.db").chmod(0)
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert_clean_failure(res, 2, "DATA_DIR_NOT_READABLE")
        assert f"cannot read {log_dir / 'events.db'}" in res.stderr
        (log_dir / "events.db").chmod(0o644)
        log_dir.chmod(0)
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert_clean_failure(res, 2, "DATA_DIR_NOT_READABLE")
        assert f"data directory {log_dir} cannot be read (permission denied)" in res.stderr
    finally:
        log_dir.chmod(0o755)
        (log_dir / "events.db").chmod(0o644)


def test_a_truncated_file_is_reported_not_a_traceback(log_dir: Path) -> None:
    events_db = log_dir / "events.db"
    with events_db.open("r+b") as f:
        f.truncate(events_db.stat().st_size // 3)
    res = lens("log", "verify", "--data", str(log_dir))
    assert_clean_failure(res, 1, "STORE_CORRUPT")
    assert res.stdout.splitlines()[-1].startswith("FAILED")
    for command in ("decode", "stats", "rebuild"):
        res = lens("log", command, "--data", str(log_dir))
        assert res.returncode in (1, 2), command  # 2 when opening already fails
        assert_clean_failure(res, res.returncode, "STORE_CORRUPT")


def test_a_damaged_page_past_the_start_is_reported_by_seq(log_dir: Path) -> None:
    # Overwrite one page of the events table in the middle of the file: open works, the read
    # reaching it fails. decode prints the rows before it; verify lists integrity problems.
    conn = apsw.Connection(str(log_dir / "events.db"))
    (page_size,) = conn.execute("PRAGMA page_size").fetchall()[0]
    (pages,) = conn.execute("PRAGMA page_count").fetchall()[0]
    conn.close()
    with (log_dir / "events.db").open("r+b") as f:
        f.seek(page_size * (pages // 2))
        f.write(b"\xff" * 64)
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert any(line.startswith("log: SQLITE_INTEGRITY: sqlite integrity_check") for line in res.stdout.splitlines())
    res = lens("log", "decode", "--data", str(log_dir))
    assert "Traceback" not in res.stderr
    if res.returncode == 1:  # the damaged page held rows (not only index entries)
        assert "STORE_CORRUPT" in res.stderr or "EVENT_CORRUPT" in res.stderr


@pytest.mark.parametrize(
    "edit, words",
    [
        ("DROP TABLE events", "has no events table"),
        ("DROP TABLE dictionaries", "has no dictionaries table"),
        ("ALTER TABLE events RENAME COLUMN raw_size TO rs", "events table lacks column(s) raw_size"),
    ],
)
def test_a_reshaped_schema_under_a_valid_marker_is_named(log_dir: Path, edit: str, words: str) -> None:
    edit_log(log_dir, edit)
    for command in ("decode", "verify", "stats", "rebuild"):
        res = lens("log", command, "--data", str(log_dir))
        rc = 1 if command == "verify" else 2
        assert_clean_failure(res, rc, "STORE_CORRUPT")
        assert words in res.stderr + res.stdout


def test_events_db_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "events.db").mkdir()
    res = lens("log", "decode", "--data", str(tmp_path))
    assert_clean_failure(res, 2, "STORE_OPEN_FAILED")
    assert "events.db is not a file" in res.stderr


async def test_a_damaged_dictionary_fails_only_its_rows(log_dir: Path, expected: list[tuple]) -> None:
    used, dict_id = await append_one(log_dir, Draft(ModelResponded(text="with the dictionary"), session_id="s1"),
                                     train=True)
    edit_log(log_dir, "UPDATE dictionaries SET data = ? WHERE dict_id = ?", (b"not a dictionary" * 64, dict_id))
    res = await trio.to_thread.run_sync(lens, "log", "verify", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    lines = res.stdout.splitlines()
    assert f"log: DICTIONARY_DAMAGED: dictionary {dict_id} is damaged (the bytes carry dictionary id 0); bodies that need it cannot be decoded" in lines
    assert any(line.startswith(f"seq {used}: EVENT_UNKNOWN_DICTIONARY:") and "damaged" in line for line in lines)
    res = await trio.to_thread.run_sync(lens, "log", "decode", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert [e["seq"] for e in decoded(res.stdout)] == [r[0] for r in expected]  # all but that row
    # The store still opens: new bodies go without the damaged dictionary.
    new, active = await append_one(log_dir, Draft(ModelResponded(text="after"), session_id="s1"))
    assert active == 0
    assert log_rows(log_dir, "SELECT dict_id FROM events WHERE seq = ?", (new,)) == [(0,)]


async def test_a_dictionary_cut_short_fails_only_its_rows(log_dir: Path, expected: list[tuple]) -> None:
    # The first bytes still carry the right id, so the id check alone passes; zstd refuses the
    # dictionary only when a decompressor first loads it, which was a traceback in every command.
    used, dict_id = await append_one(log_dir, Draft(ModelResponded(text="with the dictionary"), session_id="s1"),
                                     train=True)
    edit_log(log_dir, "UPDATE dictionaries SET data = substr(data, 1, 100) WHERE dict_id = ?", (dict_id,))
    before = sha256(log_dir / "events.db")
    res = await trio.to_thread.run_sync(lens, "log", "verify", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert any(line.startswith(f"log: DICTIONARY_DAMAGED: dictionary {dict_id} is damaged (") for line in lines), lines
    assert any(line.startswith(f"seq {used}: EVENT_UNKNOWN_DICTIONARY:") and "damaged" in line for line in lines)
    res = await trio.to_thread.run_sync(lens, "log", "decode", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert [e["seq"] for e in decoded(res.stdout)] == [r[0] for r in expected]  # all but that row
    assert f"lens: EVENT_UNKNOWN_DICTIONARY: seq {used}:" in res.stderr
    res = await trio.to_thread.run_sync(lens, "log", "rebuild", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"seq {used}:" in res.stderr
    with LogReader(log_dir) as reader:
        with pytest.raises(CorruptEvent, match=f"seq {used}: .*damaged"):
            list(reader.events())
    assert sha256(log_dir / "events.db") == before
    # The store still opens and writes: new bodies go without the damaged dictionary.
    new, active = await append_one(log_dir, Draft(ModelResponded(text="after"), session_id="s1"))
    assert active == 0
    assert log_rows(log_dir, "SELECT dict_id FROM events WHERE seq = ?", (new,)) == [(0,)]


def test_an_unknown_kind_with_msgpack_only_values_prints_as_json(log_dir: Path, expected: list[tuple]) -> None:
    seq = expected[-1][0] + 1
    raw = msgspec.msgpack.encode(
        {"kind": "future.kind", "blob": msgspec.msgpack.Ext(5, b"ab"), (1, 2): None, None: [True], True: "t",
         "twins": {1: "int", "1": "str"}, "bools": {True: "bool", "true": "str"}, "floats": [float("nan"), float("inf"), -float("inf"), 1.5]}
    )
    body = zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(raw)
    edit_log(
        log_dir,
        "INSERT INTO events(seq, ts, kind, raw_size, body) VALUES (?, ?, 'future.kind', ?, ?)",
        (seq, expected[-1][1], len(raw), body),
    )
    res = lens("log", "decode", "--data", str(log_dir), "--from", str(seq))
    assert res.returncode == 0, res.stderr
    (ev,) = decoded(res.stdout)
    assert ev["body"] == {
        "blob": {"msgpack_ext": 5, "data": base64.b64encode(b"ab").decode()},
        "[1,2]": None, "null": [True], "true": "t",
        # keys that would read the same as JSON text: the map as pairs (it lost "1" before)
        "twins": {"msgpack_map": [[1, "int"], ["1", "str"]]},
        "bools": {"msgpack_map": [[True, "bool"], ["true", "str"]]},
        "floats": [{"msgpack_float": "NaN"}, {"msgpack_float": "Infinity"}, {"msgpack_float": "-Infinity"}, 1.5],
    }
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.stdout.splitlines()[0] == f"seq {seq}: EVENT_KIND_UNKNOWN: unknown event kind 'future.kind' (decoded as opaque; written by a newer Lens?)"



def test_a_known_kind_with_msgpack_only_values_in_an_any_field_prints_as_json(
    log_dir: Path, expected: list[tuple]
) -> None:
    # tool.finished's structured_content is `Any`: the schema admits an extension value or a map
    # key JSON has no form for, and printing such a row (decode, the events API, SSE) raised
    # TypeError — a traceback in `lens log decode`, while `verify` called the row fine.
    seq = expected[-1][0] + 1
    body, size = zstd_msgpack({"kind": "tool.finished", "call_id": "c1", "name": "read_file",
                               "structured_content": {"blob": msgspec.msgpack.Ext(5, b"ab"), (1, 2): None,
                                                      None: [True], "n": 1}})
    edit_log(log_dir, "INSERT INTO events(seq, ts, kind, raw_size, body) VALUES (?, ?, 'tool.finished', ?, ?)",
            (seq, expected[-1][1], size, body))
    res = lens("log", "decode", "--data", str(log_dir), "--from", str(seq))
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stderr
    (ev,) = decoded(res.stdout)
    assert ev["body"]["structured_content"] == {
        "blob": {"msgpack_ext": 5, "data": base64.b64encode(b"ab").decode()}, "[1,2]": None, "null": [True], "n": 1,
    }
    assert ev["body"]["call_id"] == "c1" and ev["body"]["content"] == [] and ev["body"]["status"] == "ok"
    with LogReader(log_dir) as reader:  # the shape the events API and SSE print
        (se,) = reader.events(after=seq - 1)
        assert json.loads(msgspec.json.encode(se.to_json())) == ev
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 0, res.stdout

def test_session_events_without_a_session_do_not_break_rebuild(log_dir: Path) -> None:
    edit_log(log_dir, "UPDATE events SET session_id = NULL, session_seq = NULL "
                     "WHERE kind IN ('session.created', 'input.submitted')")
    res = lens("log", "rebuild", "--data", str(log_dir))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("rebuilt artifact_names, artifact_types, history, projects, sessions, settings, stats from ")


def _first_line_then_close(*args: str) -> tuple[bytes, int]:
    proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    return first, proc.wait(timeout=60)


def test_a_closed_pipe_keeps_the_exit_code_of_what_failed(log_dir: Path, expected: list[tuple]) -> None:
    edit_log(log_dir, "DELETE FROM events WHERE seq = 2")  # a gap: verify fails
    first, rc = _first_line_then_close("log", "verify", "--data", str(log_dir))
    assert first.startswith(b"seq 3: SEQ_GAP: seq gap") and rc == 1
    edit_log(log_dir, "UPDATE events SET body = x'00' WHERE seq = 1")
    first, rc = _first_line_then_close("log", "decode", "--data", str(log_dir))
    assert json.loads(first)["seq"] == 3 and rc == 1  # seq 1 failed before the reader left


def test_output_that_cannot_be_written_is_an_error(log_dir: Path) -> None:
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "runtime.cli", "log", "decode", "--data", str(log_dir)],
                             stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
    assert res.stderr.startswith("lens: IO_ERROR: No space left on device")
    for command in ("verify", "decode", "stats", "rebuild"):  # (rebuild asked a closed stdout isatty())
        res = subprocess.run([sys.executable, "-m", "runtime.cli", "log", command, "--data", str(log_dir)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60,
                             preexec_fn=lambda: os.close(1))
        assert res.returncode == 2 and "Traceback" not in res.stderr, (command, res.stderr)
        assert res.stderr.startswith("lens: IO_ERROR: standard output is closed"), (command, res.stderr)


def test_with_standard_error_closed_no_error_lands_in_the_output(log_dir: Path, tmp_path: Path) -> None:
    # Started with standard error closed (`2>&-`), Python's sys.stderr is None and print(file=None)
    # writes to standard output: a bad row's error line landed inside decode's JSON lines.
    edit_log(log_dir, "UPDATE events SET body = x'28b52ffd' WHERE seq = 2")
    cases = [
        (("log", "decode", "--data", str(log_dir), "--to", "3"), 1),  # a row's error
        (("log", "decode", "--data", str(log_dir), "--to", "3", "--kind", "nope"), 0),  # a note
        (("log", "decode", "--data", str(tmp_path / "missing")), 2),  # a refusal
    ]
    for args, rc in cases:
        res = subprocess.run([sys.executable, "-m", "runtime.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=60, preexec_fn=lambda: os.close(2))
        assert res.returncode == rc, (args, res.returncode)
        assert b"lens:" not in res.stdout, (args, res.stdout[-300:])
        assert all(json.loads(line)["seq"] in (1, 3) for line in res.stdout.splitlines()), args


def test_rows_with_a_seq_below_one_are_shown_and_named(log_dir: Path, expected: list[tuple]) -> None:
    edit_log(log_dir, "UPDATE events SET seq = -5 WHERE seq = 1")
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines()[:2] == [
        "seq -5: SEQ_NOT_POSITIVE: seq -5 is not positive (seqs start at 1)",
        "seq 2: SEQ_GAP: seq gap: expected 1, found 2",
    ]
    res = lens("log", "decode", "--data", str(log_dir), "--to", "2")
    assert [e["seq"] for e in decoded(res.stdout)] == [-5, 2]
    res = lens("log", "decode", "--data", str(log_dir), "--from", "-10", "--to", "0")
    assert [e["seq"] for e in decoded(res.stdout)] == [-5]


def test_stats_reports_a_bad_row_as_a_log_problem(log_dir: Path) -> None:
    edit_log(log_dir, "UPDATE events SET body = 'text' WHERE seq = 4")
    res = lens("log", "stats", "--data", str(log_dir))
    assert_clean_failure(res, 1, "EVENT_CORRUPT")
    assert "seq 4: the body is stored as text, not as a blob" in res.stderr


@pytest.mark.parametrize("command", ["stats", "rebuild"])
def test_a_damaged_projections_db_says_it_can_be_deleted(log_dir: Path, command: str) -> None:
    hint = "it holds only data derived from the event log: delete it"
    proj = log_dir / "projections.db"
    conn = apsw.Connection(str(proj))
    conn.execute("CREATE TABLE positions(x)")
    conn.close()
    res = lens("log", command, "--data", str(log_dir))
    assert_clean_failure(res, 2, "PROJECTIONS_DAMAGED")
    assert "its positions table has columns x" in res.stderr and hint in res.stderr
    proj.write_bytes(b"garbage" * 1000)
    res = lens("log", command, "--data", str(log_dir))
    assert_clean_failure(res, 2, "PROJECTIONS_DAMAGED")
    assert hint in res.stderr
    proj.unlink()
    res = lens("log", command, "--data", str(log_dir))
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("command", ["stats", "rebuild"])
def test_a_projections_db_that_is_a_directory_is_named_as_such(log_dir: Path, command: str) -> None:
    # Before: `rebuild` said DATA_DIR_NOT_WRITABLE "cannot write …/projections.db (unable to open
    # database file); projections need a writable data directory" of a directory it could write,
    # and `stats` printed its figures with the note "projections.db is not writable here".
    (log_dir / "projections.db").mkdir()
    res = lens("log", command, "--data", str(log_dir))
    assert_clean_failure(res, 2, "PROJECTIONS_DAMAGED")
    assert res.stdout == ""
    assert res.stderr.splitlines() == [
        f"lens: PROJECTIONS_DAMAGED: {log_dir}/projections.db does not match the projections of this Lens "
        f"(it is a directory or another special file, not a database file); it holds only data derived from "
        f"the event log: delete it (with its -wal and -shm files) and run `lens log rebuild`"]
    assert list((log_dir / "projections.db").iterdir()) == []


def test_a_reshaped_projection_table_says_it_can_be_deleted(log_dir: Path) -> None:
    assert lens("log", "stats", "--data", str(log_dir)).returncode == 0
    conn = apsw.Connection(str(log_dir / "projections.db"))
    conn.execute("DROP TABLE stats_kinds; CREATE TABLE stats_kinds(kind TEXT PRIMARY KEY)")
    conn.execute("UPDATE positions SET seq = 0")
    conn.close()
    res = lens("log", "stats", "--data", str(log_dir))
    assert_clean_failure(res, 2, "PROJECTIONS_DAMAGED")
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats")  # and the cure
    assert res.returncode == 0 and lens("log", "stats", "--data", str(log_dir)).returncode == 0


@pytest.mark.parametrize("edit", ["UPDATE positions SET seq = 'abc' WHERE name = 'stats'",
                                  "UPDATE stats_kinds SET events = 'x'"])
def test_values_of_the_wrong_type_in_projections_db_say_it_can_be_deleted(log_dir: Path, edit: str) -> None:
    assert lens("log", "stats", "--data", str(log_dir)).returncode == 0
    conn = apsw.Connection(str(log_dir / "projections.db"))
    conn.execute(edit)  # (a TypeError traceback before)
    conn.close()
    res = lens("log", "stats", "--data", str(log_dir))
    assert_clean_failure(res, 2, "PROJECTIONS_DAMAGED")
    assert "delete it" in res.stderr
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats")  # and the cure
    assert res.returncode == 0 and lens("log", "stats", "--data", str(log_dir)).returncode == 0


def test_a_projection_named_twice_is_rebuilt_once(log_dir: Path) -> None:
    res = lens("log", "rebuild", "--data", str(log_dir), "--projection", "stats", "--projection", "stats")
    assert res.returncode == 0 and res.stdout.startswith("rebuilt stats from ")


def test_an_unknown_kind_filter_is_noted_but_still_matches(log_dir: Path, expected: list[tuple]) -> None:
    res = lens("log", "decode", "--data", str(log_dir), "--kind", "model.response")  # a typo
    assert (res.returncode, res.stdout) == (0, "")
    assert res.stderr == ("lens: note: 'model.response' is not an event kind this Lens knows; "
                          "only rows stored under exactly that name are printed\n")
    seq = expected[-1][0] + 1
    body, raw_size = zstd_msgpack({"kind": "model.response", "x": 1})
    edit_log(log_dir, "INSERT INTO events(seq, ts, kind, raw_size, body) VALUES (?, ?, 'model.response', ?, ?)",
            (seq, expected[-1][1], raw_size, body))
    res = lens("log", "decode", "--data", str(log_dir), "--kind", "model.response,model.responded")
    assert res.returncode == 0 and res.stderr.startswith("lens: note: 'model.response'")
    assert [e["seq"] for e in decoded(res.stdout)][-1] == seq


# ---------------------------------------------------------------------------- hostile input, round 2


def _insert_raw(data_dir: Path, seq: int, ts: int, kind: str, raw: bytes, **cols: object) -> None:
    body = zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(raw)
    names = ", ".join(["seq", "ts", "kind", "raw_size", "body", *cols])
    marks = ", ".join("?" * (5 + len(cols)))
    edit_log(data_dir, f"INSERT INTO events({names}) VALUES ({marks})", (seq, ts, kind, len(raw), body, *cols.values()))


@pytest.mark.parametrize("kind", ["model.responded", "future.kind"])
def test_a_deeply_nested_body_fails_its_row_only(log_dir: Path, expected: list[tuple], kind: str) -> None:
    seq = expected[-1][0] + 1
    nested = b"\x91" * 5000 + b"\xc0"  # 5,000 arrays, one inside the next
    raw = b"\x82" + msgspec.msgpack.encode("kind") + msgspec.msgpack.encode(kind) + msgspec.msgpack.encode("x") + nested
    _insert_raw(log_dir, seq, expected[-1][1], kind, raw, session_id="s9", session_seq=1)
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"seq {seq}: EVENT_CORRUPT: " in res.stdout and "nests too deeply to decode" in res.stdout
    res = lens("log", "decode", "--data", str(log_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "nests too deeply to decode" in res.stderr
    assert len(decoded(res.stdout)) == len(expected)
    res = lens("log", "rebuild", "--data", str(log_dir))
    assert_clean_failure(res, 1, "EVENT_CORRUPT")


def test_a_huge_raw_size_is_a_bad_row_for_stats(log_dir: Path) -> None:
    edit_log(log_dir, "UPDATE events SET raw_size = ? WHERE seq IN (5, 9)", (2**63 - 1,))
    res = lens("log", "stats", "--data", str(log_dir))
    assert_clean_failure(res, 1, "EVENT_CORRUPT")
    assert f"seq 5: raw_size {2**63 - 1} is outside 1..33554432" in res.stderr


@pytest.mark.parametrize("name", ["A%2Fsub", "p%20x", "h#frag", "q?mode=rw"])
def test_data_dirs_with_uri_characters_are_read_as_named(pristine: Path, tmp_path: Path, name: str) -> None:
    data = tmp_path / name
    shutil.copytree(pristine, data)
    (tmp_path / "A").mkdir()  # a decoy that `A%2Fsub` would reach if the path were a URI
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 0 and res.stdout.startswith("ok: "), res.stderr
    res = lens("log", "stats", "--data", str(data), "--json")
    assert res.returncode == 0 and (data / "projections.db").exists()


def test_a_path_longer_than_sqlite_opens_is_named(pristine: Path, tmp_path: Path) -> None:
    deep = tmp_path
    while len(str(deep)) < 560:
        deep = deep / ("d" * 60)
    shutil.copytree(pristine, deep / "data")
    res = lens("log", "decode", "--data", str(deep / "data"))
    assert_clean_failure(res, 2, "STORE_OPEN_FAILED")
    assert "SQLite opens paths of up to 511 bytes" in res.stderr


@pytest.mark.parametrize("extra", [0, 1])
def test_a_path_is_refused_when_its_journal_would_not_fit(pristine: Path, tmp_path: Path, extra: int) -> None:
    # SQLite opens "<events.db>-journal" too: an events.db path of 504-511 bytes opened, then
    # failed as "permission denied". At most 511 - 8 = 503 bytes now, and one more is named.
    want = 503 + extra - len("/data/events.db")
    deep = tmp_path
    while want - len(str(deep)) > 62:  # leaves room for "/" and at least one more byte
        deep = deep / ("d" * 60)
    deep = deep / ("e" * (want - len(str(deep)) - 1))  # (a 0-byte name would add nothing)
    assert len(str(deep / "data" / "events.db")) == 503 + extra
    shutil.copytree(pristine, deep / "data")
    res = lens("log", "verify", "--data", str(deep / "data"))
    if extra:
        assert_clean_failure(res, 2, "STORE_OPEN_FAILED")
        assert "is 504 bytes long" in res.stderr and "at most 503" in res.stderr
    else:
        assert res.returncode == 0 and res.stdout.startswith("ok: "), res.stderr


@pytest.mark.parametrize("side", ["-journal", "-wal", "-shm"])
def test_a_fifo_beside_events_db_is_named_not_waited_on(log_dir: Path, side: str) -> None:
    (log_dir / f"events.db{side}").unlink(missing_ok=True)  # (the copied log may have one)
    os.mkfifo(log_dir / f"events.db{side}")  # SQLite's open read it and blocked for ever
    for command in ("verify", "decode", "stats"):
        res = lens("log", command, "--data", str(log_dir))
        assert_clean_failure(res, 2, "STORE_OPEN_FAILED")
        assert f"events.db{side} is not a regular file" in res.stderr


def test_an_events_table_rebuilt_without_an_integer_key_is_named(log_dir: Path) -> None:
    edit_log(log_dir, "ALTER TABLE events RENAME TO old_events")
    edit_log(log_dir, "CREATE TABLE events AS SELECT * FROM old_events")  # seq loses its key
    edit_log(log_dir, "UPDATE events SET seq = 'x' WHERE seq = 3")
    for command in ("decode", "verify", "stats", "rebuild"):
        res = lens("log", command, "--data", str(log_dir))
        assert_clean_failure(res, 1 if command == "verify" else 2, "STORE_CORRUPT")
        assert "events.seq is not the table's INTEGER PRIMARY KEY" in res.stderr + res.stdout


def test_many_kind_values_are_bounded(log_dir: Path) -> None:
    res = lens("log", "decode", "--data", str(log_dir), "--kind", ",".join(["input.submitted"] * 5000))
    assert res.returncode == 0 and res.stderr == ""  # repeats count once
    many = ",".join(f"k{i}" for i in range(1001))
    res = lens("log", "decode", "--data", str(log_dir), "--kind", many)
    assert res.returncode == 2 and "at most 1000 different --kind values" in res.stderr
    # a usage error like any other: the command's usage first (it was the message alone)
    assert res.stderr.startswith("usage: lens log decode ") and res.stdout == "", res.stderr
    res = lens("log", "decode", "--data", str(log_dir), "--kind", ",".join(f"k{i}" for i in range(1000)))
    assert res.returncode == 0 and "Traceback" not in res.stderr


def test_an_events_db_link_to_nowhere_is_named(tmp_path: Path) -> None:
    (tmp_path / "events.db").symlink_to(tmp_path / "gone.db")
    res = lens("log", "verify", "--data", str(tmp_path))
    assert_clean_failure(res, 2, "STORE_OPEN_FAILED")
    assert "is a symbolic link to" in res.stderr and "does not lead to a file" in res.stderr


def test_a_data_dir_link_to_nowhere_is_named(tmp_path: Path) -> None:
    # `lens serve --data LINK` said "cannot create data directory LINK: File exists".
    link = tmp_path / "data"
    link.symlink_to(tmp_path / "gone")
    res = lens("log", "verify", "--data", str(link))
    assert_clean_failure(res, 2, "STORE_OPEN_FAILED")
    assert f"data directory {link} is a symbolic link to {tmp_path / 'gone'}, which does not lead" in res.stderr
    with pytest.raises(StoreOpenError, match="is a symbolic link to .* which does not lead to a directory"):
        EventStore.open(link)  # (as `lens serve` opens it)
    assert not (tmp_path / "gone").exists()


def test_an_empty_events_db_is_a_log_not_yet_written(tmp_path: Path) -> None:
    # The daemon makes events.db empty (0600) before SQLite writes the log's tables: one that
    # stopped in between left a 0-byte file, which `lens log` called "not a Lens event log"
    # while `lens serve` started a log in it -- readable by all when someone else made the file.
    data = tmp_path / "data"
    data.mkdir()
    (data / "events.db").touch(mode=0o644)
    os.chmod(data / "events.db", 0o644)
    for command in ("verify", "stats", "decode"):
        res = lens("log", command, "--data", str(data))
        assert_clean_failure(res, 2, "DATA_DIR_MISSING")
        assert f"{data / 'events.db'} is empty: no event log has been written to it yet" in res.stderr
    EventStore.open(data).close()  # (as `lens serve` opens it)
    assert os.stat(data / "events.db").st_mode & 0o777 == 0o600
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 0, res.stderr


def test_a_hot_rollback_journal_is_not_read_past(log_dir: Path) -> None:
    # A log switched out of WAL by hand, then a write that crashed midway: its rollback journal is
    # "hot". A read-only reader cannot roll it back, and reading past it would show changes that
    # never committed (here: every ts rewritten), so it must refuse and say how to recover.
    crash = (
        "import apsw, os, sys\n"
        "c = apsw.Connection(sys.argv[1])\n"
        "c.execute('PRAGMA journal_mode=DELETE').fetchall()\n"
        "c.execute('PRAGMA cache_size=1')\n"  # spill dirty pages into the file before commit
        "c.execute('BEGIN')\n"
        "c.execute('UPDATE events SET ts = 1000000000000')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", crash, str(log_dir / "events.db")], check=True, timeout=60)
    assert (log_dir / "events.db-journal").stat().st_size > 0
    for command in ("verify", "decode"):
        res = lens("log", command, "--data", str(log_dir))
        assert_clean_failure(res, 2, "STORE_NEEDS_RECOVERY")
        assert "rollback journal of a write that was interrupted" in res.stderr
    assert not any(e["ts"] == 1000000000000 for e in decoded(res.stdout))


def test_meta_oddities_are_foreign_or_read_as_meant(log_dir: Path) -> None:
    # meta rebuilt by hand without column types, the version stored as a number
    edit_log(log_dir, "ALTER TABLE meta RENAME TO old_meta")
    edit_log(log_dir, "CREATE TABLE meta(key PRIMARY KEY, value)")
    edit_log(log_dir, "INSERT INTO meta SELECT key, CASE key WHEN 'format_version' THEN 1 ELSE value END FROM old_meta")
    assert log_rows(log_dir, "SELECT typeof(value) FROM meta WHERE key = 'format_version'") == [("integer",)]
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    edit_log(log_dir, "DROP TABLE meta")
    edit_log(log_dir, "CREATE TABLE meta(key TEXT, value TEXT)")  # no primary key: a key can repeat
    edit_log(log_dir, "INSERT INTO meta SELECT * FROM old_meta")
    edit_log(log_dir, "INSERT INTO meta VALUES ('format', 'other')")
    res = lens("log", "verify", "--data", str(log_dir))
    assert_clean_failure(res, 2, "STORE_FOREIGN")


def test_verify_invents_no_session_gap_after_a_mistyped_session_seq(log_dir: Path) -> None:
    (seq, sid) = log_rows(log_dir, "SELECT seq, session_id FROM events WHERE session_id = 's2' ORDER BY seq LIMIT 1 OFFSET 2")[0]
    edit_log(log_dir, "UPDATE events SET session_seq = 'three' WHERE seq = ?", (seq,))
    res = lens("log", "verify", "--data", str(log_dir))
    lines = res.stdout.splitlines()
    assert res.returncode == 1 and len(lines) == 2, lines
    assert lines[0].startswith(f"seq {seq}: EVENT_CORRUPT: column session_seq")


@pytest.mark.parametrize("command", ["stats", "rebuild"])
def test_damage_met_midway_is_the_logs_problem_for_projections(log_dir: Path, command: str) -> None:
    conn = apsw.Connection(str(log_dir / "events.db"))
    (page_size,) = conn.execute("PRAGMA page_size").fetchall()[0]
    (root,) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'events'").fetchall()[0]
    conn.close()
    with (log_dir / "events.db").open("r+b") as f:
        f.seek(page_size * (root - 1))
        header = f.read(12)
    assert header[0] == 0x05, "the events table's root should be an interior page"  # 0x05: interior table
    right_most = int.from_bytes(header[8:12], "big")  # its last leaf: the rows at the log's end
    with (log_dir / "events.db").open("r+b") as f:
        f.seek(page_size * (right_most - 1))
        f.write(b"\xff" * 16)
    res = lens("log", command, "--data", str(log_dir))
    assert_clean_failure(res, 1, "STORE_CORRUPT")


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
def test_ctrl_c_exits_130_without_a_traceback(pristine: Path, delay: float) -> None:
    # A real SIGINT to the console script: the command ends saying so (130), or had already finished
    # (0). The signal is sent `delay` after the command opened the store (apsw's library mapped in
    # the process): sent earlier it may land in the interpreter's own start-up (the site import, a
    # "Fatal Python error", exit 1), before any code of ours runs — which a loaded machine stretched
    # past 0.1 s. The deterministic sweep below covers every stage of the command itself.
    proc = subprocess.Popen([str(lens_script()), "log", "decode", "--data", str(pristine)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    maps, deadline = Path(f"/proc/{proc.pid}/maps"), time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if "apsw" in maps.read_text():
                break
        except OSError:  # (the process ended meanwhile)
            break
        time.sleep(0.002)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    # (-SIGINT: the interpreter was finalizing, after main() returned, and had put back the
    # default handler)
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    if proc.returncode == 130:  # the interruption is said, with its code
        assert err == INTERRUPTED, err


def test_ctrl_c_at_every_stage_of_a_command_exits_130(pristine: Path) -> None:
    # The deterministic sweep of the whole of `lens log decode`: every point ends 130, saying so.
    for _ in ctrl_c_sweep(["log", "decode", "--data", str(pristine)]):
        pass


# `lens log stats` whose command is COMMAND, a body using `ctrl_c()`, which delivers a Ctrl-C as a
# real SIGINT is (through the handler installed), and `redelivered()`, which runs Python until the Ctrl-C's re-delivery has come (SIGALRM's handler
# re-armed the timer: `getitimer` shows it rise), within 5 s, without counting on wall time. (A
# rise of more than 1 ms: Linux reports a timer due but not yet signalled as 1 µs, after 0.)
_CTRL_C_IN_A_COMMAND = r"""
import os, signal, sys, time, weakref
import runtime.logcli
from runtime.cli import main
def ctrl_c():
    signal.getsignal(signal.SIGINT)(signal.SIGINT, sys._getframe(1))
def redelivered():
    last, until = signal.getitimer(signal.ITIMER_REAL)[0], time.monotonic() + 5
    while time.monotonic() < until:
        now = signal.getitimer(signal.ITIMER_REAL)[0]
        if now > last + 0.001:
            return
        last = now
    raise AssertionError("no re-delivery within 5 s")
def command(args):
COMMAND
    return 0
runtime.logcli.cmd_stats = command
sys.exit(main(["log", "stats", "--data", sys.argv[1]]))
"""


def _ctrl_c_in_a_command(body: str, data: Path) -> subprocess.CompletedProcess[str]:
    script = _CTRL_C_IN_A_COMMAND.replace("COMMAND", "\n".join(f"    {line}" for line in body.splitlines()))
    return subprocess.run([sys.executable, "-c", script, str(data)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)


def test_ctrl_c_inside_importlibs_lock_callback_is_not_lost(pristine: Path) -> None:
    # The command sends Ctrl-C to its own process while importlib's module-lock callback runs (a
    # callback of that code's name and file, as the garbage collector runs it in any import):
    # Python drops what a callback raises, so Python's own handler lost this Ctrl-C ("Exception
    # ignored in …" on stderr, and the command ran on to its end).
    body = """\
ns = {"os": os}
exec(compile("def cb(ref):\\n    os.kill(os.getpid(), 2)\\n    n = 0\\n    while n < 200000:\\n        n += 1\\n",
             "<frozen importlib._bootstrap>", "exec"), ns)
class Held: pass
held = Held()
ref = weakref.ref(held, ns["cb"])
del held  # (the callback runs here, and the Ctrl-C arrives inside it)
until = time.monotonic() + 5
while time.monotonic() < until:
    time.sleep(0.001)
print("RAN ON", file=sys.stderr)"""
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (130, INTERRUPTED)


def test_a_ctrl_c_dropped_as_the_command_ends_still_stops_it(pristine: Path) -> None:
    # Python drops what a finalizer raises ("Exception ignored in …"); dropped in the command's last
    # instant, before its re-delivery 10 ms later, the Ctrl-C stops the command as it ends, and no
    # SIGALRM comes after (the default action: "Alarm clock", -14).
    body = ("class Dropping:\n    def __del__(self):\n        ctrl_c()\n"
            "Dropping()")
    res = _ctrl_c_in_a_command(body, pristine)
    assert res.returncode == 130, (res.returncode, res.stderr)
    assert res.stderr.startswith("Exception ignored in") and res.stderr.endswith(INTERRUPTED), res.stderr


def test_log_puts_python_s_ctrl_c_handlers_back_when_main_returns(log_dir: Path) -> None:
    # main() left its handlers installed: a real Ctrl-C in the interpreter's shutdown after the
    # command armed the re-delivery, and its SIGALRM, the handler reset by then, killed the
    # process with "Alarm clock" (-14).
    # (a private copy: `log stats` may write beside the log the module's other tests copy)
    assert handlers_after_main(["log", "stats", "--data", str(log_dir)]) == "AFTER True True True"


def test_a_ctrl_c_on_its_way_is_not_delivered_again(pristine: Path) -> None:
    # Code that takes a Ctrl-C to clean up and raises it on (the rebuild's rollback, with its note)
    # may take longer than the re-delivery's 10 ms: the Ctrl-C is not raised again inside it, which
    # would cut the clean-up short and lose the note.
    body = ("try:\n    try:\n        ctrl_c()\n    finally:\n        redelivered()\n"
            "except KeyboardInterrupt:\n    redelivered()\n    raise KeyboardInterrupt('cleaned up') from None")
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (130, "lens: INTERRUPTED: stopped by Ctrl-C (SIGINT); cleaned up\n")


def test_a_ctrl_c_on_its_way_is_seen_past_an_exceptions_cause(pristine: Path) -> None:
    # The clean-up of a Ctrl-C handles an error raised from another (`raise … from …`): the Ctrl-C
    # is its context, not its cause, and is still on its way.
    body = ("try:\n    ctrl_c()\nexcept KeyboardInterrupt:\n    try:\n"
            "        raise ValueError('in the clean-up') from TypeError('its cause')\n    except ValueError:\n"
            "        redelivered()\n    raise KeyboardInterrupt('cleaned up') from None")
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (130, "lens: INTERRUPTED: stopped by Ctrl-C (SIGINT); cleaned up\n")

def test_a_ctrl_c_is_not_delivered_again_into_a_generators_clean_up(pristine: Path) -> None:
    # A generator the Ctrl-C leaves behind is closed as it unwinds (`LogReader.events()`' pages
    # join their thread): its clean-up handles a GeneratorExit with no KeyboardInterrupt in sight,
    # and a re-delivery raised there was dropped with "Exception ignored in: <generator …>" and
    # its traceback on stderr before INTERRUPTED.
    body = ("def pages():\n    try:\n        yield 1\n        yield 2\n    finally:\n        redelivered()\n"
            "for page in pages():\n    ctrl_c()")
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (130, INTERRUPTED)


def test_a_ctrl_c_is_not_delivered_again_into_a_finalizer(pristine: Path) -> None:
    # An object the Ctrl-C leaves behind is finalized as it unwinds: Python drops what its
    # `__del__` raises, so a re-delivery there said "Exception ignored in" and its traceback.
    body = "class Slow:\n    def __del__(self):\n        redelivered()\n[Slow(), ctrl_c()]  # (the Slow goes as the Ctrl-C unwinds)"
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (130, INTERRUPTED)


def test_a_ctrl_c_is_not_delivered_again_into_a_weakref_finalize_callback(pristine: Path) -> None:
    # An object the Ctrl-C leaves behind runs its `weakref.finalize` as it unwinds (as a
    # `tempfile.TemporaryDirectory` removes its tree): Python drops what the callback raises, so a
    # re-delivery there said "Exception ignored in: <finalize object …>" and its traceback.
    body = ("class Held:\n    pass\ndef held():\n    obj = Held()\n    weakref.finalize(obj, redelivered)\n"
            "    return obj\n[held(), ctrl_c()]  # (the Held goes as the Ctrl-C unwinds)")
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (130, INTERRUPTED)


def test_a_weakref_finalize_called_by_the_command_is_interrupted_by_a_dropped_ctrl_c(pristine: Path) -> None:
    # Called by the command itself (`finalize()`, to run a clean-up early; `TemporaryDirectory.cleanup()`
    # instead detaches its finalizer and removes the tree itself) its callback is ordinary code, whose exception reaches its caller: a Ctrl-C dropped before it is
    # delivered again there, not held off until it returns.
    body = ("class Held:\n    pass\nheld = Held()\ndef dropped():\n    try:\n        ctrl_c()\n"
            "    except KeyboardInterrupt:\n        pass\n    redelivered()\n    print('RAN ON', file=sys.stderr)\n"
            "weakref.finalize(held, dropped)()\nprint('RAN ON', file=sys.stderr)")
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (130, INTERRUPTED)


def test_a_ctrl_c_delivered_again_into_a_bare_weakref_callback_still_stops_the_command(pristine: Path) -> None:
    # A bare `weakref.ref(obj, callback)`'s callback is not told apart from a call (nothing in its
    # frame says the garbage collector ran it): a re-delivery there is dropped, with its block on
    # stderr, and the Ctrl-C on its way still ends the command, once.
    body = ("refs = []\nclass Held:\n    pass\ndef held():\n    obj = Held()\n"
            "    refs.append(weakref.ref(obj, lambda ref: redelivered()))\n    return obj\n"
            "[held(), ctrl_c()]  # (the Held goes as the Ctrl-C unwinds)")
    res = _ctrl_c_in_a_command(body, pristine)
    assert res.returncode == 130, (res.returncode, res.stderr)
    assert res.stderr.startswith("Exception ignored in: <function ") and DROPPED_ONCE.fullmatch(res.stderr), res.stderr

def test_a_ctrl_c_reported_as_an_io_error_ends_with_that_error_alone(pristine: Path) -> None:
    # Code that takes a Ctrl-C and raises another error reports that error: its message and its
    # code, 2, without INTERRUPTED after it and 130 (the re-delivery, armed still, was taken for
    # a Ctrl-C dropped as the command ended).
    body = "try:\n    ctrl_c()\nexcept KeyboardInterrupt:\n    raise OSError(5, 'the disk went away')"
    res = _ctrl_c_in_a_command(body, pristine)
    assert (res.returncode, res.stderr) == (2, "lens: IO_ERROR: the disk went away\n")


def test_a_defect_while_a_ctrl_c_unwinds_ends_as_a_defect(pristine: Path) -> None:
    # A defect in a clean-up the Ctrl-C runs: its traceback and 1 (docs/errors.md), nothing after.
    body = "try:\n    ctrl_c()\nfinally:\n    1 / 0"
    res = _ctrl_c_in_a_command(body, pristine)
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert res.stderr.endswith("ZeroDivisionError: division by zero\n"
                               "lens: INTERNAL: ZeroDivisionError (a defect of Lens; the traceback is above)\n"), res.stderr
    assert "INTERRUPTED" not in res.stderr, res.stderr


@pytest.mark.parametrize("where", [
    # msgspec's C module imports `datetime` unchecked: a KeyboardInterrupt inside that import was
    # swallowed and the first Struct decoder built afterwards dereferenced a missing datetime API
    # (SIGSEGV, exit -11). main() now loads datetime before anything can import msgspec.
    'code.co_filename.endswith("datetime.py")',
    # Python 3.11 wraps an exception raised in a descriptor's __set_name__ (a dataclass field's,
    # called as its class is made at import) in "RuntimeError: Error calling __set_name__": a
    # Ctrl-C landing there printed that traceback and exited 1.
    'code.co_name == "__set_name__" and code.co_filename.endswith("dataclasses.py")',
    # msgspec's C code, building a Struct's decoder at import (projections/session_state.py's
    # _snap_decoder), hashes `typing` objects and clears what that raises: a Ctrl-C there was
    # dropped and `decode` ran to its end with 0. It comes again 10 ms later, out of that code.
    'code.co_name == "__hash__" and code.co_filename.endswith("typing.py")'
    ' and frame.f_back.f_code.co_filename.endswith("session_state.py")',
], ids=["while-datetime-loads", "while-a-class-takes-its-fields", "while-msgspec-builds-a-decoder"])
def test_ctrl_c_where_python_itself_gets_in_the_way_exits_130(pristine: Path, where: str) -> None:
    res = interrupted_where(where, ["log", "decode", "--data", str(pristine)])
    assert res.returncode == 130 and res.stderr == INTERRUPTED, (res.returncode, res.stderr)


def _content(db: Path) -> list[str]:
    """Every schema entry and row of a SQLite file, as SQL text."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_ctrl_c_during_a_rebuild_says_so_and_changes_nothing(log_dir: Path) -> None:
    # Ctrl-C ended every command with 130 and nothing said: a rebuild stopped that way left its
    # user to guess whether the projections were now half-built. The rebuild is one transaction;
    # the interruption is said, with what the rebuild left.
    assert lens("log", "rebuild", "--data", str(log_dir)).returncode == 0
    before = _content(log_dir / "projections.db"), _content(log_dir / "events.db")
    # interrupted once the projections' tables are dropped and refolding has begun
    where = 'code.co_name == "_apply" and code.co_filename.endswith("projector.py")'
    res = interrupted_where(where, ["log", "rebuild", "--data", str(log_dir)])
    assert res.returncode == 130 and res.stdout == "", (res.returncode, res.stdout, res.stderr)
    assert res.stderr == ("lens: INTERRUPTED: stopped by Ctrl-C (SIGINT); the rebuild changed nothing "
                          "(the projections are as they were)\n"), res.stderr
    assert (_content(log_dir / "projections.db"), _content(log_dir / "events.db")) == before


def test_an_unreadable_wal_is_named_not_blamed_on_the_directory(log_dir: Path) -> None:
    # Committed frames in a WAL this user cannot read, in a directory it can write: the problem
    # is the WAL's permissions (the old message said the directory needed write access).
    wal = log_dir / "events.db-wal"
    wal.write_bytes(b"\0" * 32)  # frames or not, an unreadable non-empty WAL cannot be trusted
    prefix = _unprivileged()
    wal.chmod(0)
    try:
        res = subprocess.run([*prefix, sys.executable, "-m", "runtime.cli", "log", "verify", "--data", str(log_dir)],
                             capture_output=True, text=True, timeout=60)
    finally:
        wal.chmod(0o644)
    assert_clean_failure(res, 2, "DATA_DIR_NOT_READABLE")
    assert f"cannot read {wal}" in res.stderr and "write access" not in res.stderr


def test_a_shm_file_that_is_not_a_file_is_named_not_called_damage(log_dir: Path) -> None:
    # SQLite fails with a bare "disk I/O error"; the log itself is fine, so it must not be
    # reported as damaged (with advice to restore a backup).
    shm = log_dir / "events.db-shm"
    shm.unlink(missing_ok=True)
    os.mkfifo(shm)
    res = lens("log", "verify", "--data", str(log_dir))
    assert_clean_failure(res, 2, "STORE_OPEN_FAILED")
    assert "STORE_CORRUPT" not in res.stdout + res.stderr
    assert f"{shm} is not a regular file" in res.stderr


# --------------------------------------------------------------------------- terminal safety

FORGED = "x\r\x1b[2K\nok: 1 event(s) verified\n\x1b[8m"


def test_what_the_log_holds_cannot_act_on_the_terminal(log_dir: Path, tmp_path: Path) -> None:
    """Ids, kinds and file names come from files anyone may have edited: a session id carrying
    a carriage return and escape sequences forged an `ok:` line in `verify` and hid `FAILED`;
    a kind set the terminal title in the `stats` table. Printed escaped now, as `pair list` does."""
    conn = apsw.Connection(str(log_dir / "events.db"))
    try:
        with conn:
            conn.execute("UPDATE events SET session_id = ?, session_seq = 5 WHERE seq = 3", (FORGED,))
            conn.execute("UPDATE events SET kind = ? WHERE seq = 4", ("\x1b]0;pwned\x07\u202e",))
    finally:
        conn.close()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes\x1b[31m.txt").write_text("x")
    for res in (lens("log", "verify", "--data", str(log_dir)), lens("log", "stats", "--data", str(log_dir)),
                lens("log", "stats", "--data", str(log_dir), "--json"), lens("log", "verify", "--data", str(foreign))):
        out = res.stdout + res.stderr
        assert "Traceback" not in out
        # (JSON output escapes controls itself and carries other text as it is: it is data)
        for bad in ("\x1b", "\r", "\x07") + (() if res.args[-1] == "--json" else ("\u202e",)):
            assert bad not in out, (bad, out[-300:])
    verify = lens("log", "verify", "--data", str(log_dir))
    assert verify.returncode == 1
    lines = verify.stdout.splitlines()
    assert lines[-1].startswith("FAILED:") and not any(line.startswith("ok:") for line in lines)
    assert "x\\u000d\\u001b[2K\\u000aok: 1 event(s) verified" in verify.stdout
    assert "\\u001b]0;pwned\\u0007\\u202e" in lens("log", "stats", "--data", str(log_dir)).stdout
    assert "notes\\u001b[31m.txt" in lens("log", "verify", "--data", str(foreign)).stderr



def test_a_read_only_projections_db_is_named(log_dir: Path) -> None:
    """SQLite opens a file it may not write read-only and fails at the first write: `rebuild`
    said `SQLITE_ERROR: attempt to write a readonly database`, naming nothing."""
    assert lens("log", "stats", "--data", str(log_dir)).returncode == 0
    expected = lens("log", "stats", "--data", str(log_dir), "--json").stdout
    with unwritable(log_dir / "projections.db"):
        res = lens("log", "rebuild", "--data", str(log_dir))
        assert_clean_failure(res, 2, "DATA_DIR_NOT_WRITABLE")
        assert f"{log_dir / 'projections.db'}" in res.stderr and "read-only" in res.stderr
        # stats still answers, computed without writing (as for a read-only data directory)
        stats = lens("log", "stats", "--data", str(log_dir), "--json")
        assert stats.returncode == 0 and stats.stdout == expected


# ---------------------------------------------------------------------------- the issue's interface


@pytest.mark.parametrize("command", ["decode", "verify", "stats", "rebuild"])
def test_data_is_taken_before_or_after_the_subcommand(log_dir: Path, tmp_path: Path, command: str) -> None:
    """`lens log --data DIR verify` reads DIR as `lens log verify --data DIR` does (it was
    refused as "invalid choice: DIR"); given in both places, the later one wins."""
    after = lens("log", command, "--data", str(log_dir))
    assert after.returncode == 0, after.stderr
    before = lens("log", "--data", str(log_dir), command)
    assert (before.returncode, before.stdout, before.stderr) == (0, after.stdout, after.stderr)
    both = lens("log", "--data", str(tmp_path / "nowhere"), command, "--data", str(log_dir))
    assert (both.returncode, both.stdout) == (0, after.stdout), both.stderr
    missing = lens("log", "--data", str(tmp_path / "nowhere"), command)
    assert_clean_failure(missing, 2, "DATA_DIR_MISSING")
    assert str(tmp_path / "nowhere") in missing.stderr


def _on_a_terminal(*args: str) -> tuple[int, bytes]:
    """Run the CLI with stdout on a pseudo-terminal; return its exit code and what it wrote there."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", *args], stdout=slave,
                                stderr=subprocess.PIPE, env={**os.environ, "TERM": "xterm", "COLUMNS": "100"})
    finally:
        os.close(slave)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    assert err == b"", err
    return proc.wait(timeout=60), out


def test_rebuild_shows_a_progress_bar_on_a_terminal_only(log_dir: Path, expected: list[tuple]) -> None:
    rc, out = _on_a_terminal("log", "rebuild", "--data", str(log_dir))
    assert rc == 0
    assert b"rebuilding" in out and b"\x1b[" in out  # rich's bar, drawn and then cleared
    assert out.rstrip().endswith(f"from {len(expected)} event(s)".encode())
    piped = lens("log", "rebuild", "--data", str(log_dir))
    assert piped.returncode == 0
    assert "rebuilding" not in piped.stdout and "\x1b" not in piped.stdout and "\r" not in piped.stdout
    assert piped.stderr == ""


# ---------------------------------------------------------------------------- a session's numbering


def test_a_session_event_without_session_seq_is_reported_never_left_out(log_dir: Path, expected: list[tuple]) -> None:
    """F-LOG-6: a session's reads walk UNIQUE(session_id, session_seq), where a row whose
    session_seq was edited to NULL lies outside every range: `decode --session` left it out with
    exit 0 (and so did a session's replay and its events route), while `decode` printed it."""
    s1 = [r for r in expected if r[3] == "s1"]
    victim = s1[2][0]
    edit_log(log_dir, "UPDATE events SET session_seq = NULL WHERE seq = ?", (victim,))
    reason = "the event belongs to session 's1' but has no session_seq (the session's numbering was edited)"
    for filters in ([], ["--session", "s1"], ["--session", "s1", "--from", str(victim), "--to", str(victim)],
                    ["--session", "s1", "--raw"]):
        res = lens("log", "decode", "--data", str(log_dir), *filters)
        assert res.returncode == 1, (filters, res.stderr)
        assert res.stderr.splitlines() == [f"lens: EVENT_CORRUPT: seq {victim}: {reason}"], filters
        want = [r[0] for r in (s1 if filters else expected) if r[0] != victim]
        if "--from" in filters:
            want = []
        assert [e["seq"] for e in decoded(res.stdout)] == want, filters
    res = lens("log", "verify", "--data", str(log_dir))
    assert res.returncode == 1
    assert res.stdout.splitlines() == [f"seq {victim}: EVENT_CORRUPT: {reason}",
                                       f"FAILED: 1 problem(s) in {len(expected)} event(s)"]
    for command in ("rebuild", "stats"):
        res = lens("log", command, "--data", str(log_dir))
        assert res.returncode == 1 and res.stderr.startswith(f"lens: EVENT_CORRUPT: seq {victim}: {reason}\n")
    with LogReader(log_dir) as reader:  # the replay path: a session's wake-up, from its start or a snapshot
        for filters in ({}, {"after_session_seq": 1, "after": s1[0][0]}, {"limit": 5}):
            with pytest.raises(CorruptEvent) as info:
                list(reader.events(session_id="s1", **filters))
            assert info.value.seq == victim, filters
        assert [e.seq for e in reader.events(session_id="s1", to=victim - 1)] == [r[0] for r in s1[:2]]
        assert [e.seq for e in reader.events(session_id="s1", after=victim)] == [r[0] for r in s1[3:]]
        assert [e.seq for e in reader.events(session_id="s2")] == [r[0] for r in expected if r[3] == "s2"]


# ---------------------------------------------------------------------------- a damaged format marker


@pytest.mark.parametrize("value", ["' 1'", "'1.0'", "'v1'", "x'31'", "''"])
def test_a_damaged_format_version_is_damage_not_another_release(log_dir: Path, value: str) -> None:
    """F-LOG-5: a version no release writes (' 1', '1.0', bytes) was `STORE_FORMAT_UNSUPPORTED`
    "of format version  1; this Lens reads version 1. Use the Lens release that wrote it": the
    found value unreadable, and advice no release can follow. It is damage to the marker."""
    edit_log(log_dir, f"UPDATE meta SET value = {value} WHERE key = 'format_version'")
    before = sha256(log_dir / "events.db")
    res = lens("log", "decode", "--data", str(log_dir))
    assert_clean_failure(res, 2, "STORE_CORRUPT")
    assert "format version is " in res.stderr and "which no Lens release writes" in res.stderr, res.stderr
    assert "Use the Lens release" not in res.stderr
    res = lens("log", "verify", "--data", str(log_dir))  # damage is verify's finding: 1
    assert res.returncode == 1 and res.stdout.splitlines()[-1] == "FAILED: the log cannot be read"
    assert "log: STORE_CORRUPT: " in res.stdout and "which no Lens release writes" in res.stdout
    with pytest.raises(StoreOpenError) as info:  # the writer (`lens serve`) refuses it the same way
        EventStore.open(log_dir)
    assert info.value.code == "STORE_CORRUPT"
    assert sha256(log_dir / "events.db") == before


# The CLI run with a short SQLite busy timeout (ms): a test that meets a lock on purpose waits it
# out in a fraction of a second, not the 10 s of events.schema.BUSY_TIMEOUT_MS. Set in the child
# before the CLI is imported; projections.projector holds its own binding of the constant.
SHORT_BUSY_TIMEOUT_MS = 200
LENS_SHORT_BUSY = (
    "import sys, events.schema, projections.projector; "
    f"events.schema.BUSY_TIMEOUT_MS = projections.projector.BUSY_TIMEOUT_MS = {SHORT_BUSY_TIMEOUT_MS}; "
    "from runtime.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_database_another_process_holds_locked_is_store_busy(pristine: Path, tmp_path: Path) -> None:
    """A database held in an exclusive lock by another process (SQLite's `locking_mode=EXCLUSIVE`,
    as another tool may leave it) cannot be opened at all. After the busy timeout every command said
    `STORE_OPEN_FAILED: cannot open …: database is locked`, where docs/errors.md and
    storage-format.md promise `STORE_BUSY` (try again when it is done), as for a lock met mid-read.
    The commands run at once with a short busy timeout (:data:`SHORT_BUSY_TIMEOUT_MS`), which each
    waits out before it gives up."""
    copies = {name: tmp_path / name for name in ("events", "projections")}
    for data in copies.values():
        shutil.copytree(pristine, data)
        assert lens("log", "stats", "--data", str(data)).returncode == 0  # projections.db made
    # (hashed first: closing any descriptor of a file drops the POSIX locks this process holds on it)
    before = {name: sha256(data / "events.db") for name, data in copies.items()}
    holders = []
    for name, data in copies.items():
        conn = apsw.Connection(str(data / f"{name}.db"))
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("CREATE TABLE held(x)")  # a write: the lock is taken now, not at commit
        holders.append(conn)
    runs = [("events", command) for command in ("decode", "verify", "stats", "rebuild")]
    runs += [("projections", command) for command in ("stats", "rebuild")]
    try:
        procs = [(name, command, subprocess.Popen(
            [sys.executable, "-c", LENS_SHORT_BUSY, "log", command, "--data", str(copies[name])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for name, command in runs]
        results = [(name, command, proc.communicate(timeout=60), proc.returncode)
                   for name, command, proc in procs]
    finally:
        for conn in holders:
            conn.execute("ROLLBACK")
            conn.close()
    for name, command, (out, err), rc in results:
        assert (rc, out) == (2, ""), (name, command, rc, out, err)
        path = copies[name] / f"{name}.db"
        assert err.splitlines() == [
            f"lens: STORE_BUSY: cannot open {path}: another process holds it locked (SQLite: database is "
            f"locked); try again when it is done"], (name, command)
    assert {name: sha256(data / "events.db") for name, data in copies.items()} == before
