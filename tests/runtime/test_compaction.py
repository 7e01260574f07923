"""F-CTX-2 / F-CTX-3 in the session actor: manual and automatic compaction, tool-result pruning,
Snip and Include Result, settings resolution, and replay after a restart.

The faux provider answers the summarizing request (its last user item is the compaction
instruction, which a ``when`` turn matches) and records every request, so the tests read what
the next model request held instead of the replaced items.
"""

from __future__ import annotations

import msgspec
import pytest
import trio

from events import types as t
from projections.context_budget import (
    CUT_MARK,
    OMITTED_MARK,
    compaction_threshold,
    fit_summary_input,
    item_marks,
    item_tokens,
    kept_items,
    prunable_results,
    request_tokens,
    replaceable,
    replaced_ids,
    summary_budget,
    text_tokens,
    unanswered_inputs,
    worth_compacting,
)
from events.reader import StoredEvent
from projections.session_state import (
    AgentState,
    REMOVED_PLACEHOLDER,
    Item,
    SessionState,
    apply,
    fold,
    item_parts,
    pruned_placeholder,
    snapshot_bytes,
    state_from_snapshot,
    working_context,
)
from runtime.actor import Abort, Configure
from runtime.config import CompactionConfig, ContextConfig, ModelConfig, PruneToolResultsConfig
from runtime.errors import LensError
from runtime.providers.base import ModelRequest
from runtime.providers.compile import prepare
from runtime.providers.faux import FauxError, FauxToolCall, FauxTurn
from runtime.working_context import (
    COMPACTION_INSTRUCTION,
    COMPACTION_KEPT,
    COMPACTION_KEPT_INPUTS,
    COMPACTION_PARTIAL,
    COMPACTION_SYSTEM,
    Compact,
    ContextError,
    DescribeContext,
    EditContext,
    WorkingContextOps,
    check_setting,
    resolve_settings,
)
from tools.base import ToolResult, ToolSpec

from conftest import by_kind, frozen, one

SUMMARY_TEXT = "SUMMARY: the user asked two questions; nothing is left to do."
SUMMARY = FauxTurn(when="Summarize the conversation so far", text=SUMMARY_TEXT, input_tokens=123, output_tokens=9)
BUSY = '/tool sleep_milliseconds {"milliseconds": 600000}'


def shown(items: list[Item]) -> list[tuple]:
    """What a request holds of its items: id, role, text and parts."""
    return [(it.id, it.role, it.text, tuple(item_parts(it))) for it in items]


# --------------------------------------------------------------------------- manual compaction


async def test_manual_compaction_replaces_the_working_context_and_the_full_context_keeps_everything(
        runtime_factory, autojump_clock):
    async with runtime_factory(script=[SUMMARY]) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "first question")
        st = await rt.run_to_idle(sid, "r2", "second question")
        before = [it.id for it in st.agents["main"].items]
        usage = st.usage
        res = await rt.call(sid, Compact())
        # The newest round (the second question and its answer) is kept as written: everything
        # before it is replaced (see "What a compaction keeps, read against the seeds").
        older, newest = before[:2], before[2:]
        assert res["replacedItemIds"] == older and res["summary"] == SUMMARY_TEXT and res["trigger"] == "manual"

        # The summarizing request saw what it replaces, then the fixed instruction.
        ask = rt.faux.requests[-1]
        assert ask.system == [COMPACTION_SYSTEM]
        assert [it.id for it in ask.items[:-1]] == older
        # (the instruction says that newer items, not shown, follow the summary)
        assert (ask.items[-1].role, ask.items[-1].text) == ("user", COMPACTION_INSTRUCTION + COMPACTION_KEPT)

        st = await rt.state(sid)
        main = st.agents["main"]
        assert [it.id for it in main.items] == [*before, res["itemId"]]  # the Full Context keeps everything
        assert [(it.role, it.text) for it in working_context(main)] == [
            ("summary", SUMMARY_TEXT), ("user", "second question"), ("assistant", main.items[3].text)]
        assert set(item_marks(main).values()) == {"compacted", "visible"}
        # Its usage counts: one request more, its reported tokens added.
        assert st.usage.requests == usage.requests + 1
        assert st.usage.input_tokens == usage.input_tokens + 123
        assert st.usage.output_tokens == usage.output_tokens + 9
        ev = one(await rt.events(sid), "context.compacted")
        assert ev.event.trigger == "manual" and ev.event.replaced_item_ids == older
        assert (ev.event.provider, ev.event.model, ev.event.usage.input_tokens) == ("faux", "faux-1", 123)

        # The next model request holds the summary in place of the replaced items, then the kept round.
        await rt.run_to_idle(sid, "r3", "third question")
        assert [(it.role, it.text) for it in rt.faux.requests[-1].items] == [
            ("summary", SUMMARY_TEXT), ("user", "second question"), ("assistant", main.items[3].text),
            ("user", "third question")]


async def test_compaction_is_refused_while_running_and_when_there_is_nothing_to_compact(
        runtime_factory, autojump_clock):
    async with runtime_factory(script=[SUMMARY]) as rt:
        sid = await rt.session()
        with pytest.raises(ContextError) as err:
            await rt.call(sid, Compact())
        assert err.value.code == "NOTHING_TO_COMPACT"
        with frozen(autojump_clock):
            await rt.submit(sid, "busy", BUSY)
            await rt.until(sid, lambda s: s.agents["main"].running_call is not None)
            with pytest.raises(ContextError) as err:
                await rt.call(sid, Compact())
            assert err.value.code == "SESSION_BUSY"
            await rt.call(sid, Abort())
        await rt.idle(sid)
        await rt.call(sid, Compact())
        with pytest.raises(ContextError) as err:  # a summary alone is not compacted again
            await rt.call(sid, Compact())
        assert err.value.code == "NOTHING_TO_COMPACT"
        assert len(by_kind(await rt.events(sid), "context.compacted")) == 1


async def compact_into(rt, sid: str, outcome: list) -> None:
    """Compact ``sid``, appending the answer, or the ContextError, to ``outcome``."""
    try:
        outcome.append(await rt.call(sid, Compact()))
    except ContextError as exc:
        outcome.append(exc)


async def test_an_input_during_a_compaction_waits_for_it_and_an_abort_cancels_it(runtime_factory, autojump_clock):
    slow = FauxTurn(when="Summarize the conversation so far", text=SUMMARY_TEXT, delay_ms=60_000)
    async with runtime_factory(script=[slow]) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        outcome: list = []

        async with trio.open_nursery() as nursery:
            with frozen(autojump_clock):
                nursery.start_soon(compact_into, rt, sid, outcome)
                await rt.until(sid, lambda s: len(rt.faux.requests) == 2)  # the summarizing request is out
                await rt.submit(sid, "r2", "meanwhile")  # queued behind the compaction
                assert [q.request_id for q in (await rt.state(sid)).queue] == ["r2"]
        assert outcome[0]["summary"] == SUMMARY_TEXT
        await rt.idle(sid)
        kinds = await rt.kinds(sid)
        assert kinds.index("context.compacted") < kinds.index("input.placed", kinds.index("context.compacted"))
        assert [(it.role, it.text) for it in rt.faux.requests[-1].items] == [("summary", SUMMARY_TEXT),
                                                                            ("user", "meanwhile")]

        outcome.clear()
        async with trio.open_nursery() as nursery:
            with frozen(autojump_clock):
                nursery.start_soon(compact_into, rt, sid, outcome)
                await rt.until(sid, lambda s: len(rt.faux.requests) == 4)
                kinds = await rt.kinds(sid)
                # (the abort stopped the compaction: it says so, and the compaction is answered ABORTED)
                assert await rt.call(sid, Abort()) == {"aborted": True, "withdrawn": []}
        assert isinstance(outcome[0], ContextError) and outcome[0].code == "ABORTED", outcome
        assert await rt.kinds(sid) == kinds  # nothing recorded


async def test_an_edit_of_the_working_context_during_a_compaction_is_not_undone_by_it(runtime_factory, autojump_clock):
    slow = FauxTurn(when="Summarize the conversation so far", text=SUMMARY_TEXT, delay_ms=60_000, input_tokens=50)
    async with runtime_factory(script=[slow]) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "/tool get_system_time {}")
        call, result = st.agents["main"].items[1:3]
        await rt.call(sid, EditContext("snip", (result.id,)))
        outcome: list = []

        async with trio.open_nursery() as nursery:
            with frozen(autojump_clock):
                nursery.start_soon(compact_into, rt, sid, outcome)
                await rt.until(sid, lambda s: len(rt.faux.requests) == 3)  # the summarizing request is out
                res = await rt.call(sid, EditContext("include", call_id=call.call.call_id))
                assert res["changed"] is True
        # (the compaction replaced the result the user had just included: it was out again)
        assert isinstance(outcome[0], ContextError) and outcome[0].code == "COMPACTION_FAILED"
        assert "changed" in outcome[0].message
        st = await rt.state(sid)
        assert not by_kind(await rt.events(sid), "context.compacted")
        failed = one(await rt.events(sid), "context.compaction_failed").event
        assert failed.usage.input_tokens == 50
        assert item_marks(st.agents["main"])[result.id] == "included"
        assert result.id in [it.id for it in working_context(st.agents["main"])]


