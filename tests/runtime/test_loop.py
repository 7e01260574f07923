"""The agent loop: tool rounds until a final answer; failures are events, not crashes; usage."""

from __future__ import annotations

import pytest

from conftest import by_kind, one, sleep_call
from events.codec import DEFAULT_MAX_EVENT_BYTES
from runtime.actor import DEFAULT_SYSTEM_PROMPT, PARTIAL_TEXT_ROOM
from runtime.providers.faux import FauxError, FauxToolCall, FauxTurn
from tools.base import ToolResult, ToolSpec


async def test_tool_rounds_until_a_final_answer(rt, autojump_clock):
    rt.faux.script = [
        FauxTurn(when="what time", tool_calls=[FauxToolCall("get_system_time")]),
        FauxTurn(when="unix_ms", tool_calls=[sleep_call(5), sleep_call(7)]),
        FauxTurn(when="slept 7 ms", text="done after two rounds"),
    ]
    sid = await rt.session()
    st = await rt.run_to_idle(sid, "r1", "what time is it, then nap")
    evs = await rt.events(sid)
    assert [e.kind for e in evs if e.kind.startswith(("model.", "tool."))] == [
        "model.requested", "model.responded",
        "tool.started", "tool.finished",
        "model.requested", "model.responded",
        "tool.started", "tool.finished", "tool.started", "tool.finished",
        "model.requested", "model.responded",
    ]
    assert [f.event.name for f in by_kind(evs, "tool.finished")] == [
        "get_system_time", "sleep_milliseconds", "sleep_milliseconds"]
    assert all(f.event.status == "ok" and not f.event.is_error for f in by_kind(evs, "tool.finished"))
    assert one(evs, "task.finished").event.status == "completed"
    main = st.agents["main"]
    assert [it.role for it in main.items] == [
        "user", "tool_call", "tool_result", "tool_call", "tool_call", "tool_result", "tool_result", "assistant"]
    assert main.items[-1].text == "done after two rounds"
    # Each request carried the system prompt and the whole context so far, in order.
    reqs = rt.faux.requests
    assert len(reqs) == 3 and all(r.system == [DEFAULT_SYSTEM_PROMPT] for r in reqs)
    assert [it.role for it in reqs[2].items] == [it.role for it in main.items[:-1]]
    assert {tool["name"] for tool in reqs[0].tools} == {
        "get_system_time", "sleep_milliseconds", "todo", "ask_user", "subagent"}
    # A tool result is paired with its call.
    calls = [it.call.call_id for it in main.items if it.role == "tool_call"]
    results = [it.call_id for it in main.items if it.role == "tool_result"]
    assert calls == results


async def test_provider_error_fails_the_task_and_the_session_stays_usable(rt, autojump_clock):
    rt.faux.script = [FauxTurn(when="fail please", error=FauxError("RATE_LIMITED", "slow down", retryable=True))]
    sid = await rt.session()
    st = await rt.run_to_idle(sid, "r1", "fail please")
    evs = await rt.events(sid)
    failed = one(evs, "model.failed").event
    assert (failed.code, failed.message, failed.retryable) == ("RATE_LIMITED", "slow down", True)
    fin = one(evs, "task.finished").event
    assert fin.status == "failed" and "RATE_LIMITED" in fin.reason
    assert by_kind(evs, "model.responded") == []
    assert st.status == "idle" and st.inputs["r1"].status == "settled"
    assert st.usage.requests == 0  # a failed request reported no usage
    st = await rt.run_to_idle(sid, "r2", "are you there")
    evs = await rt.events(sid)
    assert [e.event.status for e in by_kind(evs, "task.finished")] == ["failed", "completed"]
    assert st.agents["main"].items[-1].text == "(faux) You said: are you there"
    assert st.agents["main"].last_error is None


