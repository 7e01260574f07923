"""Typed errors of the runtime (sessions, actors, providers); codes are stable.

::

    LensError
    ├── SessionNotFound        SESSION_NOT_FOUND (404)
    ├── AgentNotFound          AGENT_NOT_FOUND (404): no agent of that id in the session
    ├── SessionGone            SESSION_DELETED (409)
    ├── SessionQuarantined     SESSION_QUARANTINED (409)
    ├── InputNotQueued         INPUT_NOT_QUEUED (409)
    ├── QuestionNotFound       QUESTION_NOT_FOUND (404); QuestionSettled QUESTION_SETTLED (409)
    ├── AnswerInvalid          ANSWER_INVALID (422)
    ├── JobNotFound            JOB_NOT_FOUND (404); JobNotRunning JOB_FINISHED (409)
    ├── InvalidCommand         INVALID_ARGUMENT (400)
    ├── SettingsInvalid        VALIDATION_FAILED (422): a session setting the merge would break
    ├── ForkPointInvalid       VALIDATION_FAILED (422): a fork's seq that is no event of its source
    ├── RequestIdReserved      VALIDATION_FAILED (422): a requestId of the form seq:<digits>
    ├── ModelUnavailable       PROVIDER_DISABLED / PROVIDER_KEY_REQUIRED / MODEL_UNKNOWN (422)
    ├── SkillUnavailable       SKILL_NOT_FOUND / SKILL_INVALID / NO_WORKSPACE / TOOL_DISABLED /
    │                          PARAM_NOT_ALLOWED (422), SKILL_UNAVAILABLE (503)
    └── ActorUnavailable       SESSION_UNAVAILABLE (503): the actor crashed while serving the call
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import ClassVar

_LONG_QUOTED = (re.compile(r"`([^`]{80})[^`]+`"), re.compile(r"'([^']{80})[^']+'"))
MAX_QUOTED = 80  # characters of a name or value quoted in a message
MAX_REASON = 400  # characters of a decoder's reason kept in a message


def shortened(text: str, limit: int = MAX_QUOTED) -> str:
    """``text`` cut to ``limit`` characters with ``…``, as :func:`short_reason` cuts a name it
    quotes (for a value or a list of names a message shows that is not a decoder's reason)."""
    return text if len(text) <= limit else text[:limit] + "…"


def shortened_json(value: object) -> str:
    """``value`` as JSON (its characters as they are, not escaped), :func:`shortened`: a value
    a message quotes (``command must be a string, got 5``)."""
    return shortened(json.dumps(value, ensure_ascii=False))


def shortened_names(names: Iterable[str]) -> str:
    """``names`` sorted, each quoted, joined with commas, :func:`shortened`: the keys a message
    refuses (``does not take 'a', 'b'``)."""
    return shortened(", ".join(map(repr, sorted(names))))


def short_reason(exc: Exception) -> str:
    """A msgspec error's reason with each name or value it quotes cut to 80 characters (an
    unknown field, a key of its path, an enum value: the client's own text, which a request
    of 60,000 characters had echoed whole), and at most :data:`MAX_REASON` characters."""
    reason = str(exc)
    for pattern in _LONG_QUOTED:
        reason = pattern.sub(lambda m: f"{m.group(0)[0]}{m.group(1)}…{m.group(0)[0]}", reason)
    return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON] + "…"


class LensError(Exception):
    """Base of the runtime's errors. It has no code of its own: each subclass names one (or takes
    it as its first argument), so every error that leaves carries a documented code
    (docs/errors.md; tests/contract/test_error_codes.py checks both ways)."""

    code: ClassVar[str]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SessionNotFound(LensError):
    code = "SESSION_NOT_FOUND"


class AgentNotFound(LensError):
    """A session's view or context route (``agentId``) named an agent the session does not have."""

    code = "AGENT_NOT_FOUND"


class SessionGone(LensError):
    code = "SESSION_DELETED"

    @classmethod
    def of(cls, session_id: str, refused: str = "") -> "SessionGone":
        """The refusal of a deleted session, worded alike on every route; ``refused``: what the
        route adds of what is not done."""
        return cls(f"session {session_id!r} was deleted" + (f"; {refused}" if refused else ""))


class SessionQuarantined(LensError):
    code = "SESSION_QUARANTINED"

    @classmethod
    def of(cls, session_id: str, reason: str) -> "SessionQuarantined":
        """The refusal of a quarantined session: its reason, and the way on (a fork of it)."""
        return cls(f"session {session_id!r} is quarantined: {reason}; to go on, fork it "
                   f"(POST /sessions/{session_id}/fork)")


class InputNotQueued(LensError):
    code = "INPUT_NOT_QUEUED"


class InvalidCommand(LensError):
    code = "INVALID_ARGUMENT"


class SettingsInvalid(LensError):
    """A session configuration change that is well-formed alone but not with what the session
    already holds (a ``toolPolicy`` patch that would take the map past its entry limit)."""

    code = "VALIDATION_FAILED"


class RequestIdReserved(LensError):
    """A client's requestId of the form ``seq:<digits>``, the name of an input recorded without a
    request id (:func:`events.ids.unnamed_input_id`): taken, it would name two inputs."""

    code = "VALIDATION_FAILED"

    @classmethod
    def of(cls, request_id: str) -> RequestIdReserved:
        return cls(f"requestId {request_id!r} has the form seq:<digits>, reserved for the inputs a "
                   f"session records without a request id (a job's report); choose another requestId")


class ForkPointInvalid(LensError):
    """A fork's ``seq`` that is no event of its source session (another session's, one past its
    last, past the log's end) nor one it inherited as a fork (an event of a session in its chain of
    sources, at or before every link's fork point up to that session, which a fork is then made
    from): ``VALIDATION_FAILED`` (422), the answer a ``seq`` below 1 gets from the body's own
    rule, so a client meets one code for one mistake."""

    code = "VALIDATION_FAILED"


class ForkSourceUnreadable(LensError):
    """A fork's source cannot be read up to the fork point (a damaged event there): the code is
    the log's own (``EVENT_CORRUPT``…) and the message names the event's seq."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


class ForkTooDeep(LensError):
    """A fork of a session that is already a fork :data:`MAX_FORK_DEPTH` levels deep."""

    code = "FORK_TOO_DEEP"


# Forks of forks one session may stand at the end of: what a fork's history lineage and the
# changes route follow grows with the chain (the lineage with its square), so it is bounded.
MAX_FORK_DEPTH = 256


class ModelUnavailable(LensError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


class SkillUnavailable(LensError):
    """A ``/skill:<name>`` input names a skill that cannot be loaded, or the tool policy refuses
    the ``skill`` call it stands for."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


class ActorUnavailable(LensError):
    code = "SESSION_UNAVAILABLE"


class QuestionNotFound(LensError):
    code = "QUESTION_NOT_FOUND"


class QuestionSettled(LensError):
    code = "QUESTION_SETTLED"


class AnswerInvalid(LensError):
    code = "ANSWER_INVALID"


class JobNotFound(LensError):
    code = "JOB_NOT_FOUND"


class JobNotRunning(LensError):
    """A stop of a job that already ended (its status says how)."""

    code = "JOB_FINISHED"
