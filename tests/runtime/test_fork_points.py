"""F-ACT-7, F-TOOL-6: a fork made at any event of a run, and what the fork's next run makes of it.

One source session runs a round of calls that covers the in-between points a fork can be made
at: a ``skill`` load from the main agent and from a subagent (a ``skill`` call finished, its
instructions due after the round's last result), a tool call started but not finished, a
``subagent`` under way, a background ``job`` running, a model request open, an ``ask_user``
question open. The source is then forked at every one of its events, each fork is given an
input, and its log, Working Context and next model request are checked: the skill's
instructions appended exactly once (never again, never lost), before the fork's input; no
result without its call, no call twice, every call without a result answered by the request
compiler's synthetic result; nothing of the source's round run again in the fork.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from conftest import open_runtime
from machine_parts import Errors
from projections.session_state import MAIN_AGENT, SessionState, apply, working_context
from runtime.actor import Answer, Configure
from runtime.providers.compile import prepare
from runtime.providers.faux import FauxProvider, FauxToolCall, FauxTurn
from tests.executor.conftest import running_pool
from tools.jobs import job_tool
from tools.registry import builtin_tools
from tools.skills import skill_tool

SKILL = "---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS\n"
SCRIPT = [
    # The main agent's round: a skill load first (its instructions due after the last result), then
    # a call, a subagent that loads the skill too, and a background job.
    FauxTurn(when="GO-1", tool_calls=[FauxToolCall("skill", {"name": "review"}), FauxToolCall("get_system_time", {}),
                                      FauxToolCall("subagent", {"prompt": "SUB-1"}),
                                      FauxToolCall("job", {"action": "start", "command": "echo JOB-1"})]),
    FauxTurn(when="SUB-1", tool_calls=[FauxToolCall("skill", {"name": "review"}), FauxToolCall("get_system_time", {})]),
    FauxTurn(when="started background job", tool_calls=[FauxToolCall("ask_user", {"questions": [
        {"id": "q", "text": "Go on?", "options": [{"id": "y", "label": "yes"}]}]})]),
    FauxTurn(when="ANSWER-1", text="DONE-1"),
]


def skill_sources(items: list) -> list[str]:
    return [it.source for it in items if it.role == "system" and it.source.startswith("skill:")]


async def test_a_fork_at_any_event_of_a_round_appends_a_due_skill_once_and_leaves_no_orphan(tmp_path: Path,
                                                                                          autojump_clock) -> None:
    # The mock clock stands still: nothing here waits on time (an executor's start would time out
    # at once if the clock jumped while the child starts).
    autojump_clock.autojump_threshold = math.inf
    ws = tmp_path / "ws"
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(SKILL)
    errors: list[logging.LogRecord] = []
    handler = Errors(errors)
    logging.getLogger("lens").addHandler(handler)
    faux = FauxProvider("faux", SCRIPT)
    try:
        async with running_pool(tmp_path / "executors", {"p1": ws}, idle_stop_s=1e12) as pool:
            tools = builtin_tools([skill_tool(pool), job_tool(pool)])
            async with open_runtime(tmp_path / "data", faux=faux, tools=tools, snapshot_every=5) as rt:
                src = await rt.session("p1", model="faux/src")
                await rt.submit(src, "r1", "GO-1")
                asked = await rt.until(src, lambda s: bool(s.questions))
                (qid,) = asked.questions
                await rt.call(src, Answer(qid, {"kind": "answer", "text": "ANSWER-1"}))
                await rt.until(src, lambda s: s.running_task is None and not s.queue and bool(s.jobs)
                               and all(j.status != "running" for j in s.jobs.values()))
                await rt.idle(src)
                events = await rt.events(src)
                kinds = [e.kind for e in events]
                # The source met every in-between point the forks are made at.
                for kind in ("skill.loaded", "tool.started", "agent.started", "job.started", "question.asked",
                             "question.answered", "job.finished"):
                    assert kind in kinds, kind
                assert [e.agent_id or MAIN_AGENT for e in events if e.kind == "skill.loaded"].count(MAIN_AGENT) == 1

                met: set[str] = set()
                for e in events:
                    met |= await fork_and_check(rt, src, e.seq, faux)
                # Every in-between point was forked at.
                assert met == {"main skill due", "subagent skill due", "call running", "subagent running",
                               "job running", "request open", "question open", "skill loaded"}, met
        assert not errors, [r.getMessage() for r in errors]
    finally:
        logging.getLogger("lens").removeHandler(handler)


async def fork_and_check(rt, src: str, seq: int, faux: FauxProvider) -> set[str]:
    """Fork ``src`` at ``seq``, give the fork an input, check it; returns the points the source
    was at there."""
    fork = await rt.sup.fork_session(src, seq)
    at: SessionState = await rt.state(fork)
    met = {name for name, holds in [
        ("main skill due", bool(at.agents.get(MAIN_AGENT) and at.agents[MAIN_AGENT].skills_due)),
        ("subagent skill due", any(a.skills_due for a in at.agents.values() if a.agent_id != MAIN_AGENT)),
        ("skill loaded", bool(at.agents.get(MAIN_AGENT) and at.agents[MAIN_AGENT].skills)),
    ] if holds}
    source_state = await source_state_at(rt, src, seq)
    met |= {name for name, holds in [
        ("call running", any(a.running_call for a in source_state.agents.values())),
        ("subagent running", any(a.status == "running" for a in source_state.agents.values() if a.agent_id != MAIN_AGENT)),
        ("job running", any(j.status == "running" for j in source_state.jobs.values())),
        ("request open", any(a.open_request_seq is not None for a in source_state.agents.values())),
        ("question open", bool(source_state.questions)),
    ] if holds}
    main = at.agents.get(MAIN_AGENT)
    due = bool(main is not None and main.skills_due)
    loaded = main is not None and "review" in main.skills
    shown = working_context(main) if main is not None else []
    assert len(skill_sources(shown)) <= 1, (seq, skill_sources(shown))
    await rt.call(fork, Configure(model=f"faux/fork-{seq}"))
    await rt.submit(fork, "f1", "FORK-INPUT")
    after = await rt.idle(fork)
    where = f"a fork at seq {seq}"
    mine = await rt.events(fork)
    new = [e for e in mine if e.kind != "session.created"]
    # Nothing of the source's round runs in the fork: its own task alone, in the main agent.
    assert {e.agent_id or MAIN_AGENT for e in new} == {MAIN_AGENT}, (where, [(e.kind, e.agent_id) for e in new])
    assert not [e for e in new if e.kind in ("tool.started", "tool.finished", "job.started", "question.asked")], where
    loads = [e for e in new if e.kind == "skill.loaded"]
    assert len(loads) == (1 if due and not loaded else 0), (where, [(e.kind, getattr(e.event, "text", "")) for e in new])
    placed = next(e for e in new if e.kind == "input.placed")
    assert all(e.seq < placed.seq for e in loads), (where, "the due skill went in after the fork's input")
    main_after = after.agents[MAIN_AGENT]
    wc = working_context(main_after)
    assert skill_sources(wc) == (["skill:review"] if due or loaded else []), (where, skill_sources(wc))
    # The fork's one request: its items once each, the skill's instructions before the input.
    (request,) = [r for r in faux.requests if r.model == f"fork-{seq}"]
    ids = [it.id for it in request.items]
    assert len(ids) == len(set(ids)), (where, "an item twice in the request")
    roles = [(it.role, it.source) for it in request.items]
    if due or loaded:
        assert roles.index(("system", "skill:review")) < max(i for i, r in enumerate(roles) if r[0] == "user"), where
    calls = [it.call.call_id for it in request.items if it.role == "tool_call" and it.call is not None]
    assert len(calls) == len(set(calls)), (where, "a call twice")
    results = [it.call_id for it in request.items if it.role == "tool_result"]
    assert len(results) == len(set(results)), (where, "a result twice")
    assert set(results) <= set(calls), (where, "a result without its call")
    compiled = await prepare(request, load_image=None, images=False)
    assert compiled.diagnostics.get("dropped_results", 0) == 0, where
    assert compiled.diagnostics.get("synthetic_results", 0) == len(set(calls) - set(results)), where
    assert after.running_task is None and not after.queue and not after.questions, where
    assert [x for x in mine if x.kind == "input.placed"] == [placed], where
    assert "FORK-INPUT" in [it.text for it in wc if it.role == "user"], where
    return met


async def source_state_at(rt, src: str, seq: int) -> SessionState:
    """The source's own state as of ``seq`` (a fold of its log: what was under way there)."""
    state = SessionState(src)
    for e in await rt.events(src):
        if e.seq <= seq:
            apply(state, e)
    return state
