"""F-HAR-1 / F-ACT-4: an answer the daemon acknowledged is never lost by a restart. A daemon that
died after recording a question's answer but before the asking call's result finishes that call
with the answer when it starts again; a question still open at a restart is cancelled and its
call reported interrupted, as before."""

from __future__ import annotations

from events.store import Draft, open_store
from events.types import QuestionAnswered

from .conftest import Daemon, awaiting_an_answer, stop_daemon, wait_until

ASK = {"questions": [{"id": "colour", "text": "Colour?", "options": [{"id": "red", "label": "Red"},
                                                                       {"id": "blue", "label": "Blue"}]}]}
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "pick", "toolCalls": [{"name": "ask_user", "arguments": ASK}]},
]}], "defaultModel": "faux/faux-1"}


async def _asking(d: Daemon) -> tuple[str, str, dict]:
    token = await d.pair("question-client", strong=True)
    sid, view = await awaiting_an_answer(d, token, "pick a colour")
    return token, sid, view


async def test_an_answer_recorded_before_a_crash_reaches_the_model_after_the_restart(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid, view = await _asking(d)
    qid = view["questions"][0]["questionId"]
    project_id = view["projectId"]
    await stop_daemon(d)
    # What a daemon killed right after committing the answer (its 200 sent) leaves in the log.
    answer = {"kind": "answer", "optionIds": ["blue"]}
    async with open_store(d.data_dir) as store:
        await store.append(Draft(QuestionAnswered(question_id=qid, answer=answer), project_id=project_id,
                                 session_id=sid, agent_id="main"))

    d2 = await daemon_factory(config=CONFIG, root=d.root)
    view = await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    [finished] = [e for e in events if e["kind"] == "tool.finished"]
    assert (finished["body"]["name"], finished["body"]["status"]) == ("ask_user", "ok")
    assert finished["body"]["structured_content"] == {"question_id": qid, "answer": answer}
    assert finished["body"]["content"][0]["text"] == "The user chose Blue (blue)."
    assert not [e for e in events if e["kind"] == "question.cancelled"]
    assert [e["kind"] for e in events].count("question.asked") == 1  # asked once, not again
    assert view["items"][-1]["text"] == "The tool answered: The user chose Blue (blue)."
    # The answer route agrees: the question was answered, with that answer.
    r = await d2.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "skip"})
    assert r.status_code == 200 and r.json()["duplicate"] is True and r.json()["answer"] == answer


async def test_a_question_open_at_a_restart_is_cancelled_and_its_call_interrupted(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid, view = await _asking(d)
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    assert [e["body"]["reason"] for e in events if e["kind"] == "question.cancelled"] == ["session restarted"]
    [finished] = [e for e in events if e["kind"] == "tool.finished"]
    assert (finished["body"]["status"], finished["body"]["error_code"]) == ("interrupted", "INTERRUPTED")


async def test_the_model_is_told_its_question_was_cancelled_not_that_it_may_have_taken_effect(daemon_factory):
    # A question open at a restart: the call's result says the question was cancelled unanswered
    # and may be asked again (a question has no effect to check; the text for other calls told
    # the model it "may have partly taken effect" and to "check the current state").
    d = await daemon_factory(config=CONFIG)
    token, sid, view = await _asking(d)
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    view = await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    [finished] = [e for e in events if e["kind"] == "tool.finished"]
    [text] = [part["text"] for part in finished["body"]["content"]]
    assert text.startswith("This tool call was interrupted: Lens stopped before the user answered"), text
    assert "the question was cancelled" in text and "ask again" in text.lower(), text
    assert "partly taken effect" not in text, text
    # What the model read next is that result (the faux answers with the tool's text).
    assert view["items"][-1]["text"] == f"The tool answered: {text}"


async def test_the_events_settling_a_question_belong_to_its_task(daemon_factory):
    # Answered, aborted, restarted: question.answered / question.cancelled carry the task (and
    # agent) of the question.asked they settle (they carried no task: a task's events lacked them).
    d = await daemon_factory(config=CONFIG)
    token, sid, view = await _asking(d)
    r = await d.post(f"/sessions/{sid}/questions/{view['questions'][0]['questionId']}/answer", token,
                     {"kind": "answer", "optionIds": ["red"]})
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "r2", "pick again")
    await wait_until(lambda: _status_is(d, token, sid, "awaiting_answer"))
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True
    await d.submit(token, sid, "r3", "pick once more")
    await wait_until(lambda: _status_is(d, token, sid, "awaiting_answer"))
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    asked = {e["body"]["question_id"]: e for e in events if e["kind"] == "question.asked"}
    settled = [e for e in events if e["kind"] in ("question.answered", "question.cancelled")]
    assert [e["kind"] for e in settled] == ["question.answered", "question.cancelled", "question.cancelled"]
    for e in settled:
        ask = asked[e["body"]["question_id"]]
        assert ask["task_id"] is not None
        assert (e["task_id"], e["agent_id"]) == (ask["task_id"], ask["agent_id"]), e


async def _status_is(d: Daemon, token: str, sid: str, status: str) -> bool:
    return (await d.view(token, sid))["status"] == status
