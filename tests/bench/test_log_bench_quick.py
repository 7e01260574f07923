"""Smoke test of bench/log_bench.py: it runs at --quick size and prints its JSON figures last.

Not a timed test: it checks the benchmark still works and reports every figure, never a speed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"log_bench: DATA_DIR_NOT_EMPTY: {tmp_path} is not empty (notes.txt)"), proc.stderr
    assert (tmp_path / "notes.txt").read_text() == "not a log"


def test_a_data_path_that_is_a_file_or_empty_is_refused_with_its_code(tmp_path: Path) -> None:
    # Every refusal carries a stable code (they were bare sentences); an empty --data was the
    # working directory (Path("") is "."), which --overwrite would clear if it held a Lens log.
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = run_bench("--events", "1", "--data", str(afile))
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"log_bench: DATA_DIR_NOT_A_DIRECTORY: {afile} is not a directory; pass a new or empty directory\n"
    assert afile.read_text() == "x"
    proc = subprocess.run([sys.executable, str(BENCH), "--events", "1", "--overwrite", "--data", ""],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.endswith("\nlog_bench: USAGE_ERROR: argument --data: an empty path names no directory; pass --data DIR\n")
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_ctrl_c_during_the_appends_ends_the_run_and_leaves_a_log_that_verifies(tmp_path: Path) -> None:
    # SIGINT landed as KeyboardInterrupt wherever trio's thread was, inside the store too: the
    # run printed a traceback, or hung for good with the store waiting on a half-recorded append.
    import signal
    import sqlite3
    import time

    data = tmp_path / "log"
    proc = subprocess.Popen([sys.executable, str(BENCH), "--events", "200000", "--no-dictionary", "--json",
                             "--data", str(data)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120

        def appended() -> int:
            try:
                conn = sqlite3.connect(f"file:{data / 'events.db'}?mode=ro", uri=True, timeout=5)
            except sqlite3.OperationalError:  # (not made yet)
                return 0
            try:
                return conn.execute("SELECT count(*) FROM events").fetchone()[0]
            except sqlite3.OperationalError:  # (no table yet)
                return 0
            finally:
                conn.close()

        while appended() < 1000:  # the producers are appending
            assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out) == (130, ""), (proc.returncode, out[-500:], err[-2000:])
    assert err.startswith(f"log_bench: INTERRUPTED: stopped by Ctrl-C (SIGINT); {data} holds the events appended"), err
    assert "Traceback" not in err
    verify = subprocess.run([sys.executable, "-m", "runtime.cli", "log", "verify", "--data", str(data)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and verify.stdout.startswith("ok: "), verify.stdout + verify.stderr
    assert 1000 <= int(verify.stdout.split()[1]) < 200_000
    assert not (data / "bench-floor").exists()


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("parents", [False, True])
def test_the_data_dir_the_benchmark_makes_is_its_owners_alone(tmp_path: Path, parents: bool) -> None:
    """A data directory Lens makes is 0700 (docs/storage-format.md): the benchmark made its own
    with the umask's mode (0755), and `lens serve --data` of it later kept it so."""
    data = tmp_path / "a" / "b" / "log" if parents else tmp_path / "log"
    old = os.umask(0o022)
    try:
        proc = run_bench("--events", "1", "--json", "--data", str(data))
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


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


