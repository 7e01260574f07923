"""F-MOD-1 with F-CTX-1: an answer whose request fails while it streams keeps the text the user saw.

The provider's stream fails part-way on its own — an error event in the stream, a dropped
connection, a failed response — after some of the answer's text went out to viewers. The
request's ``model.failed`` (its code and usage as before) carries that visible text
(``partial_text``), as an abort's does; the fold makes it an assistant item marked ``failed``, so
it stays in the session view's ``items``, in ``lens log decode``, in history search and after a
restart, and the next model request sends it as the assistant's message. A failure before any
visible text keeps nothing; reasoning and a tool call begun are never kept.

Loopback servers speak the real wire protocols (Anthropic Messages, OpenAI Chat Completions and
Responses) to the official SDKs; the daemon runs on loopback port 0."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from events.codec import Codec
from events.types import ModelResponded
from runtime.actor import PARTIAL_TEXT_ROOM

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import Reply, ScriptedServer, sse
from ..providers.servers.openai_chat import chat_stream
from ..providers.servers.openai_responses import response_stream
from .kept_text import NEVER_SEEN, check_kept_text, check_nothing_kept, new_session

SEEN = ["Quokkas are ", "small marsupials"]
PARTIAL = "".join(SEEN)


def _anthropic_failing() -> Reply:
    # message_start, ping, the text block's start, both deltas; then the server's error event
    events = message_stream(text=[*SEEN, f" {NEVER_SEEN}"], usage={"input_tokens": 50, "output_tokens": 1}).events or []
    return Reply(events=[*events[:5], ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                              "message": "Overloaded"}})])


def _chat_failing() -> Reply:
    # the role chunk and both text chunks; then the connection drops
    events = chat_stream(text=[*SEEN, f" {NEVER_SEEN}"]).events or []
    return Reply(chunks=sse(events[:3]), close_early=True)


def _responses_failing() -> Reply:
    # created, in_progress, the message item and its part added, both text deltas; then the
    # response fails (it reports what it used)
    events = response_stream(text=[*SEEN, f" {NEVER_SEEN}"]).events or []
    failed = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-test", "status": "failed",
              "output": [], "error": {"code": "server_error", "message": "the model crashed"},
              "usage": {"input_tokens": 50, "output_tokens": 2, "total_tokens": 52,
                        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}
    return Reply(events=[*events[:6], ("response.failed", {"type": "response.failed", "sequence_number": 6,
                                                           "response": failed})])


# protocol -> (model id, the failing stream, the next answer, the request's message list, the
# failure's code, the usage it records: input, output)
PROTOCOLS = {
    "anthropic": ("claude-test", _anthropic_failing, lambda: message_stream(text="From Western Australia."),
                  "messages", "OVERLOADED", (50, None)),
    "openai-chat": ("compat-model", _chat_failing, lambda: chat_stream(text="From Western Australia."),
                    "messages", "CONNECTION_FAILED", (None, None)),
    "openai-responses": ("gpt-test", _responses_failing, lambda: response_stream(text="From Western Australia."),
                         "input", "PROVIDER_ERROR", (50, 2)),
}


def _config(protocol: str, url: str) -> dict[str, Any]:
    model = PROTOCOLS[protocol][0]
    base = url if protocol == "anthropic" else f"{url}/v1"
    return {"providers": [{"id": "p", "protocol": protocol, "baseUrl": base, "maxRetries": 0,
                           "models": [{"id": model, "contextWindow": 50000}]}],
            "defaultModel": f"p/{model}"}


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_an_answer_whose_stream_failed_keeps_the_text_it_had_streamed(daemon_factory, nursery, protocol):
    _model, failing, answer, key, code, (input_tokens, output_tokens) = PROTOCOLS[protocol]
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(failing())
    d = await daemon_factory(config=_config(protocol, url))
    token, pid, sid = await new_session(d, "failure-client")
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "tell me about quokkas")
        seen: list[str] = []

        def whole(m: Any) -> bool:
            if m.event == "model.delta" and m.json()["kind"] == "text":
                seen.append(m.json()["text"])
            return m.event == "model.failed"

        await stream.until(whole)
    assert "".join(seen) == PARTIAL  # (what a viewer was shown: what is kept)
    view = await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    (failed,) = [e for e in events if e["kind"] == "model.failed"]
    body = failed["body"]
    assert (body["code"], body["retryable"], body["partial_text"]) == (code, True, PARTIAL), body
    usage = body["usage"] or {}  # (unchanged: what the provider had reported by then)
    assert (usage.get("input_tokens"), usage.get("output_tokens")) == (input_tokens, output_tokens), body
    assert [(e["kind"], e["body"]["status"]) for e in events if e["kind"] == "task.finished"] == [("task.finished", "failed")]
    assert view["agents"][0]["lastError"].startswith(f"{code}: "), view["agents"][0]
    await check_kept_text(d, daemon_factory, server, token=token, pid=pid, sid=sid, config=_config(protocol, url),
                          text=PARTIAL, status="failed", key=key, query="marsupials", answer=answer())


async def test_a_failure_before_any_visible_text_keeps_nothing(daemon_factory, nursery):
    # Reasoning streamed and a tool call begun (half its arguments), then the server's error:
    # neither is kept, and nothing of the answer is sent again.
    server = ScriptedServer()
    url = await server.start(nursery)
    # message_start, ping, the thinking block (start, delta, signature, stop), the tool_use block's
    # start and the first half of its arguments; then the error event
    begun = message_stream(thinking=["pondering quokkas"], calls=[("toolu_1", "get_system_time", {"zone": "UTC"})]).events
    server.push(Reply(events=[*(begun or [])[:8], ("error", {"type": "error", "error": {"type": "api_error",
                                                                                        "message": "Internal"}})]))
    d = await daemon_factory(config=_config("anthropic", url))
    token, pid, sid = await new_session(d, "failure-client")
    await d.submit(token, sid, "r1", "tell me about quokkas")
    await check_nothing_kept(d, server, token=token, pid=pid, sid=sid, code="PROVIDER_ERROR")


async def test_a_subagent_whose_stream_failed_keeps_its_text_in_its_own_items(daemon_factory, nursery):
    # The main agent starts a subagent; the subagent's answer streams, then its connection drops.
    server = ScriptedServer()
    url = await server.start(nursery)
    sub = message_stream(text=[*SEEN, f" {NEVER_SEEN}"]).events or []
    server.push(message_stream(calls=[("toolu_1", "subagent", {"prompt": "SUBSTREAM"})]),
                Reply(chunks=sse(sub[:5]), close_early=True),
                message_stream(text="The subagent failed."))
    d = await daemon_factory(config=_config("anthropic", url))
    token, pid, sid = await new_session(d, "failure-client")
    await d.submit(token, sid, "r1", "tell me about quokkas")
    view = await d.wait_idle(token, sid)

    events = await d.events(token, sid)
    (failed,) = [e for e in events if e["kind"] == "model.failed"]
    assert failed["agent_id"].startswith("sub_"), failed
    assert (failed["body"]["code"], failed["body"]["partial_text"]) == ("CONNECTION_FAILED", PARTIAL), failed
    assert [e["body"]["status"] for e in events if e["kind"] == "agent.finished"] == ["failed"]
    subagent = next(a for a in view["agents"] if a["role"] == "subagent")
    assert (subagent["status"], subagent["items"]) == ("failed", 2)  # its prompt and the text kept
    r = await d.post("/history/search", token, {"projectId": pid, "query": "marsupials",
                                                "agentId": subagent["agentId"]})
    assert [(h["role"], h["contextItemId"]) for h in r.json()["results"]] == [("assistant", f"c{failed['seq']}")], r.text
    # The main agent's items are its own: the subagent's text is not among them.
    assert PARTIAL not in json.dumps(view["items"])
    assert view["items"][-1]["text"] == "The subagent failed."


async def test_a_kept_text_near_the_event_limit_is_cut_so_that_the_failure_is_recorded(daemon_factory, nursery):
    # A stream is read up to log.maxEventBytes of answer; the failure's model.failed holds the
    # text and its code, message and usage besides, which could take it past the limit: the log
    # would refuse the failure's record. The text kept is cut (at a character) to leave room.
    limit = 64 * 1024
    streamed = "é" * 32750  # 65,500 bytes: under the limit, as a stream may be
    events = chat_stream(text=[streamed, "never"]).events or []
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(Reply(chunks=sse(events[:2]), close_early=True))
    d = await daemon_factory(config={**_config("openai-chat", url), "log": {"maxEventBytes": limit}})
    token, _pid, sid = await new_session(d, "failure-client")
    await d.submit(token, sid, "r1", "tell me about quokkas")
    view = await d.wait_idle(token, sid)
    (failed,) = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert failed["code"] == "CONNECTION_FAILED" and failed["partial_text"] == "é" * ((limit - 4096) // 2), failed["code"]
    assert [(it["role"], it.get("status")) for it in view["items"]] == [("user", None), ("assistant", "failed")]
    assert view["items"][1]["text"] == failed["partial_text"] and view["status"] == "idle"
    assert len(server.requests) == 1  # (recorded once: not asked again)


async def test_a_faux_turn_with_text_and_an_error_streams_the_text_then_fails(daemon_factory):
    # The faux provider plays a stream that fails part-way (for demos and the dashboard's tests):
    # a turn with text and an error streams the text, then fails with what it reported by then.
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": "quokkas", "chunks": SEEN, "inputTokens": 40,
         "error": {"code": "OVERLOADED", "message": "try later", "retryable": True}},
        {"when": "at once", "text": "", "error": {"code": "RATE_LIMITED", "message": "slow down"}},
    ]}], "defaultModel": "faux/faux-1"}
    d = await daemon_factory(config=config)
    token, _pid, sid = await new_session(d, "failure-client")
    await d.submit(token, sid, "r1", "tell me about quokkas")
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "r2", "fail at once")
    view = await d.wait_idle(token, sid)
    failed = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert [(f["code"], f["partial_text"], (f["usage"] or {}).get("input_tokens")) for f in failed] == [
        ("OVERLOADED", PARTIAL, 40), ("RATE_LIMITED", "", None)], failed
    assert [(it["role"], it.get("status")) for it in view["items"]] == [
        ("user", None), ("assistant", "failed"), ("user", None)], view["items"]


def _responded_bytes(body: dict[str, Any], text: str) -> int:
    """The stored size of a ``model.responded`` like ``body`` (from the events route) holding ``text``."""
    return len(Codec().pack(msgspec.convert({**body, "text": text}, ModelResponded)))


async def test_an_answer_the_log_refused_keeps_its_text_cut_to_fit(daemon_factory, nursery):
    # A whole answer streamed, then the log refused its model.responded (past log.maxEventBytes
    # with what the event holds besides its text): the request failed RESPONSE_NOT_RECORDED and
    # kept nothing, though the user had seen all of it stream. It keeps its visible text now, cut
    # (at a character) as every kept text is, so that the failure's own event fits.
    limit = 64 * 1024
    config = {**_config("anthropic", "URL"), "log": {"maxEventBytes": limit}}
    server = ScriptedServer()
    url = await server.start(nursery)
    config["providers"][0]["baseUrl"] = url
    d = await daemon_factory(config=config)
    token = await d.pair("failure-client", strong=True)
    pid = (await d.project(token))["id"]

    async def answered(text: str, input_text: str) -> tuple[str, list[dict[str, Any]]]:
        server.push(message_stream(text=text))
        sid = (await d.session(token, pid))["id"]
        await d.submit(token, sid, "r1", input_text)
        await d.wait_idle(token, sid)
        return sid, await d.events(token, sid)

    # What a model.responded holds besides its text, read from one the log took.
    _sid, events = await answered("a probe", "a first question")
    (probe,) = [e["body"] for e in events if e["kind"] == "model.responded"]
    assert _responded_bytes(probe, "a probe") < 1024

    def text_of(n: int, head: str) -> str:
        """``head`` padded so that its model.responded is exactly ``n`` bytes."""
        # (MessagePack's string header grows past 65,535 bytes: try both of its sizes)
        texts = [head + "x" * (n - (_responded_bytes(probe, head + "x" * k) - k)) for k in (300, 70_000)]
        return next(text for text in texts if _responded_bytes(probe, text) == n)

    # Exactly at the limit: recorded whole, nothing kept besides.
    at = text_of(limit, "Wombats dig burrows. ")
    sid, events = await answered(at, "tell me about wombats")
    assert [e["body"]["text"] for e in events if e["kind"] == "model.responded"] == [at]
    assert [e for e in events if e["kind"] == "model.failed"] == []
    view = await d.view(token, sid)
    assert [(it["role"], it.get("status")) for it in view["items"]] == [("user", None), ("assistant", None)]

    # One byte past it: refused; the failure keeps the text cut to the limit less the room.
    past = text_of(limit + 1, "Quokkas are small marsupials. ")
    assert len(past.encode()) < limit  # (a stream of it is read whole: the log refuses its event)
    server.push(message_stream(text=past))
    sid = (await d.session(token, pid))["id"]
    await d.submit(token, sid, "r1", "tell me about quokkas")
    kept = past[:limit - PARTIAL_TEXT_ROOM]
    failed = await check_kept_text(d, daemon_factory, server, token=token, pid=pid, sid=sid, config=config,
                                   text=kept, status="failed", key="messages", query="marsupials",
                                   answer=message_stream(text="From Western Australia."), asked=3)
    body = failed["body"]
    assert body["code"] == "RESPONSE_NOT_RECORDED" and f"{limit + 1} bytes" in body["message"], body["message"]
    assert (body["usage"]["input_tokens"], body["usage"]["output_tokens"]) == (10, 7)  # (the whole answer's)
