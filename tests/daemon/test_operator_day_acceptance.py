"""An operator's day with ``lens serve`` as a real process (loopback port 0, a real executor, the
``faux`` provider): what an operator does to a running daemon's data directory from a shell.

- The event log deleted, or its data directory moved away, while the daemon runs: SQLite goes on
  committing into the file it holds open, which is freed at the stop. The daemon now refuses
  every write from then on (503, naming the file) instead of acknowledging events it will lose,
  says so in its log, and still stops cleanly; the log moved away holds every event acknowledged.
- ``lens log decode|verify|stats`` beside the daemon while it writes: they succeed, see a prefix
  of the log that verifies, and the daemon's writes go on meanwhile.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from .conftest import LIMIT, Daemon, error_of, projections_caught_up, run_lens, serving, wait_until
from .rebuild_check import projections_against_a_rebuild


async def _working_session(d: Daemon) -> tuple[str, str, str]:
    """A strong credential, a project and a session that answered one input."""
    token = await d.pair("operator", strong=True)
    project = await d.project(token, "p")
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    return token, project["id"], sid


def _remove_log(cwd: Path, how: str) -> tuple[Path, str]:
    """Take the running daemon's log away as an operator might (``rm data/events.db*``,
    ``mv data data.moved``, ``rm data/events.db-wal``); returns the directory the log is in now
    (or was in) and the file the daemon is to name."""
    data = cwd / "data"
    if how == "moved":
        os.rename(data, cwd / "data.moved")
        return cwd / "data.moved", "data/events.db"
    names = ["events.db-wal"] if how == "wal deleted" else ["events.db", "events.db-wal", "events.db-shm"]
    for name in names:
        (data / name).unlink()
    return data, f"data/{names[0]}"


@pytest.mark.parametrize("how", ["deleted", "moved", "wal deleted"])
async def test_a_log_taken_away_under_the_daemon_is_refused_not_acknowledged(tmp_path: Path, how: str):
    # Before: every write after `rm data/events.db*` (or `mv data elsewhere`) was acknowledged
    # (201/202) and vanished at the stop; /health said ok throughout (now 503). After `rm
    # data/events.db-wal` they were acknowledged too, kept by a graceful stop but not by a crash.
    with trio.fail_after(6 * LIMIT):
        async with serving(tmp_path) as (serve, d):
            token, project_id, sid = await _working_session(d)
            healthy = await d.get("/health")
            assert healthy.status_code == 200 and sorted(healthy.json()) == ["lastSeq", "status", "version"]
            assert healthy.json()["status"] == "ok", healthy.text
            last_acknowledged = healthy.json()["lastSeq"]
            where, named = _remove_log(tmp_path, how)

            # A monitor polling health learns it at once, before any write tried: 503, every field
            # of the healthy answer kept, the file named but not the data directory (public route).
            r = await d.get("/health")
            assert r.status_code == 503, r.text
            assert r.json()["status"] == "unavailable"
            assert (r.json()["version"], r.json()["lastSeq"]) == (healthy.json()["version"], last_acknowledged)
            assert sorted(r.json()) == ["error", "lastSeq", "status", "version"], r.text
            assert r.json()["error"]["code"] == "STORE_UNAVAILABLE"
            assert f"{named.removeprefix('data/')} was deleted" in r.json()["error"]["message"], r.text
            assert str(tmp_path) not in r.text and "Retry-After" not in r.headers

            ws = tmp_path / "workspaces" / "q"
            ws.mkdir(parents=True)
            r = await d.post("/projects", token, {"name": "q", "workspace": str(ws)})
            assert r.status_code == 503, r.text
            assert error_of(r) == "STORE_UNAVAILABLE"
            assert f"{named} was deleted" in r.json()["error"]["message"], r.text

            r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "after"})
            assert r.status_code == 503, r.text
            assert error_of(r) in ("STORE_UNAVAILABLE", "SESSION_UNAVAILABLE")
            assert f"{named} was deleted" in r.json()["error"]["message"], r.text

            assert (await d.get("/health")).status_code == 503  # and stays so until the restart

            # the lists still answer (they need no write)
            assert [p["id"] for p in (await d.get("/projects", token)).json()["projects"]] == [project_id]
            assert await serve.terminate() == 0
        err = (tmp_path / "serve-0.err").read_text()
        assert f"ERROR lens.events: {named} was deleted" in err, err[-2000:]
        assert err.count("ERROR lens.events:") == 1, err[-3000:]  # said once, not per refused write

    if how != "deleted":  # the log (moved, or its -wal folded in at the stop) holds what was acknowledged
        verify = await run_lens(tmp_path, "log", "verify", "--data", str(where))
        assert verify.stdout.strip() == f"ok: {last_acknowledged} event(s) verified", verify.stdout
    else:
        assert not (where / "events.db").exists()


async def test_log_commands_beside_a_daemon_that_writes_see_a_whole_prefix_and_hold_nothing_up(tmp_path: Path):
    # `lens log decode|verify|stats|rebuild` run (each twice) while a client keeps a session
    # answering one input after another: each exits 0 and sees a whole prefix of the log (verify finds no half-written tail to
    # call damage), the daemon's writes are acknowledged meanwhile, and at the end the log
    # verifies whole and the projections the daemon kept equal a rebuild.
    with trio.fail_after(12 * LIMIT):
        async with serving(tmp_path) as (serve, d):
            token, _project_id, sid = await _working_session(d)
            stop = trio.Event()
            acknowledged: list[int] = []
            slowest = 0.0

            async def keep_writing() -> None:
                nonlocal slowest
                n = 0
                while not stop.is_set():
                    n += 1
                    start = trio.current_time()
                    acknowledged.append((await d.submit(token, sid, f"w{n}", f"write {n}"))["seq"])
                    slowest = max(slowest, trio.current_time() - start)
                    await d.wait_idle(token, sid)  # (answered before the next: a steady stream of writes)

            async def command(*args: str) -> Any:
                before = len(acknowledged)
                out = await run_lens(tmp_path, "log", *args, "--data", "data")
                return out, len(acknowledged) - before

            writes_during = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(keep_writing)
                await wait_until(lambda: _at_least(acknowledged, 3), what="the client writing")
                for _ in range(2):
                    out, during = await command("verify")
                    writes_during.append(during)
                    (verified,) = out.stdout.splitlines()
                    count = int(verified.removeprefix("ok: ").removesuffix(" event(s) verified"))
                    assert count >= acknowledged[0], out.stdout

                    out, during = await command("decode")
                    writes_during.append(during)
                    seqs = [json.loads(line)["seq"] for line in out.stdout.splitlines()]
                    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= count, seqs[-5:]

                    out, during = await command("stats", "--json")
                    writes_during.append(during)
                    assert sum(k["events"] for k in json.loads(out.stdout)["kinds"]) >= len(seqs), out.stdout

                    out, during = await command("rebuild")
                    writes_during.append(during)
                    assert out.stdout.startswith("rebuilt "), out.stdout
                stop.set()
            assert all(during > 0 for during in writes_during), writes_during  # written meanwhile, every time
            assert slowest < LIMIT / 2, slowest

            await d.wait_idle(token, sid)
            await projections_caught_up(d)
            last_seq = (await d.get("/health")).json()["lastSeq"]
            view = await d.view(token, sid)
            assert sum(1 for it in view["items"] if it["role"] == "user") == len(acknowledged) + 1
            assert await projections_against_a_rebuild(tmp_path, "data", "end") == []
            assert await serve.terminate() == 0
    out = await run_lens(tmp_path, "log", "verify", "--data", "data")
    assert out.stdout.strip() == f"ok: {last_seq} event(s) verified", out.stdout


async def _at_least(values: list[int], n: int) -> bool:
    return len(values) >= n
