"""bench/history_bench.py --quick runs and prints its JSON line (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_history_bench_quick(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "history_bench.py"), "--quick", "--json",
                          "--data", str(tmp_path / "hb")], capture_output=True, text=True, timeout=300, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("items", "search_p50_ms", "search_p99_ms", "like_p50_ms", "index_bytes", "text_bytes"):
        assert key in data and data[key] > 0, key
    assert data["items"] >= 20_000
    assert {q["query"] for q in data["queries"]} == {"common", "rare", "phrase", "prefix", "filtered", "chinese",
                                                   "chinese rare"}
    assert all(q["hits"] > 0 for q in data["queries"])