async def test_bad_tool_calls_come_back_as_error_results(rt, autojump_clock, caplog):
    rt.faux.script = [FauxTurn(when="bad calls", tool_calls=[
        FauxToolCall("no_such_tool", {}),
        FauxToolCall("get_system_time", "{not json"),
        FauxToolCall("sleep_milliseconds", "[1, 2]"),
        FauxToolCall("get_system_time", {}),
    ])]
    sid = await rt.session()
    st = await rt.run_to_idle(sid, "r1", "bad calls")
    evs = await rt.events(sid)
    finished = by_kind(evs, "tool.finished")
    assert [(f.event.status, f.event.is_error, f.event.error_code) for f in finished] == [
        ("error", True, "TOOL_UNKNOWN"),
        ("error", True, "INVALID_ARGUMENT"),
        ("error", True, "INVALID_ARGUMENT"),
        ("ok", False, None),
    ]
    assert structured(finished[0])["error"]["code"] == "TOOL_UNKNOWN"
    # The model was told and answered; nothing crashed.
    assert one(evs, "task.finished").event.status == "completed"
    assert len(by_kind(evs, "model.requested")) == 2
    assert st.agents["main"].items[-1].role == "assistant"
    assert not [r for r in caplog.records if r.name == "lens.supervisor"]  # the actor never crashed


async def test_arguments_that_are_no_json_object_are_quoted_in_the_error(rt, autojump_clock):
    # Later requests send such a call back with empty arguments (servers refuse others), so the
    # result is where the model sees what it sent: quoted, around where reading stopped.
    long = '{"note": "' + "x" * 1000 + '", "milliseconds": 5,}'
    rt.faux.script = [FauxTurn(when="odd", tool_calls=[
        FauxToolCall("sleep_milliseconds", '{"milliseconds": NaN}'),
        FauxToolCall("sleep_milliseconds", "[5]"),
        FauxToolCall("sleep_milliseconds", long),
    ])]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "odd")
    finished = by_kind(await rt.events(sid), "tool.finished")
    assert [f.event.error_code for f in finished] == ["INVALID_ARGUMENT"] * 3
    told = [f.event.content[0].text.removeprefix("INVALID_ARGUMENT: ") for f in finished]
    # NaN is Python's, not JSON: it never reaches the tool (which said "must be an integer")
    assert told[0] == ('sleep_milliseconds arguments are not usable JSON (NaN is not JSON); '
                       'received: "{\\"milliseconds\\": NaN}"'), told[0]
    assert told[1] == 'sleep_milliseconds arguments must be a JSON object, not an array; received: "[5]"'
    assert told[2].startswith("sleep_milliseconds arguments are not valid JSON (Expecting property name "
                              f"enclosed in double quotes at character {len(long) - 1}); received (characters "
                              f"{len(long) - 300} to {len(long)} of {len(long)}): …"), told[2]
    assert told[2].endswith('\\"milliseconds\\": 5,}"'), told[2]


async def test_argument_values_the_log_cannot_hold_are_error_results_not_crashes(rt, autojump_clock, caplog):
    # Each of these used to crash the actor when the tool echoed the value into an event (until
    # the session was quarantined): lone surrogates (from JSON escapes), integers past 64 bits,
    # integers past Python's digit limit, nesting past the recursion limit.
    rt.faux.script = [FauxTurn(when="hostile", tool_calls=[
        FauxToolCall("todo", '{"items": [{"id": "a", "text": "\\ud800"}]}'),
        FauxToolCall("todo", '{"items": [{"id": "\\udfff", "text": "x"}]}'),
        FauxToolCall("get_system_time", '{"\\ud800": 1}'),
        FauxToolCall("subagent", '{"prompt": "\\ud800"}'),
        FauxToolCall("ask_user", '{"questions": [{"id": "q", "text": "\\ud800"}]}'),
        FauxToolCall("sleep_milliseconds", '{"milliseconds": ' + str(2**64) + "}"),
        FauxToolCall("sleep_milliseconds", '{"milliseconds": ' + str(-(2**63) - 1) + "}"),
        FauxToolCall("sleep_milliseconds", '{"milliseconds": 1' + "0" * 5000 + "}"),
        FauxToolCall("sleep_milliseconds", "[" * 100_000 + "]" * 100_000),
        FauxToolCall("sleep_milliseconds", '{"milliseconds": 1, "note": ' + str(2**63 - 1) + "}"),
    ])]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "hostile")
    finished = by_kind(await rt.events(sid), "tool.finished")
    codes = [f.event.error_code for f in finished]
    assert codes == ["INVALID_ARGUMENT"] * 10, codes
    # 2**63 - 1 is recordable: the last call reaches the tool, whose own check refuses "note"
    assert "outside 64 bits" not in structured(finished[9])["error"]["message"]
    assert "lone surrogate" in structured(finished[0])["error"]["message"]
    assert "outside 64 bits" in structured(finished[5])["error"]["message"]
    assert not [r for r in caplog.records if r.name == "lens.supervisor"]  # the actor never crashed


