"""``model.cut_off`` in the fold: it counts in the session's usage and leaves the model request
open (the next start asks it again); a log without it folds as before."""

from __future__ import annotations

from events import types as t
from events.reader import StoredEvent
from projections.session_state import MAIN_AGENT, SessionState, apply

SID = "ses_cut"


def _fold(*events: t._Event) -> SessionState:
    state = SessionState(SID)
    for n, ev in enumerate(events, 1):
        apply(state, StoredEvent(n, 1_000 + n, "prj_1", SID, n, MAIN_AGENT, "tsk_1", t.kind_of(ev), None, ev))
    return state


def test_a_cut_off_counts_its_usage_and_leaves_the_request_open():
    requested = t.ModelRequested(provider="claude", model="claude-test")
    before = _fold(requested)
    after = _fold(requested, t.ModelCutOff(usage=t.Usage(input_tokens=321)))
    a = after.agents[MAIN_AGENT]
    assert (a.open_request_seq, a.request_attempt, a.requests) == (1, 1, 1)
    assert a.open_request_seq == before.agents[MAIN_AGENT].open_request_seq
    assert (after.usage.requests, after.usage.input_tokens) == (1, 321)
    assert after.usage.unreported == {"output_tokens": 1, "cache_read_tokens": 1, "cache_write_tokens": 1,
                                      "reasoning_tokens": 1, "total_input_tokens": 1}
    # The request asked again and answered: two requests paid for, one answer in the context.
    again = _fold(requested, t.ModelCutOff(usage=t.Usage(input_tokens=321)),
                  t.ModelRequested(provider="claude", model="claude-test", attempt=2),
                  t.ModelResponded(text="hi", usage=t.Usage(input_tokens=400, output_tokens=5)))
    a = again.agents[MAIN_AGENT]
    assert a.open_request_seq is None and [i.text for i in a.items] == ["hi"]
    assert (again.usage.requests, again.usage.input_tokens, again.usage.output_tokens) == (2, 721, 5)


def test_a_log_without_a_cut_off_folds_as_before():
    state = _fold(t.ModelRequested(provider="claude", model="claude-test"))
    assert state.agents[MAIN_AGENT].open_request_seq == 1 and state.usage.requests == 0
