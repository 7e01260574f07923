"""An Anthropic answer its streaming classifiers refused (``stop_reason: "refusal"``), through a
real session against the loopback server: the refusal's ``stop_details`` are kept with the
answer's result and shown to a client (the view's item, the task's end)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.views import session_view

from .servers import anthropic as an
from .servers.base import Reply
from .test_actor import one_input

REFUSED_TEXT = "Here is how one would begin to"
EXPLANATION = "This request was declined because it could enable cyber harm."
DETAILS = {"type": "refusal", "category": "cyber", "explanation": EXPLANATION}


def refusal(text: str = REFUSED_TEXT, *, details: Any = DETAILS, thinking: list[str] = (),
            calls: list[tuple[str, str, Any]] = ()) -> Reply:
    """An answer the classifiers stopped: ``stop_reason: refusal`` with ``stop_details`` on the
    ``message_delta`` (``details=None``: none sent)."""
    scripted = an.message_stream(text=text, thinking=thinking, calls=calls, stop_reason="refusal")
    delta = [data for name, data in scripted.events if name == "message_delta"][0]["delta"]
    if details is not None:
        delta["stop_details"] = details
    return scripted


@pytest.mark.parametrize("text", [REFUSED_TEXT, ""], ids=["with-text", "without-text"])
async def test_a_refusals_stop_details_are_kept_and_shown(text, server, make, tmp_path):
    # stop_details were not read: the log, the view and the task's end said nothing of why.
    server.push(refusal(text))
    state, evs = await one_input(tmp_path / "data", make("anthropic"), "first question")
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_details == DETAILS
    ended = [e.event for e in evs if e.kind == "task.finished"][0]
    assert (ended.status, ended.reason) == ("completed", f"the provider refused the answer (category cyber): {EXPLANATION}")
    view = session_view(state)
    shown = [v for v in view["items"] if v.get("refused")]
    if text:
        assert [(v["role"], v["status"], v["stopDetails"]) for v in shown] == [("assistant", "refused", DETAILS)]
    else:  # (no item: the task's end says why)
        assert shown == []


async def test_stop_details_are_kept_bounded_and_only_as_text(server, make, tmp_path):
    long = "x" * 5000
    server.push(refusal(details={"type": "refusal", "category": 7, "explanation": long}))
    _state, evs = await one_input(tmp_path / "data", make("anthropic"), "first question")
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_details == {"type": "refusal", "explanation": "x" * 1999 + "\u2026"}
    ended = [e.event for e in evs if e.kind == "task.finished"][0]
    assert ended.reason.startswith("the provider refused the answer: xxx")
