"""Smoke test of bench/sse_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still works end to end (a daemon subprocess on
loopback, SSE subscribers, the HTTP writer) and reports every figure, never a speed.
"""

from __future__ import annotations

from pathlib import Path

from tests.benchrun import quick_figures

ROOT = Path(__file__).resolve().parents[2]

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
    figures = quick_figures("sse_bench.py", "--quick", "--json", timeout=300, cwd=ROOT)
    for key in POSITIVE:
        assert isinstance(figures[key], (int, float)), key
        assert figures[key] > 0, (key, figures[key])
    assert figures["subscribers"] == 20
    for key in ("dropped_subscribers", "errored_subscribers", "submit_errors"):
        assert isinstance(figures[key], int) and figures[key] >= 0, key
    assert figures["writer"] == "http-post-inputs-faux"
    assert figures["delivery_p99_ms"] >= figures["delivery_p50_ms"]
