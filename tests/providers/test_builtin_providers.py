"""The built-in real providers (runtime/providers/builtin.py): ``openai`` and ``anthropic`` on
embedded defaults beside ``faux``, their keys and base URLs from the SDKs' own variables, replaced
or disabled by a config entry of the same id, and the built-in default model they make."""

from __future__ import annotations

import json
import typing

import pytest
from anthropic.types import ModelParam
from openai.types.shared import ChatModel

from runtime.config import Config, ConfigError, parse_config
from runtime.errors import ModelUnavailable
from runtime.providers.anthropic_messages import AnthropicProvider
from runtime.providers.builtin import BUILTINS
from runtime.providers.catalog import build_catalog
from runtime.providers.openai_responses import OpenAIResponsesProvider

OPENAI_KEY = "sk-proj-builtinOpenaiKey7Qw2Lp"
ANTHROPIC_KEY = "sk-ant-api03-builtinAnthKey3Mv7"


def sdk_model_ids(alias: typing.Any) -> set[str]:
    """The literal model ids of an SDK's model-name type (a Literal, or a Union holding one)."""
    out: set[str] = set()
    for arg in typing.get_args(alias):
        out |= sdk_model_ids(arg) if typing.get_args(arg) else ({arg} if isinstance(arg, str) else set())
    return out


def test_the_built_in_models_are_ids_the_pinned_sdks_name():
    known = {"anthropic": sdk_model_ids(ModelParam), "openai": sdk_model_ids(ChatModel)}
    for b in BUILTINS:
        assert b.models and all(m in known[b.id] for m, _ in b.models), (b.id, b.models)


def test_without_keys_they_are_listed_and_answer_key_required_and_faux_is_the_default():
    cat = build_catalog(Config(), environ={})
    listing = {m.ref: m for m in cat.models()}
    assert listing["openai/gpt-5.5"].to_json() == {
        "id": "openai/gpt-5.5", "provider": "openai", "model": "gpt-5.5", "protocol": "openai-responses",
        "contextWindow": 400000, "images": True, "explicitCache": False, "enabled": True, "available": False,
        "reason": "PROVIDER_KEY_REQUIRED", "default": False}
    assert listing["anthropic/claude-sonnet-5-5"].protocol == "anthropic"
    for ref, variable in (("openai/gpt-5.5", "OPENAI_API_KEY"), ("anthropic/claude-opus-5-5", "ANTHROPIC_API_KEY")):
        with pytest.raises(ModelUnavailable) as info:
            cat.check(ref)
        assert info.value.code == "PROVIDER_KEY_REQUIRED" and variable in info.value.message
    assert (cat.default_model, cat.default_source) == ("faux/faux-1", "default")
    assert cat.builtin_reason == "built in: no usable key in ANTHROPIC_API_KEY or OPENAI_API_KEY"
    assert [m.ref for m in cat.models(selectable_only=True)] == ["faux/faux-1"]


