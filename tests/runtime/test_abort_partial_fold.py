"""An aborted or failed answer's text in the fold and in the abort's decision: ``model.failed``
with ``partial_text`` adds an assistant item marked ``aborted`` (code ``ABORTED``) or ``failed``
(any other code) that the Working Context keeps (the next request sends it); the abort keeps the
text only when some of it is visible; a log without the field folds as before."""

from __future__ import annotations

from events import types as t
from events.reader import StoredEvent
from projections.session_state import (
    MAIN_AGENT,
    SessionState,
    apply,
    snapshot_bytes,
    state_from_snapshot,
    working_context,
)
from runtime.decide import CutRequest, abort_events

SID = "ses_abort"


def _fold(*events: t._Event) -> SessionState:
    state = SessionState(SID)
    for n, ev in enumerate(events, 1):
        request_id = "r1" if isinstance(ev, t.InputSubmitted) else None
        apply(state, StoredEvent(n, 1_000 + n, "prj_1", SID, n, MAIN_AGENT, "tsk_1", t.kind_of(ev), request_id, ev))
    return state


ASKED = (
    t.SessionCreated(),
    t.InputSubmitted(content=[t.TextPart("tell me about quokkas")]),
    t.TaskStarted(input_request_id="r1"),
    t.InputPlaced(input_request_id="r1"),
    t.ModelRequested(provider="claude", model="claude-test"),
)


def test_an_aborted_request_keeps_its_text_as_an_assistant_item_in_the_working_context():
    state = _fold(*ASKED, t.ModelFailed(code="ABORTED", message="aborted by the user", partial_text="Quokkas are"))
    a = state.agents[MAIN_AGENT]
    kept = a.items[-1]
    assert (kept.id, kept.role, kept.text, kept.status, kept.seq) == ("c6", "assistant", "Quokkas are", "aborted", 6)
    assert [(it.role, it.text) for it in working_context(a)] == [("user", "tell me about quokkas"),
                                                                 ("assistant", "Quokkas are")]
    assert a.open_request_seq is None and a.last_error == "ABORTED: aborted by the user"
    assert state.usage.requests == 0  # (no usage recorded: none counted, as before)
    assert state_from_snapshot(snapshot_bytes(state)) == state


def test_a_request_that_failed_while_it_streamed_keeps_its_text_marked_failed():
    state = _fold(*ASKED, t.ModelFailed(code="OVERLOADED", message="Overloaded", retryable=True,
                                        usage=t.Usage(input_tokens=50), partial_text="Quokkas are"))
    a = state.agents[MAIN_AGENT]
    kept = a.items[-1]
    assert (kept.id, kept.role, kept.text, kept.status, kept.seq) == ("c6", "assistant", "Quokkas are", "failed", 6)
    assert [(it.role, it.text) for it in working_context(a)] == [("user", "tell me about quokkas"),
                                                                 ("assistant", "Quokkas are")]
    assert a.open_request_seq is None and a.last_error == "OVERLOADED: Overloaded"
    assert state.usage.input_tokens == 50  # (its usage counts, as before)
    assert state_from_snapshot(snapshot_bytes(state)) == state


def test_a_failed_request_without_partial_text_adds_no_item():
    for failed in (t.ModelFailed(code="ABORTED", message="aborted by the user"),
                   t.ModelFailed(code="RATE_LIMITED", message="slow down")):
        state = _fold(*ASKED, failed)
        assert [it.role for it in state.agents[MAIN_AGENT].items] == ["user"]


def test_the_abort_keeps_only_text_that_is_visible():
    state = _fold(*ASKED)

    def failed(cut: dict[str, CutRequest]) -> t.ModelFailed:
        (ev,) = [s.event for s in abort_events(state, cut=cut) if isinstance(s.event, t.ModelFailed)]
        return ev

    assert failed({MAIN_AGENT: CutRequest(text="Quokkas are ")}).partial_text == "Quokkas are "  # (as streamed, spaces kept)
    assert failed({MAIN_AGENT: CutRequest(text=" \n\t")}).partial_text == ""
    assert failed({}).partial_text == ""
    assert failed({"sub_other": CutRequest(text="not this agent's")}).partial_text == ""


def test_the_abort_records_the_usage_and_the_text_of_its_own_agent_together():
    state = _fold(*ASKED)
    usage = t.Usage(input_tokens=12, output_tokens=3)

    def failed(cut: dict[str, CutRequest]) -> t.ModelFailed:
        (ev,) = [s.event for s in abort_events(state, cut=cut) if isinstance(s.event, t.ModelFailed)]
        return ev

    ev = failed({MAIN_AGENT: CutRequest(usage, "Quokkas are"), "sub_other": CutRequest(t.Usage(input_tokens=99), "no")})
    assert (ev.usage, ev.partial_text) == (usage, "Quokkas are")
    ev = failed({MAIN_AGENT: CutRequest(usage=usage)})  # (reported usage, nothing visible yet)
    assert (ev.usage, ev.partial_text) == (usage, "")
    ev = failed({})
    assert (ev.usage, ev.partial_text) == (None, "")
