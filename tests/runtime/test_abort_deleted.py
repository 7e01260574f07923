"""What an abort records for what is queued: a deletion's abort (``deleted=True``) withdraws the
inputs ``session_deleted`` and cancels a question "session deleted"; any other abort, whatever
its reason's text, ``abort`` and "run aborted"."""

from __future__ import annotations

from events import types as t
from events.reader import StoredEvent
from projections.session_state import MAIN_AGENT, SessionState, apply
from runtime.decide import SESSION_DELETED, abort_events

SID = "ses_abort_deleted"


def _fold(*events: tuple[t._Event, str | None]) -> SessionState:
    state = SessionState(SID)
    for n, (ev, request_id) in enumerate(events, 1):
        apply(state, StoredEvent(n, 1_000 + n, "prj_1", SID, n, MAIN_AGENT, "tsk_1", t.kind_of(ev), request_id, ev))
    return state


QUEUED = _fold(
    (t.SessionCreated(), None),
    (t.InputSubmitted(content=[t.TextPart("tell me about quokkas")]), "r1"),
    (t.TaskStarted(input_request_id="r1"), None),
    (t.InputPlaced(input_request_id="r1"), None),
    (t.ModelRequested(provider="claude", model="claude-test"), None),
    (t.InputSubmitted(content=[t.TextPart("and wombats")]), "r2"),
)


def _withdrawn(events: list) -> list[tuple[str, str]]:
    return [(s.event.input_request_id, s.event.reason) for s in events if isinstance(s.event, t.InputWithdrawn)]


def test_a_deletions_abort_withdraws_the_queue_as_session_deleted() -> None:
    assert _withdrawn(abort_events(QUEUED, SESSION_DELETED, deleted=True)) == [("r2", "session_deleted")]


def test_an_abort_whose_reason_reads_as_a_deletions_is_an_abort() -> None:
    # (what is recorded is chosen by the flag, not by comparing the reason's text)
    assert _withdrawn(abort_events(QUEUED, SESSION_DELETED)) == [("r2", "abort")]
    assert _withdrawn(abort_events(QUEUED, "user")) == [("r2", "abort")]
