"""The wall clock stepped back (NTP correcting a clock that ran ahead, a VM restored, an operator's
`date -s`) while the daemon runs or between two runs. Event ``ts`` comes from the wall clock, and
``lens log verify`` reports a ``ts`` below an earlier event's as ``TS_OUT_OF_ORDER``: appends must
never write one, so the writer stamps ``max(now, the log's last ts)``. Replays fold by seq and
never read the clock, so they are unaffected. The system clock itself is not ours to step: the
test steps what ``time.time_ns`` answers (the one clock the writer reads), nothing of Lens's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from events.reader import LogReader
from events.store import Draft, open_store
from events.types import SessionCreated, SessionNamed

HOUR_NS = 3600 * 10**9


class SteppedClock:
    """``time.time_ns`` shifted by ``offset_ns`` (negative: a clock stepped back)."""

    def __init__(self) -> None:
        self.offset_ns = 0
        self.real = time.time_ns

    def __call__(self) -> int:
        return self.real() + self.offset_ns


def named(i: int, session: str = "s1") -> Draft:
    return Draft(SessionNamed(name=f"n{i}"), project_id="p", session_id=session, agent_id="a")


def verify(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.cli", "log", "verify", "--data", str(data)],
                          capture_output=True, text=True, timeout=60)


def test_appends_after_the_clock_steps_back_keep_ts_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SteppedClock()
    monkeypatch.setattr(time, "time_ns", clock)
    data = tmp_path / "data"

    async def main() -> list[int]:
        stamps: list[int] = []
        async with open_store(data, synchronous="OFF") as store:
            r = await store.append(Draft(SessionCreated(model="faux/m"), project_id="p", session_id="s1", agent_id="a"))
            stamps.append(r.ts)
            clock.offset_ns = -HOUR_NS  # stepped back an hour while the daemon runs
            for i in range(3):
                stamps.append((await store.append(named(i))).ts)
        # ... and still back when it starts again: the log's last ts holds
        async with open_store(data, synchronous="OFF") as store:
            for i in range(3, 6):
                stamps.append((await store.append(named(i), named(100 + i, "s2"))).ts)
        return stamps

    stamps = trio.run(main)
    assert stamps == sorted(stamps) and stamps[0] == stamps[-1], stamps  # none below the first
    with LogReader(data) as reader:  # a replay folds by seq: every event, in order
        assert [e.session_seq for e in reader.events(session_id="s1")] == list(range(1, 8))
        assert [e.ts for e in reader.events()] == sorted(e.ts for e in reader.events())
    res = verify(data)
    assert (res.returncode, res.stdout) == (0, "ok: 10 event(s) verified\n"), res.stdout

    # Once the clock catches up with the last ts, stamps follow it again.
    clock.offset_ns = HOUR_NS

    async def later() -> int:
        async with open_store(data, synchronous="OFF") as store:
            return (await store.append(named(9))).ts

    assert trio.run(later) >= (clock.real() + HOUR_NS) // 10**6 - 60_000 > stamps[-1]
