"""Smoke test of bench/replay_ab.py: one interleaved pair of this tree against itself on a
--quick log, and its refusals. Not a timed test: it checks the figures' shape, never a speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "replay_ab.py"
FIGURES = ("wall_us", "ratio", "main_cpu_us", "process_cpu_us")


@pytest.fixture(scope="module")
def quick_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One --quick log (4,000 events per phase) shared by the tests of this module."""
    data = tmp_path_factory.mktemp("replay-ab") / "log"
    built = subprocess.run([sys.executable, str(ROOT / "bench" / "log_bench.py"), "--quick", "--json",
                            "--data", str(data)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return data


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_one_pair_prints_both_sides_and_json_medians(quick_log: Path) -> None:
    data = quick_log
    proc = _run(str(ROOT), str(ROOT), str(data), "--pairs", "1", "--to", "4000", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("A 0: ") and lines[1].startswith("B 0: "), lines
    medians = json.loads(lines[-1])
    for side in "AB":
        for key in FIGURES:
            assert medians[f"{side}_{key}"] > 0, (side, key, medians)


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    proc = _run(str(ROOT), str(ROOT), str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr == f"replay_ab: NO_LOG: {tmp_path} holds no events.db (build one with bench/log_bench.py)\n"
    proc = _run(str(tmp_path), str(ROOT), str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr == f"replay_ab: NOT_A_SOURCE_TREE: {tmp_path} holds no events/reader.py\n"
    proc = _run(str(ROOT), str(ROOT), str(tmp_path), "--pairs", "0")
    assert proc.returncode == 2
    assert proc.stderr.endswith("replay_ab: USAGE_ERROR: --pairs must be at least 1\n"), proc.stderr


def test_an_empty_range_is_refused(quick_log: Path) -> None:
    data = quick_log
    proc = _run(str(ROOT), str(ROOT), str(data), "--pairs", "1", "--after", "100000000", "--to", "100000001")
    assert proc.returncode == 1
    assert proc.stderr == f"replay_ab: EMPTY_RANGE: {data} holds no event with 100000000 < seq <= 100000001\n"
