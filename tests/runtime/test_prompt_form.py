"""Which form of the project's system prompt a model request is sent (F-CTX-4 with F-TOOL-2,
``runtime.prompt.SystemPrompt``): read from the same state as the request's tools, so a tool
policy changed while the request is on its way never sends ``skill`` without the skills listing,
or the listing without ``skill``."""

from __future__ import annotations

from typing import Any

from runtime.actor import Configure
from runtime.prompt import SkillMeta, SystemPrompt, build_system_prompts
from tools.base import ToolContext, ToolResult, ToolSpec

from conftest import open_runtime

SKILL_OFF = {"toolPolicy": {"skill": {"enabled": False}}}


async def _ok(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.text("ran")


async def _no_file(path: str) -> None:
    return None


async def _prompt(*names: str) -> SystemPrompt:
    return await build_system_prompts(_no_file, workspace=None, home=None, cwd="/ws",
                                      skills=[SkillMeta(n, f"the {n} skill") for n in names])


async def test_a_policy_change_while_the_request_is_on_its_way_applies_to_its_tools_and_prompt_alike(data_dir):
    # The tools were read before model.requested, the prompt's form after it and after the
    # prompt cache's await: a PATCH disabling skill in between sent skill without the listing.
    prompt = await _prompt("review")
    async with open_runtime(data_dir, extra_tools=[ToolSpec("skill", "load a skill", {"type": "object"}, _ok)]) as rt:
        sid = await rt.session()
        changed: list[Any] = []

        async def system_prompt_for(project_id: str | None) -> SystemPrompt:
            # (the first request's prompt, model.requested recorded: the policy changes meanwhile)
            if not changed and (await rt.state(sid)).agents["main"].open_request_seq is not None:
                changed.append(await rt.call(sid, Configure(settings=SKILL_OFF)))
            return prompt

        rt.deps.system_prompt_for = system_prompt_for
        await rt.run_to_idle(sid, "r1", "hi")
        await rt.run_to_idle(sid, "r2", "again")
        first, second = rt.faux.requests
        assert changed and "skill" in {s["name"] for s in first.tools}
        assert first.system == list(prompt.full)  # as its tools: from before the change
        assert "skill" not in {s["name"] for s in second.tools}
        assert second.system == list(prompt.without_skills)  # the next request: after it


async def test_a_restriction_of_the_skill_name_lists_only_the_skills_it_allows(data_dir):
    # A paramRestrictions enum on skill's name: the listing named every skill, the model's call of
    # any other one refused PARAM_NOT_ALLOWED. It lists those the restriction allows, in their
    # order; none allowed, no section (the prompt less the listing); lifted, the full prompt again.
    prompt = await _prompt("review", "two", "three")
    async with open_runtime(data_dir, extra_tools=[ToolSpec("skill", "load a skill", {"type": "object"}, _ok)]) as rt:
        sid = await rt.session()

        async def system_prompt_for(project_id: str | None) -> SystemPrompt:
            return prompt

        rt.deps.system_prompt_for = system_prompt_for
        sent: list[list[str]] = []
        for n, enum in enumerate((["three", "two"], ["nosuch"], None)):
            restriction = {"paramRestrictions": {"name": {"enum": enum}}} if enum is not None else None
            await rt.call(sid, Configure(settings={"toolPolicy": {"skill": restriction}}))
            await rt.run_to_idle(sid, f"r{n}", "hi")
            sent.append(rt.faux.requests[-1].system)
        [text] = prompt.full
        assert "- review: the review skill\n- two: the two skill\n- three: the three skill\n" in text
        assert sent[0] == [text.replace("- review: the review skill\n", "")]
        assert sent[1] == list(prompt.without_skills)
        assert sent[2] == [text]
