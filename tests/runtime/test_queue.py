"""F-ACT-3: submissions, the durable queue (followUp / steer), withdraw, re-queue and abort.

A run is held busy by ``sleep_milliseconds`` calls (or a faux ``delay_ms``) under
``autojump_clock`` kept ``frozen`` while the test queues its inputs, so nothing really sleeps and
nothing depends on timing. Event order in the log is what is asserted.
"""

from __future__ import annotations

import pytest

from conftest import by_kind, frozen, one, sleep_call, text
from runtime.actor import Abort, Steer, Submit, Withdraw
from runtime.errors import InputNotQueued, ModelUnavailable
from runtime.providers.faux import FauxTurn


def hold(marker: str, *calls_ms: int, **kw) -> FauxTurn:
    """A turn answering ``marker`` with one sleep call per entry of ``calls_ms``."""
    return FauxTurn(when=marker, tool_calls=[sleep_call(ms) for ms in calls_ms], **kw)


async def r1_calling_a_tool(rt, sid: str, marker: str):
    """Submit ``marker`` as input ``r1`` and wait until its turn's tool call runs (called inside
    ``frozen``, so that the call holds). Returns the session's state then."""
    await rt.submit(sid, "r1", marker)
    return await rt.until(sid, lambda s: s.agents["main"].running_call is not None)


def seq_of(events, kind, **fields) -> int:
    return one(events, kind, **fields).seq


async def test_withdraw_right_after_submit_is_consistent(rt, autojump_clock):
    """Whatever withdraw answers, the log agrees with it (no input both withdrawn and placed).

    Regression: the runner decided StartTask, then waited for the write lock while a withdraw
    (decided on the same stale state) was written; both landed. Decisions now happen under the lock.
    """
    rt.faux.script = [hold("busy", 1000)]
    for i in range(12):
        sid = await rt.session()
        await rt.submit(sid, "r1", "busy")
        answer = await rt.call(sid, Withdraw("r1"))
        st = await rt.idle(sid)
        evs = await rt.events(sid)
        placed = by_kind(evs, "input.placed")
        withdrawn = by_kind(evs, "input.withdrawn")
        if answer["status"] == "withdrawn":
            assert answer["text"] == "busy"
            assert placed == [] and by_kind(evs, "task.started") == [], (i, [e.kind for e in evs])
            assert st.inputs["r1"].status == "withdrawn"
        else:
            assert answer["status"] == "placed"
            assert withdrawn == [], (i, [e.kind for e in evs])
            assert st.inputs["r1"].status == "settled"


async def test_submit_while_idle_starts_a_task(rt, autojump_clock):
    sid = await rt.session()
    ack = await rt.submit(sid, "r1", "hello there")
    assert ack["duplicate"] is False
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    assert [e.kind for e in evs] == [
        "session.created", "input.submitted", "task.started", "input.placed",
        "model.requested", "model.responded", "task.finished",
    ]
    assert one(evs, "input.submitted").seq == ack["seq"]
    assert {e.project_id for e in evs} == {"p1"}  # the project is in every envelope, session.created's too
    started = one(evs, "task.started")
    assert started.event.input_request_id == "r1"
    assert one(evs, "task.finished").task_id == started.task_id
    assert st.status == "idle" and st.queue == []
    assert st.inputs["r1"].status == "settled"
    assert [it.role for it in st.agents["main"].items] == ["user", "assistant"]
    assert st.agents["main"].items[1].text == "(faux) You said: hello there"


