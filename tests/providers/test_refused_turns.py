"""An Anthropic answer its streaming classifiers refused (``stop_reason: "refusal"``), through a
real session against the loopback server: the refusal's ``stop_details`` are kept with the
answer's result and shown to a client (the view's item, the task's end), and every later request
leaves the refused turn out (its text, thinking, calls and their results), as Anthropic asks: a
request that carries it again is refused again. The user's input before it stays; the log and the
Full Context keep the answer as it came."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle
from runtime.views import session_view

from .scripts import reply
from .servers import anthropic as an
from .servers.base import Received, Reply
from .test_actor import events_of, one_input, runtime

REFUSED_TEXT = "Here is how one would begin to"
EXPLANATION = "This request was declined because it could enable cyber harm."
DETAILS = {"type": "refusal", "category": "cyber", "explanation": EXPLANATION}


def refusal(text: str = REFUSED_TEXT, *, details: Any = DETAILS, thinking: list[str] = (),
            calls: list[tuple[str, str, Any]] = ()) -> Reply:
    """An answer the classifiers stopped: ``stop_reason: refusal`` with ``stop_details`` on the
    ``message_delta`` (``details=None``: none sent)."""
    scripted = an.message_stream(text=text, thinking=thinking, calls=calls, stop_reason="refusal")
    delta = [data for name, data in scripted.events if name == "message_delta"][0]["delta"]
    if details is not None:
        delta["stop_details"] = details
    return scripted


def _carries_refused_turn(body: Any) -> bool:
    return any(m["role"] == "assistant" and REFUSED_TEXT in json.dumps(m) for m in body["messages"])


def refusing_server(first: Reply) -> Any:
    """Answers the first request with ``first``; a later one with a refusal again when it carries
    the refused turn (as the API does), else with ``Done.``."""

    def answer(received: Received) -> Reply:
        if len(received_bodies) == 0 or _carries_refused_turn(received.body):
            received_bodies.append(received.body)
            return refusal(details=None) if received_bodies[1:] else first
        received_bodies.append(received.body)
        return reply("anthropic", text="Done.")

    received_bodies: list[Any] = []
    return answer


async def _two_inputs(tmp_path: Any, provider: Any, *, restart: bool, snapshot_every: int) -> tuple[Any, list, str]:
    """A session given ``req1``, then (after a restart of the runtime when ``restart``) ``req2``."""
    data = tmp_path / "data"
    async with runtime(data, provider, snapshot_every=snapshot_every) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("first question")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        if not restart:
            await sup.call(sid, Submit("req2", [t.TextPart("something else")]))
            with trio.fail_after(30):
                await sup.call(sid, WaitIdle())
            return await sup.call(sid, GetState()), await events_of(sup, sid), sid
    async with runtime(data, provider, snapshot_every=snapshot_every) as sup:
        await sup.call(sid, Submit("req2", [t.TextPart("something else")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        return await sup.call(sid, GetState()), await events_of(sup, sid), sid


@pytest.mark.parametrize("restart,snapshot_every", [(False, 500), (True, 500), (True, 1)],
                         ids=["live", "restart-folded", "restart-snapshot"])
async def test_after_a_refusal_the_next_request_leaves_the_refused_turn_out(
        restart, snapshot_every, server, make, tmp_path):
    # The refused turn went back with every later request, and the server refused each again.
    server.answer = refusing_server(refusal(thinking=["Let me ", "think."]))
    state, evs, _sid = await _two_inputs(tmp_path, make("anthropic"), restart=restart, snapshot_every=snapshot_every)
    first, second = [e.event for e in evs if e.kind == "model.responded"]
    assert (first.stop_reason, first.text) == ("refusal", REFUSED_TEXT)
    assert (second.stop_reason, second.text) == ("end_turn", "Done.")
    assert second.diagnostics["refused_turns"] == 1
    # The user's input stays: both inputs go as one user message; nothing of the answer goes.
    body = server.bodies[-1]
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert [b["text"] for b in body["messages"][0]["content"]] == ["first question", "something else"]
    assert "think." not in json.dumps(body)
    # The log and the Full Context keep the answer as it came, marked refused.
    items = state.agents["main"].items
    assert [(it.role, it.text, it.status) for it in items] == [
        ("user", "first question", None), ("assistant", REFUSED_TEXT, "refused"),
        ("user", "something else", None), ("assistant", "Done.", None)]
    assert items[1].reasoning_blocks and items[1].reasoning_blocks[0]["block"]["thinking"] == "Let me think."


@pytest.mark.parametrize("restart,snapshot_every", [(False, 500), (True, 1)], ids=["live", "restart-snapshot"])
async def test_a_refused_answer_runs_none_of_its_calls_and_ends_its_task(
        restart, snapshot_every, server, make, tmp_path):
    # Before, its first call ran (it was whole) and the session asked again at once, with the
    # refused turn left out: the same request the classifier had just refused, and each refusal
    # with a call asked again. A call of it that ran did so behind the model's back (its result
    # is left out with the turn).
    calls = [("call_a", "get_system_time", "{}"), ("call_b", "get_system_time", "{")]
    server.answer = refusing_server(refusal(calls=calls))
    state, evs, _sid = await _two_inputs(tmp_path, make("anthropic"), restart=restart, snapshot_every=snapshot_every)
    finished = {e.event.call_id: e.event for e in evs if e.kind == "tool.finished"}
    for call_id in ("call_a", "call_b"):
        got = finished[call_id]
        assert (got.status, got.is_error, got.error_code) == ("error", True, "INVALID_ARGUMENT")
        assert "".join(p.text for p in got.content) == (
            "INVALID_ARGUMENT: the provider refused this answer, so its get_system_time call was not run")
    # One request for the first input: its task ended on the refusal, with its reason.
    responded = [e.event for e in evs if e.kind == "model.responded"]
    assert [r.stop_reason for r in responded] == ["refusal", "end_turn"]
    first_task = [e.event for e in evs if e.kind == "task.finished"][0]
    assert first_task.status == "completed"
    assert first_task.reason == f"the provider refused the answer (category cyber): {EXPLANATION}"
    # The next input's request carries neither the calls nor their results.
    assert len(server.bodies) == 2 and not _carries_refused_turn(server.bodies[1])
    assert [b["type"] for m in server.bodies[1]["messages"] for b in m["content"]] == ["text", "text"]
    assert responded[1].diagnostics["refused_turns"] == 1
    assert [it.status for it in state.agents["main"].items if it.role == "tool_call"] == ["refused", "refused"]


@pytest.mark.parametrize("text", [REFUSED_TEXT, ""], ids=["with-text", "without-text"])
async def test_a_refusals_stop_details_are_kept_and_shown(text, server, make, tmp_path):
    # stop_details were not read: the log, the view and the task's end said nothing of why.
    server.push(refusal(text))
    state, evs = await one_input(tmp_path / "data", make("anthropic"), "first question")
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_details == DETAILS
    ended = [e.event for e in evs if e.kind == "task.finished"][0]
    assert (ended.status, ended.reason) == ("completed", f"the provider refused the answer (category cyber): {EXPLANATION}")
    view = session_view(state)
    shown = [v for v in view["items"] if v.get("refused")]
    if text:
        assert [(v["role"], v["status"], v["stopDetails"]) for v in shown] == [("assistant", "refused", DETAILS)]
    else:  # (no item: the task's end says why)
        assert shown == []


async def test_stop_details_are_kept_bounded_and_only_as_text(server, make, tmp_path):
    long = "x" * 5000
    server.push(refusal(details={"type": "refusal", "category": 7, "explanation": long}))
    _state, evs = await one_input(tmp_path / "data", make("anthropic"), "first question")
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_details == {"type": "refusal", "explanation": "x" * 1999 + "\u2026"}
    ended = [e.event for e in evs if e.kind == "task.finished"][0]
    assert ended.reason.startswith("the provider refused the answer: xxx")
