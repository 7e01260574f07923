"""SPEC section 4 as a stranger tests it: what the providers do with servers that do not answer
as the protocols say (real SDK clients against the loopback wire-protocol servers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.config import Config, ConfigError, parse_config
from runtime.providers.base import ProviderError
from runtime.startcheck import check_default_model

from ..daemon.conftest import run_lens

from .conftest import PROTOCOLS, Ctx, Deltas
from .servers.base import Reply

# What each protocol answers to a request that does not ask for a stream: one JSON document.
WHOLE = {
    "openai-chat": {"id": "c1", "object": "chat.completion", "created": 1, "model": "m1",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "hello"}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
    "openai-responses": {"id": "r1", "object": "response", "created_at": 1, "model": "m1", "status": "completed",
                         "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                                     "content": [{"type": "output_text", "text": "hello", "annotations": []}]}],
                         "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}},
    "anthropic": {"id": "msg1", "type": "message", "role": "assistant", "model": "m1",
                  "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
                  "usage": {"input_tokens": 3, "output_tokens": 2}},
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_server_that_answers_a_whole_document_instead_of_a_stream_is_named(protocol, server, make):
    """Lens always asks for a stream (``"stream": true``). A server that ignores that and answers
    one JSON document failed as "the stream ended before …", retryable: a cut connection, which
    it is not, and asking again gets the same answer. The error names what the server sent."""
    provider = make(protocol)
    server.push(Reply(200, WHOLE[protocol]))  # (application/json)
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert server.requests[0].body["stream"] is True
    assert info.value.code == "PROVIDER_ERROR" and info.value.retryable is False
    assert "answered with application/json, not an event stream" in info.value.message, info.value.message
    assert len(server.requests) == 1  # (not asked again: the SDK retries nothing here)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_event_stream_cut_short_is_still_a_retryable_cut(protocol, server, make):
    """The stream's own media type, cut before its end: the error it always was."""
    provider = make(protocol)
    server.push(Reply(200, chunks=[b": keep-alive\n\n"], content_type="text/event-stream; charset=utf-8"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.code == "PROVIDER_ERROR" and info.value.retryable is True
    assert "the stream ended before" in info.value.message, info.value.message


# --------------------------------------------------------------------------- defaultModel (F-MOD-5)


def _config(default_model: str, providers: list[dict] | None = None) -> Config:
    return parse_config(json.dumps({"providers": providers if providers is not None else LOCAL,
                                    "defaultModel": default_model}).encode(), "c.jsonc")


LOCAL = [{"id": "local", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": "LOCAL_API_KEY",
          "models": [{"id": "qwen3", "contextWindow": 131072, "images": False}]},
         {"id": "bare", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1"},  # lists no models
         {"id": "off", "protocol": "anthropic", "enabled": False, "models": [{"id": "claude-x"}]}]


@pytest.mark.parametrize("ref", ["local/qwen3", "bare/anything", "off/claude-x", "faux/faux-1", "openai/gpt-5.5",
                                 "anthropic/claude-sonnet-5-5"])
def test_a_default_model_a_provider_serves_or_may_serve_is_accepted(ref):
    """Configured, built in, disabled (it fails at submit with PROVIDER_DISABLED, as the spec
    says), or of a provider that lists no models (nothing to check it against)."""
    check_default_model(_config(ref), "c.jsonc")


@pytest.mark.parametrize(("ref", "providers", "words"), [
    ("nope/qwen3", None, ["names no provider 'nope'", "providers: anthropic, bare, faux, local, off, openai"]),
    ("local/qwen4", None, ["provider 'local' lists no model 'qwen4'", "listed: qwen3"]),
    ("off/claude-y", None, ["provider 'off' lists no model 'claude-y'"]),
    ("faux/faux-2", None, ["provider 'faux' lists no model 'faux-2'", "listed: faux-1"]),
    # a configured entry replaces the built-in one, its models too
    ("openai/gpt-5.5", [{"id": "openai", "protocol": "openai-chat", "models": [{"id": "mine"}]}],
     ["provider 'openai' lists no model 'gpt-5.5'", "listed: mine"]),
])
def test_a_default_model_no_provider_serves_is_a_config_error_naming_it(ref, providers, words):
    with pytest.raises(ConfigError) as info:
        check_default_model(_config(ref, providers), "c.jsonc")
    assert info.value.code == "CONFIG_INVALID"
    message = info.value.message
    assert message.startswith(f"c.jsonc: defaultModel {ref!r}"), message
    for w in words:
        assert w in message, (w, message)


@pytest.mark.parametrize(("ref", "words"), [
    ("nope/qwen3", ["names no provider 'nope'"]),
    ("local/qwen4", ["provider 'local' lists no model 'qwen4'", "listed: qwen3"]),
])
async def test_lens_serve_refuses_a_default_model_no_provider_serves_before_making_anything(tmp_path: Path, ref, words):
    """Every session left without a model of its own would fail MODEL_UNKNOWN at submit; the
    daemon started with a note on stdout. Now: exit 2 naming the config, the key and the value,
    as a ``--model`` typo is refused."""
    (tmp_path / "c.jsonc").write_text(json.dumps({"providers": LOCAL, "defaultModel": ref}))
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d1", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, (out.stdout, out.stderr)
    assert f"lens: CONFIG_INVALID: c.jsonc: defaultModel {ref!r}" in out.stderr, out.stderr
    for w in words:
        assert w in out.stderr, (w, out.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]  # no data directory made