@pytest.mark.parametrize("env, default, variable", [
    ({"OPENAI_API_KEY": OPENAI_KEY}, "openai/gpt-5.5", "OPENAI_API_KEY"),
    ({"ANTHROPIC_API_KEY": ANTHROPIC_KEY}, "anthropic/claude-sonnet-5-5", "ANTHROPIC_API_KEY"),
    ({"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}, "anthropic/claude-sonnet-5-5",
     "ANTHROPIC_API_KEY"),
    # a key no header can carry is no key: the next one, else faux
    ({"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": "sk-ant-é"}, "openai/gpt-5.5", "OPENAI_API_KEY"),
    ({"OPENAI_API_KEY": "  ", "ANTHROPIC_API_KEY": ""}, "faux/faux-1", None),
])
def test_the_built_in_default_is_the_first_with_its_key(env, default, variable):
    cat = build_catalog(Config(), environ=env)
    assert (cat.default_model, cat.default_source) == (default, "default")
    if variable:
        assert cat.builtin_reason == f"built in: {variable} is set"
        provider, model, _ = cat.resolve(default)
        assert provider.id == default.split("/")[0] and model == default.split("/")[1]
    assert OPENAI_KEY not in cat.builtin_reason and ANTHROPIC_KEY not in cat.builtin_reason
    # the rest of the chain still wins over it
    cfg = parse_config(json.dumps({"defaultModel": "faux/faux-1"}))
    assert build_catalog(cfg, environ=env).default_source == "config"
    assert build_catalog(Config(), environ=env, cli_model="faux/faux-1").default_source == "cli"


def test_official_base_urls_and_the_sdks_base_url_variables():
    env = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    cat = build_catalog(Config(), environ=env)
    openai, anthropic = cat.resolve("openai/gpt-5.5")[0], cat.resolve("anthropic/claude-haiku-5-5")[0]
    assert isinstance(openai, OpenAIResponsesProvider) and isinstance(anthropic, AnthropicProvider)
    assert (openai.base_url, anthropic.base_url) == ("https://api.openai.com/v1", "https://api.anthropic.com")
    moved = build_catalog(Config(), environ={**env, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                                             "ANTHROPIC_BASE_URL": " https://gateway.example/anthropic "})
    assert moved.resolve("openai/gpt-5.5")[0].base_url == "http://127.0.0.1:9/v1"
    assert moved.resolve("anthropic/claude-haiku-5-5")[0].base_url == "https://gateway.example/anthropic"
    blank = build_catalog(Config(), environ={**env, "OPENAI_BASE_URL": " "})
    assert blank.resolve("openai/gpt-5.5")[0].base_url == "https://api.openai.com/v1"


@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"])
def test_a_base_url_variable_is_checked_as_a_configured_base_url(variable):
    for url, needle in [("ftp://gateway.example/v1", "must be an http:// or https:// URL with a host, not "
                                                     "'ftp://gateway.example/v1'"),
                        ("http://alice:hunter2@gateway.example/v1", "must not carry a user name or password"),
                        ("http://alice:hunter2@gate way.example/v1", "must be an http:// or https:// URL")]:
        with pytest.raises(ConfigError) as info:
            build_catalog(Config(), environ={variable: url})
        assert info.value.message.startswith(f"{variable} ") and needle in info.value.message, info.value.message
        assert "alice" not in info.value.message and "hunter2" not in info.value.message


def test_a_config_entry_of_the_same_id_replaces_or_disables_a_built_in_one():
    cfg = parse_config(json.dumps({"providers": [
        {"id": "openai", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": "LENS_TEST_MINE",
         "models": [{"id": "mine", "contextWindow": 1000}]},
        {"id": "anthropic", "protocol": "anthropic", "enabled": False, "models": [{"id": "claude-sonnet-5-5"}]},
    ]}))
    env = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY, "LENS_TEST_MINE": "k" * 12,
           "OPENAI_BASE_URL": "ftp://not-read-for-a-configured-entry"}
    cat = build_catalog(cfg, environ=env)
    refs = {m.ref: m for m in cat.models()}
    assert sorted(r for r in refs if r.split("/")[0] in ("openai", "anthropic")) == [
        "anthropic/claude-sonnet-5-5", "openai/mine"]
    assert refs["openai/mine"].protocol == "openai-chat" and refs["openai/mine"].context_window == 1000
    assert cat.resolve("openai/mine")[0].base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(ModelUnavailable) as info:
        cat.check("anthropic/claude-sonnet-5-5")
    assert info.value.code == "PROVIDER_DISABLED"
    # neither is built in any more: the built-in default is faux, whatever keys are set
    assert (cat.default_model, cat.builtin_reason) == ("faux/faux-1", "built in: the config replaces the built-in providers")
    only_anthropic = parse_config(json.dumps({"providers": [{"id": "anthropic", "protocol": "anthropic",
                                                             "enabled": False}]}))
    del env["OPENAI_BASE_URL"]  # (read again: openai is built in here)
    assert build_catalog(only_anthropic, environ=env).default_model == "openai/gpt-5.5"
