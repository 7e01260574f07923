"""A session's numbering (``session_seq``) edited out of step with ``seq``: two rows' numbers
swapped, or one made NULL. The writer never does either; a hand edit or a bad restore can. Every
read names the row (``EVENT_CORRUPT`` with its seq) instead of reading the session out of order,
skipping a row, or serving it as if nothing were wrong; ``lens log verify`` reports each row with
a stable code. Real logs in temp dirs, edited behind the writer's back, the real ``lens`` CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from events.errors import CorruptEvent
from events.reader import LogReader
from events.store import Draft, open_store
from events.types import ProjectCreated, SessionCreated, SessionNamed
from tests.rawlog import edit_log, log_rows

EVENTS_PER_SESSION = 12


def lens(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Sessions a and b interleaved: each has EVENTS_PER_SESSION events, numbered 1.. in seq order."""
    data = tmp_path / "data"

    async def main() -> None:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(ProjectCreated(name="p", workspace="/ws"), project_id="p"))
            for i in range(EVENTS_PER_SESSION):
                for s in ("a", "b"):
                    event = SessionCreated(model="faux/m") if i == 0 else SessionNamed(name=f"{s}{i}")
                    await store.append(Draft(event, project_id="p", session_id=s, agent_id=f"{s}-main"))

    trio.run(main)
    return data


def session_rows(data: Path, session: str) -> list[tuple[int, int]]:
    return log_rows(data, "SELECT seq, session_seq FROM events WHERE session_id = ? ORDER BY seq", (session,))


def swap(data: Path, first: tuple[int, int], second: tuple[int, int]) -> None:
    """Swap two rows' session_seq (three statements: UNIQUE(session_id, session_seq) holds at each)."""
    edit_log(data, "UPDATE events SET session_seq = -1 WHERE seq = ?", (first[0],))
    edit_log(data, "UPDATE events SET session_seq = ? WHERE seq = ?", (first[1], second[0]))
    edit_log(data, "UPDATE events SET session_seq = ? WHERE seq = ?", (second[1], first[0]))


@pytest.mark.parametrize("page", [2000, 5, 6])  # one page; the pair inside a page; across two pages
def test_a_session_read_names_a_row_whose_number_was_swapped(data: Path, page: int) -> None:
    rows = session_rows(data, "a")
    swap(data, rows[4], rows[5])  # seq rows[4][0] now holds session_seq 6, rows[5][0] holds 5
    with LogReader(data) as reader:
        read: list[int] = []
        with pytest.raises(CorruptEvent) as info:
            for event in reader.events(session_id="a", page=page):
                read.append(event.seq)
        assert info.value.seq == rows[4][0]
        assert "out of step with seq" in info.value.message
        assert read == [r[0] for r in rows[:4]] + [rows[5][0]]  # in order, up to the row named
        with pytest.raises(CorruptEvent):
            list(reader.rows(session_id="a", page=page))
        # the other session reads as before; a read of the whole log goes by seq and does not
        # judge a session's numbers (verify does, below; decisions.md says why)
        assert [e.seq for e in reader.events(session_id="b", page=page)] == [r[0] for r in session_rows(data, "b")]
        assert [e.seq for e in reader.events(page=page)] == list(range(1, 2 + 2 * EVENTS_PER_SESSION))


def test_decode_of_the_session_prints_the_rows_before_it_and_exits_1(data: Path) -> None:
    rows = session_rows(data, "a")
    swap(data, rows[2], rows[7])
    res = lens("log", "decode", "--data", str(data), "--session", "a")
    assert res.returncode == 1, res.stderr
    # read in session_seq order: 1, 2, then 3 (now at rows[7]'s seq), then 4 at a seq before it
    printed = [int(line.split('"seq":')[1].split(",")[0]) for line in res.stdout.splitlines()]
    assert printed == [rows[0][0], rows[1][0], rows[7][0]]
    # the row named is an edited one (the first in seq order, as verify names it), not the
    # correct row whose seq the read found going back
    assert res.stderr.startswith(f"lens: EVENT_CORRUPT: seq {rows[2][0]}: session 'a': session_seq 8, "
                                 f"expected 3 (its numbering is out of step with seq: session_seq 3 is at "
                                 f"seq {rows[7][0]}, session_seq 4 at seq {rows[3][0]})"), res.stderr
    assert "Traceback" not in res.stderr


