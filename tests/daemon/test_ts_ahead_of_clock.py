"""A log whose last ``ts`` stands far ahead of the clock (an edited row, a clock once set years
ahead) is reported and never rewritten, and it is not carried on: the writer stamps later events
from the clock again and records that step back in the log's meta, so ``lens serve`` says so at
start, naming the row, and ``lens log verify`` reports the row as ``TS_AHEAD_OF_CLOCK`` (exit 1)
until a daemon has stamped past it, and the recorded step back never. Real logs in temp
directories, edited with apsw behind the writer's back; the installed ``lens`` script."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import trio

from events.store import Draft, open_store
from events.types import ProjectCreated

from .conftest import run_lens, serving

DAY = 24 * 3600 * 1000


def write_log(data: Path, events: int = 3) -> None:
    async def write() -> None:
        async with open_store(data, synchronous="OFF") as store:
            for i in range(events):
                await store.append(Draft(ProjectCreated(name=f"p{i}", workspace="/ws"), project_id=f"p{i}"))

    trio.run(write)


def set_ts(data: Path, seq: int, ts: int) -> None:
    conn = apsw.Connection(str(data / "events.db"))
    conn.execute("UPDATE events SET ts = ? WHERE seq = ?", (ts, seq))
    conn.close()


def stamps(data: Path) -> list[int]:
    conn = apsw.Connection(str(data / "events.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [r[0] for r in conn.execute("SELECT ts FROM events ORDER BY seq")]
    finally:
        conn.close()


def test_the_limit_exactly_and_one_past() -> None:
    from events.schema import TS_AHEAD_LIMIT_MS, ts_ahead

    now = 1_800_000_000_000
    assert TS_AHEAD_LIMIT_MS == DAY
    assert ts_ahead(now + TS_AHEAD_LIMIT_MS, now) is None
    found = ts_ahead(now + TS_AHEAD_LIMIT_MS + 1, now)
    assert found is not None and found.startswith(f"TS_AHEAD_OF_CLOCK: ts {now + DAY + 1} is 1 day(s) 0 hour(s) ahead")
    assert ts_ahead(now - 10 * DAY, now) is None  # (behind is the clamp's business: stamps never go back)


async def test_verify_reports_a_far_future_ts_and_leaves_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await trio.to_thread.run_sync(write_log, data)
    far = time.time_ns() // 1_000_000 + 40 * DAY
    set_ts(data, 2, far)
    before = stamps(data)
    out = await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stdout.splitlines()
    # seq 3's ts is below seq 2's edited one too: the edit's two traces, each with its code
    assert [line.split(":")[:2] for line in lines[:-1]] == [["seq 3", " TS_OUT_OF_ORDER"],
                                                           ["seq 2", " TS_AHEAD_OF_CLOCK"]], lines
    assert f"ts {far} is 39 day(s) 23 hour(s) ahead" in lines[1] or f"ts {far} is 40 day(s) 0 hour(s) ahead" \
        in lines[1], lines
    assert "Check the clock" in lines[1] and lines[-1].startswith("FAILED"), lines
    assert stamps(data) == before  # never rewritten

    # within the limit: nothing to say
    set_ts(data, 2, before[0])
    set_ts(data, 3, time.time_ns() // 1_000_000 + DAY // 2)
    out = await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)
    assert (out.returncode, out.stdout) == (0, "ok: 3 event(s) verified\n"), out.stdout


async def test_serve_says_so_at_start_and_leaves_the_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await trio.to_thread.run_sync(write_log, data)
    far = time.time_ns() // 1_000_000 + 400 * DAY
    set_ts(data, 3, far)
    async with serving(tmp_path) as (serve, d):
        assert (await d.get("/health")).status_code == 200
        warned = [line for line in serve.lines if "TS_AHEAD_OF_CLOCK" in line]
        assert len(warned) == 1, serve.lines
        assert warned[0].startswith((f"lens: warning: TS_AHEAD_OF_CLOCK: ts {far} (seq 3) is 399 day(s) 23 hour(s) ahead",
                                     f"lens: warning: TS_AHEAD_OF_CLOCK: ts {far} (seq 3) is 400 day(s) 0 hour(s) ahead")), \
            serve.lines  # (399 days 23 hours, or 400 days 0 hours had no millisecond passed)
        assert "the daemon stamps the events it appends from the clock" in warned[0]
        token = await d.pair("strong", strong=True)
        await d.project(token)  # (an event the daemon appends)
        assert await serve.terminate() == 0
    after = stamps(data)
    assert after[2] == far  # the edited row stays as it is
    assert len(after) > 3  # (the daemon appended: from the clock, not from the row far ahead)
    assert all(ts <= time.time_ns() // 1_000_000 for ts in after[3:]) and after[3:] == sorted(after[3:])
    out = await run_lens(tmp_path, "log", "verify", "--data", "data", check=False)
    assert (out.returncode, out.stdout) == (0, f"ok: {len(after)} event(s) verified\n"), out.stdout

    # a log within the limit: no such line
    set_ts(data, 3, time.time_ns() // 1_000_000)
    for seq in range(4, len(after) + 1):
        set_ts(data, seq, time.time_ns() // 1_000_000)
    async with serving(tmp_path) as (serve, d):
        assert (await d.get("/health")).status_code == 200
        assert not [line for line in serve.lines if "TS_AHEAD_OF_CLOCK" in line], serve.lines
        assert await serve.terminate() == 0
