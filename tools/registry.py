"""The built-in tools of a session."""

from __future__ import annotations

from .base import ToolRegistry, ToolSpec
from .questions import ASK_USER_TOOL
from .subagent import SUBAGENT_TOOL
from .time import TIME_TOOLS
from .todo import TODO_TOOL


def builtin_tools(extra: list[ToolSpec] | None = None) -> ToolRegistry:
    return ToolRegistry([*TIME_TOOLS, TODO_TOOL, ASK_USER_TOOL, SUBAGENT_TOOL, *(extra or [])])
