"""F-ACT-5, F-ACT-7 and F-CTX-5 over scripted runs drawn at random (seeded, so each run is the same
every time): sessions whose inputs are answered plainly, delegate to subagents that answer, use a
tool or fail, and are compacted, with usage counts the provider reports or leaves out.

For every run:

* each agent's usage is the sum of what its events recorded from the provider (answers, failures
  and summaries; a count that would take a total past ``MAX_USAGE_TOTAL`` counted as not
  reported), and the session's the same sum over all its events (the sum over its agents while
  no count was left out for the bound), as folded and as the view shows them — also after a restart that wakes the session from its snapshot and
  log;
* a fork at *every* event of the session holds, for each agent, the Full and Working Context
  the source had as of that event, counts none of its usage, shows a subagent under way there as
  interrupted, and its next input is answered without changing the source.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from conftest import text
from projections.session_state import MAX_USAGE_TOTAL, SessionState, UsageTotals, apply, working_context
from runtime.actor import Submit
from runtime.providers.faux import FauxError, FauxToolCall, FauxTurn
from runtime.working_context import Compact
from session_events import assert_usage_summed

SUMMARY_WHEN = "Summarize the conversation so far"


def _counts(rng: random.Random) -> dict[str, int | None]:
    def one(top: int) -> int | None:
        return None if rng.random() < 0.25 else rng.randrange(top)

    # (the total input near the largest total at times: two such counts overflow a sum, and the
    # second counts as not reported)
    total = one(5000) if rng.random() < 0.7 else MAX_USAGE_TOTAL - rng.randrange(5000)
    return {"input_tokens": one(5000), "output_tokens": one(800), "cache_read_tokens": one(4000),
            "cache_write_tokens": one(300), "reasoning_tokens": one(200), "total_input_tokens": total}


def _script(rng: random.Random, steps: int) -> tuple[FauxTurn, list[tuple[str, bool]]]:
    """The faux script and the inputs (text, compact after it) of one run."""
    turns: list[FauxTurn] = [FauxTurn(when=SUMMARY_WHEN, text="the summary so far", **_counts(rng))]
    inputs: list[tuple[str, bool]] = []
    for i in range(steps):
        kind = rng.choice(["plain", "plain", "delegate", "delegate", "tool"])
        marker = f"step{i}{kind}"
        if kind == "plain":
            turns.append(FauxTurn(when=marker, text=f"answer {i}", **_counts(rng)))
        elif kind == "tool":
            turns.append(FauxTurn(when=marker, tool_calls=[FauxToolCall("get_system_time")], **_counts(rng)))
        else:
            calls = []
            for j in range(rng.randint(1, 2)):
                fate = rng.choice(["ok", "fail", "tool"])
                sub = f"SUB{i}x{j}{fate}"
                calls.append(FauxToolCall("subagent", {"prompt": sub}))
                if fate == "ok":
                    turns.append(FauxTurn(when=sub, text=f"subdone {sub}", **_counts(rng)))
                elif fate == "fail":
                    turns.append(FauxTurn(when=sub, error=FauxError("OVERLOADED", "try later")))
                else:
                    turns.append(FauxTurn(when=sub, tool_calls=[FauxToolCall("get_system_time")], **_counts(rng)))
            turns.append(FauxTurn(when=marker, tool_calls=calls, **_counts(rng)))
        inputs.append((marker, rng.random() < 0.3))
    # Whatever else comes last (a tool's result, a subagent's): a final answer. ("" is in every text.)
    turns.append(FauxTurn(when="", text="carried on", **_counts(rng)))
    return turns, inputs


@pytest.mark.parametrize("seed", range(6))
async def test_usage_sums_and_forks_at_every_event_over_scripted_runs(runtime_factory, autojump_clock, seed):
    rng = random.Random(seed)
    turns, inputs = _script(rng, steps=rng.randint(3, 5))
    async with runtime_factory(script=turns, snapshot_every=5) as rt:
        src = await rt.session()
        for n, (message, compact) in enumerate(inputs):
            await rt.run_to_idle(src, f"r{n}", message)
            if compact:
                await rt.call(src, Compact())
        source = await rt.state(src)
        events = await rt.events(src)
        assert len(events) > 10
        assert_usage_summed(source, events)
        ids = rt.ids
    async with runtime_factory(script=turns, snapshot_every=5, ids=ids) as rt:
        assert await rt.state(src) == source  # woken from its snapshot and the tail
        expected = SessionState(src)
        for n, e in enumerate(events):
            apply(expected, e)
            if n % 2 and n != len(events) - 1:
                continue  # (every other event, and the last: a run forks ~30 times, not 60)
            fork = await rt.sup.fork_session(src, e.seq)
            st = await rt.state(fork)
            assert st.status == "idle" and st.usage == UsageTotals()
            assert sorted(st.agents) == sorted(expected.agents), e.seq
            for agent_id, want in expected.agents.items():
                got = st.agents[agent_id]
                assert got.items == want.items, (e.seq, agent_id)
                assert working_context(got) == working_context(want), (e.seq, agent_id)
                assert got.usage == UsageTotals(), (e.seq, agent_id)
                if want.role == "subagent":
                    status = want.outcome if want.status == "finished" else "interrupted"
                    assert (got.status, got.outcome) == ("finished", status), (e.seq, agent_id)
        # The last fork goes on by itself; the source is not changed by it.
        await rt.call(fork, Submit("f1", text("step0plain and more"), "followUp"))
        await rt.idle(fork)
        assert await rt.state(src) == source
        assert_usage_summed(await rt.state(fork), await rt.events(fork))