async def _huge(args, ctx):
    return ToolResult.text("x" * (33 * 1024 * 1024))  # past the 32 MiB maxEventBytes


HUGE = ToolSpec("huge", "Returns more than one event may hold.", {"type": "object"}, _huge)


async def test_a_result_the_log_cannot_hold_is_recorded_as_not_recorded(runtime_factory, autojump_clock, caplog):
    script = [FauxTurn(when="big", tool_calls=[FauxToolCall("huge")])]
    async with runtime_factory(script=script, extra_tools=[HUGE]) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "big")
        fin = one(await rt.events(sid), "tool.finished")
        assert (fin.event.status, fin.event.error_code) == ("error", "RESULT_NOT_RECORDED")
        assert "huge ran, but its result could not be recorded" in fin.event.content[0].text
        assert st.status == "idle"
    assert not [r for r in caplog.records if r.name == "lens.supervisor"]  # no crash, no re-run


def structured(e):
    return e.event.structured_content


async def test_usage_per_request_and_per_session(rt, autojump_clock):
    rt.faux.script = [
        FauxTurn(when="count me", tool_calls=[sleep_call(1)], input_tokens=100, output_tokens=7),
        FauxTurn(when="slept", text="counted", input_tokens=130, output_tokens=3),
        FauxTurn(when="again", text="ok", input_tokens=40, output_tokens=1),
    ]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "count me")
    st = await rt.run_to_idle(sid, "r2", "again")
    evs = await rt.events(sid)
    usages = [e.event.usage for e in by_kind(evs, "model.responded")]
    assert [(u.input_tokens, u.output_tokens) for u in usages] == [(100, 7), (130, 3), (40, 1)]
    # Counts the provider did not report stay unknown, per request and in the totals.
    assert all(u.cache_read_tokens is None and u.cache_write_tokens is None and u.reasoning_tokens is None
               for u in usages)
    assert st.usage.requests == 3
    assert (st.usage.input_tokens, st.usage.output_tokens) == (270, 11)
    assert (st.usage.cache_read_tokens, st.usage.cache_write_tokens, st.usage.reasoning_tokens) == (None, None, None)


async def test_deltas_stream_to_viewers_and_only_the_result_is_persisted(runtime_factory, autojump_clock):
    script = [FauxTurn(when="stream", chunks=["one ", "two ", "three"], reasoning="hmm", chunk_delay_ms=10)]
    async with runtime_factory(script=script) as rt:
        seen: list[tuple[str, str, str, str]] = []
        rt.deps.on_delta = lambda sid, agent, delta: seen.append((sid, agent, delta.kind, delta.text))
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "stream it")
        assert seen == [(sid, "main", "reasoning", "hmm"), (sid, "main", "text", "one "),
                        (sid, "main", "text", "two "), (sid, "main", "text", "three")]
        resp = one(await rt.events(sid), "model.responded").event
        assert (resp.text, resp.reasoning) == ("one two three", "hmm")
        assert st.agents["main"].items[-1].text == "one two three"


async def test_a_provider_reusing_call_ids_gets_a_fresh_question_each_time(rt, autojump_clock):
    """Some servers number tool calls afresh in every response (`call_0`). Question ids derive
    from call ids, so the second ask_user was answered at once with the first one's answer."""
    from runtime.actor import Answer

    ask = FauxToolCall("ask_user", {"questions": [{"id": "q", "text": "Go?", "options": [
        {"id": "y", "label": "yes"}, {"id": "n", "label": "no"}]}]}, call_id="call_0")
    rt.faux.script = [FauxTurn(when="first", tool_calls=[ask]), FauxTurn(when="second", tool_calls=[ask, ask])]
    sid = await rt.session()
    asked: list[str] = []
    for rid, prompt, answers in [("r1", "first", ["y"]), ("r2", "second", ["n", "y"])]:
        await rt.submit(sid, rid, prompt)
        for option in answers:
            st = await rt.idle(sid)  # (returns when a question waits, too)
            assert st.status == "awaiting_answer", (prompt, st.status)
            (qid,) = st.questions
            asked.append(qid)
            await rt.call(sid, Answer(qid, {"kind": "answer", "optionIds": [option]}))
    st = await rt.idle(sid)
    assert st.status == "idle" and len(set(asked)) == 3
    evs = await rt.events(sid)
    ids = [c.call_id for e in by_kind(evs, "model.responded") for c in e.event.tool_calls]
    assert ids == ["call_0", "call_0-2", "call_0-3"]  # unique in the session, as the log records them
    finished = by_kind(evs, "tool.finished")
    assert [f.event.call_id for f in finished] == ids
    assert ["Yes" in f.event.content[0].text or "yes" in f.event.content[0].text for f in finished] == [True, False, True]


