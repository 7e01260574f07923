"""F-ACT-3 with F-CTX-1: an answer the user aborts while it streams keeps the text they saw.

The aborted request's ``model.failed`` (``ABORTED``) carries the answer's visible text streamed by
then (``partial_text``); the fold makes it an assistant item marked ``aborted``, so it stays in the
session view's ``items``, in ``lens log decode``, in history search and after a restart, and the
next model request sends it as the assistant's message. Nothing is kept when nothing visible had
streamed (reasoning, a tool call under way); a graceful stop (``model.cut_off``) is no abort and
keeps nothing: its request is asked again.

Loopback servers speak the real wire protocols (Anthropic Messages, OpenAI Chat Completions and
Responses) to the official SDKs, streaming part of an answer and then stalling, as a long answer
does; the daemon runs on loopback port 0."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from ..providers.servers.openai_responses import response_stream
from .conftest import LIMIT, Daemon
from .kept_text import NEVER_SEEN, check_kept_text, check_nothing_kept, new_session, roles_and_texts

SEEN = ["Quokkas are ", "small marsupials"]
PARTIAL = "".join(SEEN)


def _anthropic(url: str) -> dict[str, Any]:
    return {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url, "maxRetries": 0,
                           "models": [{"id": "claude-test", "contextWindow": 50000}]}],
            "defaultModel": "claude/claude-test"}


async def _abort_after_seeing(d: Daemon, token: str, sid: str, text: str, *, agent: str = "main") -> None:
    """Submit ``r1``, read the SSE stream until ``agent``'s streamed text is ``text``, then abort."""
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "tell me about quokkas")
        seen: list[str] = []

        def whole(m: Any) -> bool:
            if m.event == "model.delta":
                data = m.json()
                if data["kind"] == "text" and (data["agent_id"] == agent or data["agent_id"].startswith(agent)):
                    seen.append(data["text"])
            return "".join(seen) == text

        await stream.until(whole)
        r = await d.post(f"/sessions/{sid}/abort", token)
        assert r.status_code == 200 and r.json()["aborted"] is True, r.text


