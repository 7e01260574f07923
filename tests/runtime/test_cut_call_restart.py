"""A restart that finds the last call of an answer cut at the model's output limit or by the
provider's content filter started (a crash between its ``tool.started`` and its result): the call
is not reported interrupted, as a call that may have done something is, but answered again as it
was (it was never run), from the state folded out of the recorded events or read back from a
snapshot of it."""

from __future__ import annotations

import pytest

from events import types as t
from projections.session_state import MAIN_AGENT, snapshot_bytes, state_from_snapshot
from runtime.decide import InterruptCall, RunCall, cut_by_provider, cut_call_message, next_step

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


@pytest.mark.parametrize(("stop_reason", "cut_by"), [
    ("max_tokens", "at the model's output limit"),
    ("content_filter", "by the provider's content filter"),
    ("refusal", "by the provider's content filter (stop reason refusal)"),
])
def test_the_cut_call_started_before_a_restart_is_answered_again_not_reported_interrupted(stop_reason, cut_by) -> None:
    folded = _started_last(stop_reason).state
    for state in (folded, state_from_snapshot(snapshot_bytes(folded))):  # (a restart reads either)
        agent = state.agents[MAIN_AGENT]
        assert cut_by_provider(agent, CALLS[1]) and not cut_by_provider(agent, CALLS[0])
        assert next_step(state, MAIN_AGENT) == RunCall(CALLS[1], restart=True)
        assert cut_call_message(agent, CALLS[1]).startswith(f"the answer was cut {cut_by} while this write_file call")


@pytest.mark.parametrize("stop_reason", ["tool_use", "end_turn", "stop_sequence", None])
def test_a_call_of_an_answer_not_cut_started_before_a_restart_is_interrupted(stop_reason) -> None:
    # (The guard: a call that may have run is never run again unless it is replay-safe.)
    state = _started_last(stop_reason).state
    assert not cut_by_provider(state.agents[MAIN_AGENT], CALLS[1])
    assert next_step(state, MAIN_AGENT) == InterruptCall(CALLS[1])
