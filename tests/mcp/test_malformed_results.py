"""Results that MCP's schema does not allow, answered by a real server over stdio (the test
server's ``raw`` tool answers the result it is given): an ``isError`` that is not a boolean, and a
``text`` block without a string ``text``. Neither passes as something it is not."""

from __future__ import annotations

from typing import Any

import pytest

from events import types as t

from .conftest import srv


@pytest.mark.parametrize(("is_error", "kind"), [("true", "a string"), ("false", "a string"), (1, "a number"),
                                                (None, "null"), ({}, "an object")])
async def test_an_is_error_that_is_not_a_boolean_fails_the_call_naming_its_type(
        start: Any, is_error: Any, kind: str) -> None:
    # `"isError": "true"` was read as success: the server's failure reached the model as a result.
    r = await start({"t": srv("--raw")})
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text", "text": "it failed"}],
                                                  "isError": is_error}})
    assert res.is_error and res.error_code == "MCP_RESULT_INVALID", res
    assert res.content == [t.TextPart(f"MCP_RESULT_INVALID: mcp__t__raw answered a result whose isError is {kind}, "
                                      "not a boolean (true or false)")]


async def test_a_boolean_is_error_or_none_is_read_as_before(start: Any) -> None:
    r = await start({"t": srv("--raw")})
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text", "text": "bad"}], "isError": True}})
    assert res.error_code == "MCP_TOOL_ERROR" and res.content == [t.TextPart("bad")]
    for result in ({"content": [{"type": "text", "text": "good"}], "isError": False},
                   {"content": [{"type": "text", "text": "good"}]}):
        res = await r.call("mcp__t__raw", {"result": result})
        assert not res.is_error and res.content == [t.TextPart("good")]


async def test_a_text_block_without_string_text_shows_a_note_in_its_place(start: Any) -> None:
    # Such a block was dropped without a word: the model saw the blocks around it as if it were
    # not there. It is noted in its place, as a block of another kind that cannot be shown is.
    r = await start({"t": srv("--raw")})
    res = await r.call("mcp__t__raw", {"result": {"content": [
        {"type": "text", "text": "before"}, {"type": "text"}, {"type": "text", "text": 42},
        {"type": "text", "text": None}, {"type": "text", "text": ["a"]}, {"type": "text", "text": ""},
        {"type": "hologram"}, {"type": "text", "text": "after"}]}})
    assert not res.is_error, res
    assert [p.text for p in res.content] == [
        "before", "[a text block without text; left out]",
        "[a text block whose text is a number, not a string; left out]",
        "[a text block whose text is null, not a string; left out]",
        "[a text block whose text is an array, not a string; left out]",
        "[a content block of type 'hologram', not shown]", "after"]
    # in an error result, the note is part of the message too
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text"}], "isError": True}})
    assert res.error_code == "MCP_TOOL_ERROR" and res.content == [t.TextPart("[a text block without text; left out]")]