@pytest.mark.parametrize("first, second, renamed", [
    ("c1", "c1.1", "c1.1-2"),  # a model's id naming a call of call c1's program
    ("c1.1", "c1", "c1-2"),    # a model's id whose program's first call would be c1.1, an earlier call
])
async def test_a_model_call_id_never_shares_an_id_with_a_programs_call(rt, autojump_clock, first, second, renamed):
    """A program run by call ``<id>`` names its calls ``<id>.<n>``, and the executor keeps file
    history and refuses a stopped id by it: call ``c1`` after an edit ``c1.1`` (aborted, its id
    remembered) had its program's first edit refused."""
    rt.faux.script = [FauxTurn(when="first", tool_calls=[FauxToolCall("get_system_time", {}, call_id=first)]),
                      FauxTurn(when="second", tool_calls=[FauxToolCall("get_system_time", {}, call_id=second)])]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "first")
    await rt.run_to_idle(sid, "r2", "second")
    ids = [c.call_id for e in by_kind(await rt.events(sid), "model.responded") for c in e.event.tool_calls]
    assert ids == [first, renamed]


async def test_an_answer_the_log_cannot_hold_fails_the_request_once(rt, autojump_clock, caplog):
    # It crashed the actor, which asked the model again (billed again) three times and then
    # quarantined the session for good.
    rt.faux.script = [FauxTurn(when="essay", text="y" * (33 * 1024 * 1024),  # past the 32 MiB maxEventBytes
                               input_tokens=120, output_tokens=9_000_000)]
    sid = await rt.session()
    st = await rt.run_to_idle(sid, "r1", "essay please")
    evs = await rt.events(sid)
    assert len(by_kind(evs, "model.requested")) == 1 and by_kind(evs, "model.responded") == []
    failed = one(evs, "model.failed").event
    assert failed.code == "RESPONSE_NOT_RECORDED" and "could not be recorded" in failed.message
    # the text it streamed is kept, cut so that the failure's own event fits
    assert failed.partial_text == "y" * (DEFAULT_MAX_EVENT_BYTES - PARTIAL_TEXT_ROOM)
    assert [(it.role, it.status) for it in st.agents["main"].items] == [("user", None), ("assistant", "failed")]
    # what the unrecorded answer used still counts in the session's usage
    assert failed.usage is not None and failed.usage.output_tokens == 9_000_000
    assert st.usage.requests == 1 and st.usage.input_tokens == 120 and st.usage.output_tokens == 9_000_000
    assert one(evs, "task.finished").event.status == "failed"
    assert st.status == "idle"
    st = await rt.run_to_idle(sid, "r2", "are you there")  # the session goes on
    assert st.agents["main"].items[-1].text == "(faux) You said: are you there"
    assert not [r for r in caplog.records if r.name == "lens.supervisor"]


async def test_lone_surrogates_in_an_answer_are_replaced_not_fatal(rt, autojump_clock, caplog):
    # A server can stream "\ud800" (a JSON escape): recorded as is, the event could not be encoded
    # and the actor crashed until the session was quarantined.
    rt.faux.script = [FauxTurn(when="odd", text="x\ud800y \ud83d\ude00", chunks=["x\ud800", "y \ud83d\ude00"],
                               tool_calls=[FauxToolCall("get_system_time", '{"\udfff": 1}')]),
                      FauxTurn(when="INVALID_ARGUMENT", text="ok")]
    seen: list[str] = []
    rt.deps.on_delta = lambda sid, agent, delta: seen.append(delta.text)
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "odd")
    assert seen[:2] == ["x\ufffd", "y \U0001f600"]  # live viewers get what the log holds
    evs = await rt.events(sid)
    answer = by_kind(evs, "model.responded")[0].event
    assert answer.text == "x\ufffdy \U0001f600"  # a pair written as two escapes joins
    assert answer.tool_calls[0].arguments == '{"\ufffd": 1}'
    assert one(evs, "task.finished").event.status == "completed"
    assert not [r for r in caplog.records if r.name == "lens.supervisor"]
