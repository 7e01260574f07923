"""Answers to ``ask_user`` questions once they are settled (audit C, defect 6).

The rule (docs/decisions.md): an unknown question is 404; the body is then validated against
what the question asked, open or settled alike (422 ``ANSWER_INVALID``); then an answered
question answers a valid repeat with ``duplicate: true`` and the answer that won, and a
cancelled one refuses it with 409 ``QUESTION_SETTLED``.
"""

from __future__ import annotations

import pytest

from conftest import by_kind
from runtime.actor import Abort, Answer
from runtime.errors import AnswerInvalid, QuestionNotFound, QuestionSettled
from runtime.providers.faux import FauxToolCall, FauxTurn

ASK = FauxToolCall("ask_user", {"questions": [{"id": "q", "text": "Which colour?", "options": [
    {"id": "r", "label": "red"}, {"id": "b", "label": "blue"}]}]})
ASK_OPTIONS_ONLY = FauxToolCall("ask_user", {"questions": [{"id": "q", "text": "Go?", "allow_text": False,
                                                            "options": [{"id": "y", "label": "yes"}]}]})

# Bodies refused with ANSWER_INVALID while the question is open (whatever it asked).
INVALID = [
    {"kind": "answer", "text": ""},
    {"kind": "answer", "optionIds": []},
    {"kind": "answer", "optionIds": ["zz"]},
    {"kind": "answer"},
    {"kind": "skip", "text": "why"},
    {"kind": "skip", "optionIds": ["r"]},
    {"kind": "maybe"},
]


async def _asked(rt, sid: str, request_id: str, prompt: str) -> str:
    await rt.submit(sid, request_id, prompt)
    st = await rt.idle(sid)  # (returns when a question waits, too)
    assert st.status == "awaiting_answer"
    (qid,) = st.questions
    return qid


async def test_an_invalid_body_is_refused_before_and_after_the_question_is_answered(runtime_factory, autojump_clock):
    async with runtime_factory(script=[FauxTurn(when="ask me", tool_calls=[ASK])]) as rt:
        sid = await rt.session()
        qid = await _asked(rt, sid, "r1", "please ask me")
        for body in INVALID:
            with pytest.raises(AnswerInvalid):
                await rt.call(sid, Answer(qid, body))
        first = await rt.call(sid, Answer(qid, {"kind": "answer", "optionIds": ["b"]}))
        assert first == {"questionId": qid, "duplicate": False, "status": "answered",
                         "answer": {"kind": "answer", "optionIds": ["b"]}}
        await rt.idle(sid)
        n = len(await rt.events(sid))
        for body in INVALID:  # were 200 {"duplicate": true, ...}: an invalid body passed as a repeat
            with pytest.raises(AnswerInvalid):
                await rt.call(sid, Answer(qid, body))
        # A valid repeat (any valid body) learns the answer that won, and writes nothing.
        for body in ({"kind": "answer", "optionIds": ["b"]}, {"kind": "skip"}, {"kind": "answer", "text": "red"}):
            again = await rt.call(sid, Answer(qid, body))
            assert again == {"questionId": qid, "duplicate": True, "status": "answered",
                             "answer": {"kind": "answer", "optionIds": ["b"]}}
        assert len(await rt.events(sid)) == n
        with pytest.raises(QuestionNotFound):
            await rt.call(sid, Answer("q_nope", {"kind": "skip"}))

    # After a restart (replayed from the log, or from a snapshot) the same rule holds.
    async with runtime_factory() as rt:
        with pytest.raises(AnswerInvalid):
            await rt.call(sid, Answer(qid, {"kind": "answer", "text": ""}))
        assert (await rt.call(sid, Answer(qid, {"kind": "skip"})))["duplicate"] is True


