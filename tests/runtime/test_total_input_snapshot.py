"""``UsageTotals.total_input_tokens`` in the fold and through a snapshot: summed like the other
counts (an event without it is unknown, counted in ``unreported``), kept by a snapshot, and a
snapshot of the version before it is not used (the session is folded from its log again)."""

from __future__ import annotations

import zstandard

from events import types as t
from events.reader import StoredEvent
from projections.session_state import MAIN_AGENT, MAX_USAGE_TOTAL, SNAPSHOT_VERSION, SessionState, apply
from projections.snapshots import SnapshotStore, encode_snapshot

SID = "ses_total"


def _fold(*events: t._Event) -> SessionState:
    state = SessionState(SID)
    for n, ev in enumerate(events, 1):
        apply(state, StoredEvent(n, 1_000 + n, "prj_1", SID, n, MAIN_AGENT, "tsk_1", t.kind_of(ev), None, ev))
    return state


def _session() -> SessionState:
    requested = t.ModelRequested(provider="claude", model="claude-test")
    return _fold(
        requested,
        t.ModelResponded(text="one", usage=t.Usage(input_tokens=40, cache_read_tokens=600, cache_write_tokens=150,
                                                   total_input_tokens=790)),
        requested,
        t.ModelResponded(text="two", usage=t.Usage(input_tokens=1000, cache_read_tokens=600)),  # (an older row)
        requested,
        t.ModelFailed(code="PROVIDER_ERROR", message="cut", usage=t.Usage(input_tokens=1000, total_input_tokens=1000)),
        requested,
        t.ModelCutOff(usage=t.Usage(input_tokens=5, cache_read_tokens=0, cache_write_tokens=0, total_input_tokens=5)),
    )


def test_the_total_is_summed_with_the_requests_that_did_not_report_it_counted():
    state = _session()
    for usage in (state.usage, state.agents[MAIN_AGENT].usage):
        assert usage.requests == 4
        assert (usage.input_tokens, usage.total_input_tokens) == (2045, 1795)
        assert usage.unreported["total_input_tokens"] == 1
        assert "input_tokens" not in usage.unreported


def test_the_total_survives_a_snapshot_and_an_older_version_is_not_used(tmp_path):
    state = _session()
    store = SnapshotStore.open(tmp_path)
    try:
        store.save(state)
        again = store.load(SID)
        assert again is not None and again == state
        assert (again.usage.total_input_tokens, again.usage.unreported["total_input_tokens"]) == (1795, 1)
        assert again.agents[MAIN_AGENT].usage.total_input_tokens == 1795
        # A snapshot of the version before: not read (its totals would lack the field); the
        # session is folded from its log instead.
        store.conn.execute("UPDATE snapshots SET version = ?, state = ? WHERE session_id = ?",
                           (SNAPSHOT_VERSION - 1, encode_snapshot(state, zstandard.ZstdCompressor()), SID))
        assert store.load(SID) is None
    finally:
        store.close()


def test_a_total_stops_at_the_largest_count_and_the_snapshot_still_saves(tmp_path):
    # (each count a provider reports is at most 2**63 - 1; their sum is held to it too: a sum past
    # 2**64 - 1 could not be written to a snapshot, and the session's actor failed on it)
    top = MAX_USAGE_TOTAL
    requested = t.ModelRequested(provider="faux", model="faux-1")
    at_the_limit = _fold(requested, t.ModelResponded(text="a", usage=t.Usage(input_tokens=top - 1)),
                         requested, t.ModelResponded(text="b", usage=t.Usage(input_tokens=1)))
    assert at_the_limit.usage.input_tokens == top and "input_tokens" not in at_the_limit.usage.unreported
    events = [e for _ in range(3) for e in (requested, t.ModelResponded(text="c", usage=t.Usage(input_tokens=top,
                                                                                            output_tokens=1)))]
    past = _fold(*events)
    for usage in (past.usage, past.agents[MAIN_AGENT].usage):
        assert (usage.requests, usage.input_tokens, usage.output_tokens) == (3, top, 3)
        assert usage.unreported["input_tokens"] == 2  # (the total stays a lower bound, said so)
    store = SnapshotStore.open(tmp_path)
    try:
        store.save(past)
        assert store.load(SID) == past
    finally:
        store.close()
