"""Through the real actor and supervisor: a session whose model is served by an SDK provider
over loopback (no faux), with the real store and builtin tools."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio

from events import types as t
from events.store import open_store
from projections.snapshots import SnapshotStore
from runtime.actor import GetState, Submit, WaitIdle
from runtime.config import CompactionConfig, ContextConfig
from runtime.providers.catalog import ProviderCatalog
from runtime.providers.compile import INSTRUCTION_PREFIX, SUMMARY_PREFIX
from runtime.supervisor import Supervisor
from projections.context_budget import CUT_MARK
from runtime.working_context import COMPACTION_INSTRUCTION, COMPACTION_PARTIAL, Compact, ContextError
from tests.executor.conftest import running_pool
from tests.idgen import IdGen
from tests.services import supervised
from tools.registry import builtin_tools
from tools.skills import skill_tool

from .conftest import PROTOCOLS
from .scripts import context_too_long, error, reply
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers import openai_responses as orr


@asynccontextmanager
async def runtime(data_dir: Path, provider: Any, *, tools: Any = None, ids: IdGen | None = None,
                  snapshot_every: int = 500, context: Any = None, **store_options: Any) -> AsyncIterator[Supervisor]:
    async with open_store(data_dir, **store_options) as store:
        async with supervised(store, ProviderCatalog({provider.id: provider}, f"{provider.id}/m1"),
                              tools if tools is not None else builtin_tools(), ids if ids is not None else IdGen(),
                              snapshot_every=snapshot_every, context=context) as sup:
            yield sup


NO_KEPT_ROUNDS = ContextConfig(compaction=CompactionConfig(keep_recent_tokens=0))


async def events_of(sup: Supervisor, session_id: str) -> list:
    return await sup.deps.store.read_events(after=0, limit=1000, session_id=session_id)


async def one_input(data_dir: Path, provider: Any, text: str, **session: Any) -> tuple[Any, list]:
    """A new session (``session``: its options) given one input (``req1``) and run until it is
    idle: its state and its events."""
    async with runtime(data_dir, provider) as sup:
        sid = await sup.create_session("p1", **session)
        await sup.call(sid, Submit("req1", [t.TextPart(text)]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        return await sup.call(sid, GetState()), await events_of(sup, sid)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_session_runs_a_tool_round_over_the_wire(protocol, server, make, tmp_path):
    provider = make(protocol)
    server.push(
        reply(protocol, text="Checking the clock.", calls=[("call_t1", "get_system_time", {})], rid="r1"),
        error(protocol, 429, "slow down"),  # absorbed by the SDK's retry
        reply(protocol, text=["It is ", "now."], rid="r2"),
    )
    deltas: list = []
    async with runtime(tmp_path / "data", provider) as sup:
        sup.deps.on_delta = lambda sid, agent, d: deltas.append(d)
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("what time is it?")]))
        await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    kinds = [e.kind for e in evs if e.kind.startswith(("model.", "tool."))]
    assert kinds == ["model.requested", "model.responded", "tool.started", "tool.finished",
                     "model.requested", "model.responded"]
    responded = [e.event for e in evs if e.kind == "model.responded"]
    assert responded[0].tool_calls[0].name == "get_system_time"
    assert responded[1].text == "It is now."
    assert responded[1].usage.output_tokens == 20 and responded[1].usage.cache_read_tokens == 40
    assert "".join(d.text for d in deltas if d.kind == "text") == "Checking the clock.It is now."
    finished = [e.event for e in evs if e.kind == "tool.finished"][0]
    assert finished.status == "ok"
    assert state.status == "idle" and state.agents["main"].items[-1].text == "It is now."
    assert state.usage.requests == 2
    # The second request carried the tool result, paired with its call, as the protocol wants.
    body = server.bodies[-1]
    assert server.bodies[1] == body  # the 429 retry sent the same request
    result_text = finished.content[0].text
    if protocol == "openai-responses":
        out = [m for m in body["input"] if m.get("type") == "function_call_output"]
        assert out[0]["call_id"] == "call_t1" and out[0]["output"] == result_text
    elif protocol == "openai-chat":
        tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
        assert tool_msgs[0]["tool_call_id"] == "call_t1"
    else:
        blocks = body["messages"][2]["content"]
        assert blocks[0]["type"] == "tool_result" and blocks[0]["tool_use_id"] == "call_t1"


async def test_a_provider_error_becomes_model_failed(server, make, tmp_path):
    provider = make("anthropic", max_retries=0)
    server.push(error("anthropic", 400, "prompt is too long: 300000 tokens > 200000 maximum"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("hello")]))
        await sup.call(sid, WaitIdle())
        evs = await events_of(sup, sid)
    failed = [e.event for e in evs if e.kind == "model.failed"]
    assert [(f.code, f.retryable, f.status) for f in failed] == [("CONTEXT_TOO_LONG", False, 400)]
    assert failed[0].usage is None  # refused: nothing was answered, nothing to count


def _before_its_end(protocol: str, events: list) -> list:
    """A stream's frames up to (not including) the one that says the response is complete."""
    def ends(name: str | None, data: Any) -> bool:
        if protocol == "openai-chat":
            return isinstance(data, dict) and any(c.get("finish_reason") for c in data.get("choices", []))
        return name == ("message_delta" if protocol == "anthropic" else "response.completed")

    return events[:next(i for i, (name, data) in enumerate(events) if ends(name, data))]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_cut_part_way_records_the_usage_reported_by_then(protocol, server, make, tmp_path):
    # A request that failed after the provider began answering recorded no usage: the session's
    # totals looked complete without it, and Anthropic's input and cache counts (message_start)
    # were lost. Now model.failed carries what was reported, the rest unknown (F-CTX-5).
    provider = make(protocol, max_retries=0)
    cut = reply(protocol, text=["partial ", "answer"])
    cut.events = _before_its_end(protocol, cut.events)
    server.push(cut, error(protocol, 400, "bad request"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        for n in (1, 2):  # the cut stream, then a request refused outright
            await sup.call(sid, Submit(f"req{n}", [t.TextPart("hello")]))
            await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    failed = [e.event for e in evs if e.kind == "model.failed"]
    assert [f.code for f in failed] == ["PROVIDER_ERROR", "BAD_REQUEST"]
    if protocol == "anthropic":  # message_start's counts; its output_tokens is a placeholder
        expected = t.Usage(input_tokens=100, cache_read_tokens=40, cache_write_tokens=12, total_input_tokens=152)
    else:  # usage comes only with the end of the response: begun, nothing reported
        expected = t.Usage()
    assert failed[0].usage == expected and failed[1].usage is None
    usage = state.usage
    assert usage.requests == 1
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (
        expected.input_tokens, expected.cache_read_tokens, None)
    assert usage.unreported["output_tokens"] == 1  # a lower bound from now on, not a complete 0


def cut_off(protocol: str, text: str) -> Any:
    """An answer stopped at the output limit, as each protocol says it."""
    if protocol == "openai-responses":
        return orr.response_stream(text=text, status="incomplete", usage=orr.usage(900, 4096))
    if protocol == "openai-chat":
        return oc.chat_stream(text=text, finish="length", usage=oc.usage(900, 4096))
    return an.message_stream(text=text, stop_reason="max_tokens", output_tokens=4096)


async def a_failed_compaction(sup: Supervisor) -> tuple[str, ContextError, Any]:
    """A session answers "hello", then is compacted: the compaction must fail (COMPACTION_FAILED)
    and record one event, ``context.compaction_failed``. Returns the session, the error and that
    event."""
    sid = await sup.create_session("p1")
    await sup.call(sid, Submit("req1", [t.TextPart("hello")]))
    await sup.call(sid, WaitIdle())
    before = [e.kind for e in await events_of(sup, sid)]
    with pytest.raises(ContextError) as err:
        await sup.call(sid, Compact())
    assert err.value.code == "COMPACTION_FAILED"
    evs = await events_of(sup, sid)
    assert [e.kind for e in evs] == [*before, "context.compaction_failed"]
    return sid, err.value, evs[-1].event


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_summary_cut_off_at_the_output_limit_is_not_recorded(protocol, server, make, tmp_path):
    provider = make(protocol)
    server.push(reply(protocol, text="Hello."), cut_off(protocol, "The user greeted and then"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid, err, failed = await a_failed_compaction(sup)
        assert "max_tokens" in err.message
        # (half a summary replaced the whole conversation): the context is unchanged, and what
        # the request used is recorded and counted.
        assert (failed.code, failed.trigger, failed.provider, failed.model) == ("COMPACTION_FAILED", "manual",
                                                                                provider.id, "m1")
        assert failed.message == err.message and failed.usage.output_tokens == 4096
        state = await sup.call(sid, GetState())
    assert [it.role for it in state.agents["main"].items] == ["user", "assistant"]
    assert state.usage.requests == 2 and state.usage.output_tokens == 20 + 4096
    assert len(server.bodies) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_summarizing_request_cut_part_way_records_its_usage(protocol, server, make, tmp_path):
    # As for a conversation's request: what the provider reported before the stream was cut is
    # recorded (context.compaction_failed) and counted; the context is unchanged.
    provider = make(protocol, max_retries=0)
    cut = reply(protocol, text=["The user ", "greeted"])
    cut.events = _before_its_end(protocol, cut.events)
    server.push(reply(protocol, text="Hello."), cut)
    async with runtime(tmp_path / "data", provider) as sup:
        sid, err, failed = await a_failed_compaction(sup)
        assert "PROVIDER_ERROR" in err.message
        assert failed.message == err.message and failed.usage.output_tokens is None
        state = await sup.call(sid, GetState())
    assert [it.role for it in state.agents["main"].items] == ["user", "assistant"]
    assert state.usage.requests == 2 and state.usage.unreported["output_tokens"] == 1


REVIEW = "---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS: read the diff, then the tests.\n"


def _conversation(protocol: str, body: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """A request body as (its leading system texts, then (role, text) per input block in order)."""
    if protocol == "anthropic":
        system = [b["text"] for b in body.get("system", [])]
        blocks = [(m["role"], b.get("text") or b["type"]) for m in body["messages"] for b in m["content"]]
        return system, blocks
    if protocol == "openai-responses":
        out = [(m.get("role") or m["type"], m["content"][0]["text"] if isinstance(m.get("content"), list)
                else m.get("content") or m["type"]) for m in body["input"]]
    else:
        out = [(m["role"], m["content"] if isinstance(m["content"], str)
                else m["content"][0]["text"] if m["content"] else "tool_calls") for m in body["messages"]]
    lead = next(i for i, (role, _text) in enumerate(out) if role not in ("system", "developer"))
    return [text for _role, text in out[:lead]], out[lead:]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_skill_loaded_mid_conversation_is_sent_after_the_summary(protocol, server, make, tmp_path):
    """F-CTX-4 / F-MOD-2 over the wire: a skill loaded in the middle of a conversation, then a
    compaction. The next request has the summary first and the skill's instructions after it, a
    later instruction as it was before the compaction (Anthropic: a user block marked ``Lens
    instruction update:``, not in ``system``; OpenAI: a system/developer message after the
    summary); the leading system prompt is unchanged. The same after a restart from a snapshot."""
    provider = make(protocol)
    ws = tmp_path / "ws"
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW)
    server.push(
        reply(protocol, text="Hello."),
        reply(protocol, calls=[("call_s1", "skill", {"name": "review"})], rid="r2"),
        reply(protocol, text="Loaded.", rid="r3"),
        reply(protocol, text="SUMMARY-OF-IT", rid="r4"),
        reply(protocol, text="Done.", rid="r5"),
        reply(protocol, text="Again.", rid="r6"),
    )
    ids = IdGen()
    # (Anthropic marks a later instruction and names its source; OpenAI sends its text as it is)
    instruction = f"{INSTRUCTION_PREFIX} (skill:review)" if protocol == "anthropic" else 'Skill "review" loaded.'
    async with running_pool(tmp_path / "executors", {"p1": ws}) as pool:
        tools = builtin_tools([skill_tool(pool)])
        # (no round kept as written: what is tested is where the summary and the instruction stand)
        async with runtime(tmp_path / "data", provider, tools=tools, ids=ids, snapshot_every=1,
                           context=NO_KEPT_ROUNDS) as sup:
            sid = await sup.create_session("p1")
            for rid, text in (("req1", "hello"), ("req2", "load the review skill")):
                await sup.call(sid, Submit(rid, [t.TextPart(text)]))
                await sup.call(sid, WaitIdle())
            assert [e.kind for e in await events_of(sup, sid)].count("skill.loaded") == 1
            system, before = _conversation(protocol, server.bodies[-1])
            assert not any("REVIEW-STEPS" in s for s in system)
            assert before[-1][1].startswith(instruction) and "REVIEW-STEPS" in before[-1][1]
            await sup.call(sid, Compact())
            await sup.call(sid, Submit("req3", [t.TextPart("and now?")]))
            await sup.call(sid, WaitIdle())
            after_system, after = _conversation(protocol, server.bodies[-1])
        if protocol == "anthropic":
            body = server.bodies[-1]
            assert [m["role"] for m in body["messages"]] == ["user"]
            assert "cache_control" in body["system"][-1]  # the leading prompt's breakpoint ends it, as before
        assert after_system == system  # the leading system prompt is the same, nothing joined it
        roles = {"anthropic": "user", "openai-responses": "developer", "openai-chat": "system"}
        assert [role for role, _text in after] == ["user", roles[protocol], "user"]
        assert after[0][1].startswith(SUMMARY_PREFIX) and "SUMMARY-OF-IT" in after[0][1]
        assert after[1][1].startswith(instruction) and "REVIEW-STEPS" in after[1][1]
        assert after[2][1] == "and now?"

        # After a restart, from a snapshot: the same prefix, compiled the same way.
        snaps = SnapshotStore.open(tmp_path / "data")
        try:
            assert snaps.load(sid) is not None
        finally:
            snaps.close()
        async with runtime(tmp_path / "data", provider, tools=tools, ids=ids, context=NO_KEPT_ROUNDS) as sup:
            await sup.call(sid, Submit("req4", [t.TextPart("once more")]))
            await sup.call(sid, WaitIdle())
        again_system, again = _conversation(protocol, server.bodies[-1])
    assert again_system == system and again[:3] == after and again[-1] == ("user", "once more")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_summarizing_request_refused_as_too_long_is_sent_again_cut(protocol, server, make, tmp_path):
    """The provider counts more than the estimate: its context-length error (as each protocol
    says it) makes the compaction ask once more at half the size, the large input cut to its
    beginning with a placeholder; that summary replaces the conversation."""
    provider = make(protocol, max_retries=0)
    big = "BIG-INPUT " + "z" * (4 * 40_000)
    server.push(reply(protocol, text="Hello."), context_too_long(protocol), reply(protocol, text="SUMMARY-OF-IT"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart(big)]))
        await sup.call(sid, WaitIdle())
        result = await sup.call(sid, Compact())
        state = await sup.call(sid, GetState())
    refused, sent = (json.dumps(b) for b in server.bodies[1:])
    assert len(server.bodies) == 3 and big in refused and COMPACTION_INSTRUCTION in refused
    assert big not in sent and "BIG-INPUT zzz" in sent and CUT_MARK in sent and len(sent) < len(refused) // 2
    assert COMPACTION_PARTIAL.strip() in sent
    assert result["summary"].startswith("SUMMARY-OF-IT")
    assert [it.role for it in state.agents["main"].items] == ["user", "assistant", "summary"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_answers_at_and_past_the_event_size_limit(protocol, server, make, tmp_path):
    # An answer that fits log.maxEventBytes is recorded; one past it fails its request once,
    # as RESPONSE_NOT_RECORDED, which now names the provider (it named none); the session goes on.
    limit = 64 * 1024  # (the least log.maxEventBytes the config takes)
    provider = make(protocol, max_retries=0)
    server.push(reply(protocol, text=["é" * (limit // 2 - 4096)]), reply(protocol, text=["x" * 1000] * (limit // 1000 + 1)),
                reply(protocol, text="small"))
    async with runtime(tmp_path / "data", provider, max_event_bytes=limit) as sup:
        sid = await sup.create_session("p1")
        for n in (1, 2, 3):
            await sup.call(sid, Submit(f"req{n}", [t.TextPart(f"answer {n}")]))
            await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    answers = [(e.kind, getattr(e.event, "code", None)) for e in evs if e.kind in ("model.responded", "model.failed")]
    assert answers == [("model.responded", None), ("model.failed", "RESPONSE_NOT_RECORDED"), ("model.responded", None)]
    failed = [e.event for e in evs if e.kind == "model.failed"][0]
    assert failed.message.startswith(f"provider {provider.id!r}: the model's answer could not be recorded ("), failed.message
    assert failed.usage is not None and failed.usage.output_tokens == 20
    assert state.status == "idle" and state.agents["main"].items[-1].text == "small"
