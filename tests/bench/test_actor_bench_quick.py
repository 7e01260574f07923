"""bench/actor_bench.py keeps working: its --quick run ends with one JSON line of its figures.

Not a timed test: only the shape of the output is checked, never the figures against targets.
"""

from __future__ import annotations

from pathlib import Path

from tests.benchrun import quick_figures

KEYS = {
    "wake_snapshot_ms",
    "wake_full_replay_ms",
    "wake_jsonl_ms",
    "passivated_10k_mib",
    "live_1k_items_mib",
}


def test_actor_bench_quick_prints_its_figures_as_the_last_line(tmp_path: Path) -> None:
    figures = quick_figures("actor_bench.py", "--quick", "--json", "--data", str(tmp_path / "bench"), timeout=180)
    assert KEYS <= figures.keys()
    for key in KEYS - {"passivated_10k_mib"}:  # RSS is unavailable without /proc
        assert isinstance(figures[key], (int, float)) and figures[key] >= 0, key
    assert figures["passivated_live_after"] == 0  # every actor passivated
    assert figures["session_events"] >= 1000 and figures["items"] >= 1000