async def test_a_provider_error_cut_in_compaction_failed_shows_no_piece_of_a_key(runtime_factory, autojump_clock):
    # The event's message is cut to 2000 characters: the store's keys are replaced whole first,
    # since the store's scrub of whole keys finds no piece a cut made first leaves.
    from events.secrets import Secrets

    key = "sk-proj-Q7mZ4kT1vB8nR3wY6pJ0dF5hGcanaryCompact"
    failing = FauxTurn(when="Summarize the conversation so far", error=FauxError("OVERLOADED", "o" * 1940 + key))
    async with runtime_factory(script=[failing], secrets=Secrets({key: "LENS_TEST_KEY"})) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        with pytest.raises(ContextError):
            await rt.call(sid, Compact())
        failed = one(await rt.events(sid), "context.compaction_failed").event
        assert "oooo" in failed.message and len(failed.message) <= 2000, failed.message
        assert not [key[i:i + 8] for i in range(len(key) - 7) if key[i:i + 8] in failed.message], failed.message[-80:]


async def test_a_manual_summarizing_request_failed_before_any_answer_is_recorded_without_usage(
        runtime_factory, autojump_clock):
    failing = FauxTurn(when="Summarize the conversation so far", error=FauxError("OVERLOADED", "try later"))
    async with runtime_factory(script=[failing]) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        kinds = await rt.kinds(sid)
        with pytest.raises(ContextError) as err:
            await rt.call(sid, Compact())
        assert err.value.code == "COMPACTION_FAILED" and "OVERLOADED" in err.value.message
        assert await rt.kinds(sid) == [*kinds, "context.compaction_failed"]
        failed = one(await rt.events(sid), "context.compaction_failed").event
        assert (failed.code, failed.trigger, failed.usage, failed.message) == (
            "COMPACTION_FAILED", "manual", None, err.value.message)
        st = await rt.state(sid)
        assert [it.role for it in working_context(st.agents["main"])] == ["user", "assistant"]
        assert st.usage.requests == 1


async def test_a_summarizing_answer_not_used_still_counts_in_the_usage(runtime_factory, autojump_clock):
    no_text = FauxTurn(when="Summarize the conversation so far", tool_calls=[FauxToolCall("get_system_time")],
                       input_tokens=700, output_tokens=11, cache_read_tokens=500)
    async with runtime_factory(script=[no_text]) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "hello")
        usage, kinds, working = st.usage, await rt.kinds(sid), working_context(st.agents["main"])
        with pytest.raises(ContextError) as err:
            await rt.call(sid, Compact())
        assert err.value.code == "COMPACTION_FAILED" and "no text" in err.value.message
        # (the provider answered and counted 700 + 11 tokens; the session's usage said nothing of them)
        assert await rt.kinds(sid) == [*kinds, "context.compaction_failed"]
        failed = one(await rt.events(sid), "context.compaction_failed").event
        assert (failed.code, failed.trigger, failed.usage.input_tokens, failed.usage.cache_read_tokens) == (
            "COMPACTION_FAILED", "manual", 700, 500)
        st = await rt.state(sid)
        assert working_context(st.agents["main"]) == working  # the Working Context is unchanged
        assert (st.usage.requests, st.usage.input_tokens, st.usage.output_tokens) == (
            usage.requests + 1, usage.input_tokens + 700, usage.output_tokens + 11)
        assert st.usage.cache_read_tokens == 500 and st.usage.unreported["cache_read_tokens"] == 1

    # The same after a restart.
    async with runtime_factory(script=[no_text]) as rt:
        assert msgspec.to_builtins((await rt.state(sid)).usage) == msgspec.to_builtins(st.usage)


# --------------------------------------------------------------------------- automatic compaction

WINDOW = 100_000
FIFTY = ContextConfig(compaction=CompactionConfig(trigger_percent=50))
MODELS = {"faux": [ModelConfig(id="faux-1", context_window=WINDOW)]}


async def _filler(rt, sid: str, tokens: int) -> str:
    """A user message that makes the next request's estimate exactly ``tokens``."""
    st = await rt.state(sid)
    last = rt.faux.requests[-1]
    base = request_tokens(last.system, [*working_context(st.agents["main"]), Item("x", "user", 0)], last.tools)
    assert tokens > base
    return "y" * (4 * (tokens - base))


async def test_automatic_compaction_starts_at_exactly_the_threshold_and_not_one_token_below(
        runtime_factory, autojump_clock):
    threshold = compaction_threshold(WINDOW, 50)
    assert threshold == 50_000
    async with runtime_factory(script=[SUMMARY], context=FIFTY, model_configs=MODELS) as rt:
        at = await rt.session()
        await rt.run_to_idle(at, "r1", "hello")
        message = await _filler(rt, at, threshold)
        await rt.run_to_idle(at, "r2", message)
        compacted = one(await rt.events(at), "context.compacted")
        assert compacted.event.trigger == "auto"
        summarizing, after = rt.faux.requests[-2], rt.faux.requests[-1]
        # (what the estimate saw: the agent's own system prompt, as its first request had it)
        # The input the request answers is not summarized: the summarizing request sees what came
        # before it, and the request after the compaction reads it as written, after the summary.
        assert [it.text for it in summarizing.items[:-1]][0] == "hello"
        assert message not in [it.text for it in summarizing.items]
        # Only the user's input is kept: the instruction says it follows, and not that newer
        # messages may have done the last steps (none of the model's steps follow the summary:
        # what it was about to do next is still to do).
        assert summarizing.items[-1].text == COMPACTION_INSTRUCTION + COMPACTION_KEPT_INPUTS
        assert "may have done" not in summarizing.items[-1].text
        assert [(it.role, it.text) for it in after.items] == [("summary", SUMMARY_TEXT), ("user", message)]
        assert request_tokens(rt.faux.requests[-3].system, [*summarizing.items[:-1], after.items[-1]],
                              summarizing.tools) == threshold
        kinds = await rt.kinds(at)
        assert kinds.index("context.compacted") < len(kinds) - 1 - kinds[::-1].index("model.requested")

        below = await rt.session()
        await rt.run_to_idle(below, "r1", "hello")
        message = (await _filler(rt, below, threshold))[4:]  # one token less
        await rt.run_to_idle(below, "r2", message)
        assert not by_kind(await rt.events(below), "context.compacted")
        assert rt.faux.requests[-1].items[-1].text == message


async def test_the_input_an_automatic_compaction_meets_unanswered_is_read_as_written(
        runtime_factory, autojump_clock):
    # The newest input was summarized with the rest when the compaction came before its first
    # request, so the model read a summary of "/tool …" and never called the tool.
    threshold = compaction_threshold(WINDOW, 50)
    async with runtime_factory(script=[SUMMARY], context=FIFTY, model_configs=MODELS) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        await rt.run_to_idle(sid, "r2", (await _filler(rt, sid, threshold))[4 * 100:])  # below it
        assert not by_kind(await rt.events(sid), "context.compacted")
        await rt.run_to_idle(sid, "r3", "/tool get_system_time {}")
        compacted = one(await rt.events(sid), "context.compacted")
        st = await rt.state(sid)
        newest = [it for it in st.agents["main"].items if it.role == "user"][-1]
        assert newest.text == "/tool get_system_time {}" and newest.id not in compacted.event.replaced_item_ids
        after = next(r for r in rt.faux.requests if r.items and r.items[0].role == "summary")
        assert [(it.role, it.text) for it in after.items] == [("summary", SUMMARY_TEXT),
                                                              ("user", "/tool get_system_time {}")]
        started = [e for e in by_kind(await rt.events(sid), "tool.started") if e.seq > compacted.seq]
        assert [e.event.name for e in started] == ["get_system_time"]


def test_the_unanswered_inputs_are_kept_exactly_while_they_fit_beside_a_summary():
    model = ModelConfig(id="faux-1", context_window=1000, max_output_tokens=200)
    budget = summary_budget(model.context_window, model.max_output_tokens)
    system, schemas = ["SYSTEM PROMPT"], [{"name": "t", "description": "d"}]

    def agent(text: str) -> AgentState:
        return AgentState("main", items=[
            Item("c1", "user", 1, None, "hello"), Item("c2", "assistant", 2, None, "hi"),
            Item("c3", "user", 3, None, text), Item("c4", "system", 4, None, "SKILL"),
            Item("c5", "user", 5, None, "a steer")])

    fixed = request_tokens(system, [Item("c4", "system", 4, None, "SKILL"), Item("c5", "user", 5, None, "a steer"),
                                    Item("c3", "user", 3, None, "")], schemas)
    at = "x" * (4 * (budget - fixed))
    assert request_tokens(system, [*agent(at).items[2:]], schemas) == budget
    kept = kept_items(agent(at), system, schemas, budget, [])
    assert kept == {"c3", "c5"}  # the system instruction between them is passed over, not a stop
    assert [it.id for it in replaceable(agent(at), kept)] == ["c1", "c2"]
    assert worth_compacting(agent(at), kept)
    # One token past the budget: they could not stand beside a summary, and are summarized too.
    assert kept_items(agent(at + "xxxx"), system, schemas, budget, []) == frozenset()
    # Nothing answered since the last user item: nothing to keep; only inputs: nothing to compact.
    answered = AgentState("main", items=[Item("c1", "user", 1, None, "hello"), Item("c2", "assistant", 2, None, "hi")])
    assert unanswered_inputs(answered) == []
    only = AgentState("main", items=[Item("c1", "user", 1, None, "hello")])
    assert not worth_compacting(only, kept_items(only, system, schemas, budget, []))


