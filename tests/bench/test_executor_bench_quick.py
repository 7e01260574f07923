"""bench/executor_bench.py keeps working: its --quick run ends with one JSON line of its figures.

Not a timed test: only the shape of the output is checked, never the figures against targets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "executor_bench.py"

KEYS = {
    "read_file_calls_per_s",
    "bare_unary_calls_per_s",
    "plain_sync_unary_calls_per_s",
    "read_to_bare_ratio",
    "edits_per_s",
}


def test_executor_bench_quick_prints_its_figures_as_the_last_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--quick", "--json"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert any(line.startswith("| figure |") for line in lines)  # the Markdown table
    figures = json.loads(lines[-1])
    assert KEYS <= figures.keys()
    for key in KEYS:
        assert isinstance(figures[key], (int, float)) and figures[key] > 0, key
    assert isinstance(figures["target_met"], bool)