async def test_a_settled_options_only_question_still_refuses_text(rt, autojump_clock):
    rt.faux.script = [FauxTurn(when="ask me", tool_calls=[ASK_OPTIONS_ONLY])]
    sid = await rt.session()
    qid = await _asked(rt, sid, "r1", "please ask me")
    await rt.call(sid, Answer(qid, {"kind": "answer", "optionIds": ["y"]}))
    await rt.idle(sid)
    with pytest.raises(AnswerInvalid, match="options only"):
        await rt.call(sid, Answer(qid, {"kind": "answer", "text": "well"}))


async def test_a_cancelled_question_validates_the_body_first_then_refuses_as_settled(rt, autojump_clock):
    rt.faux.script = [FauxTurn(when="ask me", tool_calls=[ASK])]
    sid = await rt.session()
    qid = await _asked(rt, sid, "r1", "please ask me")
    await rt.call(sid, Abort())
    await rt.idle(sid)
    assert by_kind(await rt.events(sid), "question.cancelled")
    for body in INVALID:  # were 409 QUESTION_SETTLED: the body was never looked at
        with pytest.raises(AnswerInvalid):
            await rt.call(sid, Answer(qid, body))
    with pytest.raises(QuestionSettled, match="cancelled"):
        await rt.call(sid, Answer(qid, {"kind": "skip"}))


@pytest.mark.parametrize("option_ids, questions, want", [
    (["x"], "text only", "unknown option ids: 'x'; these questions have no options (answer with text)"),
    (["x", "y"], "with options", "unknown option ids: 'x', 'y'; the options are 'r', 'b'"),
    ([f"o{i:04d}" for i in range(50)], "with options", " (50 in all); the options are 'r', 'b'"),
])
def test_an_unknown_option_ids_message_ends_on_what_the_questions_offer(option_ids, questions, want):
    # A question of text alone (no options) answered with option ids: the message ended "the
    # options are " and nothing. The count is given where the list of ids was cut, not otherwise.
    from events import types as t
    from runtime.decide import normalize_answer
    qs = [t.Question("q", "Why?")] if questions == "text only" else \
        [t.Question("q", "Which colour?", options=[t.QuestionOption("r", "red"), t.QuestionOption("b", "blue")])]
    with pytest.raises(AnswerInvalid) as err:
        normalize_answer(qs, {"kind": "answer", "optionIds": option_ids})
    message = err.value.message
    if "in all" in want:
        assert message.startswith("unknown option ids: 'o0000', ") and message.endswith(want), message
    else:
        assert message == want, message


def test_the_options_an_unknown_id_is_told_of_are_never_cut_inside_an_id():
    # The options (the model's ids, stored as they were: before a key was configured, one may be
    # a key) were joined and cut to 80 characters, which could leave a key's first characters in
    # a 422 that the answer's scrub of whole keys does not find. Whole ids are listed, then "…".
    from events import types as t
    from events.secrets import Secrets
    from runtime.decide import normalize_answer
    key = "sk-answers-Q7w9ZxK2mP4vL8nB3cR6tY1uA5"
    ids = ["a" * 30, "b" * 30, key, "c"]
    qs = [t.Question("q", "Which?", options=[t.QuestionOption(i, i) for i in ids])]
    with pytest.raises(AnswerInvalid) as err:
        normalize_answer(qs, {"kind": "answer", "optionIds": ["x"]})
    message = Secrets({key: "K"}).scrub_text(err.value.message)
    assert message == f"unknown option ids: 'x'; the options are '{'a' * 30}', '{'b' * 30}'…", message
    # one id longer than the limit is still shown, whole
    qs = [t.Question("q", "Which?", options=[t.QuestionOption("d" * 90 + key, "d"), t.QuestionOption("e", "e")])]
    with pytest.raises(AnswerInvalid) as err:
        normalize_answer(qs, {"kind": "answer", "optionIds": ["x"]})
    assert Secrets({key: "K"}).scrub_text(err.value.message).endswith(f"'{'d' * 90}[redacted K]'…")
