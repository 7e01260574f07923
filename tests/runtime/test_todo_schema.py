"""The ``todo`` tool's schema states the bounds the tool enforces (F-HAR-1): at most MAX_TODOS
items, ids of 1 to MAX_TODO_ID characters, texts of 1 to MAX_TODO_TEXT, no field past id, text and
status. The model read none of them before its call was refused. Each bound is checked at the
limit and one past it, by the schema (jsonschema) and by the tool through the registry: both agree."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tools.base import ToolContext
from tools.registry import builtin_tools
from tools.todo import MAX_TODO_ID, MAX_TODO_TEXT, MAX_TODOS, TODO_TOOL

CTX = ToolContext("p1", "ses_1", "main", "task_1", "call_1", True)


def items(count: int = 1, id_len: int = 1, text_len: int = 1, **extra: str) -> dict:
    return {"items": [{"id": f"{i:0{id_len}d}"[-id_len:] if id_len else "", "text": "t" * text_len, **extra}
                      for i in range(count)]}


CASES = [
    ("count at the limit", items(MAX_TODOS, id_len=3), True),
    ("count one past", items(MAX_TODOS + 1, id_len=3), False),
    ("id at the limit", items(id_len=MAX_TODO_ID), True),
    ("id one past", items(id_len=MAX_TODO_ID + 1), False),
    ("empty id", items(id_len=0), False),
    ("text at the limit", items(text_len=MAX_TODO_TEXT), True),
    ("text one past", items(text_len=MAX_TODO_TEXT + 1), False),
    ("empty text", items(text_len=0), False),
    ("an unknown field", items(state="done"), False),
    ("no items", {"items": []}, True),
]


@pytest.mark.parametrize("args, ok", [(a, ok) for _, a, ok in CASES], ids=[c[0] for c in CASES])
async def test_the_schema_and_the_tool_agree_at_each_bound(args: dict, ok: bool) -> None:
    valid = jsonschema.Draft202012Validator(TODO_TOOL.input_schema).is_valid(args)
    assert valid is ok
    res = await builtin_tools().run("todo", json.dumps(args), CTX)
    assert res.is_error is (not ok), res.content
