"""Smoke test of bench/frame_body_gap_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still runs both paths (on the loop, in a worker
thread) of each frame and body, with the same bytes on both, and reports every figure, never a
speed.
"""

from __future__ import annotations

from pathlib import Path

from tests.benchrun import quick_figures

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_json_figures_last() -> None:
    figures = quick_figures("frame_body_gap_bench.py", "--quick", timeout=120, cwd=ROOT)
    assert figures["variant"] == "code" and figures["runs"] == 3
    assert set(figures["cases"]) == {"frame_ascii", "frame_escaped", "body_ascii", "body_escaped", "flush"}
    for name, case in figures["cases"].items():
        assert case["bytes"] > 100_000, name
        for path in ("loop",) if name == "flush" else ("loop", "worker"):
            row = case[path]
            for key in ("max_gap_ms", "p99_gap_ms", "wall_ms", "cpu_ms"):
                assert row[key] > 0, (name, path, key)
