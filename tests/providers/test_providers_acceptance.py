"""SPEC section 4 as a stranger tests it: what the providers do with servers that do not answer
as the protocols say (real SDK clients against the loopback wire-protocol servers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.config import Config, ConfigError, ModelConfig, parse_config
from runtime.providers.anthropic_messages import AnthropicProvider, sdk_base_url
from runtime.errors import ModelUnavailable
from runtime.providers.base import ProviderError
from runtime.providers.catalog import build_catalog
from runtime.startcheck import check_default_model

from ..daemon.conftest import run_lens, serving
from ..daemon.keyleaks import KEYS, SLOW, leaks_everywhere, watched

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply
from .servers.base import Reply, ScriptedServer

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


@pytest.mark.parametrize("providers", [None, [], [{"id": "faux", "protocol": "faux", "models": [{"id": "mine"}]}],
                                       [{"id": "openai", "protocol": "openai-chat", "models": [{"id": "mine"}]},
                                        {"id": "anthropic", "protocol": "anthropic", "enabled": False}]])
def test_the_start_check_accepts_exactly_what_the_catalog_lists(providers):
    """One derivation of "what each provider lists" serves both: every model ``GET /models``
    lists passes the ``defaultModel`` check and ``--model``'s, and the same id of another
    provider, or past the list, fails both."""
    cfg = _config("faux/faux-1", providers)
    catalog = build_catalog(cfg, environ={})
    entries = catalog.models()
    assert entries
    listing = {e.provider for e in entries}
    for e in entries:
        check_default_model(_config(e.ref, providers), "c.jsonc")
        assert catalog.check_listed(e.ref) is None
        wrong = f"{e.provider}/{e.model}-x"
        with pytest.raises(ConfigError):
            check_default_model(_config(wrong, providers), "c.jsonc")
        with pytest.raises(ModelUnavailable):
            catalog.check_listed(wrong)
    # a provider listing nothing is a provider of both, and checks nothing in either
    for pid in {p["id"] for p in providers or []} - listing:
        check_default_model(_config(f"{pid}/any", providers), "c.jsonc")
        assert catalog.check_listed(f"{pid}/any") is not None


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


# --------------------------------------------------------------------------- through `lens serve`


async def test_each_protocol_answers_and_runs_a_tool_round_through_lens_serve(tmp_path: Path):
    """SPEC section 9's config as a client author writes it: ``lens serve`` as a process, one
    provider of each protocol at a loopback server speaking its wire protocol, each key in the
    variable its ``apiKeyEnv`` names. Each session streams a tool call (``read_file`` of a
    workspace file, run by the executor), then an answer; then the server answers a whole JSON
    document instead of a stream, which fails the turn once, naming it. No key anywhere after."""
    async with watched(tmp_path, "stranger") as w:
        d, token, server = w.d, w.token, w.server
        (Path(w.project["workspace"]) / "hello.txt").write_text("hello from the workspace\n")
        for pid, protocol, key_env in [("chat", "openai-chat", "OPENAI_API_KEY"),
                                       ("resp", "openai-responses", "LENS_TEST_RESPONSES_KEY"),
                                       ("anth", "anthropic", "ANTHROPIC_API_KEY")]:
            r = await d.post("/sessions", token, {"projectId": w.project["id"], "model": f"{pid}/m"})
            assert r.status_code == 201, r.text
            sid = r.json()["id"]
            server.push(reply(protocol, text=["Reading."], calls=[(f"call_{pid}", "read_file", {"path": "hello.txt"})],
                              rid=f"{pid}1"),
                        reply(protocol, text=["It says ", "hello."], rid=f"{pid}2"))
            before = len(server.requests)
            await d.submit(token, sid, f"{pid}-1", "what does hello.txt say?")
            view = await d.wait_idle(token, sid, timeout=SLOW)
            sent = server.requests[before:]
            assert len(sent) == 2, (pid, [rq.body for rq in sent])
            key = KEYS[key_env]
            for rq in sent:
                assert rq.body["stream"] is True and rq.body["model"] == "m", (pid, rq.body)
                sent_key = rq.headers.get("authorization", "").removeprefix("Bearer ") or rq.headers.get("x-api-key")
                assert sent_key == key, pid  # (the variable apiKeyEnv names)
            assert "hello from the workspace" in json.dumps(sent[1].body), (pid, sent[1].body)  # the tool's result
            events = await d.events(token, sid)
            kinds = [e["kind"] for e in events]
            assert kinds.count("model.responded") == 2 and "model.failed" not in kinds, (pid, kinds)
            finished = [e["body"] for e in events if e["kind"] == "tool.finished"]
            assert len(finished) == 1 and not finished[0]["is_error"], (pid, finished)
            assert "It says hello." in json.dumps(view["items"]), (pid, view["items"])

            # A server that ignores "stream": true: one request, one model.failed naming it.
            server.push(Reply(200, WHOLE[protocol]))
            before = len(server.requests)
            await d.submit(token, sid, f"{pid}-2", "again")
            await d.wait_idle(token, sid, timeout=SLOW)
            assert len(server.requests) == before + 1, pid
            failed = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
            assert len(failed) == 1 and failed[0]["code"] == "PROVIDER_ERROR", (pid, failed)
            assert "answered with application/json, not an event stream" in failed[0]["message"], (pid, failed)
    found, _ = await leaks_everywhere(w)
    assert not found, "\n".join(found)


async def test_disabled_and_keyless_providers_refuse_a_submission_with_the_specs_codes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nursery):
    """F-MOD-5 through ``lens serve``: a model of a disabled provider, or of one whose
    ``apiKeyEnv`` names a variable unset, empty or only white space, is not selectable (422
    ``PROVIDER_DISABLED`` / ``PROVIDER_KEY_REQUIRED`` on ``POST /sessions`` and ``PATCH``); a
    session that took such a default is created and its input refused with the same code (no
    event recorded); ``apiKeyEnv`` omitted or null needs no key and answers. ``GET /models``
    says which can serve and why, naming the variable to set."""
    server = ScriptedServer()
    url = await server.start(nursery)
    monkeypatch.delenv("LENS_ACC_UNSET", raising=False)
    monkeypatch.setenv("LENS_ACC_EMPTY", "")
    monkeypatch.setenv("LENS_ACC_BLANK", " \t")
    chat = {"protocol": "openai-chat", "baseUrl": f"{url}/v1", "maxRetries": 0, "models": [{"id": "m"}]}
    config = {"providers": [{"id": "off", "enabled": False, "apiKeyEnv": "LENS_ACC_UNSET", **chat},
                            {"id": "unset", "apiKeyEnv": "LENS_ACC_UNSET", **chat},
                            {"id": "empty", "apiKeyEnv": "LENS_ACC_EMPTY", **chat},
                            {"id": "blank", "apiKeyEnv": "LENS_ACC_BLANK", **chat},
                            {"id": "null", "apiKeyEnv": None, **chat},
                            {"id": "omitted", **chat}],
              "defaultModel": "off/m"}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(config))
    async with serving(tmp_path) as (serve, d):
        assert any("default model cannot serve (PROVIDER_DISABLED" in line for line in serve.lines), serve.lines
        token = await d.pair("c1", strong=True, via="cli")
        project = await d.project(token)
        models = {m["id"]: m for m in (await d.get("/models", token)).json()["models"]}
        expected = {"off/m": "PROVIDER_DISABLED", "unset/m": "PROVIDER_KEY_REQUIRED",
                    "empty/m": "PROVIDER_KEY_REQUIRED", "blank/m": "PROVIDER_KEY_REQUIRED",
                    "null/m": None, "omitted/m": None}
        assert {ref: models[ref]["reason"] for ref in expected} == expected
        for ref, code in [*expected.items(), (None, "PROVIDER_DISABLED")]:  # (None: the default model)
            before = (await d.get("/health")).json()["lastSeq"]
            r = await d.post("/sessions", token, {"projectId": project["id"], **({"model": ref} if ref else {})})
            if ref is not None and code is not None:  # (a model named that cannot be selected: refused at once)
                assert r.status_code == 422 and r.json()["error"]["code"] == code, (ref, r.text)
                message = r.json()["error"]["message"]
                assert f"provider {ref.partition('/')[0]!r}" in message, message
                if code == "PROVIDER_KEY_REQUIRED":
                    assert f"LENS_ACC_{ref.partition('/')[0].upper()}" in message, message  # the variable to set
                assert (await d.get("/health")).json()["lastSeq"] == before, ref  # nothing recorded
                r = await d.post("/sessions", token, {"projectId": project["id"], "model": "null/m"})
                sid = r.json()["id"]
                r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": ref})
                assert r.status_code == 422 and r.json()["error"]["code"] == code, (ref, r.text)
                continue
            assert r.status_code == 201, (ref, r.text)
            sid = r.json()["id"]
            before = (await d.get("/health")).json()["lastSeq"]
            if code is None:
                server.push(reply("openai-chat", text=["fine"]))
                await d.submit(token, sid, "r1", "hi")
                view = await d.wait_idle(token, sid)
                assert "fine" in json.dumps(view["items"]), (ref, view)
                assert server.requests[-1].headers.get("authorization") == "Bearer lens-no-key", ref
                continue
            r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "hi"})
            assert r.status_code == 422 and r.json()["error"]["code"] == code, (ref, r.text)
            message = r.json()["error"]["message"]
            provider = (ref or "off/m").partition("/")[0]
            assert f"provider {provider!r}" in message, message
            if code == "PROVIDER_KEY_REQUIRED":
                assert "LENS_ACC_" in message, message  # the variable to set, named
            assert (await d.get("/health")).json()["lastSeq"] == before, ref  # nothing recorded


# --------------------------------------------------------------------------- cacheTtl (F-MOD-4)


@pytest.mark.parametrize(("protocol", "ttl", "accepted"), [
    ("openai-responses", "30m", True), ("openai-responses", "12h", True), ("openai-chat", "12h", True),
    ("openai-responses", "1h", False), ("openai-chat", "5m", False),
    ("anthropic", "1h", False), ("anthropic", "5m", False), ("faux", "1h", False),
])
def test_an_unsupported_cache_ttl_is_refused_saying_whose_lifetimes_these_are(protocol, ttl, accepted):
    """F-MOD-4: ``30m`` or ``12h``, anything else refused when the config is read. An Anthropic
    user's ``"1h"`` (Anthropic's own lifetime) was told "must be '30m' or '12h'", lifetimes its
    provider has not got; the message now says they are OpenAI's and that its protocol does not use
    the key."""
    for where in ("provider", "model"):
        entry: dict = {"id": "p", "protocol": protocol, "models": [{"id": "m"}]}
        (entry if where == "provider" else entry["models"][0])["cacheTtl"] = ttl
        text = json.dumps({"providers": [entry]}).encode()
        if accepted:
            parse_config(text, "c.jsonc")
            continue
        with pytest.raises(ConfigError) as info:
            parse_config(text, "c.jsonc")
        message = info.value.message
        assert info.value.code == "CONFIG_INVALID"
        assert f"cacheTtl must be '30m' or '12h', not {ttl!r}" in message, message
        unused = f"(the lifetime of OpenAI explicit cache breakpoints: the {protocol} protocol does not use it)"
        assert (unused in message) == (not protocol.startswith("openai-")), message


# --------------------------------------------------------------------------- F-MOD-2 on the wire


@pytest.mark.parametrize("protocol", ["anthropic", "openai-chat"])
async def test_a_skill_loaded_mid_session_reaches_the_wire_as_each_protocol_says(tmp_path: Path, nursery, protocol):
    """``lens serve`` with one provider at a loopback server; a first turn, then a ``/skill:``
    input, whose instructions are a system instruction added later. Anthropic: the leading
    system prompt stays in ``system``, the skill's text arrives as a user content block beginning
    ``Lens instruction update:`` at its place in the history; Chat Completions: a ``system``
    message at its place. Either way the log keeps the instructions as they were, unmarked."""
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(reply(protocol, text=["first answer"], rid="r1"), reply(protocol, text=["second answer"], rid="r2"))
    base = url if protocol == "anthropic" else f"{url}/v1"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({
        "providers": [{"id": "loop", "protocol": protocol, "baseUrl": base, "maxRetries": 0, "models": [{"id": "m"}]}],
        "defaultModel": "loop/m"}))
    async with serving(tmp_path) as (_, d):
        token = await d.pair("c1", strong=True, via="cli")
        project = await d.project(token)
        skill = Path(project["workspace"]) / "skills" / "review"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text("---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS: diff first.\n")
        sid = (await d.session(token, project["id"]))["id"]
        await d.submit(token, sid, "r1", "hello")
        await d.wait_idle(token, sid)
        await d.submit(token, sid, "r2", "/skill:review look at main.py")
        await d.wait_idle(token, sid)
        events = await d.events(token, sid)
    [loaded] = [e["body"] for e in events if e["kind"] == "skill.loaded"]
    assert "REVIEW-STEPS: diff first." in loaded["instructions"] and "Lens instruction update:" not in json.dumps(events)
    assert len(server.requests) == 2
    body = server.requests[1].body
    if protocol == "anthropic":
        system = json.dumps(body["system"])
        assert "REVIEW-STEPS" not in system and "Lens instruction update:" not in system, system
        blocks = [(m["role"], b.get("text", "")) for m in body["messages"] for b in
                  (m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}])]
        texts = [text for _, text in blocks]
        update = next(i for i, text in enumerate(texts) if "REVIEW-STEPS" in text)
        assert blocks[update][0] == "user" and texts[update].startswith("Lens instruction update:"), blocks
        # at its place: after the first exchange, before the input it came with
        assert texts.index("hello") < texts.index("first answer") < update < texts.index("look at main.py"), texts
    else:
        roles = [(m["role"], m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]))
                 for m in body["messages"]]
        update = next(i for i, (_, text) in enumerate(roles) if "REVIEW-STEPS" in text)
        assert roles[update][0] == "system" and "Lens instruction update:" not in roles[update][1], roles
        texts = [text for _, text in roles]
        assert texts.index("hello") < texts.index("first answer") < update < texts.index("look at main.py"), roles


# --------------------------------------------------------------------------- an Anthropic baseUrl


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_an_anthropic_base_url_with_or_without_v1_reaches_v1_messages(server, suffix):
    """The SDK appends ``/v1/messages`` to the base URL. One written as the OpenAI protocols' are
    (SPEC section 9's example ends in ``/v1``) sent every request to ``/v1/v1/messages``: a 404
    from any server that speaks the protocol. Both forms reach ``/v1/messages``."""
    provider = AnthropicProvider("p", base_url=server.url + suffix, api_key="k", max_retries=0,
                                 models={"m1": ModelConfig(id="m1")})
    server.push(reply("anthropic", text=["hi"]))
    try:
        result = await provider.stream(Ctx().user("hello").request(), Deltas())
    finally:
        await provider.aclose()
    assert result.text == "hi"
    assert server.requests[0].path == "/v1/messages"


def test_only_a_last_v1_segment_is_left_out():
    assert sdk_base_url(None) is None
    assert sdk_base_url("https://gateway.example/anthropic/v1") == "https://gateway.example/anthropic"
    assert sdk_base_url("https://gateway.example/v1/anthropic") == "https://gateway.example/v1/anthropic"
    assert sdk_base_url("https://gateway.example/xv1") == "https://gateway.example/xv1"
    assert sdk_base_url("https://gateway.example/v10") == "https://gateway.example/v10"
