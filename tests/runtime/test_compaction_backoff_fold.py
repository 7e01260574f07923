"""The back-off after an automatic compaction that failed (``runtime.working_context.backing_off``)
reads the answers since the failure from the folded state (``CompactionFailure.answers``), as the
reducer counts them: the count is the model answers the agent's items show after the failure,
folded at once, one event at a time, or resumed from a snapshot at any point."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events import types as t
from projections.session_state import AgentState, SessionState, fold, snapshot_bytes, state_from_snapshot
from runtime.working_context import AUTO_COMPACTION_RETRY_AFTER, backing_off

from session_events import Recorder, assert_usage_summed, session_events


def _answers_shown(agent: AgentState) -> int | None:
    """The model answers (items of one response share a seq) among ``agent``'s items after its
    last failed compaction."""
    failed = agent.compaction_failure
    if failed is None:
        return None
    return len({it.seq for it in agent.items if it.seq > failed.seq and it.role in ("assistant", "tool_call")})


@settings(max_examples=150)
@given(data=st.data())
def test_the_answers_since_a_failed_compaction_are_counted_as_the_state_folds(data):
    rec = session_events(data, max_steps=60)
    cut = data.draw(st.integers(0, len(rec.events)))
    resumed = fold(state_from_snapshot(snapshot_bytes(fold(SessionState("s1"), rec.events[:cut]))), rec.events[cut:])
    stepwise = SessionState("s1")
    for se in rec.events:
        fold(stepwise, [se])
        for agent in stepwise.agents.values():
            failed = agent.compaction_failure
            assert (None if failed is None else failed.answers) == _answers_shown(agent)
    assert resumed == rec.state == stepwise
    assert_usage_summed(resumed, rec.events)


def test_a_task_backs_off_for_as_many_answers_across_a_snapshot():
    rec = Recorder("s1")
    rec.add(t.SessionCreated(model="faux/faux-1"))
    rec.add(t.ContextCompactionFailed(code="COMPACTION_FAILED", message="busy", trigger="auto"), task_id="task_1")
    seen = []
    for n in range(AUTO_COMPACTION_RETRY_AFTER + 1):
        state = state_from_snapshot(snapshot_bytes(rec.state))
        seen.append((backing_off(state.agents["main"], "task_1"), backing_off(rec.state.agents["main"], "task_1")))
        calls = [t.ToolCall(f"c{n}_{i}", "get_system_time", "{}") for i in range(2)]
        rec.add(t.ModelResponded(text="" if n % 2 else "on it", tool_calls=calls if n % 2 else []), task_id="task_1")
    assert seen == [(True, True)] * AUTO_COMPACTION_RETRY_AFTER + [(False, False)]
    assert not backing_off(rec.state.agents["main"], "task_2")  # (another task tries at once)
