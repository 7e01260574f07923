"""`lens log decode | rebuild | verify | stats` as an acceptance test drives them: the installed
`lens` script in a subprocess, on a log a real daemon wrote (`lens serve` with the faux
provider, over HTTP), and on copies of it damaged by hand with apsw.

The daemon runs once per module; every test that changes anything works on its own copy.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pty
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest
import trio
import zstandard

from events.store import open_store
from projections.registry import all_projections

from tests.cli.lens_script import lens_script
from tests.daemon.conftest import projection_dump, serving
from tests.rawlog import edit_log, log_rows

CONTRACT_KEYS = {"seq", "ts", "project_id", "session_id", "agent_id", "task_id", "kind", "request_id", "body"}
# Line breaks JSON lets stand in a string, each of them one to str.splitlines.
BREAKS = "a\u2028b\u2029c\x85d"
INPUTS = ("hello", f"split {BREAKS} here")


def lens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lens ARGS`` run by the installed script; stdout and stderr as text, at most 60 s."""
    return subprocess.run([str(lens_script()), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def lines_of(res: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The JSON objects of ``res``'s stdout, read as most scripts read lines."""
    return [json.loads(line) for line in res.stdout.splitlines()]


class DaemonLog(msgspec.Struct):
    data: Path
    session_ids: list[str]
    http_events: list[dict[str, Any]]  # the events route's answers, every session in order


async def _write_with_a_daemon(root: Path) -> DaemonLog:
    async with serving(root, "--model", "faux/faux-1") as (serve, d):
        token = await d.pair("acceptance", strong=True)
        project = await d.project(token, "demo")
        sessions: list[str] = []
        events: list[dict[str, Any]] = []
        for n, text in enumerate(INPUTS):
            sid = (await d.session(token, project["id"]))["id"]
            sessions.append(sid)
            await d.submit(token, sid, f"req-{n}", text)
            await d.wait_idle(token, sid)
            r = await d.get(f"/sessions/{sid}/events?after=0&limit=1000", token)
            assert r.status_code == 200, r.text
            events += r.json()["events"]
        assert await serve.terminate() == 0
    return DaemonLog(root / "data", sessions, events)


@pytest.fixture(scope="module")
def daemon_log(tmp_path_factory: pytest.TempPathFactory) -> DaemonLog:
    return trio.run(_write_with_a_daemon, tmp_path_factory.mktemp("daemon"))


@pytest.fixture
def copy(daemon_log: DaemonLog, tmp_path: Path) -> Path:
    """A private copy of the daemon's data directory (projections.db included)."""
    data = tmp_path / "data"
    shutil.copytree(daemon_log.data, data)
    return data


def digests(data: Path) -> dict[str, str]:
    """SHA-256 of events.db and of a -wal with content (a reader may leave an empty -wal behind;
    -shm is SQLite's index of the WAL, not data: docs/storage-format.md)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(data.iterdir())
            if p.name in ("events.db", "events.db-wal") and p.stat().st_size}


def tables(data: Path) -> dict[str, list[tuple]]:
    """Every table of projections.db (positions too), rows in a canonical order."""
    conn = apsw.Connection(str(data / "projections.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
        return {t: sorted(conn.execute(f'SELECT * FROM "{t}"'), key=repr) for t in names}
    finally:
        conn.close()


# ---------------------------------------------------------------------------- decode


def test_decode_prints_each_event_on_one_line_even_with_line_separators_in_it(daemon_log: DaemonLog) -> None:
    res = lens("log", "decode", "--data", str(daemon_log.data))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    events = lines_of(res)  # (U+2028, U+2029 and U+0085 unescaped split an event into two "lines")
    count = log_rows(daemon_log.data, "SELECT count(*) FROM events")[0][0]
    assert [e["seq"] for e in events] == list(range(1, count + 1))
    assert all(CONTRACT_KEYS <= e.keys() for e in events)
    now = time.time() * 1000
    assert all(type(e["ts"]) is int and now - 600_000 < e["ts"] <= now for e in events)  # UTC milliseconds
    submitted = [e["body"]["content"][0]["text"] for e in events if e["kind"] == "input.submitted"]
    assert submitted == list(INPUTS)
    assert "\\u2028" in res.stdout and "\u2028" not in res.stdout and "\x85" not in res.stdout
    # The events route serves events "shaped as `lens log decode` prints them": the very same.
    assert [e for e in events if e["session_id"] is not None] == daemon_log.http_events


def test_decode_filters_combine_on_a_daemon_log(daemon_log: DaemonLog) -> None:
    data = str(daemon_log.data)
    every = lines_of(lens("log", "decode", "--data", data))
    last = every[-1]["seq"]
    first, second = daemon_log.session_ids

    def seqs(*args: str) -> list[int]:
        res = lens("log", "decode", "--data", data, *args)
        assert res.returncode == 0, res.stderr
        return [e["seq"] for e in lines_of(res)]

    assert seqs("--session", second) == [e["seq"] for e in every if e["session_id"] == second]
    kinds = ("model.requested", "model.responded")
    assert seqs("--kind", kinds[0], "--kind", kinds[1]) == [e["seq"] for e in every if e["kind"] in kinds]
    assert seqs("--kind", ",".join(kinds)) == seqs("--kind", kinds[0], "--kind", kinds[1])
    assert seqs("--from", "3", "--to", "5") == [3, 4, 5]  # inclusive at both ends
    assert seqs("--from", str(last)) == [last]
    assert seqs("--from", str(last + 1)) == []  # past the end: nothing, exit 0
    assert seqs("--from", "5", "--to", "4") == []  # reversed: an empty range
    assert seqs("--from", "-3", "--to", "1") == [1]
    assert seqs("--session", first, "--kind", "input.submitted", "--from", "2", "--to", str(last)) == \
        [e["seq"] for e in every if e["session_id"] == first and e["kind"] == "input.submitted"]
    res = lens("log", "decode", "--data", data, "--kind", "no.such.kind")
    assert (res.returncode, res.stdout) == (0, "")
    assert res.stderr == "lens: note: 'no.such.kind' is not an event kind this Lens knows; only rows stored " \
                         "under exactly that name are printed\n"
    for bad in ("1.5", "x", ""):
        res = lens("log", "decode", "--data", data, "--from", bad)
        assert res.returncode == 2 and res.stdout == "", bad
        assert res.stderr.splitlines()[-1].startswith("lens log decode: USAGE_ERROR: argument --from: "), res.stderr


def test_decode_raw_is_the_envelope_and_the_stored_blob(daemon_log: DaemonLog) -> None:
    res = lens("log", "decode", "--data", str(daemon_log.data), "--raw", "--to", "1")
    assert res.returncode == 0, res.stderr
    (row,) = lines_of(res)
    assert set(row) == CONTRACT_KEYS | {"session_seq", "dict_id", "raw_size", "body_encoding"}
    assert row["body_encoding"] == "zstd+msgpack;base64"
    stored = log_rows(daemon_log.data, "SELECT body FROM events WHERE seq = 1")[0][0]
    assert base64.b64decode(row["body"]) == stored
    assert len(zstandard.ZstdDecompressor().decompress(stored)) == row["raw_size"]


# ---------------------------------------------------------------------------- verify and stats


def test_verify_and_stats_print_one_line_per_problem_and_per_kind(copy: Path) -> None:
    """Hand-edited ids and kinds holding a line separator: every line printed stays one line."""
    first = log_rows(copy, "SELECT min(seq) FROM events WHERE session_seq = 3")[0][0]
    edit_log(copy, "UPDATE events SET session_id = ? WHERE seq = ?", ("ses\u2028x", first))
    before = digests(copy)
    res = lens("log", "verify", "--data", str(copy))
    assert res.returncode == 1 and res.stderr == "", res.stderr
    lines = res.stdout.splitlines()
    assert f"seq {first}: SESSION_SEQ_OUT_OF_ORDER: session ses\\u2028x: session_seq 3, expected 1" in lines, lines
    assert lines[-1].startswith("FAILED: ") and all(line.startswith("seq ") for line in lines[:-1]), lines
    assert digests(copy) == before
    res = lens("log", "decode", "--data", str(copy), "--session", "ses\u2028x")
    assert [e["seq"] for e in lines_of(res)] == [first]

    odd = "odd\u2028kind"  # stats count the stored columns: a kind no writer would store is counted
    edit_log(copy, "UPDATE events SET kind = ? WHERE seq = 1", (odd,))
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):  # (derived data: refolded)
        (copy / name).unlink(missing_ok=True)
    res = lens("log", "stats", "--data", str(copy))
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()
    kinds = [line.split()[0] for line in rows[2:-1]]
    assert "odd\\u2028kind" in kinds and len(rows) == len(kinds) + 3 and rows[-1].startswith("TOTAL"), rows
    res = lens("log", "stats", "--data", str(copy), "--json")
    (figures,) = lines_of(res)
    assert odd in {k["kind"] for k in figures["kinds"]}


def test_verify_on_a_damaged_copy_names_each_seq_and_changes_nothing(copy: Path) -> None:
    last = log_rows(copy, "SELECT max(seq) FROM events")[0][0]
    edit_log(copy, "DELETE FROM events WHERE seq = 4")
    edit_log(copy, "UPDATE events SET body = substr(body, 1, length(body) - 6) WHERE seq = 6")
    raw = msgspec.msgpack.encode({"kind": "future.kind", "value": 1})
    body = zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(raw)
    edit_log(copy, "INSERT INTO events(seq, ts, project_id, kind, raw_size, body) "
                   "SELECT seq + 1, ts, project_id, 'future.kind', ?, ? FROM events WHERE seq = ?", (len(raw), body, last))
    before = digests(copy)
    res = lens("log", "verify", "--data", str(copy))
    assert res.returncode == 1 and res.stderr == "", res.stderr
    lines = res.stdout.splitlines()
    assert "seq 5: SEQ_GAP: seq gap: expected 4, found 5" in lines
    assert any(line.startswith("seq 6: EVENT_CORRUPT: ") for line in lines), lines
    assert any(line.startswith(f"seq {last + 1}: EVENT_KIND_UNKNOWN: unknown event kind 'future.kind'")
               for line in lines), lines
    assert lines[-1] == f"FAILED: {len(lines) - 1} problem(s) in {last} event(s)"
    assert all(line.startswith("seq ") for line in lines[:-1])
    assert digests(copy) == before


def test_stats_that_meet_a_row_they_cannot_count_print_no_figures_and_say_so(copy: Path) -> None:
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (copy / name).unlink(missing_ok=True)
    edit_log(copy, "UPDATE events SET raw_size = 0 WHERE seq = 3")
    for flags in ((), ("--json",)):
        res = lens("log", "stats", "--data", str(copy), *flags)
        assert (res.returncode, res.stdout) == (1, ""), flags
        assert res.stderr.splitlines() == [
            "lens: EVENT_CORRUPT: seq 3: raw_size 0 is outside 1..33554432 (the maximum event size)",
            "lens: no figures printed: the stats projection cannot count this row; restore the log, then run stats "
            "again"], res.stderr


def test_stats_of_an_empty_log_shows_no_ratio(tmp_path: Path) -> None:
    async def make() -> None:
        async with open_store(tmp_path / "data", synchronous="OFF"):
            pass

    trio.run(make)
    res = lens("log", "stats", "--data", str(tmp_path / "data"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1].split() == ["TOTAL", "0", "0", "0", "-"]
    res = lens("log", "stats", "--data", str(tmp_path / "data"), "--json")
    assert lines_of(res) == [{"kinds": [], "total": {"events": 0, "stored_bytes": 0, "raw_bytes": 0,
                                                     "compression_ratio": None}}]


def test_stats_counts_sizes_and_ratio_per_kind(daemon_log: DaemonLog) -> None:
    res = lens("log", "stats", "--data", str(daemon_log.data), "--json")
    (figures,) = lines_of(res)
    want: dict[str, list[int]] = {}
    for kind, body, raw_size in log_rows(daemon_log.data, "SELECT kind, body, raw_size FROM events"):
        w = want.setdefault(kind, [0, 0, 0])
        w[0], w[1], w[2] = w[0] + 1, w[1] + len(body), w[2] + raw_size
    assert {k["kind"]: [k["events"], k["stored_bytes"], k["raw_bytes"]] for k in figures["kinds"]} == want
    assert all(k["compression_ratio"] == round(k["raw_bytes"] / k["stored_bytes"], 3) for k in figures["kinds"])


# ---------------------------------------------------------------------------- rebuild


def test_rebuild_twice_gives_what_the_daemon_kept(copy: Path) -> None:
    """Idempotent: two rebuilds leave the very same tables; and each projection holds what the
    daemon's incremental folding made (read through its dump: the full-text index's internal
    segments depend on how its rows were inserted, not on what they hold)."""
    kept = projection_dump(copy)
    names = sorted(p.name for p in all_projections())
    count = log_rows(copy, "SELECT count(*) FROM events")[0][0]
    rebuilt = []
    for _ in range(2):
        res = lens("log", "rebuild", "--data", str(copy))
        assert (res.returncode, res.stdout, res.stderr) == (0, f"rebuilt {', '.join(names)} from {count} event(s)\n", "")
        assert projection_dump(copy) == kept
        rebuilt.append(tables(copy))
    assert rebuilt[0] == rebuilt[1]


def test_rebuild_each_projection_by_name_and_an_unknown_one(copy: Path) -> None:
    kept = projection_dump(copy)
    names = sorted(p.name for p in all_projections())
    count = log_rows(copy, "SELECT count(*) FROM events")[0][0]
    for name in names:
        res = lens("log", "rebuild", "--data", str(copy), "--projection", name)
        assert (res.returncode, res.stdout) == (0, f"rebuilt {name} from {count} event(s)\n"), res.stderr
    assert projection_dump(copy) == kept
    res = lens("log", "rebuild", "--data", str(copy), "--projection", "nope")
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == f"lens: PROJECTION_UNKNOWN: no projection named 'nope'; known: {', '.join(names)}\n"


def _on_a_terminal(*args: str) -> tuple[int, bytes]:
    """Run ``lens ARGS`` with a pseudo-terminal as its stdin, stdout and stderr."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: nothing but exec (or exit)
        try:
            os.execv(str(lens_script()), [str(lens_script()), *args])
        finally:
            os._exit(127)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out


def test_rebuild_shows_a_progress_bar_on_a_terminal_only(copy: Path) -> None:
    count = log_rows(copy, "SELECT count(*) FROM events")[0][0]
    code, out = _on_a_terminal("log", "rebuild", "--data", str(copy), "--projection", "stats")
    assert code == 0, out
    assert b"rebuilding" in out and f"{count}/{count}".encode() in out, out
    assert out.endswith(f"rebuilt stats from {count} event(s)\r\n".encode()), out
    res = lens("log", "rebuild", "--data", str(copy), "--projection", "stats")  # piped: the summary alone
    assert (res.returncode, res.stdout, res.stderr) == (0, f"rebuilt stats from {count} event(s)\n", "")


def test_stats_folded_before_a_hand_edit_are_recounted_by_a_rebuild(copy: Path) -> None:
    """The daemon's stats projection counted every row; a row deleted afterwards is still counted
    (figures are folded once per row, as documented) until `rebuild --projection stats`."""
    def total() -> dict[str, Any]:
        res = lens("log", "stats", "--data", str(copy), "--json")
        assert res.returncode == 0, res.stderr
        return lines_of(res)[0]["total"]

    count = log_rows(copy, "SELECT count(*) FROM events")[0][0]
    assert total()["events"] == count
    edit_log(copy, "DELETE FROM events WHERE seq = 5")
    assert total()["events"] == count
    res = lens("log", "rebuild", "--data", str(copy), "--projection", "stats")
    assert (res.returncode, res.stdout) == (0, f"rebuilt stats from {count - 1} event(s)\n"), res.stderr
    assert total()["events"] == count - 1
