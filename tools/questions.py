"""``ask_user`` (F-HAR-1): ask the user questions with options; main agent only.

The call waits for the first valid answer (``{kind: answer, optionIds?, text?}`` or
``{kind: skip}``), given through ``POST /sessions/{id}/questions/{questionId}/answer``. A session
that is stopped, aborted or restarted cancels its open questions; the call then ends as
interrupted and the model is told.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import types as t

from runtime.errors import shortened  # (imports nothing: no cycle)

from .base import ToolContext, ToolError, ToolResult, ToolSpec

MAX_QUESTIONS = 5
MAX_OPTIONS = 20
MAX_TEXT = 2000
MAX_LABEL = 500
MAX_ID = 200
QUESTION_FIELDS = frozenset({"id", "text", "options", "allow_text"})
OPTION_FIELDS = frozenset({"id", "label"})


async def ask_user(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if set(args) != {"questions"} or not isinstance(args["questions"], list):
        raise ToolError("INVALID_ARGUMENT", "ask_user takes {\"questions\": [{id, text, options?, allow_text?}]}")
    # (an optional field sent as null is that field left out: no options, text allowed)
    raw = [{k: v for k, v in rq.items() if not (k in ("options", "allow_text") and v is None)}
           if isinstance(rq, dict) else rq for rq in args["questions"]]
    if not 1 <= len(raw) <= MAX_QUESTIONS:
        raise ToolError("INVALID_ARGUMENT", f"ask 1 to {MAX_QUESTIONS} questions at a time, not {len(raw)} questions")
    for i, rq in enumerate(raw):
        if not isinstance(rq, dict):
            continue  # (convert names the wrong type)
        extra = set(rq) - QUESTION_FIELDS
        if extra:
            raise ToolError("INVALID_ARGUMENT", f"questions[{i}]: unknown field(s) {', '.join(sorted(extra))}")
        options = rq.get("options")
        for j, ro in enumerate(options if isinstance(options, list) else []):
            if isinstance(ro, dict) and set(ro) - OPTION_FIELDS:
                raise ToolError("INVALID_ARGUMENT", f"questions[{i}].options[{j}]: unknown field(s) "
                                f"{', '.join(sorted(set(ro) - OPTION_FIELDS))}")
    try:
        questions = msgspec.convert(raw, list[t.Question])
    except msgspec.ValidationError as exc:
        raise ToolError("INVALID_ARGUMENT", f"questions: {exc}") from None
    for q in questions:
        for what, value in [("question id", q.id), *(("option id", o.id) for o in q.options)]:
            if not value.strip() or len(value) > MAX_ID:
                raise ToolError("INVALID_ARGUMENT", f"question {shortened(repr(q.id))}: each {what} must be 1 to "
                                f"{MAX_ID} characters, not blank")
        for o in q.options:
            if not o.label.strip() or len(o.label) > MAX_LABEL:
                raise ToolError("INVALID_ARGUMENT", f"question {shortened(repr(q.id))}: option "
                                f"{shortened(repr(o.id))} needs a label of 1 to {MAX_LABEL} characters, not blank")
    seen: dict[str, str] = {}  # id -> what it first named
    for q in questions:
        for value, what in [(q.id, f"question {shortened(repr(q.id))}"),
                            *((o.id, f"an option of question {shortened(repr(q.id))}") for o in q.options)]:
            if value in seen:  # (named: "ids must be unique" left the model to find the pair)
                raise ToolError("INVALID_ARGUMENT", f"id {shortened(repr(value))} is used twice, by {what} and "
                                f"before by {seen[value]}; question and option ids must be unique")
            seen[value] = what
    for q in questions:
        # each bound named on its own, with what was given (one message for both left a model
        # with 21 options wondering about its text)
        if not q.text.strip():  # (its own words: "it has 3 characters" read as if 3 were too few)
            raise ToolError("INVALID_ARGUMENT", f"question {shortened(repr(q.id))}: text is blank")
        if len(q.text) > MAX_TEXT:
            raise ToolError("INVALID_ARGUMENT", f"question {shortened(repr(q.id))}: text must be 1 to {MAX_TEXT} "
                            f"characters, not blank; it has {len(q.text)} characters")
        if len(q.options) > MAX_OPTIONS:
            raise ToolError("INVALID_ARGUMENT", f"question {shortened(repr(q.id))} has {len(q.options)} options; "
                            f"at most {MAX_OPTIONS} are allowed")
        if not q.options and not q.allow_text:
            raise ToolError("INVALID_ARGUMENT", f"question {shortened(repr(q.id))} has no options and allows no text")
    if ctx.ask is None:
        raise ToolError("ASK_UNAVAILABLE", "this caller cannot ask the user")
    record = await ctx.ask(questions)
    if record.get("status") != "answered":
        raise ToolError("QUESTION_CANCELLED", f"the question was cancelled ({record.get('reason', '')})")
    answer = record["answer"]
    if answer["kind"] == "skip":
        return ToolResult.text("The user skipped the question.", {"question_id": record["question_id"], "answer": answer})
    labels = {o.id: o.label for q in questions for o in q.options}
    parts = []
    if answer.get("optionIds"):
        parts.append("chose " + ", ".join(f"{labels[o]} ({o})" for o in answer["optionIds"]))
    if answer.get("text"):
        parts.append(f"wrote: {answer['text']}")
    return ToolResult.text("The user " + "; ".join(parts) + ".", {"question_id": record["question_id"], "answer": answer})


ASK_USER_TOOL = ToolSpec(
    "ask_user",
    "Ask the user one or more questions (with options and/or free text) and wait for the answer.",
    {
        "type": "object",
        "properties": {"questions": {"type": "array", "minItems": 1, "maxItems": MAX_QUESTIONS, "items": {
            "type": "object",
            "properties": {
                "id": {"type": "string"}, "text": {"type": "string"},
                "options": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"}, "label": {"type": "string"}}, "required": ["id", "label"]}},
                "allow_text": {"type": "boolean"}},
            "required": ["id", "text"]}}},
        "required": ["questions"],
        "additionalProperties": False,
    },
    ask_user,
    main_only=True,
    read_only=False,
)
