"""The helpers a refusal quotes a value or refused keys with, and a call's question id and status."""

from __future__ import annotations

from events import types as t
from events.reader import StoredEvent
from projections.session_state import SessionState, fold
from runtime.decide import _answered, question_cancelled, question_id, question_status
from runtime.errors import MAX_QUOTED, shortened_json, shortened_names


def test_a_value_is_quoted_as_json_with_its_characters_and_cut_like_any_quote() -> None:
    assert shortened_json(5) == "5"
    assert shortened_json("héllo") == '"héllo"'  # (not escaped to \\u00e9)
    assert shortened_json(None) == "null"
    long = shortened_json("x" * 200)
    assert long == '"' + "x" * (MAX_QUOTED - 1) + "…"


def test_refused_keys_are_named_sorted_quoted_and_cut() -> None:
    assert shortened_names({"zz", "aa"}) == "'aa', 'zz'"
    assert shortened_names(["b"]) == "'b'"
    assert shortened_names(f"k{i:03}" for i in range(100)).endswith("…")
    assert len(shortened_names(f"k{i:03}" for i in range(100))) == MAX_QUOTED + 1


def _event(seq: int, event: t.Event) -> StoredEvent:
    return StoredEvent(seq, 1, "p", "s", seq, "main", None, type(event).__struct_config__.tag, None, event)


def test_a_calls_question_is_found_by_its_id_and_its_settlement_read() -> None:
    asked, cancelled, open_ = (t.ToolCall(call_id=c, name="ask_user", arguments="{}") for c in ("c1", "c2", "c3"))
    question = [t.Question(id="x", text="which?")]
    state = fold(SessionState(session_id="s"), [
        _event(i + 1, e) for i, e in enumerate([
            t.QuestionAsked(question_id=question_id("c1"), questions=question, call_id="c1"),
            t.QuestionAnswered(question_id=question_id("c1"), answer={"x": "yes"}),
            t.QuestionAsked(question_id=question_id("c2"), questions=question, call_id="c2"),
            t.QuestionCancelled(question_id=question_id("c2"), reason="restart"),
            t.QuestionAsked(question_id=question_id("c3"), questions=question, call_id="c3"),
        ])])
    assert question_id("c1") == "q_c1"
    assert [question_status(state, c) for c in (asked, cancelled, open_)] == ["answered", "cancelled", None]
    assert _answered(state, asked) and not _answered(state, cancelled)
    assert question_cancelled(state, cancelled) and not question_cancelled(state, asked)
