"""bench/executor_bench.py keeps working: its --quick run ends with one JSON line of its figures.

Not a timed test: only the shape of the output is checked, never the figures against targets.
"""

from __future__ import annotations

from pathlib import Path

from tests.benchrun import quick_figures

KEYS = {
    "read_file_calls_per_s",
    "bare_unary_calls_per_s",
    "plain_sync_unary_calls_per_s",
    "read_to_bare_ratio",
    "edits_per_s",
}


def test_executor_bench_quick_prints_its_figures_as_the_last_line(tmp_path: Path) -> None:
    figures = quick_figures("executor_bench.py", "--quick", "--json", timeout=120, cwd=tmp_path)
    assert KEYS <= figures.keys()
    for key in KEYS:
        assert isinstance(figures[key], (int, float)) and figures[key] > 0, key
    assert isinstance(figures["target_met"], bool)
