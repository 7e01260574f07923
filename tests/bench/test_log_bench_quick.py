"""Smoke test of bench/log_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still works and reports every figure, never a speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "log_bench.py"

KEYS = (
    "append_events_per_s",
    "ack_p50_ms",
    "ack_p99_ms",
    "replay_events_per_s",
    "bytes_per_event",
    "raw_bytes_per_event",
    "json_bytes_per_event",
    "floor_append_events_per_s",
    "floor_replay_events_per_s",
    "append_ratio",
    "replay_ratio",
    "bytes_ratio",
)


def test_quick_run_prints_json_figures_last(tmp_path: Path) -> None:
    data = tmp_path / "log"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", "--data", str(data)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("| figure |") for line in lines), proc.stdout
    figures = json.loads(lines[-1])
    for key in KEYS:
        assert isinstance(figures[key], (int, float)), key
        assert figures[key] > 0, (key, figures[key])
    for key in KEYS:  # the trained-dictionary phase reports the same figures
        assert figures[f"dict_{key}"] > 0, key
    assert (data / "events.db").is_file()  # the log is left in DIR
    assert not (data / "bench-floor").exists()


def test_refuses_a_non_empty_data_dir(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a log")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--data", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "not empty" in proc.stderr
    assert (tmp_path / "notes.txt").read_text() == "not a log"
