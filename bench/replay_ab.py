"""Interleaved A/B of the replay path (``LogReader.events()``) of two source trees on one log.

    python3 bench/log_bench.py --data LOG --json --events 200000     # build the log once
    git archive HEAD | tar -x -C OLD_TREE                             # the code to compare with
    python3 bench/replay_ab.py OLD_TREE . LOG --pairs 7

Each run is a fresh process importing ``events`` from its tree: it times the SELECT-only floor
(every column of the range, nothing decoded — the floor of ``bench/log_bench.py``), then one
replay of the same range through ``LogReader.events()`` folded into per-session state as
``log_bench`` does. Runs alternate A B A B … so a busy spell of a shared machine falls on both.

Per run it prints wall µs per row, the ratio to the floor, the main thread's CPU µs per row and
the whole process's (the main thread plus the zstd helper). On a loaded machine the wall times
spread widely while CPU times stay close: the main thread's CPU is what bounds the replay when
the machine is quiet (the helper waits on it), so read both. The summary gives min and median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

CHILD = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import apsw
from events.reader import ROW_COLUMNS, LogReader
data, after, to = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
conn = apsw.Connection(str(data / "events.db"), flags=apsw.SQLITE_OPEN_READONLY)
gc.collect()
t0 = time.perf_counter()
n = 0
for _row in conn.execute(f"SELECT {ROW_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq", (after, to)):
    n += 1
floor = time.perf_counter() - t0
conn.close()
if n == 0:
    print(json.dumps({"rows": 0}))
    sys.exit(0)
with LogReader(data) as reader:
    gc.collect()
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    state = {}
    for ev in reader.events(after=after, to=to):
        s = state.get(ev.session_id)
        if s is None:
            s = state[ev.session_id] = {"events": 0, "last_seq": 0, "kinds": {}}
        s["events"] += 1
        s["last_seq"] = ev.session_seq
        kinds = s["kinds"]
        kinds[ev.kind] = kinds.get(ev.kind, 0) + 1
    wall, main, process = time.perf_counter() - t0, time.thread_time() - c0, time.process_time() - p0
rows = sum(s["events"] for s in state.values())
assert rows == n, (rows, n)
print(json.dumps({"rows": n, "wall_us": wall * 1e6 / n, "ratio": floor / wall,
                  "main_cpu_us": main * 1e6 / n, "process_cpu_us": process * 1e6 / n}))
"""

FIGURES = ("wall_us", "ratio", "main_cpu_us", "process_cpu_us")


def refuse(code: str, message: str) -> NoReturn:
    """A refusal: one line on stderr with a stable code, exit 1."""
    print(f"replay_ab: {code}: {message}", file=sys.stderr)
    raise SystemExit(1)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # the usage, then the message with a stable code
        self.print_usage(sys.stderr)
        self.exit(2, f"replay_ab: USAGE_ERROR: {message}\n")


def run(tree: Path, data: Path, after: int, to: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(data), str(after), str(to)],
        capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        refuse("RUN_FAILED", f"the replay of tree {tree} failed: {last}")
    figures: dict[str, float] = json.loads(done.stdout)
    if figures["rows"] == 0:
        refuse("EMPTY_RANGE", f"{data} holds no event with {after} < seq <= {to}")
    return figures


def main() -> None:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="source tree A (e.g. a git archive of the old code)")
    parser.add_argument("b", type=Path, help="source tree B")
    parser.add_argument("data", type=Path, help="a data directory holding a log (bench/log_bench.py)")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--after", type=int, default=0)
    parser.add_argument("--to", type=int, default=200_000, help="last seq of the range (phase 1 of a full run)")
    parser.add_argument("--json", action="store_true", help="print the medians as one JSON line last")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    for tree in (args.a, args.b):
        if not (tree / "events" / "reader.py").is_file():
            refuse("NOT_A_SOURCE_TREE", f"{tree} holds no events/reader.py")
    if not (args.data / "events.db").is_file():
        refuse("NO_LOG", f"{args.data} holds no events.db (build one with bench/log_bench.py)")
    seen: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for i in range(args.pairs):
        for name, tree in (("A", args.a), ("B", args.b)):
            r = run(tree, args.data, args.after, args.to)
            seen[name].append(r)
            print(f"{name} {i}: {r['wall_us']:.2f} us/row, ratio {r['ratio']:.3f}, "
                  f"main CPU {r['main_cpu_us']:.2f}, process CPU {r['process_cpu_us']:.2f} us/row", flush=True)
    medians: dict[str, float] = {}
    for name, runs in seen.items():
        parts = []
        for key in FIGURES:
            values = [r[key] for r in runs]
            medians[f"{name}_{key}"] = round(statistics.median(values), 4)
            parts.append(f"{key} min {min(values):.3f} median {statistics.median(values):.3f}")
        print(f"{name}: " + "; ".join(parts))
    if args.json:
        print(json.dumps(medians))


if __name__ == "__main__":
    main()
