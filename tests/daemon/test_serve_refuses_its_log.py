"""``lens serve`` given a log it cannot write to, or will not open: one line, exit 2, and the data
directory left as it was found (no ``lock``, no ``projections.db``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw

from events.store import Draft, open_store
from events.types import InstructionAppended
from tests.rawlog import log_with_its_wal
from tests.unwritable import unwritable

from .conftest import run_lens


async def made_log(data_dir: Path) -> None:
    """A log of two events, as a daemon would leave it, without its ``lock`` file."""
    async with open_store(data_dir) as store:
        await store.append(*(Draft(InstructionAppended(text=t), session_id="s1") for t in ("one", "two")))
    (data_dir / "lock").unlink()


def listing(data_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(data_dir.iterdir())}


async def test_a_read_only_events_db_stops_the_start(tmp_path: Path) -> None:
    """SQLite opened the file read-only without a word: the daemon started, said it listened,
    answered /health ok, and refused every write with 503 STORE_UNAVAILABLE."""
    data = tmp_path / "data"
    await made_log(data)
    before = listing(data)
    with unwritable(data / "events.db"):
        out = await run_lens(tmp_path, "serve", "--data", "data", "--port", "0", check=False)
        assert out.returncode == 2, (out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("lens: DATA_DIR_NOT_WRITABLE: "), out.stderr
        assert "data/events.db is not writable" in lines[0]
        assert "listening" not in out.stdout
        assert listing(data) == before


async def test_a_foreign_database_in_the_data_dir_gets_no_lock_file_beside_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    conn = apsw.Connection(str(data / "events.db"))
    conn.execute("CREATE TABLE recipes(name TEXT)")
    conn.close()
    before = listing(data)
    out = await run_lens(tmp_path, "serve", "--data", "data", "--port", "0", check=False)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.strip().splitlines() == [
        "lens: STORE_FOREIGN: data/events.db is a SQLite database without a Lens format marker (tables "
        "found: recipes); it is not a Lens event log. Start a new data directory with --data NEW_DIR."]
    assert listing(data) == before


async def test_a_wal_that_hides_durable_commits_stops_the_start(tmp_path: Path) -> None:
    """A frame of events.db-wal damaged after its commit was synced: SQLite reads the WAL only up to
    it, so the daemon started on the shortened log and its first append wrote over the events
    after it. The start is refused naming the frame, and both files are left as they were."""
    await log_with_its_wal(tmp_path / "writer", tmp_path / "data", 30)
    wal = tmp_path / "data" / "events.db-wal"
    raw = bytearray(wal.read_bytes())
    size = 24 + int.from_bytes(raw[8:12], "big")
    frames = (len(raw) - 32) // size
    raw[32 + (frames // 2 - 1) * size + 24 + 7] ^= 0x01
    wal.write_bytes(raw)
    before = {name: digest for name, digest in listing(tmp_path / "data").items() if name.startswith("events.db")}
    out = await run_lens(tmp_path, "serve", "--data", "data", "--port", "0", check=False)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lens: WAL_DAMAGED: events.db-wal frame {frames // 2} is damaged"), out.stderr
    assert "listening" not in out.stdout
    after = listing(tmp_path / "data")
    assert {name: after.get(name) for name in before} == before
