"""The shapes of ids. An id a client names (a project, session, agent, task, request, context
item, question, job…): 1 to 200 characters of ``A–Z a–z 0–9 . _ : -``, one rule for every door
in: the HTTP routes (:func:`runtime.http_parts.check_id`) and the tools that take ids as
arguments. A SHA-256 as this project writes it (an artifact's id, a file's or a config file's digest, a
credential's hash): 64 lowercase hex digits."""

from __future__ import annotations

import re

ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,200}")  # whole strings only: fullmatch (`$` also took "id\n")
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # whole strings only: fullmatch


# An input recorded without a request id of its own (a job's report whose id a client's input took)
# is named ``seq:<its seq>``: the name it is queued, withdrawn, steered and placed by. The form is
# reserved for it: a client's requestId of it is refused (unless a log written before the rule
# holds it as one), so the name never names two inputs.
_UNNAMED_INPUT_RE = re.compile(r"seq:[0-9]+")  # whole strings only: fullmatch


def unnamed_input_id(seq: int) -> str:
    """The name of the input recorded at ``seq`` without a request id."""
    return f"seq:{seq}"


def is_unnamed_input_id(value: str) -> bool:
    """Whether ``value`` has the form :func:`unnamed_input_id` makes (reserved for it)."""
    return _UNNAMED_INPUT_RE.fullmatch(value) is not None


def is_id(value: object) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


def id_rule(what: str) -> str:
    """The message for a malformed id, naming the field as the caller wrote it."""
    return f"{what} must be 1 to 200 characters of ASCII letters, digits, '.', '_', ':' or '-'"
