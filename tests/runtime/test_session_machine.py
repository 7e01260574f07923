"""F-ACT-1..4, F-HAR-1, F-CTX-2: one session driven through its operations in any order.

A Hypothesis ``RuleBasedStateMachine`` over the real runtime of this suite (``open_runtime``: the
event store, the supervisor and its actor, snapshots, the daemon's projection service) and one
session of it. Its rules: submit an input (a fresh ``request_id`` as followUp or steer, a
repeated one, blank content), steer and withdraw (a queued input, a placed or settled one, a
withdrawn one, one never sent), abort, answer a question (open, settled or never asked; a valid
body or an invalid one), let the model answer (text, calls of ``get_system_time``,
``sleep_milliseconds``, ``todo`` and ``ask_user``, or a failure), pass the idle timeout (an idle
actor passivates and wakes from its snapshot and tail), restart the runtime on the same data
directory (``projections.db`` kept or deleted: a wake-up from a snapshot or from the whole log),
an operation and the restart at once, a manual compaction left running while the other rules go
on, and two or three operations sent at the same moment.

The model is :class:`machine_parts.HeldModel`: every request waits until a rule lets the model answer, with the
turn that rule drew (answered through :class:`FauxProvider`, so usage and call ids are the faux
provider's). The mock clock stands still, moved only to pass the idle timeout; tool sleeps are of
0 ms. So between two rules nothing runs: after each rule the machine polls the actor (a
condition, not a sleep) until the session is idle, awaits an answer, or its model request waits
for the machine, and the next rule meets that state. The rules' draws never depend on the
runtime's state (:func:`pick`), so Hypothesis can replay them.

Checked after every rule: ``seq`` and the session's ``session_seq`` are gap-free; the actor's view
(``GET /sessions/{id}``'s) is the view of a fresh fold of the log, its ``status`` one of ``idle``,
``running``, ``awaiting_answer``; every accepted input was submitted once and is placed, withdrawn
or still queued, exactly one of them, follow-ups placed in the tasks they started, in submission
order; the runtime logged no error. Each rule checks its own answer against what the log said
before it (the machine keeps its own account of each input from the events, not from the fold),
and that a refused operation (a stable code, a message) and a repeated ``request_id`` wrote
nothing. Anything else raised out of the runtime fails the test. At the end of each example the
projections kept up to date equal a rebuild. See docs/decisions.md, "A state machine over a
session's life".
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from conftest import text
from events import types as t
from events.reader import StoredEvent
from events.schema import PROJECTIONS_DB
from machine_parts import Host, Pending, RuntimeMachine, log_is_gap_free, pick, run_machine, trio_sync
from projections.session_state import SessionState, fold
from runtime.actor import Abort, Answer, GetView, Steer, Submit, Withdraw
from runtime.errors import LensError
from runtime.providers.faux import FauxError, FauxToolCall, FauxTurn
from runtime.views import session_view

# About 20 s on two cores. LENS_MACHINE_EXAMPLES / LENS_MACHINE_STEPS (with
# HYPOTHESIS_PROFILE=explore for fresh examples) search further.
MAX_EXAMPLES = int(os.environ.get("LENS_MACHINE_EXAMPLES", 60))
STEPS = int(os.environ.get("LENS_MACHINE_STEPS", 50))
IDLE_SECONDS = 300.0
SNAPSHOT_EVERY = 6  # small: wake-ups read a snapshot and a tail, as well as the whole log
SETTLE_SECONDS = 60.0  # a bound on real time for the runtime to reach a resting state (a failure)

OPTIONS = [{"id": "y", "label": "yes"}, {"id": "n", "label": "no"}]
ASK = FauxToolCall("ask_user", {"questions": [{"id": "q", "text": "Go on?", "options": OPTIONS}]})
CALLS = {
    "time": FauxToolCall("get_system_time", {}),
    "sleep": FauxToolCall("sleep_milliseconds", {"milliseconds": 0}),
    "todo": FauxToolCall("todo", {"items": [{"id": "a", "text": "step one"}, {"id": "b", "text": "step two"}]}),
    "ask": ASK,
}
VALID_ANSWERS = [{"kind": "answer", "optionIds": ["y"]}, {"kind": "answer", "text": "later"}, {"kind": "skip"}]
INVALID_ANSWERS = [{"kind": "answer", "optionIds": ["zz"]}, {"kind": "skip", "text": "why"}, {"kind": "maybe"}]
VIEW_KEYS = ("status", "queued", "items", "todos", "usage")


@dataclass
class Ledger:
    """What the log says of each input, read from the events alone (not from the fold)."""

    submitted: dict[str, StoredEvent] = field(default_factory=dict)
    placed: dict[str, list[StoredEvent]] = field(default_factory=dict)
    withdrawn: dict[str, list[StoredEvent]] = field(default_factory=dict)
    finished_tasks: set[str] = field(default_factory=set)
    started: dict[str, str] = field(default_factory=dict)  # task id -> the request id that started it
    requeued: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, events: list[StoredEvent]) -> "Ledger":
        led = cls()
        for e in events:
            ev = e.event
            if isinstance(ev, t.InputSubmitted):
                assert e.request_id not in led.submitted, f"request id {e.request_id!r} submitted twice"
                led.submitted[e.request_id] = e
            elif isinstance(ev, t.InputPlaced):
                led.placed.setdefault(ev.input_request_id, []).append(e)
            elif isinstance(ev, t.InputWithdrawn):
                led.withdrawn.setdefault(ev.input_request_id, []).append(e)
            elif isinstance(ev, t.InputRequeued):
                led.requeued.add(ev.input_request_id)
            elif isinstance(ev, t.TaskStarted) and e.task_id:
                led.started[e.task_id] = ev.input_request_id
            elif isinstance(ev, t.TaskFinished) and e.task_id:
                led.finished_tasks.add(e.task_id)
        return led

    def status(self, rid: str) -> str:
        """``withdraw``'s answer for ``rid`` as the log says it (F-ACT-3, decisions "Sessions and actors")."""
        if rid not in self.submitted:
            return "unknown"
        if rid in self.withdrawn:
            return "withdrawn"
        if rid in self.placed:
            return "settled" if self.placed[rid][0].task_id in self.finished_tasks else "placed"
        return "queued"

    def queued(self) -> list[str]:
        """The queue, in submission order."""
        by_seq = sorted(self.submitted.items(), key=lambda kv: kv[1].seq)
        return [rid for rid, _e in by_seq if self.status(rid) == "queued"]

    def when_busy(self, rid: str) -> str:
        return "steer" if rid in self.requeued else self.submitted[rid].event.when_busy  # type: ignore[union-attr]


