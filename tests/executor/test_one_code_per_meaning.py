"""One code per meaning where the model reads it: a tool call's arguments refused by Core (the
tool runner, a tool's own check) and by the executor (a file tool's check) are both
``INVALID_ARGUMENT``; a tool nobody has is ``TOOL_UNKNOWN`` from Core and from the executor alike
(an executor built before the rename still says ``UNKNOWN_TOOL``: translated at the client)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.executor_client import ExecutorClient, ExecutorToolError, translated_code
from tools.registry import builtin_tools
from tools.workspace_tools import MAX_COMMAND_TIMEOUT_MS

from .conftest import tool_ctx
from .test_tools import CoreTools, core, sub  # noqa: F401  (fixtures)

CTX = tool_ctx("ses_codes", "call_1", "p1")


async def test_bad_arguments_are_invalid_argument_whoever_refuses_them(core: CoreTools, workspace: Path,
                                                                       sub: str) -> None:
    (workspace / sub / "f.txt").write_text("a\n")
    # refused by the executor's read_file (a page of no lines)
    _, by_executor = await core.run("read_file", {"path": f"{sub}/f.txt", "max_lines": 0})
    # refused in Core before the executor is asked (one past the limit)
    _, by_core = await core.run("run_command", {"command": "true", "timeout_ms": MAX_COMMAND_TIMEOUT_MS + 1})
    # refused by the tool runner (arguments that are not JSON), and by a Core tool's own check
    by_runner = await builtin_tools().run("get_system_time", "{not json", CTX)
    by_tool = await builtin_tools().run("sleep_milliseconds", '{"milliseconds": -1}', CTX)
    for res in (by_executor, by_core, by_runner, by_tool):
        assert res.is_error and res.error_code == "INVALID_ARGUMENT", (res.error_code, res.content)
    assert "max_lines" in by_executor.structured_content["error"]["message"]
    assert "timeout_ms" in by_core.structured_content["error"]["message"]


async def test_a_tool_nobody_has_is_tool_unknown_in_core_and_in_the_executor(client: ExecutorClient) -> None:
    res = await builtin_tools().run("rm_rf", "{}", CTX)
    assert res.is_error and res.error_code == "TOOL_UNKNOWN"
    with pytest.raises(ExecutorToolError) as info:
        await client.call("rm_rf", {"path": "."})
    assert info.value.code == "TOOL_UNKNOWN" and info.value.message == "the executor has no tool 'rm_rf'"


def test_an_older_executors_unknown_tool_is_translated_once_at_the_client() -> None:
    assert translated_code("UNKNOWN_TOOL") == "TOOL_UNKNOWN"
    assert translated_code("NOT_FOUND") == "NOT_FOUND"
    assert translated_code("") == "EXECUTOR_ERROR"
