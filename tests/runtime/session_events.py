"""Generated event sequences of one session, shaped as the actor records them.

:func:`session_events` draws (through Hypothesis' ``data``) a run of a session's life — inputs
queued, placed, withdrawn and steered; model requests answered, failed (aborted ones keeping
the text they had streamed) and cut off, with tool calls, usage with counts reported or not (the total input near the
largest total a sum holds, too), and reasoning blocks; tool calls started and finished (skill loads among them); subagents started
and finished; aborts; context edits of every op on items that exist (and on ids that do not),
compactions and failed ones; todos, questions, jobs, file edits and reverts, skills and
capabilities, configuration and names — one event at a time, each chosen from what the state
folded so far allows, so the sequence is one a session could have recorded. The events carry the
envelope the log would give them (``seq``, ``session_seq``, agent, task, request id).

:func:`summed_usage` is what those events' usage sums to, per agent and for the session, read
from the events alone (not from the fold), by the rule of ``UsageTotals``: an unreported count,
or one that would take a total past ``MAX_USAGE_TOTAL``, is counted in ``unreported``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from events import types as t
from events.reader import StoredEvent
from projections.session_state import MAIN_AGENT, MAX_USAGE_TOTAL, USAGE_FIELDS, SessionState, UsageTotals, apply
from runtime.views import session_view

TEXTS = st.sampled_from(["", "hello", "ünïcode ✓", "line one\nline two", "x" * 300])
EDIT_OPS = ("snip", "unsnip", "include_result", "prune", "hide", "unhide")
COUNTS = st.one_of(st.none(), st.integers(0, 5000))
# The total input: unknown, a count, or one near the largest total (two of which overflow a sum:
# counted as not reported).
TOTAL_COUNTS = st.one_of(st.none(), st.integers(0, 5000), st.integers(MAX_USAGE_TOTAL - 5000, MAX_USAGE_TOTAL))
USAGE_EVENTS = (t.ModelResponded, t.ModelFailed, t.ModelCutOff, t.ContextCompacted, t.ContextCompactionFailed)
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6,
)

KINDS = (
    "submit", "place", "withdraw", "steer", "request", "respond", "fail", "cut_off", "tool_start",
    "tool_finish", "task_finish", "subagent", "subagent_finish", "abort", "edit", "compact",
    "compaction_failed", "todo", "ask", "settle_question", "job_start", "job_finish", "file_edit",
    "revert", "skill_load", "skill_unload", "capability", "instruction", "configure", "rename",
    # (drawn more often: the model and tool rounds, and the edits over what they add)
    "respond", "respond", "respond", "tool_finish", "tool_finish", "tool_finish", "tool_start", "edit", "edit",
    "compact",
)


class Recorder:
    """Appends drawn events to ``events`` with the log's envelope and folds each into ``state``
    (the full replay, kept as the sequence grows, so the next draw sees what exists)."""

    def __init__(self, session_id: str, project_id: str = "p1", first_seq: int = 1,
                 state: SessionState | None = None) -> None:
        self.session_id = session_id
        self.project_id = project_id
        self.seq = first_seq - 1
        self.session_seq = 0
        self.state = state if state is not None else SessionState(session_id)
        self.events: list[StoredEvent] = []
        self.n = 0  # for fresh ids

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def add(self, event: t._Event, agent_id: str | None = MAIN_AGENT, task_id: str | None = None,
            request_id: str | None = None) -> StoredEvent:
        self.seq += 1
        self.session_seq += 1
        se = StoredEvent(self.seq, 1_700_000_000_000 + self.seq, self.project_id, self.session_id, self.session_seq,
                         agent_id, task_id, t.kind_of(event), request_id, event)
        self.events.append(se)
        apply(self.state, se)
        return se


def _usage(data: st.DataObject) -> t.Usage:
    return t.Usage(*(data.draw(COUNTS) for _ in range(5)), total_input_tokens=data.draw(TOTAL_COUNTS))


def summed_usage(events: list[StoredEvent]) -> dict[str | None, UsageTotals]:
    """Per agent, and under ``None`` the session's: the totals the events' usage sums to (see the
    module docstring); an agent or session without usage is absent (its totals: ``UsageTotals()``)."""
    out: dict[str | None, UsageTotals] = {}
    for e in events:
        usage = getattr(e.event, "usage", None) if isinstance(e.event, USAGE_EVENTS) else None
        if usage is None:
            continue
        for key in (e.agent_id, None):
            total = out.setdefault(key, UsageTotals())
            total.requests += 1
            for name in USAGE_FIELDS:
                v, known = getattr(usage, name), getattr(total, name)
                if v is None or (known or 0) + v > MAX_USAGE_TOTAL:
                    total.unreported[name] = total.unreported.get(name, 0) + 1
                else:
                    setattr(total, name, (known or 0) + v)
    return out


VIEW_COUNTS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens",
               "totalInputTokens")  # (USAGE_FIELDS as the view names them)


def assert_usage_summed(state: SessionState, events: list[StoredEvent]) -> None:
    """``state``'s usage (the session's and each agent's, as folded and as the view shows it) is
    what ``events`` sum to (:func:`summed_usage`), and the session's is the sum of its agents'
    wherever no total (the session's, an agent's) left a count out for the bound."""
    summed = summed_usage(events)
    assert state.usage == summed.get(None, UsageTotals())
    for agent_id, agent in state.agents.items():
        assert agent.usage == summed.get(agent_id, UsageTotals()), agent_id
    assert set(summed) - {None} <= set(state.agents)
    agents = [a.usage for a in state.agents.values()]
    assert state.usage.requests == sum(u.requests for u in agents)
    usages = [e.event.usage for e in events if isinstance(e.event, USAGE_EVENTS) and e.event.usage is not None]
    for name in USAGE_FIELDS:
        unknown = sum(getattr(u, name) is None for u in usages)
        if state.usage.unreported.get(name, 0) == unknown == sum(u.unreported.get(name, 0) for u in agents):
            known = [getattr(u, name) for u in agents if getattr(u, name) is not None]
            assert getattr(state.usage, name) == (sum(known) if known else None), name
    view = session_view(state)
    shown = {a["agentId"]: a["usage"] for a in view["agents"]}
    for key, usage in [(None, view["usage"]), *shown.items()]:
        want = summed.get(key, UsageTotals())
        assert usage["requests"] == want.requests, key
        assert usage["unreported"] == {v: want.unreported.get(f, 0) for f, v in zip(USAGE_FIELDS, VIEW_COUNTS)}, key
        assert [usage[v] for v in VIEW_COUNTS] == [getattr(want, f) for f in USAGE_FIELDS], key


def _content(data: st.DataObject) -> list[t.ContentPart]:
    parts: list[t.ContentPart] = [t.TextPart(data.draw(TEXTS))]
    if data.draw(st.booleans()):
        parts.append(data.draw(st.sampled_from([t.TextPart("more"), t.ImagePart("art_1", "image/png")])))
    return parts


def _possible(kind: str, s: SessionState, calling: list[str]) -> bool:
    """Whether ``step`` can record a ``kind`` event in state ``s`` (so every draw records one)."""
    if kind in ("place", "withdraw", "steer"):
        return bool(s.queue)
    if kind in ("tool_start", "tool_finish"):
        return bool(calling)
    if kind == "task_finish":
        return s.running_task is not None
    if kind == "subagent_finish":
        return any(a.status == "running" for aid, a in s.agents.items() if aid != MAIN_AGENT)
    if kind == "abort":
        return s.running_task is not None or bool(s.queue)
    if kind == "settle_question":
        return bool(s.questions)
    if kind == "revert":
        return bool(s.file_edits)
    if kind == "compact":
        return any(a.items for a in s.agents.values())
    return True


def step(rec: Recorder, data: st.DataObject) -> None:
    """Draw and record one plausible next event (or a few that go together)."""
    s = rec.state
    agents = sorted(s.agents)
    calling = [x for x in agents if s.agents[x].pending_calls]
    kind = data.draw(st.sampled_from([k for k in KINDS if _possible(k, s, calling)]))
    if kind in ("tool_start", "tool_finish"):
        agent_id = data.draw(st.sampled_from(calling))
    else:
        agent_id = data.draw(st.sampled_from(agents)) if agents else MAIN_AGENT
    a = s.agents.get(agent_id)
    task = (a.task_id if a is not None else None) or s.running_task
    if kind == "submit":
        rid = rec.fresh("r")
        rec.add(t.InputSubmitted(content=_content(data), when_busy=data.draw(st.sampled_from(["followUp", "steer"]))),
                task_id=None, request_id=rid)
    elif kind == "place" and s.queue:
        q = s.queue[0]
        if s.running_task is None:
            task = rec.fresh("task_")
            rec.add(t.TaskStarted(input_request_id=q.request_id), task_id=task)
        rec.add(t.InputPlaced(input_request_id=q.request_id), task_id=s.running_task)
    elif kind == "withdraw" and s.queue:
        q = data.draw(st.sampled_from(s.queue))
        rec.add(t.InputWithdrawn(input_request_id=q.request_id, reason="user"))
    elif kind == "steer" and s.queue:
        q = data.draw(st.sampled_from(s.queue))
        rec.add(t.InputRequeued(input_request_id=q.request_id))
    elif kind == "request":
        rec.add(t.ModelRequested(provider="faux", model="faux-1", attempt=data.draw(st.integers(1, 3))),
                agent_id=agent_id, task_id=task)
    elif kind == "respond":
        calls = [t.ToolCall(rec.fresh("call_"), data.draw(st.sampled_from(["read_file", "skill", "todo", "job"])),
                            '{"a": 1}') for _ in range(data.draw(st.integers(0, 2)))]
        blocks = data.draw(st.sampled_from([[], [{"type": "thinking", "thinking": "hm", "signature": "s"}]]))
        rec.add(t.ModelResponded(text=data.draw(TEXTS), tool_calls=calls, usage=_usage(data), reasoning_blocks=blocks),
                agent_id=agent_id, task_id=task)
    elif kind == "fail":
        # (an abort's or a failure's, each keeping the text its answer had streamed, or none:
        # an assistant item marked aborted or failed)
        aborted = data.draw(st.booleans())
        rec.add(t.ModelFailed(code="ABORTED" if aborted else "RATE_LIMITED",
                              message="aborted by the user" if aborted else "slow down",
                              usage=_usage(data) if data.draw(st.booleans()) else None,
                              partial_text=data.draw(TEXTS)),
                agent_id=agent_id, task_id=task)
    elif kind == "cut_off":
        rec.add(t.ModelCutOff(usage=_usage(data)), agent_id=agent_id, task_id=task)
    elif kind == "tool_start" and a is not None and a.pending_calls:
        c = a.pending_calls[0]
        rec.add(t.ToolStarted(call_id=c.call_id, name=c.name, arguments=c.arguments), agent_id=agent_id, task_id=task)
    elif kind == "tool_finish" and a is not None and a.pending_calls:
        c = data.draw(st.sampled_from(a.pending_calls))
        status = data.draw(st.sampled_from(["ok", "error", "interrupted", "skipped", "denied"]))
        structured: Any = data.draw(JSONISH)
        if c.name == "skill" and data.draw(st.booleans()):
            structured = {"name": data.draw(st.sampled_from(["review", "deploy"])), "instructions_follow": True}
        rec.add(t.ToolFinished(call_id=c.call_id, name=c.name, status=status, is_error=status != "ok",
                               content=_content(data), structured_content=structured,
                               rerun_after=data.draw(st.sampled_from([None, "the executor died"]))),
                agent_id=agent_id, task_id=task)
    elif kind == "task_finish" and s.running_task is not None:
        rec.add(t.TaskFinished(status=data.draw(st.sampled_from(["completed", "failed", "interrupted"]))),
                task_id=s.running_task)
    elif kind == "subagent":
        main = s.agents.get(MAIN_AGENT)
        parent_call = main.pending_calls[0].call_id if main is not None and main.pending_calls else None
        sub = rec.fresh("sub_")
        rec.add(t.AgentStarted(parent_agent_id=MAIN_AGENT, parent_call_id=parent_call, prompt=data.draw(TEXTS),
                               tools=["read_file"]), agent_id=sub, task_id=s.running_task)
        rec.add(t.TaskStarted(), agent_id=sub, task_id=s.running_task)
    elif kind == "subagent_finish":
        running = [x for x in agents if x != MAIN_AGENT and s.agents[x].status == "running"]
        if running:
            sub = data.draw(st.sampled_from(running))
            rec.add(t.TaskFinished(), agent_id=sub, task_id=s.agents[sub].task_id)
            rec.add(t.AgentFinished(status=data.draw(st.sampled_from(["completed", "failed", "aborted"])),
                                    result=data.draw(TEXTS)), agent_id=sub, task_id=s.agents[sub].task_id)
    elif kind == "abort" and (s.running_task is not None or s.queue):
        rec.add(t.RunAborted(), task_id=s.running_task)
        for q in list(s.queue):
            rec.add(t.InputWithdrawn(input_request_id=q.request_id, reason="abort"))
        if s.running_task is not None:
            rec.add(t.TaskFinished(status="aborted"), task_id=s.running_task)
    elif kind == "edit" and a is not None:
        ids = [it.id for it in a.items] + ["c999999"]
        picked = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3))
        rec.add(t.ContextEdited(op=data.draw(st.sampled_from(EDIT_OPS)), item_ids=picked), agent_id=agent_id)
    elif kind == "compact":
        agent_id = data.draw(st.sampled_from([x for x in agents if s.agents[x].items]))
        ids = [it.id for it in s.agents[agent_id].items]
        picked = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=4, unique=True))
        rec.add(t.ContextCompacted(summary=data.draw(TEXTS) or "summary", replaced_item_ids=picked,
                                   trigger=data.draw(st.sampled_from(["manual", "auto"])), usage=_usage(data)),
                agent_id=agent_id, task_id=task)
    elif kind == "compaction_failed":
        # (usage None: an automatic compaction whose request failed before any answer)
        usage = None if data.draw(st.booleans()) else _usage(data)
        rec.add(t.ContextCompactionFailed(code="MODEL_FAILED", message="no", usage=usage), agent_id=agent_id)
    elif kind == "todo":
        items = [t.TodoItem(f"t{i}", data.draw(TEXTS), data.draw(st.sampled_from(["pending", "in_progress", "done"])))
                 for i in range(data.draw(st.integers(0, 3)))]
        rec.add(t.TodoUpdated(items=items, call_id=rec.fresh("call_")), task_id=s.running_task)
    elif kind == "ask":
        qid = rec.fresh("q_")
        rec.add(t.QuestionAsked(question_id=qid, questions=[t.Question("a", "which?", [t.QuestionOption("o1", "one")])],
                                call_id=rec.fresh("call_")), agent_id=agent_id, task_id=task)
    elif kind == "settle_question" and s.questions:
        qid = data.draw(st.sampled_from(sorted(s.questions)))
        if data.draw(st.booleans()):
            rec.add(t.QuestionAnswered(question_id=qid, answer={"kind": "answer", "optionIds": ["o1"]}))
        else:
            rec.add(t.QuestionCancelled(question_id=qid, reason="session restarted"))
    elif kind == "job_start":
        rec.add(t.JobStarted(job_id=rec.fresh("job_"), command="make test", call_id=rec.fresh("call_")),
                agent_id=agent_id, task_id=task)
    elif kind == "job_finish":
        running = [j for j in s.jobs.values() if j.status == "running"]
        job_id = data.draw(st.sampled_from(running)).job_id if running else rec.fresh("job_")  # (a finish alone, too)
        rec.add(t.JobFinished(job_id=job_id, status=data.draw(st.sampled_from(["exited", "crashed", "stopped", "lost"])),
                              exit_code=data.draw(st.one_of(st.none(), st.integers(0, 2))), output_tail="tail\n"))
    elif kind == "file_edit":
        rec.add(t.FileEdited(call_id=data.draw(st.sampled_from(["call_f1", "call_f2"])), path="a.txt",
                             after_artifact_id="art_2"), agent_id=agent_id, task_id=task)
    elif kind == "revert" and s.file_edits:
        rec.add(t.FileReverted(call_id=rec.fresh("call_"), reverted_call_id=data.draw(st.sampled_from(sorted(s.file_edits))),
                               paths=["a.txt"], partial=data.draw(st.booleans())), agent_id=agent_id, task_id=task)
    elif kind == "skill_load":
        due = a.skills_due if a is not None else []
        if due and data.draw(st.booleans()):
            rec.add(t.SkillLoaded(name=due[0].name, instructions="STEPS", digest="d1", call_id=due[0].call_id),
                    agent_id=agent_id, task_id=task)
        else:
            rec.add(t.SkillLoaded(name=data.draw(st.sampled_from(["review", "deploy"])), instructions=data.draw(TEXTS),
                                  digest=data.draw(st.sampled_from(["", "d2"]))), agent_id=agent_id, task_id=task)
    elif kind == "skill_unload":
        rec.add(t.SkillUnloaded(name=data.draw(st.sampled_from(["review", "deploy"]))), agent_id=agent_id, task_id=task)
    elif kind == "capability":
        rec.add(t.CapabilityLoaded(capability_ids=data.draw(st.lists(st.sampled_from(["web_fetch", "mcp__x__y"]),
                                                                     min_size=1, max_size=3))), agent_id=agent_id)
    elif kind == "instruction":
        rec.add(t.InstructionAppended(text=data.draw(TEXTS) or "be brief", source="user"), agent_id=agent_id)
    elif kind == "configure":
        rec.add(t.SessionConfigured(
            model=data.draw(st.sampled_from([None, "faux/faux-2"])),
            thinking_level=data.draw(st.sampled_from([None, "high"])),
            settings=data.draw(st.sampled_from([{}, {"compactionTriggerPercent": 70},
                                                {"toolPolicy": {"read_file": {"approval": "never"}}},
                                                {"toolPolicy": {"read_file": None}}])),
            reset=data.draw(st.lists(st.sampled_from(["model", "thinking_level", "name", "compactionTriggerPercent"]),
                                     max_size=2, unique=True))))
    elif kind == "rename":
        rec.add(t.SessionNamed(name=data.draw(st.sampled_from(["one", "two"]))))


def session_events(data: st.DataObject, session_id: str = "s1", *, max_steps: int = 40,
                   rec: Recorder | None = None) -> Recorder:
    """A session created, then up to ``max_steps`` drawn steps (see the module docstring)."""
    rec = rec or Recorder(session_id)
    if not rec.state.created:
        rec.add(t.SessionCreated(model="faux/faux-1"))
    for _ in range(data.draw(st.integers(max_steps // 2, max_steps))):
        step(rec, data)
    return rec
