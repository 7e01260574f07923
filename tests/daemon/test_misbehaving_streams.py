"""Model streams that misbehave, through a running daemon (F-MOD-1): what a loopback
OpenAI-compatible server sends wrongly fails one request, and the session answers the next."""

from __future__ import annotations

import json
from typing import Any

import trio

from ..providers.servers.base import Reply, ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import DaemonFactory


async def chat_session(daemon_factory: DaemonFactory, url: str, timeout_seconds: float | None = None,
                       **config: Any) -> tuple[Any, str, str]:
    """A daemon whose default model is an OpenAI-compatible chat model at ``url`` (no retries;
    the provider's ``timeoutSeconds`` if given), a strong credential and a session:
    ``(daemon, token, session id)``."""
    timeout = {} if timeout_seconds is None else {"timeoutSeconds": timeout_seconds}
    d = await daemon_factory(config={
        "providers": [{"id": "compat", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "maxRetries": 0, **timeout,
                       "models": [{"id": "compat-model"}]}], "defaultModel": "compat/compat-model", **config})
    token = await d.pair("streams-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    return d, token, sid

async def test_a_call_id_that_is_a_number_fails_the_request_and_the_session_answers_the_next(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    """The SDK passes a tool call's id through as sent. A number crashed the session's actor as
    the answer was recorded; each restart asked the model again (and was billed again), and after
    three the session was quarantined for good. Its stream also gives every frame an ``id:`` and
    sends keep-alive comments, which the OpenAI SDK read as frames of JSON (a malformed stream)."""
    server = ScriptedServer()
    url = await server.start(nursery)
    bad = chat_stream(text="Checking.", calls=[("call_1", "get_system_time", {})])
    assert bad.events is not None
    for _, data in bad.events:
        for choice in data.get("choices", []) if isinstance(data, dict) else []:
            for call in choice["delta"].get("tool_calls", []):
                if "id" in call:
                    call["id"] = 5
    body = b"".join(f"id: {i}\ndata: {d if isinstance(d, str) else json.dumps(d)}\n\n: keep-alive\n\n".encode()
                    for i, (_, d) in enumerate(chat_stream(text="It is noon.").events or []))
    server.push(bad, Reply(chunks=[body]))
    d, token, sid = await chat_session(daemon_factory, url)
    await d.submit(token, sid, "r1", "what time is it?")
    view = await d.wait_idle(token, sid)
    assert view["status"] == "idle"
    events = await d.events(token, sid)
    failed = [e["body"] for e in events if e["kind"] == "model.failed"]
    assert [(f["code"], f["retryable"]) for f in failed] == [("PROVIDER_ERROR", True)]
    assert failed[0]["message"] == ("provider 'compat': malformed stream: TypeError: "
                                    "the id of tool call 1 is int, not text"), failed[0]["message"]
    assert view["agents"][0]["lastError"] == f"PROVIDER_ERROR: {failed[0]['message']}"
    assert len(server.requests) == 1  # asked once, not again by restarted actors
    await d.submit(token, sid, "r2", "and now?")
    view = await d.wait_idle(token, sid)
    assert view["status"] == "idle"
    answers = [e["body"]["text"] for e in await d.events(token, sid) if e["kind"] == "model.responded"]
    assert answers == ["It is noon."]


async def test_an_endless_stream_fails_the_request_and_the_session_answers_the_next(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    """A server that keeps sending text and never its final event: ``timeoutSeconds`` bounds a
    silence, so the session stayed running (and the answer grew in memory) until the server
    stopped or the user aborted. The read now ends once the answer is past ``log.maxEventBytes``,
    which no event could hold."""
    server = ScriptedServer()
    url = await server.start(nursery)
    begun = chat_stream(text=["It is "]).events or []
    piece = next(data for _, data in begun if isinstance(data, dict) and data["choices"][0]["delta"].get("content"))
    piece = json.loads(json.dumps(piece))
    piece["choices"][0]["delta"]["content"] = "and on " * 150
    server.push(Reply(events=begun[:2], endless=(None, piece)), chat_stream(text="It is noon."))
    limit = 64 * 1024
    d, token, sid = await chat_session(daemon_factory, url, log={"maxEventBytes": limit})
    await d.submit(token, sid, "r1", "what time is it?")
    view = await d.wait_idle(token, sid)
    assert view["status"] == "idle"
    assert limit < server.sent < 2 * limit
    failed = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert [f["code"] for f in failed] == ["RESPONSE_NOT_RECORDED"]
    assert failed[0]["message"].startswith("provider 'compat': the model's answer could not be recorded")
    # What had streamed is kept, cut (at a character) to the event limit less the room the
    # failure's other fields take (actor.PARTIAL_TEXT_ROOM), as an abort's is.
    kept = failed[0]["partial_text"]
    assert kept.startswith("It is and on and on ") and len(kept.encode()) == limit - 4096, len(kept)
    assert [(it["role"], it.get("status")) for it in view["items"]] == [("user", None), ("assistant", "failed")]
    await d.submit(token, sid, "r2", "and now?")
    view = await d.wait_idle(token, sid)
    answers = [e["body"]["text"] for e in await d.events(token, sid) if e["kind"] == "model.responded"]
    assert answers == ["It is noon."] and view["status"] == "idle"


async def test_a_stream_that_never_grows_fails_the_request_and_the_session_answers_the_next(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    """A server that begins an answer and then sends only keep-alive comments, for ever: it is
    never silent (the SDK's read timeout never fired) and the answer never grows (its size bound
    never did), so the session stayed running until the user aborted. The read now ends after
    ``timeoutSeconds`` without a byte of the answer, as a silent server's does."""
    server = ScriptedServer()
    url = await server.start(nursery)
    begun = chat_stream(text=["It is "]).events or []
    server.push(Reply(events=begun[:2], endless=b": keep-alive\n\n"), chat_stream(text="It is noon."))
    d, token, sid = await chat_session(daemon_factory, url, timeout_seconds=1)
    await d.submit(token, sid, "r1", "what time is it?")
    view = await d.wait_idle(token, sid)
    assert view["status"] == "idle"
    await server.disconnected.wait()  # the stream was closed
    failed = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert [(f["code"], f["retryable"]) for f in failed] == [("TIMEOUT", True)]
    assert failed[0]["message"] == ("provider 'compat': the request timed out: the stream sent nothing of the "
                                    "answer for 1 s"), failed[0]["message"]
    assert failed[0]["partial_text"] == "It is "  # (what had streamed before the silence)
    await d.submit(token, sid, "r2", "and now?")
    view = await d.wait_idle(token, sid)
    answers = [e["body"]["text"] for e in await d.events(token, sid) if e["kind"] == "model.responded"]
    assert answers == ["It is noon."] and view["status"] == "idle"
