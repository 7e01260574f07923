"""Results that MCP's schema does not allow, answered by a real server over stdio (the test
server's ``raw`` tool answers the result it is given): an ``isError`` that is not a boolean, and a
``text`` block without a string ``text``. Neither passes as something it is not."""

from __future__ import annotations

from typing import Any

import pytest

from events import types as t

from .conftest import srv


@pytest.mark.parametrize(("is_error", "kind"), [("true", "a string"), ("false", "a string"), (1, "a number"),
                                                ({}, "an object"), (["true"], "an array")])
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
    # `"isError": null` is read as absent (a success), as `structuredContent: null` and the
    # project's null optional fields are: refusing it failed every call of such a server.
    r = await start({"t": srv("--raw")})
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text", "text": "bad"}], "isError": True}})
    assert res.error_code == "MCP_TOOL_ERROR" and res.content == [t.TextPart("bad")]
    for result in ({"content": [{"type": "text", "text": "good"}], "isError": False},
                   {"content": [{"type": "text", "text": "good"}]},
                   {"content": [{"type": "text", "text": "good"}], "isError": None}):
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
    # in an error result with text, the note is part of the message too
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text", "text": "it broke "}, {"type": "text"}],
                                                  "isError": True}})
    assert res.error_code == "MCP_TOOL_ERROR" and res.structured_content["error"]["message"] == (
        "it broke [a text block without text; left out]")


async def test_notes_alone_are_no_content_the_structured_json_and_the_missing_message_are_shown(
        start: Any) -> None:
    # A result whose only text block had no text lost its structured content's JSON (the note
    # counted as content: the model saw the note alone, not {"temp":21}), and an error of that
    # kind lost its "reported an error without a message". Notes are no content of their own.
    r = await start({"t": srv("--raw")})
    note = "[a text block without text; left out]"
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text"}], "structuredContent": {"temp": 21}}})
    assert not res.is_error and res.structured_content == {"temp": 21}
    assert [p.text for p in res.content] == [note, '{"temp":21}']
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "hologram"}], "structuredContent": {"temp": 21}}})
    assert [p.text for p in res.content] == ["[a content block of type 'hologram', not shown]", '{"temp":21}']
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text", "text": 3}], "isError": True}})
    message = "mcp__t__raw reported an error without a message"
    assert res.error_code == "MCP_TOOL_ERROR" and res.structured_content["error"]["message"] == message, res
    assert [p.text for p in res.content] == [f"MCP_TOOL_ERROR: {message}",
                                             "[a text block whose text is a number, not a string; left out]"]
    # with real text, no JSON is added (the server gave its own text), as before
    res = await r.call("mcp__t__raw", {"result": {"content": [{"type": "text", "text": "21 degrees"}, {"type": "text"}],
                                                  "structuredContent": {"temp": 21}}})
    assert [p.text for p in res.content] == ["21 degrees", note]
