"""F-ACT-5..7, F-TOOL-6, F-TOOL-7, F-CTX-1..3: several sessions of one runtime driven through
their operations in any order.

A Hypothesis ``RuleBasedStateMachine`` over the real runtime of this suite (``open_runtime``: the
event store, the supervisor and its actors, snapshots, the daemon's projection service, the
``skill`` tool reading two workspaces through a real executor pool) with three sessions to start
with, two in project ``p1`` and one in ``p2``, and forks of them (five sessions at most). Its
rules: an input to any session (a plain one or ``/skill:review args``, a follow-up or a steer,
mostly to a session with a run under way); a steer or a withdrawal of an input (mostly a queued
one), an abort (mostly of a running session); the model answering one of the requests waiting
(text, ``get_system_time``, a ``subagent`` call, ``todo``, a ``skill`` load, a ``view_image`` of a
workspace PNG, each from the main
agent or from a subagent, where ``subagent`` and ``todo`` are main-only and refused at execution;
or a failure, which fails a task, a subagent or a compaction); a fork of a session from a drawn
``seq`` of it; a configuration change (``model``, ``thinking_level``); a saved context setting
(automatic compaction, its trigger percent, tool-result pruning) or its reset to the config's; a
rename; a soft delete; a snip of an item of an agent's Full Context (main or subagent; in its
Working Context, or out of it already: snipped, replaced by a summary, pruned, hidden) or of the
older images, an Include Result of any tool result (by call id or item id; one never taken out
too), an edit for one agent naming another agent's item, a manual compaction left running, the user's hide, unhide or unsnip of an item of any kind (of the main agent or of a
subagent, a fork's own or inherited); the idle timeout (idle actors passivate and wake from their
snapshot and tail); a restart of the runtime on the same data directory (``projections.db`` kept or
deleted). The config turns pruning and automatic compaction on, over a small context window, so
both happen before model requests, of main agents and of subagents.

The model is :class:`machine_parts.HeldModel`; every session has a model of its own name
(``faux/<tag>-<variant>``: a fork is given its own at once), so a waiting request says whose it is,
and the rule that answers draws among them in a fixed order. Between two rules nothing runs (see
test_session_machine.py): after each rule the machine polls the actors until every session is idle
or waits for the model (a request, or an automatic compaction's summarizing request).

Checked after every rule: ``seq`` gap-free, each session's ``session_seq`` gap-free; every
session's state (each agent's Full Context, its snips, includes, skills..., and its Working Context
and marks item by item) equals a fresh fold of the log and a fold of its newest snapshot and the
log's tail after it, and its view a fresh fold's (a fork's from its source's events up to the fork point, then its own); every model
request a session recorded was made with the configuration in force at its ``seq``, and the model
received exactly the requests recorded since the runtime opened, in order, with that model and
thinking level, each holding exactly the agent's Working Context as of its ``model.requested`` (a
pruned result as its placeholder, a summary in place of what it replaced, a steer placed), well
formed (no result without its call; a call left without one gets the compilation's synthetic
result) and with no hidden item (a hidden result only as its placeholder beside its call), as is
every agent's Working Context; the log event by event: a pruning (of exactly the results prunable
then) and an automatic compaction only with the setting in force on (saved value > config >
default; or on when the agent's compaction began, its summarizing request answered after), no
request (but one asked again) with a result left to prune while pruning is on, no main-agent
request with a steer still queued, an input placed or withdrawn only while queued (so never both,
never twice); no agent's Working Context holds a skill's instructions twice, nor did a request;
``history_search`` in a project returns exactly the items its live sessions hold unhidden, each
once under the session that recorded it (filtered by a session, exactly what that session holds),
so a hidden item never and an unhidden one again; the runtime logged no error. The rules check
their own answers: a fork's contexts at its creation equal its source's as of the ``seq``; a
deleted session refuses inputs, configuration, renames and edits with ``SESSION_DELETED`` and
writes nothing, and its events stay; a main-only tool asked by a subagent is refused with
``TOOL_MAIN_ONLY``; a steer of an input not queued is ``INPUT_NOT_QUEUED`` naming its state, a
withdrawal answers the input's state (its text when withdrawn) and writes only for a queued one; an
abort withdraws exactly the queued inputs and leaves nothing running, queued or asked, and writes
nothing for an idle session; a snip names and records (one ``context.edited``) exactly the items
the next request would have seen, nothing for what is out already; an include exactly the result
not sent whole (nothing for one sent whole or re-attached already), which then comes back whole
with its call; an edit naming another agent's item is ``CONTEXT_ITEM_NOT_FOUND`` naming both; a
hide of a call still running is ``CONTEXT_CALL_PENDING``; a saved setting is in the state at once, and saving it as it was
writes nothing; a hide or unhide takes a call's result with it, an unsnip a result's call, the
answer names exactly the items changed and their marks, and one ``context.edited`` (an unhide of a
skill's stale instructions: and a snip) is written in the session's own log only when something
changed; an unsnip of a hidden item is ``CONTEXT_ITEM_HIDDEN``, of a skill's stale instructions
``CONTEXT_EDIT_INVALID``, an unknown id ``CONTEXT_ITEM_NOT_FOUND``, an agent the session does not
have ``AGENT_NOT_FOUND``, with nothing written. At the end of each example the projections kept up
to date equal a rebuild. See docs/decisions.md, "A state machine over several sessions".
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule

from conftest import text
from events import types as t
from events.reader import StoredEvent
from events.schema import PROJECTIONS_DB
from machine_parts import Host, Pending, RuntimeMachine, log_is_gap_free, pick, run_machine, trio_sync
from projections.session_state import (MAIN_AGENT, REMOVED_PLACEHOLDER, SessionState, apply, item_parts, snapshot_bytes,
                                       state_from_snapshot, working_context)
from projections.context_budget import item_marks, prunable_results
from runtime.actor import RESULT_RECORDS, Abort, Configure, Delete, GetView, Steer, Submit, Withdraw, _reset_for_fork
from runtime.config import CompactionConfig, ContextConfig, ModelConfig, PruneToolResultsConfig
from runtime.errors import LensError
from runtime.providers.base import ModelRequest
from runtime.providers.compile import prepare
from runtime.providers.faux import FauxError, FauxToolCall, FauxTurn
from runtime.views import session_view
from runtime.working_context import COMPACTION_SYSTEM, EditContext, resolve_settings
from tests.executor.conftest import running_pool
from tests.files.sample_images import PNG
from tools.artifacts import ArtifactStore
from tools.registry import builtin_tools
from tools.skills import skill_tool
from tools.workspace_tools import workspace_tools

# About 20 to 40 s on two cores shared with other runs (20 s of CPU). LENS_MACHINE_EXAMPLES /
# LENS_MACHINE_STEPS (with HYPOTHESIS_PROFILE=explore for fresh examples) search further.
MAX_EXAMPLES = int(os.environ.get("LENS_MACHINE_EXAMPLES", 30))
STEPS = int(os.environ.get("LENS_MACHINE_STEPS", 40))
IDLE_SECONDS = 300.0
SNAPSHOT_EVERY = 7
SETTLE_SECONDS = 60.0  # a bound on real time for the runtime to reach a resting state (a failure)
MAX_SESSIONS = 5
PROJECTS = {"p1": ("A", "B"), "p2": ("C",)}
SKILL = "---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS for {project}\n"
LEVELS = ["low", "high"]
TOOLS = {
    "time": FauxToolCall("get_system_time", {}),
    # (a long prompt: a subagent's context reaches the window's 80 % after one round of its own)
    "subagent": FauxToolCall("subagent", {"prompt": "SUB look around marker" + " and look again" * 105}),
    "todo": FauxToolCall("todo", {"items": [{"id": "a", "text": "step one"}]}),
    "skill": FauxToolCall("skill", {"name": "review"}),
    "image": FauxToolCall("view_image", {"path": "shot.png"}),
}
MAIN_ONLY = ("subagent", "todo")


def fork_point(events: list[StoredEvent], seq: int) -> int:
    """Where a fork asked at ``seq`` is made (docs/http-api.md): at a call's ``tool.finished``, a
    record its result wrote with it or a file copy stored among them, after the last of those
    records naming that call."""
    at = next(i for i, e in enumerate(events) if e.seq == seq)
    owner = next((i for i in range(at, -1, -1)
                  if not isinstance(events[i].event, (t.ArtifactStored, *RESULT_RECORDS))), None)
    if owner is None or not isinstance(events[owner].event, t.ToolFinished):
        return seq
    call_id = events[owner].event.call_id
    end = events[owner].seq
    for e in events[owner + 1:]:
        if isinstance(e.event, t.ArtifactStored):
            continue
        if isinstance(e.event, RESULT_RECORDS) and e.event.call_id == call_id:
            end = e.seq
            continue
        break
    return max(seq, end)
# No round kept as written (a manual compaction of a short conversation has something to
# replace); automatic compaction on at the default 80 % of a window the conversations reach in a
# few rounds; pruning on, of every result older than the last response. A session's saved
# settings turn either off (or on again), and a reset brings the config's back.
CONTEXT = ContextConfig(compaction=CompactionConfig(keep_recent_tokens=0),
                        prune_tool_results=PruneToolResultsConfig(enabled=True, keep_recent_rounds=1, min_tokens=1))
# Every session's models (``faux/<tag>-<variant>``), with a small window. The system prompt and
# the tool schemas alone are estimated at about 600 tokens for a main agent, 260 for a subagent
# (a compaction keeps them): 80 % (the config's) and 100 % are reached by a main agent's context in
# two or three rounds, 35 % by a subagent's only (a main agent's fixed part is over it: nothing is
# compacted, and the request goes as it is).
WINDOW = 850
TAGS = ("A", "B", "C", *(f"F{i}" for i in range(1, MAX_SESSIONS - 2)))
MODELS = {"faux": [ModelConfig(id=f"{tag}-{v}", context_window=WINDOW) for tag in TAGS for v in ("1", "2")]}
# Saved settings a rule draws (or a reset to the config's), off more often than on: the config
# has both on.
SETTINGS = {"auto_compaction": [False, False, True], "compaction_trigger_percent": [35, 80, 100],
            "prune_tool_results": [False, False, True]}


@dataclass
class Session:
    tag: str
    sid: str
    project: str
    deleted: bool = False


def tag_of(request: ModelRequest) -> str:
    return request.model.rsplit("-", 1)[0]


def is_compaction(request: ModelRequest) -> bool:
    return COMPACTION_SYSTEM in request.system


def skill_items(items: list[Any]) -> list[str]:
    return [it.source for it in items if it.role == "system" and it.source.startswith("skill:")]


def copied(state: SessionState) -> SessionState:
    """``state`` as the actor hands it out (through its snapshot encoding)."""
    return state_from_snapshot(snapshot_bytes(state))


class SessionsMachine(RuntimeMachine):
    def __init__(self) -> None:
        super().__init__()
        self.opened_at = 0  # the log's last seq when the runtime (and its model) opened
        self.sessions: list[Session] = []
        self.compactions: dict[str, Pending] = {}  # session id -> a manual compaction under way
        self.inputs: dict[str, tuple[Session, str]] = {}  # request id -> its session and text
        self.requests_checked: dict[tuple[str, str], int] = {}  # (tag, agent) -> requests compared so far
        self.n = 0
        self.forks = 0
        for project, tags in PROJECTS.items():
            for tag in tags:
                sid = self.host.run(self.create, project, tag)
                self.sessions.append(Session(tag, sid, project))

    async def create(self, project: str, tag: str) -> str:
        return await self.rt.session(project, model=f"faux/{tag}-1")

    # ------------------------------------------------------------------ helpers

    def of(self, sid: str) -> list[StoredEvent]:
        return [e for e in self.events() if e.session_id == sid]

    def call(self, sid: str, command: Any) -> Any:
        async def go() -> Any:
            try:
                return await self.rt.call(sid, command)
            except LensError as exc:
                return exc

        return self.host.run(go)

    def state(self, sid: str) -> SessionState:
        return self.host.run(self.rt.state, sid)

    def fresh_id(self) -> str:
        self.n += 1
        return f"r{self.n}"

    def target(self, data: st.DataObject) -> Session:
        """A drawn session: a live one, or now and then a deleted one (when there is)."""
        gone = [s for s in self.sessions if s.deleted]
        live = [s for s in self.sessions if not s.deleted]
        rarely = data.draw(st.integers(0, 4), label="a deleted one") == 4
        return pick(data, gone if rarely and gone else live or gone)

    def by_tag(self, tag: str) -> Session:
        return next(s for s in self.sessions if s.tag == tag)

    def fresh_state(self, sid: str, upto: int | None = None) -> SessionState:
        """A fold of the log alone: a fork's from its source's state as of the fork point."""
        events = [e for e in self.of(sid) if upto is None or e.seq <= upto]
        first = events[0].event if events else None
        if isinstance(first, t.SessionCreated) and first.forked_from_session:
            state = self.fresh_state(first.forked_from_session, first.forked_from_seq)
            _reset_for_fork(state, sid)
        else:
            state = SessionState(sid)
        for e in events:
            apply(state, e)
        return state

    def settle(self) -> None:
        """Wait until nothing runs without the machine: every session idle with nothing queued,
        or one of its agents (or its compaction) waiting for the model."""
        model = self.host.model
        assert model is not None

        async def go() -> None:
            deadline = time.monotonic() + SETTLE_SECONDS
            while True:
                waiting = {(tag_of(r), r.agent_id, is_compaction(r)) for r in model.requests}
                resting = True
                for s in self.sessions:
                    pending = self.compactions.get(s.sid)
                    if pending is not None and not pending.done:
                        resting = resting and (s.tag, MAIN_AGENT, True) in waiting
                        continue
                    st_ = await self.rt.state(s.sid)
                    if st_.running_task is None and not st_.queue:
                        continue
                    asking = [a for a in st_.agents.values() if a.open_request_seq is not None]
                    # (an agent's automatic compaction waits before its model.requested)
                    running = [a for a in st_.agents.values() if a.status == "running"]
                    if not any((s.tag, a.agent_id, False) in waiting for a in asking) and not any(
                            (s.tag, a.agent_id, True) in waiting for a in running):
                        resting = False
                if resting:
                    return
                assert time.monotonic() < deadline, "the sessions never came to rest"
                await trio.sleep(0)

        self.host.run(go)
        for sid, pending in list(self.compactions.items()):
            if pending.done:
                del self.compactions[sid]
                if isinstance(pending.answer, LensError):
                    assert pending.answer.code in ("NOTHING_TO_COMPACT", "COMPACTION_FAILED", "ABORTED",
                                                   "SESSION_UNAVAILABLE", "SESSION_DELETED"), pending.answer
                else:
                    compacted = [e for e in self.of(sid) if e.kind == "context.compacted"]
                    assert compacted and compacted[-1].seq == pending.answer["seq"], pending.answer

    def refused(self, answer: Any, code: str, before: int) -> None:
        assert isinstance(answer, LensError), f"expected {code}, got {answer!r}"
        assert answer.code == code and str(answer), (answer.code, str(answer))
        self.settle()
        assert len(self.events()) == before, f"a refused operation ({code}) wrote events"

    # ------------------------------------------------------------------ rules: inputs

    @initialize()
    def start(self) -> None:
        self.settle()

    # (Three rules, each taking ``data`` alone and drawing the rest. Hypothesis turns a drawn part
    # of the rules off in each example (swarm testing): inputs, the model's answers and the context
    # edits are one rule so that no example has the one without the others.)

    @rule(data=st.data())
    def converse(self, data: st.DataObject) -> None:
        """The model's answer to a request waiting (one time in two), an input to a session, an
        edit of a session's Working Context (two times in seven), or a steer, withdrawal or abort."""
        what = data.draw(st.integers(0, 6), label="answer, input, edit or intervention")
        if what < 3:
            self.answer(data)
        elif what == 3:
            self.ask(data)
        elif what < 6:
            self.edit_context(data)
        else:
            self.intervene(data)

    @rule(data=st.data())
    def edit(self, data: st.DataObject) -> None:
        """A context edit as a rule of its own as well (snips and includes of every kind of item
        are many cases: inside ``converse`` alone they came a few times a run)."""
        self.edit_context(data)

    def ask(self, data: st.DataObject) -> None:
        """An input to a drawn session: a plain one, or ``/skill:review args`` (F-TOOL-6)."""
        words = data.draw(st.sampled_from(["hello", "plan it", "go on"]))
        skill = data.draw(st.booleans())
        when_busy = data.draw(st.sampled_from(["followUp", "followUp", "steer"]))
        s = self.busy(data)  # (inputs queue, and are steered, withdrawn and aborted)
        rid = self.fresh_id()
        message = f"/skill:review {words} marker {rid}" if skill else f"{words} marker {s.tag} {rid}"
        before = len(self.events())
        answer = self.call(s.sid, Submit(rid, text(message), when_busy))
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        assert not isinstance(answer, Exception), answer
        assert answer["requestId"] == rid and answer["duplicate"] is False, answer
        self.inputs[rid] = (s, message)
        self.settle()

    def intervene(self, data: st.DataObject) -> None:
        """A steer or a withdrawal of an input (queued, placed, settled, withdrawn, or one the
        session never had), or an abort of a drawn session's run (F-ACT-3)."""
        op = data.draw(st.sampled_from(["steer", "withdraw", "withdraw", "abort"]))
        if op == "abort":
            self.abort(data)
            return
        inputs = sorted(self.inputs, key=lambda r: int(r[1:]))
        queued = [rid for rid in inputs if rid in self.queued_ids()]
        rid = pick(data, (queued if data.draw(st.integers(0, 3), label="a queued one") and queued else inputs)
                   + ["never-sent"])
        s = self.inputs[rid][0] if rid in self.inputs else self.target(data)
        record = self.state(s.sid).inputs.get(rid)
        status = "unknown" if record is None else record.status
        before = len(self.events())
        answer = self.call(s.sid, Steer(rid) if op == "steer" else Withdraw(rid))
        if s.deleted:  # (its queue was withdrawn by the delete)
            self.refused(answer, "SESSION_DELETED", before)
            return
        if op == "steer":
            if status != "queued":
                self.refused(answer, "INPUT_NOT_QUEUED", before)
                assert status in str(answer), answer
                return
            assert answer == {"requestId": rid, "status": "queued", "whenBusy": "steer"}, answer
            self.settle()
            return
        expected = "withdrawn" if status in ("queued", "withdrawn") else status
        assert answer == {"requestId": rid, "status": expected,
                          "text": self.inputs[rid][1] if expected == "withdrawn" else None}, (status, answer)
        self.settle()
        if status != "queued":
            assert len(self.events()) == before, f"a withdrawal of a {status} input wrote events"
        else:
            # (an input steered while queued was requeued as a steer, still queued)
            assert [e.kind for e in self.of(s.sid) if (e.request_id == rid or getattr(e.event, "input_request_id", None) == rid)
                    and e.kind != "input.requeued"] == ["input.submitted", "input.withdrawn"], rid

    def queued_ids(self) -> set[str]:
        return {q.request_id for s in self.sessions for q in self.state(s.sid).queue}

    def busy(self, data: st.DataObject) -> Session:
        """A drawn session, one with a run under way three times in four when there is one."""
        busy = [s for s in self.sessions if not s.deleted and self.state(s.sid).running_task is not None]
        if data.draw(st.integers(0, 3), label="a busy one") and busy:
            return pick(data, busy)
        return self.target(data)

    def abort(self, data: st.DataObject) -> None:
        """An abort: what runs stops (its calls skipped or interrupted, an open request failed,
        subagents aborted), every queued input is withdrawn and none placed; an idle session's
        abort writes nothing; a manual compaction under way is cut off."""
        s = self.busy(data)
        st_ = self.state(s.sid)
        queued = [q.request_id for q in st_.queue]
        before = len(self.events())
        compacting = s.sid in self.compactions and not self.compactions[s.sid].done
        answer = self.call(s.sid, Abort())
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        assert not isinstance(answer, Exception), answer
        assert answer["withdrawn"] == queued, (answer, queued)
        if st_.running_task is not None or queued or compacting:
            assert answer["aborted"] is True, answer
        self.settle()
        after = self.state(s.sid)
        assert after.running_task is None and not after.queue and not after.questions, s.tag
        assert all(a.status != "running" for a in after.agents.values()), s.tag
        for rid in queued:
            assert after.inputs[rid].status == "withdrawn", rid
        if not answer["aborted"]:
            assert len(self.events()) == before, "an abort of an idle session wrote events"

    # ------------------------------------------------------------------ rules: the model

    def answer(self, data: st.DataObject) -> None:
        """The model answers one of the requests waiting (drawn in a fixed order), or ``all`` of
        them with text, one after the other."""
        kind = data.draw(st.sampled_from(["text", "all", "time", "all", "subagent", "todo", "skill", "image", "error"]))
        model = self.host.model
        assert model is not None
        if kind != "all":
            self.answer_one(data, kind)
            return
        for request in sorted(model.requests, key=lambda r: (tag_of(r), r.agent_id, is_compaction(r))):
            if any(r is request for r in model.requests):
                self.host.run(trio_sync(model.answer), FauxTurn(text=f"done marker {tag_of(request)}"), request)
                self.settle()

    def answer_one(self, data: st.DataObject, kind: str) -> None:
        model = self.host.model
        assert model is not None
        waiting = sorted(model.requests, key=lambda r: (tag_of(r), r.agent_id, is_compaction(r)))
        if not waiting:
            return
        request = pick(data, waiting)
        s = self.by_tag(tag_of(request))
        if kind == "error":  # (a compaction's request too: a manual one fails, an automatic one lets the request go)
            turn = FauxTurn(error=FauxError("RATE_LIMITED", "slow down", retryable=data.draw(st.booleans())))
        elif kind == "text" or is_compaction(request):
            turn = FauxTurn(text=f"done marker {s.tag}")
        else:
            turn = FauxTurn(tool_calls=[TOOLS[kind]])
        before = len(self.events())
        self.host.run(trio_sync(model.answer), turn, request)
        self.settle()
        if kind in MAIN_ONLY and request.agent_id != MAIN_AGENT and not is_compaction(request):
            ends = [e for e in self.of(s.sid)[before:] if e.kind == "tool.finished" and e.agent_id == request.agent_id
                    and e.event.name == TOOLS[kind].name]  # type: ignore[union-attr]
            if ends:  # (none when the session was stopped first)
                assert [(e.event.status, e.event.error_code) for e in ends] == [  # type: ignore[union-attr]
                    ("error", "TOOL_MAIN_ONLY")], ends
            assert not [e for e in self.of(s.sid)[before:] if e.agent_id == request.agent_id
                        and e.kind in ("todo.updated", "agent.started") and e.agent_id != MAIN_AGENT]

    # ------------------------------------------------------------------ rules: sessions

    @rule(data=st.data())
    def session_op(self, data: st.DataObject) -> None:
        """A fork, a configuration change, a rename or a soft delete of a drawn session (one rule,
        so that these come as often as inputs and answers, not four times as often)."""
        op = data.draw(st.sampled_from(["fork", "configure", "settings", "settings", "rename", "delete"]))
        if op == "fork":
            self.fork(data)
        elif op == "settings":
            self.save_setting(data)
        elif op == "configure":
            self.configure(data, data.draw(st.sampled_from(["1", "2"])), data.draw(st.sampled_from(LEVELS + [None])))
        elif op == "rename":
            self.rename(data, *data.draw(st.sampled_from([("first", None), ("second", "high")])))
        else:
            self.delete(data)

    def fork(self, data: st.DataObject) -> None:
        """A fork from a drawn ``seq`` of a session (F-ACT-7): its contexts, model and thinking
        level are the source's as of that event; it is then given a model of its own name."""
        source = pick(data, self.sessions)
        events = self.of(source.sid)
        seq = pick_seq = pick(data, events).seq
        if len(self.sessions) >= MAX_SESSIONS:
            return
        seq = fork_point(events, seq)  # (a call's result is forked with what it recorded)
        expected = self.fresh_state(source.sid, seq)
        fork_sid = self.host.run(self.rt.sup.fork_session, source.sid, pick_seq)
        got = self.state(fork_sid)
        assert got.forked_from_session == source.sid and got.forked_from_seq == seq
        assert got.todos == expected.todos
        assert got.project_id == source.project and not got.deleted
        assert (got.model, got.thinking_level) == (expected.model, expected.thinking_level)
        assert set(got.agents) == set(expected.agents)
        for aid, agent in copied(expected).agents.items():
            mine = got.agents[aid]
            assert mine.items == agent.items, aid  # the Full Context as of the seq
            assert working_context(mine) == working_context(agent), aid
            assert mine.skills == agent.skills, aid
        self.forks += 1
        tag = f"F{self.forks}"
        self.sessions.append(Session(tag, fork_sid, source.project))
        answer = self.call(fork_sid, Configure(model=f"faux/{tag}-1"))
        assert not isinstance(answer, Exception), answer
        self.settle()

    def configure(self, data: st.DataObject, variant: str, level: str | None) -> None:
        """F-ACT-6: a change of model and thinking level, from the next model request on (the
        invariant :meth:`requests_as_configured` checks which requests had which)."""
        s = self.target(data)
        before = len(self.events())
        answer = self.call(s.sid, Configure(model=f"faux/{s.tag}-{variant}", thinking_level=level))
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        assert not isinstance(answer, Exception), answer
        got = self.state(s.sid)
        assert got.model == f"faux/{s.tag}-{variant}" and (level is None or got.thinking_level == level)
        self.settle()

    def save_setting(self, data: st.DataObject) -> None:
        """A saved context setting (automatic compaction, its trigger, pruning) or its reset to
        the config's: in force from the session's next model request (saved value > config >
        default; the invariant :meth:`context_rules_hold` checks what each request met)."""
        s = self.talked(data)  # (a session with a conversation first: the settings' effects show)
        key = data.draw(st.sampled_from(sorted(SETTINGS)))
        value = data.draw(st.sampled_from([*SETTINGS[key], None]), label="value (None: reset)")
        before = len(self.events())
        saved = dict(self.state(s.sid).settings)
        command = Configure(reset=(key,)) if value is None else Configure(settings={key: value})
        answer = self.call(s.sid, command)
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        assert not isinstance(answer, Exception), answer
        got = self.state(s.sid).settings
        assert (key not in got) if value is None else (got[key] == value and type(got[key]) is type(value)), got
        if (value is None and key not in saved) or (value is not None and saved.get(key) == value
                                                    and type(saved[key]) is type(value)):
            assert len(self.events()) == before, "a setting saved as it was wrote events"
        self.settle()

    def rename(self, data: st.DataObject, name: str, level: str | None) -> None:
        """A new name, alone or with a thinking level, as ``PATCH /sessions/{id}`` sends it: one
        ``Configure``, its events in one append (the invariants fold the log and compare)."""
        s = self.target(data)
        before = len(self.events())
        answer = self.call(s.sid, Configure(thinking_level=level, name=name))
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        assert not isinstance(answer, Exception), answer
        got = self.state(s.sid)
        assert got.name == name and (level is None or got.thinking_level == level)
        self.settle()

    def delete(self, data: st.DataObject) -> None:
        """A soft delete: the session's events stay, what it ran is stopped, and it refuses what
        would change it with ``SESSION_DELETED`` from then on (two sessions at most are deleted:
        the others go on)."""
        s = self.target(data)
        if not s.deleted and sum(x.deleted for x in self.sessions) >= 2:
            return
        kept = self.of(s.sid)
        before = len(self.events())
        answer = self.call(s.sid, Delete())
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        assert answer == {"deleted": True}, answer
        s.deleted = True
        self.settle()
        after = self.of(s.sid)
        assert after[:len(kept)] == kept and after[-1].kind == "session.deleted"
        got = self.state(s.sid)
        assert got.deleted and got.running_task is None and not got.queue

    # ------------------------------------------------------------------ rules: context edits

    def talked(self, data: st.DataObject) -> Session:
        """A session whose main agent has a conversation, when there is one (the longest first:
        a manual compaction has something to replace from the second round on)."""
        sizes = {s.tag: len(working_context(self.state(s.sid).agents[MAIN_AGENT])) for s in self.sessions}
        talked = sorted((s for s in self.sessions if sizes[s.tag]), key=lambda s: (-sizes[s.tag], s.tag))
        if data.draw(st.integers(0, 4), label="a deleted one") == 4:
            talked = [s for s in talked if s.deleted]
        return pick(data, talked or self.sessions)

    def edit_context(self, data: st.DataObject) -> None:
        """A Working Context edit of a drawn session's main agent (F-CTX-1/3) or a manual
        compaction (F-CTX-2)."""
        op = data.draw(st.sampled_from(["snip", "snip", "include", "include", "compact", "hide", "unhide", "unhide",
                                        "unsnip", "elsewhere"]))
        if op in ("hide", "unhide", "unsnip"):
            self.user_edit(data, op)
            return
        {"snip": self.snip, "include": self.include, "compact": self.compact, "elsewhere": self.edit_elsewhere}[op](data)

    def edited_agent(self, data: st.DataObject, fit: Callable[[Any], bool]) -> tuple[Session, str]:
        """A session and one of its agents for a snip or an include: one ``fit`` for it (items to
        snip, results to include) three times in four when there is one, a subagent one time in
        three; else the main agent of a session with a conversation."""
        subagent = data.draw(st.integers(0, 2), label="a subagent's") == 2
        fitting = data.draw(st.integers(0, 3), label="a fitting one") < 3
        agents = [(s, aid) for s in self.sessions for aid, a in sorted(self.state(s.sid).agents.items())
                  if (aid != MAIN_AGENT) == subagent and (fit(a) if fitting else a.items)]
        return pick(data, agents) if agents else (self.talked(data), MAIN_AGENT)

    def snip(self, data: st.DataObject) -> None:
        """A snip (F-CTX-3) of an item of a drawn agent's Full Context: one in its Working
        Context, or any (one already snipped, replaced by a summary, pruned, hidden, gone with its
        call), or the older images (all but the newest ``keep_images`` image results sent whole).
        Only what the next request sees is taken out: the answer names exactly those items (and
        the re-attached result of a call snipped), one ``context.edited`` records them, and a snip
        of what is out already writes nothing."""
        s, aid = self.edited_agent(data, lambda a: bool(working_context(a)))
        agent = self.state(s.sid).agents[aid]
        shown = [it.id for it in working_context(agent)]
        # (Hypothesis draws small values most: the cases a run should meet most come first)
        anywhere = data.draw(st.integers(0, 2), label="any item of the Full Context") < 2
        older = data.draw(st.integers(0, 4), label="older images") == 4
        keep = data.draw(st.integers(0, 2), label="keep_images")
        if older:
            cmd = EditContext("snip", older_images=True, keep_images=keep, agent_id=aid)
        else:
            item_id = pick(data, ([it.id for it in agent.items] if anywhere else shown) or ["ci_never"])
            cmd = EditContext("snip", (item_id,), agent_id=aid)
        marks = item_marks(agent)
        pending = {c.call_id for c in agent.pending_calls}
        by_id = {it.id: it for it in agent.items}
        before = len(self.events())
        answer = self.call(s.sid, cmd)
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        if not older and cmd.item_ids[0] not in by_id:
            self.refused(answer, "CONTEXT_ITEM_NOT_FOUND", before)
            assert cmd.item_ids[0] in str(answer) and aid in str(answer), answer
            return
        if not older and by_id[cmd.item_ids[0]].role == "tool_call" and by_id[cmd.item_ids[0]].call.call_id in pending:
            self.refused(answer, "CONTEXT_CALL_PENDING", before)
            return
        assert not isinstance(answer, Exception), answer
        if older:
            images = [it.id for it in working_context(agent) if it.role == "tool_result" and marks[it.id] in (
                "visible", "included") and any(isinstance(p, t.ImagePart) for p in item_parts(it))]
            wanted = images[:max(len(images) - keep, 0)]
        else:
            wanted = [i for i in cmd.item_ids if marks[i] in ("visible", "included", "pruned")]
        calls = {by_id[i].call.call_id for i in wanted if by_id[i].role == "tool_call" and by_id[i].call is not None}
        expected = wanted + [it.id for it in agent.items if it.role == "tool_result" and it.call_id in calls
                             and it.id in agent.included and it.id not in wanted]
        assert (answer["agentId"], answer["itemIds"], answer["changed"]) == (aid, expected, bool(expected)), (
            [marks.get(i) for i in cmd.item_ids], answer)
        new = self.events()[before:]
        assert [(e.session_id, e.agent_id or MAIN_AGENT, e.kind, e.event.op, list(e.event.item_ids))  # type: ignore[union-attr]
                for e in new] == ([(s.sid, aid, "context.edited", "snip", expected)] if expected else []), new
        self.settle()
        # Out of the Working Context (a tool result: its placeholder stays beside its call).
        after = self.state(s.sid).agents[aid]
        now = {it.id: it for it in working_context(after)}
        for i in expected:
            assert i not in now or now[i].text == REMOVED_PLACEHOLDER, (i, now.get(i))
        # Nothing else leaves it but a snipped call's result and a call that stood only for its
        # re-attached result, snipped (``included``: out before by a snip or a summary).
        results = {by_id[i].call_id for i in expected if by_id[i].role == "tool_result"}
        assert set(shown) - set(expected) <= set(now) | {
            it.id for it in agent.items if it.role == "tool_result" and it.call_id in calls} | {
            it.id for it in agent.items if it.role == "tool_call" and it.call is not None
            and it.call.call_id in results and marks[it.id] == "included"}, (
            "a snip took out more", [(i, marks[i]) for i in set(shown) - set(expected) - set(now)])

    def include(self, data: st.DataObject) -> None:
        """Include Result (F-CTX-3) of a tool result of a drawn agent: by its call id or its
        item id, whatever its state (snipped, pruned, replaced by a summary, gone with its call,
        or never taken out). One sent whole already (``visible``) or re-attached already writes
        nothing; any other comes back whole, with its call and its images."""
        s, aid = self.edited_agent(data, lambda a: any(it.role == "tool_result" and it.call_id for it in a.items))
        agent = self.state(s.sid).agents[aid]
        results = [it for it in agent.items if it.role == "tool_result" and it.call_id]
        result = pick(data, results) if results else None
        by_call = data.draw(st.booleans(), label="by call id")
        if result is None:
            cmd = EditContext("include", call_id="call_never", agent_id=aid)
        elif by_call:
            cmd = EditContext("include", call_id=result.call_id, agent_id=aid)
        else:
            cmd = EditContext("include", (result.id,), agent_id=aid)
        marks = item_marks(agent)
        before = len(self.events())
        answer = self.call(s.sid, cmd)
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        if result is None:
            self.refused(answer, "CONTEXT_ITEM_NOT_FOUND", before)
            assert "call_never" in str(answer), answer
            return
        call = next((it for it in agent.items if it.role == "tool_call" and it.call is not None
                     and it.call.call_id == result.call_id), None)
        if result.id in agent.hidden or (call is not None and call.id in agent.hidden):
            self.refused(answer, "CONTEXT_ITEM_HIDDEN", before)
            return
        assert not isinstance(answer, Exception), answer
        expected = [] if marks[result.id] == "visible" or result.id in agent.included else [result.id]
        assert (answer["agentId"], answer["itemIds"], answer["changed"]) == (aid, expected, bool(expected)), (
            marks[result.id], answer)
        new = self.events()[before:]
        assert [(e.agent_id or MAIN_AGENT, e.kind, e.event.op, list(e.event.item_ids))  # type: ignore[union-attr]
                for e in new] == ([(aid, "context.edited", "include_result", expected)] if expected else []), new
        self.settle()
        now = {it.id: it for it in working_context(self.state(s.sid).agents[aid])}
        assert result.id in now and item_parts(now[result.id]) == item_parts(result), (marks[result.id], answer)
        assert call is None or call.id in now, "a result re-attached without its call"

    def edit_elsewhere(self, data: st.DataObject) -> None:
        """A snip, include, hide, unhide or unsnip sent for one agent naming an item of another
        (the main agent's and a subagent's, or two sessions'): ``CONTEXT_ITEM_NOT_FOUND`` naming
        the item and the agent, and nothing written."""
        owners = [(s, aid, it.id) for s in self.sessions for aid, a in sorted(self.state(s.sid).agents.items())
                  for it in a.items]
        if not owners:
            return
        s, aid, item_id = pick(data, owners)
        st_ = self.state(s.sid)
        others = [a for a in sorted(st_.agents) if a != aid and item_id not in {it.id for it in st_.agents[a].items}]
        if not others:
            return
        other = pick(data, others)
        op = data.draw(st.sampled_from(["snip", "include", "hide", "unhide", "unsnip"]))
        before = len(self.events())
        answer = self.call(s.sid, EditContext(op, (item_id,), agent_id=other))  # type: ignore[arg-type]
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        self.refused(answer, "CONTEXT_ITEM_NOT_FOUND", before)
        assert item_id in str(answer) and other in str(answer), answer

    def user_edit(self, data: st.DataObject, op: str) -> None:
        """The user's hide, unhide or unsnip (F-CTX-3, F-TOOL-7) of an item of any kind (a user
        message, an answer, a tool call or result, a summary, a skill's instructions; a fork's
        own or one it inherited) of a drawn session's main agent or of one of its subagents,
        through the command the HTTP routes send. Checked against the rules: a call takes its
        result with it (an unsnip of a result brings its call back too); an unsnip of a hidden
        item is ``CONTEXT_ITEM_HIDDEN``, of a skill's instructions no longer its loaded copy
        ``CONTEXT_EDIT_INVALID``; an unhide of such instructions snips them as well; the answer
        names exactly the items changed and their new marks; one ``context.edited`` (two for
        that unhide) in the session's own log when it changes something, nothing otherwise or
        when refused."""
        # An agent of a session (a subagent one time in three, when one has items), one with items
        # hidden (to unhide) or snipped or hidden (to unsnip) three times in four; a hide while no
        # agent has any.
        states = {s.sid: self.state(s.sid) for s in self.sessions}

        def marked_of(agent: Any) -> list[str]:
            return {"hide": [], "unhide": list(agent.hidden), "unsnip": [*agent.snipped, *agent.hidden]}[op]

        if op != "hide" and not any(marked_of(a) for st_ in states.values() for a in st_.agents.values()):
            op = "hide"  # (nothing to put back yet)
        subagent = data.draw(st.integers(0, 2), label="a subagent's") == 0
        marked_first = op != "hide" and data.draw(st.integers(0, 3), label="a marked one") > 0
        agents = [(s, aid) for s in self.sessions for aid, a in sorted(states[s.sid].agents.items())
                  if (aid != MAIN_AGENT) == subagent and a.items and (not marked_first or marked_of(a))]
        s, aid = pick(data, agents) if agents else (self.talked(data), MAIN_AGENT)
        state = states[s.sid] if agents else self.state(s.sid)
        agent = state.agents[aid]
        marked = marked_of(agent)
        if data.draw(st.integers(0, 9), label="an unknown id") == 0:
            item_id = "ci_never"
        else:
            # (a kind first, then an item of it: calls, summaries and instructions are few)
            role = pick(data, sorted({it.role for it in agent.items}) or ["user"])
            item_id = pick(data, marked if marked_first and marked else [it.id for it in agent.items if it.role == role]
                           or ["ci_never"])
        by_id = {it.id: it for it in agent.items}
        hidden, snipped = set(agent.hidden), set(agent.snipped)
        before = len(self.events())
        if data.draw(st.integers(0, 19), label="an agent the session does not have") == 0:
            answer = self.call(s.sid, EditContext(op, (item_id,), agent_id="sub_never"))  # type: ignore[arg-type]
            self.refused(answer, "SESSION_DELETED" if s.deleted else "AGENT_NOT_FOUND", before)
            assert s.deleted or "sub_never" in str(answer), answer
            return
        answer = self.call(s.sid, EditContext(op, (item_id,), agent_id=aid))  # type: ignore[arg-type]
        if s.deleted:
            self.refused(answer, "SESSION_DELETED", before)
            return
        if item_id not in by_id:
            self.refused(answer, "CONTEXT_ITEM_NOT_FOUND", before)
            assert item_id in str(answer), answer
            return
        item = by_id[item_id]
        stale = item.role == "system" and item.source.startswith("skill:") and getattr(
            agent.skills.get(item.source[len("skill:"):]), "item_id", None) != item_id
        if op == "unsnip" and item_id in hidden:
            self.refused(answer, "CONTEXT_ITEM_HIDDEN", before)
            assert item_id in str(answer), answer
            return
        call = next((it for it in agent.items if item.role == "tool_result" and it.role == "tool_call"
                     and it.call is not None and it.call.call_id == item.call_id), None)
        if op == "unsnip" and call is not None and call.id in hidden:  # (a result's call the user hid)
            self.refused(answer, "CONTEXT_ITEM_HIDDEN", before)
            assert call.id in str(answer) and item_id in str(answer), answer
            return
        if op == "unsnip" and stale:
            self.refused(answer, "CONTEXT_EDIT_INVALID", before)
            return
        if op == "hide" and item.role == "tool_call" and item.call is not None and item.call.call_id in {
                c.call_id for c in agent.pending_calls}:  # (a subagent's call while the subagent runs)
            self.refused(answer, "CONTEXT_CALL_PENDING", before)
            assert item_id in str(answer), answer
            return
        assert not isinstance(answer, Exception), (op, item.role, answer)
        # The items the edit covers, in Full Context order: a call's result goes with it (and an
        # unsnipped result's call with it).
        calls = {item.call.call_id} if item.role == "tool_call" and item.call is not None else set()
        if op == "unsnip" and item.role == "tool_result" and item.call_id:
            calls.add(item.call_id)
        pair = [it.id for it in agent.items if it.id == item_id or (it.role == "tool_result" and it.call_id in calls)
                or (op == "unsnip" and it.role == "tool_call" and it.call is not None and it.call.call_id in calls)]
        expected = [i for i in pair if (i not in hidden if op == "hide" else i in hidden if op == "unhide"
                                        else i in snipped)]
        also_snip = [item_id] if op == "unhide" and stale and item_id in expected and item_id not in snipped else []
        new = self.events()[before:]
        assert (answer["op"], answer["agentId"], answer["itemIds"]) == (op, aid, expected), (item.role, answer)
        assert answer["changed"] is bool(expected), answer
        assert [(e.session_id, e.agent_id or MAIN_AGENT, e.kind, e.event.op, list(e.event.item_ids))  # type: ignore[union-attr]
                for e in new] == [(s.sid, aid, "context.edited", o, ids) for o, ids in
                                  ((op, expected), ("snip", also_snip)) if ids], (op, item.role, new)
        assert answer["seq"] == (new[-1].seq if new else None), answer  # (the last event written)
        after = self.state(s.sid).agents[aid]
        marks = item_marks(after)
        assert answer["items"] == [{"id": i, "context": marks[i]} for i in expected], answer
        shown = {it.id: it for it in working_context(after)}
        for i in pair:
            if op == "hide":
                assert i in after.hidden and marks[i] == "hidden", (i, marks[i])
                assert i not in shown or (shown[i].role == "tool_result" and shown[i].text == REMOVED_PLACEHOLDER), i
            elif op == "unhide":
                assert i not in after.hidden, i
            else:
                assert i not in after.snipped, i
        if op == "unhide" and item_id in expected and not stale:
            # Back where it stood unless something else keeps it out (a snip, a summary, its call
            # out of the Working Context).
            replaced = {r for it in after.items if it.role == "summary" for r in it.replaced_ids} - set(after.included)
            call_out = item.role == "tool_result" and not any(
                it.role == "tool_call" and it.call is not None and it.call.call_id == item.call_id for it in shown.values())
            if item_id not in after.snipped and item_id not in replaced and not call_out:
                assert item_id in shown, (item.role, marks[item_id])
        if stale and op == "unhide":
            assert item_id in after.snipped and item_id not in shown, "an unhide put a skill's stale instructions back"
        self.settle()

    def compact(self, data: st.DataObject) -> None:
        """A manual compaction (F-CTX-2), left running until the model answers it (drawn among
        the sessions with a conversation, when there are)."""
        s = self.talked(data)
        if s.sid in self.compactions:
            return
        before = len(self.events())
        pending = self.host.run(self.host.start_compaction, s.sid)
        if pending.done and isinstance(pending.answer, LensError):
            code = pending.answer.code
            assert code in ("SESSION_BUSY", "NOTHING_TO_COMPACT", "SESSION_DELETED"), pending.answer
            assert code != "SESSION_DELETED" or s.deleted
            self.refused(pending.answer, code, before)
            return
        self.compactions[s.sid] = pending
        self.settle()

    # ------------------------------------------------------------------ rules: the actors' life

    @rule(data=st.data())
    def time_passes(self, data: st.DataObject) -> None:
        """The idle timeout, or a restart of the runtime (``projections.db`` kept, or deleted: every
        session woken from its whole log)."""
        op = data.draw(st.sampled_from(["passivate", "passivate", "restart", "restart from the log"]))
        if op == "passivate":
            self.passivate()
        else:
            self.restart(op != "restart")

    def passivate(self) -> None:
        """The idle timeout passes: idle actors passivate, and wake with the same view."""
        views = {s.sid: self.view(s.sid) for s in self.sessions}
        idle = [s.sid for s in self.sessions
                if views[s.sid]["status"] == "idle" and not views[s.sid]["queued"] and s.sid not in self.compactions]

        async def go() -> None:
            self.host.clock.jump(IDLE_SECONDS + 1)
            deadline = time.monotonic() + SETTLE_SECONDS
            while set(idle) & set(self.rt.sup.live_sessions):
                assert time.monotonic() < deadline, "an idle actor never passivated"
                await trio.sleep(0)

        self.host.run(go)
        for sid in idle:
            assert self.view(sid) == views[sid], "a view changed across the idle timeout"
        self.settle()

    def restart(self, drop_snapshots: bool) -> None:
        """Stop the runtime and open it again on the same data directory."""
        views = {s.sid: self.view(s.sid) for s in self.sessions}
        busy = {s.sid for s in self.sessions if views[s.sid]["status"] != "idle" or s.sid in self.compactions}
        self.host.run(self.host.close)
        if drop_snapshots:
            for path in self.data_dir.glob(PROJECTIONS_DB + "*"):
                path.unlink()
        self.opened_at = len(self.events())
        self.requests_checked.clear()  # (a new model: it has received nothing yet)
        self.rt = self.host.run(self.host.open, self.data_dir, self.ids)
        self.settle()
        for s in self.sessions:
            if s.sid not in busy:
                assert self.view(s.sid) == views[s.sid], "an idle session's view changed across a restart"

    # ------------------------------------------------------------------ invariants

    def view(self, sid: str) -> dict[str, Any]:
        return self.host.run(self.rt.call, sid, GetView())

    @invariant()
    def holds_after_every_step(self) -> None:
        assert not self.host.errors, [r.getMessage() for r in self.host.errors]
        events = self.events()
        log_is_gap_free(events, [s.sid for s in self.sessions])
        for s in self.sessions:
            self.state_is_a_fresh_fold(s)
            self.context_rules_hold(s)
        self.requests_as_configured()
        self.history_stays_in_its_project()

    def from_snapshot(self, sid: str) -> SessionState | None:
        """The session's newest snapshot (as a wake-up reads it) with the log's tail after it
        folded in; ``None`` while it has none."""
        state = self.rt.snapshots.load(sid)
        if state is None:
            return None
        for e in self.of(sid):
            if e.seq > state.last_seq:
                apply(state, e)
        return state

    def state_is_a_fresh_fold(self, s: Session) -> None:
        """The live state equals a replay from zero and a replay from the newest snapshot, agent
        by agent: the Full Context, the edits' marks and the Working Context item by item."""
        fresh = self.fresh_state(s.sid)
        live = self.state(s.sid)
        copy = copied(fresh)
        assert set(live.agents) == set(copy.agents), s.tag
        snapped = self.from_snapshot(s.sid)
        for replay in ([copy] if snapped is None else [copy, copied(snapped)]):
            assert set(replay.agents) == set(live.agents), s.tag
            for aid, agent in replay.agents.items():
                assert working_context(live.agents[aid]) == working_context(agent), (s.tag, aid, replay is copy)
                assert item_marks(live.agents[aid]) == item_marks(agent), (s.tag, aid, replay is copy)
                assert live.agents[aid] == agent, (s.tag, aid, replay is copy)
        for aid, agent in copy.agents.items():
            self.well_formed(working_context(agent), agent, (s.tag, aid))
            names = skill_items(working_context(agent))
            assert len(names) == len(set(names)), f"{s.tag}/{aid}: a skill's instructions twice: {names}"
        assert live.deleted == s.deleted
        assert (live.model, live.thinking_level, live.name) == (copy.model, copy.thinking_level, copy.name)
        # (a manual compaction under way is work the log does not show yet: an idle session
        # reads running while it waits for its summary)
        pending = self.compactions.get(s.sid)
        assert self.view(s.sid) == session_view(fresh, unrecorded_work=pending is not None and not pending.done)

    def requests_as_configured(self) -> None:
        """Each ``model.requested`` carries the configuration in force at its seq; the model got
        exactly the requests recorded since it opened, in order, with that configuration (a
        change never reaches a request already sent)."""
        model = self.host.model
        assert model is not None
        received: dict[tuple[str, str], list[ModelRequest]] = {}
        for r in model.received:
            assert len(skill_items(r.items)) == len(set(skill_items(r.items))), "a request saw a skill twice"
            if not is_compaction(r):
                received.setdefault((tag_of(r), r.agent_id), []).append(r)
        recorded: dict[tuple[str, str], list[StoredEvent]] = {}
        sids = {s.tag: s.sid for s in self.sessions}
        for s in self.sessions:
            config: tuple[str | None, str | None] = (None, None)
            state = self.fresh_state(s.sid, self.of(s.sid)[0].seq)
            config = (state.model, state.thinking_level)
            for e in self.of(s.sid)[1:]:
                ev = e.event
                if isinstance(ev, t.ModelRequested):
                    assert (f"{ev.provider}/{ev.model}", ev.thinking_level) == config, (s.tag, e.seq, ev, config)
                    if e.seq > self.opened_at:
                        recorded.setdefault((s.tag, e.agent_id or MAIN_AGENT), []).append(e)
                elif isinstance(ev, t.SessionConfigured):
                    config = (ev.model or config[0], ev.thinking_level or config[1])
        assert set(received) == set(recorded), (sorted(received), sorted(recorded))
        for key, sent in received.items():
            assert [(r.model, r.thinking_level) for r in sent] == [
                (e.event.model, e.event.thinking_level) for e in recorded[key]], key  # type: ignore[union-attr]
            # Each request held the agent's Working Context as of its model.requested: a pruned
            # result as its placeholder, a summary in place of what it replaced, a steer placed.
            for r, e in list(zip(sent, recorded[key]))[self.requests_checked.get(key, 0):]:
                agent = self.fresh_state(sids[key[0]], e.seq).agents[key[1]]
                assert [(it.id, it.role, it.text) for it in r.items] == [
                    (it.id, it.role, it.text) for it in working_context(agent)], (key, e.seq)
                self.well_formed(r.items, agent, (key, e.seq))
                compiled = self.host.run(functools.partial(prepare, r, load_image=None, images=False))
                calls = {it.call.call_id for it in r.items if it.role == "tool_call" and it.call is not None}
                results = {it.call_id for it in r.items if it.role == "tool_result"}
                assert compiled.diagnostics.get("dropped_results", 0) == 0, (key, e.seq)
                assert compiled.diagnostics.get("synthetic_results", 0) == len(calls - results), (key, e.seq)
            self.requests_checked[key] = len(sent)

    def context_rules_hold(self, s: Session) -> None:
        """The session's log event by event, against the state just before each (F-CTX-2,
        F-ACT-3): a pruning or an automatic compaction only with it on in the settings then in
        force (saved value > config > default), pruning exactly the results prunable then; no
        model request (but one asked again) with a result left to prune while pruning is on; no
        main-agent request of a task with a steer still queued; an input placed or withdrawn
        only while queued (so once, and never both)."""
        events = self.of(s.sid)
        first = events[0].event
        if isinstance(first, t.SessionCreated) and first.forked_from_session:
            state = self.fresh_state(first.forked_from_session, first.forked_from_seq)
            _reset_for_fork(state, s.sid)
        else:
            state = SessionState(s.sid)
        # Per agent: whether automatic compaction was on at some point since the agent's last
        # event of its own (its compaction is decided there, and its summarizing request may wait
        # for the model while the setting is saved off: the compaction already under way goes on).
        auto_since: dict[str, bool] = {}
        for e in events:
            ev, aid = e.event, e.agent_id or MAIN_AGENT
            where = (s.tag, e.seq, e.kind)
            settings = resolve_settings(state.settings, CONTEXT)
            auto_since = {a: on or settings.auto_compaction for a, on in auto_since.items()}
            agent = state.agents.get(aid)
            if isinstance(ev, t.ContextEdited) and ev.op == "prune":
                assert settings.prune_tool_results and ev.reason == "auto", where
                assert agent is not None and list(ev.item_ids) == prunable_results(
                    agent, settings.keep_recent_rounds, settings.min_tokens), where
            elif isinstance(ev, t.ContextCompacted) and ev.trigger == "auto":
                assert settings.auto_compaction or auto_since.get(aid), where
            elif isinstance(ev, t.ModelRequested) and agent is not None and agent.open_request_seq is None:
                if settings.prune_tool_results:
                    assert not prunable_results(agent, settings.keep_recent_rounds, settings.min_tokens), where
                if aid == MAIN_AGENT:
                    assert not [q.request_id for q in state.queue if q.when_busy == "steer"], where
            elif isinstance(ev, (t.InputPlaced, t.InputWithdrawn)):
                record = state.inputs.get(ev.input_request_id)
                assert record is not None and record.status == "queued", (where, record)
            if not isinstance(ev, t.SessionConfigured) and not (isinstance(ev, t.ContextEdited) and ev.reason == "user"):
                auto_since[aid] = settings.auto_compaction
            apply(state, e)

    @staticmethod
    def well_formed(items: list[Any], agent: Any, where: Any) -> None:
        """A Working Context (or a request's items): each item once, no tool result without its
        call before it, each call answered at most once (a call left without a result is the
        request compilation's to answer, see :meth:`requests_as_configured`), and nothing the
        user hid, but a hidden result's placeholder beside its call."""
        ids = [it.id for it in items]
        assert len(ids) == len(set(ids)), (where, "an item twice")
        seen: set[str] = set()
        answered: set[str] = set()
        for it in items:
            if it.role == "tool_call" and it.call is not None:
                assert it.call.call_id not in seen, (where, "a call twice")
                seen.add(it.call.call_id)
            elif it.role == "tool_result":
                assert it.call_id in seen and it.call_id not in answered, (where, it.id, "a result without its call")
                answered.add(it.call_id)
            if it.id in agent.hidden:
                assert it.role == "tool_result" and it.text == REMOVED_PLACEHOLDER, (where, it.id, it.role, "a hidden item")

    def history_stays_in_its_project(self) -> None:
        """``history_search`` in a project finds exactly the items a live session of it holds
        unhidden (by any agent; a fork's inherited items are held by the fork too, hidden or not
        by its own hides), each once, under the session that recorded it; filtered by a session,
        exactly what that session holds unhidden, under it. So a hidden item is never found, and
        an unhidden one is found again."""
        service = self.rt.service
        assert service is not None
        owner = {e.seq: e.session_id for e in self.events()}
        for project in PROJECTS:
            mine = [s for s in self.sessions if s.project == project]
            held = {s.sid: self.findable(self.fresh_state(s.sid)) for s in mine if not s.deleted}
            hits = self.search(project, None)
            found = [h.context_item_id for h in hits]
            assert len(found) == len(set(found)), (project, "an item found twice", found)
            assert set(found) == {i for ids in held.values() for i in ids}, (project, sorted(found), held)
            for hit in hits:
                assert hit.project_id == project and hit.session_id == owner[hit.seq], (project, hit)
            for s in mine:
                hits = self.search(project, s.sid)
                assert {h.context_item_id for h in hits} == held.get(s.sid, set()), (s.tag, hits, held.get(s.sid))
                assert {h.session_id for h in hits} <= {s.sid}, (s.tag, hits)

    @staticmethod
    def findable(state: SessionState) -> set[str]:
        """The ids of the items of ``state`` (every agent's) a search for ``marker`` finds: its
        word in their text (a tool call's: its name and arguments), and not hidden."""
        out = set()
        for agent in state.agents.values():
            for it in agent.items:
                words = f"{it.call.name} {it.call.arguments}" if it.role == "tool_call" and it.call is not None else it.text
                if re.search(r"\bmarker\b", words, re.IGNORECASE) and it.id not in agent.hidden:
                    out.add(it.id)
        return out

    def search(self, project: str, session_id: str | None) -> list[Any]:
        """Every hit of ``marker`` in ``project`` (page after page)."""
        service = self.rt.service
        assert service is not None

        async def go() -> list[Any]:
            hits: list[Any] = []
            after = None
            while True:
                page, after = await service.history_search(project, "marker", session_id=session_id,
                                                           after_item_id=after, limit=100)
                hits += page
                if after is None:
                    return hits

        return self.host.run(go)

