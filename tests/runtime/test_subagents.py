"""F-ACT-5: subagents have their own ids and contexts in the same session; main-only tools are
withheld from them and refused at execution."""

from __future__ import annotations

from conftest import by_kind, one
from runtime.providers.faux import FauxError, FauxToolCall, FauxTurn

MAIN_ONLY = {"todo", "subagent"}


def delegate(marker: str, prompt: str, **extra) -> FauxTurn:
    return FauxTurn(when=marker, tool_calls=[FauxToolCall("subagent", {"prompt": prompt, **extra})])


async def test_subagent_runs_with_its_own_context_and_returns_its_answer(rt, autojump_clock):
    rt.faux.script = [
        delegate("delegate please", "SUBJOB count the files"),
        FauxTurn(when="SUBJOB", text="sub says 42"),
    ]
    sid = await rt.session()
    st = await rt.run_to_idle(sid, "r1", "delegate please")
    evs = await rt.events(sid)
    call = one(evs, "tool.started", name="subagent")
    sub_id = f"sub_{call.event.call_id}"
    started = one(evs, "agent.started")
    assert started.agent_id == sub_id and started.session_id == sid
    assert (started.event.parent_agent_id, started.event.parent_call_id, started.event.role) == (
        "main", call.event.call_id, "subagent")
    assert started.event.prompt == "SUBJOB count the files"
    assert started.task_id == call.task_id  # part of the same task
    fin = one(evs, "agent.finished")
    assert (fin.agent_id, fin.event.status, fin.event.result) == (sub_id, "completed", "sub says 42")
    # The subagent's final text is the parent's tool result.
    result = one(evs, "tool.finished", name="subagent")
    assert result.agent_id == "main" and result.event.status == "ok"
    assert result.event.content[0].text == "sub says 42"
    assert result.event.structured_content == {"agent_id": sub_id, "status": "completed", "result": "sub says 42"}
    assert started.seq < fin.seq < result.seq
    # Separate contexts: the subagent saw only its prompt; main saw the result, not the sub's turns.
    sub = st.agents[sub_id]
    assert [(it.role, it.text) for it in sub.items] == [("user", "SUBJOB count the files"), ("assistant", "sub says 42")]
    assert sub.role == "subagent" and sub.status == "finished"
    main = st.agents["main"]
    assert [it.role for it in main.items] == ["user", "tool_call", "tool_result", "assistant"]
    assert main.items[-1].text == "The tool answered: sub says 42"
    sub_requests = [r for r in rt.faux.requests if r.agent_id == sub_id]
    assert len(sub_requests) == 1 and [it.text for it in sub_requests[0].items] == ["SUBJOB count the files"]
    assert one(evs, "task.finished").event.status == "completed"


async def test_main_only_tools_are_withheld_from_subagents(rt, autojump_clock):
    rt.faux.script = [
        delegate("delegate please", "SUBJOB look around"),
        FauxTurn(when="SUBJOB", text="looked"),
    ]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "delegate please")
    by_agent = {r.agent_id: {tool["name"] for tool in r.tools} for r in rt.faux.requests}
    sub_tools = next(v for k, v in by_agent.items() if k != "main")
    assert MAIN_ONLY <= by_agent["main"]
    assert not (MAIN_ONLY & sub_tools)
    assert sub_tools == {"get_system_time", "sleep_milliseconds"}


async def test_subagent_tool_allowlist_narrows_what_it_is_offered(rt, autojump_clock):
    rt.faux.script = [
        delegate("delegate please", "SUBJOB time only", tools=["get_system_time", "todo"]),
        FauxTurn(when="SUBJOB", tool_calls=[FauxToolCall("sleep_milliseconds", {"milliseconds": 1})]),
    ]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "delegate please")
    sub_req = next(r for r in rt.faux.requests if r.agent_id != "main")
    assert [tool["name"] for tool in sub_req.tools] == ["get_system_time"]  # todo stays main-only
    evs = await rt.events(sid)
    refused = one(evs, "tool.finished", name="sleep_milliseconds")
    assert refused.agent_id == sub_req.agent_id
    assert (refused.event.status, refused.event.error_code) == ("error", "TOOL_UNKNOWN")


async def test_main_only_tools_are_refused_at_execution(rt, autojump_clock):
    rt.faux.script = [
        delegate("delegate please", "SUBJOB sneaky"),
        FauxTurn(when="SUBJOB", tool_calls=[
            FauxToolCall("todo", {"items": [{"id": "1", "text": "x"}]}),
            FauxToolCall("subagent", {"prompt": "nested"}),
        ]),
    ]
    sid = await rt.session()
    st = await rt.run_to_idle(sid, "r1", "delegate please")
    evs = await rt.events(sid)
    sub_id = one(evs, "agent.started").agent_id
    sub_results = [e for e in by_kind(evs, "tool.finished") if e.agent_id == sub_id]
    assert [(e.event.name, e.event.status, e.event.error_code) for e in sub_results] == [
        ("todo", "error", "TOOL_MAIN_ONLY"), ("subagent", "error", "TOOL_MAIN_ONLY")]
    assert by_kind(evs, "todo.updated") == [] and st.todos == []
    assert len(by_kind(evs, "agent.started")) == 1  # no nested subagent
    # The refusal reached the subagent as data; it answered and the parent got that answer.
    fin = one(evs, "agent.finished")
    assert fin.event.status == "completed" and "TOOL_MAIN_ONLY" in fin.event.result
    assert one(evs, "task.finished").event.status == "completed"


