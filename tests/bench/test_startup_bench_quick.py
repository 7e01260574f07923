"""Smoke test of bench/startup_bench.py on a small log of real sessions: it runs and prints its
figures last, and both ways of asking find the same sessions to resume. Never a speed check."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from events import types as t
from events.store import Draft, open_store

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "startup_bench.py"


async def test_startup_bench_prints_its_figures_last(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with open_store(data) as store:
        for i in range(6):
            sid = f"ses_{i}"
            drafts = [t.SessionCreated(model="faux/echo"), t.InputSubmitted(content=[t.TextPart("hi")])]
            if i % 2:  # odd sessions took their input and finished
                drafts += [t.InputPlaced("r"), t.TaskStarted("r"), t.TaskFinished()]
            await store.append(*[Draft(ev, project_id="p1", session_id=sid, agent_id="main") for ev in drafts])
    (data / "artifacts").mkdir()
    files = {}
    for n in range(3):  # artifacts no event names: the sweep's reads are timed, nothing is removed
        body = b"artifact %d" % n
        files[hashlib.sha256(body).hexdigest()] = body
        (data / "artifacts" / hashlib.sha256(body).hexdigest()).write_bytes(body)
    proc = subprocess.run([sys.executable, str(BENCH), "--data", str(data), "--runs", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_bytes() for p in (data / "artifacts").iterdir()} == files
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("| events |"), proc.stdout
    figures = json.loads(lines[-1])
    assert figures["events"] == 3 * 2 + 3 * 5
    assert figures["log_scan_sessions"] == figures["projection_sessions"] == 3
    assert figures["artifacts"] == 3
    for key in ("log_scan_ms", "projection_ms", "speedup", "artifact_sweep_ms"):
        assert figures[key] > 0, (key, figures)


def test_startup_bench_names_a_missing_log(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--data", str(tmp_path / "none")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no event log in" in proc.stderr and "Traceback" not in proc.stderr
