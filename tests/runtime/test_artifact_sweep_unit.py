"""``runtime.artifact_sweep`` over a real log, its projections and an artifact store (no HTTP):
the cases a running daemon is hard to bring to. A name in a row the projections could not fold
keeps every file; a named file is kept, an unnamed one goes, however many the lookup spans."""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio

from events.store import Draft, open_store
from events.types import ImagePart, InputSubmitted, TextPart
from runtime.artifact_sweep import sweep_artifacts
from runtime.projection_service import ProjectionService
from tests.rawlog import edit_log
from tools.artifacts import ArtifactStore


def put(store: ArtifactStore, n: int) -> str:
    return store.put(b"bytes %d" % n)


async def write_inputs(data: Path, ids: list[str]) -> None:
    async with open_store(data) as log:
        for i, aid in enumerate(ids):
            await log.append(Draft(InputSubmitted(content=[TextPart("see"), ImagePart(aid, "image/png")]),
                                   project_id="p1", session_id="s1", agent_id="main", request_id=f"r{i}"))


async def sweep_once(data: Path, artifacts: ArtifactStore, started: int | None = None):  # type: ignore[no-untyped-def]
    started = time.time_ns() if started is None else started
    log = None
    async with open_store(data) as log:
        service = ProjectionService(data, log)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                # (a fresh store, as a start has: the test's own holds its puts outside a lease in flight)
                swept = await sweep_artifacts(ArtifactStore(artifacts.root), service, log.last_seq, started)
                nursery.cancel_scope.cancel()
        finally:
            service.close()
    return swept


async def test_projections_behind_the_log_keep_every_file_and_say_so(tmp_path: Path) -> None:
    data = tmp_path / "data"
    artifacts = ArtifactStore(data / "artifacts")
    named, unnamed = put(artifacts, 1), put(artifacts, 2)
    await write_inputs(data, [named, named])
    edit_log(data, "UPDATE events SET body = ? WHERE seq = 2", (b"not a zstd frame",))  # a damaged row
    swept = await sweep_once(data, artifacts)
    assert (swept.artifacts, swept.partial) == (0, 0)
    assert len(swept.notes) == 1 and swept.notes[0].startswith(f"{data / 'artifacts'} was not swept: the projections "
                                                                 f"are behind the log ("), swept.notes
    assert swept.notes[0].endswith("files no event names stay until a start with them caught up")
    assert sorted(p.name for p in (data / "artifacts").iterdir()) == sorted([named, unnamed])


async def test_many_artifacts_only_the_unnamed_go(tmp_path: Path) -> None:
    data = tmp_path / "data"
    artifacts = ArtifactStore(data / "artifacts")
    ids = [put(artifacts, n) for n in range(1203)]  # more than two lookups' worth
    named = ids[::2]
    await write_inputs(data, named)
    swept = await sweep_once(data, artifacts)
    assert (swept.artifacts, swept.partial, swept.notes) == (len(ids) - len(named), 0, [])
    assert sorted(p.name for p in (data / "artifacts").iterdir()) == sorted(named)
    # A file changed after the start is not looked at (its time set past it: file times are
    # coarser than the clock read at the start).
    started = time.time_ns()
    late = put(artifacts, 5000)
    os.utime(data / "artifacts" / late, ns=(started + 10**9, started + 10**9))
    again = await sweep_once(data, artifacts, started)
    assert (again.artifacts, again.notes) == (0, [])
    assert (data / "artifacts" / late).is_file()
