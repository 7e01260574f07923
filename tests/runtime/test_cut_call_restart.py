"""A restart that finds the last call of an answer cut at the model's output limit or by the
provider's content filter started (a crash between its ``tool.started`` and its result): the call
is not reported interrupted, as a call that may have done something is, but answered again as it
was (it was never run), from the state folded out of the recorded events or read back from a
snapshot of it."""

from __future__ import annotations

import pytest

from events import types as t
from projections.session_state import MAIN_AGENT, snapshot_bytes, state_from_snapshot
from runtime.decide import FinishAgent, FinishTask, InterruptCall, RunCall, cut_by_provider, cut_call_message, next_step

from session_events import Recorder

CALLS = [t.ToolCall("call_a", "get_system_time", "{}"), t.ToolCall("call_b", "write_file", '{"path": "a"}')]


def _started_last(stop_reason: str) -> Recorder:
    """A session whose model answered with two calls (``stop_reason``), the first finished and
    the last started: the restart's state."""
    rec = Recorder("s1")
    rec.add(t.InputSubmitted(content=[t.TextPart("go")]), task_id=None, request_id="r1")
    rec.add(t.TaskStarted(input_request_id="r1"), task_id="task_1")
    rec.add(t.InputPlaced(input_request_id="r1"), task_id="task_1")
    rec.add(t.ModelRequested(provider="p", model="m"), task_id="task_1")
    rec.add(t.ModelResponded(tool_calls=list(CALLS), stop_reason=stop_reason), task_id="task_1")
    rec.add(t.ToolStarted(call_id="call_a", name="get_system_time", arguments="{}"), task_id="task_1")
    rec.add(t.ToolFinished(call_id="call_a", name="get_system_time", status="ok", content=[t.TextPart("now")]),
            task_id="task_1")
    rec.add(t.ToolStarted(call_id="call_b", name="write_file", arguments='{"path": "a"}'), task_id="task_1")
    return rec


@pytest.mark.parametrize(("stop_reason", "told"), [
    ("max_tokens", "the answer was cut at the model's output limit while this write_file call"),
    ("content_filter", "the answer was cut by the provider's content filter while this write_file call"),
    ("refusal", "the provider refused this answer, so its write_file call was not run"),
])
def test_the_cut_call_started_before_a_restart_is_answered_again_not_reported_interrupted(stop_reason, told) -> None:
    folded = _started_last(stop_reason).state
    for state in (folded, state_from_snapshot(snapshot_bytes(folded))):  # (a restart reads either)
        agent = state.agents[MAIN_AGENT]
        assert cut_by_provider(agent, CALLS[1]) and not cut_by_provider(agent, CALLS[0])
        assert next_step(state, MAIN_AGENT) == RunCall(CALLS[1], restart=True)
        assert cut_call_message(agent, CALLS[1]).startswith(told)


def test_every_call_of_a_refused_answer_is_answered_unrun_and_then_its_task_ends() -> None:
    # A refused answer's first call ran, and after its calls the session asked the model again.
    rec = Recorder("s1")
    rec.add(t.InputSubmitted(content=[t.TextPart("go")]), task_id=None, request_id="r1")
    rec.add(t.TaskStarted(input_request_id="r1"), task_id="task_1")
    rec.add(t.InputPlaced(input_request_id="r1"), task_id="task_1")
    rec.add(t.ModelRequested(provider="p", model="m"), task_id="task_1")
    rec.add(t.ModelResponded(tool_calls=list(CALLS), stop_reason="refusal",
                             stop_details={"category": "cyber", "explanation": "declined"}), task_id="task_1")
    for state in (rec.state, state_from_snapshot(snapshot_bytes(rec.state))):
        agent = state.agents[MAIN_AGENT]
        assert cut_by_provider(agent, CALLS[0]) and cut_by_provider(agent, CALLS[1])
        assert next_step(state, MAIN_AGENT) == RunCall(CALLS[0])
    for call in CALLS:
        rec.add(t.ToolStarted(call_id=call.call_id, name=call.name, arguments=call.arguments), task_id="task_1")
        rec.add(t.ToolFinished(call_id=call.call_id, name=call.name, status="error", is_error=True,
                               content=[t.TextPart("INVALID_ARGUMENT: refused")]), task_id="task_1")
    for state in (rec.state, state_from_snapshot(snapshot_bytes(rec.state))):
        assert next_step(state, MAIN_AGENT) == FinishTask(
            "completed", "the provider refused the answer (category cyber): declined")


@pytest.mark.parametrize("stop_reason", ["tool_use", "end_turn", "stop_sequence", None])
def test_a_call_of_an_answer_not_cut_started_before_a_restart_is_interrupted(stop_reason) -> None:
    # (The guard: a call that may have run is never run again unless it is replay-safe.)
    state = _started_last(stop_reason).state
    assert not cut_by_provider(state.agents[MAIN_AGENT], CALLS[1])
    assert next_step(state, MAIN_AGENT) == InterruptCall(CALLS[1])


def test_a_refused_subagent_finishes_with_the_refusals_reason_not_its_cut_text() -> None:
    # Its parent was given the text the classifier had cut off ("Here is how to").
    rec = Recorder("s1")
    rec.add(t.AgentStarted(parent_agent_id=MAIN_AGENT, parent_call_id="call_s", prompt="look"), agent_id="sub_1",
            task_id="task_1")
    rec.add(t.ModelRequested(provider="p", model="m"), agent_id="sub_1", task_id="task_1")
    rec.add(t.ModelResponded(text="Here is how to", stop_reason="refusal",
                             stop_details={"category": "cyber", "explanation": "declined"}),
            agent_id="sub_1", task_id="task_1")
    assert next_step(rec.state, "sub_1") == FinishAgent(
        "completed", "the provider refused the answer (category cyber): declined")