def test_verify_reports_both_swapped_rows_with_a_stable_code_and_nothing_else(data: Path) -> None:
    rows = session_rows(data, "a")
    swap(data, rows[4], rows[5])
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 1
    assert res.stdout.splitlines() == [
        f"seq {rows[4][0]}: SESSION_SEQ_OUT_OF_ORDER: session a: session_seq 6, expected 5",
        f"seq {rows[5][0]}: SESSION_SEQ_OUT_OF_ORDER: session a: session_seq 5 comes after the session's "
        f"session_seq 6 (its numbering is out of step with seq)",
        f"FAILED: 2 problem(s) in {1 + 2 * EVENTS_PER_SESSION} event(s)",
    ]


def test_a_null_session_seq_is_named_by_a_read_of_the_whole_log(data: Path) -> None:
    rows = session_rows(data, "b")
    victim = rows[3][0]
    edit_log(data, "UPDATE events SET session_seq = NULL WHERE seq = ?", (victim,))
    with LogReader(data) as reader:
        read: list[int] = []
        with pytest.raises(CorruptEvent) as info:
            for event in reader.events():
                read.append(event.seq)
        assert info.value.seq == victim and "has no session_seq" in info.value.message
        assert read == list(range(1, victim))
        assert [e.seq for e in reader.events(after=victim)] == list(range(victim + 1, 2 + 2 * EVENTS_PER_SESSION))
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == (f"seq {victim}: EVENT_CORRUPT: the event belongs to session 'b' but has "
                                          f"no session_seq (the session's numbering was edited)")
    assert len(res.stdout.splitlines()) == 2


@pytest.mark.parametrize("page", [2000, 3])
def test_one_number_moved_below_the_first_is_named_by_every_read(data: Path, page: int) -> None:
    """Row 7's session_seq made 0 (free, below the first): read in the session's order it comes
    first, and the correct row numbered 1 is the one whose seq goes back; that row was named."""
    rows = session_rows(data, "a")
    edit_log(data, "UPDATE events SET session_seq = 0 WHERE seq = ?", (rows[6][0],))
    with LogReader(data) as reader:
        with pytest.raises(CorruptEvent) as info:
            list(reader.events(session_id="a", page=page))
        assert info.value.seq == rows[6][0], info.value.message
        assert "session_seq 0 comes after the session's session_seq 6" in info.value.message
        assert len(list(reader.events(page=page))) == 1 + 2 * EVENTS_PER_SESSION  # (by seq: not judged)
    res = lens("log", "verify", "--data", str(data))
    assert res.stdout.splitlines()[0] == (f"seq {rows[6][0]}: SESSION_SEQ_OUT_OF_ORDER: session a: session_seq 0 "
                                          f"comes after the session's session_seq 6 (its numbering is out of step "
                                          f"with seq)")


@pytest.mark.parametrize("page", [2000, 4])
def test_a_number_moved_ahead_is_named_by_the_sessions_read_and_verify(data: Path, page: int) -> None:
    """Row 4's session_seq made 50: the session's read names it; a read across sessions goes by
    seq and does not judge the numbers (verify does)."""
    rows = session_rows(data, "b")
    edit_log(data, "UPDATE events SET session_seq = 50 WHERE seq = ?", (rows[3][0],))
    with LogReader(data) as reader:
        with pytest.raises(CorruptEvent) as info:
            list(reader.events(session_id="b", page=page))
        assert info.value.seq == rows[3][0]
        assert [e.seq for e in reader.events(page=page)] == list(range(1, 2 + 2 * EVENTS_PER_SESSION))
        assert [e.seq for e in reader.events(kinds=["session.created"])] == [2, 3]
    res = lens("log", "verify", "--data", str(data))
    assert res.returncode == 1 and f"seq {rows[3][0]}: " in res.stdout


def test_reads_of_a_whole_log_as_written_name_nothing(data: Path) -> None:
    with LogReader(data) as reader:
        every = list(reader.events(page=5))
        assert [e.seq for e in every] == list(range(1, 2 + 2 * EVENTS_PER_SESSION))
        for after in range(0, 2 * EVENTS_PER_SESSION, 5):
            assert [e.seq for e in reader.events(after=after, page=3)] == [e.seq for e in every[after:]]
        assert len(list(reader.events(kinds=["session.named"], page=2))) == 2 * (EVENTS_PER_SESSION - 1)
