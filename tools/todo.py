"""``todo``: the model replaces the whole list; users read it (main agent only, F-HAR-1)."""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from events import types as t

from runtime.errors import shortened  # (imports nothing: no cycle)

from .base import ToolContext, ToolError, ToolResult, ToolSpec

MAX_TODOS = 200
MAX_TODO_TEXT = 2000
MAX_TODO_ID = 200
ITEM_FIELDS = frozenset({"id", "text", "status"})
STATUSES: tuple[str, ...] = get_args(t.TodoStatus)  # (one source: the event type's)


async def todo(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    extra = set(args) - {"items"}
    if extra or not isinstance(args.get("items"), list):
        raise ToolError("INVALID_ARGUMENT", "todo takes {\"items\": [{id, text, status}]} and nothing else")
    if len(args["items"]) > MAX_TODOS:
        raise ToolError("INVALID_ARGUMENT", f"at most {MAX_TODOS} todo items, got {len(args['items'])}")
    # (a status sent as null is the status left out: pending)
    raw_items = [{k: v for k, v in raw.items() if not (k == "status" and v is None)} if isinstance(raw, dict) else raw
                 for raw in args["items"]]
    for i, raw in enumerate(raw_items):
        extra = set(raw) - ITEM_FIELDS if isinstance(raw, dict) else set()
        if extra:  # (a misspelt "state" was dropped in silence: the item stayed pending)
            raise ToolError("INVALID_ARGUMENT",
                            f"todo items[{i}]: unknown field(s) {', '.join(sorted(extra))}; an item is {{id, text, status}}")
        status = raw.get("status") if isinstance(raw, dict) else None
        if isinstance(status, str) and status not in STATUSES:
            raise ToolError("INVALID_ARGUMENT", f"todo items[{i}]: unknown status {shortened(repr(status))}; "
                            f"a status is {', '.join(STATUSES[:-1])} or {STATUSES[-1]}")
    try:
        items = msgspec.convert(raw_items, list[t.TodoItem])
    except msgspec.ValidationError as exc:
        raise ToolError("INVALID_ARGUMENT", f"todo items: {exc}") from None
    for i, it in enumerate(items):
        if not it.id.strip() or len(it.id) > MAX_TODO_ID:
            raise ToolError("INVALID_ARGUMENT", f"todo items[{i}]: id must be 1 to {MAX_TODO_ID} characters, not blank")
        if not it.text.strip() or len(it.text) > MAX_TODO_TEXT:
            raise ToolError("INVALID_ARGUMENT",
                            f"todo {it.id!r}: text must be 1 to {MAX_TODO_TEXT} characters, not blank")
    first: dict[str, int] = {}
    for i, it in enumerate(items):
        if it.id in first:  # (named, with both places: in a list of 200 the model cannot find the pair)
            raise ToolError("INVALID_ARGUMENT", f"todo items[{i}]: id {shortened(repr(it.id))} is used twice "
                            f"(first by items[{first[it.id]}]); item ids must be unique")
        first[it.id] = i
    done = sum(1 for it in items if it.status == "done")
    return ToolResult.text(
        f"todo list updated: {len(items)} item(s), {done} done",
        {"items": msgspec.to_builtins(items)},
        events=[t.TodoUpdated(items=items, call_id=ctx.call_id)],
    )


TODO_TOOL = ToolSpec(
    "todo",
    "Replace the whole todo list of this session. Each item: id, text, status (pending, in_progress, done, cancelled).",
    {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "maxItems": MAX_TODOS,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "minLength": 1, "maxLength": MAX_TODO_ID},
                        "text": {"type": "string", "minLength": 1, "maxLength": MAX_TODO_TEXT},
                        "status": {"enum": list(STATUSES)},
                    },
                    "required": ["id", "text"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    },
    todo,
    main_only=True,
    replay_safe=True,
    read_only=False,
)
