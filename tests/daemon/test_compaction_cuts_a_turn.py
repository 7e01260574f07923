"""A compaction that cuts inside a long turn (F-CTX-1, F-CTX-2), on the real daemon against an
Anthropic Messages, an OpenAI Chat Completions and an OpenAI Responses server on loopback (the
official SDKs, the real wire protocols): one input, then a loop of ``read_file`` calls whose results are large, until the
automatic threshold is met. No round fits ``keepRecentTokens``, so the cut falls inside this one:
the input and the newest step (the call just made and its result) stay as written, the earlier
steps are summarized, and the request that continues the task — also the first one a restarted
daemon sends, from the log — is one its provider's wire format accepts; a fork rebuilds the same
Working Context."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from runtime.working_context import COMPACTION_KEPT, COMPACTION_SYSTEM

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import Received, Reply, ScriptedServer
from ..providers.servers import openai_responses
from ..providers.servers.openai_chat import chat_stream, usage
from ..providers.wire import check_anthropic_turns, check_chat_turns, check_responses_turns
from .conftest import LIMIT, stop_daemon

KEEP = 5000  # keepRecentTokens: one step (about 4,100 tokens) fits, two do not
WINDOW = 40000  # the automatic threshold at 50% is 20,000
FILE_LINES = 40  # each file: 40 lines of 400 characters, about 4,000 tokens read back
MAX_CALLS = 8  # (a bound: the threshold is met after four or five)
TASK = "Read the files f0.txt, f1.txt, … one after the other and tell me what they hold."
SUMMARY = "SUMMARY: the agent read f0.txt to f2.txt; each holds lines of the letter it is named after."
DONE = "All the files hold lines of letters."
NEXT = "Which file did you read last?"


class Model:
    """The loopback model: it reads one file more per answer until a summary was asked for, then
    answers in text. ``protocol`` shapes its replies and tells its requests apart."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.calls: list[str] = []  # the ids of the calls it made
        self.summarizing: list[Received] = []

    def is_summarizing(self, body: dict[str, Any]) -> bool:
        if self.protocol == "anthropic":
            system = body.get("system")
        elif self.protocol == "openai-chat":
            system = [m for m in body["messages"] if m["role"] == "system"]
        else:
            system = [m for m in body["input"] if m.get("role") == "developer"]
        return COMPACTION_SYSTEM in json.dumps(system)

    def reply(self, *, text: str = "", call: tuple[str, str, Any] | None = None) -> Reply:
        calls = [call] if call else []
        if self.protocol == "anthropic":
            return message_stream(text=text, calls=calls, usage={"input_tokens": 10, "output_tokens": 1})
        if self.protocol == "openai-chat":
            return chat_stream(text=text, calls=calls, usage=usage(10, 1))
        return openai_responses.response_stream(text=text, calls=calls, usage=openai_responses.usage(10, 1))

    def __call__(self, received: Received) -> Reply:
        if self.is_summarizing(received.body):
            self.summarizing.append(received)
            return self.reply(text=SUMMARY)
        if NEXT in json.dumps(received.body):
            return self.reply(text="f%d.txt" % (len(self.calls) - 1))
        if self.summarizing or len(self.calls) >= MAX_CALLS:
            return self.reply(text=DONE)
        n = len(self.calls)
        self.calls.append(f"toolu_{n:02d}" if self.protocol == "anthropic" else f"call_{n:02d}")
        return self.reply(text=f"Reading f{n}.txt.", call=(self.calls[-1], "read_file", {"path": f"f{n}.txt"}))


def _config(protocol: str, url: str) -> dict:
    provider = ({"id": "claude", "protocol": "anthropic", "baseUrl": url,
                 "models": [{"id": "claude-test", "contextWindow": WINDOW}]} if protocol == "anthropic" else
                {"id": "gpt", "protocol": protocol, "baseUrl": f"{url}/v1",
                 "models": [{"id": "gpt-test", "contextWindow": WINDOW}]})
    return {"providers": [provider],
            "defaultModel": "claude/claude-test" if protocol == "anthropic" else "gpt/gpt-test",
            "context": {"compaction": {"auto": True, "triggerPercent": 50, "keepRecentTokens": KEEP}}}


