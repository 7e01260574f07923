"""A restart that finds the last call of an answer cut at the model's output limit started (a
crash between its ``tool.started`` and its result): the call is not reported interrupted, as a
call that may have done something is, but answered again as it was (it was never run), from
the state folded out of the recorded events."""

from __future__ import annotations

import pytest

from events import types as t
from projections.session_state import MAIN_AGENT
from runtime.decide import InterruptCall, RunCall, cut_at_output_limit, next_step

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


def test_the_cut_call_started_before_a_restart_is_answered_again_not_reported_interrupted() -> None:
    state = _started_last("max_tokens").state
    agent = state.agents[MAIN_AGENT]
    assert cut_at_output_limit(agent, CALLS[1]) and not cut_at_output_limit(agent, CALLS[0])
    assert next_step(state, MAIN_AGENT) == RunCall(CALLS[1], restart=True)


@pytest.mark.parametrize("stop_reason", ["tool_use", "end_turn", None])
def test_a_call_of_an_answer_not_cut_started_before_a_restart_is_interrupted(stop_reason) -> None:
    # (The guard: a call that may have run is never run again unless it is replay-safe.)
    state = _started_last(stop_reason).state
    assert not cut_at_output_limit(state.agents[MAIN_AGENT], CALLS[1])
    assert next_step(state, MAIN_AGENT) == InterruptCall(CALLS[1])
