"""Smoke test of bench/loop_gap_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still runs both paths of ``json_answer`` for each
answer, with answers of msgspec's length, and the code's own estimate for each view and page
(its views past an ``ESCAPE_MAX``-th of the threshold, so their escapes are counted, and the way
each estimate went), and reports every figure, never a speed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import msgspec
import trio

from runtime.json_chars import ESCAPE_MAX, PIECES_FROM_CHARS, page_chars
from tests.benchrun import quick_figures

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "loop_gap_bench.py"
# Where each answer's estimate goes at --quick: the views (720,000 characters) are counted, plain
# text as its length and under the threshold, quotes and newlines or control characters past it;
# a page by its declared bytes, six characters each (100 events of 15,000 characters past it, of
# 1,500 under).
WENT = {"view": "one_call", "view_escaped": "pieces", "view_controls": "pieces", "events": "pieces",
        "events_small": "one_call", "events_controls": "one_call"}


def test_quick_run_prints_json_figures_last() -> None:
    figures = quick_figures("loop_gap_bench.py", "--quick", timeout=120, cwd=ROOT)
    assert figures["variant"] == "code" and figures["runs"] == 3
    assert set(figures["cases"]) == {"view", "view_escaped", "view_controls", "events", "events_small",
                                     "events_controls", "string"}
    for name, case in figures["cases"].items():
        assert case["json_bytes"] > 100_000, name
        assert ("estimate" in case) == (name != "string"), name
        if name != "string":
            assert case["estimate"]["went"] == WENT[name], name
            assert (case["estimate"]["chars"] > PIECES_FROM_CHARS) == (WENT[name] == "pieces"), name
        if name.startswith("view"):
            # (its characters past an ESCAPE_MAX-th of the threshold and under it: the escapes are
            # counted, and a view of escapes is past the threshold by their count alone)
            assert PIECES_FROM_CHARS // ESCAPE_MAX < case["estimate"]["chars"], name
            assert case["estimate"]["estimate_ms"] > 0, name
        for path in ("one_call", "pieces", "estimate")[:2 if name == "string" else 3]:
            row = case[path]
            for key in ("max_gap_ms", "p99_gap_ms", "wall_ms", "cpu_ms"):
                assert row[key] > 0, (name, path, key)


def test_a_page_is_estimated_by_its_bodies_messagepack() -> None:
    # A row declares its body's MessagePack (``raw_size``), not its seq, kind and time besides.
    spec = importlib.util.spec_from_file_location("loop_gap_bench_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    for name in ("events", "events_small", "events_controls"):
        data = bench.answers(0.01)[name]
        estimate = bench.estimator(name, data)
        assert estimate is not None
        declared = sum(len(msgspec.msgpack.encode(e["body"])) for e in data["events"])
        assert trio.run(estimate) == page_chars(declared) < page_chars(sum(len(msgspec.msgpack.encode(e)) for e in data["events"]))
