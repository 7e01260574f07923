"""One benchmark of ``bench/`` run as its smoke tests run it: a subprocess whose figures are
checked for shape, never against a target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def quick_figures(script: str, *args: str, timeout: float, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``bench/<script>`` with ``args``; it must exit 0 and print its Markdown table of
    figures. Returns its last line: the figures as JSON."""
    proc = subprocess.run([sys.executable, str(BENCH_DIR / script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("| figure |") for line in lines), proc.stdout  # the Markdown table
    return json.loads(lines[-1])
