"""``lens serve`` and ``lens pair`` as real processes refusing config values and flags cleanly:
``lens: CODE: message`` on stderr, exit 2, no traceback, nothing made on disk.

Each case writes a real config file in a temporary working directory and runs the installed
``lens`` script (:func:`run_lens`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import ServeProcess, run_lens, served_once

NUL_PAIR = '{"pairFile": "a\\u0000b"}'
NO_HOME_PAIR = json.dumps({"pairFile": "~nosuchuser-lens-test/p.json"})
NO_HOME_DATA = json.dumps({"dataDir": "~nosuchuser-lens-test/d"})


def refused(out, code: str, *words: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    assert f"lens: {code}: " in out.stderr, out.stderr
    for w in words:
        assert w in out.stderr, (w, out.stderr)


@pytest.mark.parametrize(("config", "words"), [
    (NUL_PAIR, ["pairFile"]),
    (NO_HOME_PAIR, ["pairFile", "no home directory of user 'nosuchuser-lens-test'"]),
    (NO_HOME_DATA, ["dataDir", "no home directory of user 'nosuchuser-lens-test'"]),
], ids=["nul-pairFile", "no-such-user-pairFile", "no-such-user-dataDir"])
async def test_a_path_that_cannot_be_used_is_config_invalid_at_start(tmp_path: Path, config: str, words: list[str]):
    (tmp_path / "c.jsonc").write_text(config)
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d1", check=False)
    refused(out, "CONFIG_INVALID", "c.jsonc", *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]  # refused before the data directory is made


@pytest.mark.parametrize(("config", "words"), [
    (NUL_PAIR, ["pairFile"]),
    (NO_HOME_PAIR, ["pairFile", "no home directory of user 'nosuchuser-lens-test'"]),
], ids=["nul-pairFile", "no-such-user-pairFile"])
@pytest.mark.parametrize("command", [["list"], ["approve", "--client", "c1"], ["revoke", "--client", "c1"]],
                         ids=["list", "approve", "revoke"])
async def test_lens_pair_refuses_a_pair_file_path_that_cannot_be_used(tmp_path: Path, config: str, words: list[str],
                                                                      command: list[str]):
    (tmp_path / "c.jsonc").write_text(config)
    out = await run_lens(tmp_path, "pair", *command, "--config", "c.jsonc", check=False)
    refused(out, "CONFIG_INVALID", *words)


async def test_a_data_flag_naming_a_home_that_does_not_exist_is_an_invalid_argument(tmp_path: Path):
    out = await run_lens(tmp_path, "serve", "--port", "0", "--data", "~nosuchuser-lens-test/d", check=False)
    refused(out, "INVALID_ARGUMENT", "--data", "no home directory of user 'nosuchuser-lens-test'")
    assert list(tmp_path.iterdir()) == []


async def test_an_empty_model_flag_is_an_invalid_argument(tmp_path: Path):
    # `--model ''` fell back to the config's or the built-in default model, silently (an empty
    # --host or --data is refused too).
    out = await run_lens(tmp_path, "serve", "--port", "0", "--model", "", check=False)
    # (named as every flag's refusal is: "the command line: --model …")
    refused(out, "INVALID_ARGUMENT", "the command line: --model must be '<provider id>/<model id>', not empty")
    assert list(tmp_path.iterdir()) == []


async def test_a_model_flag_its_provider_does_not_list_is_model_unknown(tmp_path: Path):
    # The built-in faux provider lists faux/faux-1 only; `--model faux/nonexistent` started
    # without a word, though decisions.md promises MODEL_UNKNOWN for a --model typo.
    out = await run_lens(tmp_path, "serve", "--port", "0", "--data", "d", "--model", "faux/nonexistent", check=False)
    # (the built-in faux's model is the catalog's own: refused as a configured provider's typo is)
    refused(out, "MODEL_UNKNOWN", "provider 'faux' has no model 'nonexistent' (configured: faux-1)")
    (tmp_path / "c.jsonc").write_text(json.dumps({"providers": [
        {"id": "a", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "models": [{"id": "m1"}]}]}))
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", "--model", "a/m2",
                         check=False)
    refused(out, "MODEL_UNKNOWN", "provider 'a' has no model 'm2' (configured: m1)")  # (as before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]  # no data directory "d" made


def executor_config(tmp_path: Path, token_env: str) -> None:
    """``c.jsonc`` in ``tmp_path``: a remote executor whose token is read from ``token_env``."""
    (tmp_path / "c.jsonc").write_text(json.dumps({"executor": {"address": "127.0.0.1:7777", "tokenEnv": token_env}}))


async def test_an_executor_token_not_in_the_environment_is_refused_before_anything_is_made(tmp_path: Path):
    # The data directory (events.db, projections.db, lock) used to be made first.
    executor_config(tmp_path, "LENS_TEST_TOKEN_NOT_SET")
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "deep/d", check=False)
    refused(out, "CONFIG_INVALID", "executor.tokenEnv LENS_TEST_TOKEN_NOT_SET is not set in the environment")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]


@pytest.mark.parametrize(("token_env", "token", "words", "never_shown"), [
    # The daemon started, and every call to the remote executor then failed as
    # "EXECUTOR_ERROR: executor call failed (INTERNAL: Invalid metadata)".
    ("LENS_TEST_TOKEN_NOT_ASCII", "geheimnis-schl\u00fcssel-1", "printable ASCII", "geheimnis"),
    # The daemon started, and its calls to the remote executor then failed by chance (grpc
    # refuses headers past 8 KiB) as "EXECUTOR_ERROR: ... RESOURCE_EXHAUSTED: received metadata
    # size exceeds soft limit".
    ("LENS_TEST_TOKEN_LONG", "k" * 4097, "at most 4096 characters", "kkkkkkkk"),
    # `lens executor serve` refuses a token of fewer than 16 characters (EXECUTOR_TOKEN_MISSING),
    # so no executor can hold one: the daemon started with it, and every call to the remote
    # executor then failed as EXECUTOR_UNAUTHENTICATED, the cause named nowhere.
    ("LENS_TEST_TOKEN_SHORT", "k" * 15, "at least 16 characters", "kkkkkkkk"),
], ids=["not-printable-ascii", "4097-characters", "15-characters"])
async def test_an_executor_token_the_executor_cannot_take_is_refused_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token_env: str, token: str, words: str, never_shown: str):
    monkeypatch.setenv(token_env, token)
    executor_config(tmp_path, token_env)
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "deep/d", check=False)
    refused(out, "CONFIG_INVALID", f"executor.tokenEnv {token_env}", words)
    assert never_shown not in out.stderr  # (the token itself is never shown)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]


async def test_an_executor_token_without_an_address_is_refused_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # `executor.tokenEnv` with no `executor.address` started a local executor without a word: the
    # token went unused, and the agent's commands ran on this host where a remote executor was meant.
    monkeypatch.setenv("LENS_TEST_TOKEN_UNUSED", "k" * 32)
    (tmp_path / "c.jsonc").write_text(json.dumps({"executor": {"tokenEnv": "LENS_TEST_TOKEN_UNUSED"}}))
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
    refused(out, "CONFIG_INVALID", "c.jsonc", "executor.tokenEnv is set but executor.address is not",
            "set executor.address to its 'host:port', or make executor.tokenEnv null")
    assert "k" * 16 not in out.stderr  # (the token itself is never shown)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]  # refused before anything is made
    # null (or no executor section) is a local executor, as before
    (tmp_path / "c.jsonc").write_text(json.dumps({"executor": {"tokenEnv": None, "address": None}}))
    async with served_once(ServeProcess(tmp_path, "--config", "c.jsonc")):
        pass


async def test_an_executor_token_of_16_characters_starts_the_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # (at the limit, as the executor takes it: the daemon starts; the address is not dialled at start)
    monkeypatch.setenv("LENS_TEST_TOKEN_SHORT", "k" * 16)
    executor_config(tmp_path, "LENS_TEST_TOKEN_SHORT")
    async with served_once(ServeProcess(tmp_path, "--config", "c.jsonc")):
        pass


@pytest.mark.parametrize("provider", [
    {"id": "a", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "models": []},
    # (a faux provider of the config, as the template's "demo", takes any model id too: its
    # model was checked against the built-in faux's `faux-1` and refused at start)
    {"id": "a", "protocol": "faux", "script": [{"text": "Hello!"}]},
], ids=["openai-chat", "faux"])
async def test_a_model_flag_for_a_provider_that_lists_no_models_starts_with_a_note(tmp_path: Path,
                                                                                   provider: dict[str, object]):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({"providers": [provider]}))
    serve = ServeProcess(tmp_path, "--model", "a/anything")
    async with served_once(serve):
        pass
    notes = [line for line in serve.lines if "lists no models" in line]
    assert notes == ["lens: note: provider 'a' lists no models, so --model a/anything cannot be checked "
                     "before a session uses it"], serve.lines


@pytest.mark.parametrize("raw", [b"", b"\xef\xbb\xbf", b"  \n", b"// every line commented out\n/* { } */\n"],
                         ids=["empty", "bom-only", "blank", "comments-only"])
async def test_an_empty_config_file_is_refused_saying_it_is_empty(tmp_path: Path, raw: bytes):
    # An empty file was "invalid JSON: Input data was truncated", which reads like a file cut
    # short by a failed write.
    (tmp_path / "c.jsonc").write_bytes(raw)
    for args in (["serve", "--port", "0", "--data", "d1"], ["pair", "list"]):
        out = await run_lens(tmp_path, *args, "--config", "c.jsonc", check=False)
        refused(out, "CONFIG_INVALID", "c.jsonc: ", "no JSON value: the text is empty")
        assert "truncated" not in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]


LITERAL_KEY = "sk-literal-Qw7Lx2Vb9Zt4Kp"


@pytest.mark.parametrize(("section", "words"), [
    ({"providers": [{"id": "oa", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1",
                     "apiKey": LITERAL_KEY, "models": [{"id": "m"}]}]}, ["provider 'oa'", "'apiKey'", "'apiKeyEnv'"]),
    ({"providers": [{"id": "oa", "protocol": "openai-chat", "api_key": LITERAL_KEY, "models": [{"id": "m"}]}]},
     ["provider 'oa'", "'api_key'", "'apiKeyEnv'"]),
    ({"webSearch": {"apiKey": LITERAL_KEY}}, ["webSearch", "'apiKey'", "'apiKeyEnv'"]),
], ids=["provider-apiKey", "provider-api_key", "webSearch-apiKey"])
async def test_a_key_written_in_the_config_is_refused_at_start_without_quoting_it(tmp_path: Path, section: dict,
                                                                                   words: list[str]):
    # Keys come only from environment variables (F-MOD-6). A literal key was ignored as an unknown
    # key and the provider failed at its first request; now the start refuses it, naming the key
    # to use instead, and never quotes the value.
    (tmp_path / "c.jsonc").write_text(json.dumps(section))
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d1", check=False)
    refused(out, "CONFIG_INVALID", "c.jsonc", "environment variable", *words)
    assert LITERAL_KEY[:8] not in out.stderr + out.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]  # refused before the data directory is made
    # The same file is refused by `lens pair`, which reads the config too.
    out = await run_lens(tmp_path, "pair", "list", "--config", "c.jsonc", check=False)
    refused(out, "CONFIG_INVALID", "'apiKeyEnv'")
    assert LITERAL_KEY[:8] not in out.stderr + out.stdout


async def test_a_variable_named_by_apikeyenv_is_still_the_way_a_key_is_given(tmp_path: Path):
    # (`apiKeyEnv` and the provider's other keys are not taken for a literal key)
    config = {"providers": [{"id": "oa", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1",
                             "apiKeyEnv": "LENS_TEST_LITERAL_KEY", "models": [{"id": "m"}]}],
              "webSearch": {"apiKeyEnv": "LENS_TEST_LITERAL_KEY"}}
    (tmp_path / "c.jsonc").write_text(json.dumps(config))
    out = await run_lens(tmp_path, "pair", "list", "--config", "c.jsonc", check=False)
    assert out.returncode == 0, (out.stdout, out.stderr)


@pytest.mark.parametrize(("value", "fault"), [
    (" faux/faux-1", "it begins with a blank"),
    ("faux/faux-1\t", "it ends with a blank"),
    (" faux/faux-1 ", "it begins and ends with a blank"),
    ("   ", "it is all blank"),
], ids=["begins", "ends", "both", "all-blank"])
async def test_a_model_with_a_blank_around_it_is_refused_naming_the_blank(tmp_path: Path, value: str, fault: str):
    # `--model " faux/faux-1"` (a reference copied with a space) was "MODEL_UNKNOWN: no provider
    # ' faux' is configured", and a config's defaultModel the same: the blank went unnamed, where
    # the HTTP routes say "it begins with a blank" for the same value.
    out = await run_lens(tmp_path, "serve", "--port", "0", "--data", "d", "--model", value, check=False)
    refused(out, "INVALID_ARGUMENT", "the command line: --model must be '<provider id>/<model id>' with no blank "
                                     f"around it: {fault}")
    (tmp_path / "c.jsonc").write_text(json.dumps({"defaultModel": value}))
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
    refused(out, "CONFIG_INVALID", f"c.jsonc: defaultModel must be '<provider id>/<model id>' with no blank around it: {fault}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]  # no data directory "d" made