def test_a_compaction_replaces_the_hidden_items_among_what_it_replaces_and_not_those_it_keeps():
    # A cut round (its input u2 and newest answer a3 kept; a2, a step between them, replaced):
    # the hidden items before a2 are replaced too (a hidden input, a call hidden alone and its
    # result, which left with it), not a hidden system instruction, nor h2 hidden after a2 among
    # what is kept. With nothing hidden, what a compaction replaces is replaceable()'s items.
    call = t.ToolCall("k1", "get_system_time", "{}")
    agent = AgentState("main", items=[
        Item("s0", "system", 1, None, "SKILL"), Item("u1", "user", 2, None, "hidden first"),
        Item("a1", "assistant", 3, None, "hi"), Item("s1", "system", 4, None, "SKILL 2"),
        Item("u2", "user", 5, None, "long turn"), Item("c1", "tool_call", 6, None, call=call),
        Item("r1", "tool_result", 7, None, "noon", call_id="k1"), Item("a2", "assistant", 8, None, "step"),
        Item("h2", "user", 9, None, "a steer, hidden"), Item("a3", "assistant", 10, None, "done")],
        hidden=["u1", "s1", "c1", "h2"])
    keep = {"u2", "a3"}
    assert [it.id for it in replaceable(agent, keep)] == ["a1", "a2"]
    assert replaced_ids(agent, keep) == ["u1", "a1", "c1", "r1", "a2"]
    assert item_marks(agent)["r1"] == "removed"
    agent.hidden = []
    assert replaced_ids(agent, keep) == [it.id for it in replaceable(agent, keep)] == ["u1", "a1", "c1", "r1", "a2", "h2"]


def test_a_compaction_replaces_the_snipped_items_among_what_it_replaces_so_unsnipped_they_stay_compacted():
    # The same cut round with snips instead of hides: the snipped first input and a call snipped
    # alone (its result left with it) before a2, the newest replaced step, are replaced with it;
    # the snipped instructions of an unloaded skill are not (a compaction never replaces system
    # items), nor the snipped steer h2 among what is kept.
    call = t.ToolCall("k1", "get_system_time", "{}")
    items = [
        Item("s0", "system", 1, None, "SKILL"), Item("u1", "user", 2, None, "snipped first"),
        Item("a1", "assistant", 3, None, "hi"), Item("u2", "user", 5, None, "long turn"),
        Item("c1", "tool_call", 6, None, call=call), Item("r1", "tool_result", 7, None, "noon", call_id="k1"),
        Item("a2", "assistant", 8, None, "step"), Item("h2", "user", 9, None, "a steer, snipped"),
        Item("a3", "assistant", 10, None, "done")]
    agent = AgentState("main", items=list(items), snipped=["s0", "u1", "c1", "h2"])
    keep = {"u2", "a3"}
    assert [it.id for it in replaceable(agent, keep)] == ["a1", "a2"]
    replaced = replaced_ids(agent, keep)
    assert replaced == ["u1", "a1", "c1", "r1", "a2"]

    # Recorded, then unsnipped: the summary stands for the conversation the snipped items were
    # part of (they stay out, compacted), the kept steer is back in its place, the unloaded
    # skill's instructions stay snipped, and Include Result still re-attaches the result.
    summary = Item("sum", "summary", 11, None, "S", replaced_ids=tuple(replaced))
    after = AgentState("main", items=[*items, summary], snipped=["s0"])
    assert [it.id for it in working_context(after)] == ["sum", "u2", "h2", "a3"]
    marks = item_marks(after)
    assert [marks[i] for i in ("s0", "u1", "a1", "c1", "r1", "a2", "h2")] == [
        "snipped", "compacted", "compacted", "compacted", "compacted", "compacted", "visible"]
    after.included = ["r1"]
    assert [it.id for it in working_context(after)] == ["sum", "u2", "c1", "r1", "h2", "a3"]
    assert (item_marks(after)["c1"], item_marks(after)["r1"]) == ("included", "included")

    # A compaction recorded before snipped items were named (only replaceable()'s) keeps to what
    # it says: unsnipped, the first input comes back in its place, before the summary.
    older = AgentState("main", items=[*items, Item("sum", "summary", 11, None, "S", replaced_ids=("a1", "a2"))],
                       snipped=["s0"])
    assert [it.id for it in working_context(older)] == ["u1", "sum", "u2", "c1", "r1", "h2", "a3"]

    # Hidden and snipped items together; with nothing hidden or snipped, replaceable()'s list.
    both = AgentState("main", items=list(items), snipped=["u1", "h2"], hidden=["c1"])
    assert replaced_ids(both, keep) == ["u1", "a1", "c1", "r1", "a2"]
    plain = AgentState("main", items=list(items))
    assert replaced_ids(plain, keep) == [it.id for it in replaceable(plain, keep)] == [
        "u1", "a1", "c1", "r1", "a2", "h2"]


async def test_no_automatic_compaction_when_what_it_cannot_replace_reaches_the_threshold_alone(
        runtime_factory, autojump_clock):
    # The system prompt, system instructions (skills) and tool schemas stay whatever a compaction
    # does: when they alone reach the threshold, compacting cannot bring a request below it, and
    # it summarized the conversation away before every request (the model never saw the result
    # it had just asked for).
    tiny = {"faux": [ModelConfig(id="faux-1", context_window=1000)]}
    one_percent = ContextConfig(compaction=CompactionConfig(trigger_percent=1))
    script = [SUMMARY, FauxTurn(when="look", tool_calls=[FauxToolCall("get_system_time", {})])]
    async with runtime_factory(script=script, context=one_percent, model_configs=tiny) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "look")
        first = rt.faux.requests[0]
        assert request_tokens(first.system, [], first.tools) >= compaction_threshold(1000, 1)
        assert not by_kind(await rt.events(sid), "context.compacted")
        # the model saw its tool's result, then the next input, unsummarized
        assert [it.role for it in rt.faux.requests[-1].items] == ["user", "tool_call", "tool_result"]
        await rt.run_to_idle(sid, "r2", "and now?")
        assert not by_kind(await rt.events(sid), "context.compacted")
        assert rt.faux.requests[-1].items[-1].text == "and now?"
        # a manual compaction still works
        assert (await rt.call(sid, Compact()))["trigger"] == "manual"


async def test_the_saved_trigger_percent_wins_over_the_config(runtime_factory, autojump_clock):
    async with runtime_factory(script=[SUMMARY], context=FIFTY, model_configs=MODELS) as rt:
        sid = await rt.session()
        await rt.call(sid, Configure(settings={"compaction_trigger_percent": 51}))
        await rt.run_to_idle(sid, "r1", "hello")
        await rt.run_to_idle(sid, "r2", await _filler(rt, sid, 50_000))
        assert not by_kind(await rt.events(sid), "context.compacted")  # 51% of the window: not reached
        described = await rt.call(sid, DescribeContext())
        assert described["settings"]["compactionTriggerPercent"] == 51
        assert described["settings"]["sources"]["compactionTriggerPercent"] == "saved"
        assert described["compactionThreshold"] == 51_000 and described["contextWindow"] == WINDOW
        # Saved again (the same value): nothing more is recorded; another value is.
        await rt.call(sid, Configure(settings={"compaction_trigger_percent": 51}))
        await rt.call(sid, Configure(settings={"compaction_trigger_percent": 1}))
        configured = by_kind(await rt.events(sid), "session.configured")
        assert [e.event.settings for e in configured] == [{"compaction_trigger_percent": 51},
                                                          {"compaction_trigger_percent": 1}]
        await rt.run_to_idle(sid, "r3", "now it compacts")
        assert one(await rt.events(sid), "context.compacted").event.trigger == "auto"
        # Switched off by a saved value: no compaction, whatever the size.
        other = await rt.session()
        await rt.call(other, Configure(settings={"auto_compaction": False, "compaction_trigger_percent": 1}))
        await rt.run_to_idle(other, "r1", "hello")
        assert not by_kind(await rt.events(other), "context.compacted")


def test_settings_resolve_saved_over_config_over_default():
    default = resolve_settings({}, ContextConfig())
    assert (default.auto_compaction, default.trigger_percent, default.prune_tool_results) == (True, 80, False)
    assert set(default.sources.values()) == {"default"}
    cfg = ContextConfig(compaction=CompactionConfig(trigger_percent=60),
                        prune_tool_results=PruneToolResultsConfig(enabled=True))
    configured = resolve_settings({}, cfg)
    assert (configured.trigger_percent, configured.prune_tool_results) == (60, True)
    assert configured.sources == {"autoCompaction": "default", "compactionTriggerPercent": "config",
                                  "pruneToolResults": "config"}
    saved = resolve_settings({"compaction_trigger_percent": 100, "prune_tool_results": False}, cfg)
    assert (saved.trigger_percent, saved.prune_tool_results) == (100, False)
    assert saved.sources["compactionTriggerPercent"] == saved.sources["pruneToolResults"] == "saved"
    # A saved value of a wrong shape (never recorded by the routes) is passed over.
    assert resolve_settings({"compaction_trigger_percent": 0}, cfg).trigger_percent == 60


@pytest.mark.parametrize("value, ok", [(0, False), (1, True), (80, True), (100, True), (101, False),
                                       (True, False), (50.0, False), ("80", False)])
def test_trigger_percent_range(value, ok):
    if ok:
        check_setting("compaction_trigger_percent", value)
    else:
        with pytest.raises(ValueError, match="compactionTriggerPercent"):
            check_setting("compaction_trigger_percent", value)


def test_estimate_and_threshold_arithmetic():
    assert [text_tokens(s) for s in ("", "a", "abcd", "abcde", "é" * 2)] == [0, 1, 1, 2, 1]
    image = Item("c1", "tool_result", 1, parts=(t.TextPart("abcd"), t.ImagePart("a" * 64, "image/png")))
    assert item_tokens(image) == 1 + 4096
    call = Item("c2", "tool_call", 2, call=t.ToolCall("k", "read_file", '{"path": "a"}'))
    assert item_tokens(call) == text_tokens("read_file") + text_tokens('{"path": "a"}')
    assert [compaction_threshold(1000, p) for p in (1, 80, 100)] == [10, 800, 1000]
    assert compaction_threshold(999, 50) == 500  # rounded up


