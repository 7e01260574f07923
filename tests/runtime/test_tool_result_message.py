"""``ToolResult.error_message`` (tools/base.py): the one reading of an error result's message
alone, which a program's ``ToolError``, a ``/skill:`` input's refusal and the registry's answer
for a down MCP server's tool all take, and which ``message_scrubbed`` scrubs."""

from __future__ import annotations

from events import types as t
from events.secrets import Secrets
from tools.base import ToolResult


def test_an_error_results_message_is_its_message_alone():
    assert ToolResult.error("TOOL_DISABLED", "x is disabled").error_message == "x is disabled"
    # (an MCP tool's isError result keeps the server's structured content beside the error)
    mcp = ToolResult([t.TextPart("boom")], {"error": {"code": "MCP_TOOL_ERROR", "message": "boom"}, "structured": {}},
                     is_error=True, error_code="MCP_TOOL_ERROR")
    assert mcp.error_message == "boom"


def test_any_other_result_has_no_error_message():
    # A tool's own output may hold an "error" key: it is no error of the call.
    output = {"error": {"code": "E", "message": "the service's own field"}}
    assert ToolResult.text("ok", output).error_message is None
    assert ToolResult.text("ok", output, is_error=True, error_code="OTHER").error_message is None  # (not its code)
    assert ToolResult.text("failed", None, is_error=True, error_code="SUBAGENT_FAILED").error_message is None
    assert ToolResult.text("plain").error_message is None


def test_message_scrubbed_scrubs_an_error_results_message_and_leaves_any_other_result():
    secrets = Secrets({"sk-abcdefghijklmnop": "SERVICE_KEY"})
    scrubbed = ToolResult.error("E", "key sk-abcdefghijklmnop refused").message_scrubbed(secrets)
    assert scrubbed.error_code == "E" and "sk-abcdefghijklmnop" not in scrubbed.error_message
    assert scrubbed.content == [t.TextPart(f"E: {scrubbed.error_message}")]
    output = ToolResult.text("sk-abcdefghijklmnop", {"error": {"code": "E", "message": "sk-abcdefghijklmnop"}})
    assert output.message_scrubbed(secrets) is output
