"""A log whose largest ``ts`` is far ahead of the clock when the store opens (an edited row, a clock
once set a year ahead): the writer does not stamp that ``ts`` on every later event until the clock
passes it. Up to ``TS_AHEAD_LIMIT_MS`` (a day) ahead it does, as for any clock stepped back (stamps
never go back); one millisecond more, it stamps from the clock again and records the step back
in the meta table, in the transaction of the first event so stamped, and ``lens log verify``
takes the recorded step (and only it) as no finding. The clock the writer reads is held still
by the test (``time.time_ns``), so the edge is exact; the system clock is not the test's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from events.schema import TS_AHEAD_LIMIT_MS
from events.store import Draft, open_store
from events.types import ProjectCreated
from tests.rawlog import edit_log, log_rows


def created(i: int) -> Draft:
    return Draft(ProjectCreated(name=f"p{i}", workspace="/ws"), project_id=f"p{i}")


def verify(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.cli", "log", "verify", "--data", str(data)],
                          capture_output=True, text=True, timeout=60)


def step_keys(data: Path) -> list[tuple[str, str]]:
    return log_rows(data, "SELECT key, value FROM meta WHERE key LIKE 'ts_step_back:%' ORDER BY key")


@pytest.mark.parametrize("ahead", [TS_AHEAD_LIMIT_MS, TS_AHEAD_LIMIT_MS + 1])
def test_a_ts_ahead_is_carried_up_to_the_limit_and_stepped_back_from_one_past(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: int) -> None:
    now_ns = time.time_ns()  # (real now, held: verify in its own process reads the real clock)
    now = now_ns // 1_000_000
    monkeypatch.setattr(time, "time_ns", lambda: now_ns)
    data = tmp_path / "data"

    async def write(first: int, n: int) -> tuple[list[int], int | None]:
        async with open_store(data, synchronous="OFF") as store:
            seen = store.ts_ahead_seq
            return [(await store.append(created(first + i))).ts for i in range(n)], seen

    trio.run(write, 0, 2)
    edit_log(data, "UPDATE events SET ts = ? WHERE seq = 2", (now + ahead,))
    stamped, seen = trio.run(write, 2, 3)
    if ahead == TS_AHEAD_LIMIT_MS:  # within the limit: carried on, nothing recorded
        assert (stamped, seen, step_keys(data)) == ([now + ahead] * 3, None, [])
    else:  # one past: from the clock, the step recorded with seq 3
        assert (stamped, seen) == ([now] * 3, 2)
        assert step_keys(data) == [("ts_step_back:3", f"{now + ahead} {now}")]
    # the next start goes on from the clock (or the carried ts): nothing stepped again
    again, seen = trio.run(write, 5, 1)
    assert seen is None and again == [stamped[-1]]
    assert len(step_keys(data)) == (ahead > TS_AHEAD_LIMIT_MS)
    res = verify(data)
    if ahead == TS_AHEAD_LIMIT_MS:
        assert res.returncode == 0 and res.stdout == "ok: 6 event(s) verified\n", res.stdout
    else:  # the recorded step is no finding; the row far ahead stays as it is
        assert res.returncode == 0 and res.stdout == "ok: 6 event(s) verified\n", res.stdout
        assert [r[0] for r in log_rows(data, "SELECT ts FROM events ORDER BY seq")][1] == now + ahead


def test_a_step_back_not_as_recorded_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now_ns = time.time_ns()
    now = now_ns // 1_000_000
    monkeypatch.setattr(time, "time_ns", lambda: now_ns)
    data = tmp_path / "data"

    async def write(first: int, n: int) -> None:
        async with open_store(data, synchronous="OFF") as store:
            for i in range(n):
                await store.append(created(first + i))

    trio.run(write, 0, 2)
    far = now + 3 * TS_AHEAD_LIMIT_MS
    edit_log(data, "UPDATE events SET ts = ? WHERE seq = 2", (far,))
    trio.run(write, 2, 2)
    assert verify(data).returncode == 0
    edit_log(data, "UPDATE meta SET value = ? WHERE key = 'ts_step_back:3'", (f"{far - 1} {now}",))
    res = verify(data)
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == f"seq 3: TS_OUT_OF_ORDER: ts {now} is earlier than the previous event's {far}"