async def test_a_failing_subagent_is_an_error_result_for_the_parent(rt, autojump_clock):
    rt.faux.script = [
        delegate("delegate please", "SUBJOB doomed"),
        FauxTurn(when="SUBJOB", error=FauxError("OVERLOADED", "try later")),
    ]
    sid = await rt.session()
    st = await rt.run_to_idle(sid, "r1", "delegate please")
    evs = await rt.events(sid)
    fin = one(evs, "agent.finished")
    assert fin.event.status == "failed" and "OVERLOADED" in fin.event.result
    res = one(evs, "tool.finished", name="subagent")
    assert (res.event.status, res.event.is_error, res.event.error_code) == ("error", True, "SUBAGENT_FAILED")
    assert one(evs, "task.finished").event.status == "completed"  # the parent carried on
    assert st.agents["main"].last_error is None


async def test_a_tool_list_naming_no_usable_tool_is_refused(rt, autojump_clock):
    # [] used to mean "every tool" and unknown names were accepted (a subagent with no tools).
    rt.faux.script = [
        FauxTurn(when="bad lists", tool_calls=[
            FauxToolCall("subagent", {"prompt": "SUBJOB a", "tools": []}),
            FauxToolCall("subagent", {"prompt": "SUBJOB b", "tools": ["nope", "get_system_time"]}),
            FauxToolCall("subagent", {"prompt": "SUBJOB c", "tools": ["todo"]}),  # main-only: none left
        ]),
    ]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "bad lists")
    evs = await rt.events(sid)
    finished = by_kind(evs, "tool.finished")
    assert [f.event.error_code for f in finished] == ["INVALID_ARGUMENT"] * 3
    assert "there is no tool 'nope'" in finished[1].event.content[0].text
    assert "get_system_time" in finished[0].event.content[0].text
    assert not by_kind(evs, "agent.started")  # no subagent was started


async def test_the_view_shows_how_each_subagent_ended(rt, autojump_clock):
    """Audit C, defect 7: an aborted subagent showed ``status: "finished"`` in the view, like one
    that completed. The view's ``agents[].status`` is now the end status the log records."""
    from conftest import frozen, sleep_call
    from runtime.actor import Abort
    from runtime.views import session_view

    rt.faux.script = [
        delegate("delegate ok", "SUBJOB fine"),
        FauxTurn(when="SUBJOB fine", text="done"),
        delegate("delegate doomed", "SUBJOB doomed"),
        FauxTurn(when="SUBJOB doomed", error=FauxError("OVERLOADED", "try later")),
        delegate("delegate long", "SUBJOB long"),
        FauxTurn(when="SUBJOB long", tool_calls=[sleep_call(600_000)]),
    ]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "delegate ok")
    await rt.run_to_idle(sid, "r2", "delegate doomed")
    with frozen(autojump_clock):
        await rt.submit(sid, "r3", "delegate long")
        await rt.until(sid, lambda s: any(a.role == "subagent" and a.running_call for a in s.agents.values()))
        await rt.call(sid, Abort())
    st = await rt.idle(sid)
    evs = await rt.events(sid)
    ends = {e.agent_id: e.event.status for e in by_kind(evs, "agent.finished")}
    assert sorted(ends.values()) == ["aborted", "completed", "failed"]
    view = session_view(st)
    shown = {a["agentId"]: a["status"] for a in view["agents"] if a["role"] == "subagent"}
    assert shown == ends
    assert next(a["status"] for a in view["agents"] if a["agentId"] == "main") == "idle"


async def test_a_prompt_is_taken_up_to_its_limit_exactly(rt, autojump_clock):
    from tools.subagent import MAX_PROMPT_CHARS

    at = "SUBJOB " + "x" * (MAX_PROMPT_CHARS - 7)
    rt.faux.script = [
        FauxTurn(when="two prompts", tool_calls=[FauxToolCall("subagent", {"prompt": at}),
                                                 FauxToolCall("subagent", {"prompt": at + "x"})]),
        FauxTurn(when="SUBJOB", text="took it"),
    ]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "two prompts")
    evs = await rt.events(sid)
    started = one(evs, "agent.started")
    assert len(started.event.prompt) == MAX_PROMPT_CHARS
    first, second = by_kind(evs, "tool.finished")
    assert (first.event.status, first.event.content[0].text) == ("ok", "took it")
    assert (second.event.status, second.event.error_code) == ("error", "INVALID_ARGUMENT")
    assert f"over {MAX_PROMPT_CHARS} characters" in second.event.content[0].text
