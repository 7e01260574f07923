"""F-TOOL-6, F-ACT-5: ``/skill:<name>`` inputs placed together as steers load the skill once.

Every steer queued when the main agent is about to ask the model is placed by one ``PlaceSteer``.
Two ``/skill:review`` inputs steered while a request was open were both given a ``skill.loaded``
(each was checked against the state before the batch), so the Working Context held the skill's
instructions twice. The model here is held until the test answers it, so both steers are queued
before the batch is placed.
"""

from __future__ import annotations

import math
from pathlib import Path

from conftest import open_runtime
from machine_parts import HeldModel
from projections.session_state import MAIN_AGENT, working_context
from runtime.actor import Steer
from runtime.providers.faux import FauxTurn
from tests.executor.conftest import running_pool
from tools.registry import builtin_tools
from tools.skills import skill_tool

SKILL = "---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS\n"


def skill_sources(items: list) -> list[str]:
    return [it.source for it in items if it.role == "system" and it.source.startswith("skill:")]


async def _steered_together(tmp_path: Path, inputs: list[str]) -> tuple[list, list[str]]:
    """Run a plain input, queue ``inputs`` while its request is open, steer them, let the model
    answer; return the session's events and the main agent's skill items."""
    ws = tmp_path / "ws"
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(SKILL)
    model = HeldModel()
    async with running_pool(tmp_path / "executors", {"p1": ws}, idle_stop_s=1e12) as pool:
        tools = builtin_tools([skill_tool(pool)])
        async with open_runtime(tmp_path / "data", faux=model, tools=tools) as rt:  # type: ignore[arg-type]
            sid = await rt.session("p1")
            await rt.submit(sid, "plain", "hello")
            await rt.until(sid, lambda s: model.waiting == 1)
            for n, content in enumerate(inputs):
                await rt.submit(sid, f"s{n}", content)
                await rt.call(sid, Steer(f"s{n}"))
            state = await rt.state(sid)
            assert [(q.request_id, q.when_busy) for q in state.queue] == [(f"s{n}", "steer") for n in range(len(inputs))]
            assert model.waiting == 1  # still the plain input's request: nothing placed yet
            model.answer(FauxTurn(text="first answer"))
            await rt.until(sid, lambda s: model.waiting == 1 and not s.queue)
            model.answer(FauxTurn(text="second answer"))
            state = await rt.idle(sid)
            events = await rt.events(sid)
            placed = [e for e in events if e.kind == "input.placed"]
            assert len(placed) == 1 + len(inputs)
            return events, skill_sources(working_context(state.agents[MAIN_AGENT]))


async def test_two_skill_inputs_steered_together_load_the_skill_once(tmp_path: Path, autojump_clock) -> None:
    autojump_clock.autojump_threshold = math.inf  # (an executor's start would time out if the clock jumped)
    events, sources = await _steered_together(tmp_path, ["/skill:review one", "/skill:review two"])
    assert [e.kind for e in events].count("skill.loaded") == 1
    assert sources == ["skill:review"]
    kinds = [e.kind for e in events]
    first_placed = [i for i, k in enumerate(kinds) if k == "input.placed"][1]
    assert kinds[first_placed - 1] == "skill.loaded"  # right before the first /skill: input, as ever


async def test_a_skill_input_steered_alone_loads_the_skill(tmp_path: Path, autojump_clock) -> None:
    autojump_clock.autojump_threshold = math.inf
    events, sources = await _steered_together(tmp_path, ["/skill:review one"])
    assert [e.kind for e in events].count("skill.loaded") == 1
    assert sources == ["skill:review"]
