"""A second pass over SPEC section 4 as a user sees it: sessions of the real actor and supervisor
whose model is served over loopback by the real SDK clients, driven with answers the protocols
allow but the other provider tests do not send."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle
from tools.base import ToolResult, ToolSpec
from tools.registry import builtin_tools

from .conftest import PROTOCOLS
from .scripts import error, reply
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers import openai_responses as orr
from .test_actor import events_of, runtime


def _calls_and_results(protocol: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The call ids of a request's history, and the call ids its results answer, in order."""
    if protocol == "openai-responses":
        items = body["input"]
        return ([i["call_id"] for i in items if i.get("type") == "function_call"],
                [i["call_id"] for i in items if i.get("type") == "function_call_output"])
    if protocol == "openai-chat":
        msgs = body["messages"]
        return ([c["id"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []],
                [m["tool_call_id"] for m in msgs if m["role"] == "tool"])
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return ([b["id"] for b in blocks if b["type"] == "tool_use"],
            [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"])


async def _session(sup: Any, text: str) -> str:
    sid = await sup.create_session("p1")
    await sup.call(sid, Submit("req1", [t.TextPart(text)]))
    with trio.fail_after(30):
        await sup.call(sid, WaitIdle())
    return sid


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_two_calls_of_one_answer_under_one_id_both_run_and_go_back_each_with_its_result(
        protocol, server, make, tmp_path):
    """A server that gives two calls of one answer the same id (one that numbers every call
    ``call_1``): both run, the log tells them apart, and the next request pairs each call with
    its own result under distinct ids, as every protocol requires."""
    provider = make(protocol)
    server.push(reply(protocol, calls=[("call_1", "get_system_time", {}), ("call_1", "get_system_time", {})], rid="r1"),
                reply(protocol, text="done", rid="r2"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await _session(sup, "the time twice")
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    [first, second] = [e.event for e in evs if e.kind == "model.responded"]
    ids = [c.call_id for c in first.tool_calls]
    assert len(ids) == 2 and ids[0] == "call_1" and ids[1] != "call_1", ids
    finished = [e.event for e in evs if e.kind == "tool.finished"]
    assert sorted(f.call_id for f in finished) == sorted(ids) and all(f.status == "ok" for f in finished)
    assert second.text == "done" and state.status == "idle"
    assert len(server.requests) == 2
    calls, results = _calls_and_results(protocol, server.requests[1].body)
    assert len(calls) == 2 and len(set(calls)) == 2, calls
    assert sorted(results) == sorted(calls), (calls, results)


def _unknown_stop(protocol: str, calls: list[tuple[str, str, Any]], text: str = "") -> Any:
    if protocol == "openai-chat":
        return oc.chat_stream(text=text, calls=calls, finish="something_new")
    return an.message_stream(text=text, calls=calls, stop_reason="something_new")


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
async def test_a_stop_reason_no_protocol_names_is_recorded_as_sent_and_the_answers_calls_run(
        protocol, server, make, tmp_path):
    """A finish or stop reason the protocol does not define (a compatible server's own, or one
    added after the SDK was pinned) is no cut: it is recorded as the server sent it, the calls of
    its answer run, and the session asks the model again with their results."""
    provider = make(protocol)
    server.push(_unknown_stop(protocol, [("call_a", "get_system_time", {})], text="Checking."),
                _unknown_stop(protocol, [], text="It is late."))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await _session(sup, "what time is it?")
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    responded = [e.event for e in evs if e.kind == "model.responded"]
    assert [r.stop_reason for r in responded] == ["something_new", "something_new"]
    finished = [e.event for e in evs if e.kind == "tool.finished"]
    assert [(f.call_id, f.status) for f in finished] == [("call_a", "ok")]
    assert state.status == "idle" and state.agents["main"].items[-1].text == "It is late."
    calls, results = _calls_and_results(protocol, server.requests[1].body)
    assert calls == results == ["call_a"]


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic"])
async def test_a_tool_use_stop_without_a_call_ends_the_task_with_the_answer(protocol, server, make, tmp_path):
    """A server that says its answer stopped for a tool call (Chat ``finish_reason: tool_calls``,
    Anthropic ``stop_reason: tool_use``) and sends none: the answer is kept, recorded with stop
    ``tool_use`` and no calls, and ends the task as any answer without a call does; the next
    input is answered with it in the history. (Anthropic failed the task: a malformed stream.)"""
    provider = make(protocol)

    def stop_without_call(text: str) -> Any:
        if protocol == "openai-chat":
            return oc.chat_stream(text=text, finish="tool_calls")
        return an.message_stream(text=text, stop_reason="tool_use")

    server.push(stop_without_call("Let me check the clock."), reply(protocol, text="It is late.", rid="r2"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await _session(sup, "what time is it?")
        await sup.call(sid, Submit("req2", [t.TextPart("and now?")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    responded = [e.event for e in evs if e.kind == "model.responded"]
    assert [(r.text, r.tool_calls, r.stop_reason) for r in responded] == [
        ("Let me check the clock.", [], "tool_use"), ("It is late.", [], "end_turn")]
    assert [e.kind for e in evs if e.kind in ("model.failed", "tool.started")] == []
    assert [e.event.status for e in evs if e.kind == "task.finished"] == ["completed", "completed"]
    assert state.status == "idle"
    assert [(it.role, it.text) for it in state.agents["main"].items] == [
        ("user", "what time is it?"), ("assistant", "Let me check the clock."), ("user", "and now?"),
        ("assistant", "It is late.")]
    assert len(server.requests) == 2
    calls, results = _calls_and_results(protocol, server.requests[1].body)
    assert calls == results == []


ODD_TOOL = "mcp__issue-tracker__search.issues/by-label_" + "x" * 40  # a '.', a '/', past 64 characters


def _odd_tool(seen: list[dict[str, Any]]) -> ToolSpec:
    async def run(args: dict[str, Any], ctx: Any) -> ToolResult:
        seen.append(args)
        return ToolResult.text(f"3 issues labelled {args.get('label')}")

    return ToolSpec(ODD_TOOL, "Search issues by label.",
                    {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}, run)


def _offered_names(protocol: str, body: dict[str, Any]) -> list[str]:
    if protocol == "openai-chat":
        return [tool["function"]["name"] for tool in body.get("tools", [])]
    return [tool["name"] for tool in body.get("tools", [])]


def _called_names(protocol: str, body: dict[str, Any]) -> list[str]:
    if protocol == "openai-responses":
        return [i["name"] for i in body["input"] if i.get("type") == "function_call"]
    if protocol == "openai-chat":
        return [c["function"]["name"] for m in body["messages"] if m["role"] == "assistant"
                for c in m.get("tool_calls") or []]
    return [b["name"] for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == "tool_use"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_tool_named_past_the_wire_rule_is_offered_called_and_sent_back_under_one_alias(
        protocol, server, make, tmp_path):
    """F-MOD-2 through a session: a tool whose name has characters no protocol takes and is past
    64 characters is offered under a valid alias, the same in every request; the model's call of
    the alias runs the tool, the log records the tool's own name, and the next request sends the
    call back under the alias it was made with."""
    seen: list[dict[str, Any]] = []
    provider = make(protocol)
    async with runtime(tmp_path / "data", provider, tools=builtin_tools([_odd_tool(seen)])) as sup:
        sid = await sup.create_session("p1")
        # the first request shows the alias; the answer to it is scripted once it is known
        server.push(reply(protocol, text="No call yet.", rid="r0"))
        await sup.call(sid, Submit("req0", [t.TextPart("hello")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        [alias] = [n for n in _offered_names(protocol, server.requests[0].body) if n.startswith("mcp__")]
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", alias) and alias != ODD_TOOL, alias
        server.push(reply(protocol, calls=[("call_s1", alias, {"label": "bug"})], rid="r1"),
                    reply(protocol, text="Three.", rid="r2"))
        await sup.call(sid, Submit("req1", [t.TextPart("search bugs")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        evs = await events_of(sup, sid)
    assert seen == [{"label": "bug"}]
    [called] = [c for e in evs if e.kind == "model.responded" for c in e.event.tool_calls]
    assert called.name == ODD_TOOL  # the log keeps the tool's own name
    [finished] = [e.event for e in evs if e.kind == "tool.finished"]
    assert finished.status == "ok" and "3 issues labelled bug" in finished.content[0].text
    assert len(server.requests) == 3
    for rq in server.requests:
        assert alias in _offered_names(protocol, rq.body) and ODD_TOOL not in _offered_names(protocol, rq.body)
        assert ODD_TOOL not in _called_names(protocol, rq.body)  # (its description names it, for the model)
    assert _called_names(protocol, server.requests[2].body) == [alias]
    calls, results = _calls_and_results(protocol, server.requests[2].body)
    assert calls == results == ["call_s1"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("status", "code"), [(429, "RATE_LIMITED"), (500, "PROVIDER_ERROR")])
async def test_a_refusal_past_the_retries_is_asked_max_retries_plus_one_times_and_recorded_once(
        protocol, status, code, server, make, tmp_path):
    """A 429 or 500 (each with ``retry-after-ms``) on every attempt: the SDK asks ``maxRetries``
    more times (2 here), no more; the session records one ``model.requested`` and one
    ``model.failed`` with the code, the status and ``retryable``, ends its task as failed and
    does not ask again by itself (the answer scripted after them is never asked for)."""
    provider = make(protocol)
    server.push(*[error(protocol, status, "not now") for _ in range(3)], reply(protocol, text="too late"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await _session(sup, "hi")
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    assert len(server.requests) == 3
    assert [e.kind for e in evs if e.kind.startswith("model.")] == ["model.requested", "model.failed"]
    [failed] = [e.event for e in evs if e.kind == "model.failed"]
    assert (failed.code, failed.status, failed.retryable) == (code, status, True)
    assert failed.message == f"provider 'p-{protocol}': HTTP {status}: not now", failed.message
    [finished] = [e.event for e in evs if e.kind == "task.finished"]
    assert finished.status == "failed" and state.status == "idle"