# --------------------------------------------------------------------------- pruning


async def _big(args, ctx):
    return ToolResult.text(f"output of {ctx.call_id} " + "B" * 800)


BIG = ToolSpec("big", "Returns a large text.", {"type": "object"}, _big)
PRUNE_SCRIPT = [
    FauxTurn(when="go", tool_calls=[FauxToolCall("big")]),
    FauxTurn(when="output of call_main_0_0", tool_calls=[FauxToolCall("big")]),
    FauxTurn(when="output of call_main_1_0", text="done"),
]
PRUNING = ContextConfig(prune_tool_results=PruneToolResultsConfig(enabled=True, keep_recent_rounds=1, min_tokens=100))


def _result(items: list[Item], call_id: str) -> Item:
    return next(it for it in items if it.role == "tool_result" and it.call_id == call_id)


async def test_pruning_is_off_by_default(runtime_factory, autojump_clock):
    async with runtime_factory(script=PRUNE_SCRIPT, extra_tools=[BIG]) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "go")
        assert not by_kind(await rt.events(sid), "context.edited")
        assert _result(rt.faux.requests[-1].items, "call_main_0_0").text.startswith("output of call_main_0_0")


async def test_pruning_replaces_old_large_results_in_the_working_context_only_and_include_brings_one_back(
        runtime_factory, autojump_clock):
    async with runtime_factory(script=PRUNE_SCRIPT, extra_tools=[BIG], context=PRUNING) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "go")
        main = st.agents["main"]
        first = _result(main.items, "call_main_0_0")
        assert first.text.startswith("output of call_main_0_0")  # the Full Context keeps it
        edited = one(await rt.events(sid), "context.edited")
        assert (edited.event.op, edited.event.item_ids, edited.event.reason) == ("prune", [first.id], "auto")
        # The third request (after the second round) saw a placeholder for the first result only.
        last = rt.faux.requests[-1].items
        assert _result(last, "call_main_0_0").text == pruned_placeholder(first.id)
        assert _result(last, "call_main_1_0").text.startswith("output of call_main_1_0")
        assert item_marks(main)[first.id] == "pruned"
        # The first is never pruned twice; the second is old too now that "done" answered after it.
        assert prunable_results(main, 1, 100) == [_result(main.items, "call_main_1_0").id]

        res = await rt.call(sid, EditContext("include", call_id="call_main_0_0"))
        assert res["changed"] and res["itemIds"] == [first.id] and res["items"] == [{"id": first.id, "context": "included"}]
        await rt.run_to_idle(sid, "r2", "and now?")
        last = rt.faux.requests[-1].items
        assert _result(last, "call_main_0_0").text == first.text  # re-attached, and not pruned again
        again = by_kind(await rt.events(sid), "context.edited")
        assert [e.event.op for e in again] == ["prune", "include_result", "prune"]
        assert again[-1].event.item_ids == [_result(main.items, "call_main_1_0").id]


# --------------------------------------------------------------------------- snip and include


def _image_id(n: int) -> str:
    return f"{n:064x}"


async def _shot(args, ctx):
    n = int(ctx.call_id.rsplit("_", 1)[1])
    return ToolResult([t.TextPart(f"shot {n}"), t.ImagePart(_image_id(n), "image/png")])


SHOT = ToolSpec("shot", "Returns an image.", {"type": "object"}, _shot)
SHOTS = [FauxTurn(when="shots", tool_calls=[FauxToolCall("shot"), FauxToolCall("shot"), FauxToolCall("shot")]),
         FauxTurn(when="shot 2", text="seen")]


def _images(items: list[Item]) -> list[str]:
    return [p.artifact_id for it in items for p in item_parts(it) if isinstance(p, t.ImagePart)]


async def test_snip_older_images_and_include_result_reattaches_a_result_with_its_image(runtime_factory, autojump_clock):
    async with runtime_factory(script=SHOTS, extra_tools=[SHOT]) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "shots")
        results = [it for it in st.agents["main"].items if it.role == "tool_result"]
        assert _images(results) == [_image_id(0), _image_id(1), _image_id(2)]

        res = await rt.call(sid, EditContext("snip", older_images=True))
        assert res["changed"] and res["itemIds"] == [results[0].id, results[1].id]
        assert res["items"] == [{"id": results[0].id, "context": "snipped"}, {"id": results[1].id, "context": "snipped"}]
        again = await rt.call(sid, EditContext("snip", older_images=True))  # nothing more to snip
        assert not again["changed"] and again["seq"] is None and again["itemIds"] == []

        await rt.run_to_idle(sid, "r2", "look again")
        sent = rt.faux.requests[-1].items
        assert _images(sent) == [_image_id(2)]
        assert [_result(sent, r.call_id).text for r in results[:2]] == [REMOVED_PLACEHOLDER] * 2

        res = await rt.call(sid, EditContext("include", call_id=results[0].call_id))
        assert res["changed"] and res["itemIds"] == [results[0].id]
        await rt.run_to_idle(sid, "r3", "and now")
        sent = rt.faux.requests[-1].items
        assert _images(sent) == [_image_id(0), _image_id(2)]
        assert _result(sent, results[0].call_id).text == "shot 0"
        # Including a visible result changes nothing and records nothing.
        res = await rt.call(sid, EditContext("include", call_id=results[2].call_id))
        assert not res["changed"] and res["itemIds"] == []
        ops = [e.event.op for e in by_kind(await rt.events(sid), "context.edited")]
        assert ops == ["snip", "include_result"]


async def test_snip_by_id_and_bad_ids(runtime_factory, autojump_clock):
    async with runtime_factory(script=SHOTS, extra_tools=[SHOT]) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "shots")
        user = st.agents["main"].items[0]
        call = next(it for it in st.agents["main"].items if it.role == "tool_call")
        res = await rt.call(sid, EditContext("snip", (user.id, user.id)))
        assert res["itemIds"] == [user.id]
        await rt.run_to_idle(sid, "r2", "next")
        assert user.id not in [it.id for it in rt.faux.requests[-1].items]

        for cmd, code in [
            (EditContext("snip", ("c999999",)), "CONTEXT_ITEM_NOT_FOUND"),
            (EditContext("snip", (user.id, "nope")), "CONTEXT_ITEM_NOT_FOUND"),
            (EditContext("include", call_id="call_unknown"), "CONTEXT_ITEM_NOT_FOUND"),
            (EditContext("include", ("c999999",)), "CONTEXT_ITEM_NOT_FOUND"),
            (EditContext("include", (call.id,)), "CONTEXT_EDIT_INVALID"),
            (EditContext("snip", (user.id,), agent_id="sub_nope"), "AGENT_NOT_FOUND"),  # (as the view answers)
        ]:
            kinds = await rt.kinds(sid)
            with pytest.raises(LensError) as err:
                await rt.call(sid, cmd)
            assert err.value.code == code, cmd
            assert await rt.kinds(sid) == kinds  # nothing recorded


async def test_a_snip_of_an_item_already_out_of_the_working_context_records_nothing(runtime_factory, autojump_clock):
    async with runtime_factory(script=[SUMMARY]) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "/tool get_system_time {}")
        user, call, result = st.agents["main"].items[:3]
        assert (user.role, call.role, result.role) == ("user", "tool_call", "tool_result")
        await rt.call(sid, Compact())
        await rt.run_to_idle(sid, "r2", "next")
        # Another out by a snip: its call (its result goes with it).
        await rt.call(sid, EditContext("snip", (call.id,)))
        working = [it.id for it in working_context((await rt.state(sid)).agents["main"])]
        kinds = await rt.kinds(sid)
        for ids in [(user.id,), (result.id,), (call.id,), (user.id, result.id)]:
            # (a compacted item was recorded as snipped and answered changed: true, the request unchanged)
            res = await rt.call(sid, EditContext("snip", ids))
            assert (res["changed"], res["seq"], res["itemIds"]) == (False, None, []), ids
        assert await rt.kinds(sid) == kinds
        main = (await rt.state(sid)).agents["main"]
        assert [it.id for it in working_context(main)] == working
        assert (item_marks(main)[user.id], item_marks(main)[result.id]) == ("compacted", "compacted")
        # What the next request sees is still taken out, one id at a time or with others.
        last = working[-1]
        res = await rt.call(sid, EditContext("snip", (user.id, last)))
        assert (res["changed"], res["itemIds"]) == (True, [last])


async def test_describing_the_context_never_holds_the_sessions_other_commands(runtime_factory, autojump_clock):
    async with runtime_factory() as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")

        asked = trio.Event()

        async def prompt_waiting_for_the_command(_project_id: str | None) -> list[str]:
            # As the daemon's prompt does while a command holds the executor's write lock (a
            # rebuild reads AGENTS.md under its read lock): it waits until that call has ended.
            asked.set()
            while not by_kind(await rt.events(sid), "tool.finished"):
                await trio.sleep(1)
            return ["You are a test agent."]

        described: list = []

        async def describe() -> None:
            described.append(await rt.call(sid, DescribeContext()))

        async with trio.open_nursery() as nursery:
            with frozen(autojump_clock):
                await rt.submit(sid, "busy", BUSY)
                await rt.until(sid, lambda s: s.agents["main"].running_call is not None)
                rt.deps.system_prompt_for = prompt_waiting_for_the_command
                nursery.start_soon(describe)
                await asked.wait()
            aborted = await rt.call(sid, Abort())
        # The abort was served at once and interrupted the call (it waited behind the describe,
        # which waited for the call: the 10-minute sleep ran to its end first).
        assert aborted["aborted"] is True
        assert one(await rt.events(sid), "tool.finished").event.status == "interrupted"
        assert described[0]["agentId"] == "main" and described[0]["estimatedTokens"] > 0
        assert (await rt.idle(sid)).status == "idle"


