"""``lens log`` through the installed script on what a long name or value does to its output: a
kind longer than the stats table's kind column, and a damaged row or ``meta`` record holding a
value of many kilobytes, which every message naming it quotes in a short line."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
import trio
import zstandard

from events.store import Draft, open_store
from events.types import KIND_TO_TYPE, ContextCompactionFailed, ProjectCreated, SessionCreated

from tests.cli.lens_script import lens, refused, store_corrupt_said
from tests.rawlog import edit_log

LONG = 100_000  # characters of a damaged value: far past what a message line should carry
LINE_MAX = 600  # characters a message line naming such a value stays under
BLOB_SHOWN = repr(b"\x01" * 80)  # (a blob's first 80 bytes, as a message quotes them)
NOT_UTF8_SHOWN = repr(b"\xff" * 40)  # (text that is not UTF-8: its first 40 bytes)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A log of a project and a session whose compaction failed: seq 1 project.created (no
    session), seq 2 session.created, seq 3 context.compaction_failed, each of session s1 but the first."""
    data = tmp_path / "data"

    async def write() -> None:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(ProjectCreated(name="p", workspace="/ws"), project_id="p"))
            env = dict(project_id="p", session_id="s1", agent_id="main")
            await store.append(Draft(SessionCreated(model="faux/faux-1"), **env))
            await store.append(Draft(ContextCompactionFailed(code="NO_TEXT", message="no text"), **env))

    trio.run(write)
    return data


def test_the_stats_table_keeps_its_columns_for_the_longest_kind(data: Path, tmp_path: Path) -> None:
    # The kind column was 24 characters wide, and context.compaction_failed, a kind Lens writes,
    # has 25: its figures stood one column right of every other row's.
    assert max(map(len, KIND_TO_TYPE)) > 24
    res = lens(tmp_path, "log", "stats", "--data", str(data))
    assert (res.returncode, res.stderr) == (0, ""), res.stderr
    header, rule, *rows = res.stdout.splitlines()
    assert [r.split()[0] for r in rows] == ["context.compaction_failed", "project.created", "session.created", "TOTAL"]
    assert len(rule) == len(header) and set(rule) == {"-"}
    ends = [m.end() for m in re.finditer(r"events|bytes|ratio", header)]
    for row in rows:  # every figure ends where its heading ends
        assert len(row) == len(header), (row, header)
        assert [m.end() for m in re.finditer(r"\S+", row)][1:] == ends, (row, header)


def test_a_kind_written_escaped_keeps_the_columns_too(data: Path, tmp_path: Path) -> None:
    # A row's kind with a line break in it (damage) is shown escaped (`\u000a`), longer than the
    # kind itself: the column fits what is shown.
    edit_log(data, "UPDATE events SET kind = ? WHERE seq = 1", ("bad\nkind.with.a.long.name",))
    res = lens(tmp_path, "log", "stats", "--data", str(data))
    assert res.returncode == 0, res.stderr
    header, _rule, *rows = res.stdout.splitlines()
    assert rows[0].startswith("bad\\u000akind.with.a.long.name ")
    assert {len(row) for row in rows} == {len(header)}, res.stdout


def _problem_lines(res_out: str) -> list[str]:
    return [line for line in res_out.splitlines() if line.startswith(("seq ", "lens: ", "log: "))]


def _short_and_named(lines: list[str], said: str) -> None:
    assert lines, "no message"
    for line in lines:
        assert len(line) < LINE_MAX, (len(line), line[:300])
    assert any(said in line for line in lines), (said, [line[:300] for line in lines])


