"""F-HAR-1 over HTTP: what ``todo`` and ``ask_user`` accept, at the edges of their limits. A
refused call is an error result the model sees (``INVALID_ARGUMENT``, naming the problem),
and changes nothing: no todo list, no question."""

from __future__ import annotations

import pytest

from .conftest import wait_until


def todo(*items: dict) -> tuple[str, dict]:
    return "todo", {"items": list(items)}


def ask(question_changes: dict | None = None, option: dict | None = None) -> tuple[str, dict]:
    q = {"id": "q1", "text": "Which one?", "options": [option or {"id": "a", "label": "A"}]}
    q.update(question_changes or {})
    return "ask_user", {"questions": [q]}


ACCEPTED = {
    "todo-edges": todo({"id": "i" * 200, "text": "t" * 2000, "status": "done"}),
    "ask-edges": ask({"id": "Q" * 200}, {"id": "o" * 200, "label": "L" * 500}),
}
REFUSED = {
    "todo-blank-id": (todo({"id": " ", "text": "x"}), "id must be 1 to 200 characters"),
    "todo-long-id": (todo({"id": "i" * 201, "text": "x"}), "id must be 1 to 200 characters"),
    "todo-blank-text": (todo({"id": "1", "text": ""}), "text must be 1 to 2000 characters"),
    "todo-long-text": (todo({"id": "1", "text": "t" * 2001}), "text must be 1 to 2000 characters"),
    "todo-unknown-field": (todo({"id": "1", "text": "x", "state": "done"}), "unknown field(s) state"),
    "ask-long-question-id": (ask({"id": "Q" * 201}), "question id must be 1 to 200"),
    "ask-blank-option-id": (ask(option={"id": "", "label": "A"}), "option id must be 1 to 200"),
    "ask-long-label": (ask(option={"id": "a", "label": "L" * 501}), "label of 1 to 500 characters"),
    "ask-blank-label": (ask(option={"id": "a", "label": "  "}), "label of 1 to 500 characters"),
    "ask-blank-text": (ask({"text": "   "}), "question 'q1': text is blank"),
    # a long question id is shortened in every refusal of the tool, as in the others
    "ask-long-id-blank-label": (ask({"id": "Q" * 200}, {"id": "a", "label": " "}),
                                "question '" + "Q" * 79 + "…: option 'a' needs a label"),
    "ask-long-id-no-options": (ask({"id": "Q" * 200, "options": [], "allow_text": False}),
                               "question '" + "Q" * 79 + "… has no options and allows no text"),
    "ask-long-id-blank-option-id": (ask({"id": "Q" * 200}, {"id": " ", "label": "A"}),
                                    "question '" + "Q" * 79 + "…: each option id must be 1 to 200"),
    "ask-unknown-question-field": (ask({"multiple": True}), "unknown field(s) multiple"),
    "ask-unknown-option-field": (ask(option={"id": "a", "label": "A", "hint": "h"}), "unknown field(s) hint"),
}


def config() -> dict:
    script = [{"when": f"<{k}>", "toolCalls": [{"name": name, "arguments": args}]}
              for k, (name, args) in ACCEPTED.items()]
    script += [{"when": f"<{k}>", "toolCalls": [{"name": name, "arguments": args}]}
               for k, ((name, args), _) in REFUSED.items()]
    return {"providers": [{"id": "faux", "protocol": "faux", "script": script}], "defaultModel": "faux/faux-1"}


@pytest.fixture
async def session(daemon_factory):
    d = await daemon_factory(config=config())
    token = await d.pair("limits-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    return d, token, sid


async def _last_result(d, token, sid, marker):
    await d.submit(token, sid, marker, f"<{marker}>")

    async def settled():
        v = await d.view(token, sid)
        return v if v["status"] in ("idle", "awaiting_answer") and not v["queued"] else None

    view = await wait_until(settled)
    return view


async def test_todo_and_ask_user_take_their_limits_exactly(session):
    d, token, sid = session
    view = await _last_result(d, token, sid, "todo-edges")
    assert view["todos"] == [{"id": "i" * 200, "text": "t" * 2000, "status": "done"}]
    view = await _last_result(d, token, sid, "ask-edges")
    assert view["status"] == "awaiting_answer"
    [question] = view["questions"]
    assert question["questions"][0]["options"] == [{"id": "o" * 200, "label": "L" * 500}]
    r = await d.post(f"/sessions/{sid}/questions/{question['questionId']}/answer", token,
                     {"kind": "answer", "optionIds": ["o" * 200]})
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)


@pytest.mark.parametrize("marker", sorted(REFUSED))
async def test_todo_and_ask_user_refuse_past_their_limits(session, marker):
    d, token, sid = session
    view = await _last_result(d, token, sid, marker)
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [result] = [e for e in events if e["kind"] == "tool.finished"]
    assert (result["body"]["status"], result["body"]["error_code"]) == ("error", "INVALID_ARGUMENT")
    assert REFUSED[marker][1] in result["body"]["content"][0]["text"]
    assert not [e for e in events if e["kind"] in ("todo.updated", "question.asked")]
    assert view["todos"] == [] and view["questions"] == []