# --------------------------------------------------------------------------- replay


def _context_of(state: SessionState) -> tuple:
    main = state.agents["main"]
    return shown(working_context(main)), item_marks(main), msgspec.to_builtins(state.usage)


async def test_the_working_context_is_the_same_after_a_restart_and_from_a_full_replay(runtime_factory, autojump_clock):
    script = [SUMMARY, *PRUNE_SCRIPT]
    options = dict(script=script, extra_tools=[BIG], context=PRUNING, snapshot_every=1)
    async with runtime_factory(**options) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "go")  # pruned
        st = await rt.state(sid)
        await rt.call(sid, EditContext("include", call_id="call_main_0_0"))
        await rt.call(sid, EditContext("snip", (st.agents["main"].items[0].id,)))
        await rt.call(sid, Compact())
        main = (await rt.state(sid)).agents["main"]
        # An included result the summary replaced is replaced with the rest.
        assert item_marks(main)[_result(main.items, "call_main_0_0").id] == "compacted"
        await rt.run_to_idle(sid, "r2", "after the summary")
        await rt.call(sid, EditContext("include", call_id="call_main_1_0"))  # out of the summary again
        live = _context_of(await rt.state(sid))
        replayed = _context_of(fold(SessionState(sid), await rt.events(sid)))
        assert live == replayed
        kinds = [e.kind for e in await rt.events(sid)]
        assert {"context.compacted", "context.edited"} <= set(kinds)
    async with runtime_factory(**options) as rt:
        assert rt.snapshots.load(sid) is not None  # the actor starts from a snapshot and its tail
        assert _context_of(await rt.state(sid)) == live
        main = (await rt.state(sid)).agents["main"]
        marks = item_marks(main)
        assert marks[_result(main.items, "call_main_1_0").id] == "included"
        call = next(it for it in main.items if it.call is not None and it.call.call_id == "call_main_1_0")
        assert marks[call.id] == "included"  # its call came back with it
        assert marks[main.items[0].id] == "snipped"


# --------------------------------------------------------------------------- where the summary stands


def _fold_events(events: list, agent_id: str) -> SessionState:
    state = SessionState("s1")
    for seq, ev in enumerate(events, 1):
        rid = f"r{seq}" if isinstance(ev, t.InputSubmitted) else None
        agent = None if isinstance(ev, t.SessionCreated) else agent_id
        apply(state, StoredEvent(seq, 0, "p1", "s1", seq, agent, "task_1", t.kind_of(ev), rid, ev))
    return state


def _order(items: list[Item]) -> list[tuple[str, str]]:
    return [(it.id, it.role) for it in items]


async def _kinds_of_entries(items: list[Item]) -> list[tuple[str, bool]]:
    compiled = await prepare(ModelRequest("m1", ["PROMPT"], items, []), load_image=None, images=False)
    return [(e.kind, e.leading) for e in compiled.entries]


@pytest.mark.parametrize("agent_id", ["main", "sub_call_9"])
async def test_a_summary_stands_where_the_first_item_it_replaced_stood(agent_id):
    # F-CTX-4: a skill loaded mid-conversation stays after the summary of the conversation
    # before it (it was before the summary, and so compiled into the leading system prompt).
    skill = t.ToolCall("call_1", "skill", '{"name": "review"}')
    events = [
        t.SessionCreated(model="faux/faux-1"),
        t.SkillLoaded(name="lead", instructions="LEAD-STEPS", base_dir="skills/lead"),  # c2: leading
        t.InputSubmitted(content=[t.TextPart("first")]),  # r3
        t.InputPlaced(input_request_id="r3"),  # c4
        t.ModelResponded(tool_calls=[skill]),  # c5
        t.ToolFinished(call_id="call_1", name="skill", status="ok", content=[t.TextPart("loaded")]),  # c6
        t.SkillLoaded(name="review", instructions="REVIEW-STEPS", base_dir="skills/review", call_id="call_1"),  # c7
        t.ModelResponded(text="reviewed"),  # c8
        t.ContextCompacted(summary="S1", replaced_item_ids=["c4", "c5", "c6", "c8"]),  # c9
    ]
    state = _fold_events(events, agent_id)
    agent = state.agents[agent_id]
    full = [it.id for it in agent.items]
    assert full == ["c2", "c4", "c5", "c6", "c7", "c8", "c9"]  # the Full Context in its order
    assert _order(working_context(agent)) == [("c2", "system"), ("c9", "summary"), ("c7", "system")]
    # Compiled: the leading prompt is the prompt and the skill loaded before the conversation;
    # the one loaded mid-conversation stays a later instruction, as it was before the compaction.
    assert await _kinds_of_entries(working_context(agent)) == [
        ("system", True), ("system", True), ("summary", False), ("system", False)]

    # A summary of the summary stands where that one stood; later items keep their place.
    events += [
        t.InputSubmitted(content=[t.TextPart("second")]),  # r10
        t.InputPlaced(input_request_id="r10"),  # c11
        t.ModelResponded(text="ok"),  # c12
        t.ContextCompacted(summary="S2", replaced_item_ids=["c9", "c11", "c12"]),  # c13
        t.InstructionAppended(text="LATER", source="user"),  # c14: after the compaction
        t.InputSubmitted(content=[t.TextPart("third")]),  # r15
        t.InputPlaced(input_request_id="r15"),  # c16
    ]
    state = _fold_events(events, agent_id)
    agent = state.agents[agent_id]
    assert _order(working_context(agent)) == [("c2", "system"), ("c13", "summary"), ("c7", "system"),
                                              ("c14", "system"), ("c16", "user")]
    # A result re-attached by Include Result comes back at its own place, after the summary.
    state = _fold_events([*events, t.ContextEdited(op="include_result", item_ids=["c6"])], agent_id)
    agent = state.agents[agent_id]
    wc = working_context(agent)
    assert _order(wc) == [("c2", "system"), ("c13", "summary"), ("c5", "tool_call"), ("c6", "tool_result"),
                          ("c7", "system"), ("c14", "system"), ("c16", "user")]
    assert await _kinds_of_entries(wc) == [
        ("system", True), ("system", True), ("summary", False), ("assistant", False), ("result", False),
        ("system", False), ("system", False), ("user", False)]
    # Nothing of this is stored: the Full Context keeps its order, a snapshot gives the same.
    assert [it.id for it in agent.items] == [*full, "c11", "c12", "c13", "c14", "c16"]
    assert working_context(state_from_snapshot(snapshot_bytes(state)).agents[agent_id]) == wc
    # A snipped summary leaves the rest in their order.
    state = _fold_events([*events, t.ContextEdited(op="snip", item_ids=["c13"])], agent_id)
    assert _order(working_context(state.agents[agent_id])) == [("c2", "system"), ("c7", "system"),
                                                               ("c14", "system"), ("c16", "user")]


# --------------------------------------------------------------------------- a context over the window

BIG_WINDOW = 100_000
OUT = 4_000  # the model's maxOutputTokens: the room kept for the summary
BUDGET = BIG_WINDOW - OUT
# (these test what the summarizing request holds: no round is kept as written)
NO_AUTO = ContextConfig(compaction=CompactionConfig(auto=False, keep_recent_tokens=0))
SMALL_OUT = {"faux": [ModelConfig(id="faux-1", context_window=BIG_WINDOW, max_output_tokens=OUT)]}
FILL = FauxTurn(when="FILL", text="ok")
PARTIAL = FauxTurn(when=COMPACTION_PARTIAL.strip(), text=SUMMARY_TEXT, input_tokens=50, output_tokens=9)


def _summarizing_tokens(request: ModelRequest) -> int:
    return request_tokens(request.system, request.items, request.tools)


async def _fits_after(rt, sid: str) -> int:
    """The estimate of the agent's next request after the compaction."""
    st = await rt.state(sid)
    first = rt.faux.requests[0]
    return request_tokens(first.system, working_context(st.agents["main"]), first.tools)


async def test_a_working_context_larger_than_the_window_is_compacted_from_what_fits(runtime_factory, autojump_clock):
    huge = "FILL " + "z" * (4 * 150_000)  # alone half again the window
    async with runtime_factory(script=[PARTIAL, SUMMARY, FILL], context=NO_AUTO, model_configs=SMALL_OUT) as rt:
        assert summary_budget(BIG_WINDOW, OUT) == BUDGET
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "first question")
        st = await rt.run_to_idle(sid, "r2", huge)
        before = [it.id for it in st.agents["main"].items]
        big = next(it for it in st.agents["main"].items if it.text == huge)
        res = await rt.call(sid, Compact())

        ask = rt.faux.requests[-1]
        assert ask.system == [COMPACTION_SYSTEM]
        assert _summarizing_tokens(ask) <= BUDGET
        # Every item is there; the huge one cut to its beginning, with a placeholder saying so.
        assert [it.id for it in ask.items[:-1]] == before
        cut = next(it for it in ask.items if it.id == big.id)
        assert cut.text.startswith("FILL zzz") and CUT_MARK in cut.text and len(cut.text) < 2_000
        assert ask.items[-1].text == COMPACTION_INSTRUCTION + COMPACTION_PARTIAL
        # It replaces what it was asked to cover, the cut item included; it says what it could not see.
        assert res["replacedItemIds"] == before
        assert res["summary"].startswith(SUMMARY_TEXT) and big.id in res["summary"]
        main = (await rt.state(sid)).agents["main"]
        assert [it.role for it in working_context(main)] == ["summary"]
        assert await _fits_after(rt, sid) < BUDGET
        # The Full Context keeps everything as it was (F-CTX-1); replay gives the same context.
        assert next(it for it in main.items if it.id == big.id).text == huge
        assert working_context(fold(SessionState(sid), await rt.events(sid)).agents["main"]) == working_context(main)
        await rt.run_to_idle(sid, "r3", "third question")
        assert [it.role for it in rt.faux.requests[-1].items] == ["summary", "user"]


