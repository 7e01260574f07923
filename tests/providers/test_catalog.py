"""The provider catalog (F-MOD-5/6): registration from config, enablement, keys from the
environment only (never in logs or errors), the default-model chain, the models listing."""

from __future__ import annotations

import json
import logging

import pytest

from runtime.config import ConfigError, parse_config
from runtime.errors import ModelUnavailable
from runtime.providers.anthropic_messages import AnthropicProvider
from runtime.providers.builtin import BUILTINS
from runtime.providers.catalog import BUILTIN_DEFAULT_MODEL, build_catalog, default_model
from runtime.providers.faux import FauxProvider
from runtime.providers.openai_chat import OpenAIChatProvider
from runtime.providers.openai_responses import OpenAIResponsesProvider

from .conftest import Ctx, Deltas
from .scripts import error, reply

SECRET = "sk-test-DO-NOT-LEAK-4f9a8b7c6d5e"


def config(url: str = "http://127.0.0.1:9", **extra) -> str:
    return json.dumps({
        "providers": [
            {"id": "oa", "protocol": "openai-responses", "baseUrl": url + "/v1", "apiKeyEnv": "LENS_TEST_OA_KEY",
             "models": [{"id": "m1", "contextWindow": 200000, "images": True, "explicitCache": True}]},
            {"id": "local", "protocol": "openai-chat", "baseUrl": url + "/v1",
             "models": [{"id": "qwen3", "contextWindow": 131072}]},
            {"id": "claude", "protocol": "anthropic", "baseUrl": url, "apiKeyEnv": "LENS_TEST_ANTHROPIC_KEY",
             "models": [{"id": "c1"}]},
            {"id": "off", "protocol": "anthropic", "enabled": False, "apiKeyEnv": "LENS_TEST_MISSING_KEY",
             "models": [{"id": "c2"}]},
            {"id": "script", "protocol": "faux", "models": [{"id": "f"}], "script": [{"text": "scripted"}]},
        ],
        **extra,
    })


def test_providers_are_registered_from_config():
    cat = build_catalog(parse_config(config()), environ={"LENS_TEST_OA_KEY": SECRET})
    assert isinstance(cat.providers["oa"], OpenAIResponsesProvider)
    assert isinstance(cat.providers["local"], OpenAIChatProvider)
    assert isinstance(cat.providers["script"], FauxProvider) and isinstance(cat.providers["faux"], FauxProvider)
    assert "claude" not in cat.providers and "off" not in cat.providers
    provider, model, ref = cat.resolve("oa/m1")
    assert (provider.id, model, ref) == ("oa", "m1", "oa/m1")
    assert cat.resolve("local/qwen3")[0].base_url == "http://127.0.0.1:9/v1"
    assert cat.model_config("oa/m1").explicit_cache is True
    with pytest.raises(ModelUnavailable) as info:
        cat.resolve("oa/unknown")
    assert info.value.code == "MODEL_UNKNOWN"


def test_disabled_comes_before_key_required():
    cat = build_catalog(parse_config(config()), environ={})
    for ref, code, needle in [("off/c2", "PROVIDER_DISABLED", "disabled"),
                              ("claude/c1", "PROVIDER_KEY_REQUIRED", "LENS_TEST_ANTHROPIC_KEY"),
                              ("oa/m1", "PROVIDER_KEY_REQUIRED", "LENS_TEST_OA_KEY")]:
        with pytest.raises(ModelUnavailable) as info:
            cat.check(ref)
        assert info.value.code == code and needle in info.value.message
    assert cat.check("local/qwen3") == "local/qwen3"  # no key needed
    empty = build_catalog(parse_config(config()), environ={"LENS_TEST_ANTHROPIC_KEY": ""})
    with pytest.raises(ModelUnavailable) as info:
        empty.check("claude/c1")
    assert info.value.code == "PROVIDER_KEY_REQUIRED"  # an empty variable is no key


def test_keys_come_from_the_process_environment(monkeypatch):
    monkeypatch.setenv("LENS_TEST_ANTHROPIC_KEY", SECRET)
    cat = build_catalog(parse_config(config()))
    assert isinstance(cat.resolve("claude/c1")[0], AnthropicProvider)


