"""`lens pair approve` as a real process whose standard output cannot take the credential.

The credential is shown once: an approve that could not print it must not look like a success.
The pending request is recorded with the real :class:`~runtime.pairing.PairStore`, as the
daemon records it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runtime.pairing import PairStore


def lens_command() -> list[str]:
    script = Path(sys.executable).parent / "lens"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runtime.cli"]


def pending_client(tmp_path: Path) -> Path:
    pair = tmp_path / "config" / "pair.json"
    PairStore(pair).register("c1", "client", max_pending=32)
    return pair


def test_approve_with_standard_output_closed_changes_nothing_and_fails(tmp_path: Path):
    # stdout closed: Python writes nothing and says nothing; approve exited 0, having issued a
    # credential (and revoked any earlier one) that nobody could ever read.
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    proc = subprocess.run([*lens_command(), "pair", "approve", "--client", "c1", "--strong-trust"], cwd=tmp_path,
                          preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert "lens: IO_ERROR: " in err and "standard output is closed" in err, err
    assert pair.read_bytes() == before
    assert PairStore(pair).find("c1").status == "pending"


def test_approve_whose_reader_went_away_fails_and_says_to_approve_again(tmp_path: Path):
    # `lens pair approve … | tool` with a tool that exits at once: exit 0, and no credential shown.
    pending_client(tmp_path)
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([*lens_command(), "pair", "approve", "--client", "c1"], cwd=tmp_path, stdout=w,
                              stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert "lens: IO_ERROR: " in err and "could not be printed" in err and "lens pair approve" in err, err