async def test_an_answer_aborted_while_it_streamed_keeps_its_text_anthropic(daemon_factory, nursery):
    server = ScriptedServer()
    url = await server.start(nursery)
    # message_start, ping, the text block's start, both deltas; then nothing more
    server.push(message_stream(text=[*SEEN, f" {NEVER_SEEN}"], usage={"input_tokens": 50, "output_tokens": 1},
                               stall_after=5))
    d = await daemon_factory(config=_anthropic(url))
    token, pid, sid = await new_session(d, "abort-client")
    await _abort_after_seeing(d, token, sid, PARTIAL)

    (failed,) = [e for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert (failed["body"]["code"], failed["body"]["partial_text"]) == ("ABORTED", PARTIAL), failed
    # usage unchanged: the input count message_start reported, the output count unknown
    assert failed["body"]["usage"]["input_tokens"] == 50 and failed["body"]["usage"]["output_tokens"] is None
    await check_kept_text(d, daemon_factory, server, token=token, pid=pid, sid=sid, config=_anthropic(url),
                          text=PARTIAL, status="aborted", key="messages", query="marsupials",
                          answer=message_stream(text="Yes, from Western Australia."))


# (protocol, model id, the stream cut after both text deltas, the next answer, the request's message list)
OPENAI = {
    # the role chunk and both text chunks; then nothing more
    "openai-chat": ("compat-model", chat_stream(text=[*SEEN, f" {NEVER_SEEN}"], stall_after=3),
                    chat_stream(text="They live on Rottnest Island."), "messages"),
    # created, in_progress, the message item and its part added, both text deltas; then nothing more
    "openai-responses": ("gpt-test", response_stream(text=[*SEEN, f" {NEVER_SEEN}"], stall_after=6),
                         response_stream(text="They live on Rottnest Island."), "input"),
}


@pytest.mark.parametrize("protocol", sorted(OPENAI))
async def test_an_answer_aborted_while_it_streamed_keeps_its_text_openai(daemon_factory, nursery, protocol):
    model, cut, answer, key = OPENAI[protocol]
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(cut)
    d = await daemon_factory(config={"providers": [{"id": "oa", "protocol": protocol, "baseUrl": f"{url}/v1",
                                                    "maxRetries": 0, "models": [{"id": model}]}],
                                     "defaultModel": f"oa/{model}"})
    token, _pid, sid = await new_session(d, "abort-client")
    await _abort_after_seeing(d, token, sid, PARTIAL)

    (failed,) = [e for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert (failed["body"]["code"], failed["body"]["partial_text"]) == ("ABORTED", PARTIAL), failed
    items = [(it["role"], it["text"], it.get("status")) for it in (await d.view(token, sid))["items"]]
    assert items == [("user", "tell me about quokkas", None), ("assistant", PARTIAL, "aborted")], items

    server.push(answer)
    await d.submit(token, sid, "r2", "go on")
    await d.wait_idle(token, sid)
    sent = server.requests[1].body[key]
    assert roles_and_texts(sent) == [
        ("user", "tell me about quokkas"), ("assistant", PARTIAL), ("user", "go on")]
    (assistant,) = [m for m in sent if m.get("role") == "assistant"]
    assert assistant["content"] == PARTIAL and "tool_calls" not in assistant
    assert not [m for m in sent if m.get("type") in ("function_call", "reasoning")]


async def test_a_kept_text_near_the_event_limit_is_cut_so_that_the_abort_is_recorded(daemon_factory, nursery):
    # A stream is read up to log.maxEventBytes of answer; the abort's model.failed holds the text
    # and its code, message and usage besides, which could take it past the limit: the log would
    # refuse the abort's whole record. The text kept is cut (at a character) to leave room.
    limit = 64 * 1024
    streamed = "é" * 32750  # 65,500 bytes: under the limit, as a stream may be
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(chat_stream(text=[streamed, "never"], stall_after=2))
    d = await daemon_factory(config={"providers": [{"id": "oa", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                                                    "maxRetries": 0, "models": [{"id": "compat-model"}]}],
                                     "defaultModel": "oa/compat-model", "log": {"maxEventBytes": limit}})
    token, _pid, sid = await new_session(d, "abort-client")
    await _abort_after_seeing(d, token, sid, streamed)
    (failed,) = [e for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    kept = failed["body"]["partial_text"]
    assert kept == "é" * ((limit - 4096) // 2), len(kept)
    view = await d.view(token, sid)
    assert [(it["role"], it.get("status")) for it in view["items"]] == [("user", None), ("assistant", "aborted")]
    assert view["items"][1]["text"] == kept and view["status"] == "idle"


async def test_an_abort_before_any_visible_text_keeps_nothing(daemon_factory, nursery):
    # Reasoning streamed (its signature never came) and a tool call begun (its arguments cut):
    # neither is kept, and nothing of the answer is sent again.
    server = ScriptedServer()
    url = await server.start(nursery)
    # message_start, ping, the thinking block (start, delta, signature, stop), the tool_use block's
    # start and the first half of its arguments; then nothing more
    server.push(message_stream(thinking=["pondering quokkas"], calls=[("toolu_1", "get_system_time", {"zone": "UTC"})],
                               stall_after=8))
    d = await daemon_factory(config=_anthropic(url))
    token, pid, sid = await new_session(d, "abort-client")
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "tell me about quokkas")
        await stream.until(lambda m: m.event == "model.delta" and m.json()["kind"] == "reasoning")
        with trio.fail_after(LIMIT):  # (the daemon's tasks all wait for frames that never come)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        assert (await d.post(f"/sessions/{sid}/abort", token)).status_code == 200

    await check_nothing_kept(d, server, token=token, pid=pid, sid=sid, code="ABORTED")


async def test_a_subagent_aborted_while_its_answer_streamed_keeps_its_text(daemon_factory):
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": "quokkas", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBSTREAM"}}]},
        {"when": "SUBSTREAM", "chunks": [*SEEN, f" {NEVER_SEEN}"], "chunkDelayMs": 600000},
    ]}], "defaultModel": "faux/faux-1"}
    d = await daemon_factory(config=config)
    token, pid, sid = await new_session(d, "abort-client")
    # (faux streams a chunk, then waits chunkDelayMs before the next: one chunk is seen)
    await _abort_after_seeing(d, token, sid, SEEN[0], agent="sub_")

    events = await d.events(token, sid)
    (failed,) = [e for e in events if e["kind"] == "model.failed"]
    assert failed["agent_id"].startswith("sub_") and failed["body"]["partial_text"] == SEEN[0], failed
    ended = [(e["kind"], e["body"]["status"]) for e in events if e["kind"] in ("agent.finished", "task.finished")]
    assert ended == [("agent.finished", "aborted"), ("task.finished", "aborted")]
    view = await d.view(token, sid)
    sub = next(a for a in view["agents"] if a["role"] == "subagent")
    assert (sub["status"], sub["items"]) == ("aborted", 2)  # its prompt and the text kept
    r = await d.post("/history/search", token, {"projectId": pid, "query": "Quokkas", "agentId": sub["agentId"]})
    assert [(h["role"], h["contextItemId"]) for h in r.json()["results"]] == [("assistant", f"c{failed['seq']}")], r.text
    # The main agent's items are its own: the subagent's text is not among them.
    assert PARTIAL[:5] not in json.dumps(view["items"])


async def test_a_stop_while_an_answer_streamed_keeps_nothing_and_asks_again(daemon_factory, nursery):
    # A graceful stop is no abort: model.cut_off records the usage, the request stays open and the
    # restart asks it again; what had streamed is not kept (the answer comes whole).
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(message_stream(text=[*SEEN, f" {NEVER_SEEN}"], stall_after=5))
    d = await daemon_factory(config=_anthropic(url))
    token, _pid, sid = await new_session(d, "abort-client")
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "tell me about quokkas")
        await stream.until(lambda m: m.event == "model.delta" and m.json()["text"] == SEEN[1])
        d.stop.set()
        with trio.fail_after(LIMIT):
            await d.done.wait()
    await d.client.aclose()
    server.push(message_stream(text="Small marsupials of Rottnest Island."))
    d2 = await daemon_factory(config=_anthropic(url), root=d.root)
    await d2.wait_idle(token, sid)
    kinds = [e["kind"] for e in await d2.events(token, sid)]
    assert "model.cut_off" in kinds and "model.failed" not in kinds, kinds
    items = [(it["role"], it["text"], it.get("status")) for it in (await d2.view(token, sid))["items"]]
    assert items == [("user", "tell me about quokkas", None),
                     ("assistant", "Small marsupials of Rottnest Island.", None)], items
    assert [m["role"] for m in server.requests[1].body["messages"]] == ["user"]