def test_models_listing_for_clients():
    cat = build_catalog(parse_config(config(defaultModel="local/qwen3")), environ={"LENS_TEST_OA_KEY": SECRET})
    listing = {m.ref: m for m in cat.models()}
    # (and the built-in real providers' models, listed without their keys: not selectable)
    builtin = {f"{b.id}/{m}" for b in BUILTINS for m, _ in b.models}
    assert set(listing) == {"oa/m1", "local/qwen3", "claude/c1", "off/c2", "script/f", "faux/faux-1", *builtin}
    assert all(listing[ref].reason == "PROVIDER_KEY_REQUIRED" for ref in builtin)
    oa = listing["oa/m1"].to_json()
    assert oa == {"id": "oa/m1", "provider": "oa", "model": "m1", "protocol": "openai-responses", "contextWindow": 200000,
                  "images": True, "explicitCache": True, "enabled": True, "available": True, "reason": None, "default": False}
    assert (listing["off/c2"].enabled, listing["off/c2"].available, listing["off/c2"].reason) == (False, False, "PROVIDER_DISABLED")
    assert (listing["claude/c1"].enabled, listing["claude/c1"].available, listing["claude/c1"].reason) == (True, False, "PROVIDER_KEY_REQUIRED")
    assert listing["local/qwen3"].default is True
    assert {m.ref for m in cat.models(selectable_only=True)} == {"oa/m1", "local/qwen3", "script/f", "faux/faux-1"}
    assert SECRET not in json.dumps([m.to_json() for m in cat.models()])


def test_default_model_chain():
    assert default_model() == (BUILTIN_DEFAULT_MODEL, "default")
    assert default_model(config="a/1") == ("a/1", "config")
    assert default_model(saved="b/2", config="a/1") == ("b/2", "saved")
    assert default_model(cli="c/3", saved="b/2", config="a/1") == ("c/3", "cli")
    assert default_model(session="d/4", cli="c/3", saved="b/2", config="a/1") == ("d/4", "session")
    cfg = parse_config(config(defaultModel="local/qwen3"))
    assert (build_catalog(cfg).default_model, build_catalog(cfg).default_source) == ("local/qwen3", "config")
    assert build_catalog(cfg, saved_default="oa/m1").default_model == "oa/m1"
    assert build_catalog(cfg, cli_model="faux/x", saved_default="oa/m1").default_source == "cli"
    # A default on a disabled provider does not stop the catalog; it fails when used.
    cat = build_catalog(cfg, saved_default="off/c2")
    assert cat.default_model == "off/c2"
    with pytest.raises(ModelUnavailable) as info:
        cat.resolve(None)
    assert info.value.code == "PROVIDER_DISABLED"
    assert build_catalog(parse_config("{}")).default_model == BUILTIN_DEFAULT_MODEL


@pytest.mark.parametrize("where", ["provider", "model"])
def test_cache_ttl_in_config_is_30m_or_12h(where):
    def with_ttl(ttl: str) -> str:
        cfg = json.loads(config())
        (cfg["providers"][0] if where == "provider" else cfg["providers"][0]["models"][0])["cacheTtl"] = ttl
        return json.dumps(cfg)

    for ttl in ("30m", "12h"):
        assert build_catalog(parse_config(with_ttl(ttl)), environ={"LENS_TEST_OA_KEY": SECRET})
    for ttl in ("2h", "1h", "", "30M"):
        with pytest.raises(ConfigError) as info:
            parse_config(with_ttl(ttl))
        assert f"cacheTtl must be '30m' or '12h', not {ttl!r}" in str(info.value)
        assert "'oa'" in str(info.value) and (where == "provider" or "'m1'" in str(info.value))


async def test_cache_ttl_from_config_reaches_the_wire(server):
    from .test_caching import long_history, marked

    cfg = json.loads(config(server.url))
    oa = cfg["providers"][0]
    oa["cacheTtl"] = "12h"  # the provider's default …
    oa["models"].append({"id": "m2", "explicitCache": True, "cacheTtl": "30m"})  # … a model's own wins
    cat = build_catalog(parse_config(json.dumps(cfg)), environ={"LENS_TEST_OA_KEY": SECRET})
    try:
        for model_id, ttl in (("m1", "12h"), ("m2", None)):
            provider, model, _ = cat.resolve(f"oa/{model_id}")
            server.push(reply("openai-responses", text="ok"))
            await provider.stream(long_history(2).request(model), Deltas())
            found = [bp for _, bp in marked(server.bodies[-1], "prompt_cache_breakpoint")]
            expected = {"mode": "explicit", "ttl": ttl} if ttl else {"mode": "explicit"}  # 30m: the default
            assert found and all(bp == expected for bp in found), found
    finally:
        await cat.aclose()