def _turns(protocol: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """The conversation of a request as (kind, what): ``text`` blocks and messages by role,
    ``call``/``result`` by call id (a protocol's system prompt left out)."""
    out: list[tuple[str, str]] = []
    if protocol == "anthropic":
        check_anthropic_turns(body)
        for m in body["messages"]:
            for b in m["content"]:
                if b["type"] == "text":
                    out.append((m["role"], b["text"]))
                elif b["type"] == "tool_use":
                    out.append(("call", b["id"]))
                elif b["type"] == "tool_result":
                    out.append(("result", b["tool_use_id"]))
        return out
    if protocol == "openai-responses":
        check_responses_turns(body)
        for m in body["input"]:
            if m.get("type") == "function_call":
                out.append(("call", m["call_id"]))
            elif m.get("type") == "function_call_output":
                out.append(("result", m["call_id"]))
            elif m.get("role") in ("user", "assistant"):
                content = m["content"]
                texts = [content] if isinstance(content, str) else [p["text"] for p in content if "text" in p]
                out += [(m["role"], x) for x in texts if x]
        return out
    check_chat_turns(body)
    for m in body["messages"]:
        if m["role"] == "system":
            continue
        if m["role"] == "tool":
            out.append(("result", m["tool_call_id"]))
            continue
        content = m.get("content")
        texts = [content] if isinstance(content, str) else [p["text"] for p in content or [] if p.get("type") == "text"]
        out += [(m["role"], x) for x in texts if x]
        out += [("call", c["id"]) for c in m.get("tool_calls", [])]
    return out


async def _started(daemon_factory, nursery, protocol: str, model, client: str):
    """A daemon whose provider is ``model`` behind a loopback wire server, a paired client, a
    project whose workspace holds the files the loop reads, and a session: (server, its url,
    the daemon, the client's token, the session id)."""
    server = ScriptedServer(answer=model)
    url = await server.start(nursery)
    d = await daemon_factory(config=_config(protocol, url))
    token = await d.pair(client, strong=True)
    project = await d.project(token)
    workspace = d.root / "workspaces" / "p"
    for n in range(MAX_CALLS):
        (workspace / f"f{n}.txt").write_text("".join(chr(ord("a") + n) * 399 + "\n" for _ in range(FILE_LINES)))
    sid = (await d.session(token, project["id"]))["id"]
    return server, url, d, token, sid


async def _restarted_alike(daemon_factory, protocol: str, url: str, d, token: str, sid: str, server,
                           context: dict, newest: list) -> None:
    """After a restart the Working Context rebuilt from the log is ``context``, a fork as of the
    session's last event rebuilds the same, and the restarted daemon's first request holds the
    task's input, the summary, the ``newest`` step and the answer, then the new input."""
    await stop_daemon(d)
    d2 = await daemon_factory(config=_config(protocol, url), root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    last_seq = (await d2.events(token, sid))[-1]["seq"]
    r = await d2.post(f"/sessions/{sid}/fork", token, {"seq": last_seq})
    assert r.status_code == 201, r.text
    forked = (await d2.get(f"/sessions/{r.json()['id']}/context", token)).json()
    assert (forked["workingItemIds"], forked["items"]) == (context["workingItemIds"], context["items"])
    before = len(server.requests)
    await d2.submit(token, sid, "r2", NEXT)
    await d2.wait_idle(token, sid)
    assert len(server.requests) == before + 1
    resumed = _turns(protocol, server.requests[-1].body)
    assert resumed[0] == ("user", TASK) and SUMMARY in resumed[1][1]
    assert resumed[2:] == [*newest, ("assistant", DONE), ("user", NEXT)]


@pytest.mark.parametrize("protocol", ["anthropic", "openai-chat", "openai-responses"])
async def test_a_task_deep_in_a_tool_loop_keeps_its_input_and_newest_step_across_a_restart(
        daemon_factory, nursery, protocol):
    model = Model(protocol)
    server, url, d, token, sid = await _started(daemon_factory, nursery, protocol, model, "turn-client")
    await d.submit(token, sid, "r1", TASK)
    await d.wait_idle(token, sid)

    # The loop met the threshold once, and the summarizing request came before the request
    # that continued the task.
    assert len(model.summarizing) == 1
    at = server.requests.index(model.summarizing[0])
    last = model.calls[-1]
    assert 3 <= len(model.calls) < MAX_CALLS
    summarizing = _turns(protocol, model.summarizing[0].body)
    # It saw the input and every step but the newest, and was told newer messages follow.
    assert ("user", TASK) in summarizing
    assert [x for kind, x in summarizing if kind == "call"] == model.calls[:-1]
    assert summarizing[-1][0] == "user" and summarizing[-1][1].endswith(COMPACTION_KEPT)
    # The request after it: the input word for word, the summary (it stands where the first step
    # it replaced stood: the input was the conversation's first item), the newest step (the
    # response's text and call, then its result), in a shape the provider accepts.
    after = _turns(protocol, server.requests[at + 1].body)
    newest = [("assistant", f"Reading f{len(model.calls) - 1}.txt."), ("call", last), ("result", last)]
    assert after[0] == ("user", TASK) and after[1][0] == "user" and SUMMARY in after[1][1]
    assert after[2:] == newest
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    compacted = [i for i in context["items"] if i["context"] == "compacted"]
    assert len(compacted) == 3 * (len(model.calls) - 1)  # the earlier steps: texts, calls, results
    assert [i["role"] for i in context["items"] if i["context"] == "visible"] == [
        "user", "assistant", "tool_call", "tool_result", "summary", "assistant"]  # (Full Context order)
    assert context["compactions"] == 1 and len(context["workingItemIds"]) == 1 + 1 + 3 + 1  # (and the answer)

    # After a restart the Working Context rebuilt from the log is the same, and the first request
    # the restarted daemon sends holds the summary, the input, the newest step and the answer,
    # then the new input: accepted by the wire format too.
    await _restarted_alike(daemon_factory, protocol, url, d, token, sid, server, context, newest)


STEER = "Skip the files after f4.txt; say which letters you saw."


class SteeredModel(Model):
    """:class:`Model`, whose answer making the second call is held until the test has queued a
    steer: the steer is placed after that call's result, in the middle of the loop."""

    def __init__(self, protocol: str) -> None:
        super().__init__(protocol)
        self.held = trio.Event()  # the held answer was asked for
        self.gate = trio.Event()

    def __call__(self, received: Received) -> Reply:
        reply = super().__call__(received)
        if len(self.calls) == 2 and not self.held.is_set() and not self.summarizing:
            reply.gate = self.gate
            self.held.set()
        return reply


@pytest.mark.parametrize("protocol", ["anthropic", "openai-chat", "openai-responses"])
async def test_a_cut_inside_a_steered_task_keeps_the_tasks_first_input_across_a_restart(
        daemon_factory, nursery, protocol):
    # The user steers the task after its second step; the loop goes on until the automatic
    # threshold compacts. The cut falls inside the task's turn after the steer: the task's own
    # input is kept word for word before the newest step, and the steer is summarized with the
    # steps before the cut (not kept as the turn's input, the task's input summarized).
    model = SteeredModel(protocol)
    server, url, d, token, sid = await _started(daemon_factory, nursery, protocol, model, "steer-client")
    await d.submit(token, sid, "r1", TASK)
    with trio.fail_after(LIMIT):
        await model.held.wait()
    await d.submit(token, sid, "r-steer", STEER, whenBusy="steer")
    assert [q["whenBusy"] for q in (await d.view(token, sid))["queued"]] == ["steer"]
    model.gate.set()
    await d.wait_idle(token, sid)

    assert len(model.summarizing) == 1
    at = server.requests.index(model.summarizing[0])
    last = model.calls[-1]
    assert 3 <= len(model.calls) < MAX_CALLS  # (the steer came before the newest step)
    # The steer was placed after the second call's result, before the third call.
    placed = _turns(protocol, server.requests[2].body)
    assert placed[-2:] == [("result", model.calls[1]), ("user", STEER)]
    # The summarizing request saw the input, every step but the newest, and the steer in its place.
    summarizing = _turns(protocol, model.summarizing[0].body)
    assert summarizing[0] == ("user", TASK)
    steer = summarizing.index(("user", STEER))
    assert summarizing[steer - 1] == ("result", model.calls[1]) and summarizing[steer + 2] == ("call", model.calls[2])
    assert [x for kind, x in summarizing if kind == "call"] == model.calls[:-1]
    assert summarizing[-1][0] == "user" and summarizing[-1][1].endswith(COMPACTION_KEPT)
    # The request after it: the task's input word for word, the summary, the newest step — the
    # same cut for each wire format; the steer only in the summary.
    after = _turns(protocol, server.requests[at + 1].body)
    newest = [("assistant", f"Reading f{len(model.calls) - 1}.txt."), ("call", last), ("result", last)]
    assert after[0] == ("user", TASK) and after[1][0] == "user" and SUMMARY in after[1][1]
    assert after[2:] == newest
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    marks = {i["role"]: [] for i in context["items"]}
    for i in context["items"]:
        marks[i["role"]].append(i["context"])
    assert marks["user"] == ["visible", "compacted"]  # the task's input, the steer
    assert [i["context"] for i in context["items"]].count("compacted") == 3 * (len(model.calls) - 1) + 1
    assert context["compactions"] == 1 and len(context["workingItemIds"]) == 1 + 1 + 3 + 1  # (and the answer)

    # After a restart the log rebuilds the same Working Context, a fork as of the last event too,
    # and the restarted daemon's first request still begins with the task's input.
    await _restarted_alike(daemon_factory, protocol, url, d, token, sid, server, context, newest)