async def test_what_cutting_cannot_make_fit_is_left_out_oldest_first(runtime_factory, autojump_clock):
    # Many items of about 200 tokens each: none is large enough to cut, so the oldest go.
    window = 10_000
    models = {"faux": [ModelConfig(id="faux-1", context_window=window, max_output_tokens=OUT)]}
    async with runtime_factory(script=[PARTIAL, SUMMARY, FILL], context=NO_AUTO, model_configs=models) as rt:
        sid = await rt.session()
        for i in range(60):
            await rt.run_to_idle(sid, f"r{i}", f"FILL {i} " + "q" * 800)
        main = (await rt.state(sid)).agents["main"]
        before = [it.id for it in main.items]
        assert _summarizing_tokens(ModelRequest("m", [COMPACTION_SYSTEM], main.items, rt.faux.requests[0].tools)) \
            > window
        res = await rt.call(sid, Compact())

        ask = rt.faux.requests[-1]
        assert _summarizing_tokens(ask) <= window - OUT
        note = ask.items[0]
        assert (note.role, OMITTED_MARK in note.text) == ("user", True)
        sent = [it.id for it in ask.items[1:-1]]
        assert sent == before[len(before) - len(sent):]  # the newest, in order, unchanged
        assert all(CUT_MARK not in it.text for it in ask.items)
        omitted = len(before) - len(sent)
        assert f"{omitted} earlier item(s)" in note.text and f"{omitted} earlier item(s)" in res["summary"]
        # Everything is replaced, what the summary could not see too: the context ends up fitting.
        assert res["replacedItemIds"] == before
        assert [it.role for it in working_context((await rt.state(sid)).agents["main"])] == ["summary"]
        assert await _fits_after(rt, sid) < window - OUT


@pytest.mark.parametrize("past", [0, 1])
async def test_a_summarizing_request_exactly_at_the_budget_is_not_cut_and_one_token_past_it_is(
        runtime_factory, autojump_clock, past):
    async with runtime_factory(script=[PARTIAL, SUMMARY, FILL], context=NO_AUTO, model_configs=SMALL_OUT) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "FILL first")
        st = await rt.state(sid)
        tools = rt.faux.requests[-1].tools
        base = request_tokens([COMPACTION_SYSTEM], [*working_context(st.agents["main"]), Item("m", "user", 0),
                                                    Item("a", "assistant", 0, None, "ok"),
                                                    Item("i", "user", 0, None, COMPACTION_INSTRUCTION)], tools)
        message = "FILL " + "w" * (4 * (BUDGET + past - base) - 5)
        await rt.run_to_idle(sid, "r2", message)
        before = [it.id for it in (await rt.state(sid)).agents["main"].items]
        await rt.call(sid, Compact())
        ask = rt.faux.requests[-1]
        if past:
            assert _summarizing_tokens(ask) <= BUDGET
            assert CUT_MARK in ask.items[-3].text and ask.items[-1].text == COMPACTION_INSTRUCTION + COMPACTION_PARTIAL
        else:
            assert _summarizing_tokens(ask) == BUDGET
            assert ask.items[-3].text == message and ask.items[-1].text == COMPACTION_INSTRUCTION
        assert [it.id for it in ask.items[:-1]] == before


async def test_a_summarizing_request_the_provider_finds_too_long_is_asked_once_more_with_less(
        runtime_factory, autojump_clock):
    # Within the estimate's budget, but the provider counts more: CONTEXT_TOO_LONG. The second
    # request (at half the refused estimate) is cut, and its summary is used.
    too_long = FauxTurn(when="Summarize the conversation so far",
                        error=FauxError(code="CONTEXT_TOO_LONG", message="prompt is too long"))
    async with runtime_factory(script=[PARTIAL, too_long, FILL], context=NO_AUTO, model_configs=SMALL_OUT) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "FILL " + "v" * (4 * 60_000))
        before = [it.id for it in (await rt.state(sid)).agents["main"].items]
        count = len(rt.faux.requests)
        res = await rt.call(sid, Compact())
        first, second = list(rt.faux.requests)[count:]
        assert first.items[-1].text == COMPACTION_INSTRUCTION and _summarizing_tokens(first) <= BUDGET
        assert _summarizing_tokens(second) <= _summarizing_tokens(first) // 2
        assert CUT_MARK in second.items[0].text
        assert res["replacedItemIds"] == before and res["summary"].startswith(SUMMARY_TEXT)
        assert one(await rt.events(sid), "context.compacted").event.usage.input_tokens == 50


async def test_automatic_compaction_of_a_context_over_the_window_succeeds(runtime_factory, autojump_clock):
    async with runtime_factory(script=[PARTIAL, SUMMARY], model_configs=SMALL_OUT) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        await rt.run_to_idle(sid, "r2", "x" * (4 * 120_000))
        compacted = one(await rt.events(sid), "context.compacted")
        assert compacted.event.trigger == "auto"
        summarizing, after = rt.faux.requests[-2], rt.faux.requests[-1]
        assert _summarizing_tokens(summarizing) <= BUDGET and CUT_MARK in summarizing.items[-2].text
        assert [it.role for it in after.items] == ["summary"]
        assert request_tokens(after.system, after.items, after.tools) < BIG_WINDOW


def test_fitting_the_summarizing_request_keeps_calls_with_their_results_and_the_short_items():
    text = "p" * 800  # 200 tokens: too small to be worth cutting
    items = [
        Item("s1", "system", 1, None, "SKILL"),
        Item("c2", "summary", 2, None, "EARLIER SUMMARY"),
        Item("c3", "user", 3, None, text),
        Item("c4", "assistant", 4, None, text),
        Item("c5", "tool_call", 4, None, call=t.ToolCall("k1", "get_system_time", "{}")),
        Item("c6", "tool_result", 6, None, text, call_id="k1"),
        Item("c7", "user", 7, None, text),
        Item("c8", "assistant", 8, None, text),
    ]
    total = request_tokens([], items)
    assert fit_summary_input(items, 10, total + 10).items == items  # exactly at the budget
    fit = fit_summary_input(items, 10, total + 9)  # one token past it: the oldest input goes
    assert fit.omitted == ["c3"] and not fit.cut
    assert [it.id for it in fit.items] == ["s1", "c2", "omitted-c3", "c4", "c5", "c6", "c7", "c8"]
    # Leaving out a response leaves out the results of its calls with it.
    fit = fit_summary_input(items, 10, total + 10 - 250)
    assert fit.omitted == ["c3", "c4", "c5", "c6"]
    assert [it.id for it in fit.items] == ["s1", "c2", "omitted-c3", "c7", "c8"]
    assert OMITTED_MARK in fit.items[2].text and request_tokens([], fit.items) + 10 <= total + 10 - 250
    # A large item is cut before anything is left out; what cannot fit at all is sent as it is.
    large = [*items[:2], msgspec.structs.replace(items[2], text="L" * 40_000), *items[3:]]
    fit = fit_summary_input(large, 10, total + 200)
    assert fit.cut == ["c3"] and not fit.omitted and CUT_MARK in fit.items[2].text
    assert fit_summary_input(large, 10, 20).items == large


# --------------------------------------------------------------------------- the newest rounds kept as written

BULK = FauxTurn(when="BULK", text="ok")


async def test_an_automatic_compaction_keeps_the_newest_rounds_as_written_up_to_the_budget(
        runtime_factory, autojump_clock):
    # Default keepRecentTokens (20,000; the threshold halved is 25,000): the newest round and the
    # input that reached the threshold are kept as written; the round of 30,000 tokens before them
    # passes the budget, so it and everything older are summarized.
    threshold = compaction_threshold(WINDOW, 50)
    async with runtime_factory(script=[SUMMARY, BULK], context=FIFTY, model_configs=MODELS) as rt:
        sid = await rt.session()
        await rt.run_to_idle(sid, "r1", "hello")
        await rt.run_to_idle(sid, "r2", "BULK " + "y" * (4 * 30_000))
        await rt.run_to_idle(sid, "r3", "the newest question")
        assert not by_kind(await rt.events(sid), "context.compacted")
        newest = [(it.role, it.text) for it in working_context((await rt.state(sid)).agents["main"])][-2:]
        message = await _filler(rt, sid, threshold)
        await rt.run_to_idle(sid, "r4", message)
        compacted = one(await rt.events(sid), "context.compacted")
        assert compacted.event.trigger == "auto"
        summarizing, after = rt.faux.requests[-2], rt.faux.requests[-1]
        assert summarizing.items[-1].text == COMPACTION_INSTRUCTION + COMPACTION_KEPT
        assert [it.text[:5] for it in summarizing.items[:-1] if it.role == "user"] == ["hello", "BULK "]
        assert all(it.text not in ("the newest question", message) for it in summarizing.items)
        assert [(it.role, it.text) for it in after.items] == [
            ("summary", SUMMARY_TEXT), *newest, ("user", message)]
        main = (await rt.state(sid)).agents["main"]
        assert len(compacted.event.replaced_item_ids) == 4
        assert working_context(fold(SessionState(sid), await rt.events(sid)).agents["main"]) == working_context(main)