async def test_follow_up_while_busy_waits_for_the_answer(rt, autojump_clock):
    rt.faux.script = [hold("long job", 60_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        await r1_calling_a_tool(rt, sid, "long job")
        await rt.submit(sid, "r2", "and then this")
        assert (await rt.state(sid)).inputs["r2"].status == "queued"
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    t1, t2 = by_kind(evs, "task.started")
    assert (t1.event.input_request_id, t2.event.input_request_id) == ("r1", "r2")
    assert t1.task_id != t2.task_id
    sub2 = one(evs, "input.submitted", request_id="r2").seq
    tool_done = one(evs, "tool.finished").seq
    fin1 = one(evs, "task.finished", task_id=t1.task_id).seq
    # r2 was queued while the tool ran, and placed only after task 1 answered and finished.
    assert sub2 < tool_done < fin1 < t2.seq < one(evs, "input.placed", input_request_id="r2").seq
    assert one(evs, "input.placed", input_request_id="r2").task_id == t2.task_id
    assert one(evs, "tool.finished").event.status == "ok"
    assert st.inputs["r1"].status == st.inputs["r2"].status == "settled"


async def test_steer_while_busy_goes_after_the_tool_round_and_skips_the_rest(rt, autojump_clock):
    rt.faux.script = [hold("three naps", 5_000, 5_000, 5_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        await r1_calling_a_tool(rt, sid, "three naps")
        await rt.submit(sid, "s1", "stop napping", when_busy="steer")
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    (task,) = by_kind(evs, "task.started")  # one task: the steer joined it
    finished = by_kind(evs, "tool.finished")
    assert [f.event.status for f in finished] == ["ok", "skipped", "skipped"]
    responded = by_kind(evs, "model.responded")[0].event
    assert [f.event.call_id for f in finished] == [c.call_id for c in responded.tool_calls]
    assert all(f.event.is_error and f.event.error_code == "SKIPPED" for f in finished[1:])
    assert len(by_kind(evs, "tool.started")) == 1  # skipped calls never ran
    placed = one(evs, "input.placed", input_request_id="s1")
    assert placed.task_id == task.task_id
    assert finished[-1].seq < placed.seq < one(evs, "task.finished").seq
    # The model saw the steer right after the round's results, and answered it.
    roles = [it.role for it in st.agents["main"].items]
    assert roles == ["user", "tool_call", "tool_call", "tool_call", "tool_result", "tool_result",
                     "tool_result", "user", "assistant"]
    assert st.agents["main"].items[-1].text == "(faux) You said: stop napping"
    assert one(evs, "task.finished").event.status == "completed"


async def test_steer_after_a_final_answer_continues_the_same_task(rt, autojump_clock):
    rt.faux.script = [FauxTurn(when="think slowly", text="first answer", delay_ms=30_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        await rt.submit(sid, "r1", "think slowly")
        await rt.until(sid, lambda s: s.agents["main"].open_request_seq is not None)
        await rt.submit(sid, "s1", "one more thing", when_busy="steer")
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    (task,) = by_kind(evs, "task.started")
    answers = by_kind(evs, "model.responded")
    assert [a.event.text for a in answers] == ["first answer", "(faux) You said: one more thing"]
    placed = one(evs, "input.placed", input_request_id="s1")
    assert placed.task_id == task.task_id
    assert answers[0].seq < placed.seq < answers[1].seq < one(evs, "task.finished").seq
    assert st.inputs["s1"].status == "settled"


def _user_texts_of(request) -> list[str]:
    return [it.text for it in request.items if it.role == "user"]


async def test_steers_queued_together_go_into_one_model_request(rt, autojump_clock):
    """Audit C, defect 1: two steers queued during a tool round are both placed before the next
    model request (one ``model.requested`` that sees both), not one request per steer."""
    rt.faux.script = [hold("two naps", 5_000, 5_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        await r1_calling_a_tool(rt, sid, "two naps")
        await rt.submit(sid, "s1", "steer A", when_busy="steer")
        await rt.submit(sid, "s2", "steer B", when_busy="steer")
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    after_round = [e.kind for e in evs[seq_index(evs, one(evs, "tool.finished", status="skipped").seq) + 1:]]
    assert after_round == ["input.placed", "input.placed", "model.requested", "model.responded", "task.finished"]
    assert [e.event.input_request_id for e in by_kind(evs, "input.placed")[1:]] == ["s1", "s2"]
    assert len(by_kind(evs, "model.requested")) == 2  # the round's request and one for both steers
    assert _user_texts_of(rt.faux.requests[-1]) == ["two naps", "steer A", "steer B"]
    assert st.inputs["s1"].status == st.inputs["s2"].status == "settled"


async def test_steers_queued_while_the_model_writes_go_in_together(rt, autojump_clock):
    """Defect 1, the text case: a follow-up re-queued as a steer and a steer, both queued while
    the model answers without tool calls, go into the one next request."""
    rt.faux.script = [FauxTurn(when="think slowly", text="first answer", delay_ms=30_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        await rt.submit(sid, "r1", "think slowly")
        await rt.until(sid, lambda s: s.agents["main"].open_request_seq is not None)
        await rt.submit(sid, "fu", "follow-up turned steer")
        await rt.submit(sid, "st", "a steer", when_busy="steer")
        await rt.call(sid, Steer("fu"))
    await rt.idle(sid)
    evs = await rt.events(sid)
    (task,) = by_kind(evs, "task.started")
    answers = by_kind(evs, "model.responded")
    assert len(answers) == 2 and len(by_kind(evs, "model.requested")) == 2
    between = [e for e in evs if answers[0].seq < e.seq < answers[1].seq]
    assert [e.kind for e in between] == ["input.placed", "input.placed", "model.requested"]
    # Submission order, whichever became a steer first.
    assert [e.event.input_request_id for e in between[:2]] == ["fu", "st"]
    assert all(e.task_id == task.task_id for e in between)
    assert _user_texts_of(rt.faux.requests[-1]) == ["think slowly", "follow-up turned steer", "a steer"]


def seq_index(events, seq: int) -> int:
    return next(i for i, e in enumerate(events) if e.seq == seq)


async def test_withdraw_answers(rt, autojump_clock):
    rt.faux.script = [hold("long job", 60_000)]
    sid = await rt.session()
    assert await rt.call(sid, Withdraw("never-sent")) == {"requestId": "never-sent", "status": "unknown", "text": None}
    with frozen(autojump_clock):
        await rt.submit(sid, "r1", "long job")
        await rt.until(sid, lambda s: s.inputs["r1"].status == "placed")
        await rt.submit(sid, "r2", "queued words")
        assert (await rt.call(sid, Withdraw("r1")))["status"] == "placed"
        first = await rt.call(sid, Withdraw("r2"))
        assert first == {"requestId": "r2", "status": "withdrawn", "text": "queued words"}
        n = len(await rt.events(sid))
        again = await rt.call(sid, Withdraw("r2"))
        assert again == first
        evs = await rt.events(sid)
        assert len(evs) == n  # the second withdraw wrote nothing
        w = one(evs, "input.withdrawn")
        assert (w.event.input_request_id, w.event.reason) == ("r2", "user")
    st = await rt.idle(sid)
    assert (await rt.call(sid, Withdraw("r1")))["status"] == "settled"
    evs = await rt.events(sid)
    assert [e.event.input_request_id for e in by_kind(evs, "task.started")] == ["r1"]  # r2 never ran
    assert all(e.event.input_request_id != "r2" for e in by_kind(evs, "input.placed"))
    assert st.inputs["r2"].status == "withdrawn" and st.queue == []


async def test_steer_requeues_a_queued_follow_up(rt, autojump_clock):
    rt.faux.script = [hold("long job", 60_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        await r1_calling_a_tool(rt, sid, "long job")
        await rt.submit(sid, "r2", "actually do this")
        ans = await rt.call(sid, Steer("r2"))
        assert ans == {"requestId": "r2", "status": "queued", "whenBusy": "steer"}
        with pytest.raises(InputNotQueued) as placed_err:
            await rt.call(sid, Steer("r1"))  # placed, not queued
        assert placed_err.value.code == "INPUT_NOT_QUEUED"
        with pytest.raises(InputNotQueued):
            await rt.call(sid, Steer("nope"))
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    rq = one(evs, "input.requeued")
    assert (rq.event.input_request_id, rq.event.when_busy) == ("r2", "steer")
    (task,) = by_kind(evs, "task.started")
    placed = one(evs, "input.placed", input_request_id="r2")
    assert placed.task_id == task.task_id  # joined the running task as a steer
    assert one(evs, "tool.finished").seq < placed.seq
    assert st.inputs["r2"].status == "settled"
    with pytest.raises(InputNotQueued):
        await rt.call(sid, Steer("r2"))  # settled


async def test_abort_stops_the_run_and_withdraws_the_queue(rt, autojump_clock):
    rt.faux.script = [hold("long job", 600_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        st = await r1_calling_a_tool(rt, sid, "long job")
        running = st.agents["main"].running_call
        await rt.submit(sid, "r2", "later one")
        await rt.submit(sid, "r3", "later two", when_busy="steer")
        ans = await rt.call(sid, Abort())
    assert ans == {"aborted": True, "withdrawn": ["r2", "r3"]}
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    fin = one(evs, "tool.finished")
    assert (fin.event.call_id, fin.event.status, fin.event.is_error) == (running, "interrupted", True)
    assert one(evs, "run.aborted").event.reason == "user"
    tf = one(evs, "task.finished")
    assert tf.event.status == "aborted"
    withdrawn = by_kind(evs, "input.withdrawn")
    assert [(w.event.input_request_id, w.event.reason) for w in withdrawn] == [("r2", "abort"), ("r3", "abort")]
    assert fin.seq < one(evs, "run.aborted").seq < tf.seq
    assert len(by_kind(evs, "task.started")) == 1 and len(by_kind(evs, "model.requested")) == 1
    assert st.status == "idle" and st.queue == [] and st.running_task is None
    assert {r: st.inputs[r].status for r in ("r1", "r2", "r3")} == {"r1": "settled", "r2": "withdrawn", "r3": "withdrawn"}
    # The session keeps working after an abort.
    st = await rt.run_to_idle(sid, "r4", "hello again")
    assert st.agents["main"].items[-1].text == "(faux) You said: hello again"


async def test_abort_when_idle_is_harmless(rt, autojump_clock):
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "hi")
    n = len(await rt.events(sid))
    # Nothing was running or queued: nothing is written, and the answer says nothing was
    # aborted (it said "aborted": true; audit C, defect 5).
    assert await rt.call(sid, Abort()) == {"aborted": False, "withdrawn": []}
    assert len(await rt.events(sid)) == n
    fresh = await rt.session()
    assert await rt.call(fresh, Abort()) == {"aborted": False, "withdrawn": []}


async def test_inputs_are_served_in_submission_order(rt, autojump_clock):
    rt.faux.script = [hold("long job", 60_000)]
    sid = await rt.session()
    with frozen(autojump_clock):
        await rt.submit(sid, "r1", "long job")
        await rt.until(sid, lambda s: s.running_task is not None)
        for i in range(2, 7):
            await rt.submit(sid, f"r{i}", f"message {i}")
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    assert [e.event.input_request_id for e in by_kind(evs, "task.started")] == [f"r{i}" for i in range(1, 7)]
    # Each task ends before the next starts, and each answer is to its own input.
    kinds = [e.kind for e in evs if e.kind in ("task.started", "task.finished")]
    assert kinds == ["task.started", "task.finished"] * 6
    answers = [it.text for it in st.agents["main"].items if it.role == "assistant"]
    assert answers[1:] == [f"(faux) You said: message {i}" for i in range(2, 7)]


async def test_duplicate_request_id_is_idempotent(rt, autojump_clock):
    sid = await rt.session()
    first = await rt.submit(sid, "r1", "original")
    await rt.idle(sid)
    n = len(await rt.events(sid))
    again = await rt.call(sid, Submit("r1", text("something else entirely")))
    assert again == {"requestId": "r1", "seq": first["seq"], "duplicate": True}
    evs = await rt.events(sid)
    assert len(evs) == n
    assert one(evs, "input.submitted").event.content == text("original")


async def test_duplicate_request_id_is_idempotent_across_a_restart(runtime_factory, autojump_clock):
    async with runtime_factory() as rt:
        sid = await rt.session()
        first = await rt.submit(sid, "r1", "original")
        await rt.idle(sid)
        before = [e.to_json() for e in await rt.events()]
        ids = rt.ids
    async with runtime_factory(ids=ids) as rt2:
        again = await rt2.call(sid, Submit("r1", text("original")))
        assert again == {"requestId": "r1", "seq": first["seq"], "duplicate": True}
        st = await rt2.idle(sid)
        assert [e.to_json() for e in await rt2.events()] == before
        assert st.inputs["r1"].status == "settled"
        # A new request id still works after the restart.
        assert (await rt2.submit(sid, "r2", "new"))["duplicate"] is False


async def test_a_repeat_is_answered_even_when_the_model_can_no_longer_be_used(runtime_factory, autojump_clock):
    """A retry of a recorded submission (its 202 lost, say) after a restart whose config no longer
    serves the session's model was refused (MODEL_UNKNOWN, PROVIDER_DISABLED or
    PROVIDER_KEY_REQUIRED) although the input was in the log: a repeat is answered as the first
    time. A new input is still refused."""
    async with runtime_factory(extra_providers=["faux2"]) as rt:
        sid = await rt.session(model="faux2/model-b")
        first = await rt.submit(sid, "r1", "original")
        await rt.idle(sid)
        ids = rt.ids
    async with runtime_factory(ids=ids) as rt2:  # faux2 is not configured any more
        n = len(await rt2.events(sid))
        again = await rt2.call(sid, Submit("r1", text("original")))
        assert again == {"requestId": "r1", "seq": first["seq"], "duplicate": True}
        with pytest.raises(ModelUnavailable) as err:
            await rt2.submit(sid, "r2", "new")
        assert err.value.code == "MODEL_UNKNOWN"
        assert len(await rt2.events(sid)) == n


async def test_a_session_with_an_input_queued_is_not_idle(rt, autojump_clock):
    """Between an acknowledged submit and its task starting, the view said "idle" (with the input
    in `queued`): a client that submits, then polls until idle, stopped before the run began."""
    from projections.session_state import SessionState, fold

    sid = await rt.session()
    ack = await rt.submit(sid, "r1", "hello there")
    await rt.idle(sid)
    evs = await rt.events(sid)
    for upto in range(1, len(evs) + 1):
        st = fold(SessionState(session_id=sid), evs[:upto])
        want = "idle" if upto in (1, len(evs)) else "running"  # created; settled
        assert st.status == want, (evs[upto - 1].kind, st.status, st.queue)
    assert evs[1].seq == ack["seq"] and evs[1].kind == "input.submitted"


def test_run_order_puts_the_steers_before_the_follow_ups_a_running_task_passes():
    # The view's `queued` reads this order ("the next to run first"): while a task runs the steers
    # go in at its next round, the follow-ups after it; with none running the first queued input
    # starts the next task and the steers follow it. Each kind keeps submission order.
    from events import types as t
    from projections.session_state import QueuedInput, SessionState
    from runtime.decide import run_order

    def q(rid: str, when: str, seq: int) -> QueuedInput:
        return QueuedInput(rid, [t.TextPart(rid)], when, seq)  # type: ignore[arg-type]

    queue = [q("f1", "followUp", 1), q("s1", "steer", 2), q("f2", "followUp", 3), q("s2", "steer", 4)]
    running = SessionState("s", queue=list(queue), running_task="task_1")
    assert [x.request_id for x in run_order(running)] == ["s1", "s2", "f1", "f2"]
    idle = SessionState("s", queue=list(queue), running_task=None)
    assert [x.request_id for x in run_order(idle)] == ["f1", "s1", "s2", "f2"]
    assert run_order(SessionState("s")) == []