async def test_several_sessions_through_their_operations_in_any_order(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    autojump_clock.autojump_threshold = math.inf  # (the machine moves it)
    workspaces = {}
    for project in PROJECTS:
        ws = workspaces[project] = tmp_path / "ws" / project
        (ws / "skills" / "review").mkdir(parents=True)
        (ws / "skills" / "review" / "SKILL.md").write_text(SKILL.format(project=project))
        (ws / "shot.png").write_bytes(PNG)
    # One executor pool for every example (its children never stop for idleness here: the
    # machine's clock jumps past the idle timeout).
    async with running_pool(tmp_path / "executors", workspaces, idle_stop_s=1e12) as pool:
        # (of the workspace tools, ``view_image`` alone: image results to snip and include)
        view_image = [spec for spec in workspace_tools(pool, ArtifactStore(tmp_path / "artifacts"))
                      if spec.name == "view_image"]
        tools = builtin_tools([skill_tool(pool), *view_image])
        async with trio.open_nursery() as nursery:
            host = Host(nursery, autojump_clock, trio.lowlevel.current_trio_token(), tmp_path / "examples",
                        lambda model: {"snapshot_every": SNAPSHOT_EVERY, "idle_seconds": IDLE_SECONDS,
                                       "tools": tools, "context": CONTEXT, "model_configs": MODELS})
            host.root.mkdir()
            await run_machine(SessionsMachine, host, MAX_EXAMPLES, STEPS)
