"""Smoke test of bench/sse_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still works end to end (a daemon subprocess on
loopback, SSE subscribers, the HTTP writer) and reports every figure, never a speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "sse_bench.py"

POSITIVE = (
    "subscribers",
    "delivery_p50_ms",
    "delivery_p99_ms",
    "writer_events_per_s",
    "writer_events_per_s_no_subscribers",
    "writer_throughput_ratio",
    "deliveries",
    "deliveries_expected",
)


def test_quick_run_prints_json_figures_last() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("| figure |") for line in lines), proc.stdout
    figures = json.loads(lines[-1])
    for key in POSITIVE:
        assert isinstance(figures[key], (int, float)), key
        assert figures[key] > 0, (key, figures[key])
    assert figures["subscribers"] == 20
    for key in ("dropped_subscribers", "errored_subscribers", "submit_errors"):
        assert isinstance(figures[key], int) and figures[key] >= 0, key
    assert figures["writer"] == "http-post-inputs-faux"
    assert figures["delivery_p99_ms"] >= figures["delivery_p50_ms"]
