"""Cancellation mid-stream, the SDKs' retries, and provider errors mapped to stable codes."""

from __future__ import annotations

import json

import pytest
import trio

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle
from runtime.providers.base import ProviderError

from .conftest import CLASSES, PROTOCOLS, Ctx, Deltas
from .scripts import context_too_long, error, reply
from .test_actor import events_of, runtime


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancel_mid_stream_closes_the_stream(protocol, server, make):
    provider = make(protocol)
    # The stream sends its first frames (some text), then stalls until the client goes away.
    stalled = reply(protocol, text=["partial ", "answer"])
    stalled.stall_after = 5 if protocol != "openai-chat" else 2
    server.push(stalled, reply(protocol, text="after"))
    deltas = Deltas()
    got_text = trio.Event()

    def on_delta(d):
        deltas(d)
        got_text.set()

    with trio.move_on_after(10) as scope:  # a bound only; the test cancels as soon as text arrived
        async with trio.open_nursery() as n:
            async def run():
                await provider.stream(Ctx().user("go").request(), on_delta)
            n.start_soon(run)
            await got_text.wait()
            n.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert deltas.text().startswith("partial")
    with trio.fail_after(10):
        await server.disconnected.wait()  # the server saw the client close the stream
    # The same provider (and client) serves the next request.
    result = await provider.stream(Ctx().user("again").request(), Deltas())
    assert result.text == "after"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_429_then_500_then_success_uses_the_sdk_retries(protocol, server, make):
    provider = make(protocol, max_retries=2)
    server.push(error(protocol, 429, "slow down"), error(protocol, 500, "boom"), reply(protocol, text="finally"))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "finally"
    assert len(server.requests) == 3
    assert server.bodies[0] == server.bodies[2]  # the retry sent the same request


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_rate_limit_after_retries_is_retryable(protocol, server, make):
    provider = make(protocol, max_retries=1)
    server.push(error(protocol, 429, "slow down"), error(protocol, 429, "still slow"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    err = info.value
    assert (err.code, err.retryable, err.status) == ("RATE_LIMITED", True, 429)
    assert len(server.requests) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_server_error_after_retries(protocol, server, make):
    provider = make(protocol, max_retries=0)
    server.push(error(protocol, 500, "internal"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (info.value.code, info.value.retryable, info.value.status) == ("PROVIDER_ERROR", True, 500)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_context_too_long(protocol, server, make):
    provider = make(protocol)
    server.push(context_too_long(protocol))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("a very long prompt").request(), Deltas())
    err = info.value
    assert (err.code, err.retryable, err.status) == ("CONTEXT_TOO_LONG", False, 400)
    assert len(server.requests) == 1  # not retried


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_auth_failure_names_the_variable_not_the_key(protocol, server, make, caplog):
    caplog.set_level("DEBUG")
    secret = "sk-live-THIS-IS-SECRET-0123456789"
    provider = make(protocol, api_key=secret, api_key_env="TEST_PROVIDER_KEY")
    server.push(error(protocol, 401, f"Incorrect API key provided: {secret}", kind="authentication_error"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    err = info.value
    assert (err.code, err.retryable, err.status) == ("AUTH_FAILED", False, 401)
    assert "TEST_PROVIDER_KEY" in err.message
    assert secret not in err.message and secret not in str(err) and secret not in repr(provider)
    assert secret not in caplog.text


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_other_errors_redact_the_key(protocol, server, make):
    secret = "sk-live-ANOTHER-SECRET-987654321"
    provider = make(protocol, api_key=secret, max_retries=0)
    server.push(error(protocol, 400, f"bad field, your key {secret} is fine"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.code == "BAD_REQUEST"
    assert secret not in info.value.message and "[redacted]" in info.value.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_errors_quoting_part_of_the_key_redact_that_part(protocol, server, make):
    # Only the whole key was redacted: OpenAI's masked form (its first 8 characters, stars, its
    # last 4), a proxy's page quoting the key cut short, or a piece of it in a JSON body were
    # stored in `model.failed` as the provider sent them.
    secret = "sk-proj-Z8xC3vB6nM1qW4eR7tY0uI9oPcanaryFailD5"
    provider = make(protocol, api_key=secret, max_retries=0)
    cases = [(400, f"Incorrect key {secret[:8]}{'*' * 28}{secret[-4:]}.", "Incorrect key [redacted]."),
             (400, f"your api key ****{secret[-6:]} is invalid", "your api key [redacted] is invalid"),
             (429, f"rate limit for {secret[:7]}...{secret[-4:]}", "rate limit for [redacted]"),
             (500, f"upstream said no to key={secret[:24]}", "upstream said no to key=[redacted]"),
             (500, f"input {secret[6:30]!r} refused", "input '[redacted]' refused")]
    for status, message, shown in cases:
        server.push(error(protocol, status, message))
        with pytest.raises(ProviderError) as info:
            await provider.stream(Ctx().user("hi").request(), Deltas())
        assert info.value.message.endswith(shown), (message, info.value.message)
    # Words that merely share a few characters with the key, or a mask over nothing of it, stay.
    server.push(error(protocol, 400, "sk-*** is not a key... canary 1.5 e.g. Fail"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.message.endswith("sk-*** is not a key... canary 1.5 e.g. Fail"), info.value.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_errors_quoting_the_proxy_password_of_the_base_url_redact_it(protocol, server, make):
    # A provider reached through a proxy whose baseUrl carries `user:password@`: an error quoting
    # the password was stored as sent (only the key was redacted).
    password = "Pr0xyS3cretPassw0rd"
    provider = make(protocol, max_retries=0)
    provider.base_url = provider.base_url.replace("http://", f"http://proxyuser:{password}@")
    server.push(error(protocol, 400, f"proxy refused proxyuser:{password} (known as {password[:5]}***rd)"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.message.endswith("proxy refused proxyuser:[redacted] (known as [redacted])"), info.value.message
    assert server.requests[-1].headers["authorization"].startswith("Basic ")  # (the request went through it)


async def test_connection_refused_is_retryable(make, server):
    provider = make("openai-chat", max_retries=0)
    provider.base_url = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (info.value.code, info.value.retryable) == ("CONNECTION_FAILED", True)


async def test_anthropic_overloaded_event_inside_the_stream(server, make):
    from .servers.base import Reply

    provider = make("anthropic", max_retries=0)
    events = reply("anthropic", text="x").events[:2] + [("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
    server.push(Reply(events=events))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (info.value.code, info.value.retryable) == ("OVERLOADED", True)
    assert "stream error (overloaded_error): Overloaded" in info.value.message  # it said "HTTP 529"
    assert info.value.usage is not None and info.value.usage.input_tokens == 100  # (message_start's)
    assert info.value.usage.output_tokens is None


async def test_responses_failed_event(server, make):
    from .servers.base import Reply

    provider = make("openai-responses", max_retries=0)
    events = reply("openai-responses", text="x").events[:2]
    events.append(("response.failed", {"type": "response.failed", "sequence_number": 2, "response": {
        "id": "r1", "object": "response", "created_at": 1, "model": "m1", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "the model crashed"}}}))
    server.push(Reply(events=events))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.code == "PROVIDER_ERROR" and info.value.retryable
    assert "the model crashed" in info.value.message
    assert info.value.usage == t.Usage()  # begun, and the failed response reported no usage

    # A failed response that reports what it used: those counts are the request's.
    events[-1][1]["response"]["usage"] = {"input_tokens": 30, "output_tokens": 4, "total_tokens": 34,
                                          "input_tokens_details": {"cached_tokens": 10},
                                          "output_tokens_details": {"reasoning_tokens": 0}}
    server.push(Reply(events=events))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.usage == t.Usage(input_tokens=30, output_tokens=4, cache_read_tokens=10, reasoning_tokens=0,
                                       total_input_tokens=30)


async def test_responses_error_event(server, make):
    from .servers.base import Reply

    provider = make("openai-responses", max_retries=0)
    events = reply("openai-responses", text="x").events[:2]
    events.append(("error", {"type": "error", "sequence_number": 2, "code": "rate_limit_exceeded",
                             "message": "Rate limit reached", "param": None}))
    server.push(Reply(events=events))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (info.value.code, info.value.retryable) == ("RATE_LIMITED", True)


async def test_responses_incomplete_reports_max_tokens(server, make):
    from .servers import openai_responses as orr

    provider = make("openai-responses")
    server.push(orr.response_stream(text="cut sh", status="incomplete", usage=orr.usage(10, 5)))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (result.text, result.stop_reason, result.usage.output_tokens) == ("cut sh", "max_tokens", 5)


async def test_chat_usage_absent_stays_unknown(server, make):
    from .servers import openai_chat as oc

    provider = make("openai-chat")
    server.push(oc.chat_stream(text="no usage reported"))  # a server that sends no usage chunk
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "no usage reported"
    assert result.usage.input_tokens is None and result.usage.output_tokens is None
    assert result.usage.cache_read_tokens is None and result.usage.cache_write_tokens is None


async def test_anthropic_usage_left_out_is_unknown_not_a_malformed_stream(server, make):
    # The SDK's stream helper needed a usage object on message_start and on message_delta (a
    # compatible server that sends none failed the answer as a malformed stream).
    from .servers import anthropic as an

    provider = make("anthropic", max_retries=0)
    no_start = an.message_stream(text="one", usage={"input_tokens": 10, "output_tokens": 1}, output_tokens=4)
    no_start.events = [(n, {**d, "message": {k: v for k, v in d["message"].items() if k != "usage"}})
                       if n == "message_start" else (n, d) for n, d in no_start.events]
    no_delta = an.message_stream(text="two", usage={"input_tokens": 10, "output_tokens": 1,
                                                    "cache_read_input_tokens": 3})
    no_delta.events = [(n, {k: v for k, v in d.items() if k != "usage"} if n == "message_delta" else d)
                       for n, d in no_delta.events]
    server.push(no_start, no_delta)
    first = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (first.text, first.usage) == ("one", t.Usage(None, 4, None, None, None))
    second = await provider.stream(Ctx().user("hi").request(), Deltas())
    # (message_start's output_tokens is a placeholder the message_delta replaces: not a count)
    assert (second.text, second.usage) == ("two", t.Usage(10, None, 3, None, None))


async def test_usage_counts_that_are_no_counts_stay_unknown(server, make):
    # 10**30 tokens made model.responded impossible to encode (the actor crashed); negative
    # counts were recorded as they came.
    from .servers import openai_chat as oc

    provider = make("openai-chat")
    top = 2**63 - 1
    server.push(oc.chat_stream(text="a", usage={"prompt_tokens": top, "completion_tokens": top + 1,
                                                   "prompt_tokens_details": {"cached_tokens": -1}}))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.usage.input_tokens == top  # exactly at the limit: kept
    assert result.usage.output_tokens is None and result.usage.cache_read_tokens is None  # one past, negative


async def test_a_server_that_never_answers_times_out_after_the_configured_seconds():
    # A server that accepts and then says nothing held a session "running" for 600 s x 3 attempts;
    # providers[].timeoutSeconds and maxRetries bound it.
    from runtime.config import parse_config
    from runtime.providers.catalog import build_catalog

    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    accepted: list[trio.socket.SocketType] = []

    async def accept_and_say_nothing() -> None:
        while True:
            conn, _ = await listener.accept()
            accepted.append(conn)

    cfg = parse_config(json.dumps({"providers": [{
        "id": "silent", "protocol": "openai-chat", "baseUrl": f"http://127.0.0.1:{port}/v1",
        "timeoutSeconds": 1, "maxRetries": 0, "models": [{"id": "m"}]}], "defaultModel": "silent/m"}))
    catalog = build_catalog(cfg, environ={})
    provider, model, _ = catalog.resolve(None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept_and_say_nothing)
        start = trio.current_time()
        with trio.fail_after(30), pytest.raises(ProviderError) as info:
            await provider.stream(Ctx().user("hi").request(), Deltas())
        took = trio.current_time() - start
        nursery.cancel_scope.cancel()
    await catalog.aclose()
    listener.close()
    for conn in accepted:
        conn.close()
    assert info.value.code == "TIMEOUT" and info.value.retryable, info.value
    assert 0.9 <= took < 10, took  # one attempt of about a second, not 600 s
    # It said "the request timed out" alone: not how long was waited, nor which setting says so.
    assert info.value.message == ("provider 'silent': the request timed out: the server sent no answer "
                                  "within 1 s (timeoutSeconds)"), info.value.message


def _ends(protocol: str, name: str | None, data) -> bool:
    """Whether this frame is where a stream of ``protocol`` says the response is complete."""
    if protocol == "openai-chat":
        return isinstance(data, dict) and any(c.get("finish_reason") for c in data.get("choices", []))
    return name == ("message_delta" if protocol == "anthropic" else "response.completed")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_that_ends_before_the_response_is_an_error(protocol, server, make):
    # Chat and Anthropic returned the text (and a tool call, its arguments cut mid-way) as a
    # complete answer: the session recorded it and ran the tool.
    provider = make(protocol, max_retries=0)
    cut = reply(protocol, text=["partial ", "answer"], calls=[("call_1", "read_file", {"path": "a.txt"})])
    assert cut.events is not None
    end = next(i for i, (name, data) in enumerate(cut.events) if _ends(protocol, name, data))
    cut.events = cut.events[:end - 1]  # the last call's second half of arguments is lost too
    server.push(cut)
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("go").request(), Deltas())
    assert info.value.code == "PROVIDER_ERROR" and info.value.retryable
    assert "ended" in info.value.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_that_stalls_past_the_timeout_is_timeout(protocol, server, make):
    # Anthropic let httpx2.ReadTimeout through, which crashed the session actor.
    provider = make(protocol, max_retries=0, timeout=0.5)
    stalled = reply(protocol, text=["partial ", "answer"])
    stalled.stall_after = 3
    server.push(stalled)
    with trio.fail_after(10):
        with pytest.raises(ProviderError) as info:
            await provider.stream(Ctx().user("go").request(), Deltas())
    assert info.value.code == "TIMEOUT" and info.value.retryable


async def test_chat_tool_calls_numbered_alike_or_without_index_stay_apart(server, make):
    from .servers import openai_chat as oc

    def chunk(tool_calls=None, finish=None):
        delta = {"tool_calls": tool_calls} if tool_calls else {}
        return (None, {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def fn(name=None, arguments=None):
        return {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}

    provider = make("openai-chat")
    # A server numbering every call 0: the second call had been merged into the first.
    server.push(oc.Reply(events=[
        chunk([{"index": 0, "id": "call_a", "type": "function", "function": fn("read_file", '{"path": "a"}')}]),
        chunk([{"index": 0, "id": "call_b", "type": "function", "function": fn("read_file", "")}]),
        chunk([{"index": 0, "function": fn(arguments='{"path": "b"}')}]),
        chunk(finish="tool_calls"), (None, "[DONE]")]))
    result = await provider.stream(Ctx().user("go").request(), Deltas())
    assert [(c.call_id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_a", "read_file", '{"path": "a"}'), ("call_b", "read_file", '{"path": "b"}')]
    # Fragments without an index go on the call before them.
    server.push(oc.Reply(events=[
        chunk([{"id": "call_c", "type": "function", "function": fn("read_file", '{"path": ')}]),
        chunk([{"function": fn(arguments='"c"}')}]),
        chunk(finish="tool_calls"), (None, "[DONE]")]))
    result = await provider.stream(Ctx().user("go").request(), Deltas())
    assert [(c.call_id, c.arguments) for c in result.tool_calls] == [("call_c", '{"path": "c"}')]
    # A call that never says which tool: a malformed stream, not a call of the tool ''.
    server.push(oc.Reply(events=[chunk([{"index": 0, "function": fn(arguments="{}")}]),
                                 chunk(finish="tool_calls"), (None, "[DONE]")]))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("go").request(), Deltas())
    assert info.value.code == "PROVIDER_ERROR" and "without a name" in info.value.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_retry_after_past_two_minutes_ends_the_request_instead_of_waiting(protocol, server, make):
    # The Anthropic SDK honoured any Retry-After (86400 s, or a date years away: ~50 days): one
    # request held its session "running" for that long. (Exactly 120 s is waited for: not timed here.)
    provider = make(protocol, max_retries=1)
    for wait in ("86400", "121"):
        slow = error(protocol, 429, "come back tomorrow", fast=False)
        slow.headers["retry-after"] = wait
        server.push(slow, reply(protocol, text="not reached"))
        with trio.fail_after(10):
            with pytest.raises(ProviderError) as info:
                await provider.stream(Ctx().user("hi").request(), Deltas())
        assert info.value.code == "RATE_LIMITED" and info.value.retryable
        server.replies.clear()
    assert len(server.requests) == 2  # asked once each time, no retry
    # A shorter wait (here 1 s) is still honoured: the retry succeeds.
    ok = error(protocol, 429, "a second", fast=False)
    ok.headers["retry-after"] = "1"
    server.push(ok, reply(protocol, text="after a second"))
    with trio.fail_after(10):
        result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "after a second"


def _as_refusal(obj):
    """A Responses stream's text parts and events turned into the refusal shapes."""
    if isinstance(obj, list):
        return [_as_refusal(x) for x in obj]
    if isinstance(obj, dict):
        if obj.get("type") == "output_text":
            return {"type": "refusal", "refusal": obj["text"]}
        out = {k: _as_refusal(v) for k, v in obj.items() if k not in ("logprobs", "annotations")}
        if out.get("type") == "response.output_text.delta":
            out["type"] = "response.refusal.delta"
        elif out.get("type") == "response.output_text.done":
            out = {**out, "type": "response.refusal.done", "refusal": out.pop("text")}
        return out
    return obj


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
async def test_a_refusal_is_the_answer_with_its_stop_reason(protocol, server, make):
    # Both OpenAI protocols answered an empty text with stop "end_turn": the refusal was lost.
    provider = make(protocol)
    words = "I can't help with that."
    if protocol == "openai-responses":
        r = reply(protocol, text=["I can't ", "help with that."])
        r.events = [(name.replace("output_text", "refusal") if name else name, _as_refusal(data))
                    for name, data in r.events]
    else:
        from .servers import openai_chat as oc

        def chunk(delta, finish=None):
            return (None, {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        r = oc.Reply(events=[chunk({"role": "assistant", "content": None, "refusal": "I can't "}),
                             chunk({"refusal": "help with that."}), chunk({}, "stop"), (None, "[DONE]")])
    server.push(r)
    deltas = Deltas()
    result = await provider.stream(Ctx().user("something bad").request(), deltas)
    assert (result.text, result.stop_reason) == (words, "refusal")
    assert deltas.text() == words


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_error_body_that_is_no_json_error_object_is_quoted(protocol, server, make):
    # The OpenAI SDK's message for these is only "Error code: 502"; the server's words were lost.
    # A JSON body is quoted as the JSON it was ({"detail": "Not Found"}), not as Python prints
    # the parsed value ({'detail': 'Not Found'}, True, None).
    from .servers.base import Reply

    provider = make(protocol, max_retries=0)
    for status, body, words in [(502, "<html><body><h1>502 Bad Gateway</h1>\n nginx</body></html>", "502 Bad Gateway</h1> nginx"),
                                (400, {"error": "model field is required"}, "model field is required"),
                                (400, [{"error": "bad"}], 'HTTP 400: [{"error": "bad"}]'),
                                (404, {"detail": "Not Found", "ok": False, "id": None}, ': {"detail": "Not Found", "ok": false, "id": null}'),
                                # FastAPI-based servers answer a request they cannot validate so:
                                (422, {"detail": [{"loc": ["body", "messages"], "msg": "field required"}]}, "field required"),
                                (400, {"error": {"code": "bad_tool_schema"}}, "bad_tool_schema")]:
        server.push(Reply(status, body))
        with pytest.raises(ProviderError) as info:
            await provider.stream(Ctx().user("hi").request(), Deltas())
        assert info.value.status == status and words in info.value.message, info.value.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_404_names_the_address_it_came_from(protocol, server, make):
    """A 404 is MODEL_NOT_FOUND, and a server at a ``baseUrl`` missing its ``/v1`` (Ollama's
    ``http://host:11434``) answers one for every request: "HTTP 404: 404 page not found" said
    nothing of where it was asked. The message names the address, so a wrong path can be seen."""
    from .servers.base import Reply

    provider = make(protocol, max_retries=0)
    server.push(Reply(404, chunks=[b"404 page not found"], content_type="text/plain"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    path = server.requests[0].path
    assert path.endswith(("/chat/completions", "/responses", "/messages")), path
    assert info.value.code == "MODEL_NOT_FOUND" and info.value.status == 404
    assert info.value.message == f"provider 'p-{protocol}': HTTP 404 at {server.url}{path}: 404 page not found", \
        info.value.message


async def test_responses_final_event_without_output_keeps_the_streamed_text(server, make):
    # A proxy sending response.completed with "output": [] made the answer empty although the
    # viewer had watched "Hello world" stream in.
    provider = make("openai-responses")
    r = reply("openai-responses", text=["Hello ", "world"])
    for name, data in r.events:
        if name == "response.completed":
            data["response"]["output"] = []
    server.push(r)
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "Hello world" and result.stop_reason == "end_turn"


async def test_an_anthropic_message_delta_without_a_stop_reason_says_so(server, make):
    # It failed as "the stream ended before its stop_reason", though the event had come.
    provider = make("anthropic", max_retries=0)
    odd = reply("anthropic", text="Hello")
    assert odd.events is not None
    for name, data in odd.events:
        if name == "message_delta":
            data["delta"]["stop_reason"] = None
    server.push(odd)
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("go").request(), Deltas())
    assert (info.value.code, info.value.retryable) == ("PROVIDER_ERROR", True)
    assert info.value.message == ("provider 'p-anthropic': malformed stream: ValueError: "
                                  "the message_delta's stop_reason is null"), info.value.message
    assert info.value.usage is not None


BAD_URLS = {"openai-responses": "http://127.0.0.1:9/v1\x07", "openai-chat": "http://exa\u200bmple.com/v1",
            "anthropic": "http://127.0.0.1:9/\x00"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_exception_the_sdk_does_not_translate_fails_the_request(protocol, tmp_path):
    # httpx2.InvalidURL (a base URL the SDKs' HTTP client cannot parse; the config refuses such
    # URLs now, a provider made otherwise does not) is neither an SDK error nor an httpx2.HTTPError:
    # it came out of stream() as itself and crashed the session's actor, which asked the model
    # again on each restart and was quarantined after three.
    provider = CLASSES[protocol](f"p-{protocol}", base_url=BAD_URLS[protocol], api_key="test-key", max_retries=0)
    try:
        with pytest.raises(ProviderError) as info:
            await provider.stream(Ctx().user("go").request(), Deltas())
        assert (info.value.code, info.value.retryable, info.value.usage) == ("PROVIDER_ERROR", False, None)
        assert info.value.message.startswith(f"provider 'p-{protocol}': the request failed: InvalidURL: Invalid "), \
            info.value.message
        async with runtime(tmp_path / "data", provider) as sup:
            sid = await sup.create_session("p1")
            for n in (1, 2):  # failed once each, and the session takes the next input
                await sup.call(sid, Submit(f"req{n}", [t.TextPart("hello")]))
                await sup.call(sid, WaitIdle())
            state = await sup.call(sid, GetState())
            evs = await events_of(sup, sid)
    finally:
        await provider.aclose()
    failed = [(e.event.code, e.event.message) for e in evs if e.kind == "model.failed"]
    assert failed == [("PROVIDER_ERROR", info.value.message)] * 2
    assert [e.kind for e in evs].count("model.requested") == 2 and state.status == "idle"


STREAM_ERRORS = {
    # (the error frame's type, or a Responses code) -> (the code it maps to, retryable)
    "anthropic": {"overloaded_error": ("OVERLOADED", True), "rate_limit_error": ("RATE_LIMITED", True),
                  "api_error": ("PROVIDER_ERROR", True), "invalid_request_error": ("BAD_REQUEST", False),
                  "authentication_error": ("AUTH_FAILED", False)},
    "openai-responses": {"rate_limit_exceeded": ("RATE_LIMITED", True), "server_error": ("PROVIDER_ERROR", True),
                         "invalid_prompt": ("BAD_REQUEST", False),
                         "context_length_exceeded": ("CONTEXT_TOO_LONG", False)},
    "openai-chat": {"rate_limit_error": ("RATE_LIMITED", True), "authentication_error": ("AUTH_FAILED", False)},
}


@pytest.mark.parametrize("protocol,kind", [(p, k) for p, kinds in STREAM_ERRORS.items() for k in kinds])
async def test_an_error_inside_a_stream_records_no_http_status(protocol, kind, server, make):
    """The answer came with HTTP 200: an error event in its stream picks the code as its status
    would, but no HTTP status is recorded (``model.failed`` said 529, 429, 500, 400 or 401 for a
    status no server sent) and the message does not name one."""
    from .servers.base import Reply

    provider = make(protocol, max_retries=0)
    events = reply(protocol, text="x").events[:2]
    if protocol == "anthropic":
        events.append(("error", {"type": "error", "error": {"type": kind, "message": "It went wrong"}}))
    elif protocol == "openai-responses":
        events.append(("error", {"type": "error", "sequence_number": 2, "code": kind, "message": "It went wrong",
                                 "param": None}))
    else:
        events.append((None, {"error": {"message": "It went wrong", "type": kind}}))
    server.push(Reply(events=events))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert (info.value.code, info.value.retryable) == STREAM_ERRORS[protocol][kind]
    assert info.value.status is None, info.value.status
    assert "HTTP" not in info.value.message and "stream error" in info.value.message, info.value.message
    assert f"({kind})" in info.value.message, info.value.message  # what the server said, not a type made up for it
    assert len(server.requests) == 1
