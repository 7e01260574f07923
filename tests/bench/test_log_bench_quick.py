"""Smoke test of bench/log_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still works and reports every figure, never a speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchrun import quick_figures
from tests.unwritable import unwritable

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "log_bench.py"

REQUIRED = (  # the keys the issue names for the last JSON line
    "append_events_per_s",
    "ack_p50_ms",
    "ack_p99_ms",
    "replay_events_per_s",
    "bytes_per_event",
    "raw_bytes_per_event",
    "floor_append_events_per_s",
    "floor_replay_events_per_s",
)
KEYS = REQUIRED + ("json_bytes_per_event", "append_ratio", "replay_ratio", "bytes_ratio")


def test_quick_run_prints_json_figures_last(tmp_path: Path) -> None:
    data = tmp_path / "log"
    figures = quick_figures("log_bench.py", "--quick", "--json", "--data", str(data), timeout=300, cwd=ROOT)
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


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("events", [1, 7, 63, 64, 65])
def test_any_positive_event_count_runs_and_leaves_a_log_that_verifies(tmp_path: Path, events: int) -> None:
    """`--events N` is the issue's interface: N below the 64 sessions (or too few events to train
    a dictionary on) runs the benchmark on fewer sessions instead of refusing."""
    data = tmp_path / "log"
    proc = run_bench("--events", str(events), "--json", "--data", str(data))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in REQUIRED:
        assert isinstance(figures[key], (int, float)) and figures[key] > 0, (key, figures.get(key))
    assert figures["events"] == events
    verify = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "log", "verify", "--data", str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    phases = 1 if "dict_append_events_per_s" not in figures else 2
    assert verify.stdout == f"ok: {events * phases} event(s) verified\n"


@pytest.mark.parametrize("events", ["0", "-5"])
def test_an_event_count_below_one_is_a_clear_usage_error(tmp_path: Path, events: str) -> None:
    data = tmp_path / "log"
    proc = run_bench("--events", events, "--json", "--data", str(data))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "--events" in proc.stderr and "Traceback" not in proc.stderr
    assert not data.exists()


@pytest.mark.parametrize("inside", [False, True])
def test_a_data_dir_that_cannot_be_written_is_named_not_a_traceback(tmp_path: Path, inside: bool) -> None:
    """An empty DIR that cannot be written, or a new DIR in a parent that cannot be written."""
    parent = tmp_path / "ro"
    parent.mkdir()
    data = parent / "log" if inside else parent
    with unwritable(parent):
        proc = run_bench("--events", "10", "--json", "--data", str(data))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("log_bench: ") and str(data if not inside else parent) in proc.stderr
    assert list(parent.iterdir()) == []


def test_overwrite_refuses_a_log_that_a_running_daemon_writes(tmp_path: Path) -> None:
    # --overwrite cleared any directory that looked like a Lens log: a daemon's own, under it.
    data = tmp_path / "log"
    assert run_bench("--events", "1", "--data", str(data)).returncode == 0
    before = {p.name: p.stat().st_size for p in data.iterdir()}
    held = subprocess.Popen(  # a Lens process holding the log, as `lens serve` does
        [sys.executable, "-c", "import sys, trio\nfrom pathlib import Path\nfrom events.store import open_store\n"
         "async def main():\n    async with open_store(Path(sys.argv[1])):\n        print('open', flush=True)\n"
         "        sys.stdin.readline()\ntrio.run(main)", str(data)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout is not None and held.stdout.readline() == "open\n"
        proc = run_bench("--events", "1", "--overwrite", "--data", str(data))
        assert proc.returncode != 0
        assert f"refusing to clear {data}: it is in use by another Lens process" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
        assert {p.name: p.stat().st_size for p in data.iterdir() if not p.name.startswith("events.db-")} == {
            k: v for k, v in before.items() if not k.startswith("events.db-")}
    finally:
        held.communicate("\n", timeout=30)
    proc = run_bench("--events", "1", "--overwrite", "--data", str(data))  # once it is let go: cleared
    assert proc.returncode == 0, proc.stderr
