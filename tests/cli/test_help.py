"""SPEC section 9's command line, as ``--help`` shows it: every command the spec names answers
``--help`` (exit 0, its usage on stdout, nothing on stderr) and names every flag the spec gives
it, with a line of help for each (``lens executor serve --workspace`` and ``lens pair revoke
--client`` had none)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_pair_cli import lens_command

# command -> the flags SPEC section 9 (and F-API-2, F-API-7) gives it
SPEC_FLAGS = {
    ("serve",): ["--config PATH", "--data DIR", "--host", "--port", "--model"],
    ("executor", "serve"): ["--workspace DIR", "--listen HOST:PORT"],
    ("pair", "approve"): ["--client", "--strong-trust"],
    ("pair", "list"): [],
    ("pair", "revoke"): ["--client"],
    ("log", "decode"): ["--data DIR", "--session", "--kind", "--from", "--to", "--raw"],
    ("log", "rebuild"): ["--data DIR", "--projection"],
    ("log", "verify"): ["--data DIR"],
    ("log", "stats"): ["--data DIR"],
}


@pytest.mark.parametrize("command", list(SPEC_FLAGS), ids=[" ".join(c) for c in SPEC_FLAGS])
def test_help_names_every_flag_the_spec_gives_the_command(tmp_path: Path, command: tuple[str, ...]):
    out = subprocess.run([*lens_command(), *command, "--help"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.startswith(f"usage: lens {' '.join(command)} "), out.stdout
    options = out.stdout.split("options:", 1)[1]
    for flag in SPEC_FLAGS[command]:
        # the flag's own line in the options list, then its help: on that line after two spaces or
        # more, or on the next, indented past the flags (argparse's two layouts)
        m = re.search(rf"^  {re.escape(flag)}(?: [A-Z:_]+)?(?P<same>[^\n]*)\n(?P<next>[^\n]*)", options, re.M)
        assert m, (flag, out.stdout)
        assert re.match(r" {2,}\S", m.group("same")) or (m.group("same") == "" and re.match(r" {6,}\S", m.group("next"))), \
            (f"{flag} has no help", out.stdout)
    assert list(tmp_path.iterdir()) == []  # --help makes nothing


def test_lens_alone_lists_every_command_of_the_spec(tmp_path: Path):
    out = subprocess.run([*lens_command(), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in ("serve", "executor", "pair", "log"):
        assert re.search(rf"^    {name}\s+\S", out.stdout, re.M), out.stdout


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("pair", "list"), ("pair", "approve", "--client", "c"),
                                     ("pair", "revoke", "--client", "c")], ids=" ".join)
def test_an_empty_config_path_is_a_usage_error_for_every_command(tmp_path: Path, command: tuple[str, ...]):
    # `lens log` refused it already; `lens serve` and `lens pair` read it as the working directory
    # ("CONFIG_INVALID: cannot read config file .: it is a directory").
    out = subprocess.run([*lens_command(), *command, "--config", ""], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    name = " ".join(command[:2] if command[0] == "pair" else command[:1])
    assert out.stderr.splitlines()[-1] == f"lens {name}: USAGE_ERROR: argument --config: an empty path names no config file"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("words", [("--bogus",), ("-x",), ("--bogus=1",), ("log", "--bogus"), ("pair", "--bogus"),
                                   ("executor", "--bogus"), ("serve", "--bogus")], ids=" ".join)
def test_an_unknown_flag_without_its_command_is_named(tmp_path: Path, words: tuple[str, ...]):
    # argparse checks a required COMMAND before the leftovers: `lens --bogus`, `lens log --bogus`,
    # `lens pair --bogus` said "the following arguments are required: COMMAND", not the flag.
    out = subprocess.run([*lens_command(), *words], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    name = " ".join(["lens", *words[:-1]])
    assert out.stderr.startswith(f"usage: {name} "), out.stderr
    assert out.stderr.splitlines()[-1] == f"{name}: USAGE_ERROR: unrecognized arguments: {words[-1]}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("words", [(), ("log",), ("pair",), ("executor",)], ids=lambda w: " ".join(("lens", *w)))
def test_a_command_left_out_is_named(tmp_path: Path, words: tuple[str, ...]):
    out = subprocess.run([*lens_command(), *words], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    name = " ".join(["lens", *words])
    assert out.stderr.startswith(f"usage: {name} "), out.stderr
    assert out.stderr.splitlines()[-1] == f"{name}: USAGE_ERROR: the following arguments are required: COMMAND"