@pytest.mark.parametrize(("edit", "args", "said"), [
    pytest.param("UPDATE events SET ts = ? WHERE seq = 2", ("t" * LONG,),
                 f"column ts holds '{'t' * 80}'… ({LONG} characters), which is not an integer", id="text ts"),
    pytest.param("UPDATE events SET agent_id = ? WHERE seq = 2", (b"\x01" * LONG,),
                 f"column agent_id holds {BLOB_SHOWN}… ({LONG} bytes), which is not text", id="blob agent_id"),
    pytest.param("UPDATE events SET agent_id = CAST(? AS TEXT) WHERE seq = 2", (b"\xff" * LONG,),
                 f"column agent_id holds text that is not valid UTF-8 ({NOT_UTF8_SHOWN}… ({LONG} bytes))",
                 id="agent_id not UTF-8"),
    pytest.param("UPDATE events SET session_id = ?, session_seq = NULL WHERE seq = 2", ("s" * LONG,),
                 f"the event belongs to session '{'s' * 80}'… ({LONG} characters) but has no session_seq",
                 id="session without its number"),
    pytest.param("UPDATE events SET kind = ? WHERE seq = 2", ("k" * 129,),
                 f"row kind '{'k' * 80}'… (129 characters) is no event kind (at most 128", id="kind past 128"),
])
@pytest.mark.parametrize("command", ["verify", "decode", "stats", "rebuild"])
def test_a_long_damaged_column_is_named_in_a_short_line(data: Path, tmp_path: Path, edit: str, args: tuple,
                                                         said: str, command: str) -> None:
    # Each was quoted whole (a line of 100,000 characters, 400,000 for a blob), but for a kind
    # past 128 characters and text that is not UTF-8, which were cut without a word: a kind of 129
    # read as one of 80 refused for being over 128.
    edit_log(data, edit, args)
    res = lens(tmp_path, "log", command, "--data", str(data))
    if command == "stats" and "kind" in edit:  # (stats counts the stored columns only)
        assert res.returncode == 0, res.stderr
        header = res.stdout.splitlines()[0]  # a kind longer than a kind can be does not widen the table
        assert header.index(" events") == len("context.compaction_failed") + 4, header[:200]
        return
    assert res.returncode == 1 and "Traceback" not in res.stderr, (res.returncode, res.stderr[-500:])
    _short_and_named(_problem_lines(res.stdout + res.stderr), said)


@pytest.mark.parametrize("command", ["verify", "decode"])
def test_a_long_kind_a_body_holds_and_a_long_request_id_are_named_in_a_short_line(
        data: Path, tmp_path: Path, command: str) -> None:
    raw = msgspec.msgpack.encode({"kind": "y" * LONG})
    body = zstandard.ZstdCompressor(write_checksum=True).compress(raw)
    edit_log(data, "UPDATE events SET kind = 'future.x', body = ?, raw_size = ? WHERE seq = 3", (body, len(raw)))
    edit_log(data, "UPDATE events SET request_id = ? WHERE seq = 1", ("r" * LONG,))
    res = lens(tmp_path, "log", command, "--data", str(data))
    assert res.returncode == 1, res.stderr[-500:]
    lines = _problem_lines(res.stdout + res.stderr)
    _short_and_named(lines, f"row kind 'future.x' but body holds '{'y' * 80}'… ({LONG} characters)")
    if command == "verify":
        _short_and_named(lines, f"ENVELOPE_INVALID: request_id '{'r' * 80}'… ({LONG} characters) on an event")


@pytest.mark.parametrize(("key", "value", "code", "said"), [
    ("format", "f" * LONG, "STORE_FOREIGN", f"records storage format '{'f' * 80}'… ({LONG} characters), not"),
    ("format_version", "9" * LONG, "STORE_FORMAT_UNSUPPORTED", f"of format version {'9' * 80}… ({LONG} characters);"),
    ("format_version", "x" * LONG, "STORE_CORRUPT",
     f"its format version is '{'x' * 80}'… ({LONG} characters), which"),
])
def test_a_long_format_marker_is_named_in_a_short_line(data: Path, tmp_path: Path, key: str, value: str, code: str,
                                                       said: str) -> None:
    edit_log(data, "UPDATE meta SET value = ? WHERE key = ?", (value, key))
    if code == "STORE_CORRUPT":  # (verify's own finding, on stdout)
        line = store_corrupt_said("verify", data, tmp_path)
    else:
        line = refused(lens(tmp_path, "log", "verify", "--data", str(data)), code)
    _short_and_named([line], said)


@pytest.mark.parametrize(("key", "said"), [
    ("active_dict_id", f"meta active_dict_id is '{'7' * 40}'… ({LONG} characters), not a dictionary id"),
    ("max_event_bytes", f"meta max_event_bytes is '{'7' * 40}'… ({LONG} characters), not a maximum event size"),
])
def test_a_long_meta_record_is_quoted_whole_or_cut_with_its_length(data: Path, tmp_path: Path, key: str,
                                                                   said: str) -> None:
    # These were cut at 40 characters of their repr, the closing quote with them ('7777…7, not).
    edit_log(data, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, "7" * LONG))
    res = lens(tmp_path, "log", "verify", "--data", str(data))
    assert res.returncode == 1, res.stderr
    _short_and_named(_problem_lines(res.stdout), said)