def _rounds_agent(newest: str) -> AgentState:
    call = t.ToolCall(call_id="k1", name="get_system_time", arguments="{}")
    return AgentState("main", items=[
        Item("c1", "user", 1, None, "hello"), Item("c2", "assistant", 2, None, "hi"),
        Item("c3", "user", 3, None, newest), Item("c4", "system", 4, None, "SKILL"),
        Item("c5", "tool_call", 5, None, call=call), Item("c6", "tool_result", 6, None, "12:00", call_id="k1"),
        Item("c7", "assistant", 7, None, "done")])


def test_the_newest_rounds_are_kept_exactly_at_the_budget_and_not_one_token_past_it():
    from projections.context_budget import keep_recent_budget, recent_rounds

    agent = _rounds_agent("x" * 40)
    tail = [it for it in agent.items[2:] if it.role != "system"]
    at = sum(item_tokens(it) for it in tail)
    # The round from the newest input, with its call and result (the instruction in it not counted).
    assert [it.id for it in recent_rounds(agent, at)] == ["c3", "c5", "c6", "c7"]
    # One token past: the round is not kept whole; its input and newest response are (the call
    # and its result are summarized, see test_a_round_over_the_budget_keeps_its_input_and_newest_steps).
    assert [it.id for it in recent_rounds(agent, at - 1)] == ["c3", "c7"]
    # A tail never starts past its calls (c6's call is c5) nor anywhere but at a user input.
    assert recent_rounds(agent, at + 1000) == tail  # c1 is never kept: something must be summarized
    assert recent_rounds(agent, 0) == []
    # What stays after a compaction (a summary, then the kept round) is not compacted again.
    after = AgentState("main", items=[Item("s", "summary", 9, None, "S", replaced_ids=("c1", "c2")), *agent.items[2:]])
    assert recent_rounds(after, at + 1000) == []
    # The budget is keepRecentTokens, at most half the automatic threshold.
    assert keep_recent_budget(20_000, 50_000) == 20_000 and keep_recent_budget(20_000, 30_001) == 15_000
    assert keep_recent_budget(0, 50_000) == 0
    # Kept rounds must fit a summarizing request with what it always carries; else only the
    # unanswered inputs are judged (here there are none).
    budget = request_tokens(["SYSTEM"], [agent.items[3], *tail], [])
    assert kept_items(agent, ["SYSTEM"], [], budget, tail) == {"c3", "c5", "c6", "c7"}
    assert kept_items(agent, ["SYSTEM"], [], budget - 1, tail) == frozenset()


# --------------------------------------------------------------------------- a round over the budget, cut inside

STEP = 100  # estimated tokens of each step below: a response (text and call) and its result


def _loop_agent(steps: int, *, older: bool = True, input_text: str = "fix the failing test") -> AgentState:
    """An agent deep in a tool loop: (an older round,) one input, then ``steps`` responses of a
    text and a call, each followed by its result (the third with two calls and two results), each
    step estimated at :data:`STEP` tokens; it ends with a result (the model's next request is due).
    Ids: ``s{n}t`` text, ``s{n}c`` call(s), ``s{n}r`` result(s)."""
    items = [Item("o1", "user", 1, None, "hello"), Item("o2", "assistant", 2, None, "hi")] if older else []
    items.append(Item("in", "user", 3, None, input_text))
    for n in range(steps):
        seq = 10 + 2 * n
        items.append(Item(f"s{n}t", "assistant", seq, None, "t" * 4 * 10))
        calls = ["a", "b"] if n == 2 else [""]
        for c in calls:
            call = t.ToolCall(call_id=f"k{n}{c}", name="get_system_time", arguments="{}")
            items.append(Item(f"s{n}c{c}", "tool_call", seq, None, call=call))
        size = STEP - 10 - len(calls) * item_tokens(items[-1])
        for i, c in enumerate(calls):
            part = size // len(calls) + (size % len(calls) if i == 0 else 0)
            items.append(Item(f"s{n}r{c}", "tool_result", seq + 1, None, "r" * 4 * part, call_id=f"k{n}{c}"))
    return AgentState("main", items=items)


def _step_ids(agent: AgentState, n: int) -> list[str]:
    return [it.id for it in agent.items if it.id.startswith(f"s{n}")]


def test_a_round_over_the_budget_keeps_its_input_and_newest_steps():
    from projections.context_budget import recent_rounds, summarized

    agent = _loop_agent(6)
    assert all(sum(item_tokens(it) for it in agent.items if it.id.startswith(f"s{n}")) == STEP for n in range(6))
    inp = item_tokens(agent.items[2])
    # The round (input and six steps) is over the budget: its input and the newest steps that fit
    # beside it are kept, exactly at the budget; one token past, one step fewer.
    assert [it.id for it in recent_rounds(agent, inp + 2 * STEP)] == ["in", *_step_ids(agent, 4), *_step_ids(agent, 5)]
    assert [it.id for it in recent_rounds(agent, inp + 2 * STEP - 1)] == ["in", *_step_ids(agent, 5)]
    # The cut never lands on a tool result, nor between a response's text and its call: room for
    # step 4's result, or its result and call, keeps nothing of step 4.
    s4 = {it.id: item_tokens(it) for it in agent.items if it.id.startswith("s4")}
    assert [it.id for it in recent_rounds(agent, inp + STEP + s4["s4r"])] == ["in", *_step_ids(agent, 5)]
    assert [it.id for it in recent_rounds(agent, inp + STEP + s4["s4r"] + s4["s4c"])] == ["in", *_step_ids(agent, 5)]
    # Nor between the two results of one response (step 2 called two tools).
    kept = recent_rounds(agent, inp + 3 * STEP + STEP - 1)
    assert [it.id for it in kept] == ["in", *_step_ids(agent, 3), *_step_ids(agent, 4), *_step_ids(agent, 5)]
    # The input is kept while it fits beside the newest step; else the steps alone.
    assert [it.id for it in recent_rounds(agent, STEP + inp)] == ["in", *_step_ids(agent, 5)]
    assert [it.id for it in recent_rounds(agent, STEP + inp - 1)] == _step_ids(agent, 5)
    assert recent_rounds(agent, STEP - 1) == []  # not even the newest step fits: all is summarized
    # Every kept result keeps its call, and what is kept begins where a response begins.
    for budget in range(0, 7 * STEP + inp, 7):
        kept = recent_rounds(agent, budget)
        steps = [it for it in kept if it.role != "user"]
        assert sum(item_tokens(it) for it in kept) <= budget
        assert not steps or (steps[0].role == "assistant" and steps[0].id.endswith("t"))
        calls = {it.call.call_id for it in steps if it.call is not None}
        assert {it.call_id for it in steps if it.role == "tool_result"} == calls

    # Something is always left to summarize: a round that is the whole conversation keeps its
    # first step out; one that fits whole is summarized whole (nothing else would be).
    alone = _loop_agent(6, older=False)
    assert [it.id for it in recent_rounds(alone, inp + 5 * STEP)] == ["in", *sum((_step_ids(alone, n) for n in range(1, 6)), [])]
    assert recent_rounds(alone, inp + 6 * STEP) == []
    # After an earlier compaction of the same round (its summary and the kept steps), one summary
    # alone is never what is left.
    summary = Item("sum", "summary", 50, None, "S", replaced_ids=("s0t", "s0c", "s0r"))
    after = AgentState("main", items=[*alone.items, summary])
    assert [it.id for it in working_context(after)][:3] == ["in", "sum", "s1t"]
    # (room for all but the summary: the next step goes with the summary, which is not left alone)
    newest4 = ["in", *sum((_step_ids(after, n) for n in range(2, 6)), [])]
    assert [it.id for it in recent_rounds(after, inp + 5 * STEP)] == newest4
    assert [it.id for it in recent_rounds(after, inp + 4 * STEP)] == newest4
    assert [it.id for it in recent_rounds(after, inp + 4 * STEP - 1)] == ["in", *newest4[len(_step_ids(after, 2)) + 1:]]
    # A round whose input is not answered yet has no step to keep: the inputs are judged as before.
    waiting = AgentState("main", items=[*agent.items, Item("next", "user", 99, None, "x" * 4 * (STEP + 1))])
    assert recent_rounds(waiting, STEP) == []

    # The summarizing request sees the cut round's input with the steps it summarizes, not the
    # kept steps; the Working Context after the compaction reads the summary, the input, the kept steps.
    keep = frozenset(it.id for it in recent_rounds(agent, inp + STEP))
    items = working_context(agent)
    assert [it.id for it in summarized(items, keep)] == ["o1", "o2", "in", *sum((_step_ids(agent, n) for n in range(5)), [])]
    replaced = tuple(it.id for it in replaceable(agent, keep))
    compacted = AgentState("main", items=[*agent.items, Item("c", "summary", 60, None, "S", replaced_ids=replaced)])
    assert [it.id for it in working_context(compacted)] == ["c", "in", *_step_ids(agent, 5)]
    assert worth_compacting(agent, keep)
    # A round that was the whole conversation: the summary stands where its first summarized step
    # stood, after the input (the reducer's rule, unchanged): the input, the summary, the kept steps.
    keep = frozenset(it.id for it in recent_rounds(alone, inp + STEP))
    replaced = tuple(it.id for it in replaceable(alone, keep))
    assert replaced[0] == "s0t"
    compacted = AgentState("main", items=[*alone.items, Item("c", "summary", 60, None, "S", replaced_ids=replaced)])
    assert [it.id for it in working_context(compacted)] == ["in", "c", *_step_ids(alone, 5)]


STEER = "use the other config file instead"


