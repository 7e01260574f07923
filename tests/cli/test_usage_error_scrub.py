"""A usage error is scrubbed of the keys the config named by ``--config`` knows, also when
``--config`` is written as argparse takes it abbreviated (``--conf PATH``, ``--conf=PATH``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from events.secrets import marker
from runtime.cli import _config_named, _option_word
from tests.cli.test_pair_cli import lens_command

SECRET = "pasted-key-value-0123456789"


@pytest.mark.parametrize("written", [["--config", "{path}"], ["--config={path}"], ["--conf", "{path}"],
                                     ["--conf={path}"], ["--co", "{path}"]])
def test_a_usage_error_is_scrubbed_with_the_keys_of_the_config_named_abbreviated(tmp_path: Path,
                                                                                 written: list[str]):
    # (`--conf PATH` scrubbed with the default config's keys: the key pasted where the port goes
    # was echoed in the error)
    config = tmp_path / "elsewhere.jsonc"
    config.write_text(json.dumps({"providers": [{"id": "p", "protocol": "openai-chat", "apiKeyEnv": "MY_KEY",
                                                 "models": [{"id": "m"}]}]}))
    args = [w.format(path=config) for w in written]
    env = {**os.environ, "MY_KEY": SECRET}
    out = subprocess.run([*lens_command(), "serve", *args, "--port", SECRET], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    last = out.stderr.splitlines()[-1]
    assert "USAGE_ERROR: argument --port:" in last and SECRET not in out.stderr, out.stderr
    assert marker("MY_KEY") in last, last


def test_an_option_word_is_read_as_argparse_reads_it():
    assert _option_word("--config", "--config") == (True, None)
    assert _option_word("--conf", "--config") == (True, None)
    assert _option_word("--conf=a=b", "--config") == (True, "a=b")
    assert _option_word("--config=", "--config") == (True, "")
    assert _option_word("--", "--config") == (False, None)  # (no option: what follows is none)
    assert _option_word("--configs", "--config") == (False, None)
    assert _option_word("-c", "--config") == (False, None)
    assert _config_named(["serve", "--conf", "x.jsonc"]) == Path("x.jsonc")
    assert _config_named(["serve", "--", "--config", "x.jsonc"]) is None
    assert _config_named(["serve", "--conf"]) is None
