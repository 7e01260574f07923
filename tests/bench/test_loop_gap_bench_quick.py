"""Smoke test of bench/loop_gap_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still runs both paths of ``json_answer`` for each
answer, with answers of msgspec's length, and the code's own estimate for each view and page,
and reports every figure, never a speed.
"""

from __future__ import annotations

from pathlib import Path

from tests.benchrun import quick_figures

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_json_figures_last() -> None:
    figures = quick_figures("loop_gap_bench.py", "--quick", timeout=120, cwd=ROOT)
    assert figures["variant"] == "code" and figures["runs"] == 3
    assert set(figures["cases"]) == {"view", "view_escaped", "view_controls", "events", "events_small",
                                     "events_controls", "string"}
    for name, case in figures["cases"].items():
        assert case["json_bytes"] > 100_000, name
        assert ("estimate" in case) == (name != "string"), name
        if name != "string":
            assert case["estimate"]["went"] in ("one_call", "pieces") and case["estimate"]["chars"] > 0, name
            assert case["estimate"]["estimate_ms"] >= 0, name
        for path in ("one_call", "pieces", "estimate")[:2 if name == "string" else 3]:
            row = case[path]
            for key in ("max_gap_ms", "p99_gap_ms", "wall_ms", "cpu_ms"):
                assert row[key] > 0, (name, path, key)