def _steered_agent(*, older: bool = True, input_text: str = "fix the failing test") -> AgentState:
    """:func:`_loop_agent` with six steps as a task's items (task ``T``; the older round task
    ``O``), and a steer placed in the loop after step 2's results (``st``), as the actor places
    one: a user item of the running task after a tool round."""
    items = [msgspec.structs.replace(it, task_id="O" if it.id.startswith("o") else "T")
             for it in _loop_agent(6, older=older, input_text=input_text).items]
    at = max(i for i, it in enumerate(items) if it.id.startswith("s2r")) + 1
    items.insert(at, Item("st", "user", 15, "T", STEER))
    return AgentState("main", items=items)


def test_a_cut_inside_a_steered_task_keeps_the_tasks_first_input():
    from projections.context_budget import goes_on, recent_rounds, summarized

    agent = _steered_agent()
    inp, steer = item_tokens(agent.items[2]), item_tokens(Item("x", "user", 0, None, STEER))
    steps = lambda *ns: sum((_step_ids(agent, n) for n in ns), [])  # noqa: E731
    conv = working_context(agent)
    # The steer goes on the task; the task's input and the older round's begin rounds.
    assert [it.id for k, it in enumerate(conv) if it.role == "user" and not goes_on(conv, k)] == ["o1", "in"]
    # A cut after the steer keeps the task's input, not the steer (summarized with the steps before
    # the cut); exactly at the budget and one step fewer one token past it.
    assert [it.id for it in recent_rounds(agent, inp + 2 * STEP)] == ["in", *steps(4, 5)]
    assert [it.id for it in recent_rounds(agent, inp + 2 * STEP - 1)] == ["in", *steps(5)]
    # A cut at the steer keeps it in its place, after the input, before the steps that followed it
    # (the round from the steer on fits the budget whole: it is still not kept as a round of its own).
    whole_steer = steer + 3 * STEP
    assert [it.id for it in recent_rounds(agent, inp + whole_steer)] == ["in", "st", *steps(3, 4, 5)]
    assert [it.id for it in recent_rounds(agent, inp + whole_steer - 1)] == ["in", *steps(3, 4, 5)]
    assert [it.id for it in recent_rounds(agent, inp + whole_steer + STEP)] == ["in", *steps(2), "st", *steps(3, 4, 5)]
    # An input too large to keep beside the newest step: the steps alone, as for a round with no
    # steer (a steer among them is kept where it stands).
    large = _steered_agent(input_text="x" * 4 * 3 * STEP)
    assert [it.id for it in recent_rounds(large, whole_steer)] == ["st", *steps(3, 4, 5)]
    assert [it.id for it in recent_rounds(large, 2 * STEP)] == steps(4, 5)
    # A steer not answered yet ends the round: kept after the newest step, with the input.
    waiting = AgentState("main", items=[*agent.items, Item("st2", "user", 99, "T", STEER)])
    assert [it.id for it in recent_rounds(waiting, inp + STEP + steer)] == ["in", *steps(5), "st2"]
    assert [it.id for it in recent_rounds(waiting, STEP + steer)] == [*steps(5), "st2"]
    # At every budget: what is kept begins with the task's input or a step, never with the steer
    # while the input is summarized and fits; the order is the Full Context's; every result with its call.
    order = [it.id for it in conv]
    for budget in range(0, inp + 8 * STEP, 7):
        kept = [it.id for it in recent_rounds(agent, budget)]
        assert sum(item_tokens(it) for it in conv if it.id in kept) <= budget
        assert kept == [i for i in order if i in kept]
        if kept and budget >= inp + STEP:
            assert kept[0] == "in"
        assert {i for i in kept if "r" in i[2:]} <= {i.replace("c", "r") for i in kept if "c" in i[2:]} | {"st"}

    # The summarizing request sees the input, the steps before the cut and the steer among them.
    keep = frozenset(it.id for it in recent_rounds(agent, inp + 2 * STEP))
    assert [it.id for it in summarized(conv, keep)] == ["o1", "o2", "in", *steps(0, 1, 2), "st", *steps(3)]
    replaced = tuple(it.id for it in replaceable(agent, keep))
    compacted = AgentState("main", items=[*agent.items, Item("c", "summary", 60, "T", "S", replaced_ids=replaced)])
    assert [it.id for it in working_context(compacted)] == ["c", "in", *steps(4, 5)]
    # The task alone in the conversation, cut at the steer: the input, the summary, the steer, the
    # steps after it. A second compaction of it keeps the task's input again (the summary between
    # the input and the steer does not make the steer a round of its own).
    alone = _steered_agent(older=False)
    keep = frozenset(it.id for it in recent_rounds(alone, inp + whole_steer))
    assert [it.id for it in working_context(alone) if it.id in keep] == ["in", "st", *steps(3, 4, 5)]
    replaced = tuple(it.id for it in replaceable(alone, keep))
    once = AgentState("main", items=[*alone.items, Item("c", "summary", 60, "T", "S", replaced_ids=replaced)])
    assert [it.id for it in working_context(once)] == ["in", "c", "st", *steps(3, 4, 5)]
    assert [it.id for it in recent_rounds(once, inp + 2 * STEP)] == ["in", *steps(4, 5)]
    # (Something is left to summarize there: the summary and step 3.)
    assert worth_compacting(once, frozenset(it.id for it in recent_rounds(once, inp + 2 * STEP)))


HUGE = 13_000  # estimated tokens of each result of the tool below


async def _huge(args, ctx):
    text = f"output of {ctx.call_id} "
    return ToolResult.text(text + "H" * (4 * HUGE - len(text)))


LOOP = [SUMMARY, *[FauxTurn(when=f"output of call_main_{n}_0", text=f"step {n + 1}", tool_calls=[FauxToolCall("huge")])
                   for n in range(3)],
        FauxTurn(when="output of call_main_3_0", text="all done"),
        FauxTurn(when="LOOP", text="step 0", tool_calls=[FauxToolCall("huge")])]


async def test_an_automatic_compaction_deep_in_a_tool_loop_keeps_the_input_and_the_newest_step(
        runtime_factory, autojump_clock):
    # One input, then a loop of calls whose results are 13,000 tokens each: before the fifth
    # request the estimate passes the threshold (50,000). No round fits the budget (20,000), so the
    # cut falls inside this one: its input and its newest step (the call just made and its result)
    # are kept as written; the three steps before are summarized.
    spec = ToolSpec("huge", "Returns a very large text.", {"type": "object"}, _huge)
    async with runtime_factory(script=LOOP, context=FIFTY, model_configs=MODELS, extra_tools=[spec]) as rt:
        sid = await rt.session()
        st = await rt.run_to_idle(sid, "r1", "LOOP: read the four files")
        compacted = one(await rt.events(sid), "context.compacted").event
        assert compacted.trigger == "auto"
        main = st.agents["main"]
        calls = [it for it in main.items if it.role == "tool_call"]
        assert len(calls) == 4 and len(compacted.replaced_item_ids) == 9  # three texts, calls and results
        last_call = calls[-1]
        last_result = _result(main.items, last_call.call.call_id)
        summarizing = next(r for r in rt.faux.requests if r.system == [COMPACTION_SYSTEM])
        after = rt.faux.requests[-1]
        # The summarizing request: the input, the three earlier steps, then the instruction, which
        # says that newer messages follow the summary.
        assert summarizing.items[0].text == "LOOP: read the four files"
        assert [it.call.call_id for it in summarizing.items if it.role == "tool_call"] == [
            c.call.call_id for c in calls[:3]]
        assert summarizing.items[-1].text == COMPACTION_INSTRUCTION + COMPACTION_KEPT
        assert "stay after your summary" in summarizing.items[-1].text
        # The request after it: the input, the summary, the newest step word for word (the
        # response's text and call, then its result).
        assert [(it.role, it.text) for it in after.items] == [
            ("user", "LOOP: read the four files"), ("summary", SUMMARY_TEXT),
            ("assistant", "step 3"), ("tool_call", ""), ("tool_result", last_result.text)]
        assert after.items[3].call == last_call.call
        kept = {"LOOP: read the four files", "step 3"}
        assert not {it.id for it in main.items if it.text in kept or it.id in (last_call.id, last_result.id)} & set(
            compacted.replaced_item_ids)
        assert request_tokens(after.system, after.items, after.tools) < compaction_threshold(WINDOW, 50)
        # Replay: the log folded again, and a snapshot plus its tail, rebuild the same Working Context.
        events = await rt.events(sid)
        assert working_context(fold(SessionState(sid), events).agents["main"]) == working_context(main)
        at = next(i for i, e in enumerate(events) if e.kind == "context.compacted")
        snap = state_from_snapshot(snapshot_bytes(fold(SessionState(sid), events[:at])))
        assert working_context(fold(snap, events[at:]).agents["main"]) == working_context(main)


def test_every_stop_reason_the_agent_loop_takes_as_a_cut_makes_no_summary():
    # Compaction's reasons are built from runtime/decide.py's CUT_BY: a reason added there is no
    # summary here too. Only a reason known to end a whole answer makes one.
    from runtime.decide import CUT_BY
    from runtime.working_context import FINISHED_ANSWER, UNFINISHED_SUMMARY, unfinished_summary

    assert set(CUT_BY) <= set(UNFINISHED_SUMMARY) and not set(UNFINISHED_SUMMARY) & FINISHED_ANSWER
    for reason in CUT_BY:
        assert unfinished_summary(reason) == UNFINISHED_SUMMARY[reason]
    for reason in ("end_turn", "stop_sequence", "tool_use", "steered"):
        assert unfinished_summary(reason) is None, reason
    assert unfinished_summary("pause_turn") == UNFINISHED_SUMMARY["pause_turn"]
    for unknown in ("a_reason_not_known_yet", "stop", "length", ""):  # (Chat's words are normalized before)
        assert unfinished_summary(unknown) == "not a stop reason known to end a whole answer", unknown
    assert unfinished_summary(None) == "the provider gave no stop reason"
