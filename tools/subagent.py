"""``subagent``: start a subagent with its own contexts in the same session (F-ACT-5).

The subagent runs to its final answer inside this tool call; its text is the call's result.
Main-only tools (todo, ask_user, and subagent itself: no nesting) are withheld from it.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import shortened_names  # (imports nothing: no cycle)

from .base import ToolContext, ToolError, ToolResult, ToolSpec

MAX_PROMPT_CHARS = 200_000


async def subagent(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    prompt = args.get("prompt")
    tools = args.get("tools")
    extra = set(args) - {"prompt", "tools"}
    if extra:
        raise ToolError("INVALID_ARGUMENT",
                        f"subagent does not take {shortened_names(extra)}; it takes only 'prompt' and 'tools'")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ToolError("INVALID_ARGUMENT", "subagent needs a non-empty 'prompt' string")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ToolError("INVALID_ARGUMENT", f"prompt is over {MAX_PROMPT_CHARS} characters")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(x, str) for x in tools)):
        raise ToolError("INVALID_ARGUMENT", "'tools' must be a list of tool names")
    if tools is not None:
        tools = list(dict.fromkeys(tools))  # each name once (the list is recorded and checked per request)
    if ctx.start_subagent is None:
        raise ToolError("SUBAGENT_UNAVAILABLE", "this caller cannot start subagents")
    status, text = await ctx.start_subagent(prompt, tools)
    structured = {"agent_id": f"sub_{ctx.call_id}", "status": status, "result": text}
    if status != "completed":
        return ToolResult.text(f"The subagent failed: {text}", structured, is_error=True, error_code="SUBAGENT_FAILED")
    return ToolResult.text(text, structured)


SUBAGENT_TOOL = ToolSpec(
    "subagent",
    "Start a subagent on a self-contained assignment; returns its final answer. "
    "Optionally restrict it to the named tools.",
    {
        "type": "object",
        "properties": {"prompt": {"type": "string"}, "tools": {"type": "array", "items": {"type": "string"}}},
        "required": ["prompt"],
        "additionalProperties": False,
    },
    subagent,
    main_only=True,
    replay_safe=True,  # re-running resumes the same subagent (its id derives from the call id)
    read_only=False,
)
