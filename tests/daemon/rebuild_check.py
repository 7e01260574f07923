"""Projections compared with a rebuild from zero in the middle of a run: what a daemon kept up to
date (``projections.db`` as it is, folded on to the log's end) against ``lens log rebuild`` of the
same log, table by table.

Both databases are copied with SQLite's backup API, through read-only connections of their own,
so a daemon may be running on the data directory meanwhile: each copy is one read transaction
(consistent), the projections first, so the copied log is at or past every copied position. The
copy of the projections is then caught up to the copied log's end by the projector the daemon
uses (the tail a daemon would fold next), and compared with a copy of the log rebuilt from its
first event by the ``lens`` command line, as the end of a run compares the answers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import apsw
import trio

from events.reader import LogReader
from projections.projector import Projector, open_projections_db
from projections.registry import all_projections

from .conftest import projection_dump, run_lens


def backup_db(source: Path, target: Path) -> None:
    """A consistent copy of the SQLite database ``source`` (read-only, one read transaction) as
    ``target``, while a daemon may be writing it."""
    src = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    dst = apsw.Connection(str(target))
    try:
        src.set_busy_timeout(5000)
        with dst.backup("main", src, "main") as b:
            while not b.done:
                b.step(-1)
    finally:
        dst.close()
        src.close()


def _copy_databases(data: Path, into: Path) -> None:
    into.mkdir(mode=0o700)
    for name in ("projections.db", "events.db"):  # (this order: the log at or past the positions)
        backup_db(data / name, into / name)


def _fold_the_tail(data: Path) -> tuple[list[tuple], int]:
    """Catch the projections of ``data`` up with its log, as a daemon would; their positions as
    they were copied, and the rows folded."""
    with LogReader(data) as reader:
        conn = open_projections_db(data)
        before = sorted(conn.execute("SELECT name, version, seq FROM positions"))
        projector = Projector(reader, conn, all_projections())
        try:
            after = sorted(conn.execute("SELECT name, version, seq FROM positions"))
            if after != before:  # (started over: the comparison below would be of two rebuilds)
                raise AssertionError(f"the copied projections were started over: {before} -> {after}")
            return before, projector.catch_up()
        finally:
            projector.close()


def _differences(kept: dict[str, Any], rebuilt: dict[str, Any]) -> list[str]:
    out = []
    for name in sorted(set(kept) | set(rebuilt)):
        k, r = kept.get(name, []), rebuilt.get(name, [])
        if k != r:
            out.append(f"{name}: only kept {[x for x in k if x not in r][:3]!r:.400}, "
                       f"only rebuilt {[x for x in r if x not in k][:3]!r:.400}")
    return out


async def projections_against_a_rebuild(cwd: Path, data: str, label: str) -> list[str]:
    """Where the projections of ``cwd/data`` (folded on to its log's end) differ from a rebuild
    of its log from zero; empty when they are equal. ``label`` names the copies (``cwd/label-*``)."""
    kept, rebuilt = cwd / f"{label}-kept", cwd / f"{label}-rebuilt"
    await trio.to_thread.run_sync(_copy_databases, cwd / data, kept)
    try:
        positions, _folded = await trio.to_thread.run_sync(_fold_the_tail, kept)
    except AssertionError as exc:
        return [f"{label}: {exc}"]
    rebuilt.mkdir(mode=0o700)
    await trio.to_thread.run_sync(shutil.copyfile, kept / "events.db", rebuilt / "events.db")
    await run_lens(cwd, "log", "rebuild", "--data", str(rebuilt.relative_to(cwd)))
    out = _differences(projection_dump(kept), projection_dump(rebuilt))
    if not positions or min(seq for _, _, seq in positions) == 0:
        out.append(f"{label}: nothing had been projected when the databases were copied: {positions}")
    return [f"{label}: the projections differ from a rebuild: {d}" for d in out]
