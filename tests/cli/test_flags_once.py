"""`lens serve`, `lens pair …` and `lens executor serve` with an option given twice, as real
processes.

Each of their options takes one value. Given twice, argparse let the last one win silently:
`lens pair approve --client a --client b` approved `b` alone and printed its credential, `lens
serve --port 7420 --port 0` listened somewhere else than the first flag said. It is a usage error
now (exit 2, the usage, `USAGE_ERROR` naming the option), as it is for `lens log decode`'s
`--session`, `--from` and `--to`, and nothing is changed or started."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runtime.pairing import PairStore

from tests.cli.test_pair_cli import lens_command

TWICE = [
    ("serve", "--config", "a.jsonc", "--config", "b.jsonc"),
    ("serve", "--data", "d1", "--data=d2"),
    ("serve", "--host", "127.0.0.1", "--host", "::1"),
    ("serve", "--port", "0", "--port", "0"),
    ("serve", "--model", "faux/faux-1", "--model", "faux/faux-1"),
    ("executor", "serve", "--workspace", "w", "--workspace", "w"),
    ("executor", "serve", "--workspace", "w", "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
    ("executor", "serve", "--workspace", "w", "--state", "s1", "--state", "s2"),
    ("pair", "approve", "--client", "c1", "--client", "c2"),
    ("pair", "approve", "--client", "c1", "--config", "x.jsonc", "--config", "x.jsonc"),
    ("pair", "list", "--config", "x.jsonc", "--config", "y.jsonc"),
    ("pair", "revoke", "--client", "c1", "--client", "c2"),
    ("pair", "revoke", "--client", "c1", "--config", "x.jsonc", "--config", "y.jsonc"),
]


@pytest.mark.parametrize("argv", TWICE, ids=[" ".join(a) for a in TWICE])
def test_an_option_given_twice_is_a_usage_error(tmp_path: Path, argv: tuple[str, ...]):
    pair = tmp_path / "config" / "pair.json"
    store = PairStore(pair)
    store.register("c1", "one", max_pending=32)
    store.register("c2", "two", max_pending=32)
    before = pair.read_bytes()
    option = next(a for i, a in enumerate(argv) if a.startswith("--") and a.split("=")[0] in argv[i + 1:]
                  or any(b.startswith(a + "=") for b in argv[i + 1:]))
    proc = subprocess.run([*lens_command(), *argv], cwd=tmp_path, capture_output=True, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err)
    assert err.startswith("usage: lens "), err
    assert err.splitlines()[-1].endswith(
        f"USAGE_ERROR: argument {option}: given more than once (it takes one value)"), err
    assert "Traceback" not in err and proc.stdout == b""
    assert pair.read_bytes() == before  # no client approved or revoked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config"]  # no data directory made


def test_an_option_given_once_still_runs(tmp_path: Path):
    # the other half of the edge: one --client, one --config (the refusal above is not of any use)
    pair = tmp_path / "config" / "pair.json"
    PairStore(pair).register("c1", "one", max_pending=32)
    (tmp_path / "config" / "lens.jsonc").write_text("{}")
    proc = subprocess.run([*lens_command(), "pair", "approve", "--client", "c1", "--config", "config/lens.jsonc"],
                          cwd=tmp_path, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert len(proc.stdout.decode().splitlines()[-1]) > 20  # the credential, alone on the last line
