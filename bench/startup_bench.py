"""Start-up benchmark: how long the supervisor takes to find the sessions it must resume.

Usage::

    python3 bench/log_bench.py --data DIR            # any existing log will do
    python3 bench/startup_bench.py --data DIR [--runs N] [--json]

``lens serve`` wakes every session with a task running or inputs queued before HTTP listens.
This measures, on the log in ``DIR``, the two ways the supervisor can ask:

* **the log scan** (``Supervisor.sessions_with_pending_work``): one ``GROUP BY session_id`` over
  the whole events table — linear in the log; the reference, and the fallback when projections
  are stalled;
* **the sessions projection** (``ProjectionService.sessions_with_pending_work``, what the daemon
  uses): the projection's counters plus the events past its position.

It also times what the start-up sweep of ``artifacts/`` reads (``runtime/artifact_sweep.py``):
the listing of ``DIR/artifacts`` and the lookup of every artifact found in the
``artifact_names`` projection. Nothing is removed: the figure is the sweep's cost with nothing to
remove, which is every start but one after a crash.

The projector first catches up (the first run over a fresh log builds every projection, which
takes a while; the time is reported apart). Each question is asked ``--runs`` times; the medians
are reported. The last stdout line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events.store import EventStore  # noqa: E402
from runtime.actor import ActorDeps  # noqa: E402
from runtime.projection_service import ProjectionService  # noqa: E402
from runtime.supervisor import Supervisor  # noqa: E402
from tools.artifacts import ArtifactStore  # noqa: E402


async def measure(data_dir: Path, runs: int) -> dict[str, float]:
    store = EventStore.open(data_dir)
    service = ProjectionService(store.data_dir, store)
    # The log scan reads only the store; the other dependencies are not used by it.
    supervisor = Supervisor(ActorDeps(store, None, None, None, None))  # type: ignore[arg-type]
    scan_s: list[float] = []
    projection_s: list[float] = []
    scanned: list[str] = []
    found: list[str] | None = []
    sweep_s: list[float] = []
    listed = 0
    artifacts = ArtifactStore(data_dir / "artifacts")
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            started = time.perf_counter()
            await nursery.start(service.run)
            catch_up = time.perf_counter() - started
            for _ in range(runs):
                t0 = time.perf_counter()
                scanned = await supervisor.sessions_with_pending_work()
                t1 = time.perf_counter()
                found = await service.sessions_with_pending_work()
                t2 = time.perf_counter()
                assert found is not None, f"projections stalled: {service.error}"
                scan_s.append(t1 - t0)
                projection_s.append(t2 - t1)
                t3 = time.perf_counter()
                leftovers = await trio.to_thread.run_sync(artifacts.leftovers, time.time_ns())
                await service.named_artifacts(leftovers.artifacts)
                sweep_s.append(time.perf_counter() - t3)
                listed = len(leftovers.artifacts)
            nursery.cancel_scope.cancel()
        events = store.last_seq
    finally:
        service.close()
        store.close()
    return {
        "events": events,
        "projector_catch_up_s": round(catch_up, 3),
        "log_scan_ms": round(statistics.median(scan_s) * 1000, 3),
        "projection_ms": round(statistics.median(projection_s) * 1000, 3),
        "speedup": round(statistics.median(scan_s) / statistics.median(projection_s), 1),
        # what each way found (they differ only for events under ids never created as sessions,
        # such as log_bench's synthetic ones: see docs/decisions.md)
        "log_scan_sessions": len(scanned),
        "projection_sessions": len(found),
        "artifacts": listed,
        "artifact_sweep_ms": round(statistics.median(sweep_s) * 1000, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="an existing data directory")
    parser.add_argument("--runs", type=int, default=5, choices=range(1, 1001), metavar="N")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    args = parser.parse_args()
    if not (args.data / "events.db").exists():
        parser.error(f"no event log in {args.data} (make one with bench/log_bench.py --data {args.data})")
    figures = trio.run(measure, args.data, args.runs)
    print("| events | projector catch-up | log scan | sessions projection | speed-up | artifacts | artifact sweep |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {figures['events']:,} | {figures['projector_catch_up_s']} s | {figures['log_scan_ms']} ms | "
          f"{figures['projection_ms']} ms | {figures['speedup']}× | {figures['artifacts']:,} | "
          f"{figures['artifact_sweep_ms']} ms |")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