class SessionMachine(RuntimeMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sid = self.host.run(self.rt.session)
        self.texts: dict[str, str] = {}
        self.n = 0
        self.compaction: Pending | None = None  # a manual compaction under way

    # ------------------------------------------------------------------ helpers (run in trio)

    def ledger(self) -> Ledger:
        return Ledger.of([e for e in self.events() if e.session_id == self.sid])

    def state(self) -> SessionState:
        return self.host.run(self.rt.state, self.sid)

    def call(self, command: Any) -> Any:
        """The actor's answer to ``command``, or the ``LensError`` it was refused with (anything
        else raised out of the runtime fails the test)."""

        async def go() -> Any:
            try:
                return await self.rt.call(self.sid, command)
            except LensError as exc:
                return exc

        return self.host.run(go)

    def settle(self) -> SessionState:
        """Wait until nothing runs without the machine: the session idle with nothing queued,
        awaiting an answer, or its model request waiting for the machine."""
        model = self.host.model
        assert model is not None

        async def go() -> SessionState:
            deadline = time.monotonic() + SETTLE_SECONDS
            while True:
                st = await self.rt.state(self.sid)
                main = st.agents.get("main")
                compacting = self.compaction is not None and not self.compaction.done
                if compacting:  # (it runs in the runner's place: inputs queue behind it)
                    if model.waiting:
                        return st
                elif st.running_task is None and not st.queue and model.waiting == 0:
                    return st
                if st.questions:
                    return st
                if main is not None and main.open_request_seq is not None and model.waiting:
                    return st
                assert time.monotonic() < deadline, f"the session never came to rest: {st.status} {st.queue}"
                await trio.sleep(0)

        st = self.host.run(go)
        self.compaction_ended()
        return st

    def refused_writing_nothing(self, answer: Any, code: str, before: int) -> None:
        assert isinstance(answer, LensError), f"expected {code}, got {answer!r}"
        assert answer.code == code, (answer.code, str(answer))
        assert str(answer), "a refusal names the problem"
        self.settle()
        assert len(self.events()) == before, f"a refused operation ({code}) wrote events"

    def fresh_id(self) -> str:
        self.n += 1
        return f"r{self.n}"

    # ------------------------------------------------------------------ rules: inputs

    @initialize()
    def start(self) -> None:
        self.settle()

    @rule(when_busy=st.sampled_from(["followUp", "steer"]), words=st.sampled_from(["hello", "plan it", "go on"]))
    def submit(self, when_busy: str, words: str) -> None:
        rid = self.fresh_id()
        message = f"{words} {rid}"
        answer = self.call(Submit(rid, text(message), when_busy))  # type: ignore[arg-type]
        assert not isinstance(answer, Exception), answer
        assert answer["requestId"] == rid and answer["duplicate"] is False
        sub = self.ledger().submitted[rid]
        assert sub.seq == answer["seq"] and sub.event.when_busy == when_busy  # type: ignore[union-attr]
        self.texts[rid] = message
        self.settle()

    @precondition(lambda self: self.texts)
    @rule(data=st.data(), other=st.booleans())
    def submit_again(self, data: st.DataObject, other: bool) -> None:
        """A repeated request id answers the first try's seq and writes nothing (F-LOG-4)."""
        rid = pick(data, sorted(self.texts))
        before = len(self.events())
        first = self.ledger().submitted[rid].seq
        answer = self.call(Submit(rid, text("something else" if other else self.texts[rid]), "steer"))
        assert answer == {"requestId": rid, "seq": first, "duplicate": True}, answer
        self.settle()
        assert len(self.events()) == before, "a repeated request id wrote events"

    @rule(blank=st.sampled_from(["", "   ", "\n\t"]))
    def submit_blank(self, blank: str) -> None:
        before = len(self.events())
        self.refused_writing_nothing(self.call(Submit(self.fresh_id(), text(blank))), "INVALID_ARGUMENT", before)

    def some_id(self, data: st.DataObject) -> str:
        return pick(data, sorted(self.texts) + ["never-sent"])

    @rule(data=st.data())
    def withdraw(self, data: st.DataObject) -> None:
        rid = self.some_id(data)
        led = self.ledger()
        status = led.status(rid)
        before = len(self.events())
        answer = self.call(Withdraw(rid))
        expected = "withdrawn" if status in ("queued", "withdrawn") else status
        assert answer == {"requestId": rid, "status": expected,
                          "text": self.texts[rid] if expected == "withdrawn" else None}, (status, answer)
        self.settle()
        after = self.ledger()
        if status == "queued":
            assert len(after.withdrawn[rid]) == 1 and rid not in after.placed
        else:
            assert len(self.events()) == before, f"a withdraw of a {status} input wrote events"

    @rule(data=st.data())
    def steer(self, data: st.DataObject) -> None:
        rid = self.some_id(data)
        led = self.ledger()
        status = led.status(rid)
        before = len(self.events())
        answer = self.call(Steer(rid))
        if status != "queued":
            self.refused_writing_nothing(answer, "INPUT_NOT_QUEUED", before)
            assert status in str(answer), answer
            return
        assert answer == {"requestId": rid, "status": "queued", "whenBusy": "steer"}, answer
        was = led.when_busy(rid)
        self.settle()
        if was == "steer":
            assert len(self.events()) == before, "a steer of a steer wrote events"
        else:
            assert rid in self.ledger().requeued

    @rule()
    def abort(self) -> None:
        st_ = self.state()
        led = self.ledger()
        queued = led.queued()
        before = len(self.events())
        # (a manual compaction under way is stopped by it too: answered ABORTED)
        compacting = self.compaction is not None and not self.compaction.done
        answer = self.call(Abort())
        busy = st_.running_task is not None or bool(queued) or compacting
        assert answer == {"aborted": busy, "withdrawn": queued}, (answer, queued, st_.running_task)
        after_state = self.settle()
        assert after_state.running_task is None and not after_state.queue and not after_state.questions
        after = self.ledger()
        for rid in queued:
            assert len(after.withdrawn.get(rid, [])) == 1 and rid not in after.placed
        if not busy:
            assert len(self.events()) == before, "an abort of an idle session wrote events"

    @rule(data=st.data(), ops=st.lists(st.sampled_from(["submit", "withdraw", "steer", "abort", "answer", "model"]),
                                       min_size=2, max_size=3))
    def at_once(self, data: st.DataObject, ops: list[str]) -> None:
        """Two or three operations sent at the same moment (as clients may): each answer is one
        the log bears out afterwards, and the invariants hold."""
        st_ = self.state()
        calls: list[tuple[str, Any]] = []
        for op in ops:
            when_busy = data.draw(st.sampled_from(["followUp", "steer"]))
            known = pick(data, sorted(self.texts) or ["-"])
            if op == "submit":
                rid = self.fresh_id()
                self.texts[rid] = f"at once {rid}"
                calls.append((op, Submit(rid, text(self.texts[rid]), when_busy)))  # type: ignore[arg-type]
            elif op in ("withdraw", "steer") and self.texts:
                calls.append((op, Withdraw(known) if op == "withdraw" else Steer(known)))
            elif op == "abort":
                calls.append((op, Abort()))
            elif op == "answer" and st_.questions:
                calls.append((op, Answer(sorted(st_.questions)[0], VALID_ANSWERS[0])))
            elif op == "model" and self.model_waits():
                calls.append((op, None))
        model = self.host.model
        assert model is not None

        async def go() -> list[Any]:
            out: list[Any] = [None] * len(calls)

            async def one(i: int, command: Any) -> None:
                if command is None:
                    if model.waiting:
                        model.answer(FauxTurn(text="answered at once"))
                    return
                try:
                    out[i] = await self.rt.call(self.sid, command)
                except LensError as exc:
                    out[i] = exc

            async with trio.open_nursery() as nursery:
                for i, (_op, command) in enumerate(calls):
                    nursery.start_soon(one, i, command)
            return out

        answers = self.host.run(go)
        self.settle()
        led = self.ledger()
        for (op, command), answer in zip(calls, answers):
            if op == "submit":
                assert answer["duplicate"] is False and led.submitted[command.request_id].seq == answer["seq"], answer
            elif op == "withdraw":
                assert not isinstance(answer, Exception), answer
                if answer["status"] == "withdrawn":
                    assert command.request_id in led.withdrawn and command.request_id not in led.placed
                elif answer["status"] in ("placed", "settled"):
                    assert command.request_id in led.placed and command.request_id not in led.withdrawn
            elif op == "steer" and not isinstance(answer, Exception):
                assert command.request_id not in led.withdrawn or any(
                    o == "abort" or (o == "withdraw" and c.request_id == command.request_id) for o, c in calls), answer
            elif op == "steer":
                assert answer.code == "INPUT_NOT_QUEUED", answer
            elif op == "abort":
                assert not isinstance(answer, Exception), answer
                for rid in answer["withdrawn"]:
                    assert rid in led.withdrawn and rid not in led.placed, rid
            elif op == "answer" and isinstance(answer, Exception):
                assert answer.code == "QUESTION_SETTLED", answer  # (an abort cancelled it first)

    # ------------------------------------------------------------------ rules: questions

    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        st_ = self.state()
        choices = sorted(st_.questions) + sorted(st_.settled_questions) + ["q_never_asked"]
        qid = pick(data, choices)
        valid = data.draw(st.booleans())
        body = pick(data, VALID_ANSWERS if valid else INVALID_ANSWERS)
        before = len(self.events())
        answer = self.call(Answer(qid, body))
        if qid not in st_.questions and qid not in st_.settled_questions:
            self.refused_writing_nothing(answer, "QUESTION_NOT_FOUND", before)
        elif not valid:
            self.refused_writing_nothing(answer, "ANSWER_INVALID", before)
        elif qid in st_.questions:
            assert answer == {"questionId": qid, "duplicate": False, "status": "answered", "answer": body}, answer
            self.settle()
        elif st_.settled_questions[qid]["status"] == "answered":
            assert answer["duplicate"] is True and answer["answer"] == st_.settled_questions[qid]["answer"], answer
            self.settle()
            assert len(self.events()) == before, "a repeated answer wrote events"
        else:
            self.refused_writing_nothing(answer, "QUESTION_SETTLED", before)

    # ------------------------------------------------------------------ rules: the model

    def model_waits(self) -> bool:
        return self.host.model is not None and self.host.model.waiting > 0

    @rule(kind=st.sampled_from(["text", "calls", "calls", "error"]),
          calls=st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=3),
          retryable=st.booleans())
    def model_answers(self, kind: str, calls: list[str], retryable: bool) -> None:
        if kind == "text":
            turn = FauxTurn(text="done for now")
        elif kind == "calls":
            turn = FauxTurn(tool_calls=[CALLS[c] for c in calls])
        else:
            turn = FauxTurn(error=FauxError("RATE_LIMITED", "slow down", retryable=retryable))
        model = self.host.model
        assert model is not None
        if not model.waiting:
            return  # (nothing asked: the rule's draws do not depend on the runtime's state)
        self.host.run(trio_sync(model.answer), turn)
        self.settle()

    # ------------------------------------------------------------------ rules: the actor's life

    @rule()
    def passivate(self) -> None:
        """The idle timeout passes: an idle actor passivates and wakes from its snapshot and tail
        with the same view; one that runs, compacts or awaits an answer stays (the asking call
        waits in memory: decisions "Audit: sessions and actors against the spec's words", Left)."""
        st_ = self.state()
        view = self.view()
        busy = bool(st_.questions) or st_.running_task is not None or self.compaction is not None

        async def go() -> None:
            self.host.clock.jump(IDLE_SECONDS + 1)
            if busy:  # (the actor's checks after its timeout read nothing from disk)
                await trio.testing.wait_all_tasks_blocked()
                assert self.sid in self.rt.sup.live_sessions, "a busy actor passivated"
                return
            deadline = time.monotonic() + SETTLE_SECONDS
            while self.sid in self.rt.sup.live_sessions:
                assert time.monotonic() < deadline, "the idle actor never passivated"
                await trio.sleep(0)

        self.host.run(go)
        assert self.view() == view, "the view changed across the idle timeout"
        self.settle()

    @rule(drop_snapshots=st.booleans())
    def restart(self, drop_snapshots: bool) -> None:
        """Stop the runtime and open it again on the same data directory (the snapshots kept,
        or ``projections.db`` deleted: the whole log replayed)."""
        self.reopen(drop_snapshots, compare=True)

    @rule(op=st.sampled_from(["submit", "answer", "model", "steer"]), data=st.data(), drop_snapshots=st.booleans())
    def restart_right_after(self, op: str, data: st.DataObject, drop_snapshots: bool) -> None:
        """An operation, and the stop at once, before the run it set going came to rest: the
        answer recorded but its call not finished, the model's calls not all run, an input
        queued but not placed (each resumed from the log after the restart, F-ACT-4)."""
        st_ = self.state()
        model = self.host.model
        assert model is not None
        rid, known, call = self.fresh_id(), pick(data, sorted(self.texts) or ["-"]), pick(data, sorted(CALLS))
        if op == "submit":
            self.texts[rid] = f"right before a stop {rid}"
            answer = self.call(Submit(rid, text(self.texts[rid])))
            assert answer["duplicate"] is False, answer
        elif op == "answer" and st_.questions:
            qid = sorted(st_.questions)[0]
            answer = self.call(Answer(qid, VALID_ANSWERS[0]))
            assert answer["duplicate"] is False, answer
        elif op == "model" and model.waiting:
            self.host.run(trio_sync(model.answer), FauxTurn(tool_calls=[CALLS["time"], CALLS[call]]))
        elif op == "steer" and self.texts:
            self.call(Steer(known))
        self.reopen(drop_snapshots, compare=False)
        if op == "answer" and st_.questions:
            # The answer the user was told was taken is the one the call finished with.
            (qid,) = sorted(st_.questions)[:1]
            call_id = st_.questions[qid].call_id
            ends = [e.event for e in self.events()
                    if e.kind == "tool.finished" and e.event.call_id == call_id]  # type: ignore[union-attr]
            assert [e.status for e in ends] == ["ok"], (qid, [(e.status, e.content) for e in ends])

    def reopen(self, drop_snapshots: bool, *, compare: bool) -> None:
        st_ = self.state()
        view = self.view()
        # (a compaction under way reads running; the stop cuts it off and answers it, so it is
        # looked at before)
        compacting = self.compaction is not None
        self.host.run(self.host.close)
        if drop_snapshots:
            for path in self.data_dir.glob(PROJECTIONS_DB + "*"):
                path.unlink()
        self.rt = self.host.run(self.host.open, self.data_dir, self.ids)
        after = self.settle()
        if compare and st_.running_task is None and not st_.queue and not compacting:
            assert self.view() == view, "an idle session's view changed across a restart"
        # Open questions are cancelled by the restart (F-HAR-1): none is open again at once.
        assert not (set(st_.questions) & set(after.questions))

    @rule()
    def compact(self) -> None:
        """A manual compaction, left running: refused while the session runs or waits for an
        answer; else its summarizing request waits for the model like any other, and inputs,
        aborts and restarts may come meanwhile (F-CTX-2, decisions "Compaction, pruning, snip and
        include")."""
        if self.compaction is not None:
            return
        st_ = self.state()
        before = len(self.events())
        pending = self.host.run(self.host.start_compaction, self.sid)
        if st_.running_task is not None or st_.questions:
            assert pending.done, "a compaction of a busy session was not refused at once"
            self.refused_writing_nothing(pending.answer, "SESSION_BUSY", before)
            return
        self.compaction = pending
        self.settle()

    def compaction_ended(self) -> None:
        """Check a compaction's answer once it came."""
        c = self.compaction
        if c is None or not c.done:
            return
        self.compaction = None
        if isinstance(c.answer, LensError):
            assert c.answer.code in ("NOTHING_TO_COMPACT", "COMPACTION_FAILED", "ABORTED", "SESSION_UNAVAILABLE"), \
                c.answer
            assert str(c.answer)
        else:
            compacted = [e for e in self.events() if e.kind == "context.compacted"]
            assert compacted and compacted[-1].seq == c.answer["seq"], c.answer

    # ------------------------------------------------------------------ invariants

    def view(self) -> dict[str, Any]:
        return self.host.run(self.rt.call, self.sid, GetView())

    @invariant()
    def holds_after_every_step(self) -> None:
        assert not self.host.errors, [r.getMessage() for r in self.host.errors]  # (a crash the supervisor contained)
        events = self.events()
        view, st_ = self.host.run(self.view_and_state)
        log_is_gap_free(events, [self.sid])
        self.view_is_a_fresh_replay(view, events)
        self.every_input_ends_once(Ledger.of([e for e in events if e.session_id == self.sid]), st_)

    async def view_and_state(self) -> tuple[dict[str, Any], SessionState]:
        return await self.rt.call(self.sid, GetView()), await self.rt.state(self.sid)

    def view_is_a_fresh_replay(self, view: dict[str, Any], events: list[StoredEvent]) -> None:
        # (a manual compaction under way is work the log does not show yet: an idle session
        # reads running while it waits for its summary)
        compacting = self.compaction is not None and not self.compaction.done
        replayed = session_view(fold(SessionState(self.sid), [e for e in events if e.session_id == self.sid]),
                                unrecorded_work=compacting)
        assert view["status"] in ("idle", "running", "awaiting_answer"), view["status"]
        for key in VIEW_KEYS:
            assert view[key] == replayed[key], key
        assert view == replayed

    def every_input_ends_once(self, led: Ledger, st_: SessionState) -> None:
        """Placed, withdrawn or still queued, exactly one; the queue in submission order; a
        follow-up placed only in the task it started (F-ACT-3)."""
        queue = [q.request_id for q in st_.queue]
        assert set(led.submitted) == set(self.texts)
        for rid in self.texts:
            placed, withdrawn = len(led.placed.get(rid, [])), len(led.withdrawn.get(rid, []))
            assert placed + withdrawn + (rid in queue) == 1, (rid, placed, withdrawn, queue)
            if placed and led.when_busy(rid) == "followUp":
                assert led.started[led.placed[rid][0].task_id] == rid, (rid, led.placed[rid][0].task_id)
        assert queue == led.queued()
        starts = [led.submitted[rid].seq for rid in led.started.values()]
        assert starts == sorted(starts), "queued inputs started out of submission order"


async def test_one_session_through_its_operations_in_any_order(tmp_path: Path,
                                                                autojump_clock: trio.testing.MockClock) -> None:
    autojump_clock.autojump_threshold = math.inf  # (the machine moves it: see the module docstring)
    async with trio.open_nursery() as nursery:
        host = Host(nursery, autojump_clock, trio.lowlevel.current_trio_token(), tmp_path,
                    lambda model: {"snapshot_every": SNAPSHOT_EVERY, "idle_seconds": IDLE_SECONDS})
        await run_machine(SessionMachine, host, MAX_EXAMPLES, STEPS)