async def test_a_key_never_reaches_logs_or_errors(server, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, SDK and httpx2 debug output included
    cat = build_catalog(parse_config(config(server.url)), environ={"LENS_TEST_OA_KEY": SECRET, "LENS_TEST_ANTHROPIC_KEY": SECRET},
                        max_retries=1)
    try:
        oa, model, _ = cat.resolve("oa/m1")
        claude, cmodel, _ = cat.resolve("claude/c1")
        server.push(error("openai-responses", 500, "boom"), reply("openai-responses", text="hello"),
                    error("anthropic", 401, f"invalid x-api-key {SECRET}", kind="authentication_error"))
        result = await oa.stream(Ctx().user("hi").request(model), Deltas())
        assert result.text == "hello"
        from runtime.providers.base import ProviderError

        with pytest.raises(ProviderError) as info:
            await claude.stream(Ctx().user("hi").request(cmodel), Deltas())
        assert info.value.code == "AUTH_FAILED"
        assert SECRET not in info.value.message and "LENS_TEST_ANTHROPIC_KEY" in info.value.message
        # The key was sent (as the SDKs' auth header) …
        assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
        h = server.requests[2].headers
        assert SECRET in (h.get("x-api-key"), h.get("authorization", "").removeprefix("Bearer "))
        # … and appears nowhere else.
        assert SECRET not in caplog.text
        assert all(SECRET not in repr(p) for p in cat.providers.values())
        assert SECRET not in json.dumps(result.diagnostics)
        assert all(SECRET not in json.dumps(r.body) for r in server.requests)
    finally:
        await cat.aclose()


async def test_a_key_with_a_line_ending_is_sent_without_it_and_never_logged(server, caplog):
    """A key read from a file with CRLF endings (or pasted with a space) held a character no HTTP
    header may carry: every request failed as a retryable CONNECTION_FAILED, and the SDK's debug
    log of that failure quoted the header, key included. The white space around a key is no part
    of it; a key with other characters a header cannot carry cannot be used (named by variable)."""
    caplog.set_level(logging.DEBUG)
    cat = build_catalog(parse_config(config(server.url)), environ={"LENS_TEST_OA_KEY": SECRET + "\r\n",
                                                                   "LENS_TEST_ANTHROPIC_KEY": f" {SECRET}\t"}, max_retries=0)
    try:
        server.push(reply("openai-responses", text="one"), reply("anthropic", text="two"))
        oa, model, _ = cat.resolve("oa/m1")
        assert (await oa.stream(Ctx().user("hi").request(model), Deltas())).text == "one"
        claude, cmodel, _ = cat.resolve("claude/c1")
        assert (await claude.stream(Ctx().user("hi").request(cmodel), Deltas())).text == "two"
        assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
        h = server.requests[1].headers
        assert SECRET in (h.get("x-api-key"), h.get("authorization", "").removeprefix("Bearer "))
        assert "DO-NOT-LEAK" not in caplog.text
    finally:
        await cat.aclose()
    for bad in (SECRET[:10] + "\r" + SECRET[10:], SECRET[:10] + "é" + SECRET[10:], SECRET[:10] + " " + SECRET[10:], " \r\n"):
        broken = build_catalog(parse_config(config(server.url)), environ={"LENS_TEST_OA_KEY": bad})
        with pytest.raises(ModelUnavailable) as info:
            broken.check("oa/m1")
        assert info.value.code == "PROVIDER_KEY_REQUIRED" and "LENS_TEST_OA_KEY" in info.value.message
        assert "DO-NOT-LEAK" not in info.value.message and "DO-NOT-LEAK" not in caplog.text
        assert [m.reason for m in broken.models() if m.provider == "oa"] == ["PROVIDER_KEY_REQUIRED"]


def test_a_key_no_header_can_carry_is_refused_in_a_sentence_naming_the_variable_then_why():
    """The reason read "cannot send the key in (it holds …) the environment variable X": the
    parenthesis split "in the environment variable" in two. The variable first, then why."""
    for value, words in [(SECRET[:10] + "\n" + SECRET[10:],
                          "provider 'oa' cannot send the key in the environment variable LENS_TEST_OA_KEY (it holds a "
                          "character an HTTP header cannot carry: printable ASCII only)"),
                         (" \t", "provider 'oa' needs its key in the environment variable LENS_TEST_OA_KEY")]:
        broken = build_catalog(parse_config(config()), environ={"LENS_TEST_OA_KEY": value})
        with pytest.raises(ModelUnavailable) as info:
            broken.check("oa/m1")
        assert info.value.code == "PROVIDER_KEY_REQUIRED"
        assert info.value.message == words, info.value.message


def test_a_saved_default_set_and_cleared_while_running():
    cfg = parse_config(config(defaultModel="local/qwen3"))
    cat = build_catalog(cfg)
    assert cat.set_saved_default("oa/m1", 5) is True
    assert (cat.default_model, cat.default_source, cat.saved_default) == ("oa/m1", "saved", "oa/m1")
    assert {m.ref for m in cat.models() if m.default} == {"oa/m1"}
    assert cat.set_saved_default("script/f", 3) is False  # an older event than the one in effect
    assert cat.default_model == "oa/m1"
    assert cat.set_saved_default(None, 6) is True
    assert (cat.default_model, cat.default_source, cat.saved_default) == ("local/qwen3", "config", None)
    # Under --model, the saved default is kept but not in effect.
    cli = build_catalog(cfg, cli_model="script/f")
    cli.set_saved_default("oa/m1", 1)
    assert (cli.default_model, cli.default_source, cli.saved_default) == ("script/f", "cli", "oa/m1")
    # Without config defaultModel, clearing goes back to the built-in one.
    bare = build_catalog(parse_config(config()))
    bare.set_saved_default("local/qwen3", 1)
    bare.set_saved_default(None, 2)
    assert (bare.default_model, bare.default_source) == (BUILTIN_DEFAULT_MODEL, "default")


def test_a_default_to_save_is_a_listed_model_of_an_enabled_provider():
    cat = build_catalog(parse_config(config()), environ={})
    assert cat.check_default("oa/m1") == "oa/m1"  # its key is missing: not checked
    assert cat.check_default("faux/faux-1") == "faux/faux-1"
    for ref, code in [("off/c2", "PROVIDER_DISABLED"), ("off/nope", "MODEL_UNKNOWN"), ("oa/m2", "MODEL_UNKNOWN"),
                      ("nobody/m1", "MODEL_UNKNOWN"), ("oa", "MODEL_UNKNOWN"), ("oa/", "MODEL_UNKNOWN"),
                      ("", "MODEL_UNKNOWN"), ("oa/m1/", "MODEL_UNKNOWN")]:
        with pytest.raises(ModelUnavailable) as info:
            cat.check_default(ref)
        assert info.value.code == code, ref


def test_a_faux_provider_of_the_config_listing_no_models_takes_any_model_and_lists_none():
    # The built-in faux lists (and serves) faux-1 alone; a faux provider of the config keeps its
    # own list, and one listing none takes any id, as a provider of every other protocol does.
    # Its models were shown as `demo/faux-1` while `demo/anything` served sessions and `--model
    # demo/anything` was refused at start (MODEL_UNKNOWN … listed: faux-1).
    cat = build_catalog(parse_config(json.dumps({"providers": [
        {"id": "demo", "protocol": "faux", "script": [{"text": "Hello!"}]},
        {"id": "listed", "protocol": "faux", "models": [{"id": "m1"}]}]})), environ={})
    assert cat.check("demo/anything") == "demo/anything"
    assert cat.check_listed("demo/anything") == ("provider 'demo' lists no models, so --model demo/anything "
                                                 "cannot be checked before a session uses it")
    refs = {m.ref for m in cat.models()}
    assert "faux/faux-1" in refs and "listed/m1" in refs and not any(r.startswith("demo/") for r in refs), refs
    for ref in ("faux/other", "listed/m2"):
        with pytest.raises(ModelUnavailable) as info:
            cat.check(ref)
        assert info.value.code == "MODEL_UNKNOWN", ref