@pytest.mark.parametrize("events", ["0", "-5", "abc", "1e3", "1_0", ""])
def test_an_event_count_that_is_no_positive_whole_number_is_a_clear_usage_error(tmp_path: Path, events: str) -> None:
    data = tmp_path / "log"
    proc = run_bench("--events", events, "--json", "--data", str(data))
    assert proc.returncode == 2
    assert proc.stdout == ""
    what = f"a positive number of events, not {events}" if events.lstrip("-").isdigit() else \
        f"a positive whole number of events, not {events!r}"
    assert proc.stderr.endswith(f"\nlog_bench: USAGE_ERROR: argument --events: must be {what}\n"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not data.exists()


@pytest.mark.parametrize("twice", [["--events", "5", "--events", "6"], ["--seed", "1", "--seed", "2"], ["--data", "other"]])
def test_an_option_given_twice_is_a_usage_error_not_the_last_one_silently(tmp_path: Path, twice: list[str]) -> None:
    data = tmp_path / "log"
    if twice == ["--data", "other"]:
        twice = ["--data", str(tmp_path / "other")]
    proc = run_bench("--json", "--data", str(data), *twice) if twice[0] == "--data" else \
        run_bench(*twice, "--json", "--data", str(data))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.endswith(f"\nlog_bench: USAGE_ERROR: argument {twice[0]}: given more than once (it takes one value)\n"), \
        proc.stderr
    assert not data.exists() and not (tmp_path / "other").exists()


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


def test_a_data_dir_that_is_not_utf8_is_a_usage_error_and_nothing_is_made(tmp_path: Path) -> None:
    # SQLite opens files by UTF-8 names: the benchmark made the directory, then the store's open
    # ended in a UnicodeEncodeError traceback (exit 1).
    name = os.fsencode(tmp_path) + b"/log\xff"
    proc = subprocess.run([sys.executable, str(BENCH), "--events", "1", "--json", "--data", name],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.endswith("is not valid UTF-8 (SQLite opens files by UTF-8 names); rename the directory "
                                "or pass another --data\n"), proc.stderr
    assert "log_bench: USAGE_ERROR: argument --data: b'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def _bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("log_bench_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("past", [1, 10**20])
def test_more_events_than_memory_holds_are_refused_at_once(tmp_path: Path, past: int) -> None:
    # A phase generates all its events in memory first: `--events 10**26` generated until the
    # machine ran out (on a shared machine, everyone's), with no word and no end.
    limit = _bench_module().max_events()
    data = tmp_path / "log"
    proc = run_bench("--events", str(limit + past), "--json", "--data", str(data))
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr[-500:]
    assert proc.stderr.startswith(f"log_bench: EVENTS_TOO_MANY: --events {limit + past:,} would need about "), proc.stderr
    assert proc.stderr.endswith(f"; pass at most --events {limit}\n"), proc.stderr
    assert not data.exists()


def test_the_event_limit_is_exactly_what_memory_holds() -> None:
    bench = _bench_module()
    limit = bench.max_events()
    assert limit * bench.MEMORY_PER_EVENT <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert limit >= bench.DEFAULT_EVENTS  # the documented full size runs on any machine of this kind
    bench._refuse_too_many(limit)  # at the limit: taken
    with pytest.raises(SystemExit, match=f"EVENTS_TOO_MANY: --events {limit + 1:,} "):
        bench._refuse_too_many(limit + 1)  # one past: refused


def test_a_reader_that_goes_away_ends_the_run_quietly(tmp_path: Path) -> None:
    """`log_bench.py … | head -1`: the report's first `print` into the closed pipe ended the run
    with a `BrokenPipeError` traceback and exit 1. Now, as `lens log decode | head`, it ends
    quietly with 0; the measurements are done and the log in DIR is whole."""
    data = tmp_path / "log"
    proc = subprocess.Popen([sys.executable, str(BENCH), "--events", "64", "--no-dictionary", "--data", str(data)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (0, "")
    verify = subprocess.run([sys.executable, "-m", "runtime.cli", "log", "verify", "--data", str(data)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert verify.stdout == "ok: 64 event(s) verified\n"


def test_a_report_that_cannot_be_written_is_named_not_a_traceback(tmp_path: Path) -> None:
    """A full disk under stdout (`> /dev/full`): a `No space left on device` traceback, exit 1.
    Now one line, `log_bench: IO_ERROR: …`, exit 1 like the benchmark's other refusals."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, str(BENCH), "--events", "64", "--no-dictionary",
                               "--data", str(tmp_path / "log")],
                              cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "log_bench: IO_ERROR: cannot write the report to standard output: No space left on device"]
