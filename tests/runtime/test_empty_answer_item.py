"""The item an answer with neither text nor tool calls leaves (status ``empty``, its stop reason
and, refused, its ``stop_details``), folded from the recorded events and read back from a
snapshot alike; its view; and a request that leaves it out."""

from __future__ import annotations

import trio

from events import types as t
from projections.session_state import EMPTY_ANSWER, MAIN_AGENT, snapshot_bytes, state_from_snapshot, working_context
from runtime.decide import FinishTask, next_step
from runtime.providers.base import ModelRequest
from runtime.providers.compile import prepare
from runtime.views import item_view

from session_events import Recorder

REASONING = [{"protocol": "anthropic-messages", "block": {"type": "thinking", "thinking": "hm", "signature": "s"}}]
DETAILS = {"type": "refusal", "category": "cyber", "explanation": "declined"}


def _recorded() -> Recorder:
    rec = Recorder("s1")
    for n, answer in enumerate((t.ModelResponded(text="first", stop_reason="end_turn"),
                                t.ModelResponded(reasoning_blocks=REASONING, stop_reason="end_turn"),
                                t.ModelResponded(stop_reason="refusal", stop_details=DETAILS))):
        rid, task = f"r{n}", f"task_{n}"
        rec.add(t.InputSubmitted(content=[t.TextPart(f"input {n}")]), task_id=None, request_id=rid)
        rec.add(t.TaskStarted(input_request_id=rid), task_id=task)
        rec.add(t.InputPlaced(input_request_id=rid), task_id=task)
        rec.add(t.ModelRequested(provider="p", model="m"), task_id=task)
        rec.add(answer, task_id=task)
    return rec


def test_an_empty_answer_has_an_item_folded_and_from_a_snapshot() -> None:
    rec = _recorded()
    responded = [se.seq for se in rec.events if se.kind == "model.responded"]
    for state in (rec.state, state_from_snapshot(snapshot_bytes(rec.state))):
        items = state.agents[MAIN_AGENT].items
        assert [(it.role, it.text, it.status, it.stop_reason) for it in items] == [
            ("user", "input 0", None, None), ("assistant", "first", None, "end_turn"),
            ("user", "input 1", None, None), ("assistant", "", EMPTY_ANSWER, "end_turn"),
            ("user", "input 2", None, None), ("assistant", "", EMPTY_ANSWER, "refusal")]
        assert [it.id for it in items if it.role == "assistant"] == [f"c{s}" for s in responded]
        assert items[3].reasoning_blocks == REASONING and items[5].stop_details == DETAILS
        views = [item_view(it, {}, None, frozenset()) for it in items]
        assert {k: views[3][k] for k in ("text", "status", "stopReason")} == {
            "text": "", "status": "empty", "stopReason": "end_turn"}
        assert (views[5]["status"], views[5]["stopReason"], views[5]["stopDetails"]) == ("empty", "refusal", DETAILS)
        assert "refused" not in views[5] and "stopReason" not in views[1]
        # The task ends with the refusal's reason; an empty answer's is no text of its own.
        assert next_step(state, MAIN_AGENT) == FinishTask(
            "completed", "the provider refused the answer (category cyber): declined")


def test_a_request_leaves_an_empty_answer_out() -> None:
    items = working_context(_recorded().state.agents[MAIN_AGENT])
    assert len(items) == 6
    request = ModelRequest("m", ["system"], items, [])
    compiled = trio.run(lambda: prepare(request, load_image=None, images=False))
    assert [(e.kind, e.text) for e in compiled.entries] == [
        ("system", "system"), ("user", "input 0"), ("assistant", "first"), ("user", "input 1"), ("user", "input 2")]
    assert compiled.diagnostics == {"empty_answers": 2}
