"""What each agent's open model request has streamed so far (runtime.streamed): the partial
answers a stream joining mid-answer gets first."""

from __future__ import annotations

import json

import msgspec

from events.reader import StoredEvent
from events.types import ModelFailed, ModelRequested, ModelResponded, RunAborted, TaskFinished
from runtime.streamed import StreamedSoFar


def ev(seq: int, event: msgspec.Struct, session: str = "s1", agent: str | None = "main", project: str = "p1") -> StoredEvent:
    kind = type(event).__struct_config__.tag
    return StoredEvent(seq, 0, project, session, seq, agent, None, kind, None, event)  # type: ignore[arg-type]


def requested(seq: int, **kw: str) -> StoredEvent:
    return ev(seq, ModelRequested(provider="faux", model="faux-1"), **kw)


def partials(s: StreamedSoFar, session: str | None = None, project: str | None = None) -> list[tuple[str, str, str, str]]:
    out = []
    for data in s.frames_for(session, project):
        d = json.loads(data)
        out.append((d["session_id"], d["agent_id"], d["kind"], d["text"]))
    return out


def test_an_open_request_offers_its_reasoning_then_its_text_and_closing_it_forgets_both() -> None:
    s = StreamedSoFar()
    s.note_events([requested(1)])
    assert partials(s) == [("s1", "main", "text", "")]  # open, nothing streamed yet: said so
    for kind, text in (("text", "Hello "), ("reasoning", "Hm. "), ("text", "world")):
        s.note_delta("s1", "main", kind, text, in_order=True, committed=1)
    assert partials(s) == [("s1", "main", "reasoning", "Hm. "), ("s1", "main", "text", "Hello world")]
    for closing in (ModelResponded(text="Hello world"), ModelFailed(code="X", message="m"), TaskFinished()):
        s.note_events([requested(2)])
        s.note_delta("s1", "main", "text", "again", in_order=True, committed=2)
        assert partials(s) == [("s1", "main", "text", "again")]  # a new request starts afresh
        s.note_events([ev(3, closing)])
        assert partials(s) == [] and len(s) == 0


def test_filters_and_an_abort_closing_every_agent_of_its_session() -> None:
    s = StreamedSoFar()
    s.note_events([requested(1), requested(2, agent="sub1"), requested(3, session="s2", project="p2")])
    for sid, agent in (("s1", "main"), ("s1", "sub1"), ("s2", "main")):
        s.note_delta(sid, agent, "text", f"{sid}/{agent}", in_order=True, committed=3)
    assert [p[3] for p in partials(s, session="s1")] == ["s1/main", "s1/sub1"]
    assert [p[3] for p in partials(s, project="p2")] == ["s2/main"]
    assert [p[3] for p in partials(s, session="s1", project="p2")] == []
    assert len(partials(s)) == 3
    s.note_events([ev(4, RunAborted(), agent=None)])
    assert [p[3] for p in partials(s)] == ["s2/main"]


def test_a_delta_offered_ahead_of_its_request_leaves_that_request_without_a_partial() -> None:
    # The bus could not offer what was committed before the delta (its task was reading the log):
    # the delta went out first, and its model.requested (seq <= 7) comes after it. Offering a
    # partial without that delta would show the answer with a hole; none is offered until a
    # request committed after the delta.
    s = StreamedSoFar()
    s.note_delta("s1", "main", "text", "early", in_order=False, committed=7)
    s.note_events([requested(6)])
    s.note_delta("s1", "main", "text", " later", in_order=True, committed=7)
    assert partials(s) == []
    s.note_events([requested(8)])
    s.note_delta("s1", "main", "text", "fresh", in_order=True, committed=8)
    assert partials(s) == [("s1", "main", "text", "fresh")]
    # ... and one seen out of order while its request is open spoils that request only
    s.note_delta("s1", "main", "text", "lost", in_order=False, committed=8)
    assert partials(s) == []
    s.note_events([ev(9, ModelResponded(text="fresh"))])
    s.note_events([requested(10)])
    assert partials(s) == [("s1", "main", "text", "")]


def test_partials_are_kept_up_to_exactly_the_limit() -> None:
    s = StreamedSoFar(max_chars=1000)
    s.note_events([requested(1), requested(2, agent="sub1")])
    for agent in ("main", "sub1"):
        for _ in range(999):
            s.note_delta("s1", agent, "text", "x", in_order=True, committed=2)
    s.note_delta("s1", "main", "reasoning", "y", in_order=True, committed=2)  # exactly 1000
    s.note_delta("s1", "sub1", "text", "yz", in_order=True, committed=2)  # one past
    assert partials(s) == [("s1", "main", "reasoning", "y"), ("s1", "main", "text", "x" * 999)]
    s.note_delta("s1", "main", "text", "z", in_order=True, committed=2)  # now past it too
    assert partials(s) == []


def test_many_small_deltas_are_kept_in_few_strings_in_order() -> None:
    s = StreamedSoFar()
    s.note_events([requested(1)])
    pieces = [f"{i}," for i in range(20_000)] + ["x" * 5000, "y", "z" * 3]
    for piece in pieces:
        s.note_delta("s1", "main", "text", piece, in_order=True, committed=1)
    assert partials(s) == [("s1", "main", "text", "".join(pieces))]
    assert len(s._open[("s1", "main")].text) <= 20  # O(log n) strings, not one per delta
