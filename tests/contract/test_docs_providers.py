"""docs/providers.md: its config example, bounds, quoted refusals, built-in providers and error table,
through each protocol's SDK.

Read as a user reads the page: what it shows is taken from its own text where that is robust,
so that the page and the code drifting apart fail here (see test_docs_examples.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .docs_pages import PROVIDERS, one_match, made  # noqa: F401 (made is a fixture)


def _provider_config(**fields: object) -> str:
    entry = {"id": "oa", "protocol": "openai-responses", "models": [{"id": "m1"}], **fields}
    return json.dumps({"providers": [entry]})


def test_the_providers_config_example_is_read_as_the_page_says():
    """The page's example, put in braces, is a config Lens reads, with the providers, models and
    default it shows; each key of the key table is a key of a provider or model entry."""
    from runtime.config import ModelConfig, ProviderConfig, parse_config, unknown_keys

    block = one_match(r"## Configuration\n\n```jsonc\n(.*?)```", PROVIDERS, re.S).group(1)
    text = "{" + block + "}"
    assert unknown_keys(text) == []
    cfg = parse_config(text, "providers.md")
    assert [(p.id, p.protocol) for p in cfg.providers] == re.findall(
        r'"id": "([a-z]+)", "protocol": "([a-z-]+)"', block)
    assert cfg.default_model == "claude/claude-sonnet-5"
    table = one_match(r"\| key \| meaning \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    keys = re.findall(r"^\| `([A-Za-z\[\]._]+)`(?: · `([A-Za-z\[\]._]+)`)? \|", table, re.M)
    provider_fields = set(ProviderConfig.__struct_encode_fields__)
    model_fields = set(ModelConfig.__struct_encode_fields__)
    named = [k for pair in keys for k in pair if k]
    assert len(named) >= 12, named
    for key in named:
        if key.startswith("models[]."):
            assert key.removeprefix("models[].") in model_fields, key
        else:
            assert key in provider_fields, key


@pytest.mark.parametrize("key", ["timeoutSeconds", "maxRetries"])
def test_the_provider_bounds_and_defaults_hold_at_and_one_past_them(key: str):
    from runtime.config import ConfigError, ProviderConfig, parse_config

    row = one_match(rf"^\| `{key}` \|[^\n]*", PROVIDERS, re.M).group(0)
    lo, hi, default = (int(n.replace(",", "")) for n in re.search(r"\(([\d,]+)–([\d,]+); default ([\d,]+)\)", row).groups())
    assert getattr(ProviderConfig(id="x", protocol="faux"), {"timeoutSeconds": "timeout_seconds",
                                                             "maxRetries": "max_retries"}[key]) == default
    for value in (lo, hi):
        parse_config(_provider_config(**{key: value}))
    for value in (lo - 1, hi + 1):
        with pytest.raises(ConfigError, match=rf"providers\[0\]\.{key} must be {lo} to {hi}"):
            parse_config(_provider_config(**{key: value}))


def test_the_cache_ttl_refusal_is_the_one_the_page_quotes():
    from runtime.config import ConfigError, parse_config

    quoted = one_match(r"\(`(provider 'oa' model 'm1': cacheTtl must be '30m' or '12h', not '2h')`\)", PROVIDERS).group(1)
    with pytest.raises(ConfigError) as caught:
        parse_config(json.dumps({"providers": [{"id": "oa", "protocol": "openai-responses",
                                                "models": [{"id": "m1", "cacheTtl": "2h"}]}]}))
    assert quoted in str(caught.value), caught.value


def test_the_built_in_providers_are_the_page_s():
    from runtime.providers.builtin import BUILTINS

    table = one_match(r"\| id \| protocol \| base URL \| key \| models \(context window\) \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    rows = []
    for line in table.splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        ident, protocol = (re.search(r"`([^`]*)`", c).group(1) for c in cells[:2])
        url, url_env = re.findall(r"`([^`]*)`", cells[2])
        key = re.search(r"`([^`]*)`", cells[3]).group(1)
        window = int(re.search(r"\(([\d,]+) each\)", cells[4]).group(1).replace(",", ""))
        models = tuple((m, window) for m in re.findall(r"`([^`]*)`", cells[4]))
        rows.append((ident, protocol, url, key, url_env, models))
    assert rows == [(b.id, b.protocol, b.base_url, b.key_env, b.base_url_env, b.models) for b in BUILTINS]


def test_every_http_status_a_provider_answers_has_the_code_and_retry_the_error_table_gives():
    """Each status from 400 to 599 (401 aside: ``AUTH_FAILED`` before the status is read), as the
    SDK error of a refused request: the code and the retryable the page's table gives it (a row
    naming the status, else its ``5xx`` row, else its "any other 4xx status" row)."""
    from runtime.providers.sdk import _by_status

    table = one_match(r"\| code \| when \| retryable \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    by_status: dict[str, tuple[str, bool]] = {}
    for line in table.splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        code, when, retry = re.match(r"`([A-Z_]+)`", cells[0]).group(1), cells[1], cells[2]
        if "any other 4xx status" in when:
            by_status.setdefault("4xx", (code, retry == "yes"))
        # (a status qualified by what the body says, ``429 `insufficient_quota` ``, is not the status alone)
        for status in re.findall(r"(?<![\w.])(\d{3}|5xx)(?![\w])(?! `)", when.split(" (")[0]):
            by_status.setdefault(status, (code, retry == "yes"))
    assert {"403", "404", "408", "413", "400", "422", "402", "429", "529", "5xx"} <= set(by_status), by_status
    wrong = []
    for status in (s for s in range(400, 600) if s != 401):
        said = by_status.get(str(status)) or by_status.get(f"{str(status)[0]}xx")
        if said != _by_status(status, "", ""):
            wrong.append((status, said, _by_status(status, "", "")))
    assert not wrong, wrong


@pytest.mark.parametrize("status", [409, 410, 451])
@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat", "anthropic"])
async def test_a_4xx_status_the_table_lists_is_answered_so_through_the_sdk(protocol: str, status: int):
    """The rows of those statuses, run: a loopback server speaking the protocol refuses the
    request with the status, through the official SDK (its retries off)."""
    from runtime.providers.base import ProviderError
    from tests.providers.test_stream_fuzz import _error_reply, ask

    rows = one_match(r"\| code \| when \| retryable \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    row = next((ln for ln in rows.splitlines() if re.search(rf"\| {status} \(", ln)), None) or next(
        ln for ln in rows.splitlines() if "any other 4xx status" in ln)
    code, retry = re.match(r"\| `([A-Z_]+)` \| [^|]* \| (yes|no) \|", row).groups()
    outcome, _, _, _ = await ask(protocol, [_error_reply(protocol, status, "provider", "refused", None)], then=False)
    assert isinstance(outcome, ProviderError), outcome
    assert (outcome.code, outcome.retryable, outcome.status) == (code, retry == "yes", status), outcome


async def test_lens_serve_says_the_default_model_it_took_as_the_providers_page_quotes(tmp_path: Path, nursery):
    """``lens serve`` with ``ANTHROPIC_API_KEY`` set and no config prints the line the page quotes
    (the key is only read, never used: no request is made)."""
    import os

    from tests.daemon.conftest import ServeProcess

    quoted = one_match(r"\(`(lens: default model anthropic/claude-sonnet-5-5 \(built\s+in: ANTHROPIC_API_KEY is set\))`",
                  PROVIDERS).group(1)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.endswith("_BASE_URL")}
    env["ANTHROPIC_API_KEY"] = "sk-ant-docs-example-0000"
    serve = ServeProcess(tmp_path, env=env)
    try:
        await serve.run(nursery)
        assert " ".join(quoted.split()) in serve.lines, serve.lines
    finally:
        assert await serve.terminate() == 0
